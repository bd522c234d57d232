//! The integer dot products under every quantized kernel: weight integers (decoded to i16) times 16-bit
//! activations, products summed in i32, per block or sub-block, scaled and accumulated in f32.
//!
//! Each function has a portable form, written as fixed-size loops of `i32` products of `i16` pairs, a form
//! in SSE2 intrinsics on x86_64 (`pmaddwd`, which LLVM does not reliably find from the loops), and on
//! wasm32 with `simd128` one in `core::arch::wasm32` intrinsics (`i32x4.dot_i16x8_s`, weights widened by
//! `i16x8.extend_*_i8x16_s` where they are decoded in registers).
//!
//! Overflow: weight integers are at most 128 in magnitude (`Q8_0` −128…127, `IQ4` values ±127, the others
//! smaller) and activations at most 32767, so a product is below 2²², a 32-element sum below 2²⁷ and a
//! 16-element one below 2²⁶: i32 holds them with room to spare. Sub-block scales (up to 128 for `Q6_K`,
//! 63 for `Q4_K`/`Q5_K`) would not fit on top of that for a whole super-block (16 · 2²⁶ · 2⁷ = 2³⁷), so
//! each sub-block's i32 sum is converted to f32 and scaled there (exact up to one f32 rounding).

/// `Σ a[i]·b[i]` over 32 elements.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
pub fn dot32(a: &[i16; 32], b: &[i16; 32]) -> i32 {
    lanes32(a, b).iter().sum()
}

/// The eight `pmaddwd` lanes of `a · b` over 32 elements: lane `i` sums the pairs `2i, 2i + 1` of each
/// 16-element half.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
fn lanes32(a: &[i16; 32], b: &[i16; 32]) -> [i32; 8] {
    let mut s = [0i32; 8];
    for (a, b) in a.as_chunks::<16>().0.iter().zip(b.as_chunks::<16>().0) {
        let p = lanes16(a, b);
        for i in 0..8 {
            s[i] += p[i];
        }
    }
    s
}

/// The eight `pmaddwd` lanes of `a · b` over 16 elements.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
fn lanes16(a: &[i16; 16], b: &[i16; 16]) -> [i32; 8] {
    core::array::from_fn(|i| {
        i32::from(a[2 * i]) * i32::from(b[2 * i]) + i32::from(a[2 * i + 1]) * i32::from(b[2 * i + 1])
    })
}

#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
fn hsum8(v: [f32; 8]) -> f32 {
    ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
}

/// `Σ_j sc[j] · Σ_{i<16} a[16j + i]·b[16j + i]` over a 256-element super-block with one scale per 16, each
/// 16-element sum exact in i32 and scaled in f32.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
pub fn dot256_scaled(a: &[i16; 256], b: &[i16; 256], sc: &[i16; 16]) -> f32 {
    let mut acc = [0.0f32; 8];
    for ((a, b), &sc) in a.as_chunks::<16>().0.iter().zip(b.as_chunks::<16>().0).zip(sc) {
        let (p, s) = (lanes16(a, b), f32::from(sc));
        for i in 0..8 {
            acc[i] += p[i] as f32 * s;
        }
    }
    hsum8(acc)
}

/// `Σ_b wd[b]·xd[b]·(wq[b] · xq[b])` over matching 32-element blocks.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
#[inline(always)]
pub fn dot_blocks32(wq: &[[i16; 32]], wd: &[f32], xq: &[[i16; 32]], xd: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (((wq, wd), xq), xd) in wq.iter().zip(wd).zip(xq).zip(xd) {
        let (p, s) = (lanes32(wq, xq), wd * xd);
        for i in 0..8 {
            acc[i] += p[i] as f32 * s;
        }
    }
    hsum8(acc)
}

/// `Σ_b xd[b]·d_b·Σ_j sc_j·(q_j · xq_j)` over matching super-blocks (the part without minimums).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
#[inline(always)]
pub fn dot_blocks256(w: &[Block], wd: &[(f32, f32)], xq: &[[i16; 256]], xd: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (((w, &(d, _)), xq), xd) in w.iter().zip(wd).zip(xq).zip(xd) {
        acc += xd * d * dot256_scaled(&w.q, xq, &w.sc);
    }
    acc
}

/// x86_64: SSE2 `pmaddwd` (baseline there, so in both the SSE2 and the AVX2 build of the kernels; LLVM
/// does not find it from the portable loops above without shuffling lanes around it).
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::*;

    /// Eight i16 at `p[0..8]` (the slice length is checked).
    #[inline(always)]
    fn load(p: &[i16]) -> __m128i {
        assert!(p.len() >= 8);
        // SAFETY: 16 readable bytes at `p` (checked above); `loadu` reads unaligned.
        unsafe { _mm_loadu_si128(p.as_ptr().cast::<__m128i>()) }
    }

    /// The four i32 partial sums of `a · b` over 16 elements.
    #[inline(always)]
    fn madd16(a: &[i16], b: &[i16]) -> __m128i {
        let (a0, a1, b0, b1) = (load(&a[..8]), load(&a[8..16]), load(&b[..8]), load(&b[8..16]));
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        unsafe { _mm_add_epi32(_mm_madd_epi16(a0, b0), _mm_madd_epi16(a1, b1)) }
    }

    #[inline(always)]
    fn madd32(a: &[i16; 32], b: &[i16; 32]) -> __m128i {
        let (lo, hi) = (madd16(&a[..16], &b[..16]), madd16(&a[16..], &b[16..]));
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        unsafe { _mm_add_epi32(lo, hi) }
    }

    #[inline(always)]
    fn hsum_f(v: __m128) -> f32 {
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        unsafe {
            let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            let v = _mm_add_ss(v, _mm_shuffle_ps::<1>(v, v));
            _mm_cvtss_f32(v)
        }
    }

    /// See the portable form.
    #[inline(always)]
    pub fn dot32(a: &[i16; 32], b: &[i16; 32]) -> i32 {
        let v = madd32(a, b);
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        unsafe {
            let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
            let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b10_11_00_01>(v));
            _mm_cvtsi128_si32(v)
        }
    }

    /// See the portable form.
    #[inline(always)]
    pub fn dot256_scaled(a: &[i16; 256], b: &[i16; 256], sc: &[i16; 16]) -> f32 {
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        let mut acc = unsafe { _mm_setzero_ps() };
        for ((a, b), &s) in a.as_chunks::<16>().0.iter().zip(b.as_chunks::<16>().0).zip(sc) {
            let p = madd16(a, b);
            // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
            acc = unsafe { _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(f32::from(s)))) };
        }
        hsum_f(acc)
    }

    /// See the portable form.
    #[inline(always)]
    pub fn dot_blocks32(wq: &[[i16; 32]], wd: &[f32], xq: &[[i16; 32]], xd: &[f32]) -> f32 {
        // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
        let mut acc = unsafe { _mm_setzero_ps() };
        for (((wq, wd), xq), xd) in wq.iter().zip(wd).zip(xq).zip(xd) {
            let p = madd32(wq, xq);
            // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has it).
            acc = unsafe { _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(wd * xd))) };
        }
        hsum_f(acc)
    }
}

#[cfg(target_arch = "x86_64")]
pub use sse2::{dot_blocks32, dot32, dot256_scaled};

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod simd {
    use super::Block;
    pub use core::arch::wasm32::v128;
    use core::arch::wasm32::*;

    /// The first 16 bytes of `b` (which must have them; the slice length is checked).
    #[inline(always)]
    pub fn load16<T: Copy>(b: &[T]) -> v128 {
        assert!(size_of_val(b) >= 16);
        // SAFETY: at least 16 readable bytes at `b` (checked above); `v128_load` reads unaligned.
        unsafe { v128_load(b.as_ptr().cast::<v128>()) }
    }

    /// `v` into the first 16 bytes of `q` (which must have them; the slice length is checked).
    #[inline(always)]
    pub fn store16<T: Copy>(q: &mut [T], v: v128) {
        assert!(size_of_val(q) >= 16);
        // SAFETY: at least 16 writable bytes at `q` (checked above); `v128_store` writes unaligned.
        unsafe { v128_store(q.as_mut_ptr().cast::<v128>(), v) }
    }

    /// The 16 i8 lanes of `v` widened into `q[0..16]`.
    #[inline(always)]
    pub fn store_widened(q: &mut [i16], v: v128) {
        store16(&mut q[..8], i16x8_extend_low_i8x16(v));
        store16(&mut q[8..16], i16x8_extend_high_i8x16(v));
    }

    /// The i32 lanes of `Σ w·x` over 16 elements (four partial sums): `w` 16 i8 lanes (decoded weights),
    /// `x` 16 i16 activations.
    #[inline(always)]
    pub fn dot16(w: v128, x: &[i16]) -> v128 {
        let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(w), load16(&x[..8]));
        let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(w), load16(&x[8..16]));
        i32x4_add(lo, hi)
    }

    /// The i32 lanes of `Σ a·b` over 16 i16 elements each.
    #[inline(always)]
    fn dot16_i16(a: &[i16], b: &[i16]) -> v128 {
        let lo = i32x4_dot_i16x8(load16(&a[..8]), load16(&b[..8]));
        let hi = i32x4_dot_i16x8(load16(&a[8..16]), load16(&b[8..16]));
        i32x4_add(lo, hi)
    }

    /// Four f16 (the low 16 bits of each lane) widened exactly: `super::super::f16_bits_to_f32` in lanes.
    #[inline(always)]
    pub fn f16x4_to_f32x4(h: v128) -> v128 {
        let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
        let em = v128_and(h, u32x4_splat(0x7fff));
        let v = f32x4_mul(i32x4_shl(em, 13), f32x4_splat(f32::from_bits(0x7780_0000)));
        let special = v128_or(i32x4_shl(em, 13), u32x4_splat(0x7f80_0000));
        let v = v128_bitselect(special, v, i32x4_ge(em, u32x4_splat(0x7c00)));
        v128_or(v, sign)
    }

    #[inline(always)]
    pub fn hsum(v: v128) -> i32 {
        let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
        let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
        i32x4_extract_lane::<0>(v)
    }

    /// The four partial sums of `a · b` over 32 elements.
    #[inline(always)]
    fn dot32_v(a: &[i16; 32], b: &[i16; 32]) -> v128 {
        i32x4_add(dot16_i16(&a[..16], &b[..16]), dot16_i16(&a[16..], &b[16..]))
    }

    /// The four f32 partial sums of `Σ_j sc_j·(a_j · b_j)` over 256 elements (each `a_j · b_j` exact in i32
    /// lanes, scaled in f32: see the module's overflow note).
    #[inline(always)]
    fn dot256_scaled_v(a: &[i16; 256], b: &[i16; 256], sc: &[i16; 16]) -> v128 {
        let mut acc = f32x4_splat(0.0);
        let (a, b) = (a.as_chunks::<16>().0, b.as_chunks::<16>().0);
        for ((a, b), &s) in a.iter().zip(b).zip(sc) {
            let p = f32x4_convert_i32x4(dot16_i16(a, b));
            acc = f32x4_add(acc, f32x4_mul(p, f32x4_splat(f32::from(s))));
        }
        acc
    }

    #[inline(always)]
    pub fn dot32(a: &[i16; 32], b: &[i16; 32]) -> i32 {
        hsum(dot32_v(a, b))
    }

    #[inline(always)]
    pub fn dot256_scaled(a: &[i16; 256], b: &[i16; 256], sc: &[i16; 16]) -> f32 {
        hsum_f(dot256_scaled_v(a, b, sc))
    }

    #[inline(always)]
    pub fn hsum_f(v: v128) -> f32 {
        let v = f32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
        let v = f32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
        f32x4_extract_lane::<0>(v)
    }

    /// Block scales applied in f32 lanes, one horizontal sum per row rather than per block.
    #[inline(always)]
    pub fn dot_blocks32(wq: &[[i16; 32]], wd: &[f32], xq: &[[i16; 32]], xd: &[f32]) -> f32 {
        let mut acc = f32x4_splat(0.0);
        for (((wq, wd), xq), xd) in wq.iter().zip(wd).zip(xq).zip(xd) {
            let p = f32x4_convert_i32x4(dot32_v(wq, xq));
            acc = f32x4_add(acc, f32x4_mul(p, f32x4_splat(wd * xd)));
        }
        hsum_f(acc)
    }

    #[inline(always)]
    pub fn dot_blocks256(w: &[Block], wd: &[(f32, f32)], xq: &[[i16; 256]], xd: &[f32]) -> f32 {
        let mut acc = f32x4_splat(0.0);
        for (((w, &(d, _)), xq), xd) in w.iter().zip(wd).zip(xq).zip(xd) {
            let p = dot256_scaled_v(&w.q, xq, &w.sc);
            acc = f32x4_add(acc, f32x4_mul(p, f32x4_splat(xd * d)));
        }
        hsum_f(acc)
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use simd::{dot_blocks32, dot_blocks256, dot32, dot256_scaled};

use super::kquants::Block;

/// The portable forms, on every target, exact in i64 (the tests compare the SIMD ones against them).
pub mod portable {
    /// See [`super::dot32`].
    pub fn dot32(a: &[i16; 32], b: &[i16; 32]) -> i64 {
        a.iter().zip(b).map(|(&a, &b)| i64::from(a) * i64::from(b)).sum()
    }

    /// See [`super::dot256_scaled`] (here without any rounding).
    pub fn dot256_scaled(a: &[i16; 256], b: &[i16; 256], sc: &[i16; 16]) -> i64 {
        let (a, b) = (a.as_chunks::<16>().0, b.as_chunks::<16>().0);
        a.iter()
            .zip(b)
            .zip(sc)
            .map(|((a, b), &s)| {
                i64::from(s)
                    * a.iter()
                        .zip(b)
                        .map(|(&a, &b)| i64::from(a) * i64::from(b))
                        .sum::<i64>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest magnitudes of every format at once: no i32 overflow, the f32 scaling within rounding.
    #[test]
    fn simd_and_portable_forms_agree_at_the_extremes() {
        let a: [i16; 256] = core::array::from_fn(|i| [-128, 127, -1, 5][i % 4]);
        let b: [i16; 256] = core::array::from_fn(|i| [-32767, 32767, 32767, -3][(i / 3) % 4]);
        let sc: [i16; 16] = core::array::from_fn(|j| [-128, 127, 63, -32][j % 4]);
        let exact = portable::dot256_scaled(&a, &b, &sc) as f64;
        let got = f64::from(dot256_scaled(&a, &b, &sc));
        assert!(
            (got - exact).abs() <= 1e-6 * exact.abs().max(1.0),
            "{got} vs {exact}"
        );
        // All of one sign: the largest sum any format can reach.
        let (big, top) = ([-128i16; 256], [-32767i16; 256]);
        let exact = portable::dot256_scaled(&big, &top, &[-128; 16]) as f64;
        let got = f64::from(dot256_scaled(&big, &top, &[-128; 16]));
        assert!((got - exact).abs() <= 1e-6 * exact.abs(), "{got} vs {exact}");
        let (a32, b32) = (a.as_chunks::<32>().0[0], b.as_chunks::<32>().0[0]);
        assert_eq!(i64::from(dot32(&a32, &b32)), portable::dot32(&a32, &b32));
        let (a32, b32) = (big.as_chunks::<32>().0[0], top.as_chunks::<32>().0[0]);
        assert_eq!(i64::from(dot32(&a32, &b32)), portable::dot32(&a32, &b32));
    }
}
