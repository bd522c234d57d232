//! LFM2 / LFM2.5 (Liquid): short-convolution blocks between attention layers.
//!
//! A layer: `x += mixer(rmsnorm(x))` (`operator_norm`), then `x += w2(silu(w1(n)) · w3(n))` with `n =
//! rmsnorm(x)` (`ffn_norm`). The mixer is attention at the indices `layer_types` (or `full_attn_idxs`)
//! names — Llama's, with per-head q/k RMSNorms (`q_layernorm`, `k_layernorm`) before rope and the output
//! projection named `out_proj` — and a short convolution block elsewhere (`model::layers::conv`), whose
//! state is the last `conv_L_cache − 1` inputs. The final norm is `model.embedding_norm` (applied after
//! the layers, despite its name; llama.cpp's `token_embd_norm`). The MLP's width is `intermediate_size`
//! (or `block_ff_dim`) adjusted as the config says: `⌊2i/3⌋`, times `block_ffn_dim_multiplier`, rounded
//! up to `block_multiple_of`; GGUF files store the adjusted width.
//!
//! GGUF (`lfm2`): `attention.head_count_kv` is per layer, 0 for a conv block; `shortconv.l_cache` the
//! taps; the conv filters `[C, 1, w]` are stored squeezed, `[C, w]`. Tensor names in [`NAMES`].

use std::sync::Arc;

use burn::tensor::Tensor;

use super::{Arch, Family, StepMixer, StepParts};
use crate::loader::{LoadError, RawTensor};
use crate::model::config::{CacheKind, ConfigError, HfConfig, LayerKind, ModelConfig, invalid, positive};
use crate::model::gguf::Meta;
use crate::model::layers::attention::{Attention, Positions, Qkv};
use crate::model::layers::conv::{self, ShortConv};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::layers::mlp::Mlp;
use crate::model::layers::rope::Rope;
use crate::model::placed::Tensors;

/// Hugging Face ↔ llama.cpp names of a layer's tensors.
pub const NAMES: [(&str, &str); 14] = [
    ("operator_norm", "attn_norm"),
    ("ffn_norm", "ffn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.out_proj", "attn_output"),
    ("self_attn.q_layernorm", "attn_q_norm"),
    ("self_attn.k_layernorm", "attn_k_norm"),
    ("conv.conv", "shortconv.conv"),
    ("conv.in_proj", "shortconv.in_proj"),
    ("conv.out_proj", "shortconv.out_proj"),
    ("feed_forward.w1", "ffn_gate"),
    ("feed_forward.w3", "ffn_up"),
    ("feed_forward.w2", "ffn_down"),
];

/// The layer's norms.
pub const NORMS: [&str; 2] = ["operator_norm.weight", "ffn_norm.weight"];

/// The conv filters' name after `model.layers.{i}.`.
const FILTERS: &str = "conv.conv.weight";

/// The LFM2 family.
pub(crate) struct Lfm2;

impl Family for Lfm2 {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        let mut c = c.clone();
        c.rms_norm_eps = c.norm_eps.or(c.rms_norm_eps).or(Some(1e-5));
        c.intermediate_size = ffn_width(&c)?;
        let mut config = ModelConfig::base(Arch::Lfm2, &c, 1e-5)?;
        config.ropes = vec![Rope::resolve(
            &c,
            "full_attention",
            config.head_dim,
            c.rope_theta.unwrap_or(1e6),
        )?];
        config.qk_norm = true;
        config.conv_bias = c.conv_bias.unwrap_or(false);
        config.tie_word_embeddings = c.tie_word_embeddings.unwrap_or(true);
        let n = config.num_layers;
        let attention: Vec<bool> = match (&c.layer_types, &c.full_attn_idxs) {
            (Some(types), _) => types
                .iter()
                .map(|t| match t.as_str() {
                    "full_attention" | "sliding_attention" => Ok(true),
                    "conv" => Ok(false),
                    other => Err(invalid("layer_types", format!("unknown layer type {other:?}"))),
                })
                .collect::<Result<_, _>>()?,
            (None, Some(idxs)) => (0..n).map(|i| idxs.contains(&i)).collect(),
            (None, None) => vec![true; n],
        };
        if attention.len() != n {
            return Err(invalid(
                "layer_types",
                format!("{} entries for num_hidden_layers = {n}", attention.len()),
            ));
        }
        let width = positive("conv_L_cache", c.conv_l_cache.unwrap_or(3))?;
        if width < 2 {
            return Err(invalid(
                "conv_L_cache",
                "a causal convolution needs at least 2 taps",
            ));
        }
        let window = c
            .sliding_window
            .filter(|&w| w > 0 && w < config.max_position_embeddings);
        for (kind, &attends) in config.layers.iter_mut().zip(&attention) {
            *kind = match attends {
                true => LayerKind {
                    window,
                    rope: Some(0),
                    cache: CacheKind::Kv,
                },
                false => LayerKind {
                    window: None,
                    rope: None,
                    cache: CacheKind::Conv {
                        channels: config.hidden_size,
                        width,
                    },
                },
            };
        }
        Ok(config)
    }

    /// `shortconv.l_cache`, and which layers attend from the per-layer `attention.head_count_kv`.
    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        let taps = m.usize("shortconv.l_cache")?;
        hf.conv_l_cache = Some(taps);
        // The file stores the adjusted MLP width.
        hf.block_auto_adjust_ff_dim = Some(false);
        if let Some(kv) = m.opt_usizes("attention.head_count_kv")? {
            // The keys against the tensors: a layer attends where the file has its q projection.
            for (i, &k) in kv.iter().enumerate() {
                let conv = m.tensor(&format!("blk.{i}.shortconv.conv.weight"));
                if (k > 0) != m.tensor(&format!("blk.{i}.attn_q.weight")).is_some() {
                    let what = if k > 0 { "attention" } else { "a conv block" };
                    return Err(m.error(
                        "attention.head_count_kv",
                        format!("makes layer {i} {what}; its tensors disagree"),
                    ));
                }
                if let Some(t) = conv
                    && t.shape().last() != Some(&taps)
                {
                    return Err(m.error(
                        "shortconv.l_cache",
                        format!("{taps} taps; blk.{i}.shortconv.conv.weight is {:?}", t.shape()),
                    ));
                }
            }
            hf.layer_types = Some(
                kv.iter()
                    .map(|&k| if k == 0 { "conv" } else { "full_attention" }.to_owned())
                    .collect(),
            );
        }
        Ok(())
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &NORMS
    }

    fn final_norm_names(&self) -> (&'static str, &'static str) {
        ("model.embedding_norm.weight", "token_embd_norm.weight")
    }

    fn gguf_shape(&self, hf: &str, shape: &[usize]) -> Vec<usize> {
        match (hf.ends_with(FILTERS), shape) {
            (true, [c, 1, w]) => vec![*c, *w],
            _ => shape.to_vec(),
        }
    }

    fn gguf_fix<'b>(&self, hf: &str, mut raw: RawTensor<'b>) -> Result<RawTensor<'b>, LoadError> {
        if let (true, &[c, w]) = (hf.ends_with(FILTERS), raw.shape.as_slice()) {
            raw.shape = vec![c, 1, w];
        }
        Ok(raw)
    }

    fn layer_shapes(&self, c: &ModelConfig, i: usize) -> Vec<(&'static str, Vec<usize>)> {
        let (h, inter) = (c.hidden_size, c.intermediate_size);
        let mut shapes = vec![
            ("operator_norm.weight", vec![h]),
            ("ffn_norm.weight", vec![h]),
            ("feed_forward.w1.weight", vec![inter, h]),
            ("feed_forward.w3.weight", vec![inter, h]),
            ("feed_forward.w2.weight", vec![h, inter]),
        ];
        match c.layers[i].cache {
            CacheKind::Conv { width, .. } => {
                shapes.extend([
                    (FILTERS, vec![h, 1, width]),
                    ("conv.in_proj.weight", vec![3 * h, h]),
                    ("conv.out_proj.weight", vec![h, h]),
                ]);
                if c.conv_bias {
                    shapes.extend([
                        ("conv.conv.bias", vec![h]),
                        ("conv.in_proj.bias", vec![3 * h]),
                        ("conv.out_proj.bias", vec![h]),
                    ]);
                }
            }
            _ => {
                let (q, kv, d) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.head_dim);
                shapes.extend([
                    ("self_attn.q_proj.weight", vec![q, h]),
                    ("self_attn.k_proj.weight", vec![kv, h]),
                    ("self_attn.v_proj.weight", vec![kv, h]),
                    ("self_attn.out_proj.weight", vec![h, q]),
                    ("self_attn.q_layernorm.weight", vec![d]),
                    ("self_attn.k_layernorm.weight", vec![d]),
                ]);
            }
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

/// The MLP's width after LFM2's adjustment.
fn ffn_width(c: &HfConfig) -> Result<usize, ConfigError> {
    let mut width = positive("intermediate_size", c.block_ff_dim.unwrap_or(c.intermediate_size))?;
    if c.block_auto_adjust_ff_dim.unwrap_or(true) {
        width = 2 * width / 3;
        let multiple = positive("block_multiple_of", c.block_multiple_of.unwrap_or(256))?;
        if let Some(m) = c.block_ffn_dim_multiplier {
            width = (m * width as f64) as usize;
        }
        width = width.div_ceil(multiple) * multiple;
    }
    positive("intermediate_size", width)
}

/// What mixes positions in a layer.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one per layer")]
enum Mixer {
    Attention(Attention),
    Conv(ShortConv),
}

/// An LFM2 layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `[h]` each.
    op_norm: Tensor<1>,
    ffn_norm: Tensor<1>,
    mixer: Mixer,
    mlp: Mlp,
}

impl Layer {
    fn load(c: &ModelConfig, i: usize, ckpt: &mut dyn Tensors) -> Result<Self, LoadError> {
        let (h, inter, d) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let p = format!("model.layers.{i}");
        let take = |ckpt: &mut dyn Tensors, part: &str, shape| {
            Linear::take(ckpt, &format!("{p}.{part}"), shape, false)
        };
        let mixer = match c.layers[i].cache {
            CacheKind::Conv { width, .. } => {
                let bias = c.conv_bias;
                let with_bias = |ckpt: &mut dyn Tensors, part: &str, shape| {
                    Linear::take(ckpt, &format!("{p}.{part}"), shape, bias)
                };
                Mixer::Conv(ShortConv {
                    in_proj: with_bias(ckpt, "conv.in_proj", [3 * h, h])?,
                    out_proj: with_bias(ckpt, "conv.out_proj", [h, h])?,
                    weight: conv::filters(ckpt, &format!("{p}.{FILTERS}"), h, width)?,
                    bias: match bias {
                        true => Some(ckpt.vector(&format!("{p}.conv.conv.bias"), h)?),
                        false => None,
                    },
                })
            }
            _ => {
                let (q, kv) = (c.num_heads * d, c.num_kv_heads * d);
                let qk_norm = Tensor::cat(
                    vec![
                        ckpt.vector(&format!("{p}.self_attn.q_layernorm.weight"), d)?,
                        ckpt.vector(&format!("{p}.self_attn.k_layernorm.weight"), d)?,
                    ],
                    0,
                );
                Mixer::Attention(Attention {
                    qkv: Qkv::Split {
                        q: take(ckpt, "self_attn.q_proj", [q, h])?,
                        k: take(ckpt, "self_attn.k_proj", [kv, h])?,
                        v: take(ckpt, "self_attn.v_proj", [kv, h])?,
                    },
                    o: take(ckpt, "self_attn.out_proj", [h, q])?,
                    qk_norm: Some(qk_norm),
                })
            }
        };
        let mlp = Mlp::take(
            ckpt,
            &p,
            ["feed_forward.w1", "feed_forward.w3", "feed_forward.w2"],
            (inter, h),
        )?;
        Ok(Self {
            op_norm: ckpt.vector(&format!("{p}.operator_norm.weight"), h)?,
            ffn_norm: ckpt.vector(&format!("{p}.ffn_norm.weight"), h)?,
            mixer,
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
        super::pre_norm(
            x,
            (&self.op_norm, &self.ffn_norm),
            c,
            &self.mlp,
            |n| match &self.mixer {
                Mixer::Attention(attn) => attn.forward(n, c, i, cache, at),
                Mixer::Conv(conv) => conv.forward(n, i, cache),
            },
        )
    }

    fn linears(&self) -> Vec<&Linear> {
        match &self.mixer {
            Mixer::Attention(attn) => super::linears_of(attn, &self.mlp),
            Mixer::Conv(conv) => conv.linears().into_iter().chain(self.mlp.linears()).collect(),
        }
    }

    fn step_parts(&self) -> Option<StepParts<'_>> {
        let norms = (&self.op_norm, &self.ffn_norm);
        match &self.mixer {
            Mixer::Attention(attn) => StepParts::of(attn, &self.mlp, norms, None),
            Mixer::Conv(conv) => StepParts::around(StepMixer::Conv(conv), &self.mlp, norms, None),
        }
    }
}
