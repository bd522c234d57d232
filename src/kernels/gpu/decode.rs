//! Fused kernels for one decode step (one new position per sequence) on wgpu: each replaces the chain of
//! burn kernels the generic path launches for the same step (RMSNorm alone is six), so a step takes about
//! eleven dispatches per layer instead of some sixty.
//!
//! Shapes: `b` sequences, `h` hidden size, `H` / `K` query / key-value heads, `d` head dim (even), `T`
//! positions cached after this step's append, `A ≥ T` positions allocated in the cache.
//!
//! - [`rms_norm`]: `x: [r, h]` → `[r, h]`; [`add_rms_norm`] first adds a residual and returns the sum too.
//!   One workgroup per row: each thread sums the squares of a strided share of the row, one barrier, then
//!   every thread adds the partial sums and writes its share of the outputs.
//! - [`attention_append`]: rope at position `pos` on `q: [b, H·d]` and `k: [b, K·d]`, the rotated keys
//!   and `v: [b, K·d]` written into the cache `[b, K, A, d]` at `pos`, and attention of each query head
//!   over positions `0..=pos` → `[b, H·d]`, grouped-query heads reading their shared key-value head in
//!   place (no expanded copy). One workgroup of `ATT_WG` threads per (sequence, head): it rotates its
//!   query itself; thread `j` takes cached positions `j, j + ATT_WG, …` below `pos` with an online
//!   softmax (running max, sum and `d` weighted values in registers), thread 0 also the new position from
//!   the launch's own key and value (no workgroup reads what another writes); then one barrier and the
//!   merge of the `ATT_WG` partial states in shared memory (`ATT_WG · (d + 2)` floats). The first query
//!   head of each key-value head writes that head's cache entry.
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

/// One online-softmax step of a thread's state (`m[0]` running max, `m[1]` running sum, `o` weighted
/// values) for a new score: rescales the state to the new max and returns the new position's weight,
/// which the caller adds to `m[1]` and times the position's values to `o`.
#[cube]
fn online(score: f32, m: &mut Array<f32>, o: &mut Array<f32>, #[comptime] d: usize) -> f32 {
    if score > m[0] {
        let c = (m[0] - score).exp();
        m[1] *= c;
        #[unroll]
        for j in 0..d {
            o[j] *= c;
        }
        m[0] = score;
    }
    let e = (score - m[0]).exp();
    m[1] += e;
    e
}

#[cube(launch_unchecked)]
fn attend_append_kernel(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    cos: &[f32],
    sin: &[f32],
    keys: &mut [f32],
    values: &mut [f32],
    out: &mut [f32],
    heads: usize,
    kv_heads: usize,
    pos: usize,
    alloc: usize,
    sqrt_d: f32,
    #[comptime] d: usize,
) {
    let half = comptime![d / 2];
    let bh = CUBE_POS;
    let bi = bh / heads;
    let head = bh % heads;
    let group = heads / kv_heads;
    let kh = head / group;
    let tid = UNIT_POS as usize;
    let qo = bh * d;
    let ko = (bi * kv_heads + kh) * d;
    let cb = pos * half;
    let kv0 = (bi * kv_heads + kh) * alloc * d;
    // This head's query, rotated.
    let mut qv = Array::<f32>::new(d);
    let mut o = Array::<f32>::new(d);
    #[unroll]
    for i in 0..half {
        let c = cos[cb + i];
        let s = sin[cb + i];
        let x1 = q[qo + i];
        let x2 = q[qo + i + half];
        qv[i] = x1 * c - x2 * s;
        qv[i + half] = x2 * c + x1 * s;
        o[i] = 0.0;
        o[i + half] = 0.0;
    }
    // The first query head of each key-value head writes the rotated key and the value at `pos`
    // (positions before `pos` are all anyone reads from the cache in this launch).
    if head == kh * group {
        let dst = kv0 + pos * d;
        let mut i = tid;
        while i < half {
            let c = cos[cb + i];
            let s = sin[cb + i];
            let x1 = k[ko + i];
            let x2 = k[ko + i + half];
            keys[dst + i] = x1 * c - x2 * s;
            keys[dst + i + half] = x2 * c + x1 * s;
            values[dst + i] = v[ko + i];
            values[dst + i + half] = v[ko + i + half];
            i += ATT_WG;
        }
    }
    // (running max, running sum); a finite "minus infinity": exp(m - score) is then 0, never NaN.
    let mut state = Array::<f32>::new(2usize);
    state[0] = f32::cast_from(tid) * 0.0 - 3.0e38;
    state[1] = 0.0;
    let mut p = tid;
    while p < pos {
        let at = kv0 + p * d;
        let mut dot = 0.0f32;
        #[unroll]
        for j in 0..d {
            dot += qv[j] * keys[at + j];
        }
        let e = online(dot / sqrt_d, &mut state, &mut o, d);
        #[unroll]
        for j in 0..d {
            o[j] += e * values[at + j];
        }
        p += ATT_WG;
    }
    // The new position, from this launch's own key (rotated here) and value.
    if tid == 0 {
        let mut dot = 0.0f32;
        #[unroll]
        for i in 0..half {
            let c = cos[cb + i];
            let s = sin[cb + i];
            let x1 = k[ko + i];
            let x2 = k[ko + i + half];
            dot += qv[i] * (x1 * c - x2 * s) + qv[i + half] * (x2 * c + x1 * s);
        }
        let e = online(dot / sqrt_d, &mut state, &mut o, d);
        #[unroll]
        for j in 0..d {
            o[j] += e * v[ko + j];
        }
    }
    let mut sm = Shared::<[f32]>::new_slice(ATT_WG);
    let mut sl = Shared::<[f32]>::new_slice(ATT_WG);
    let mut so = Shared::<[f32]>::new_slice(comptime![ATT_WG * d]);
    sm[tid] = state[0];
    sl[tid] = state[1];
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

/// Where [`attention_append`] writes: a layer's cache `[b, K, A, d]` (made contiguous in place if it
/// was not).
pub struct CacheSlot<'a> {
    pub keys: &'a mut Tensor<4>,
    pub values: &'a mut Tensor<4>,
}

/// One decode position's attention with its cache append: rotate-half rope at position `pos` (`cos`,
/// `sin`: `[max_pos, d/2]`) on `q: [b, H·d]` and `k: [b, K·d]`; the rotated keys and `v: [b, K·d]` written
/// into `slot` at `pos`; softmax attention (scores scaled by `1/√d`) of each rotated query head over
/// cached positions `0..pos` and the new one, reading key-value head `head / (H / K)` in place.
/// Returns `[b, H·d]`.
///
/// # Panics
///
/// If the shapes disagree (the cache must be `[b, K, A, d]` with `pos < A`, `pos < max_pos`, `K`
/// dividing `H`, `d` even).
pub fn attention_append(
    q: Tensor<2>,
    k: Tensor<2>,
    v: Tensor<2>,
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    pos: usize,
    slot: CacheSlot<'_>,
) -> Tensor<2> {
    let [b, kv, alloc, d] = slot.keys.dims();
    let [bq, hd] = q.dims();
    let heads = hd / d.max(1);
    assert!(
        bq == b
            && d % 2 == 0
            && hd == heads * d
            && heads % kv == 0
            && k.dims() == [b, kv * d]
            && v.dims() == [b, kv * d]
            && slot.values.dims() == slot.keys.dims(),
        "attention_append: q {:?}, k {:?}, v {:?} do not fit the cache {:?}",
        q.dims(),
        k.dims(),
        v.dims(),
        slot.keys.dims()
    );
    assert!(
        pos < alloc && pos < cos.dims()[0] && cos.dims()[1] == d / 2 && sin.dims() == cos.dims(),
        "attention_append: position {pos}"
    );
    let q = cube(q, "attention_append q");
    let keys = cube(slot.keys.clone(), "attention_append keys");
    let values = cube(slot.values.clone(), "attention_append values");
    // Keep the (possibly copied) contiguous cache tensors: the kernel writes into them.
    *slot.keys = Tensor::from_primitive::<Cube>(keys.clone());
    *slot.values = Tensor::from_primitive::<Cube>(values.clone());
    let out = empty_like(&q, Shape::new([b, hd]));
    if b > 0 {
        unsafe {
            attend_append_kernel::launch_unchecked(
                &q.client,
                CubeCount::Static((b * heads) as u32, 1, 1),
                CubeDim::new_1d(ATT_WG as u32),
                q.clone().into_buffer_arg(),
                cube(k, "attention_append k").into_buffer_arg(),
                cube(v, "attention_append v").into_buffer_arg(),
                cube(cos.clone(), "rope cos").into_buffer_arg(),
                cube(sin.clone(), "rope sin").into_buffer_arg(),
                keys.into_buffer_arg(),
                values.into_buffer_arg(),
                out.clone().into_buffer_arg(),
                heads,
                kv,
                pos,
                alloc,
                (d as f32).sqrt(),
                d,
            );
        }
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
