//! The 32-element block formats (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `IQ4_NL`) against [`Q16Rows`]
//! activations.
//!
//! Every such block decodes to 32 small integers `q` (|q| ≤ 128, held as i16) with `w = dw·q + mw` (`mw = 0` for the
//! symmetric formats), so one block of the product is `dw·dx·Σ q·qx + mw·sx` (`sx = dx·Σ qx`).
//!
//! Block layouts (`ggml-common.h`; `d`, `m` little-endian f16; element `j < 16` from the low nibble of
//! `qs[j]`, element `j + 16` from its high nibble):
//! - `Q4_0` (18 B): `d`, `qs[16]`; `q = nibble − 8`.
//! - `Q4_1` (20 B): `d`, `m`, `qs[16]`; `q = nibble`.
//! - `Q5_0` (22 B): `d`, `qh` (u32 LE: bit `j` is the fifth bit of element `j`), `qs[16]`; `q = v − 16`.
//! - `Q5_1` (24 B): `d`, `m`, `qh`, `qs[16]`; `q = v`.
//! - `Q8_0` (34 B): `d`, `q[32]` (i8).
//! - `IQ4_NL` (18 B): `d`, `qs[16]`; `q = KVALUES_IQ4NL[nibble]`.

#![allow(non_camel_case_types, reason = "named as the GGML types")]

use super::act::{Prepared, Q16Rows};
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
use super::dot::dot32;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use super::dot::simd::{self, v128};
use super::f16_at;
use super::panel;
use crate::loader::quant::{BlockFormat, iq, legacy};
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use core::arch::wasm32::*;

/// The 16 values of an `IQ4_NL`/`IQ4_XS` nibble (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// A 32-element format of `BB`-byte blocks.
///
/// Every such block starts with `dw` (f16), followed by `mw` (f16) where there is a minimum.
pub trait Format<const BB: usize> {
    /// Whether the block has `mw` at byte 2.
    const HAS_MIN: bool;

    /// For the plain 4-bit formats, `(byte of qs, offset)` with `q = nibble − offset`: their values are
    /// taken as i16 lanes straight from the nibbles, on wasm ([`nib`]).
    const NIBBLES: Option<(usize, f32)> = None;

    /// Whether the native (not wasm) decode kernel takes its block products as a plain reduction over the
    /// decoded block (which LLVM keeps in registers) rather than the SSE2 `dot32` (which reloads it):
    /// chosen per format by measurement, the better one is up to 3× faster.
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    const REDUCE: bool = false;

    /// The block's 32 integers into `q`, returning `(dw, mw)`.
    fn decode(b: &[u8; BB], q: &mut [i16; 32]) -> (f32, f32);

    /// Whether [`Format::dequantize`] is the format's own (straight to f32, which vectorizes as one
    /// pass) rather than [`Format::decode`] followed by a widening.
    const DEQUANTIZE: bool = false;

    /// The block as 32 f32 values, where [`Format::DEQUANTIZE`] says so.
    #[inline(always)]
    fn dequantize(_b: &[u8; BB], _out: &mut [f32; 32]) {}

    /// The integers as two vectors of i8 lanes (elements 0..16, 16..32).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn decode_v(b: &[u8; BB]) -> (v128, v128);
}

/// Low and high nibbles of 16 bytes at `b[at..]`.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn nibbles_v<const BB: usize>(b: &[u8; BB], at: usize) -> (v128, v128) {
    let v = simd::load16(&b[at..]);
    (v128_and(v, u8x16_splat(0xf)), u8x16_shr(v, 4))
}

/// `0x10` in byte `j` where bit `j` of the 16-bit `h` is set.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn fifth_bits_v(h: u32) -> v128 {
    let bytes = i8x16_swizzle(
        u16x8_splat(h as u16),
        u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
    );
    let bits = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    v128_and(u8x16_eq(v128_and(bytes, bits), bits), u8x16_splat(0x10))
}

#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [i16; 32], offset: i16) {
    for j in 0..16 {
        q[j] = i16::from(qs[j] & 0xf) - offset;
        q[j + 16] = i16::from(qs[j] >> 4) - offset;
    }
}

/// `d·(nibble − offset) + mw` of 16 bytes of nibbles (low ones first) into 32 f32.
#[inline(always)]
fn nibbles_f32(qs: &[u8], out: &mut [f32; 32], d: f32, offset: f32, mw: f32) {
    let (lo, hi) = out.split_at_mut(16);
    let (lo, hi, qs) = (
        lo.as_chunks_mut::<8>().0,
        hi.as_chunks_mut::<8>().0,
        qs.as_chunks::<8>().0,
    );
    for ((lo, hi), b) in lo.iter_mut().zip(hi).zip(qs) {
        *lo = b.map(|b| d * (f32::from(b & 0xf) - offset) + mw);
        *hi = b.map(|b| d * (f32::from(b >> 4) - offset) + mw);
    }
}

/// `FIFTH_BITS[b][i]`: `0x10` where bit `i` of `b` is set (2 KiB).
static FIFTH_BITS: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if b & (1 << i) != 0 {
                t[b][i] = 0x10;
            }
            i += 1;
        }
        b += 1;
    }
    t
};

/// Q5 values: nibbles plus `0x10` where the element's bit of `qh` is set, looked up a byte of `qh` at a
/// time (there is no per-lane variable shift in 128-bit SIMD, and the per-element form does not vectorize;
/// nor does assembling the bytes in u64s, whose stores then stall the vector loads of the dot product).
#[inline(always)]
fn nibbles5(qh: u32, qs: &[u8], q: &mut [i16; 32], offset: i16) {
    let h = qh.to_le_bytes().map(|b| &FIFTH_BITS[usize::from(b)]);
    for j in 0..8 {
        q[j] = i16::from((qs[j] & 0xf) | h[0][j]) - offset;
        q[j + 8] = i16::from((qs[j + 8] & 0xf) | h[1][j]) - offset;
        q[j + 16] = i16::from((qs[j] >> 4) | h[2][j]) - offset;
        q[j + 24] = i16::from((qs[j + 8] >> 4) | h[3][j]) - offset;
    }
}

/// `Q4_0`.
pub struct Q4_0;
impl Format<{ legacy::Q4_0::BYTES }> for Q4_0 {
    const HAS_MIN: bool = false;
    const NIBBLES: Option<(usize, f32)> = Some((2, 8.0));
    #[inline(always)]
    fn decode(b: &[u8; legacy::Q4_0::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        nibbles(&b[2..18], q, 8);
        (f16_at(b, 0), 0.0)
    }
    const DEQUANTIZE: bool = true;
    #[inline(always)]
    fn dequantize(b: &[u8; legacy::Q4_0::BYTES], out: &mut [f32; 32]) {
        nibbles_f32(&b[2..18], out, f16_at(b, 0), 8.0, 0.0);
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; legacy::Q4_0::BYTES]) -> (v128, v128) {
        let (lo, hi) = nibbles_v(b, 2);
        let e = i8x16_splat(8);
        (i8x16_sub(lo, e), i8x16_sub(hi, e))
    }
}

/// `Q4_1`.
pub struct Q4_1;
impl Format<{ legacy::Q4_1::BYTES }> for Q4_1 {
    const HAS_MIN: bool = true;
    const NIBBLES: Option<(usize, f32)> = Some((4, 0.0));
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    const REDUCE: bool = true;
    #[inline(always)]
    fn decode(b: &[u8; legacy::Q4_1::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        nibbles(&b[4..20], q, 0);
        (f16_at(b, 0), f16_at(b, 2))
    }
    const DEQUANTIZE: bool = true;
    #[inline(always)]
    fn dequantize(b: &[u8; legacy::Q4_1::BYTES], out: &mut [f32; 32]) {
        nibbles_f32(&b[4..20], out, f16_at(b, 0), 0.0, f16_at(b, 2));
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; legacy::Q4_1::BYTES]) -> (v128, v128) {
        nibbles_v(b, 4)
    }
}

/// `Q5_0`.
pub struct Q5_0;
impl Format<{ legacy::Q5_0::BYTES }> for Q5_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn decode(b: &[u8; legacy::Q5_0::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        nibbles5(u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22], q, 16);
        (f16_at(b, 0), 0.0)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; legacy::Q5_0::BYTES]) -> (v128, v128) {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = nibbles_v(b, 6);
        let e = i8x16_splat(16);
        let lo = i8x16_sub(v128_or(lo, fifth_bits_v(qh)), e);
        let hi = i8x16_sub(v128_or(hi, fifth_bits_v(qh >> 16)), e);
        (lo, hi)
    }
}

/// `Q5_1`.
pub struct Q5_1;
impl Format<{ legacy::Q5_1::BYTES }> for Q5_1 {
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn decode(b: &[u8; legacy::Q5_1::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        nibbles5(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24], q, 0);
        (f16_at(b, 0), f16_at(b, 2))
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; legacy::Q5_1::BYTES]) -> (v128, v128) {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (lo, hi) = nibbles_v(b, 8);
        (v128_or(lo, fifth_bits_v(qh)), v128_or(hi, fifth_bits_v(qh >> 16)))
    }
}

/// `Q8_0`.
pub struct Q8_0;
impl Format<{ legacy::Q8_0::BYTES }> for Q8_0 {
    const HAS_MIN: bool = false;
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    const REDUCE: bool = true;
    #[inline(always)]
    fn decode(b: &[u8; legacy::Q8_0::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        for (q, &v) in q.iter_mut().zip(&b[2..34]) {
            *q = i16::from(v as i8);
        }
        (f16_at(b, 0), 0.0)
    }
    const DEQUANTIZE: bool = true;
    #[inline(always)]
    fn dequantize(b: &[u8; legacy::Q8_0::BYTES], out: &mut [f32; 32]) {
        let d = f16_at(b, 0);
        let q = b[2..34].as_chunks::<8>().0;
        for (o, q) in out.as_chunks_mut::<8>().0.iter_mut().zip(q) {
            *o = q.map(|v| d * f32::from(v as i8));
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; legacy::Q8_0::BYTES]) -> (v128, v128) {
        (simd::load16(&b[2..]), simd::load16(&b[18..]))
    }
}

/// `IQ4_NL`.
pub struct IQ4_NL;
impl Format<{ iq::IQ4_NL::BYTES }> for IQ4_NL {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn decode(b: &[u8; iq::IQ4_NL::BYTES], q: &mut [i16; 32]) -> (f32, f32) {
        for j in 0..16 {
            q[j] = i16::from(KVALUES_IQ4NL[usize::from(b[2 + j] & 0xf)]);
            q[j + 16] = i16::from(KVALUES_IQ4NL[usize::from(b[2 + j] >> 4)]);
        }
        (f16_at(b, 0), 0.0)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn decode_v(b: &[u8; iq::IQ4_NL::BYTES]) -> (v128, v128) {
        let (lo, hi) = nibbles_v(b, 2);
        let t = simd::load16(&KVALUES_IQ4NL.map(|v| v as u8));
        (i8x16_swizzle(t, lo), i8x16_swizzle(t, hi))
    }
}

/// `Q4_0`/`Q4_1` × activations on wasm without widening bytes: a block's 16 bytes read as eight u16 lanes
/// give four i16 vectors of nibbles with one mask or shift each (elements `2i`, `2i + 1`, `16 + 2i`,
/// `17 + 2i` in lane `i`), against the i16 activations reordered once per call to match ([`permute`]);
/// `i32x4.dot_i16x8_s` then needs no `extend` per block. The offset of `Q4_0` is taken
/// as a minimum, `−offset·dw`, against the activation sums.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod nib {
    use super::{Format, f16_at, simd};
    use core::arch::wasm32::*;

    /// Element of a block at lane position `p` of the permuted layout.
    const fn source(p: usize) -> usize {
        let (t, i) = (p / 8, p % 8);
        [2 * i, 2 * i + 1, 16 + 2 * i, 17 + 2 * i][t]
    }

    /// The activation blocks in the lane order of the nibble vectors.
    pub fn permute(xq: &[[i16; 32]]) -> Vec<[i16; 32]> {
        xq.iter()
            .map(|b| core::array::from_fn(|p| b[source(p)]))
            .collect()
    }

    #[inline(always)]
    fn block<const BB: usize>(b: &[u8; BB], at: usize, x: &[i16; 32]) -> v128 {
        let v = simd::load16(&b[at..]);
        let lo = u16x8_splat(0xf);
        let w = [
            v128_and(v, lo),
            v128_and(u16x8_shr(v, 8), lo),
            v128_and(u16x8_shr(v, 4), lo),
            u16x8_shr(v, 12),
        ];
        let d = |t: usize| i32x4_dot_i16x8(w[t], simd::load16(&x[8 * t..8 * t + 8]));
        i32x4_add(i32x4_add(d(0), d(1)), i32x4_add(d(2), d(3)))
    }

    /// One weight row against one activation row, four blocks at a time as `super::dot_fused`.
    #[inline(always)]
    pub fn dot<const BB: usize, F: Format<BB>>(
        w: &[[u8; BB]],
        x16: &[[i16; 32]],
        xd: &[f32],
        xs: &[f32],
        at: usize,
        offset: f32,
    ) -> f32 {
        let (mut acc, mut macc) = (f32x4_splat(0.0), f32x4_splat(0.0));
        let (wc, wt) = w.as_chunks::<4>();
        let (xc, xdc, xsc) = (
            x16.as_chunks::<4>().0,
            xd.as_chunks::<4>().0,
            xs.as_chunks::<4>().0,
        );
        for (((wc, x), xd), xs) in wc.iter().zip(xc).zip(xdc).zip(xsc) {
            let f16s = |at: usize| {
                let h = |i: usize| u32::from(u16::from_le_bytes([wc[i][at], wc[i][at + 1]]));
                simd::f16x4_to_f32x4(u32x4(h(0), h(1), h(2), h(3)))
            };
            let d = f16s(0);
            let s = f32x4_mul(d, simd::load16(xd));
            let p = |i: usize| f32x4_convert_i32x4(block(&wc[i], at, &x[i]));
            acc = f32x4_add(acc, f32x4_mul(p(0), i32x4_shuffle::<0, 0, 0, 0>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(p(1), i32x4_shuffle::<1, 1, 1, 1>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(p(2), i32x4_shuffle::<2, 2, 2, 2>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(p(3), i32x4_shuffle::<3, 3, 3, 3>(s, s)));
            let m = if F::HAS_MIN {
                f16s(2)
            } else {
                f32x4_mul(d, f32x4_splat(-offset))
            };
            macc = f32x4_add(macc, f32x4_mul(m, simd::load16(xs)));
        }
        let t0 = wc.len() * 4;
        let mut tail = 0.0f32;
        for (((b, x), xd), xs) in wt.iter().zip(&x16[t0..]).zip(&xd[t0..]).zip(&xs[t0..]) {
            let d = f16_at(b, 0);
            let m = if F::HAS_MIN { f16_at(b, 2) } else { -offset * d };
            tail += simd::hsum(block(b, at, x)) as f32 * d * xd + m * xs;
        }
        simd::hsum_f(f32x4_add(acc, macc)) + tail
    }
}

/// `Σ_b dw·dx·(q·qx) + mw·sx` for activation row `r`, straight from the weight blocks, each decoded in
/// registers.
#[inline(always)]
fn dot_fused<const BB: usize, F: Format<BB>>(w: &[[u8; BB]], x: &Q16Rows, r: usize) -> f32 {
    let (xq, xd, xs) = x.row(r);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // Four blocks at a time: their f16 scales widened together, times the four activation scales,
        // one lane per block.
        let (mut acc, mut macc) = (f32x4_splat(0.0), f32x4_splat(0.0));
        let (wc, wt) = w.as_chunks::<4>();
        let (xqc, xdc, xsc) = (
            xq.as_chunks::<4>().0,
            xd.as_chunks::<4>().0,
            xs.as_chunks::<4>().0,
        );
        for (((wc, xq), xd), xs) in wc.iter().zip(xqc).zip(xdc).zip(xsc) {
            let f16s = |at: usize| {
                let h = |i: usize| u32::from(u16::from_le_bytes([wc[i][at], wc[i][at + 1]]));
                simd::f16x4_to_f32x4(u32x4(h(0), h(1), h(2), h(3)))
            };
            let s = f32x4_mul(f16s(0), simd::load16(xd));
            let block = |i: usize| {
                let (lo, hi) = F::decode_v(&wc[i]);
                let p = i32x4_add(simd::dot16(lo, &xq[i][..16]), simd::dot16(hi, &xq[i][16..]));
                f32x4_convert_i32x4(p)
            };
            acc = f32x4_add(acc, f32x4_mul(block(0), i32x4_shuffle::<0, 0, 0, 0>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(block(1), i32x4_shuffle::<1, 1, 1, 1>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(block(2), i32x4_shuffle::<2, 2, 2, 2>(s, s)));
            acc = f32x4_add(acc, f32x4_mul(block(3), i32x4_shuffle::<3, 3, 3, 3>(s, s)));
            if F::HAS_MIN {
                macc = f32x4_add(macc, f32x4_mul(f16s(2), simd::load16(xs)));
            }
        }
        let t0 = wc.len() * 4;
        let mut tail = 0.0f32;
        for (((b, xq), xd), xs) in wt.iter().zip(&xq[t0..]).zip(&xd[t0..]).zip(&xs[t0..]) {
            let (lo, hi) = F::decode_v(b);
            let p = i32x4_add(simd::dot16(lo, &xq[..16]), simd::dot16(hi, &xq[16..]));
            let m = if F::HAS_MIN { f16_at(b, 2) * xs } else { 0.0 };
            tail += simd::hsum(p) as f32 * f16_at(b, 0) * xd + m;
        }
        simd::hsum_f(f32x4_add(acc, macc)) + tail
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        let (mut acc, mut q) = (0.0f32, [0i16; 32]);
        for (((b, xq), xd), xs) in w.iter().zip(xq).zip(xd).zip(xs) {
            let (d, m) = F::decode(b, &mut q);
            let p = if F::REDUCE {
                q.iter().zip(xq).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum()
            } else {
                dot32(&q, xq)
            };
            acc += d * xd * p as f32 + m * xs;
        }
        acc
    }
}

/// Weight rows of `F` blocks dequantised into f32, `dw·q + mw` (as `GgmlType::dequantize`), for the
/// prefill panels ([`panel`]).
struct Dequantize<const BB: usize, F>(core::marker::PhantomData<F>);

impl<const BB: usize, F: Format<BB>> panel::DecodeRow for Dequantize<BB, F> {
    #[inline(always)]
    fn decode_row(&mut self, row: &[u8], out: &mut [f32]) {
        dequantize_row::<BB, F>(row, out);
    }
}

#[inline(always)]
fn dequantize_row<const BB: usize, F: Format<BB>>(row: &[u8], out: &mut [f32]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // The integers as i8 lanes, widened to f32 four at a time: LLVM leaves the scalar loop below
        // unvectorized on wasm, where it was a fifth of a prefill matmul's time at 64 rows.
        for (b, o) in row.as_chunks::<BB>().0.iter().zip(out.as_chunks_mut::<32>().0) {
            let (lo, hi) = F::decode_v(b);
            let d = f32x4_splat(f16_at(b, 0));
            let mw = f32x4_splat(if F::HAS_MIN { f16_at(b, 2) } else { 0.0 });
            let halves = [lo, hi].map(|v| [i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v)]);
            for (h, o) in halves.as_flattened().iter().zip(o.as_chunks_mut::<8>().0) {
                let quads = [i32x4_extend_low_i16x8(*h), i32x4_extend_high_i16x8(*h)];
                for (q, o) in quads.into_iter().zip(o.as_chunks_mut::<4>().0) {
                    let v = f32x4_add(f32x4_mul(d, f32x4_convert_i32x4(q)), mw);
                    // SAFETY: `o` is 4 f32 (16 bytes); `v128_store` has no alignment requirement.
                    unsafe { v128_store(o.as_mut_ptr().cast(), v) };
                }
            }
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        let mut q = [0i16; 32];
        for (b, o) in row.as_chunks::<BB>().0.iter().zip(out.as_chunks_mut::<32>().0) {
            if F::DEQUANTIZE {
                F::dequantize(b, o);
            } else {
                let (d, mw) = F::decode(b, &mut q);
                for (o, &q) in o.iter_mut().zip(&q) {
                    *o = d * f32::from(q) + mw;
                }
            }
        }
    }
}

/// See [`super::matmul`]: `w` holds `n` rows of `k / 32` blocks of format `F`. Below
/// [`panel::ROWS_FROM`] activation rows (decode) each weight block is decoded in registers for every row;
/// from there on (prefill) through dequantised panels and `gemm`.
#[inline(always)]
pub fn matmul<const BB: usize, F: Format<BB>>(
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    y: &mut [f32],
) {
    matmul_with::<BB, F>(w, n, k, x, &prepare::<BB, F>(x, m, k), m, y);
}

/// The activations [`matmul_with`] reads: for the decode path quantized to 32-element blocks (and on wasm
/// in the nibble order of `F`'s kernel, if it has one); for prefill the f32 values as they are.
pub fn prepare<const BB: usize, F: Format<BB>>(x: &[f32], m: usize, k: usize) -> Prepared {
    if k < 32 || m >= panel::ROWS_FROM {
        return Prepared::F32;
    }
    let xq = Q16Rows::quantize(x, m, k);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let nib = F::NIBBLES.map(|_| nib::permute(&xq.q));
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let nib = None;
    Prepared::Q16 { xq, nib }
}

/// [`matmul`] over activations prepared by [`prepare`] (`x` itself is read by the prefill path only).
#[inline(always)]
pub fn matmul_with<const BB: usize, F: Format<BB>>(
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    act: &Prepared,
    m: usize,
    y: &mut [f32],
) {
    let nb = k / 32;
    if nb == 0 {
        return;
    }
    let Prepared::Q16 { xq, nib } = act else {
        let mut dq = Dequantize::<BB, F>(core::marker::PhantomData);
        panel::matmul(w, nb * BB, n, k, x, m, y, &mut dq);
        return;
    };
    let (blocks, _) = w.as_chunks::<BB>();
    let rows = blocks.chunks_exact(nb).take(n).enumerate();
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if let (Some((at, offset)), Some(x16)) = (F::NIBBLES, nib) {
        for (col, wrow) in rows {
            for r in 0..m {
                let (_, xd, xs) = xq.row(r);
                let x16 = &x16[r * nb..(r + 1) * nb];
                y[r * n + col] = nib::dot::<BB, F>(wrow, x16, xd, xs, at, offset);
            }
        }
        return;
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let _ = nib;
    for (col, wrow) in rows {
        for r in 0..m {
            y[r * n + col] = dot_fused::<BB, F>(wrow, xq, r);
        }
    }
}
