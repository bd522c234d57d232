//! kiln's own GPU kernels for quantized weights: `y = x · Wᵀ` and the embedding gather, reading GGML
//! blocks straight from device memory.
//!
//! A [`GpuWeight`] holds a tensor's GGML bytes exactly as in the file (zero-padded to whole `u32` words),
//! so device memory stays the file's size; the kernels dequantise while they compute and never write f32
//! weights to global memory. They are cubecl `#[cube]` kernels launched on burn's wgpu tensors (WebGPU in
//! the browser, Vulkan natively), f32 throughout (no `shader-f16`, no subgroups: SwiftShader has neither).
//!
//! - [`matmul`]: `x: [m, k]` × `W: [n, k]` → `[m, n]`. `m ≤ 8` (decode) takes the GEMV kernel, larger
//!   `m` (prefill) the tiled kernel (both in `matmul.rs`).
//! - [`embedding`]: rows `ids` of a `[n, k]` table → `[len, k]` f32 (`embed.rs`).
//!
//! Element decoding, shared by all three kernels, is in `dequant.rs`.
//!
//! Formats ([`supports`]): F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (those of them
//! that [`GgmlType`] names).

mod dequant;
mod embed;
mod matmul;

pub use embed::embedding;
pub use matmul::matmul;

use burn::backend::Cube;
use burn::tensor::{Device, Tensor};
use burn_cubecl::CubeDevice;
use cubecl::client::Client;
use cubecl::server::Handle;

use crate::loader::GgmlType;

/// Why a weight could not be put on the device.
#[derive(Debug, thiserror::Error)]
pub enum GpuKernelError {
    /// The kernels do not read this storage type (a GGML type id).
    #[error("the GPU kernels do not read GGML type {0} weights")]
    Unsupported(u32),
    /// `k` is not a whole number of blocks, or a dimension is zero.
    #[error(
        "GGML type {type_id}: a row of {k} elements is not a positive whole number of {block}-element blocks"
    )]
    BadRowLength { type_id: u32, k: usize, block: usize },
    /// The byte count does not match `n` rows of `k` elements.
    #[error("GGML type {type_id} [{n}, {k}]: expected {expected} bytes, got {got}")]
    BadByteCount {
        type_id: u32,
        n: usize,
        k: usize,
        expected: usize,
        got: usize,
    },
    /// The device is not one of burn's cubecl (wgpu) devices.
    #[error("the GPU kernels need a wgpu device: {0}")]
    NotCube(String),
}

/// A weight matrix `[n, k]` (or an embedding table: `n` rows of `k`) in GGML blocks on the device.
#[derive(Clone)]
pub struct GpuWeight {
    /// The GGML type id (`enum ggml_type`), the kernels' comptime format.
    fmt: u32,
    n: usize,
    k: usize,
    row_bytes: usize,
    words: usize,
    handle: Handle,
    client: Client,
    device: CubeDevice,
}

impl core::fmt::Debug for GpuWeight {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuWeight")
            .field("type_id", &self.fmt)
            .field("n", &self.n)
            .field("k", &self.k)
            .field("bytes", &(self.words * 4))
            .finish()
    }
}

impl GpuWeight {
    /// The storage type, where [`GgmlType`] names it (always, for a weight from [`upload`]).
    pub fn ty(&self) -> Option<GgmlType> {
        GgmlType::from_id(self.fmt)
    }

    /// The GGML type id (`enum ggml_type`).
    pub fn type_id(&self) -> u32 {
        self.fmt
    }

    /// Rows (output features of a matmul, vocabulary size of an embedding table).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Elements per row (input features, embedding width).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes on the device (the GGML bytes, padded to whole words).
    pub fn device_bytes(&self) -> usize {
        self.words * 4
    }
}

/// Whether the kernels read `ty`.
pub fn supports(ty: GgmlType) -> bool {
    supports_ggml(ty.id())
}

/// Whether the kernels read the GGML type id `type_id`.
pub fn supports_ggml(type_id: u32) -> bool {
    dequant::block_layout(type_id).is_some()
}

/// Uploads `n` rows of `k` elements stored as GGML blocks of `ty` (row bytes = `k / block_elems ·
/// block_bytes`), unchanged but for zero padding to whole `u32` words.
pub fn upload(
    ty: GgmlType,
    bytes: &[u8],
    n: usize,
    k: usize,
    device: &Device,
) -> Result<GpuWeight, GpuKernelError> {
    upload_ggml(ty.id(), bytes, n, k, device)
}

/// [`upload`] for a GGML type id (`enum ggml_type`), also for formats [`GgmlType`] does not name yet.
pub fn upload_ggml(
    type_id: u32,
    bytes: &[u8],
    n: usize,
    k: usize,
    device: &Device,
) -> Result<GpuWeight, GpuKernelError> {
    let fmt = type_id;
    let (block_elems, block_bytes) =
        dequant::block_layout(fmt).ok_or(GpuKernelError::Unsupported(type_id))?;
    if n == 0 || k == 0 || !k.is_multiple_of(block_elems) {
        return Err(GpuKernelError::BadRowLength {
            type_id,
            k,
            block: block_elems,
        });
    }
    let row_bytes = k / block_elems * block_bytes;
    let expected = row_bytes.saturating_mul(n);
    if bytes.len() != expected {
        return Err(GpuKernelError::BadByteCount {
            type_id,
            n,
            k,
            expected,
            got: bytes.len(),
        });
    }
    // A throwaway tensor names the device's compute client.
    let probe = Tensor::<1>::zeros([1], device)
        .try_into_primitive::<Cube>()
        .map_err(|e| GpuKernelError::NotCube(format!("{e:?}")))?;
    let words = bytes.len().div_ceil(4);
    let handle = if bytes.len() == words * 4 {
        probe.client.create_from_slice(bytes)
    } else {
        let mut padded = Vec::with_capacity(words * 4);
        padded.extend_from_slice(bytes);
        padded.resize(words * 4, 0);
        probe.client.create_from_slice(&padded)
    };
    Ok(GpuWeight {
        fmt,
        n,
        k,
        row_bytes,
        words,
        handle,
        client: probe.client,
        device: probe.device,
    })
}
