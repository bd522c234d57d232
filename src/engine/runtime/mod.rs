//! The engine's device runtime: everything between a planned prompt and the logits it yields.
//!
//! - [`device`]: the one place that chooses devices (WebGPU / native wgpu, or the CPU backend).
//! - [`check`]: a numerical self-check that runs the decoder's kernels on a device and compares with the host.
//! - [`load`]: a GGUF file loaded as its bytes arrive: header checks, then each tensor to the device.
//! - [`staging`]: a model's headers checked against the model and the device before anything is placed.
//! - [`inspect`]: what a model picker needs from a model's headers alone, and whether this device runs it.
//! - [`chunks`]: a prompt as chunks of token ids and media rows, with per-position content keys.
//! - [`runner`]: prefill and decode steps on the device; logits read back once per step.
//! - [`prefix_cache`]: KV states of recent sequences, reused by prompts that start with one (matched by
//!   content, media included).
//! - [`generation`]: one prompt's `n` choices: prefill, steps, sampling, then each token's text and
//!   finish reason (through [`super::protocol::detok`]).
//! - [`context`]: the context a load grants (the model's, the `contextLength` option, the device's room).
//! - [`counters`]: dispatches and bytes read back, for the benchmarks.

pub mod check;
pub mod chunks;
pub mod context;
pub mod counters;
pub mod device;
pub mod generation;
pub mod inspect;
pub mod load;
pub mod prefix_cache;
pub mod runner;
pub mod staging;
