//! The engine: where tensors live, loading, and generation.
//!
//! - [`device`]: the one place that chooses devices (WebGPU / native wgpu, or the CPU backend).
//! - [`check`]: a numerical self-check that runs the decoder's kernels on a device and compares with the host.
//! - [`model`]: a loaded model (decoder + tokenizer + chat template) from bytes.
//! - [`prompt`]: requests → prompt token ids.
//! - [`generate`]: prefill and decode steps on the device; logits read back once per step.

pub mod check;
pub mod device;
pub mod generate;
pub mod model;
pub mod prompt;

pub use model::Model;

use crate::loader::LoadError;
use crate::model::ForwardError;
use crate::tokenizer::TokenizerError;

/// Loading or running a model failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("reading from the device failed: {0}")]
    Device(String),
}
