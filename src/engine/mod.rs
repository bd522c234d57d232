//! The engine: where tensors live and, in later issues, loading and generation.
//!
//! - [`device`]: the one place that chooses devices (WebGPU / native wgpu, or the CPU backend).
//! - [`check`]: a numerical self-check that runs the decoder's kernels on a device and compares with the host.

pub mod check;
pub mod device;
