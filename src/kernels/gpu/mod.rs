//! kiln's own GPU kernels for quantized weights: `y = x · Wᵀ` and the embedding gather, reading GGML
//! blocks straight from device memory.
//!
//! The optional paths (f16 activations and KV cache, subgroup reductions, the GEMV layout) are a device's
//! [`Caps`] (`caps.rs`): a weight holds those it was uploaded under and its GEMVs run by them
//! ([`GpuWeight::with_caps`] hands them others).
//!
//! A [`GpuWeight`] holds a tensor's GGML bytes exactly as in the file (zero-padded to whole `u32` words),
//! so device memory stays the file's size; the kernels dequantise while they compute and never write f32
//! weights to global memory. They are cubecl `#[cube]` kernels launched on burn's wgpu tensors (WebGPU in
//! the browser, Vulkan natively); sums in f32, activations in f32 or (where the device has `shader-f16`)
//! f16.
//!
//! - [`matmul`]: `x: [m, k]` × `W: [n, k]` → `[m, n]`. `m ≤ 8` (decode) takes the GEMV kernel, larger
//!   `m` (prefill) the tiled kernel (both in `matmul.rs`).
//! - [`matmul_many`]: two or three decode GEMVs of the same `x` in one launch (`gemv_multi.rs`): a
//!   layer's q, k, v or gate, up.
//! - [`embedding`]: rows `ids` of a `[n, k]` table → `[len, k]` f32 (`embed.rs`).
//!
//! Element decoding, shared by all three kernels, is in `dequant.rs`.
//!
//! Formats ([`supports`]): every weight type [`GgmlType`] names: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
//!
//! **Binding limits.** One storage buffer binding may hold at most `maxStorageBufferBindingSize` bytes
//! (128 MiB on many WebGPU devices; a 262 144 × 640 Q8_0 embedding is 174 MB). [`upload`] splits a larger
//! tensor by rows into several buffers, whole rows each, every one within the device's limit
//! ([`max_binding_bytes`]) and within 2 GiB (kernel byte offsets are 32-bit). [`matmul`] launches once per
//! part, each writing its rows' columns of `y`; [`embedding`] once per part, each writing the rows whose ids
//! it holds. [`upload_with_limit`] sets a lower limit, so a test can split a small tensor.

pub mod caps;
pub mod decode;
pub mod delta;
mod dequant;
mod embed;
pub mod encoder_attention;
mod gemv;
mod gemv_multi;
mod gemv_split;
mod matmul;
pub mod select;

pub use caps::{Caps, Features, GemvLayout};
pub use embed::embedding;
pub use gemv_multi::matmul_group;
pub use matmul::matmul;

use burn::backend::Cube;
use burn::tensor::{Device, Tensor};
use burn_cubecl::CubeDevice;
use cubecl::bytes::Bytes;
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
    /// The device did not take the uploaded bytes.
    #[error("uploading the weight failed: {0}")]
    Upload(String),
    /// One row is larger than a storage buffer binding may be.
    #[error("GGML type {type_id}: a row of {row_bytes} bytes exceeds the {limit}-byte storage binding limit")]
    RowTooLarge {
        type_id: u32,
        row_bytes: usize,
        limit: u64,
    },
    /// The device is not one of burn's cubecl (wgpu) devices.
    #[error("the GPU kernels need a wgpu device: {0}")]
    NotCube(String),
}

/// A weight matrix `[n, k]` (or an embedding table: `n` rows of `k`) in GGML blocks on the device.
///
/// The rows are held in one or more storage buffers ([`parts`](Self::parts)), whole rows each, none larger
/// than the device's `maxStorageBufferBindingSize` (see [`max_binding_bytes`]); the kernels run once per
/// part and write its rows' output columns.
#[derive(Clone)]
pub struct GpuWeight {
    /// The GGML type id (`enum ggml_type`), the kernels' comptime format.
    fmt: u32,
    n: usize,
    k: usize,
    row_bytes: usize,
    parts: Vec<Part>,
    client: Client,
    device: CubeDevice,
    /// How its GEMVs run: the device's caps at upload, unless [`GpuWeight::with_caps`] chose others.
    caps: Caps,
}

/// Rows `row0 .. row0 + rows` of a [`GpuWeight`], in a buffer of their own: row `row0 + r` starts at byte
/// `r · row_bytes`, the last word zero-padded.
#[derive(Clone)]
pub(crate) struct Part {
    pub(crate) row0: usize,
    pub(crate) rows: usize,
    pub(crate) words: usize,
    pub(crate) handle: Handle,
}

impl core::fmt::Debug for GpuWeight {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuWeight")
            .field("type_id", &self.fmt)
            .field("n", &self.n)
            .field("k", &self.k)
            .field("bytes", &self.device_bytes())
            .field("parts", &self.parts.len())
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

    /// Bytes on the device (the GGML bytes, each part padded to whole words).
    pub fn device_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.words * 4).sum()
    }

    /// How many storage buffers hold the rows (1 unless the tensor exceeds the binding limit).
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The caps its GEMVs run by.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The same device buffers with GEMVs run by `caps` (caps the device has: tests and benchmarks
    /// compare the kernels' paths on one upload).
    pub fn with_caps(&self, caps: Caps) -> GpuWeight {
        GpuWeight { caps, ..self.clone() }
    }
}

/// `x · W_iᵀ` for each of `ws` (`x: [m, k]` → `[m, n_i]` each): one launch where [`matmul_group`]
/// applies (decode rows, every weight in one buffer, two or three of them, the same caps), else one
/// [`matmul`] each.
pub fn matmul_many(x: Tensor<2>, ws: &[&GpuWeight]) -> Vec<Tensor<2>> {
    match matmul_group(&x, ws) {
        Some(ys) => ys,
        None => ws.iter().map(|w| matmul(x.clone(), w)).collect(),
    }
}

/// Byte offsets inside a kernel are 32-bit (`usize` is `u32` in WGSL): no part is larger than this, whatever
/// the device allows.
const ADDRESS_LIMIT: u64 = 1 << 31;

/// Whether the kernels read `ty`.
pub fn supports(ty: GgmlType) -> bool {
    supports_ggml(ty.id())
}

/// Whether the kernels read the GGML type id `type_id`.
pub fn supports_ggml(type_id: u32) -> bool {
    dequant::block_layout(type_id).is_some()
}

/// Words of a weight copied into one write while it uploads (16 MiB).
const UPLOAD_SLICE_WORDS: usize = 4 << 20;

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
    upload_ggml_with_limit(type_id, bytes, n, k, device, u64::MAX)
}

/// [`upload`] with the rows split into buffers of at most `max_binding_bytes` bytes each (and at most the
/// device's own limit): the device limit is what [`upload`] uses; a smaller one here lets a test split a
/// small tensor.
pub fn upload_with_limit(
    ty: GgmlType,
    bytes: &[u8],
    n: usize,
    k: usize,
    device: &Device,
    max_binding_bytes: u64,
) -> Result<GpuWeight, GpuKernelError> {
    upload_ggml_with_limit(ty.id(), bytes, n, k, device, max_binding_bytes)
}

/// [`upload_with_limit`] for a GGML type id.
pub fn upload_ggml_with_limit(
    type_id: u32,
    bytes: &[u8],
    n: usize,
    k: usize,
    device: &Device,
    max_binding_bytes: u64,
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
    let (client, cube_device) = probe(device)?;
    let limit = max_binding_bytes
        .min(client.properties().memory.max_page_size)
        .min(ADDRESS_LIMIT);
    // Whole words: a part of `rows · row_bytes ≤ limit & !3` bytes stays within the limit once padded.
    let rows_per_part = usize::try_from((limit & !3) / row_bytes as u64).unwrap_or(usize::MAX);
    if rows_per_part == 0 {
        return Err(GpuKernelError::RowTooLarge {
            type_id,
            row_bytes,
            limit,
        });
    }
    let mut parts = Vec::new();
    for row0 in (0..n).step_by(rows_per_part) {
        let rows = rows_per_part.min(n - row0);
        let chunk = &bytes[row0 * row_bytes..(row0 + rows) * row_bytes];
        let words = chunk.len().div_ceil(4);
        let handle = client.empty(words * 4);
        // Written a slice at a time into whole words (the last zero padded), each slice's copy freed once
        // the queue has taken it: a load then holds in host memory the tensor's bytes and one slice, not a
        // second copy of the tensor (a model's largest tensor twice over is what bounded the wasm memory a
        // load needs; cubecl's `create_from_slice` would copy three times).
        for at in (0..words).step_by(UPLOAD_SLICE_WORDS) {
            let n_words = UPLOAD_SLICE_WORDS.min(words - at);
            let src = &chunk[(at * 4).min(chunk.len())..((at + n_words) * 4).min(chunk.len())];
            let mut packed = vec![0u32; n_words];
            for (w, b) in packed.iter_mut().zip(src.chunks(4)) {
                let mut word = [0u8; 4];
                word[..b.len()].copy_from_slice(b);
                *w = u32::from_ne_bytes(word);
            }
            let target = handle
                .clone()
                .offset_start((at * 4) as u64)
                .offset_end(((words - at - n_words) * 4) as u64);
            client.write(&target, Bytes::from_elems(packed));
            client
                .flush()
                .map_err(|e| GpuKernelError::Upload(format!("{e:?}")))?;
        }
        parts.push(Part {
            row0,
            rows,
            words,
            handle,
        });
    }
    // cubecl queues writes (each holding a copy of its bytes) until the stream runs: run it now, so that
    // a model's weights are not all held in host memory at once while it loads.
    client
        .flush()
        .map_err(|e| GpuKernelError::Upload(format!("{e:?}")))?;
    Ok(GpuWeight {
        fmt,
        n,
        k,
        row_bytes,
        parts,
        client,
        device: cube_device,
        caps: Caps::of(device),
    })
}

/// The largest storage buffer binding `device` allows, in bytes (`maxStorageBufferBindingSize`, capped
/// by `maxBufferSize`: what cubecl requested from the adapter); `None` for a device that is not wgpu.
pub fn max_binding_bytes(device: &Device) -> Option<u64> {
    probe(device)
        .ok()
        .map(|(client, _)| client.properties().memory.max_page_size)
}

/// The compute client and cubecl device behind `device`, named by a throwaway tensor.
fn probe(device: &Device) -> Result<(Client, CubeDevice), GpuKernelError> {
    let t = Tensor::<1>::zeros([1], device)
        .try_into_primitive::<Cube>()
        .map_err(|e| GpuKernelError::NotCube(format!("{e:?}")))?;
    Ok((t.client, t.device))
}
