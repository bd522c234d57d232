//! Gemma 4 (text; E2B/E4B's shape): Gemma 3's sandwich layers with per-layer embeddings, layers that
//! share an earlier layer's keys and values, and larger heads in the full-attention layers.
//!
//! A layer `i`: `h = x + post_attn(attn(input(x)))`, `h += post_ffw(mlp(pre_ffw(h)))` with `mlp =
//! down(gelu_tanh(gate) · up)`; then, with its per-layer input `p_i` (`model::per_layer`), `h +=
//! post_norm(proj(gelu_tanh(gate_i(h)) · p_i))`; finally `h · layer_scalar`. Its RMSNorms multiply by
//! plain `w` (Gemma 3's by `1 + w`); v is RMS-normalised per head without a weight; q and k have per-head
//! norms; the attention scale is 1. `layer_types` alternate sliding (`sliding_window`, `head_dim`, rope
//! θ 10⁴ over the whole head) and full attention (`global_head_dim` or `per_layer_config`'s, its own
//! key-value heads where given, "proportional" rope: θ 10⁶ with exponents over the whole head, the first
//! `partial_rotary_factor · d / 2` frequencies rotating and the rest still). The last
//! `num_kv_shared_layers` layers compute only queries and attend to the keys and values of the last
//! earlier layer of their type; with `use_double_wide_mlp` their MLPs are twice as wide. Embeddings are
//! scaled by `√h`, logits softcapped (`final_logit_softcapping`).
//!
//! GGUF (`gemma4`): norms as stored (no `+1`), `attention.sliding_window_pattern` the sliding flags,
//! `key_length` / `key_length_swa` the two head sizes, `feed_forward_length` per layer,
//! `attention.shared_kv_layers`, `rope_freqs.weight` the proportional rope's divisors (1, then 10³⁰ for the
//! frequencies that stay still), `layer_output_scale.weight` the layer scalar. Tensor names in [`NAMES`].

use std::sync::Arc;

use burn::tensor::Tensor;

use super::{Arch, Family, StepMixer, StepParts};
use crate::kernels;
use crate::loader::LoadError;
use crate::model::config::{
    Act, CacheKind, ConfigError, HfConfig, LayerKind, ModelConfig, invalid, positive,
};
use crate::model::gguf::Meta;
use crate::model::layers::attention::{Attention, Positions, Qkv};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::layers::mlp::Mlp;
use crate::model::layers::norm::rms_norm;
use crate::model::layers::rope::{Rope, RopeScaling};
use crate::model::placed::Tensors;

/// Hugging Face ↔ llama.cpp names of a layer's tensors (the layer scalar, which has no `.weight`, in
/// [`SCALAR`]).
pub const NAMES: [(&str, &str); 16] = [
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
    ("per_layer_input_gate", "inp_gate"),
    ("per_layer_projection", "proj"),
    ("post_per_layer_input_norm", "post_norm"),
];

/// The layer scalar: Hugging Face's name after `model.layers.{i}.` ↔ llama.cpp's after `blk.{i}.`.
const SCALAR: (&str, &str) = ("layer_scalar", "layer_output_scale.weight");

/// The layer's norms of the hidden size.
pub const NORMS: [&str; 5] = [
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "pre_feedforward_layernorm.weight",
    "post_feedforward_layernorm.weight",
    "post_per_layer_input_norm.weight",
];

/// The Gemma 4 family.
pub(crate) struct Gemma4;

/// The rope of the full-attention layers (index 0, which a GGUF file's `rope_freqs` sets) and of the
/// sliding ones (1).
const FULL: usize = 0;
const SLIDING: usize = 1;

impl Family for Gemma4 {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        // The ropes are this family's own (`full_rope`, `sliding_rope`): the shared resolution knows no
        // "proportional" type.
        let plain = HfConfig {
            rope_parameters: None,
            rope_scaling: None,
            ..c.clone()
        };
        let mut config = ModelConfig::base(Arch::Gemma4, &plain, 1e-6)?;
        let n = config.num_layers;
        let types: Vec<bool> = match &c.layer_types {
            Some(t) if t.len() == n => t
                .iter()
                .map(|t| match t.as_str() {
                    "sliding_attention" => Ok(true),
                    "full_attention" => Ok(false),
                    other => Err(invalid("layer_types", format!("unknown layer type {other:?}"))),
                })
                .collect::<Result<_, _>>()?,
            Some(t) => {
                return Err(invalid(
                    "layer_types",
                    format!("{} entries for {n} layers", t.len()),
                ));
            }
            // Five sliding layers to one full, the last one full.
            None => (0..n).map(|i| i + 1 != n && (i + 1) % 6 != 0).collect(),
        };
        if c.attention_k_eq_v == Some(true) {
            return Err(invalid(
                "attention_k_eq_v",
                "full-attention layers whose values are their keys (Gemma 4 26B/31B) are not supported yet",
            ));
        }
        let (kv, d) = (config.num_kv_heads, config.head_dim);
        let full = full_dims(c, &types, (kv, d))?;
        config.layer_attn = (0..n).map(|i| full[i].unwrap_or((kv, d))).collect();
        let window = positive("sliding_window", c.sliding_window.unwrap_or(512))?;
        let shared = c.num_kv_shared_layers.unwrap_or(0);
        let first_shared = n
            .checked_sub(shared)
            .ok_or_else(|| invalid("num_kv_shared_layers", format!("{shared} shared layers of {n}")))?;
        for i in 0..n {
            let source = match i >= first_shared {
                false => CacheKind::Kv,
                true => {
                    let from = (0..first_shared)
                        .rev()
                        .find(|&j| types[j] == types[i])
                        .ok_or_else(|| {
                            invalid(
                                "num_kv_shared_layers",
                                format!("layer {i} has no earlier layer of its type to share"),
                            )
                        })?;
                    CacheKind::SharedKv { from }
                }
            };
            config.layers[i] = LayerKind {
                window: types[i].then_some(window),
                rope: Some(if types[i] { SLIDING } else { FULL }),
                cache: source,
            };
        }
        let wide = c.use_double_wide_mlp.unwrap_or(false);
        config.layer_ffn = match &c.ffn_widths {
            Some(w) if w.len() == n => w.clone(),
            Some(w) => {
                return Err(invalid(
                    "feed_forward_length",
                    format!("{} widths for {n} layers", w.len()),
                ));
            }
            None => (0..n)
                .map(|i| config.intermediate_size * if wide && i >= first_shared { 2 } else { 1 })
                .collect(),
        };
        config.ropes = vec![full_rope(c, &config)?, sliding_rope(c, d)?];
        config.qk_norm = true;
        config.v_norm = true;
        config.attn_scale = 1.0;
        config.embed_scale = Some((config.hidden_size as f64).sqrt());
        config.act = Act::GeluTanh;
        config.final_softcap = c.final_logit_softcapping;
        config.tie_word_embeddings = c.tie_word_embeddings.unwrap_or(true);
        config.per_layer_input = match c.hidden_size_per_layer_input.unwrap_or(0) {
            0 => None,
            width => Some((c.vocab_size_per_layer_input.unwrap_or(config.vocab_size), width)),
        };
        Ok(config)
    }

    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        let sliding = m
            .opt_bools("attention.sliding_window_pattern")?
            .ok_or_else(|| m.error("attention.sliding_window_pattern", "is missing"))?;
        hf.layer_types = Some(
            sliding
                .iter()
                .map(|&s| if s { "sliding_attention" } else { "full_attention" }.to_owned())
                .collect(),
        );
        hf.global_head_dim = hf.head_dim;
        let swa_d = m.usize("attention.key_length_swa")?;
        hf.head_dim = Some(swa_d);
        // The keys against the tensors: each layer's q projection has its type's heads.
        let heads = hf.num_attention_heads;
        for (i, &s) in sliding.iter().enumerate() {
            let d = if s {
                swa_d
            } else {
                hf.global_head_dim.unwrap_or(swa_d)
            };
            if let Some(t) = m.tensor(&format!("blk.{i}.attn_q.weight"))
                && t.shape().first() != Some(&(heads * d))
            {
                return Err(m.error(
                    "attention.sliding_window_pattern",
                    format!(
                        "layer {i} has heads of {d}; blk.{i}.attn_q.weight is {:?}",
                        t.shape()
                    ),
                ));
            }
        }
        let shared = m.opt_usize("attention.shared_kv_layers")?.unwrap_or(0);
        // A layer before the sharing ones must hold its keys; a sharing layer may too (files converted
        // from Google's checkpoints do; they are read past, as llama.cpp loads them unused).
        for i in 0..sliding.len().saturating_sub(shared) {
            if m.tensor(&format!("blk.{i}.attn_k.weight")).is_none() {
                return Err(m.error(
                    "attention.shared_kv_layers",
                    format!("{shared} shared layers; layer {i} lacks keys of its own"),
                ));
            }
        }
        if let Some(kv) = m.opt_usizes("attention.head_count_kv")? {
            // Per layer: the full-attention layers' count, where it differs.
            hf.num_key_value_heads = sliding.iter().zip(&kv).find(|(s, _)| **s).map(|(_, &k)| k);
            hf.num_global_key_value_heads = sliding.iter().zip(&kv).find(|(s, _)| !**s).map(|(_, &k)| k);
        }
        let full_theta = m.opt_f64("rope.freq_base")?.unwrap_or(1e6);
        let sliding_theta = m.opt_f64("rope.freq_base_swa")?.unwrap_or(1e4);
        hf.rope_parameters = Some(serde_json::json!({
            "full_attention": {"rope_type": "default", "rope_theta": full_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": sliding_theta},
        }));
        hf.partial_rotary_factor = None;
        hf.num_kv_shared_layers = m.opt_usize("attention.shared_kv_layers")?;
        hf.hidden_size_per_layer_input = m.opt_usize("embedding_length_per_layer_input")?;
        hf.vocab_size_per_layer_input = match m.tensor("per_layer_token_embd.weight") {
            Some(t) => t.dims.get(1).copied(),
            None => None,
        };
        hf.final_logit_softcapping = m.opt_f64("final_logit_softcapping")?;
        Ok(())
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &NORMS
    }

    fn gguf_name(&self, hf: &str) -> Option<String> {
        if let Some(rest) = hf.strip_prefix("model.layers.")
            && let Some((layer, part)) = rest.split_once('.')
            && part == SCALAR.0
        {
            return Some(format!("blk.{layer}.{}", SCALAR.1));
        }
        super::family::gguf_name_of(self, hf)
    }

    fn hf_name_of(&self, g: &str) -> Option<String> {
        if let Some(rest) = g.strip_prefix("blk.")
            && let Some((layer, part)) = rest.split_once('.')
            && layer.parse::<usize>().is_ok()
            && part == SCALAR.1
        {
            return Some(format!("model.layers.{layer}.{}", SCALAR.0));
        }
        super::family::hf_name_from(self, g)
    }

    /// A sharing layer's own keys and values, which a file converted from Google's checkpoint holds
    /// (llama.cpp's converter keeps them; its runtime loads them unused).
    fn gguf_ignored(&self, c: &ModelConfig, g: &str) -> bool {
        g.strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(layer, part)| Some((layer.parse::<usize>().ok()?, part)))
            .is_some_and(|(layer, part)| {
                c.layers
                    .get(layer)
                    .is_some_and(|l| matches!(l.cache, CacheKind::SharedKv { .. }))
                    && [
                        "attn_k.weight",
                        "attn_v.weight",
                        "attn_k_norm.weight",
                        "attn_v_norm.weight",
                    ]
                    .contains(&part)
            })
    }

    fn layer_shapes(&self, c: &ModelConfig, i: usize) -> Vec<(&'static str, Vec<usize>)> {
        let (h, inter) = (c.hidden_size, c.ffn_width(i));
        let (kv, d) = c.attn_dims(i);
        let q = c.num_heads * d;
        let mut shapes: Vec<(&'static str, Vec<usize>)> = NORMS.iter().map(|n| (*n, vec![h])).collect();
        shapes.extend([
            ("layer_scalar", vec![1]),
            ("self_attn.q_proj.weight", vec![q, h]),
            ("self_attn.o_proj.weight", vec![h, q]),
            ("self_attn.q_norm.weight", vec![d]),
            ("mlp.gate_proj.weight", vec![inter, h]),
            ("mlp.up_proj.weight", vec![inter, h]),
            ("mlp.down_proj.weight", vec![h, inter]),
        ]);
        if c.layers[i].cache == CacheKind::Kv {
            shapes.extend([
                ("self_attn.k_proj.weight", vec![kv * d, h]),
                ("self_attn.v_proj.weight", vec![kv * d, h]),
                ("self_attn.k_norm.weight", vec![d]),
            ]);
        }
        if let Some((_, n)) = c.per_layer_input {
            shapes.extend([
                ("per_layer_input_gate.weight", vec![n, h]),
                ("per_layer_projection.weight", vec![h, n]),
            ]);
        }
        shapes
    }

    fn load_layer(
        &self,
        c: &ModelConfig,
        i: usize,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn super::Layer>, LoadError> {
        Ok(Arc::new(Layer::load(c, i, ckpt)?))
    }
}

/// Per layer, the full-attention layers' `(key-value heads, head dim)` (`None` for a sliding layer).
fn full_dims(
    c: &HfConfig,
    sliding: &[bool],
    (kv, d): (usize, usize),
) -> Result<Vec<Option<(usize, usize)>>, ConfigError> {
    let global_d = c.global_head_dim.unwrap_or(512);
    let global_kv = c.num_global_key_value_heads.unwrap_or(kv);
    let overrides = c.per_layer_config.as_ref().and_then(|v| v.as_object());
    sliding
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let o = overrides.and_then(|m| m.get(&i.to_string()));
            let field = |name: &str| o.and_then(|o| o.get(name)).and_then(serde_json::Value::as_u64);
            match (s, o) {
                (true, None) => Ok(None),
                (_, Some(_)) => Ok(Some((
                    positive(
                        "per_layer_config",
                        field("num_key_value_heads").map_or(kv, |k| k as usize),
                    )?,
                    positive("per_layer_config", field("head_dim").map_or(d, |k| k as usize))?,
                ))),
                (false, None) if overrides.is_some() => Ok(Some((kv, d))),
                (false, None) => Ok(Some((global_kv, global_d))),
            }
        })
        .collect()
}

/// The full-attention layers' rope: "proportional" (exponents over the whole head, the frequencies after
/// the first `partial_rotary_factor · d / 2` still), or plain over the whole head when the file's
/// `rope_freqs` will say which stay still.
fn full_rope(c: &HfConfig, config: &ModelConfig) -> Result<Rope, ConfigError> {
    let d = (0..config.num_layers)
        .find(|&i| config.layers[i].rope == Some(FULL))
        .map_or(config.head_dim, |i| config.attn_dims(i).1);
    let f = c.rope_fields("full_attention")?.unwrap_or_default();
    let theta = f.rope_theta.unwrap_or(1e6);
    let factors = match f.rope_type.as_deref() {
        Some("proportional") => {
            let angles = (f.partial_rotary_factor.unwrap_or(1.0) * d as f64 / 2.0).floor() as usize;
            Some((0..d / 2).map(|i| if i < angles { 1.0 } else { 1e30 }).collect())
        }
        None | Some("default") => None,
        Some(other) => {
            return Err(invalid(
                "rope_parameters",
                format!("full-attention rope {other:?}"),
            ));
        }
    };
    Ok(Rope {
        theta,
        scaling: RopeScaling::None,
        rotary_dim: d,
        factors,
    })
}

/// The sliding layers' rope.
fn sliding_rope(c: &HfConfig, d: usize) -> Result<Rope, ConfigError> {
    let f = c.rope_fields("sliding_attention")?.unwrap_or_default();
    Ok(Rope::plain(f.rope_theta.unwrap_or(1e4), d))
}

/// A Gemma 4 layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `[h]` each: input, post-attention, pre-MLP, post-MLP, after the per-layer input.
    norms: [Tensor<1>; 5],
    attn: Attention,
    mlp: Mlp,
    /// `gate: [n, h]`, `proj: [h, n]`, with per-layer embeddings.
    per_layer: Option<(Linear, Linear)>,
    /// `[1]`.
    scalar: Tensor<1>,
    /// Ones `[d]`: v's weightless per-head norm as the fused step's norm kernel takes it.
    v_ones: Tensor<1>,
}

impl Layer {
    fn load(c: &ModelConfig, i: usize, ckpt: &mut dyn Tensors) -> Result<Self, LoadError> {
        let h = c.hidden_size;
        let (kv, d) = c.attn_dims(i);
        let (q, inter) = (c.num_heads * d, c.ffn_width(i));
        let p = format!("model.layers.{i}");
        let take = |ckpt: &mut dyn Tensors, part: &str, shape| {
            Linear::take(ckpt, &format!("{p}.{part}"), shape, false)
        };
        let vector = |ckpt: &mut dyn Tensors, part: &str, n| ckpt.vector(&format!("{p}.{part}"), n);
        let norms = [
            vector(ckpt, NORMS[0], h)?,
            vector(ckpt, NORMS[1], h)?,
            vector(ckpt, NORMS[2], h)?,
            vector(ckpt, NORMS[3], h)?,
            vector(ckpt, NORMS[4], h)?,
        ];
        let q_proj = take(ckpt, "self_attn.q_proj", [q, h])?;
        let q_norm = vector(ckpt, "self_attn.q_norm.weight", d)?;
        let (qkv, qk_norm) = match c.layers[i].cache {
            CacheKind::Kv => (
                Qkv::Split {
                    q: q_proj,
                    k: take(ckpt, "self_attn.k_proj", [kv * d, h])?,
                    v: take(ckpt, "self_attn.v_proj", [kv * d, h])?,
                },
                Tensor::cat(vec![q_norm, vector(ckpt, "self_attn.k_norm.weight", d)?], 0),
            ),
            _ => {
                // A checkpoint may hold a sharing layer's own keys and values (Google's do; transformers
                // drops them on load, llama.cpp loads them unused): read past.
                for (part, shape) in [
                    ("self_attn.k_proj.weight", vec![kv * d, h]),
                    ("self_attn.v_proj.weight", vec![kv * d, h]),
                    ("self_attn.k_norm.weight", vec![d]),
                    ("self_attn.v_norm.weight", vec![d]),
                ] {
                    let name = format!("{p}.{part}");
                    if ckpt.contains(&name) {
                        ckpt.skip(&name, &shape)?;
                    }
                }
                (Qkv::Shared(q_proj), q_norm)
            }
        };
        let attn = Attention {
            qkv,
            o: take(ckpt, "self_attn.o_proj", [h, q])?,
            qk_norm: Some(qk_norm),
        };
        let mlp = Mlp::take(
            ckpt,
            &format!("{p}.mlp"),
            ["gate_proj", "up_proj", "down_proj"],
            (inter, h),
        )?;
        let per_layer = match c.per_layer_input {
            Some((_, n)) => Some((
                take(ckpt, "per_layer_input_gate", [n, h])?,
                take(ckpt, "per_layer_projection", [h, n])?,
            )),
            None => None,
        };
        let v_ones = Tensor::ones([d], &norms[0].device());
        Ok(Self {
            norms,
            attn,
            mlp,
            per_layer,
            scalar: ckpt.flat(&format!("{p}.{}", SCALAR.0), &[1])?,
            v_ones,
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
        let norm = |x: Tensor<3>, k: usize| rms_norm(x, self.norms[k].clone(), eps);
        let a = self.attn.forward(norm(x.clone(), 0), c, i, cache, at);
        let x = x + norm(a, 1);
        let m = self.mlp.forward(norm(x.clone(), 2), c.act);
        let mut x = x + norm(m, 3);
        if let (Some((gate, proj)), Some(inputs)) = (&self.per_layer, &at.per_layer) {
            let [b, s, _, n] = inputs.dims();
            let input = inputs.clone().narrow(2, i, 1).reshape([b, s, n]);
            let gated = kernels::gelu_tanh_mul(gate.forward(x.clone()), input);
            x = x.clone() + norm(proj.forward(gated), 4);
        }
        x * self.scalar.clone().unsqueeze::<3>()
    }

    fn linears(&self) -> Vec<&Linear> {
        let mut all = super::linears_of(&self.attn, &self.mlp);
        if let Some((gate, proj)) = &self.per_layer {
            all.extend([gate, proj]);
        }
        all
    }

    fn step_parts(&self) -> Option<StepParts<'_>> {
        let [input, post_attn, pre_ffw, post_ffw, post_per_layer] = &self.norms;
        let mut parts = StepParts::of(
            &self.attn,
            &self.mlp,
            (input, pre_ffw),
            Some((post_attn, post_ffw)),
        )?;
        if let StepMixer::Attention { v_norm, .. } = &mut parts.mixer {
            *v_norm = Some(&self.v_ones);
        }
        parts.per_layer = self
            .per_layer
            .as_ref()
            .map(|(gate, proj)| (gate, proj, post_per_layer));
        parts.scalar = Some(&self.scalar);
        Some(parts)
    }
}
