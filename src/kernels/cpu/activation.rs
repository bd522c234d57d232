//! The decoder's transcendental element-wise ops on the CPU: the SiLU gate times the up projection, the
//! vision encoders' GELUs (tanh and quick) and the attention softmax, over f32 slices, with an `exp` that
//! vectorizes.
//!
//! Why kiln's own: burn-flex computes `exp` through libm's scalar `expf` (a call per element on wasm32),
//! which was 7–8 % of a SmolLM2 prefill in Chromium (CPU profile of a 64- and a 512-token prompt), and its
//! softmax is five passes over the scores (max, subtract, exp, sum, divide), each allocating. Here both
//! are one pass per row, written so LLVM vectorizes them (wasm32 `simd128`, x86 SSE/AVX).
//!
//! Accuracy: [`exp`] is within 2 ulp of the exact value over the range where `f32` results are normal
//! (tested against f64 in `tests/kernels_cpu.rs`), and exactly 0 below it (where `expf` gives
//! subnormals, at most 1.2e-38), so a softmax weight differs from burn's by a few ulp.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use core::arch::wasm32::*;

/// `log₂ e`.
const LOG2E: f32 = std::f32::consts::LOG2_E;

/// `ln 2` in two parts (Cody–Waite): `C1` has few enough bits that `n·C1` is exact for `|n| ≤ 128`.
const LN2_C1: f32 = 0.693_359_4;
const LN2_C2: f32 = -2.121_944_4e-4;

/// `1.5 · 2²³`: adding and subtracting it rounds an f32 below 2²² to the nearest integer.
const ROUND: f32 = 12_582_912.0;

/// Below this `exp` is 0 (`e^-87.33` is the smallest normal f32); above [`MAX`] it saturates there.
const MIN: f32 = -87.33;
const MAX: f32 = 88.37;

/// Cephes' `expf` polynomial for `(eʳ − 1 − r) / r²`, highest degree first.
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `eˣ` for finite `x` (`−∞` gives 0, as masked attention scores need), branch-free: `2ⁿ · eʳ` with
/// `n = round(x·log₂ e)`, `r = x − n·ln 2` (`|r| ≤ ln 2 / 2`) and Cephes' degree-6 polynomial for `eʳ`.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let below = x < MIN;
    let x = if below {
        MIN
    } else if x > MAX {
        MAX
    } else {
        x
    };
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_C1 - n * LN2_C2;
    let mut p = P[0];
    for c in &P[1..] {
        p = p * r + c;
    }
    let e = p * r * r + r + 1.0;
    // `n ∈ [−126, 128]`: 2ⁿ as f32 bits, split in two factors so that n = 128 does not overflow.
    let n = n as i32;
    let half = n / 2;
    let a = f32::from_bits(((half + 127) as u32) << 23);
    let b = f32::from_bits(((n - half + 127) as u32) << 23);
    if below { 0.0 } else { e * a * b }
}

/// [`exp`] of four lanes, in wasm `simd128` (LLVM does not vectorize the scalar form there): the same
/// operations in the same order, so the same bits.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn exp4(x: v128) -> v128 {
    let below = f32x4_lt(x, f32x4_splat(MIN));
    let x = f32x4_pmin(f32x4_pmax(x, f32x4_splat(MIN)), f32x4_splat(MAX));
    let round = f32x4_splat(ROUND);
    let n = f32x4_sub(f32x4_add(f32x4_mul(x, f32x4_splat(LOG2E)), round), round);
    let r = f32x4_sub(
        f32x4_sub(x, f32x4_mul(n, f32x4_splat(LN2_C1))),
        f32x4_mul(n, f32x4_splat(LN2_C2)),
    );
    let mut p = f32x4_splat(P[0]);
    for c in &P[1..] {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(*c));
    }
    let e = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(p, r), r), r), f32x4_splat(1.0));
    let n = i32x4_trunc_sat_f32x4(n);
    // Signed halving rounding toward zero, as `n / 2` in the scalar form.
    let half = i32x4_shr(i32x4_add(n, u32x4_shr(n, 31)), 1);
    let bias = i32x4_splat(127);
    let a = i32x4_shl(i32x4_add(half, bias), 23);
    let b = i32x4_shl(i32x4_add(i32x4_sub(n, half), bias), 23);
    let v = f32x4_mul(f32x4_mul(e, a), b);
    v128_andnot(v, below)
}

/// `f(gate, up, out)` for an element-wise gated activation ([`silu_mul`], [`gelu_tanh_mul`]). In the
/// `threads` build a large one (a prefill's `[s, intermediate]`: 512 × 1536 for SmolLM2) is cut into pieces
/// of [`super::rows::PIECE`] elements by [`super::rows::for_rows`], run on the [`super::team`]; each
/// element's value is the one-thread value.
pub fn gated(f: fn(&[f32], &[f32], &mut [f32]), gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    let dst = super::split::Disjoint(out.as_mut_ptr());
    // Pieces of `rows::PIECE` elements, a multiple of the 4 SIMD lanes, so every element goes through the
    // code path it takes unsplit (only the last piece has the scalar tail).
    super::rows::for_rows(super::rows::threads(), out.len(), 1, &|range| {
        // SAFETY: each range is within `out` and handed to one piece only, which writes only its own
        // elements; `out` outlives `for_rows`.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.at(range.start), range.len()) };
        f(&gate[range.clone()], &up[range], o);
    });
}

/// `out[i] = silu(gate[i]) · up[i]`, `silu(g) = g / (1 + e⁻ᵍ)`; all three the same length.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let done = {
        let one = f32x4_splat(1.0);
        let (g4, u4, o4) = (
            gate.as_chunks::<4>().0,
            up.as_chunks::<4>().0,
            out.as_chunks_mut::<4>().0,
        );
        for ((o, g), u) in o4.iter_mut().zip(g4).zip(u4) {
            let g = load(g);
            let s = f32x4_div(g, f32x4_add(one, exp4(f32x4_neg(g))));
            store(o, f32x4_mul(s, load(u)));
        }
        g4.len() * 4
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let done = 0;
    for ((o, &g), &u) in out[done..].iter_mut().zip(&gate[done..]).zip(&up[done..]) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

/// `out[i] = gelu_tanh(gate[i]) · up[i]`, the tanh approximation of GELU (PyTorch's `approximate="tanh"`,
/// Gemma's `gelu_pytorch_tanh`): `0.5·g·(1 + tanh(z))` with `z = √(2/π)·(g + 0.044715·g³)`, computed as
/// `g / (1 + e^(−2z))` (the same value) with the vectorized `exp`; all three the same length.
pub fn gelu_tanh_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    // −2·√(2/π) and the cubic coefficient.
    const K: f32 = -1.595_769;
    const C: f32 = 0.044_715;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let done = {
        let (one, k, c) = (f32x4_splat(1.0), f32x4_splat(K), f32x4_splat(C));
        let (g4, u4, o4) = (
            gate.as_chunks::<4>().0,
            up.as_chunks::<4>().0,
            out.as_chunks_mut::<4>().0,
        );
        for ((o, g), u) in o4.iter_mut().zip(g4).zip(u4) {
            let g = load(g);
            let inner = f32x4_mul(g, f32x4_add(one, f32x4_mul(c, f32x4_mul(g, g))));
            let s = f32x4_div(g, f32x4_add(one, exp4(f32x4_mul(k, inner))));
            store(o, f32x4_mul(s, load(u)));
        }
        g4.len() * 4
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let done = 0;
    for ((o, &g), &u) in out[done..].iter_mut().zip(&gate[done..]).zip(&up[done..]) {
        *o = g / (1.0 + exp(K * g * (1.0 + C * g * g))) * u;
    }
}

/// `f(x, out)` for an element-wise activation ([`gelu_tanh`], [`quick_gelu`]), split across the team in
/// the `threads` build as [`gated`] is.
pub fn unary(f: fn(&[f32], &mut [f32]), x: &[f32], out: &mut [f32]) {
    assert!(x.len() == out.len());
    let dst = super::split::Disjoint(out.as_mut_ptr());
    super::rows::for_rows(super::rows::threads(), out.len(), 1, &|range| {
        // SAFETY: as in `gated`: each range is within `out` and written by one piece only.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.at(range.start), range.len()) };
        f(&x[range], o);
    });
}

/// `out[i] = x[i] / (1 + e^(k·p(x[i])))` with `p(x) = x·(1 + c·x²)`: GELU's tanh approximation for
/// `k = −2·√(2/π)`, `c = 0.044715` ([`gelu_tanh_mul`] without the product), quick GELU (`x·σ(1.702·x)`)
/// for `k = −1.702`, `c = 0`.
#[inline(always)]
fn sigmoid_gate<const K: u32, const C: u32>(x: &[f32], out: &mut [f32]) {
    assert!(x.len() == out.len());
    let (k, c) = (f32::from_bits(K), f32::from_bits(C));
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let done = {
        let (one, kv, cv) = (f32x4_splat(1.0), f32x4_splat(k), f32x4_splat(c));
        let (x4, o4) = (x.as_chunks::<4>().0, out.as_chunks_mut::<4>().0);
        for (o, x) in o4.iter_mut().zip(x4) {
            let g = load(x);
            let inner = f32x4_mul(g, f32x4_add(one, f32x4_mul(cv, f32x4_mul(g, g))));
            store(o, f32x4_div(g, f32x4_add(one, exp4(f32x4_mul(kv, inner)))));
        }
        x4.len() * 4
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let done = 0;
    for (o, &g) in out[done..].iter_mut().zip(&x[done..]) {
        *o = g / (1.0 + exp(k * g * (1.0 + c * g * g)));
    }
}

/// `out[i] = gelu_tanh(x[i])` (PyTorch's `approximate="tanh"`), as [`gelu_tanh_mul`] computes the gate.
pub fn gelu_tanh(x: &[f32], out: &mut [f32]) {
    sigmoid_gate::<{ (-1.595_769_f32).to_bits() }, { 0.044_715_f32.to_bits() }>(x, out);
}

/// `out[i] = x[i] · σ(1.702·x[i])` (CLIP's `quick_gelu`).
pub fn quick_gelu(x: &[f32], out: &mut [f32]) {
    sigmoid_gate::<{ (-1.702_f32).to_bits() }, { 0.0_f32.to_bits() }>(x, out);
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn load(v: &[f32; 4]) -> v128 {
    // SAFETY: 16 readable bytes; `v128_load` has no alignment requirement.
    unsafe { v128_load(v.as_ptr().cast()) }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn store(o: &mut [f32; 4], v: v128) {
    // SAFETY: 16 writable bytes; `v128_store` has no alignment requirement.
    unsafe { v128_store(o.as_mut_ptr().cast(), v) }
}

/// `e^(v − max)` of each value in place, returning their sum.
#[inline(always)]
fn exp_shifted(row: &mut [f32], max: f32) -> f32 {
    #[allow(unused_mut, reason = "only the wasm simd128 path writes it")]
    let mut sums = [0.0f32; 8];
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let done = {
        let (m, mut acc) = (f32x4_splat(max), f32x4_splat(0.0));
        let chunks = row.as_chunks_mut::<4>().0;
        for c in chunks.iter_mut() {
            let e = exp4(f32x4_sub(load(c), m));
            store(c, e);
            acc = f32x4_add(acc, e);
        }
        store(sums.first_chunk_mut::<4>().expect("4 lanes"), acc);
        chunks.len() * 4
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let done = 0;
    let (chunks, tail) = row[done..].as_chunks_mut::<8>();
    for c in chunks {
        for (s, v) in sums.iter_mut().zip(c) {
            *v = exp(*v - max);
            *s += *v;
        }
    }
    let mut sum: f32 = sums.iter().sum();
    for v in tail {
        *v = exp(*v - max);
        sum += *v;
    }
    sum
}

/// Softmax of each row of `cols` values of `x`, in place (`x.len()` a multiple of `cols`). A row whose
/// values are all `−∞` comes out as NaN, as burn's does.
pub fn softmax_rows(x: &mut [f32], cols: usize) {
    if cols == 0 {
        return;
    }
    for row in x.chunks_exact_mut(cols) {
        // Eight running maxima by comparison (`f32::max` is IEEE maxNum, which does not vectorize).
        let mut lanes = [f32::NEG_INFINITY; 8];
        let (chunks, tail) = row.as_chunks::<8>();
        for c in chunks {
            for (m, &v) in lanes.iter_mut().zip(c) {
                *m = if v > *m { v } else { *m };
            }
        }
        let max = lanes
            .iter()
            .chain(tail)
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        let inv = 1.0 / exp_shifted(row, max);
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}
