//! Gemma 2 and Gemma 3: four RMSNorms per layer in the `x · (1 + w)` form, embeddings scaled by `√hidden`,
//! a GELU-tanh gate, scores scaled by `query_pre_attn_scalar^-½`, and sliding-window (local) layers
//! interleaved with global ones: Gemma 2 alternates (`sliding_window_pattern` 2) and caps attention and
//! final logits (`cap · tanh(x / cap)`); Gemma 3 makes every 6th layer global, normalises q and k per head,
//! and gives its local layers their own rope base (`rope_local_base_freq`, 10 000).
//!
//! A layer: `x += post_attn(attn(pre_attn(x)))`, then `x += post_ffw(mlp(pre_ffw(x)))`.
//!
//! GGUF (llama.cpp's converter): every `*norm.weight` is stored as `1 + w` (undone at load,
//! [`Family::gguf_norm_shift`]); no q/k permutation (NeoX rope); keys `attention.sliding_window`,
//! `attention.sliding_window_pattern` (an interval, or one flag per layer), `rope.freq_base_swa` (Gemma 3's
//! local base, default 10 000 as llama.cpp), `attn_logit_softcapping` / `final_logit_softcapping` (Gemma 2);
//! the query scale is `1/√head_dim`, except for the 27B models (Gemma 2: 46 layers, Gemma 3: 62) where it is `1/√(hidden/heads)`
//! (llama.cpp's rule, which matches their `query_pre_attn_scalar`).
//!
//! Gemma 3's vision part ([`Gemma3Vision`]): the shared SigLIP encoder and a pooling projector.

use std::sync::Arc;

use burn::tensor::Tensor;

use super::{Arch, Family, StepParts};
use crate::loader::LoadError;
use crate::model::config::{Act, ConfigError, HfConfig, ModelConfig, invalid, positive};
use crate::model::gguf::Meta;
use crate::model::input::Attend;
use crate::model::layers::attention::{Attention, Positions};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::layers::mlp::Mlp;
use crate::model::layers::norm::rms_norm;
use crate::model::layers::rope::Rope;
use crate::model::placed::{Tensors, dense_matrix};
use crate::model::vision::{CONDITIONAL_GENERATION, Layout, Project, Projector, VisionConfig, VisionFamily};

/// Hugging Face ↔ llama.cpp names of a layer's tensors.
pub const NAMES: [(&str, &str); 13] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "post_attention_norm"),
    ("pre_feedforward_layernorm", "ffn_norm"),
    ("post_feedforward_layernorm", "post_ffw_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// The layer's norms.
pub const NORMS: [&str; 4] = [
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "pre_feedforward_layernorm.weight",
    "post_feedforward_layernorm.weight",
];

/// The family of Gemma 2 and Gemma 3 (which of them it is).
pub(crate) struct Gemma(pub Arch);

impl Family for Gemma {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        resolve(self.0, c)
    }

    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        gguf_config(self.0, m, hf)
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &NORMS
    }

    fn gguf_norm_shift(&self) -> f32 {
        1.0
    }

    fn load_layer(
        &self,
        c: &ModelConfig,
        i: usize,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn super::Layer>, LoadError> {
        Ok(Arc::new(Layer::load(c, i, ckpt)?))
    }

    fn final_norm(&self, w: Tensor<1>) -> Tensor<1> {
        offset(w)
    }
}

/// Resolves a Gemma 2 or Gemma 3 config.
fn resolve(arch: Arch, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
    let c = &HfConfig {
        head_dim: c.head_dim.or(Some(256)),
        tie_word_embeddings: c.tie_word_embeddings.or(Some(true)),
        ..c.clone()
    };
    let mut config = ModelConfig::base(arch, c, 1e-6)?;
    let gemma3 = arch == Arch::Gemma3;
    config.qk_norm = gemma3;
    let scalar = c.query_pre_attn_scalar.unwrap_or(config.head_dim as f64);
    if scalar.is_nan() || scalar <= 0.0 {
        return Err(invalid(
            "query_pre_attn_scalar",
            format!("{scalar} must be positive"),
        ));
    }
    config.attn_scale = 1.0 / scalar.sqrt();
    config.embed_scale = Some((config.hidden_size as f64).sqrt());
    let act = c
        .hidden_activation
        .as_deref()
        .or(c.hidden_act.as_deref())
        .unwrap_or("gelu_pytorch_tanh");
    config.act = match act {
        "gelu_pytorch_tanh" | "gelu_tanh" => Act::GeluTanh,
        other => {
            return Err(invalid(
                "hidden_activation",
                format!("{other:?} is not supported (gelu_pytorch_tanh)"),
            ));
        }
    };
    let (attn_cap, final_cap) = match gemma3 {
        true => (c.attn_logit_softcapping, c.final_logit_softcapping),
        false => (
            c.attn_logit_softcapping.or(Some(50.0)),
            c.final_logit_softcapping.or(Some(30.0)),
        ),
    };
    for (field, cap) in [
        ("attn_logit_softcapping", attn_cap),
        ("final_logit_softcapping", final_cap),
    ] {
        if cap.is_some_and(|v| v.is_nan() || v <= 0.0) {
            return Err(invalid(field, "must be positive"));
        }
    }
    (config.attn_softcap, config.final_softcap) = (attn_cap, final_cap);
    let every = positive(
        "sliding_window_pattern",
        c.sliding_window_pattern.unwrap_or(if gemma3 { 6 } else { 2 }),
    )?;
    let window = Some(c.sliding_window.unwrap_or(4096));
    config.set_windows(c, window, |i| !(i + 1).is_multiple_of(every))?;
    if gemma3 {
        // Local layers: their own rope (transformers 5: `rope_parameters.sliding_attention`; 4: an unscaled
        // rope of base `rope_local_base_freq`).
        let d = config.head_dim;
        let local = match c
            .rope_parameters
            .as_ref()
            .and_then(|p| p.get("sliding_attention"))
        {
            Some(_) => Rope::resolve(c, "sliding_attention", d, 10_000.0)?,
            None => Rope::plain(c.rope_local_base_freq.unwrap_or(10_000.0), d),
        };
        config.ropes.push(local);
        for kind in &mut config.layers {
            if kind.window.is_some() {
                kind.rope = Some(1);
            }
        }
    }
    Ok(config)
}

/// The Gemma keys of a GGUF file (see the module docs).
fn gguf_config(arch: Arch, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
    let n = hf.num_hidden_layers;
    // llama.cpp: a window of 0 is none (its converter writes a null window as 0).
    hf.sliding_window = m.opt_usize("attention.sliding_window")?.filter(|&w| w > 0);
    if arch == Arch::Gemma2 {
        hf.sliding_window = hf.sliding_window.or(Some(4096));
    }
    match m.opt_bools("attention.sliding_window_pattern")? {
        Some(flags) => {
            if flags.len() != n {
                return Err(m.error(
                    "attention.sliding_window_pattern",
                    format!("{} flags for {n} layers", flags.len()),
                ));
            }
            hf.layer_types = Some(
                flags
                    .iter()
                    .map(|&f| if f { "sliding_attention" } else { "full_attention" }.to_owned())
                    .collect(),
            );
        }
        None => hf.sliding_window_pattern = m.opt_usize("attention.sliding_window_pattern")?,
    }
    if arch == Arch::Gemma3 && hf.sliding_window.is_none() {
        // llama.cpp: a Gemma 3 file without a window has no local layers.
        hf.layer_types = Some(vec!["full_attention".to_owned(); n]);
    }
    hf.rope_local_base_freq = m.opt_f64("rope.freq_base_swa")?;
    hf.attn_logit_softcapping = m.opt_f64("attn_logit_softcapping")?;
    hf.final_logit_softcapping = m.opt_f64("final_logit_softcapping")?;
    let heads = hf.num_attention_heads.max(1);
    let head_dim = hf.head_dim.unwrap_or(hf.hidden_size / heads);
    let big = (arch == Arch::Gemma3 && n == 62) || (arch == Arch::Gemma2 && n == 46);
    let scalar = if big { hf.hidden_size / heads } else { head_dim };
    hf.query_pre_attn_scalar = Some(scalar as f64);
    Ok(())
}

/// A Gemma layer; every norm already holds `1 + w`.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `[h]` each.
    pub pre_attn: Tensor<1>,
    pub post_attn: Tensor<1>,
    pub pre_ffw: Tensor<1>,
    pub post_ffw: Tensor<1>,
    pub attn: Attention,
    pub mlp: Mlp,
}

/// `1 + w`: Gemma's RMSNorm weight as a plain multiplier.
pub(crate) fn offset(w: Tensor<1>) -> Tensor<1> {
    w.add_scalar(1.0)
}

impl Layer {
    pub(crate) fn load(c: &ModelConfig, i: usize, ckpt: &mut dyn Tensors) -> Result<Self, LoadError> {
        let h = c.hidden_size;
        let p = format!("model.layers.{i}");
        let mut norm = |name: &str| ckpt.vector(&format!("{p}.{name}"), h).map(offset);
        let pre_attn = norm(NORMS[0])?;
        let post_attn = norm(NORMS[1])?;
        let pre_ffw = norm(NORMS[2])?;
        let post_ffw = norm(NORMS[3])?;
        let (attn, mlp) = super::load_attention_mlp(c, i, ckpt, offset)?;
        Ok(Self {
            pre_attn,
            post_attn,
            pre_ffw,
            post_ffw,
            attn,
            mlp,
        })
    }
}

impl super::Layer for Layer {
    fn forward(
        &self,
        x: Tensor<3>,
        c: &ModelConfig,
        i: usize,
        cache: &mut KvCache,
        at: &Positions,
    ) -> Tensor<3> {
        let eps = c.rms_norm_eps;
        let a = self
            .attn
            .forward(rms_norm(x.clone(), self.pre_attn.clone(), eps), c, i, cache, at);
        let x = x + rms_norm(a, self.post_attn.clone(), eps);
        let m = self
            .mlp
            .forward(rms_norm(x.clone(), self.pre_ffw.clone(), eps), c.act);
        x + rms_norm(m, self.post_ffw.clone(), eps)
    }

    fn linears(&self) -> Vec<&Linear> {
        super::linears_of(&self.attn, &self.mlp)
    }

    fn step_parts(&self) -> Option<StepParts<'_>> {
        StepParts::of(
            &self.attn,
            &self.mlp,
            (&self.pre_attn, &self.pre_ffw),
            Some((&self.post_attn, &self.post_ffw)),
        )
    }
}

/// Gemma 3's vision part (`Gemma3ForConditionalGeneration`): a SigLIP tower without a head, and a
/// projector that average-pools the `g × g` patch grid to `t × t` tokens (`t² = mm_tokens_per_image`,
/// windows of `k = g / t` patches: token `i·t + j` is the mean of patches `(i·k + a)·g + (j·k + b)`),
/// normalises each by the soft-embedding RMSNorm (`x · (1 + w)`, the tower's eps) and maps it by
/// `mm_input_projection_weight` `[D, h]` applied as `x · W`. The rows stand over the image's
/// `<image_soft_token>`s between `<start_of_image>` and `<end_of_image>`, unscaled, and attend to each
/// other bidirectionally (a sliding layer still bounds how far back a row looks).
pub(crate) struct Gemma3Vision;

impl VisionFamily for Gemma3Vision {
    fn layouts(&self) -> &'static [Layout] {
        &CONDITIONAL_GENERATION
    }

    fn attend(&self) -> Attend {
        Attend::Bidirectional
    }

    fn load_projector(
        &self,
        v: &VisionConfig,
        text: &ModelConfig,
        layout: &Layout,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn Project>, LoadError> {
        let Projector::AvgPool { tokens_per_image } = v.projector else {
            return Err(invalid("model_type", "a Gemma 3 vision part needs the pooling projector").into());
        };
        let (d, p) = (v.hidden_size, layout.projector);
        let side = v.patches_per_side();
        let per_side = tokens_per_image.isqrt();
        Ok(Arc::new(SoftEmbed {
            norm: offset(ckpt.vector(&format!("{p}mm_soft_emb_norm.weight"), d)?),
            eps: v.layer_norm_eps,
            proj: dense_matrix(
                ckpt,
                &format!("{p}mm_input_projection_weight"),
                [d, text.hidden_size],
            )?,
            side,
            window: side / per_side,
        }))
    }
}

/// The pooling, the soft-embedding norm and the projection.
#[derive(Debug, Clone)]
struct SoftEmbed {
    /// `[D]`, as `1 + w`.
    norm: Tensor<1>,
    eps: f64,
    /// `[D, h]`.
    proj: Tensor<2>,
    /// Patches per side, `g`.
    side: usize,
    /// Patches per pooling window's side, `k`.
    window: usize,
}

impl Project for SoftEmbed {
    /// `[b, g², D]` → `[b, t², h]`.
    fn forward(&self, hidden: Tensor<3>) -> Tensor<3> {
        let [b, _, d] = hidden.dims();
        let (k, t) = (self.window, self.side / self.window);
        let pooled = hidden
            .reshape([b, t, k, t, k, d])
            .mean_dim(4)
            .mean_dim(2)
            .reshape([b * t * t, d]);
        let normed = rms_norm(pooled, self.norm.clone(), self.eps);
        let [_, h] = self.proj.dims();
        normed.matmul(self.proj.clone()).reshape([b, t * t, h])
    }
}
