//! Fused kernels for one decode step (one new position per sequence) on wgpu: each replaces the chain of
//! burn kernels the generic path launches for the same step (RMSNorm alone is six), so a step takes about
//! a dozen dispatches per layer instead of some sixty.
//!
//! Shapes: `b` sequences, `h` hidden size, `H` / `K` query / key-value heads, `d` head dim (even), `T`
//! positions cached after this step's append, `A ≥ T` positions allocated in the cache.
//!
//! - [`rms_norm`]: `x: [r, h]` → `[r, h]`; [`add_rms_norm`] first adds a residual and returns the sum too.
//!   One workgroup per row: each thread sums the squares of a strided share of the row, one barrier, then
//!   every thread adds the partial sums and writes its share of the outputs.
//! - [`rope_append`]: rotate-half rope on `q: [b, H·d]` and `k: [b, K·d]` at position `pos`, writing
//!   the rotated keys and `v: [b, K·d]` into the cache `[b, K, A, d]` at position `pos`; returns the
//!   rotated `q`. One thread per rotated pair.
//! - [`attention`]: `q: [b, H·d]` against the cache's first `T` positions → `[b, H·d]`, grouped-query
//!   heads reading their shared key-value head in place (no expanded copy). One workgroup of `ATT_WG`
//!   threads per (sequence, head): thread `j` takes positions `j, j + ATT_WG, …` with an online softmax
//!   (running max, sum and `d` weighted values in registers), then one barrier and the merge of the
//!   `ATT_WG` partial states in shared memory (`ATT_WG · (d + 2)` floats).
//! - [`silu_mul`]: `silu(g) · u` elementwise, `[r, f]` each.
//!
//! All f32, no subgroups, no f16 (SwiftShader has neither). Results match the generic path up to f32
//! rounding (different summation orders), not bit for bit.

use burn::backend::Cube;
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// Threads of the row kernels (RMSNorm) and of the elementwise kernels.
const ROW_WG: usize = 64;

/// Threads per (sequence, head) of the attention kernel.
pub(crate) const ATT_WG: usize = 32;

/// `1 / sqrt(mean + eps)` of the row whose squares this thread summed in part (`ss`, over elements
/// `tid, tid + ROW_WG, …`): the `ROW_WG` partial sums meet in shared memory behind one barrier, and every
/// thread adds them up in the same order.
#[cube]
fn inv_rms(ss: f32, h: usize, eps: f32) -> f32 {
    let mut partial = Shared::<[f32]>::new_slice(ROW_WG);
    partial[UNIT_POS as usize] = ss;
    sync_cube();
    let mut total = 0.0f32;
    for i in 0..ROW_WG {
        total += partial[i];
    }
    1.0 / (total / f32::cast_from(h) + eps).sqrt()
}

#[cube(launch_unchecked)]
fn rms_norm_kernel(x: &[f32], w: &[f32], out: &mut [f32], h: usize, eps: f32) {
    let base = CUBE_POS * h;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, h, eps);
    let mut e = UNIT_POS as usize;
    while e < h {
        out[base + e] = x[base + e] * inv * w[e];
        e += ROW_WG;
    }
}

#[cube(launch_unchecked)]
fn add_rms_norm_kernel(
    x: &[f32],
    delta: &[f32],
    w: &[f32],
    sum: &mut [f32],
    out: &mut [f32],
    h: usize,
    eps: f32,
) {
    let base = CUBE_POS * h;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e] + delta[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, h, eps);
    let mut e = UNIT_POS as usize;
    while e < h {
        let v = x[base + e] + delta[base + e];
        sum[base + e] = v;
        out[base + e] = v * inv * w[e];
        e += ROW_WG;
    }
}

#[cube(launch_unchecked)]
fn rope_append_kernel(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    cos: &[f32],
    sin: &[f32],
    q_out: &mut [f32],
    keys: &mut [f32],
    values: &mut [f32],
    rows: usize,
    heads: usize,
    kv_heads: usize,
    half: usize,
    pos: usize,
    alloc: usize,
) {
    let idx = ABSOLUTE_POS;
    let all = heads + kv_heads;
    if idx < rows * all * half {
        let i = idx % half;
        let hh = (idx / half) % all;
        let r = idx / (half * all);
        let d = 2 * half;
        let c = cos[pos * half + i];
        let s = sin[pos * half + i];
        if hh < heads {
            let at = (r * heads + hh) * d;
            let x1 = q[at + i];
            let x2 = q[at + i + half];
            q_out[at + i] = x1 * c - x2 * s;
            q_out[at + i + half] = x2 * c + x1 * s;
        } else {
            let kh = hh - heads;
            let at = (r * kv_heads + kh) * d;
            let dst = ((r * kv_heads + kh) * alloc + pos) * d;
            let x1 = k[at + i];
            let x2 = k[at + i + half];
            keys[dst + i] = x1 * c - x2 * s;
            keys[dst + i + half] = x2 * c + x1 * s;
            values[dst + i] = v[at + i];
            values[dst + i + half] = v[at + i + half];
        }
    }
}

#[cube(launch_unchecked)]
fn attention_kernel(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    out: &mut [f32],
    heads: usize,
    kv_heads: usize,
    t: usize,
    alloc: usize,
    sqrt_d: f32,
    #[comptime] d: usize,
) {
    let bh = CUBE_POS;
    let bi = bh / heads;
    let head = bh % heads;
    let kh = head / (heads / kv_heads);
    let tid = UNIT_POS as usize;
    let qo = bh * d;
    let kv0 = (bi * kv_heads + kh) * alloc * d;
    let mut qv = Array::<f32>::new(d);
    let mut o = Array::<f32>::new(d);
    #[unroll]
    for j in 0..d {
        qv[j] = q[qo + j];
        o[j] = 0.0;
    }
    // A finite "minus infinity": exp(m - score) is then 0, never NaN.
    let mut m = f32::cast_from(tid) * 0.0 - 3.0e38;
    let mut l = 0.0f32;
    let mut p = tid;
    while p < t {
        let at = kv0 + p * d;
        let mut dot = 0.0f32;
        #[unroll]
        for j in 0..d {
            dot += qv[j] * keys[at + j];
        }
        let score = dot / sqrt_d;
        if score > m {
            let c = (m - score).exp();
            l *= c;
            #[unroll]
            for j in 0..d {
                o[j] *= c;
            }
            m = score;
        }
        let e = (score - m).exp();
        l += e;
        #[unroll]
        for j in 0..d {
            o[j] += e * values[at + j];
        }
        p += ATT_WG;
    }
    let mut sm = Shared::<[f32]>::new_slice(ATT_WG);
    let mut sl = Shared::<[f32]>::new_slice(ATT_WG);
    let mut so = Shared::<[f32]>::new_slice(comptime![ATT_WG * d]);
    sm[tid] = m;
    sl[tid] = l;
    #[unroll]
    for j in 0..d {
        so[tid * d + j] = o[j];
    }
    sync_cube();
    let mut top = sm[0];
    for i in 1..ATT_WG {
        if sm[i] > top {
            top = sm[i];
        }
    }
    let mut den = 0.0f32;
    for i in 0..ATT_WG {
        den += (sm[i] - top).exp() * sl[i];
    }
    let mut j = tid;
    while j < d {
        let mut num = 0.0f32;
        for i in 0..ATT_WG {
            num += (sm[i] - top).exp() * so[i * d + j];
        }
        out[qo + j] = num / den;
        j += ATT_WG;
    }
}

#[cube(launch_unchecked)]
fn silu_mul_kernel(g: &[f32], u: &[f32], out: &mut [f32], len: usize) {
    let i = ABSOLUTE_POS;
    if i < len {
        let x = g[i];
        out[i] = x * (1.0 / (1.0 + (-x).exp())) * u[i];
    }
}

/// The cube tensor behind `t`, contiguous (copied only if it was not).
fn cube<const D: usize>(t: Tensor<D>, what: &str) -> CubeTensor {
    match t.cast(DType::F32).try_into_primitive::<Cube>() {
        Ok(t) => into_contiguous(t),
        Err(e) => panic!("{what}: not on a wgpu device: {e:?}"),
    }
}

fn empty_like(t: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_device_dtype(t.client.clone(), t.device.clone(), shape, DType::F32)
}

/// RMSNorm of each row: `x: [r, h]`, `w: [h]` → `x / sqrt(mean(x²) + eps) · w`, `[r, h]`.
pub fn rms_norm(x: Tensor<2>, w: &Tensor<1>, eps: f32) -> Tensor<2> {
    let [r, h] = x.dims();
    let x = cube(x, "rms_norm");
    let w = cube(w.clone(), "rms_norm weight");
    let out = empty_like(&x, Shape::new([r, h]));
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
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}

/// `s = x + delta` and its RMSNorm, `(s, rms_norm(s, w))`, all `[r, h]`.
pub fn add_rms_norm(x: Tensor<2>, delta: Tensor<2>, w: &Tensor<1>, eps: f32) -> (Tensor<2>, Tensor<2>) {
    let [r, h] = x.dims();
    assert_eq!(delta.dims(), [r, h], "add_rms_norm: x and delta differ in shape");
    let x = cube(x, "add_rms_norm");
    let delta = cube(delta, "add_rms_norm delta");
    let w = cube(w.clone(), "add_rms_norm weight");
    let sum = empty_like(&x, Shape::new([r, h]));
    let out = empty_like(&x, Shape::new([r, h]));
    if r > 0 {
        unsafe {
            add_rms_norm_kernel::launch_unchecked(
                &x.client,
                CubeCount::Static(r as u32, 1, 1),
                CubeDim::new_1d(ROW_WG as u32),
                x.clone().into_buffer_arg(),
                delta.into_buffer_arg(),
                w.into_buffer_arg(),
                sum.clone().into_buffer_arg(),
                out.clone().into_buffer_arg(),
                h,
                eps,
            );
        }
    }
    (
        Tensor::from_primitive::<Cube>(sum),
        Tensor::from_primitive::<Cube>(out),
    )
}

/// Where [`rope_append`] writes: a layer's cache `[b, K, A, d]` (made contiguous in place if it was not).
pub struct CacheSlot<'a> {
    pub keys: &'a mut Tensor<4>,
    pub values: &'a mut Tensor<4>,
}

/// Rope at position `pos` (`cos`, `sin`: `[max_pos, d/2]`) on `q: [b, H·d]` and `k: [b, K·d]`; writes the
/// rotated keys and `v: [b, K·d]` into `slot` at position `pos` and returns the rotated `q`, `[b, H·d]`.
///
/// # Panics
///
/// If the shapes disagree (the cache must be `[b, K, A, d]` with `pos < A`, `pos < max_pos`).
pub fn rope_append(
    q: Tensor<2>,
    k: Tensor<2>,
    v: Tensor<2>,
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    pos: usize,
    slot: CacheSlot<'_>,
) -> Tensor<2> {
    let [b, kv, alloc, d] = slot.keys.dims();
    let [bq, hd] = q.dims();
    let half = d / 2;
    let heads = hd / d;
    assert!(
        bq == b && hd == heads * d && k.dims() == [b, kv * d] && v.dims() == [b, kv * d],
        "rope_append: q {:?}, k {:?}, v {:?} do not fit the cache {:?}",
        q.dims(),
        k.dims(),
        v.dims(),
        slot.keys.dims()
    );
    assert!(
        pos < alloc && pos < cos.dims()[0] && cos.dims()[1] == half,
        "rope_append: position {pos}"
    );
    let q = cube(q, "rope_append q");
    let keys = cube(slot.keys.clone(), "rope_append keys");
    let values = cube(slot.values.clone(), "rope_append values");
    // Keep the (possibly copied) contiguous cache tensors: the kernel writes into them.
    *slot.keys = Tensor::from_primitive::<Cube>(keys.clone());
    *slot.values = Tensor::from_primitive::<Cube>(values.clone());
    let q_out = empty_like(&q, Shape::new([b, hd]));
    let total = b * (heads + kv) * half;
    let dim = CubeDim::new_1d(ROW_WG as u32);
    let count = cubecl::calculate_cube_count_elemwise(&q.client, total, dim);
    unsafe {
        rope_append_kernel::launch_unchecked(
            &q.client,
            count,
            dim,
            q.clone().into_buffer_arg(),
            cube(k, "rope_append k").into_buffer_arg(),
            cube(v, "rope_append v").into_buffer_arg(),
            cube(cos.clone(), "rope cos").into_buffer_arg(),
            cube(sin.clone(), "rope sin").into_buffer_arg(),
            q_out.clone().into_buffer_arg(),
            keys.into_buffer_arg(),
            values.into_buffer_arg(),
            b,
            heads,
            kv,
            half,
            pos,
            alloc,
        );
    }
    Tensor::from_primitive::<Cube>(q_out)
}

/// Softmax attention of one query position per sequence over the first `t` cached positions: `q: [b, H·d]`,
/// `keys`, `values`: `[b, K, A, d]` (`K` dividing `H`, `t ≤ A`) → `[b, H·d]`, scores scaled by `1/√d`.
///
/// # Panics
///
/// If the shapes disagree or `t` is 0.
pub fn attention(q: Tensor<2>, keys: &Tensor<4>, values: &Tensor<4>, t: usize) -> Tensor<2> {
    let [b, kv, alloc, d] = keys.dims();
    let [bq, hd] = q.dims();
    let heads = hd / d.max(1);
    assert!(
        bq == b && hd == heads * d && heads % kv == 0 && values.dims() == keys.dims() && 0 < t && t <= alloc,
        "attention: q {:?}, cache {:?}, t = {t}",
        q.dims(),
        keys.dims()
    );
    let q = cube(q, "attention q");
    let out = empty_like(&q, Shape::new([b, hd]));
    unsafe {
        attention_kernel::launch_unchecked(
            &q.client,
            CubeCount::Static((b * heads) as u32, 1, 1),
            CubeDim::new_1d(ATT_WG as u32),
            q.clone().into_buffer_arg(),
            cube(keys.clone(), "attention keys").into_buffer_arg(),
            cube(values.clone(), "attention values").into_buffer_arg(),
            out.clone().into_buffer_arg(),
            heads,
            kv,
            t,
            alloc,
            (d as f32).sqrt(),
            d,
        );
    }
    Tensor::from_primitive::<Cube>(out)
}

/// `silu(g) · u` elementwise: `g`, `u`: `[r, f]` → `[r, f]`.
pub fn silu_mul(g: Tensor<2>, u: Tensor<2>) -> Tensor<2> {
    let [r, f] = g.dims();
    assert_eq!(u.dims(), [r, f], "silu_mul: g and u differ in shape");
    let g = cube(g, "silu_mul g");
    let out = empty_like(&g, Shape::new([r, f]));
    let len = r * f;
    if len > 0 {
        let dim = CubeDim::new_1d(ROW_WG as u32);
        let count = cubecl::calculate_cube_count_elemwise(&g.client, len, dim);
        unsafe {
            silu_mul_kernel::launch_unchecked(
                &g.client,
                count,
                dim,
                g.clone().into_buffer_arg(),
                cube(u, "silu_mul u").into_buffer_arg(),
                out.clone().into_buffer_arg(),
                len,
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
