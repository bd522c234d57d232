//! Fused kernels for one decode step (one new position per sequence) on wgpu: each replaces the chain of
//! burn kernels the generic path launches for the same step (RMSNorm alone is six), so a step takes about
//! eleven dispatches per layer instead of some sixty (see `model::step`).
//!
//! Shapes: `b` sequences, `h` hidden size, `H` / `K` query / key-value heads, `d` head dim (even), `A`
//! positions allocated in the cache.
//!
//! - [`rms_norm`]: `x: [r, h]` → `[r, h]`; [`add_rms_norm`] first adds a residual and returns the sum too
//!   (the pre-norm Llama layer), or with a second weight normalises the residual before adding it (Gemma's
//!   sandwich: `x + rmsnorm(delta)·w₁`, then `rmsnorm(that)·w₂`). One workgroup per row: each thread sums
//!   the squares of a strided share of the row, one barrier, then every thread adds the partial sums and
//!   writes its share of the outputs (twice over for the sandwich). [`add_rms_norm_scaled`] multiplies the
//!   sandwich's sum by a scalar before its norm (Gemma 4's `layer_scalar`).
//! - [`attention_append`] (`attention.rs`): per-head q/k RMSNorm, rope at position `pos`, the key and
//!   value written into the cache `[b, K, A, d]` at `pos`, and grouped-query attention over the cache (or
//!   a sliding window of it), with a score scale and an optional logit softcap, in one launch;
//!   [`attention_shared`] the same over an earlier layer's cache, writing nothing (Gemma 4).
//! - [`gated`]: `silu(g) · u` or `gelu_tanh(g) · u` ([`Gate`]), elementwise, `[r, f]` each.
//! - `mixers.rs`: what the layers that are not plain attention add: LFM2's and Qwen3.5's convolution step
//!   ([`conv_step`]), the DeltaNet's gated output norm ([`gated_rms_norm`]), and Qwen3.5's gated
//!   attention with partial rope ([`prepare_qk`] before `attention_append`, [`gate_heads`] after).
//!
//! Each takes the device's [`Features`] (or other ones it has) as an argument. Sums in f32. Where they have f16, the activations these kernels write for a
//! matrix product (the norms' outputs, the gated activation, attention's output) are f16 and the KV cache
//! is f16; the residual sums stay f32. Where they have subgroups, the norms' sums of squares meet through
//! them. Results match the generic path up to rounding (different summation orders; f16's where it is
//! on), not bit for bit.

mod attention;
mod mixers;

pub use attention::{
    Attend, CacheSlot, SOFTWARE_SPAN, SPLIT, attention_append, attention_append_split, attention_shared,
    split_len,
};
pub use mixers::{ConvIn, QkPrep, conv_step, gate_heads, gated_rms_norm, prepare_qk};

use burn::backend::Cube;
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::caps::{Features, act_dtype, elem};

/// Threads of the row kernels (RMSNorm) and of the elementwise kernels.
const ROW_WG: usize = 64;

/// `1 / sqrt(mean + eps)` of the row whose squares this thread summed in part (`ss`, over elements
/// `tid, tid + ROW_WG, …`). Without subgroups the `ROW_WG` partial sums meet in shared memory behind one
/// barrier; with them (`plane`) each subgroup sums its own, and its first lane posts that (`caps.rs`: a
/// subgroup is `PLANE_DIM` consecutive threads, at most `ROW_WG`). Every thread then adds the posted sums
/// in the same order.
#[cube]
fn inv_rms(ss: f32, h: usize, eps: f32, #[comptime] plane: bool) -> f32 {
    let mut partial = Shared::<[f32]>::new_slice(ROW_WG);
    let mut total = 0.0f32;
    if comptime![plane] {
        let s = plane_sum(ss);
        if UNIT_POS_PLANE == 0 {
            partial[(UNIT_POS / PLANE_DIM) as usize] = s;
        }
        sync_cube();
        let planes = (ROW_WG as u32 / PLANE_DIM) as usize;
        for i in 0..planes {
            total += partial[i];
        }
    } else {
        partial[UNIT_POS as usize] = ss;
        sync_cube();
        for i in 0..ROW_WG {
            total += partial[i];
        }
    }
    1.0 / (total / f32::cast_from(h) + eps).sqrt()
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_kernel<X: Float>(
    x: &[f32],
    w: &[f32],
    out: &mut [X],
    h: usize,
    eps: f32,
    #[comptime] plane: bool,
    #[define(X)] _act: ElemType,
) {
    let base = CUBE_POS * h;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, h, eps, plane);
    let mut e = UNIT_POS as usize;
    while e < h {
        out[base + e] = X::cast_from(x[base + e] * inv * w[e]);
        e += ROW_WG;
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn add_rms_norm_kernel<X: Float>(
    x: &[f32],
    delta: &[f32],
    w: &[f32],
    sum: &mut [f32],
    out: &mut [X],
    h: usize,
    eps: f32,
    #[comptime] plane: bool,
    #[define(X)] _act: ElemType,
) {
    let base = CUBE_POS * h;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e] + delta[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, h, eps, plane);
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e] + delta[base + e];
        sum[base + e] = v;
        out[base + e] = X::cast_from(v * inv * w[e]);
        e += ROW_WG;
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn norm_add_rms_norm_kernel<X: Float>(
    x: &[f32],
    delta: &[f32],
    wd: &[f32],
    w: &[f32],
    scale: &[f32],
    sum: &mut [f32],
    out: &mut [X],
    h: usize,
    eps: f32,
    #[comptime] plane: bool,
    #[comptime] scaled: bool,
    #[define(X)] _act: ElemType,
) {
    let mut sc = 1.0f32;
    if comptime![scaled] {
        sc = scale[0];
    }
    let base = CUBE_POS * h;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = delta[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv_d = inv_rms(ss, h, eps, plane);
    // Every thread has read the first partial sums before any is overwritten.
    sync_cube();
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = (x[base + e] + delta[base + e] * inv_d * wd[e]) * sc;
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, h, eps, plane);
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = (x[base + e] + delta[base + e] * inv_d * wd[e]) * sc;
        sum[base + e] = v;
        out[base + e] = X::cast_from(v * inv * w[e]);
        e += ROW_WG;
    }
}

#[cube(launch_unchecked)]
fn silu_mul_kernel<X: Float>(g: &[f32], u: &[f32], out: &mut [X], len: usize, #[define(X)] _act: ElemType) {
    let i = ABSOLUTE_POS;
    if i < len {
        let x = g[i];
        out[i] = X::cast_from(x * (1.0 / (1.0 + (-x).exp())) * u[i]);
    }
}

#[cube(launch_unchecked)]
fn gelu_tanh_mul_kernel<X: Float>(
    g: &[f32],
    u: &[f32],
    out: &mut [X],
    len: usize,
    #[define(X)] _act: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let x = g[i];
        // 0.5·x·(1 + tanh(z)) = x / (1 + e^(−2z)), z = √(2/π)·(x + 0.044715·x³): no `tanh`, which
        // SwiftShader computes as a quotient of exponentials, NaN once they overflow (measured: gemma-3-270m
        // decoded only NaN logits there).
        let z = 0.797_884_6f32 * (x + 0.044_715f32 * x * x * x);
        out[i] = X::cast_from(x / (1.0f32 + (-2.0f32 * z).exp()) * u[i]);
    }
}

/// The cube tensor behind `t`, as f32, contiguous (copied only if it was not).
pub(crate) fn cube<const D: usize>(t: Tensor<D>, what: &str) -> CubeTensor {
    cube_as(t, DType::F32, what)
}

/// The cube tensor behind `t` in its own float type (f16 stays f16, anything else is cast to f32),
/// contiguous.
pub(crate) fn cube_any<const D: usize>(t: Tensor<D>, what: &str) -> CubeTensor {
    let dtype = match t.dtype() {
        DType::F16 => DType::F16,
        _ => DType::F32,
    };
    cube_as(t, dtype, what)
}

pub(crate) fn cube_as<const D: usize>(t: Tensor<D>, dtype: DType, what: &str) -> CubeTensor {
    match t.cast(dtype).try_into_primitive::<Cube>() {
        Ok(t) => into_contiguous(t),
        Err(e) => panic!("{what}: not on a wgpu device: {e:?}"),
    }
}

pub(crate) fn empty_like(t: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_dtype(t, shape, DType::F32)
}

pub(crate) fn empty_dtype(t: &CubeTensor, shape: Shape, dtype: DType) -> CubeTensor {
    empty_device_dtype(t.client.clone(), t.device.clone(), shape, dtype)
}

/// RMSNorm of each row: `x: [r, h]`, `w: [h]` → `x / sqrt(mean(x²) + eps) · w`, `[r, h]` (f16 where `f`
/// has it; the sum of squares through subgroups where `f` has them).
pub fn rms_norm(x: Tensor<2>, w: &Tensor<1>, eps: f32, f: Features) -> Tensor<2> {
    let [r, h] = x.dims();
    let x = cube(x, "rms_norm");
    let w = cube(w.clone(), "rms_norm weight");
    let dtype = act_dtype(f);
    let out = empty_dtype(&x, Shape::new([r, h]), dtype);
    if r > 0 {
        unsafe {
            rms_norm_kernel::launch_unchecked(
                &x.client,
                CubeCount::Static(r as u32, 1, 1),
                CubeDim::new_1d(ROW_WG as u32),
                x.clone().into_buffer_arg(),
                w.into_buffer_arg(),
                out.clone().into_buffer_arg(),
                h,
                eps,
                plane_rows(f),
                elem(dtype),
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}

/// Whether the row kernels' sums go through subgroups under `f`: a subgroup of at most `ROW_WG` threads
/// (a subgroup of 128 would leave none of the workgroup's posted sums).
fn plane_rows(f: Features) -> bool {
    f.subgroups.is_some_and(|s| s as usize <= ROW_WG)
}

/// `s = x + delta` and its RMSNorm, `(s, rms_norm(s, w))`, all `[r, h]` (the norm f16 where `f` has it,
/// the sum f32); with `wd`, Gemma's sandwich: `s = x + rms_norm(delta, wd)` instead.
pub fn add_rms_norm(
    x: Tensor<2>,
    delta: Tensor<2>,
    wd: Option<&Tensor<1>>,
    w: &Tensor<1>,
    eps: f32,
    f: Features,
) -> (Tensor<2>, Tensor<2>) {
    add_rms_norm_scaled(x, delta, wd, None, w, eps, f)
}

/// [`add_rms_norm`] with the sum times `scale: [1]` before its norm (Gemma 4's `layer_scalar`: `s =
/// (x + rms_norm(delta, wd)) · scale`), which only the sandwich (`wd`) takes.
///
/// # Panics
///
/// If the shapes disagree, or `scale` is given without `wd`.
pub fn add_rms_norm_scaled(
    x: Tensor<2>,
    delta: Tensor<2>,
    wd: Option<&Tensor<1>>,
    scale: Option<&Tensor<1>>,
    w: &Tensor<1>,
    eps: f32,
    f: Features,
) -> (Tensor<2>, Tensor<2>) {
    assert!(
        scale.is_none() || wd.is_some(),
        "add_rms_norm: a scale without the sandwich norm"
    );
    let [r, h] = x.dims();
    assert_eq!(delta.dims(), [r, h], "add_rms_norm: x and delta differ in shape");
    let x = cube(x, "add_rms_norm");
    let delta = cube(delta, "add_rms_norm delta");
    let w = cube(w.clone(), "add_rms_norm weight");
    let dtype = act_dtype(f);
    let sum = empty_like(&x, Shape::new([r, h]));
    let out = empty_dtype(&x, Shape::new([r, h]), dtype);
    if r > 0 {
        let (count, dim) = (CubeCount::Static(r as u32, 1, 1), CubeDim::new_1d(ROW_WG as u32));
        let (xa, da) = (x.clone().into_buffer_arg(), delta.into_buffer_arg());
        let (sa, oa) = (sum.clone().into_buffer_arg(), out.clone().into_buffer_arg());
        let plane = plane_rows(f);
        unsafe {
            match wd {
                None => add_rms_norm_kernel::launch_unchecked(
                    &x.client,
                    count,
                    dim,
                    xa,
                    da,
                    w.into_buffer_arg(),
                    sa,
                    oa,
                    h,
                    eps,
                    plane,
                    elem(dtype),
                ),
                Some(wd) => norm_add_rms_norm_kernel::launch_unchecked(
                    &x.client,
                    count,
                    dim,
                    xa,
                    da,
                    cube(wd.clone(), "norm_add_rms_norm delta weight").into_buffer_arg(),
                    w.into_buffer_arg(),
                    match scale {
                        Some(t) => cube(t.clone(), "norm_add_rms_norm scale"),
                        // A one-element placeholder the kernel never reads.
                        None => empty_like(&x, Shape::new([1])),
                    }
                    .into_buffer_arg(),
                    sa,
                    oa,
                    h,
                    eps,
                    plane,
                    scale.is_some(),
                    elem(dtype),
                ),
            }
        }
    }
    (
        Tensor::from_primitive::<Cube>(sum),
        Tensor::from_primitive::<Cube>(out),
    )
}

/// The activation of a gated MLP's gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `silu(g) = g · sigmoid(g)`.
    Silu,
    /// `gelu_tanh(g) = 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`.
    GeluTanh,
}

/// `gate(g) · u` elementwise: `g`, `u`: `[r, f]` → `[r, f]` (f16 where `f` has it).
pub fn gated(g: Tensor<2>, u: Tensor<2>, gate: Gate, f: Features) -> Tensor<2> {
    let gelu = gate == Gate::GeluTanh;
    let [r, n] = g.dims();
    assert_eq!(u.dims(), [r, n], "gated activation: g and u differ in shape");
    let g = cube(g, "activation g");
    let dtype = act_dtype(f);
    let out = empty_dtype(&g, Shape::new([r, n]), dtype);
    let len = r * n;
    if len > 0 {
        let dim = CubeDim::new_1d(ROW_WG as u32);
        let count = cubecl::calculate_cube_count_elemwise(&g.client, len, dim);
        let (ga, ua) = (
            g.clone().into_buffer_arg(),
            cube(u, "activation u").into_buffer_arg(),
        );
        let oa = out.clone().into_buffer_arg();
        let x = elem(dtype);
        unsafe {
            match gelu {
                false => silu_mul_kernel::launch_unchecked(&g.client, count, dim, ga, ua, oa, len, x),
                true => gelu_tanh_mul_kernel::launch_unchecked(&g.client, count, dim, ga, ua, oa, len, x),
            }
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
