//! burn building blocks of the Llama-family decoder. Every function takes tensors on any runtime device.

pub mod norm;

pub use norm::rms_norm;
