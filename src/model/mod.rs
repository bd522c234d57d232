//! The decoder: shared layers (`layers`), one file per family (`arch`), the decoder that composes them
//! (`decoder`, with the fused wgpu decode step in `step`, and Gemma 4's per-layer embeddings in
//! `per_layer`), what a prefill runs (`input`: prompt chunks of
//! ids and embedding rows), the checkpoint tensors it is assembled from (`placed`), and a
//! vision-language model's vision part (`vision`: the encoder and the projector whose rows a prefill
//! takes; `text_part`: a multimodal checkpoint's language model, alone where kiln does not run its
//! towers). Every function takes tensors on any runtime device.

pub mod arch;
pub mod config;
pub mod decoder;
pub mod gguf;
pub mod input;
pub mod layers;
pub mod per_layer;
pub mod placed;
#[cfg(feature = "webgpu")]
mod step;
pub mod text_part;
pub mod vision;

pub use arch::Arch;
pub use config::{CacheKind, ConfigError, ModelConfig, VisionConfig};
pub use decoder::{Decoder, ForwardError, SelectOnDevice};
pub use gguf::GgufWeights;
pub use input::{Attend, Chunk};
pub use layers::kv_cache::KvCache;
pub use layers::linear::{Linear, Matrix};
pub use layers::norm::rms_norm;
pub use placed::{Placed, Placing, Staged, Tensors};
pub use vision::{Vision, VisionError};
