//! Phi-3, Phi-3.5-mini and Phi-4-mini (`phi3`): the Llama layer ([`super::llama::Layer`]) with one fused
//! `qkv_proj` (rows q, k, v) and one fused `gate_up_proj` (gate rows first), LongRoPE (`longrope`/`su`: short
//! and long per-frequency factors, an attention factor on cos and sin), partial rotary
//! (`partial_rotary_factor`, Phi-4-mini 0.75) and a sliding window on every layer (transformers applies it;
//! llama.cpp ignores it — the two agree within the window).
//!
//! GGUF: `attn_qkv` and `ffn_up` (gate and up fused); the LongRoPE factors as the tensors
//! `rope_factors_long.weight` / `rope_factors_short.weight`, with `phi3.rope.scaling.original_context_length`
//! and `phi3.rope.scaling.attn_factor`; partial rotary as `phi3.rope.dimension_count`. llama.cpp chooses the
//! long factors when its context exceeds the original one; kiln when the request's cache does.

use std::sync::Arc;

use super::{Arch, Family, Layer, llama};
use crate::loader::LoadError;
use crate::model::config::{ConfigError, HfConfig, ModelConfig, RopeFields};
use crate::model::gguf::Meta;
use crate::model::placed::Tensors;

/// Hugging Face ↔ llama.cpp names of a layer's tensors (split q/k/v files exist too).
pub const NAMES: [(&str, &str); 9] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.qkv_proj", "attn_qkv"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("mlp.gate_up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// The LongRoPE factor tensors of a GGUF file.
pub const ROPE_LONG: &str = "rope_factors_long.weight";
pub const ROPE_SHORT: &str = "rope_factors_short.weight";

/// The Phi-3 family.
pub(crate) struct Phi3;

impl Family for Phi3 {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        resolve(c)
    }

    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        gguf_config(m, hf)
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &llama::NORMS
    }

    fn load_layer(
        &self,
        c: &ModelConfig,
        i: usize,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn Layer>, LoadError> {
        Ok(Arc::new(llama::Layer::load(c, i, ckpt)?))
    }
}

/// Resolves a Phi-3 config.
fn resolve(c: &HfConfig) -> Result<ModelConfig, ConfigError> {
    let mut config = ModelConfig::base(Arch::Phi3, c, 1e-5)?;
    config.fused_qkv = c.split_qkv != Some(true);
    config.fused_gate_up = true;
    if c.sliding_window.is_some() {
        config.set_windows(c, c.sliding_window, |_| true)?;
    }
    Ok(config)
}

/// Phi-3's GGUF keys (partial rotary is read for every family): LongRoPE (factors arrive as tensors; placeholders until then), split
/// or fused q/k/v.
fn gguf_config(m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
    // The converter writes a null window as 0.
    hf.sliding_window = hf.sliding_window.filter(|&w| w > 0);
    hf.split_qkv = Some(m.tensor("blk.0.attn_qkv.weight").is_none());
    if let Some(long) = m.tensor(ROPE_LONG) {
        let half = long.shape().first().copied().unwrap_or(0);
        let original = m.opt_usize("rope.scaling.original_context_length")?;
        hf.rope_scaling = Some(RopeFields {
            rope_type: Some("longrope".into()),
            short_factor: Some(vec![1.0; half]),
            long_factor: Some(vec![1.0; half]),
            original_max_position_embeddings: original,
            attention_factor: m.opt_f64("rope.scaling.attn_factor")?,
            ..RopeFields::default()
        });
    }
    Ok(())
}
