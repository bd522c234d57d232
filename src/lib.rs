//! kiln: open-weight LLMs inside the browser on WebGPU, behind the OpenAI inference API.
//!
//! The core is plain Rust over burn tensors on a runtime [`burn::tensor::Device`]; it runs natively (CPU via
//! burn's `flex` backend, or wgpu) for tests and benchmarks, and in the browser on WebGPU. Only [`wasm`] knows
//! about JavaScript.
//!
//! - [`api`]: the OpenAI wire types, their validation, and errors in OpenAI's shape.
//! - [`engine`]: device selection, loading a model from bytes, and the generation loop.
//! - [`model`]: the Llama-family decoder in burn, its config and KV cache.
//! - [`kernels`]: kiln's own compute over quantized weights (CPU; WebGPU), with the reference they are
//!   tested against.
//! - [`loader`]: weights from bytes (safetensors, sharded; GGUF with its quantised types), under Hugging Face
//!   names.
//! - [`tokenizer`]: tokenizers (from `tokenizer.json` or GGUF metadata) and chat templates.
//! - `wasm` (wasm32 only): the JavaScript facade.

pub mod api;
pub mod engine;
pub mod kernels;
pub mod loader;
pub mod model;
pub mod sampling;
pub mod tokenizer;

#[cfg(target_arch = "wasm32")]
pub mod wasm;
