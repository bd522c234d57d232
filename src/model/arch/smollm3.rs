//! SmolLM3: the Llama layer ([`super::llama::Layer`]) with rope switched off in some layers (NoPE).
//!
//! `no_rope_layers[i]` is 1 where layer `i` applies rope and 0 where it does not; without the list,
//! transformers derives it from `no_rope_layer_interval` (default 4: layers 3, 7, 11, … have no rope), and
//! llama.cpp hard-codes that interval for `smollm3` files. Tensor names are Llama's ([`super::llama::NAMES`]),
//! and llama.cpp's converter permutes q/k rows as for Llama.

use std::sync::Arc;

use super::{Arch, Family, Layer, llama};
use crate::loader::LoadError;
use crate::model::config::{ConfigError, HfConfig, ModelConfig, invalid, positive};
use crate::model::gguf::Meta;
use crate::model::placed::Tensors;

/// The SmolLM3 family.
pub(crate) struct SmolLM3;

impl Family for SmolLM3 {
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError> {
        resolve(c)
    }

    /// The NoPE interval llama.cpp assumes for `smollm3` files.
    fn gguf_config(&self, _m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        hf.no_rope_layer_interval = Some(4);
        Ok(())
    }

    fn layer_names(&self) -> &'static [(&'static str, &'static str)] {
        &llama::NAMES
    }

    fn norms(&self) -> &'static [&'static str] {
        &llama::NORMS
    }

    fn gguf_permuted(&self) -> bool {
        true
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

/// Resolves a SmolLM3 config.
fn resolve(c: &HfConfig) -> Result<ModelConfig, ConfigError> {
    let mut config = ModelConfig::base(Arch::SmolLM3, c, 1e-6)?;
    let n = config.num_layers;
    let uses_rope: Vec<bool> = match &c.no_rope_layers {
        Some(list) if list.len() != n => {
            return Err(invalid(
                "no_rope_layers",
                format!("{} entries for num_hidden_layers = {n}", list.len()),
            ));
        }
        Some(list) => list.iter().map(|&v| v != 0).collect(),
        None => {
            let every = positive("no_rope_layer_interval", c.no_rope_layer_interval.unwrap_or(4))?;
            (0..n).map(|i| !(i + 1).is_multiple_of(every)).collect()
        }
    };
    for (kind, &rope) in config.layers.iter_mut().zip(&uses_rope) {
        kind.rope = rope.then_some(0);
    }
    // transformers: with `use_sliding_window`, the NoPE layers attend through the window.
    let window = c.sliding_window.filter(|_| c.use_sliding_window.unwrap_or(false));
    if window.is_some() {
        config.set_windows(c, window, |i| !uses_rope[i])?;
    }
    Ok(config)
}
