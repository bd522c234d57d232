//! The Llama family: Llama 2/3, Mistral, SmolLM2, Qwen2, Qwen3; and the layer that SmolLM3 and Phi-3 share.
//!
//! A layer: `x += o(attn(rmsnorm(x)))`, then `x += down(silu(gate(n)) · up(n))` with `n = rmsnorm(x)`.
//! Qwen2 has q/k/v biases, Qwen3 per-head q/k norms. Mistral v0.1's `sliding_window` applies to every layer;
//! Qwen2's to layers from `max_window_layers` on, when `use_sliding_window`.
//!
//! Tensor names (after `model.layers.{i}.` ↔ after `blk.{i}.`): in [`NAMES`].

use std::sync::Arc;

use burn::tensor::Tensor;

use super::{Arch, Family, StepParts};
use crate::loader::LoadError;
use crate::model::config::{ConfigError, HfConfig, ModelConfig};
use crate::model::layers::attention::{Attention, Positions};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::layers::mlp::Mlp;
use crate::model::placed::Tensors;

/// Hugging Face ↔ llama.cpp names of a layer's tensors.
pub const NAMES: [(&str, &str); 11] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
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
pub const NORMS: [&str; 2] = ["input_layernorm.weight", "post_attention_layernorm.weight"];

/// The family of Llama, Mistral, Qwen2 and Qwen3 (which of them it is).
pub(crate) struct Llama(pub Arch);

impl Family for Llama {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        resolve(self.0, c)
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &NORMS
    }

    /// Llama and Mistral files; Qwen's rope is NeoX-style, its rows unpermuted.
    fn gguf_permuted(&self) -> bool {
        matches!(self.0, Arch::Llama | Arch::Mistral)
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

/// Resolves a Llama, Mistral, Qwen2 or Qwen3 config.
fn resolve(arch: Arch, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
    let mut config = ModelConfig::base(arch, c, 1e-6)?;
    config.qkv_bias |= arch == Arch::Qwen2;
    config.qk_norm = arch == Arch::Qwen3;
    let window = c.sliding_window.filter(|_| {
        c.use_sliding_window
            .unwrap_or(!matches!(arch, Arch::Qwen2 | Arch::Qwen3))
    });
    let from = match arch {
        Arch::Qwen2 | Arch::Qwen3 => c.max_window_layers.unwrap_or(0),
        _ => 0,
    };
    // transformers writes `layer_types` for Qwen from `sliding_window` even when `use_sliding_window` is
    // false; the flag wins.
    if window.is_none() {
        return Ok(config);
    }
    config.set_windows(c, window, |i| i >= from)?;
    Ok(config)
}

/// A pre-norm layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `[h]` each.
    pub attn_norm: Tensor<1>,
    pub mlp_norm: Tensor<1>,
    pub attn: Attention,
    pub mlp: Mlp,
}

impl Layer {
    pub(crate) fn load(c: &ModelConfig, i: usize, ckpt: &mut dyn Tensors) -> Result<Self, LoadError> {
        let h = c.hidden_size;
        let p = format!("model.layers.{i}");
        let attn_norm = ckpt.vector(&format!("{p}.input_layernorm.weight"), h)?;
        let mlp_norm = ckpt.vector(&format!("{p}.post_attention_layernorm.weight"), h)?;
        let (attn, mlp) = super::load_attention_mlp(c, i, ckpt, |w| w)?;
        Ok(Self {
            attn_norm,
            mlp_norm,
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
        super::pre_norm(x, (&self.attn_norm, &self.mlp_norm), c, &self.mlp, |n| {
            self.attn.forward(n, c, i, cache, at)
        })
    }

    fn linears(&self) -> Vec<&Linear> {
        super::linears_of(&self.attn, &self.mlp)
    }

    fn step_parts(&self) -> Option<StepParts<'_>> {
        StepParts::of(&self.attn, &self.mlp, (&self.attn_norm, &self.mlp_norm), None)
    }
}
