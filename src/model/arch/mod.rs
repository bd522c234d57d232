//! The supported architectures ([`Arch`]) and what each family file decides: how its `config.json` and GGUF
//! metadata resolve into a [`ModelConfig`], its tensor names in both formats, its tensors' shapes, and its
//! decoder layer (a [`Block`]) composed of the shared layers of `model::layers`. The loader and the decoder
//! know no architecture; they ask this enum.
//!
//! | family file   | architectures                         | block                                   |
//! |---------------|---------------------------------------|-----------------------------------------|
//! | [`llama`]     | Llama 2/3, Mistral, Qwen2, Qwen3       | pre-norm attention + gated SiLU MLP      |
//! | [`smollm3`]   | SmolLM3                               | Llama's, with NoPE layers               |
//! | [`phi3`]      | Phi-3, Phi-3.5-mini, Phi-4-mini        | Llama's, fused qkv / gate_up, LongRoPE   |
//! | [`gemma`]     | Gemma 2, Gemma 3                       | four norms, GELU-tanh, local/global     |

pub mod gemma;
pub mod llama;
pub mod phi3;
pub mod smollm3;

use burn::tensor::Tensor;

use super::config::{ConfigError, HfConfig, ModelConfig};
use super::layers::attention::{Attention, Positions};
use super::layers::kv_cache::KvCache;
use super::layers::linear::Linear;
use super::placed::Tensors;
use crate::loader::LoadError;
use crate::model::gguf::Meta;

/// An architecture kiln runs.
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
}

/// `(arch, config.json architectures, model_types, GGUF general.architecture)`.
type Entry = (
    Arch,
    &'static [&'static str],
    &'static [&'static str],
    Option<&'static str>,
);

const SUPPORTED: [Entry; 8] = [
    (Arch::Llama, &["LlamaForCausalLM"], &["llama"], Some("llama")),
    // llama.cpp writes Mistral files as `llama`.
    (Arch::Mistral, &["MistralForCausalLM"], &["mistral"], None),
    (Arch::Qwen2, &["Qwen2ForCausalLM"], &["qwen2"], Some("qwen2")),
    (Arch::Qwen3, &["Qwen3ForCausalLM"], &["qwen3"], Some("qwen3")),
    (
        Arch::SmolLM3,
        &["SmolLM3ForCausalLM"],
        &["smollm3"],
        Some("smollm3"),
    ),
    (Arch::Phi3, &["Phi3ForCausalLM"], &["phi3"], Some("phi3")),
    (Arch::Gemma2, &["Gemma2ForCausalLM"], &["gemma2"], Some("gemma2")),
    (
        Arch::Gemma3,
        &["Gemma3ForCausalLM"],
        &["gemma3_text"],
        Some("gemma3"),
    ),
];

/// The supported architectures, for error messages.
pub fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|(_, hf, m, _)| format!("{} ({})", hf[0], m[0]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The supported GGUF `general.architecture` values, for error messages.
pub fn supported_gguf() -> String {
    SUPPORTED
        .iter()
        .filter_map(|(.., g)| *g)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Hugging Face → llama.cpp names of the model-wide tensors.
const GLOBAL: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

impl Arch {
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
            .find(|(_, hf, m, _)| {
                hf.contains(&name.as_str())
                    || m.contains(&name.as_str())
                    || c.model_type.as_deref().is_some_and(|t| m.contains(&t))
            })
            .map(|(a, ..)| *a)
            .ok_or(ConfigError::Unsupported(name))
    }

    /// The architecture of a GGUF `general.architecture`.
    pub fn of_gguf(name: &str) -> Result<Self, ConfigError> {
        SUPPORTED
            .iter()
            .find(|(.., g)| *g == Some(name))
            .map(|(a, ..)| *a)
            .ok_or_else(|| {
                ConfigError::Unsupported(format!(
                    "GGUF architecture `{name}` (GGUF files: {})",
                    supported_gguf()
                ))
            })
    }

    /// The Hugging Face architecture name GGUF metadata is translated under.
    fn hf_name(self) -> &'static str {
        SUPPORTED
            .iter()
            .find(|(a, ..)| *a == self)
            .map_or("", |(_, hf, ..)| hf[0])
    }

    fn is_gemma(self) -> bool {
        matches!(self, Self::Gemma2 | Self::Gemma3)
    }

    /// Resolves the mirror of a `config.json` (or of translated GGUF metadata) of this architecture.
    pub(crate) fn resolve(self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        match self {
            Self::Llama | Self::Mistral | Self::Qwen2 | Self::Qwen3 => llama::resolve(self, c),
            Self::SmolLM3 => smollm3::resolve(c),
            Self::Phi3 => phi3::resolve(c),
            Self::Gemma2 | Self::Gemma3 => gemma::resolve(self, c),
        }
    }

    /// GGUF metadata (`<arch>.*` keys, read through `m`) as the mirror of a `config.json`: the keys every
    /// family shares, then the family's own.
    pub(crate) fn gguf_config(self, m: &Meta<'_, '_>) -> Result<HfConfig, LoadError> {
        let mut hf = m.common(self.hf_name())?;
        match self {
            Self::Gemma2 | Self::Gemma3 => gemma::gguf_config(self, m, &mut hf)?,
            Self::Phi3 => phi3::gguf_config(m, &mut hf)?,
            Self::SmolLM3 => smollm3::gguf_config(m, &mut hf)?,
            _ => {}
        }
        Ok(hf)
    }

    /// The layer tensors' Hugging Face ↔ llama.cpp names (the part between `layers.{i}.` and `.weight`).
    fn layer_names(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Gemma2 | Self::Gemma3 => &gemma::NAMES,
            Self::Phi3 => &phi3::NAMES,
            _ => &llama::NAMES,
        }
    }

    /// The llama.cpp name of a Hugging Face tensor name.
    pub fn gguf_name(self, hf: &str) -> Option<String> {
        if let Some((_, g)) = GLOBAL.iter().find(|(h, _)| *h == hf) {
            return Some(g.to_string());
        }
        let rest = hf.strip_prefix("model.layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let (part, kind) = rest.rsplit_once('.')?;
        let (_, g) = self.layer_names().iter().find(|(h, _)| *h == part)?;
        Some(format!("blk.{layer}.{g}.{kind}"))
    }

    /// The Hugging Face name of a llama.cpp tensor name (the inverse of [`Arch::gguf_name`]).
    pub fn hf_name_of(self, g: &str) -> Option<String> {
        if let Some((hf, _)) = GLOBAL.iter().find(|(_, n)| *n == g) {
            return Some(hf.to_string());
        }
        let rest = g.strip_prefix("blk.")?;
        let (layer, rest) = rest.split_once('.')?;
        layer.parse::<usize>().ok()?;
        let (part, kind) = rest.rsplit_once('.')?;
        let (hf, _) = self.layer_names().iter().find(|(_, n)| *n == part)?;
        Some(format!("model.layers.{layer}.{hf}.{kind}"))
    }

    /// Whether llama.cpp's converter permuted this architecture's q/k rows for its interleaved rope
    /// (Llama-style files; NeoX-rope families keep Hugging Face order).
    pub fn gguf_permuted(self) -> bool {
        matches!(self, Self::Llama | Self::Mistral | Self::SmolLM3)
    }

    /// What llama.cpp's converter added to every `*norm.weight` (Gemma stores `1 + w`), which loading
    /// subtracts so that both formats hold Hugging Face's values.
    pub fn gguf_norm_shift(self) -> f32 {
        if self.is_gemma() { 1.0 } else { 0.0 }
    }

    /// The tensors of one layer, by name after `model.layers.{i}.`, with the shapes `c` implies.
    pub fn layer_shapes(self, c: &ModelConfig) -> Vec<(&'static str, Vec<usize>)> {
        let (h, hd, i) = (c.hidden_size, c.head_dim, c.intermediate_size);
        let (q, kv) = (c.num_heads * hd, c.num_kv_heads * hd);
        let mut shapes = vec![
            ("self_attn.o_proj.weight", vec![h, q]),
            ("mlp.down_proj.weight", vec![h, i]),
        ];
        match c.fused_qkv {
            true => shapes.push(("self_attn.qkv_proj.weight", vec![q + 2 * kv, h])),
            false => shapes.extend([
                ("self_attn.q_proj.weight", vec![q, h]),
                ("self_attn.k_proj.weight", vec![kv, h]),
                ("self_attn.v_proj.weight", vec![kv, h]),
            ]),
        }
        match c.fused_gate_up {
            true => shapes.push(("mlp.gate_up_proj.weight", vec![2 * i, h])),
            false => shapes.extend([
                ("mlp.gate_proj.weight", vec![i, h]),
                ("mlp.up_proj.weight", vec![i, h]),
            ]),
        }
        if c.qkv_bias {
            shapes.extend([
                ("self_attn.q_proj.bias", vec![q]),
                ("self_attn.k_proj.bias", vec![kv]),
                ("self_attn.v_proj.bias", vec![kv]),
            ]);
        }
        if c.qk_norm {
            shapes.extend([
                ("self_attn.q_norm.weight", vec![hd]),
                ("self_attn.k_norm.weight", vec![hd]),
            ]);
        }
        let norms: &[&'static str] = match self.is_gemma() {
            true => &gemma::NORMS,
            false => &llama::NORMS,
        };
        shapes.extend(norms.iter().map(|n| (*n, vec![h])));
        shapes
    }

    /// Takes layer `i`'s tensors from `ckpt`.
    pub(crate) fn load_block(
        self,
        c: &ModelConfig,
        i: usize,
        ckpt: &mut dyn Tensors,
    ) -> Result<Block, LoadError> {
        match self.is_gemma() {
            true => gemma::Layer::load(c, i, ckpt).map(|l| Block::Gemma(Box::new(l))),
            false => llama::Layer::load(c, i, ckpt).map(|l| Block::Llama(Box::new(l))),
        }
    }

    /// Adjusts the model-wide tensors as the family uses them (Gemma: the final norm's `1 + w`).
    pub(crate) fn final_norm(self, w: Tensor<1>) -> Tensor<1> {
        match self.is_gemma() {
            true => gemma::offset(w),
            false => w,
        }
    }
}

/// The weights of one decoder layer, in its family's shape.
#[derive(Debug, Clone)]
pub enum Block {
    /// Llama, Mistral, Qwen, SmolLM3, Phi-3.
    Llama(Box<llama::Layer>),
    /// Gemma 2 and 3.
    Gemma(Box<gemma::Layer>),
}

impl Block {
    /// Layer `i` of `c` on `x: [b, s, h]` → `[b, s, h]`, appending to `cache`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        c: &ModelConfig,
        i: usize,
        cache: &mut KvCache,
        at: &Positions,
    ) -> Tensor<3> {
        match self {
            Self::Llama(l) => l.forward(x, c, i, cache, at),
            Self::Gemma(l) => l.forward(x, c, i, cache, at),
        }
    }

    /// The attention weights.
    pub fn attention(&self) -> &Attention {
        match self {
            Self::Llama(l) => &l.attn,
            Self::Gemma(l) => &l.attn,
        }
    }

    /// Every projection.
    pub fn linears(&self) -> Vec<&Linear> {
        let (a, m) = match self {
            Self::Llama(l) => (&l.attn, &l.mlp),
            Self::Gemma(l) => (&l.attn, &l.mlp),
        };
        a.linears().into_iter().chain(m.linears()).collect()
    }
}

/// The attention and MLP weights of layer `i` as every family names them (`qkv_proj`/`gate_up_proj` when
/// the config says they are fused; q/k norms when it has them), with the family's norm transform.
pub(crate) fn load_attention_mlp(
    c: &ModelConfig,
    i: usize,
    ckpt: &mut dyn Tensors,
    norm: impl Fn(Tensor<1>) -> Tensor<1>,
) -> Result<(Attention, super::layers::mlp::Mlp), LoadError> {
    use super::layers::attention::Qkv;
    use super::layers::mlp::{GateUp, Mlp};
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
