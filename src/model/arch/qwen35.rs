//! Qwen3.5 (text): three Gated DeltaNet layers between each pair of gated full-attention layers.
//!
//! A layer: `x += mixer(rmsnorm(x))` (`input_layernorm`), then `x += down(silu(gate(n)) · up(n))` with `n =
//! rmsnorm(x)` (`post_attention_layernorm`). Its RMSNorms are zero-centred: they multiply by `1 + w`
//! (also the q/k norms and the final norm; loading adds the 1). `layer_types` (else every
//! `full_attention_interval`-th layer) says which mixer:
//! - `full_attention`: Qwen3's attention (q/k RMSNorms per head before rope) with an output gate: the q
//!   projection gives each head's queries then its gate, and `sigmoid(gate)` multiplies the head's output
//!   before `o_proj`; rope on the first `partial_rotary_factor` (0.25) of each head;
//! - `linear_attention`, the Gated DeltaNet: `in_proj_qkv` → a depthwise causal conv of `w` taps + SiLU →
//!   q, k (`Hk` heads of `dk`) and v (`Hv` heads of `dv`); `β = sigmoid(in_proj_b x)`, the log decay `g =
//!   −exp(A_log) · softplus(in_proj_a x + dt_bias)`; the gated delta rule (`kernels::delta`) from the
//!   layer's state; per head `rmsnorm(o) · w · silu(z)` with `z = in_proj_z x` (a plain-`w` norm); then
//!   `out_proj`. Its state: the conv's last `w − 1` inputs and `S` per value head (`model::layers::state`).
//!
//! GGUF (`qwen35`, llama.cpp's converter): `+1` folded into every norm but the DeltaNet's; `A_log` stored
//! as `ssm_a = −exp(A_log)`; `dt_bias` as `ssm_dt.bias`; conv filters squeezed to `[C, w]`; when `Hv ≠
//! Hk` the value heads reordered from grouped to tiled (value head `j` reads key head `j % Hk`), which the
//! kernels follow rather than undo; `attention.recurrent_layers` flags the DeltaNet layers;
//! `nextn_predict_layers` multi-token-prediction blocks after the decoder's (in `block_count`) are skipped,
//! as a checkpoint's `mtp.*` tensors are. Tensor names in [`NAMES`].

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::activation::{sigmoid, silu};

use super::{Arch, DeltaStep, Family, StepMixer, StepParts};
use crate::kernels::delta::gated_delta;
use crate::loader::{LoadError, RawTensor};
use crate::model::config::{CacheKind, ConfigError, HfConfig, LayerKind, ModelConfig, invalid, positive};
use crate::model::gguf::Meta;
use crate::model::layers::attention::{Attention, Positions, Qkv};
use crate::model::layers::conv::{self, causal_conv};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::layers::mlp::Mlp;
use crate::model::layers::norm::rms_norm;
use crate::model::layers::rope::Rope;
use crate::model::layers::state::State;
use crate::model::placed::Tensors;

/// Hugging Face ↔ llama.cpp names of a layer's tensors (`A_log` and `dt_bias`, which have no `.weight`,
/// in [`PARAMS`]).
pub const NAMES: [(&str, &str); 18] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "post_attention_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("linear_attn.in_proj_qkv", "attn_qkv"),
    ("linear_attn.in_proj_z", "attn_gate"),
    ("linear_attn.in_proj_b", "ssm_beta"),
    ("linear_attn.in_proj_a", "ssm_alpha"),
    ("linear_attn.conv1d", "ssm_conv1d"),
    ("linear_attn.norm", "ssm_norm"),
    ("linear_attn.out_proj", "ssm_out"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// Per-head parameters: Hugging Face's name after `model.layers.{i}.` ↔ llama.cpp's after `blk.{i}.`.
const PARAMS: [(&str, &str); 2] = [
    ("linear_attn.A_log", "ssm_a"),
    ("linear_attn.dt_bias", "ssm_dt.bias"),
];

/// The layer's norms.
pub const NORMS: [&str; 2] = ["input_layernorm.weight", "post_attention_layernorm.weight"];

/// The Qwen3.5 family.
pub(crate) struct Qwen35;

/// A DeltaNet layer's sizes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
    width: usize,
}

impl Sizes {
    fn of(c: &ModelConfig, i: usize) -> Option<Self> {
        match c.layers[i].cache {
            CacheKind::Delta {
                channels,
                width,
                heads,
                key_dim,
                value_dim,
            } => Some(Self {
                hk: (channels - heads * value_dim) / (2 * key_dim),
                hv: heads,
                dk: key_dim,
                dv: value_dim,
                width,
            }),
            _ => None,
        }
    }

    fn channels(self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }
}

impl Family for Qwen35 {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        let mut config = ModelConfig::base(Arch::Qwen35, c, 1e-6)?;
        let mut c = c.clone();
        c.partial_rotary_factor = c.partial_rotary_factor.or(Some(0.25));
        config.ropes = vec![Rope::resolve(
            &c,
            "full_attention",
            config.head_dim,
            c.rope_theta.unwrap_or(10_000.0),
        )?];
        config.qk_norm = true;
        config.attn_output_gate = true;
        config.delta_tiled = c.delta_tiled.unwrap_or(false);
        let n = config.num_layers;
        let types: Vec<String> = match &c.layer_types {
            Some(t) => t.clone(),
            None => {
                let every = positive("full_attention_interval", c.full_attention_interval.unwrap_or(4))?;
                (0..n)
                    .map(|i| match (i + 1) % every {
                        0 => "full_attention".to_owned(),
                        _ => "linear_attention".to_owned(),
                    })
                    .collect()
            }
        };
        if types.len() != n {
            return Err(invalid(
                "layer_types",
                format!("{} entries for {n} layers", types.len()),
            ));
        }
        let hk = positive("linear_num_key_heads", c.linear_num_key_heads.unwrap_or(16))?;
        let hv = positive("linear_num_value_heads", c.linear_num_value_heads.unwrap_or(32))?;
        if !hv.is_multiple_of(hk) {
            return Err(invalid(
                "linear_num_value_heads",
                format!("{hk} key heads do not divide {hv} value heads"),
            ));
        }
        let dk = positive("linear_key_head_dim", c.linear_key_head_dim.unwrap_or(128))?;
        let dv = positive("linear_value_head_dim", c.linear_value_head_dim.unwrap_or(128))?;
        let width = positive("linear_conv_kernel_dim", c.linear_conv_kernel_dim.unwrap_or(4))?;
        if width < 2 {
            return Err(invalid(
                "linear_conv_kernel_dim",
                "a causal convolution needs at least 2 taps",
            ));
        }
        for (kind, t) in config.layers.iter_mut().zip(&types) {
            *kind = match t.as_str() {
                "full_attention" => LayerKind {
                    window: None,
                    rope: Some(0),
                    cache: CacheKind::Kv,
                },
                "linear_attention" => LayerKind {
                    window: None,
                    rope: None,
                    cache: CacheKind::Delta {
                        channels: 2 * hk * dk + hv * dv,
                        width,
                        heads: hv,
                        key_dim: dk,
                        value_dim: dv,
                    },
                },
                other => return Err(invalid("layer_types", format!("unknown layer type {other:?}"))),
            };
        }
        Ok(config)
    }

    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        let hv = m.usize("ssm.time_step_rank")?;
        let inner = m.usize("ssm.inner_size")?;
        if hv == 0 || !inner.is_multiple_of(hv) {
            return Err(m.error(
                "ssm.inner_size",
                format!("{inner} is not a multiple of {hv} value heads"),
            ));
        }
        hf.linear_conv_kernel_dim = Some(m.usize("ssm.conv_kernel")?);
        hf.linear_key_head_dim = Some(m.usize("ssm.state_size")?);
        hf.linear_num_key_heads = Some(m.usize("ssm.group_count")?);
        hf.linear_num_value_heads = Some(hv);
        hf.linear_value_head_dim = Some(inner / hv);
        hf.full_attention_interval = m.opt_usize("full_attention_interval")?;
        hf.delta_tiled = Some(true);
        // Multi-token-prediction blocks follow the decoder's (`block_count` counts them); kiln does not
        // run them and skips their tensors (`gguf_ignored`).
        let mtp = m.opt_usize("nextn_predict_layers")?.unwrap_or(0);
        let layers = hf
            .num_hidden_layers
            .checked_sub(mtp)
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                m.error(
                    "nextn_predict_layers",
                    format!("{mtp} of {} blocks", hf.num_hidden_layers),
                )
            })?;
        hf.num_hidden_layers = layers;
        check_gguf(m, hf)?;
        if let Some(flags) = m.opt_bools("attention.recurrent_layers")? {
            hf.layer_types = Some(
                flags
                    .iter()
                    .take(layers)
                    .map(|&r| if r { "linear_attention" } else { "full_attention" }.to_owned())
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

    fn gguf_norm_shift(&self) -> f32 {
        1.0
    }

    /// The DeltaNet's gated norm multiplies by plain `w`: the converter left it alone.
    fn gguf_shifted(&self, g: &str) -> bool {
        g.ends_with("norm.weight") && !g.ends_with("ssm_norm.weight")
    }

    fn final_norm(&self, w: Tensor<1>) -> Tensor<1> {
        w.add_scalar(1.0)
    }

    fn gguf_name(&self, hf: &str) -> Option<String> {
        if let Some(rest) = hf.strip_prefix("model.layers.")
            && let Some((layer, part)) = rest.split_once('.')
            && let Some((_, g)) = PARAMS.iter().find(|(h, _)| *h == part)
        {
            return Some(format!("blk.{layer}.{g}"));
        }
        super::family::gguf_name_of(self, hf)
    }

    fn hf_name_of(&self, g: &str) -> Option<String> {
        if let Some(rest) = g.strip_prefix("blk.")
            && let Some((layer, part)) = rest.split_once('.')
            && layer.parse::<usize>().is_ok()
            && let Some((h, _)) = PARAMS.iter().find(|(_, n)| *n == part)
        {
            return Some(format!("model.layers.{layer}.{h}"));
        }
        super::family::hf_name_from(self, g)
    }

    /// The multi-token-prediction blocks' tensors: every `blk.{i}.*` past the decoder's layers.
    fn gguf_ignored(&self, c: &ModelConfig, g: &str) -> bool {
        g.strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(layer, _)| layer.parse::<usize>().ok())
            .is_some_and(|layer| layer >= c.num_layers)
    }

    fn gguf_shape(&self, hf: &str, shape: &[usize]) -> Vec<usize> {
        match (hf.ends_with("conv1d.weight"), shape) {
            (true, [c, 1, w]) => vec![*c, *w],
            _ => shape.to_vec(),
        }
    }

    fn gguf_fix<'b>(&self, hf: &str, mut raw: RawTensor<'b>) -> Result<RawTensor<'b>, LoadError> {
        if let (true, &[c, w]) = (hf.ends_with("conv1d.weight"), raw.shape.as_slice()) {
            raw.shape = vec![c, 1, w];
        }
        if hf.ends_with("A_log") {
            // ssm_a = −exp(A_log).
            let values = raw.ty.dequantize(&raw.bytes);
            if let Some(bad) = values.iter().find(|&&a| a >= 0.0 || a.is_nan()) {
                return Err(LoadError::Blocks {
                    name: hf.into(),
                    ty: raw.ty.name(),
                    reason: format!("ssm_a holds {bad}; it is −exp(A_log), always negative"),
                });
            }
            let bytes: Vec<u8> = values.iter().flat_map(|a| (-a).ln().to_le_bytes()).collect();
            raw = RawTensor {
                ty: crate::loader::quant::GgmlType::F32,
                shape: raw.shape,
                bytes: std::borrow::Cow::Owned(bytes),
            };
        }
        Ok(raw)
    }

    fn layer_shapes(&self, c: &ModelConfig, i: usize) -> Vec<(&'static str, Vec<usize>)> {
        let (h, inter, d) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let mut shapes = vec![
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
            ("mlp.gate_proj.weight", vec![inter, h]),
            ("mlp.up_proj.weight", vec![inter, h]),
            ("mlp.down_proj.weight", vec![h, inter]),
        ];
        match Sizes::of(c, i) {
            Some(z) => shapes.extend([
                ("linear_attn.in_proj_qkv.weight", vec![z.channels(), h]),
                ("linear_attn.in_proj_z.weight", vec![z.hv * z.dv, h]),
                ("linear_attn.in_proj_b.weight", vec![z.hv, h]),
                ("linear_attn.in_proj_a.weight", vec![z.hv, h]),
                ("linear_attn.conv1d.weight", vec![z.channels(), 1, z.width]),
                ("linear_attn.A_log", vec![z.hv]),
                ("linear_attn.dt_bias", vec![z.hv]),
                ("linear_attn.norm.weight", vec![z.dv]),
                ("linear_attn.out_proj.weight", vec![h, z.hv * z.dv]),
            ]),
            None => {
                let (q, kv) = (c.num_heads * d, c.num_kv_heads * d);
                shapes.extend([
                    ("self_attn.q_proj.weight", vec![2 * q, h]),
                    ("self_attn.k_proj.weight", vec![kv, h]),
                    ("self_attn.v_proj.weight", vec![kv, h]),
                    ("self_attn.o_proj.weight", vec![h, q]),
                    ("self_attn.q_norm.weight", vec![d]),
                    ("self_attn.k_norm.weight", vec![d]),
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

/// The `ssm.*` keys and `attention.recurrent_layers` against the tensors they describe, each mismatch an
/// error naming the key.
fn check_gguf(m: &Meta<'_, '_>, hf: &HfConfig) -> Result<(), LoadError> {
    let (Some(hk), Some(hv), Some(dk), Some(dv), Some(w)) = (
        hf.linear_num_key_heads,
        hf.linear_num_value_heads,
        hf.linear_key_head_dim,
        hf.linear_value_head_dim,
        hf.linear_conv_kernel_dim,
    ) else {
        return Ok(());
    };
    let flags = m.opt_bools("attention.recurrent_layers")?.unwrap_or_default();
    for (i, &recurrent) in flags.iter().enumerate().take(hf.num_hidden_layers) {
        if recurrent != m.tensor(&format!("blk.{i}.ssm_a")).is_some() {
            let what = if recurrent {
                "a DeltaNet layer"
            } else {
                "full attention"
            };
            return Err(m.error(
                "attention.recurrent_layers",
                format!("makes layer {i} {what}; its tensors disagree"),
            ));
        }
        if !recurrent {
            continue;
        }
        let shape = |name: &str| m.tensor(&format!("blk.{i}.{name}")).map(|t| t.shape());
        if let Some(s) = shape("ssm_a")
            && s != [hv]
        {
            return Err(m.error(
                "ssm.time_step_rank",
                format!("{hv} value heads; blk.{i}.ssm_a is {s:?}"),
            ));
        }
        if let Some(s) = shape("ssm_conv1d.weight")
            && s.last() != Some(&w)
        {
            return Err(m.error(
                "ssm.conv_kernel",
                format!("{w} taps; blk.{i}.ssm_conv1d.weight is {s:?}"),
            ));
        }
        let channels = 2 * hk * dk + hv * dv;
        if let Some(s) = shape("attn_qkv.weight")
            && s.first() != Some(&channels)
        {
            return Err(m.error(
                "ssm.inner_size",
                format!(
                    "with ssm.group_count {hk} and ssm.state_size {dk}, q, k and v take {channels} rows; \
                     blk.{i}.attn_qkv.weight is {s:?}"
                ),
            ));
        }
    }
    Ok(())
}

/// The Gated DeltaNet's weights.
#[derive(Debug, Clone)]
struct DeltaNet {
    qkv: Linear,
    z: Linear,
    b: Linear,
    a: Linear,
    /// `[w, C]`.
    conv: Tensor<2>,
    /// `[2·Hv]`: `−exp(A_log)`, then `dt_bias` (one tensor: the fused step's kernel binds it once).
    gates: Tensor<1>,
    /// `[dv]`.
    norm: Tensor<1>,
    out: Linear,
    sizes: Sizes,
}

impl DeltaNet {
    fn forward(&self, x: Tensor<3>, c: &ModelConfig, layer: usize, cache: &mut KvCache) -> Tensor<3> {
        let [b, s, _] = x.dims();
        let Sizes { hk, hv, dk, dv, .. } = self.sizes;
        let [qkv, z, beta, a] = Linear::forward_many([&self.qkv, &self.z, &self.b, &self.a], x);
        let State::Delta { conv, s: state } = cache.take_state(layer) else {
            unreachable!("a DeltaNet layer keeps a delta-rule state")
        };
        let (mixed, conv) = causal_conv(qkv, conv, &self.conv, None);
        let mixed = silu(mixed);
        let q = mixed.clone().narrow(2, 0, hk * dk).reshape([b, s, hk, dk]);
        let k = mixed.clone().narrow(2, hk * dk, hk * dk).reshape([b, s, hk, dk]);
        let v = mixed.narrow(2, 2 * hk * dk, hv * dv).reshape([b, s, hv, dv]);
        let beta = sigmoid(beta);
        let gate = |at: usize| self.gates.clone().narrow(0, at, hv).unsqueeze::<3>();
        let g = softplus(a + gate(hv)) * gate(0);
        let (o, state) = gated_delta((q, k, v), (g, beta), state, c.delta_tiled);
        cache.put_state(layer, State::Delta { conv, s: state });
        let z = z.reshape([b, s, hv, dv]);
        let y = rms_norm(o, self.norm.clone(), c.rms_norm_eps) * silu(z);
        self.out.forward(y.reshape([b, s, hv * dv]))
    }
}

/// `ln(1 + eˣ)`, as `max(x, 0) + ln(1 + e^−|x|)` (no overflow).
fn softplus(x: Tensor<3>) -> Tensor<3> {
    x.clone().clamp_min(0.0) + x.abs().neg().exp().log1p()
}

/// What mixes positions in a layer.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one per layer")]
enum Mixer {
    Attention(Attention),
    Delta(DeltaNet),
}

/// A Qwen3.5 layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `[h]` each, `1 + w`.
    attn_norm: Tensor<1>,
    mlp_norm: Tensor<1>,
    mixer: Mixer,
    mlp: Mlp,
}

impl Layer {
    fn load(c: &ModelConfig, i: usize, ckpt: &mut dyn Tensors) -> Result<Self, LoadError> {
        let h = c.hidden_size;
        let p = format!("model.layers.{i}");
        let plus_one = |w: Tensor<1>| w.add_scalar(1.0);
        let mixer = match Sizes::of(c, i) {
            Some(z) => {
                let take = |ckpt: &mut dyn Tensors, part: &str, shape| {
                    Linear::take(ckpt, &format!("{p}.linear_attn.{part}"), shape, false)
                };
                let net = DeltaNet {
                    qkv: take(ckpt, "in_proj_qkv", [z.channels(), h])?,
                    z: take(ckpt, "in_proj_z", [z.hv * z.dv, h])?,
                    b: take(ckpt, "in_proj_b", [z.hv, h])?,
                    a: take(ckpt, "in_proj_a", [z.hv, h])?,
                    conv: conv::filters(
                        ckpt,
                        &format!("{p}.linear_attn.conv1d.weight"),
                        z.channels(),
                        z.width,
                    )?,
                    gates: Tensor::cat(
                        vec![
                            ckpt.vector(&format!("{p}.linear_attn.A_log"), z.hv)?.exp().neg(),
                            ckpt.vector(&format!("{p}.linear_attn.dt_bias"), z.hv)?,
                        ],
                        0,
                    ),
                    norm: ckpt.vector(&format!("{p}.linear_attn.norm.weight"), z.dv)?,
                    out: take(ckpt, "out_proj", [h, z.hv * z.dv])?,
                    sizes: z,
                };
                Mixer::Delta(net)
            }
            None => {
                let (d, take) = (c.head_dim, |ckpt: &mut dyn Tensors, part: &str, shape| {
                    Linear::take(ckpt, &format!("{p}.self_attn.{part}"), shape, false)
                });
                let (q, kv) = (c.num_heads * d, c.num_kv_heads * d);
                let norm = |ckpt: &mut dyn Tensors, which: &str| {
                    ckpt.vector(&format!("{p}.self_attn.{which}.weight"), d)
                        .map(plus_one)
                };
                Mixer::Attention(Attention {
                    // Twice as tall: each head's queries, then its gate.
                    qkv: Qkv::Split {
                        q: take(ckpt, "q_proj", [2 * q, h])?,
                        k: take(ckpt, "k_proj", [kv, h])?,
                        v: take(ckpt, "v_proj", [kv, h])?,
                    },
                    o: take(ckpt, "o_proj", [h, q])?,
                    qk_norm: Some(Tensor::cat(vec![norm(ckpt, "q_norm")?, norm(ckpt, "k_norm")?], 0)),
                })
            }
        };
        let inter = c.intermediate_size;
        let mlp = Mlp::take(
            ckpt,
            &format!("{p}.mlp"),
            ["gate_proj", "up_proj", "down_proj"],
            (inter, h),
        )?;
        Ok(Self {
            attn_norm: plus_one(ckpt.vector(&format!("{p}.input_layernorm.weight"), h)?),
            mlp_norm: plus_one(ckpt.vector(&format!("{p}.post_attention_layernorm.weight"), h)?),
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
            (&self.attn_norm, &self.mlp_norm),
            c,
            &self.mlp,
            |n| match &self.mixer {
                Mixer::Attention(attn) => attn.forward(n, c, i, cache, at),
                Mixer::Delta(net) => net.forward(n, c, i, cache),
            },
        )
    }

    fn linears(&self) -> Vec<&Linear> {
        match &self.mixer {
            Mixer::Attention(attn) => super::linears_of(attn, &self.mlp),
            Mixer::Delta(net) => [&net.qkv, &net.z, &net.b, &net.a, &net.out]
                .into_iter()
                .chain(self.mlp.linears())
                .collect(),
        }
    }

    fn step_parts(&self) -> Option<StepParts<'_>> {
        let norms = (&self.attn_norm, &self.mlp_norm);
        match &self.mixer {
            Mixer::Attention(attn) => StepParts::of(attn, &self.mlp, norms, None),
            Mixer::Delta(net) => {
                let Sizes { hk, hv, dk, dv, .. } = net.sizes;
                let step = DeltaStep {
                    proj: [&net.qkv, &net.z, &net.b, &net.a],
                    conv: &net.conv,
                    gates: &net.gates,
                    norm: &net.norm,
                    out: &net.out,
                    heads: [hk, hv, dk, dv],
                };
                StepParts::around(StepMixer::Delta(step), &self.mlp, norms, None)
            }
        }
    }
}
