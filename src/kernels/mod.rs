//! kiln's own compute over quantized weights: a weight matrix stays in its GGML blocks on the device it
//! runs on, and the matmul (and the embedding gather) dequantise as they read.
//!
//! - [`reference`]: the plain definition (dequantise a row, dot it), what the kernels are tested against.
//! - [`cpu`]: burn's `flex` CPU backend (natively and in wasm32 with simd128): the blocks stay in host
//!   memory, activations are quantized per block and dotted with integer arithmetic.
//! - [`gpu`]: burn's wgpu runtime (WebGPU in the browser): cubecl kernels over the blocks in a `u32`
//!   storage buffer, a GEMV for decode steps and a tiled matmul for prefill, both dequantising in registers
//!   (f16 scales decoded by hand, so no `shader-f16` is needed). 16-bit float weights stay 16-bit there too.
//! - [`caps`]: a device's capabilities, the value its kernels are handed.
//!
//! [`QuantWeight`] is what a model holds: which device it lives on is decided once, at load, by
//! [`QuantWeight::place`]; a device without a kernel for the type gets `None`, and the caller keeps the
//! weight dense instead.
//!
//! Shapes: a weight is `n` rows (outputs) of `k` elements (inputs), row-major in blocks, the layout of a
//! GGUF tensor (and of a Hugging Face `[out, in]` matrix); activations `x` are `[m, k]`, outputs `[m, n]`.

// Without the WebGPU backend the flex device is burn's only one, and the `_` arms for "any other device"
// below match nothing.
#![cfg_attr(not(feature = "webgpu"), allow(unreachable_patterns))]

pub mod caps;
pub mod cpu;
pub mod delta;
#[cfg(feature = "webgpu")]
pub mod gpu;
pub mod mask;
pub mod reference;

use std::sync::Arc;

use burn::backend::flex::FlexTensor;
use burn::backend::{DispatchDevice, Flex};
#[cfg(feature = "webgpu")]
use burn::tensor::Int;
use burn::tensor::{Device, Tensor, TensorData};

use crate::loader::GgmlType;

/// Why a weight could not be placed on its device: the wgpu kernels' upload error (there is none without
/// the WebGPU backend: host memory takes any bytes).
#[cfg(feature = "webgpu")]
pub type PlaceError = gpu::GpuKernelError;
/// Why a weight could not be placed on its device (never, without the WebGPU backend).
#[cfg(not(feature = "webgpu"))]
pub type PlaceError = std::convert::Infallible;

/// A weight matrix kept in its GGML blocks.
#[derive(Debug, Clone)]
pub struct QuantWeight {
    pub ty: GgmlType,
    /// Rows (outputs).
    pub n: usize,
    /// Elements per row (inputs).
    pub k: usize,
    store: Store,
}

#[derive(Debug, Clone)]
enum Store {
    /// Host memory, for the CPU backend: `n` rows of `row_bytes` bytes.
    Host(Arc<[u8]>),
    /// Host memory for a table the model only reads by rows, whatever its device ([`QuantWeight::host`]).
    Rows(Arc<[u8]>),
    /// A storage buffer on the wgpu device.
    #[cfg(feature = "webgpu")]
    Gpu(Box<gpu::GpuWeight>),
}

impl QuantWeight {
    /// Whether [`QuantWeight::place`] keeps a matrix of `ty` taking `bytes` in its blocks on `device`
    /// (else the model holds it dense, in f32): quantized types and 16-bit floats where the device has a
    /// kernel (the CPU's widen f16/bf16 as they multiply: half the memory of f32, and the threaded build
    /// splits their products as it does the quantized ones); on wgpu also f32 matrices too large for one
    /// storage buffer binding (a dense burn tensor is one buffer; a [`gpu::GpuWeight`] splits).
    #[cfg_attr(not(feature = "webgpu"), allow(unused_variables))]
    pub fn keeps(ty: GgmlType, bytes: usize, device: &Device) -> bool {
        match device.as_dispatch() {
            DispatchDevice::Flex(_) => {
                (ty.is_quantized() || matches!(ty, GgmlType::F16 | GgmlType::BF16)) && cpu::supports(ty)
            }
            #[cfg(feature = "webgpu")]
            DispatchDevice::Cube(_) => {
                let too_big = max_binding_bytes(device).is_some_and(|limit| bytes as u64 > limit);
                let kept = ty.is_quantized() || matches!(ty, GgmlType::F16 | GgmlType::BF16) || too_big;
                kept && gpu::supports(ty)
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Places `bytes` (`n` rows of `k` elements of `ty`) on `device`, or `None` when that device has no
    /// kernel for `ty` (or the shape does not split into whole blocks). A device that fails to take the
    /// bytes is an error (never a silent dense fallback).
    pub fn place(
        ty: GgmlType,
        bytes: &[u8],
        n: usize,
        k: usize,
        device: &Device,
    ) -> Result<Option<Self>, PlaceError> {
        let Some(row) = ty.row_bytes(k) else {
            return Ok(None);
        };
        if row.checked_mul(n) != Some(bytes.len()) || !Self::keeps(ty, bytes.len(), device) {
            return Ok(None);
        }
        let store = match device.as_dispatch() {
            DispatchDevice::Flex(_) => Store::Host(Arc::from(bytes)),
            #[cfg(feature = "webgpu")]
            _ => Store::Gpu(Box::new(gpu::upload(ty, bytes, n, k, device)?)),
            #[cfg(not(feature = "webgpu"))]
            #[allow(
                unreachable_patterns,
                reason = "the flex device is the only one without WebGPU"
            )]
            _ => return Ok(None),
        };
        Ok(Some(Self { ty, n, k, store }))
    }

    /// Keeps `bytes` (`n` rows of `k` elements of `ty`) in host memory whatever the model's device: a table
    /// read a few rows at a time (Gemma 4's per-layer embeddings, as large as the rest of the model), whose
    /// rows [`QuantWeight::rows`] dequantises on the host and uploads. Such a matrix is never multiplied.
    /// `None` when the shape does not split into whole blocks of `ty`.
    pub fn host(ty: GgmlType, bytes: &[u8], n: usize, k: usize) -> Option<Self> {
        let row = ty.row_bytes(k)?;
        (row.checked_mul(n) == Some(bytes.len())).then(|| Self {
            ty,
            n,
            k,
            store: Store::Rows(Arc::from(bytes)),
        })
    }

    /// Bytes of the packed blocks.
    pub fn bytes(&self) -> usize {
        match &self.store {
            Store::Host(b) | Store::Rows(b) => b.len(),
            #[cfg(feature = "webgpu")]
            Store::Gpu(w) => w.device_bytes(),
        }
    }

    /// Bytes the blocks take on the model's device: none for a table kept in host memory beside a device
    /// elsewhere ([`QuantWeight::host`]); on the CPU backend, host memory is the device's.
    pub fn device_bytes(&self) -> usize {
        match &self.store {
            Store::Rows(_) => 0,
            _ => self.bytes(),
        }
    }

    /// `x: [m, k]` → `x · Wᵀ: [m, n]`, on the weight's device.
    pub fn matmul(&self, x: Tensor<2>) -> Tensor<2> {
        let [m, k] = x.dims();
        debug_assert_eq!(k, self.k);
        match &self.store {
            Store::Host(bytes) => {
                let y = with_flex_values(x, |values| cpu::matmul(self.ty, bytes, self.n, self.k, values, m));
                let out = FlexTensor::from_data(TensorData::new(y, [m, self.n]));
                Tensor::from_primitive::<Flex>(out)
            }
            Store::Rows(_) => panic!("a table kept for its rows (QuantWeight::host) is never multiplied"),
            #[cfg(feature = "webgpu")]
            Store::Gpu(w) => gpu::matmul(x, w),
        }
    }

    /// `x: [m, k]` → `x · W_jᵀ: [m, n_j]` for each of `weights`, all `k` wide and in host memory (the CPU
    /// backend's): [`cpu::matmul_many`], which runs a decode step's products in one run of the threaded
    /// build's team. `None` when a weight is elsewhere (on a wgpu device) or of another width.
    pub fn matmul_many(weights: &[&QuantWeight], x: Tensor<2>) -> Option<Vec<Tensor<2>>> {
        let [m, k] = x.dims();
        let parts = weights
            .iter()
            .map(|w| match &w.store {
                Store::Host(bytes) if w.k == k => Some(cpu::split::Part {
                    ty: w.ty,
                    w: bytes,
                    n: w.n,
                }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let ys = with_flex_values(x, |values| cpu::matmul_many(&parts, k, values, m));
        let tensors = ys.into_iter().zip(weights).map(|(y, w)| {
            Tensor::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(y, [m, w.n])))
        });
        Some(tensors.collect())
    }

    /// The weight on its wgpu device, if it is there (not in host memory for the CPU kernels).
    #[cfg(feature = "webgpu")]
    pub fn gpu(&self) -> Option<&gpu::GpuWeight> {
        match &self.store {
            Store::Gpu(w) => Some(w),
            Store::Host(_) | Store::Rows(_) => None,
        }
    }

    /// Rows `ids` of the matrix, dequantised: `[ids.len(), k]` on `device` (the weight's).
    pub fn rows(&self, ids: &[u32], device: &Device) -> Tensor<2> {
        match &self.store {
            Store::Host(bytes) | Store::Rows(bytes) => {
                let row = self.ty.row_bytes(self.k).unwrap_or(0);
                let mut out = vec![0.0; ids.len() * self.k];
                for (dst, &id) in out.chunks_exact_mut(self.k).zip(ids) {
                    let start = id as usize * row;
                    // Whole rows of a checked tensor: this cannot fail.
                    let decoded = self.ty.dequantize_into(&bytes[start..start + row], dst);
                    debug_assert!(decoded.is_ok());
                }
                Tensor::from_data(TensorData::new(out, [ids.len(), self.k]), device)
            }
            #[cfg(feature = "webgpu")]
            Store::Gpu(w) => {
                let ids = Tensor::<1, Int>::from_data(TensorData::new(ids.to_vec(), [ids.len()]), device);
                gpu::embedding(w, ids)
            }
        }
    }
}

/// `silu(gate) · up`, element-wise (the gated MLP's activation), on the tensors' device: one pass with a
/// vectorized `exp` on the CPU backend ([`cpu::activation`]), burn's ops elsewhere.
pub fn silu_mul<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    match gate.device().as_dispatch() {
        DispatchDevice::Flex(_) => flex_gated(gate, up, cpu::activation::silu_mul),
        _ => burn::tensor::activation::silu(gate) * up,
    }
}

/// `f(gate, up, out)` over the values of two flex tensors of one shape, into a new tensor of that shape.
fn flex_gated<const D: usize>(
    gate: Tensor<D>,
    up: Tensor<D>,
    f: fn(&[f32], &[f32], &mut [f32]),
) -> Tensor<D> {
    let shape = gate.shape();
    let out = with_flex_values(gate, |g| {
        with_flex_values(up, |u| {
            let mut out = vec![0.0; g.len()];
            cpu::activation::gated(f, g, u, &mut out);
            out
        })
    });
    Tensor::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(out, shape)))
}

/// `gelu_tanh(gate) · up`, element-wise (Gemma's gated MLP), on the tensors' device: one pass with a
/// vectorized `exp` on the CPU backend ([`cpu::activation`]), burn's ops elsewhere.
pub fn gelu_tanh_mul<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    match gate.device().as_dispatch() {
        DispatchDevice::Flex(_) => flex_gated(gate, up, cpu::activation::gelu_tanh_mul),
        _ => gelu_tanh(gate) * up,
    }
}

/// GELU's tanh approximation, `0.5·x·(1 + tanh(z))` with `z = √(2/π)·(x + 0.044715·x³)`, element-wise on
/// the tensor's device: one pass with a vectorized `exp` on the CPU backend ([`cpu::activation`]); burn's
/// ops elsewhere, as `x / (1 + e^(−2z))`: no `tanh`, which some WebGPU implementations compute as
/// `(e^2z − 1)/(e^2z + 1)`, NaN once `e^2z` overflows.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match x.device().as_dispatch() {
        DispatchDevice::Flex(_) => flex_unary(x, cpu::activation::gelu_tanh),
        _ => {
            let cube = x.clone() * x.clone() * x.clone();
            let z = (x.clone() + cube.mul_scalar(0.044_715))
                .mul_scalar(-2.0 * (2.0 / std::f64::consts::PI).sqrt());
            x / z.exp().add_scalar(1.0)
        }
    }
}

/// CLIP's `quick_gelu(x) = x · σ(1.702·x)`, element-wise on the tensor's device (as [`gelu_tanh`]).
pub fn quick_gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match x.device().as_dispatch() {
        DispatchDevice::Flex(_) => flex_unary(x, cpu::activation::quick_gelu),
        _ => x.clone() * burn::tensor::activation::sigmoid(x.mul_scalar(1.702)),
    }
}

/// `f(x, out)` over the values of a flex tensor, into a new tensor of its shape.
fn flex_unary<const D: usize>(x: Tensor<D>, f: fn(&[f32], &mut [f32])) -> Tensor<D> {
    let shape = x.shape();
    let out = with_flex_values(x, |x| {
        let mut out = vec![0.0; x.len()];
        cpu::activation::unary(f, x, &mut out);
        out
    });
    Tensor::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(out, shape)))
}

/// `cap · tanh(x / cap)` (logit softcapping), as `cap · (1 − 2 / (e^(2x/cap) + 1))`: finite for every finite
/// `x` on every device (a WebGPU `tanh` computed as a quotient of exponentials is NaN for large arguments).
pub fn softcap<const D: usize>(x: Tensor<D>, cap: f64) -> Tensor<D> {
    let e = x.mul_scalar(2.0 / cap).exp().add_scalar(1.0);
    e.recip().mul_scalar(-2.0 * cap).add_scalar(cap)
}

/// Softmax over the last dimension, on the tensor's device: one pass per row with a vectorized `exp` on
/// the CPU backend ([`cpu::activation`]), burn's `softmax` elsewhere.
pub fn softmax_last<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match x.device().as_dispatch() {
        DispatchDevice::Flex(_) => {
            let shape = x.shape();
            let cols = x.dims()[D - 1];
            let mut values = with_flex_values(x, <[f32]>::to_vec);
            cpu::activation::softmax_rows(&mut values, cols);
            Tensor::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(values, shape)))
        }
        _ => burn::tensor::activation::softmax(x, D - 1),
    }
}

/// RMSNorm over the last dimension (`x / √(mean(x²) + eps) · weight`, `x: [..., h]`, `weight: [h]`) on the
/// CPU backend: one pass per row ([`cpu::rows::rms_norm`], split across threads in the `threads` build).
/// `None` on any other device, whose caller takes burn's ops.
pub fn rms_norm<const D: usize>(x: &Tensor<D>, weight: &Tensor<1>, eps: f64) -> Option<Tensor<D>> {
    if !matches!(x.device().as_dispatch(), DispatchDevice::Flex(_)) {
        return None;
    }
    let shape = x.shape();
    let out = with_flex_values(x.clone(), |x| {
        with_flex_values(weight.clone(), |w| {
            let mut out = vec![0.0; x.len()];
            cpu::rows::rms_norm(x, w, eps as f32, &mut out);
            out
        })
    });
    Some(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, shape),
    )))
}

/// LayerNorm over the last dimension (`(x − mean) / √(var + eps) · weight + bias`, `x: [..., h]`, `weight`
/// and `bias` `[h]`) on the CPU backend: one pass per row ([`cpu::rows::layer_norm`], split across threads
/// in the `threads` build). `None` on any other device, whose caller takes burn's ops.
pub fn layer_norm<const D: usize>(
    x: &Tensor<D>,
    weight: &Tensor<1>,
    bias: &Tensor<1>,
    eps: f64,
) -> Option<Tensor<D>> {
    if !matches!(x.device().as_dispatch(), DispatchDevice::Flex(_)) {
        return None;
    }
    let shape = x.shape();
    let out = with_flex_values(x.clone(), |x| {
        with_flex_values(weight.clone(), |w| {
            with_flex_values(bias.clone(), |b| {
                let mut out = vec![0.0; x.len()];
                cpu::rows::layer_norm(x, w, b, eps as f32, &mut out);
                out
            })
        })
    });
    Some(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, shape),
    )))
}

/// Rotate-half rope of the first `2 · cos.dims()[3]` features of each head of `x` (`[b, n, s, d]`, any
/// strides with contiguous rows), `cos`/`sin` `[1, 1, s, r / 2]`, on the CPU backend: one pass
/// ([`cpu::rows::rope`]), into a row-major `[b, n, s, d]`. `None` on any other device.
pub fn rope(x: &Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>) -> Option<Tensor<4>> {
    if !matches!(x.device().as_dispatch(), DispatchDevice::Flex(_)) {
        return None;
    }
    let [b, n, s, d] = x.dims();
    let out = with_flex_values(cos.clone(), |cos| {
        with_flex_values(sin.clone(), |sin| {
            with_flex_heads(x, |x| {
                let mut out = vec![0.0; b * n * s * d];
                cpu::rows::rope(x, (b, n, s, d), cos, sin, &mut out);
                out
            })
        })
    });
    Some(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, [b, n, s, d]),
    )))
}

/// Attention of `q` (`[b, H, s, d]`, the last `s` of `t` positions) over `keys`, `values` (`[b, K, t, d]`,
/// `K` dividing `H`) under `mask` on the CPU backend ([`cpu::attention`]: the mask as index ranges, GQA read in
/// place, split across threads in the `threads` build): `[b, s, H·d]`. `None` on any other device, whose
/// caller takes burn's ops.
pub fn attention(
    q: &Tensor<4>,
    keys: &Tensor<4>,
    values: &Tensor<4>,
    scale: f64,
    softcap: Option<f64>,
    mask: mask::Mask<'_>,
) -> Option<Tensor<3>> {
    if !matches!(q.device().as_dispatch(), DispatchDevice::Flex(_)) {
        return None;
    }
    let ([b, heads, s, d], [_, kv_heads, t, _]) = (q.dims(), keys.dims());
    let dims = cpu::attention::Dims {
        b,
        heads,
        kv_heads,
        s,
        t,
        d,
        scale: scale as f32,
        softcap: softcap.map(|c| c as f32),
    };
    let out = with_flex_heads(q, |q| {
        with_flex_heads(keys, |k| {
            with_flex_heads(values, |v| cpu::attention::attention(q, k, v, dims, mask))
        })
    });
    let out = FlexTensor::from_data(TensorData::new(out, [b, s, heads * d]));
    Some(Tensor::from_primitive::<Flex>(out))
}

/// Runs `f` on a flex tensor `[b, n, rows, d]` seen as [`cpu::attention::Heads`]: its own storage and
/// strides where its rows are contiguous (a narrowed cache, swapped heads), else a contiguous copy.
fn with_flex_heads<R>(x: &Tensor<4>, f: impl FnOnce(cpu::attention::Heads<'_>) -> R) -> R {
    let t = match x.clone().try_into_primitive::<Flex>() {
        Ok(t) => t,
        Err(e) => panic!("CPU attention met a tensor of another backend: {e:?}"),
    };
    fn heads(t: &FlexTensor) -> Option<cpu::attention::Heads<'_>> {
        let layout = t.layout();
        let strides: Vec<usize> = layout
            .strides()
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect::<Option<_>>()?;
        (strides.len() == 4 && (strides[3] == 1 || layout.shape()[3] == 1)).then(|| cpu::attention::Heads {
            data: t.storage::<f32>(),
            offset: layout.start_offset(),
            batch: strides[0],
            head: strides[1],
            row: strides[2],
        })
    }
    match heads(&t) {
        Some(view) => f(view),
        None => {
            let t = t.to_contiguous();
            let view = heads(&t).expect("a contiguous 4-d tensor has unit inner stride");
            f(view)
        }
    }
}

/// The largest storage buffer binding `device` allows, in bytes (WebGPU's `maxStorageBufferBindingSize`,
/// capped by `maxBufferSize`), as the loader may report it; `None` on a device that is not wgpu (the CPU
/// backend has no such limit). A GPU weight larger than this is held in several buffers ([`gpu`]).
pub fn max_binding_bytes(device: &Device) -> Option<u64> {
    match device.as_dispatch() {
        #[cfg(feature = "webgpu")]
        DispatchDevice::Cube(_) => gpu::max_binding_bytes(device),
        _ => None,
    }
}

/// Runs `f` on the f32 values of a tensor on the flex backend, row-major, borrowed from its storage (a
/// strided or offset view is made contiguous first).
fn with_flex_values<const D: usize, R>(x: Tensor<D>, f: impl FnOnce(&[f32]) -> R) -> R {
    let t = match x.try_into_primitive::<Flex>() {
        Ok(t) => t,
        Err(e) => panic!("a host-stored quantized weight met a tensor of another backend: {e:?}"),
    };
    match t.as_slice::<f32>() {
        Some(values) => f(values),
        None => f(t.to_contiguous().storage::<f32>()),
    }
}
