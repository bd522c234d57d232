//! burn building blocks of the Llama-family decoder. Every function takes tensors on any runtime device.

pub mod config;
pub mod llama;
pub mod norm;

pub use config::{ConfigError, ModelConfig};
pub use llama::{Decoder, ForwardError, KvCache};
pub use norm::rms_norm;
