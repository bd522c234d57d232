//! The supported architectures ([`Arch`]) and the table that registers each under its `config.json` and
//! GGUF names with its family: one type per family file implementing [`Family`], whose layers implement
//! [`Layer`] (see `family`). A family decides how its `config.json` and GGUF metadata resolve into a
//! [`ModelConfig`], its tensor names in both formats, its tensors' shapes, and its decoder layers composed
//! of the shared layers of `model::layers`. The loader and the decoder know no architecture; they ask the
//! family. A new family is its file, its entry in [`SUPPORTED`] and its tests.
//!
//! | family file   | architectures                         | layer                                   |
//! |---------------|---------------------------------------|-----------------------------------------|
//! | [`llama`]     | Llama 2/3, Mistral, Qwen2, Qwen3       | pre-norm attention + gated SiLU MLP      |
//! | [`smollm3`]   | SmolLM3                               | Llama's, with NoPE layers               |
//! | [`phi3`]      | Phi-3, Phi-3.5-mini, Phi-4-mini        | Llama's, fused qkv / gate_up, LongRoPE   |
//! | [`gemma`]     | Gemma 2, Gemma 3                       | four norms, GELU-tanh, local/global     |
//! | [`lfm2`]      | LFM2, LFM2.5                           | short-conv blocks between attention      |
//! | [`qwen35`]    | Qwen3.5 (text)                         | Gated DeltaNet + gated attention         |
//! | [`gemma4`]    | Gemma 4 (text: E2B/E4B)                | per-layer embeddings, shared K/V         |
//!
//! A vision-language family adds its vision part (`model::vision::VisionFamily`) to the family of its
//! language model: [`idefics3`] (SmolVLM: SigLIP, pixel shuffle, a Llama LM), [`gemma`]'s
//! `Gemma3Vision` (SigLIP, average pooling, soft-embedding norm) and [`llava`] (CLIP, an inner hidden
//! state, a two-layer MLP).

mod family;
pub mod gemma;
pub mod gemma4;
pub mod idefics3;
pub mod lfm2;
pub mod llama;
pub mod llava;
pub mod phi3;
pub mod qwen35;
pub mod smollm3;

pub(crate) use family::{DeltaStep, Family, Layer, StepMixer, StepParts};

use burn::tensor::Tensor;

use super::config::{ConfigError, HfConfig, ModelConfig};
use super::layers::attention::{Attention, Qkv};
use super::layers::linear::Linear;
use super::layers::mlp::{GateUp, Mlp};
use super::layers::norm::rms_norm;
use super::placed::Tensors;
use crate::loader::LoadError;
use crate::model::gguf::Meta;

/// An architecture kiln runs: a name; what it means is its [`Family`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    SmolLM3,
    Phi3,
    Gemma2,
    Gemma3,
    Lfm2,
    Qwen35,
    Gemma4,
}

/// One registered architecture.
struct Entry {
    arch: Arch,
    /// `config.json` `architectures` values (the first names the architecture in messages).
    hf: &'static [&'static str],
    /// `config.json` `model_type` values.
    types: &'static [&'static str],
    /// GGUF `general.architecture`, where llama.cpp writes one of its own.
    gguf: Option<&'static str>,
    family: &'static dyn Family,
}

const fn entry(
    arch: Arch,
    hf: &'static [&'static str],
    types: &'static [&'static str],
    gguf: Option<&'static str>,
    family: &'static dyn Family,
) -> Entry {
    Entry {
        arch,
        hf,
        types,
        gguf,
        family,
    }
}

/// Every architecture kiln runs.
const SUPPORTED: [Entry; 11] = [
    entry(
        Arch::Llama,
        &["LlamaForCausalLM"],
        &["llama"],
        Some("llama"),
        &llama::Llama(Arch::Llama),
    ),
    // llama.cpp writes Mistral files as `llama`.
    entry(
        Arch::Mistral,
        &["MistralForCausalLM"],
        &["mistral"],
        None,
        &llama::Llama(Arch::Mistral),
    ),
    entry(
        Arch::Qwen2,
        &["Qwen2ForCausalLM"],
        &["qwen2"],
        Some("qwen2"),
        &llama::Llama(Arch::Qwen2),
    ),
    entry(
        Arch::Qwen3,
        &["Qwen3ForCausalLM"],
        &["qwen3"],
        Some("qwen3"),
        &llama::Llama(Arch::Qwen3),
    ),
    entry(
        Arch::SmolLM3,
        &["SmolLM3ForCausalLM"],
        &["smollm3"],
        Some("smollm3"),
        &smollm3::SmolLM3,
    ),
    entry(
        Arch::Phi3,
        &["Phi3ForCausalLM"],
        &["phi3"],
        Some("phi3"),
        &phi3::Phi3,
    ),
    entry(
        Arch::Gemma2,
        &["Gemma2ForCausalLM"],
        &["gemma2"],
        Some("gemma2"),
        &gemma::Gemma(Arch::Gemma2),
    ),
    entry(
        Arch::Gemma3,
        &["Gemma3ForCausalLM"],
        &["gemma3_text"],
        Some("gemma3"),
        &gemma::Gemma(Arch::Gemma3),
    ),
    entry(
        Arch::Lfm2,
        &["Lfm2ForCausalLM"],
        &["lfm2"],
        Some("lfm2"),
        &lfm2::Lfm2,
    ),
    entry(
        Arch::Qwen35,
        &["Qwen3_5ForCausalLM"],
        &["qwen3_5_text", "qwen3_5"],
        Some("qwen35"),
        &qwen35::Qwen35,
    ),
    entry(
        Arch::Gemma4,
        &["Gemma4ForCausalLM"],
        &["gemma4_text"],
        Some("gemma4"),
        &gemma4::Gemma4,
    ),
];

/// The supported architectures, for error messages.
pub fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|e| format!("{} ({})", e.hf[0], e.types[0]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The supported GGUF `general.architecture` values, for error messages.
pub fn supported_gguf() -> String {
    SUPPORTED
        .iter()
        .filter_map(|e| e.gguf)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Arch {
    /// This architecture's entry in [`SUPPORTED`].
    fn registered(self) -> &'static Entry {
        SUPPORTED
            .iter()
            .find(|e| e.arch == self)
            .expect("every architecture is in the table")
    }

    /// The family this architecture belongs to.
    pub(crate) fn family(self) -> &'static dyn Family {
        self.registered().family
    }

    /// The architecture `config.json` names (`architectures[0]`, else `model_type`).
    pub(crate) fn of(c: &HfConfig) -> Result<Self, ConfigError> {
        let name = c
            .architectures
            .first()
            .cloned()
            .or(c.model_type.clone())
            .unwrap_or_default();
        SUPPORTED
            .iter()
            .find(|e| {
                e.hf.contains(&name.as_str())
                    || e.types.contains(&name.as_str())
                    || c.model_type.as_deref().is_some_and(|t| e.types.contains(&t))
            })
            .map(|e| e.arch)
            .ok_or(ConfigError::Unsupported(name))
    }

    /// The architecture of a GGUF `general.architecture`.
    pub fn of_gguf(name: &str) -> Result<Self, ConfigError> {
        SUPPORTED
            .iter()
            .find(|e| e.gguf == Some(name))
            .map(|e| e.arch)
            .ok_or_else(|| {
                ConfigError::Unsupported(format!(
                    "GGUF architecture `{name}` (GGUF files: {})",
                    supported_gguf()
                ))
            })
    }

    /// GGUF metadata (`<arch>.*` keys, read through `m`) as the mirror of a `config.json`: the keys every
    /// family shares under the Hugging Face name of this architecture, then the family's own.
    pub(crate) fn gguf_config(self, m: &Meta<'_, '_>) -> Result<HfConfig, LoadError> {
        let mut hf = m.common(self.registered().hf[0])?;
        self.family().gguf_config(m, &mut hf)?;
        Ok(hf)
    }
}

/// The attention and MLP weights of layer `i` as every family names them (`qkv_proj`/`gate_up_proj` when
/// the config says they are fused; q/k norms when it has them), with the family's norm transform.
pub(crate) fn load_attention_mlp(
    c: &ModelConfig,
    i: usize,
    ckpt: &mut dyn Tensors,
    norm: impl Fn(Tensor<1>) -> Tensor<1>,
) -> Result<(Attention, Mlp), LoadError> {
    let p = format!("model.layers.{i}");
    let (h, hd, inter) = (c.hidden_size, c.head_dim, c.intermediate_size);
    let (q, kv) = (c.num_heads * hd, c.num_kv_heads * hd);
    let qkv = match c.fused_qkv {
        true => Qkv::Fused(Linear::take(
            ckpt,
            &format!("{p}.self_attn.qkv_proj"),
            [q + 2 * kv, h],
            false,
        )?),
        false => Qkv::Split {
            q: Linear::take(ckpt, &format!("{p}.self_attn.q_proj"), [q, h], c.qkv_bias)?,
            k: Linear::take(ckpt, &format!("{p}.self_attn.k_proj"), [kv, h], c.qkv_bias)?,
            v: Linear::take(ckpt, &format!("{p}.self_attn.v_proj"), [kv, h], c.qkv_bias)?,
        },
    };
    let qk_norm = match c.qk_norm {
        true => Some(Tensor::cat(
            vec![
                norm(ckpt.vector(&format!("{p}.self_attn.q_norm.weight"), hd)?),
                norm(ckpt.vector(&format!("{p}.self_attn.k_norm.weight"), hd)?),
            ],
            0,
        )),
        false => None,
    };
    let attn = Attention {
        qkv,
        o: Linear::take(ckpt, &format!("{p}.self_attn.o_proj"), [h, q], false)?,
        qk_norm,
    };
    let gate_up = match c.fused_gate_up {
        true => GateUp::Fused(Linear::take(
            ckpt,
            &format!("{p}.mlp.gate_up_proj"),
            [2 * inter, h],
            false,
        )?),
        false => GateUp::Split {
            gate: Linear::take(ckpt, &format!("{p}.mlp.gate_proj"), [inter, h], false)?,
            up: Linear::take(ckpt, &format!("{p}.mlp.up_proj"), [inter, h], false)?,
        },
    };
    let mlp = Mlp {
        gate_up,
        down: Linear::take(ckpt, &format!("{p}.mlp.down_proj"), [h, inter], false)?,
    };
    Ok((attn, mlp))
}

/// The pre-norm layer around any mixer (Llama's attention, LFM2's convolutions, Qwen3.5's DeltaNet):
/// `x += mixer(rmsnorm(x))`, then `x += mlp(rmsnorm(x))`, with the layer's two norms `[h]`.
pub(crate) fn pre_norm(
    x: Tensor<3>,
    (first, second): (&Tensor<1>, &Tensor<1>),
    c: &ModelConfig,
    mlp: &Mlp,
    mixer: impl FnOnce(Tensor<3>) -> Tensor<3>,
) -> Tensor<3> {
    let eps = c.rms_norm_eps;
    let x = x.clone() + mixer(rms_norm(x, first.clone(), eps));
    x.clone() + mlp.forward(rms_norm(x, second.clone(), eps), c.act)
}

/// Every projection of an attention + MLP layer.
pub(crate) fn linears_of<'a>(attn: &'a Attention, mlp: &'a Mlp) -> Vec<&'a Linear> {
    attn.linears().into_iter().chain(mlp.linears()).collect()
}

impl<'a> StepParts<'a> {
    /// An attention + MLP layer with these norms as the fused step runs it: `None` unless q, k, v (or
    /// a sharing layer's q) and gate, up are separate projections.
    #[cfg_attr(
        not(feature = "webgpu"),
        allow(dead_code, reason = "only the fused wgpu step reads it")
    )]
    pub(crate) fn of(
        attn: &'a Attention,
        mlp: &'a Mlp,
        (pre_attn, pre_mlp): (&'a Tensor<1>, &'a Tensor<1>),
        post: Option<(&'a Tensor<1>, &'a Tensor<1>)>,
    ) -> Option<Self> {
        let mixer = match &attn.qkv {
            Qkv::Split { q, k, v } => StepMixer::Attention {
                attn,
                qkv: [q, k, v],
                v_norm: None,
            },
            Qkv::Shared(q) => StepMixer::Shared { attn, q },
            Qkv::Fused(_) => return None,
        };
        Self::around(mixer, mlp, (pre_attn, pre_mlp), post)
    }

    /// Any mixer and an MLP with these norms: `None` unless gate and up are separate projections.
    #[cfg_attr(
        not(feature = "webgpu"),
        allow(dead_code, reason = "only the fused wgpu step reads it")
    )]
    pub(crate) fn around(
        mixer: StepMixer<'a>,
        mlp: &'a Mlp,
        (pre_attn, pre_mlp): (&'a Tensor<1>, &'a Tensor<1>),
        post: Option<(&'a Tensor<1>, &'a Tensor<1>)>,
    ) -> Option<Self> {
        let GateUp::Split { gate, up } = &mlp.gate_up else {
            return None;
        };
        Some(Self {
            mixer,
            gate_up: [gate, up],
            down: &mlp.down,
            pre_attn,
            pre_mlp,
            post,
            per_layer: None,
            scalar: None,
        })
    }
}
