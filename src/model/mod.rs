//! burn building blocks of the Llama-family decoder. Every function takes tensors on any runtime device.

pub mod config;
pub mod kv_cache;
pub mod linear;
pub mod llama;
pub mod norm;
pub mod placed;

pub use config::{ConfigError, ModelConfig};
pub use kv_cache::KvCache;
pub use linear::{Linear, Matrix};
pub use llama::{Decoder, ForwardError};
pub use norm::rms_norm;
pub use placed::{Placed, Placing, Staged, Tensors};
