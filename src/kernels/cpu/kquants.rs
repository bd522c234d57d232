//! The 256-element super-block formats (`Q2_K` … `Q6_K`, `IQ4_XS`) against [`Q16KRows`] activations.
//!
//! Every super-block decodes to 256 small integers `q` (held as i16), one integer scale `sc` and minimum
//! `mn` per 16 elements (a format with 32-element sub-blocks repeats them), and the f16 factors `d`,
//! `dmin`, with `w = d·sc·q − dmin·mn`; so one super-block of the product is, as `ggml_vec_dot_*_q8_K`,
//! `dx·(d·Σ_j sc_j·Σ q·qx − dmin·Σ_j mn_j·bsum_j)`, with `Σ q·qx` over 16 (or 32) elements and the
//! minimum term in i32, but `sc_j ·` applied in f32.
//!
//! Overflow, with `|qx| ≤ 32767 < 2¹⁵` and per format `max |q|`, `max |sc|`, `max mn`: `Q2_K` 3, 15, 15;
//! `Q3_K` 4, 32, —; `Q4_K` 15, 63, 63; `Q5_K` 31, 63, 63; `Q6_K` 32, 128, —; `IQ4_XS` 127, 32, —. A
//! sub-block sum `Σ q·qx` is below `32 · 127 · 2¹⁵ < 2²⁷`; scaled and summed over a super-block in i32
//! it could reach `256 · 32 · 128 · 2¹⁵ = 2³⁵` (`Q6_K`; `Q4_K`: `256 · 15 · 63 · 2¹⁵ ≈ 2³³`), hence the
//! scales in f32 (the wasm `Q6_K` kernel keeps four sub-blocks in i32 lanes, see `fused::q6_k`). The minimums: `|Σ_j mn_j·bsum_j| ≤ 16 · 63 · 16 · 2¹⁵ < 2²⁹`, exact in i32.
//!
//! Layouts (`ggml-common.h`; `d`, `dmin` little-endian f16), element `e` of the super-block:
//! - `Q4_K` (144 B): `d`, `dmin`, `scales[12]` (eight 6-bit scale/min pairs, `get_scale_min_k4`),
//!   `qs[128]`; group `g = e / 64` holds nibbles of `qs[32g..32g + 32]`, low ones first.
//! - `Q5_K` (176 B): as `Q4_K` with `qh[32]` before `qs`; bit `2g` (low) / `2g + 1` (high) of `qh[l]` is
//!   the fifth bit.
//! - `Q6_K` (210 B): `ql[128]`, `qh[64]`, `scales[16]` (i8), `d`; `q = (4 bits | 2 bits << 4) − 32`.
//! - `Q3_K` (110 B): `hmask[32]`, `qs[64]`, `scales[12]` (sixteen 6-bit, minus 32), `d`; `q = 2 bits − 4`
//!   where the `hmask` bit is clear.
//! - `Q2_K` (84 B): `scales[16]` (4-bit scale | 4-bit min << 4), `qs[64]`, `d`, `dmin`; `q = 2 bits`.
//! - `IQ4_XS` (136 B): `d`, `scales_h` (u16), `scales_l[4]` (eight 6-bit scales, minus 32), `qs[128]`;
//!   `q = KVALUES_IQ4NL[nibble]`.

use super::act::{Prepared, Q16KRows};
use super::dot::dot_blocks256;
use super::f16_at;
use super::panel;
use super::q32::KVALUES_IQ4NL;
use crate::loader::quant::{BlockFormat, iq, k_high, k_low};
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use {super::dot::simd, core::arch::wasm32::*};

/// One decoded super-block: integers (widened to i16 once per weight row, for all activation rows),
/// scales and minimums per 16 elements.
#[derive(Clone)]
pub struct Block {
    pub q: [i16; 256],
    pub sc: [i16; 16],
    pub mn: [i16; 16],
}

impl Default for Block {
    fn default() -> Self {
        Self {
            q: [0; 256],
            sc: [0; 16],
            mn: [0; 16],
        }
    }
}

/// The eight 6-bit scales and minimums of a `Q4_K`/`Q5_K` `scales[12]` (`get_scale_min_k4` for `j` = 0..8,
/// by words as `ggml_vec_dot_q4_K_q8_K` unpacks them), as sixteen 16-element ones.
#[inline(always)]
fn scales_k4(s: &[u8], out: &mut Block) {
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let (k1, k2, k3) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let sc = [u0 & k1, (u2 & k2) | (((u0 >> 6) & k3) << 4)];
    let mn = [u1 & k1, ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4)];
    for j in 0..8 {
        let (sc, mn) = (
            (sc[j / 4] >> (8 * (j % 4))) as u8,
            (mn[j / 4] >> (8 * (j % 4))) as u8,
        );
        out.sc[2 * j] = i16::from(sc);
        out.sc[2 * j + 1] = i16::from(sc);
        out.mn[2 * j] = i16::from(mn);
        out.mn[2 * j + 1] = i16::from(mn);
    }
}

/// `Q4_K`: returns `(d, dmin)`.
#[inline(always)]
pub fn decode_q4_k(b: &[u8; k_high::Q4_K::BYTES], out: &mut Block) -> (f32, f32) {
    scales_k4(&b[4..16], out);
    let qs = &b[16..144];
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    for g in 0..4 {
        let (v0, v1) = (simd::load16(&qs[32 * g..]), simd::load16(&qs[32 * g + 16..]));
        let (lo, q) = (u8x16_splat(0xf), &mut out.q[64 * g..64 * g + 64]);
        simd::store_widened(&mut q[..16], v128_and(v0, lo));
        simd::store_widened(&mut q[16..32], v128_and(v1, lo));
        simd::store_widened(&mut q[32..48], u8x16_shr(v0, 4));
        simd::store_widened(&mut q[48..], u8x16_shr(v1, 4));
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for g in 0..4 {
        for l in 0..32 {
            out.q[64 * g + l] = i16::from(qs[32 * g + l] & 0xf);
            out.q[64 * g + 32 + l] = i16::from(qs[32 * g + l] >> 4);
        }
    }
    (f16_at(b, 0), f16_at(b, 2))
}

/// `Q5_K`.
#[inline(always)]
pub fn decode_q5_k(b: &[u8; k_high::Q5_K::BYTES], out: &mut Block) -> (f32, f32) {
    scales_k4(&b[4..16], out);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for g in 0..4 {
        for l in 0..32 {
            let h = qh[l] >> (2 * g);
            out.q[64 * g + l] = i16::from((qs[32 * g + l] & 0xf) | ((h & 1) << 4));
            out.q[64 * g + 32 + l] = i16::from((qs[32 * g + l] >> 4) | ((h & 2) << 3));
        }
    }
    (f16_at(b, 0), f16_at(b, 2))
}

/// `Q6_K` (no minimum: `dmin = 0`).
#[inline(always)]
pub fn decode_q6_k(b: &[u8; k_high::Q6_K::BYTES], out: &mut Block) -> (f32, f32) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    for h in 0..2 {
        let (lo, three, e) = (u8x16_splat(0xf), u8x16_splat(3), i8x16_splat(32));
        let six = |l: v128, h2: v128| i8x16_sub(v128_or(l, i8x16_shl(v128_and(h2, three), 4)), e);
        for c in 0..2 {
            let ql0 = simd::load16(&ql[64 * h + 16 * c..]);
            let ql1 = simd::load16(&ql[64 * h + 32 + 16 * c..]);
            let qhv = simd::load16(&qh[32 * h + 16 * c..]);
            let q = &mut out.q[128 * h + 16 * c..];
            simd::store_widened(&mut q[..16], six(v128_and(ql0, lo), qhv));
            simd::store_widened(&mut q[32..48], six(v128_and(ql1, lo), u8x16_shr(qhv, 2)));
            simd::store_widened(&mut q[64..80], six(u8x16_shr(ql0, 4), u8x16_shr(qhv, 4)));
            simd::store_widened(&mut q[96..112], six(u8x16_shr(ql1, 4), u8x16_shr(qhv, 6)));
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for h in 0..2 {
        let (ql, qh) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
        let q = &mut out.q[128 * h..128 * h + 128];
        for l in 0..32 {
            q[l] = i16::from((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
            q[l + 32] = i16::from((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            q[l + 64] = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            q[l + 96] = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        }
    }
    for (o, &s) in out.sc.iter_mut().zip(sc) {
        *o = i16::from(s as i8);
    }
    out.mn = [0; 16];
    (f16_at(b, 208), 0.0)
}

/// `Q3_K` (no minimum).
#[inline(always)]
pub fn decode_q3_k(b: &[u8; k_low::Q3_K::BYTES], out: &mut Block) -> (f32, f32) {
    let (hm, qs, s) = (&b[0..32], &b[32..96], &b[96..108]);
    let a = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, t) = (a(0), a(1), a(2));
    let (m1, m2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let aux = [
        (a0 & m2) | ((t & m1) << 4),
        (a1 & m2) | (((t >> 2) & m1) << 4),
        ((a0 >> 4) & m2) | (((t >> 4) & m1) << 4),
        ((a1 >> 4) & m2) | (((t >> 6) & m1) << 4),
    ];
    for (j, o) in out.sc.iter_mut().enumerate() {
        *o = i16::from((aux[j / 4] >> (8 * (j % 4))) as u8) - 32;
    }
    for n in 0..2 {
        for j in 0..4 {
            let bit = 1u8 << (4 * n + j);
            for l in 0..32 {
                let v = i16::from((qs[32 * n + l] >> (2 * j)) & 3);
                out.q[128 * n + 32 * j + l] = v - if hm[l] & bit != 0 { 0 } else { 4 };
            }
        }
    }
    out.mn = [0; 16];
    (f16_at(b, 108), 0.0)
}

/// `Q2_K`.
#[inline(always)]
pub fn decode_q2_k(b: &[u8; k_low::Q2_K::BYTES], out: &mut Block) -> (f32, f32) {
    let (s, qs) = (&b[0..16], &b[16..80]);
    for ((sc, mn), &s) in out.sc.iter_mut().zip(&mut out.mn).zip(s) {
        (*sc, *mn) = (i16::from(s & 0xf), i16::from(s >> 4));
    }
    for n in 0..2 {
        for j in 0..4 {
            for l in 0..32 {
                out.q[128 * n + 32 * j + l] = i16::from((qs[32 * n + l] >> (2 * j)) & 3);
            }
        }
    }
    (f16_at(b, 80), f16_at(b, 82))
}

/// `IQ4_XS` (no minimum).
#[inline(always)]
pub fn decode_iq4_xs(b: &[u8; iq::IQ4_XS::BYTES], out: &mut Block) -> (f32, f32) {
    let sh = u16::from_le_bytes([b[2], b[3]]);
    let (sl, qs) = (&b[4..8], &b[8..136]);
    for ib in 0..8 {
        let ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xf) | ((((sh >> (2 * ib)) & 3) as u8) << 4);
        out.sc[2 * ib..2 * ib + 2].fill(i16::from(ls) - 32);
        for j in 0..16 {
            out.q[32 * ib + j] = i16::from(KVALUES_IQ4NL[usize::from(qs[16 * ib + j] & 0xf)]);
            out.q[32 * ib + 16 + j] = i16::from(KVALUES_IQ4NL[usize::from(qs[16 * ib + j] >> 4)]);
        }
    }
    out.mn = [0; 16];
    (f16_at(b, 0), 0.0)
}

/// Activation rows below which a format with a [`Fused`] kernel uses it (decode: m = 1); from
/// [`panel::ROWS_FROM`] on, every format goes through dequantised panels and `gemm`.
const FUSED_BELOW: usize = panel::ROWS_FROM;

/// A row kernel straight from the weight super-blocks, decoding in registers: one weight row against one
/// activation row (values, scales, sums of 16), for products with few activation rows.
pub type Fused<const BB: usize> = fn(&[[u8; BB]], &[[i16; 256]], &[f32], &[[i32; 16]]) -> f32;

/// The fused kernel for `Q4_K` where there is one (wasm32 `simd128`).
pub const FUSED_Q4_K: Option<Fused<144>> = {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        Some(fused::q4_k)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        None
    }
};

/// The fused kernel for `Q6_K` where there is one (wasm32 `simd128`).
pub const FUSED_Q6_K: Option<Fused<210>> = {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        Some(fused::q6_k)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        None
    }
};

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod fused {
    use super::super::dot::simd;
    use super::super::f16_at;
    use super::{Block, scales_k4};
    use core::arch::wasm32::*;

    /// `Q4_K` × 16-bit activations: per 64 elements two loads of nibbles, four 16-element dot products,
    /// one scale per 32 applied in f32 lanes; the minimums from the activation sums.
    pub fn q4_k(w: &[[u8; 144]], xq: &[[i16; 256]], xd: &[f32], xs: &[[i32; 16]]) -> f32 {
        let (mut acc, mut min) = (f32x4_splat(0.0), 0.0f32);
        let mut sm = Block::default();
        for (((b, xq), &xd), xs) in w.iter().zip(xq).zip(xd).zip(xs) {
            scales_k4(&b[4..16], &mut sm);
            let (qs, lo) = (&b[16..144], u8x16_splat(0xf));
            let mut af = f32x4_splat(0.0);
            for g in 0..4 {
                let (v0, v1) = (simd::load16(&qs[32 * g..]), simd::load16(&qs[32 * g + 16..]));
                let x = &xq[64 * g..64 * g + 64];
                let pa = i32x4_add(
                    simd::dot16(v128_and(v0, lo), &x[..16]),
                    simd::dot16(v128_and(v1, lo), &x[16..32]),
                );
                let pb = i32x4_add(
                    simd::dot16(u8x16_shr(v0, 4), &x[32..48]),
                    simd::dot16(u8x16_shr(v1, 4), &x[48..]),
                );
                let (sa, sb) = (f32::from(sm.sc[4 * g]), f32::from(sm.sc[4 * g + 2]));
                af = f32x4_add(af, f32x4_mul(f32x4_convert_i32x4(pa), f32x4_splat(sa)));
                af = f32x4_add(af, f32x4_mul(f32x4_convert_i32x4(pb), f32x4_splat(sb)));
            }
            let msum: i32 = sm.mn.iter().zip(xs).map(|(&a, &b)| i32::from(a) * b).sum();
            acc = f32x4_add(acc, f32x4_mul(af, f32x4_splat(xd * f16_at(b, 0))));
            min += xd * f16_at(b, 2) * msum as f32;
        }
        simd::hsum_f(acc) - min
    }

    /// `Q6_K` × 16-bit activations: 6-bit values rebuilt in registers, one i8 scale per 16 elements,
    /// applied in i32 lanes over four sub-blocks at a time, then the lanes converted to f32. A lane of
    /// [`simd::dot16`] sums 4 products, so over four sub-blocks 16 of at most `32 · 128 · 32767`:
    /// `2¹⁶ · 32767 = 2³¹ − 2¹⁶ < 2³¹` (`q = −32`, `sc = −128` and `qx = ±32767` throughout reach it).
    pub fn q6_k(w: &[[u8; 210]], xq: &[[i16; 256]], xd: &[f32], _: &[[i32; 16]]) -> f32 {
        let mut acc = f32x4_splat(0.0);
        let (lo, three, e) = (u8x16_splat(0xf), u8x16_splat(3), i8x16_splat(32));
        let six = |l: v128, h2: v128| i8x16_sub(v128_or(l, i8x16_shl(v128_and(h2, three), 4)), e);
        for ((b, xq), &xd) in w.iter().zip(xq).zip(xd) {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let mut af = f32x4_splat(0.0);
            for h in 0..2 {
                for c in 0..2 {
                    let ql0 = simd::load16(&ql[64 * h + 16 * c..]);
                    let ql1 = simd::load16(&ql[64 * h + 32 + 16 * c..]);
                    let qhv = simd::load16(&qh[32 * h + 16 * c..]);
                    let q = [
                        six(v128_and(ql0, lo), qhv),
                        six(v128_and(ql1, lo), u8x16_shr(qhv, 2)),
                        six(u8x16_shr(ql0, 4), u8x16_shr(qhv, 4)),
                        six(u8x16_shr(ql1, 4), u8x16_shr(qhv, 6)),
                    ];
                    let mut ai = i32x4_splat(0);
                    for (t, q) in q.into_iter().enumerate() {
                        let at = 128 * h + 16 * c + 32 * t;
                        let p = simd::dot16(q, &xq[at..at + 16]);
                        ai = i32x4_add(ai, i32x4_mul(p, i32x4_splat(i32::from(sc[at / 16] as i8))));
                    }
                    af = f32x4_add(af, f32x4_convert_i32x4(ai));
                }
            }
            acc = f32x4_add(acc, f32x4_mul(af, f32x4_splat(xd * f16_at(b, 208))));
        }
        simd::hsum_f(acc)
    }
}

/// One weight row decoded: its super-blocks and their `(d, dmin)`.
struct Row {
    blocks: Vec<Block>,
    d: Vec<(f32, f32)>,
}

/// Activation row `r` against one decoded row.
#[inline(always)]
fn dot_row(w: &Row, x: &Q16KRows, r: usize) -> f32 {
    let (xq, xd, xs) = x.row(r);
    let mut min = 0.0f32;
    for (((wb, &(_, dmin)), xs), xd) in w.blocks.iter().zip(&w.d).zip(xs).zip(xd) {
        let msum: i32 = wb.mn.iter().zip(xs).map(|(&a, &b)| i32::from(a) * b).sum();
        min += xd * dmin * msum as f32;
    }
    dot_blocks256(&w.blocks, &w.d, xq, xd) - min
}

/// Weight rows of super-blocks dequantised into f32 through `decode`, for the prefill panels ([`panel`]).
struct Dequantize<'a, const BB: usize, D> {
    decode: &'a D,
    block: Block,
}

impl<const BB: usize, D> panel::DecodeRow for Dequantize<'_, BB, D>
where
    D: Fn(&[u8; BB], &mut Block) -> (f32, f32),
{
    #[inline(always)]
    fn decode_row(&mut self, row: &[u8], out: &mut [f32]) {
        let (blocks, _) = row.as_chunks::<BB>();
        for (b, o) in blocks.iter().zip(out.as_chunks_mut::<256>().0) {
            let (d, dmin) = (self.decode)(b, &mut self.block);
            dequantize_block(&self.block, d, dmin, o);
        }
    }
}

/// A decoded super-block as f32, `(d·sc)·q − dmin·mn` per 16 elements (as `GgmlType::dequantize`).
#[inline(always)]
fn dequantize_block(b: &Block, d: f32, dmin: f32, out: &mut [f32; 256]) {
    let (q, o) = (b.q.as_chunks::<16>().0, out.as_chunks_mut::<16>().0);
    for (((q, o), &sc), &mn) in q.iter().zip(o).zip(&b.sc).zip(&b.mn) {
        let (s, mn) = (d * f32::from(sc), dmin * f32::from(mn));
        for (o, &q) in o.iter_mut().zip(q) {
            *o = s * f32::from(q) - mn;
        }
    }
}

/// See [`super::matmul`]: `w` holds `n` rows of `k / 256` super-blocks of `BB` bytes, each decoded by
/// `decode` into a [`Block`] and `(d, dmin)`; with fewer than 4 activation rows through `fused` if given.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the matmul's shape plus the format's two kernels"
)]
pub fn matmul<const BB: usize>(
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    decode: impl Fn(&[u8; BB], &mut Block) -> (f32, f32),
    fused: Option<Fused<BB>>,
) {
    matmul_with(w, n, k, x, &prepare(x, m, k), m, y, decode, fused);
}

/// The activations [`matmul_with`] reads: for the decode path quantized to super-blocks of 256; for
/// prefill the f32 values as they are.
pub fn prepare(x: &[f32], m: usize, k: usize) -> Prepared {
    match k < 256 || m >= panel::ROWS_FROM {
        true => Prepared::F32,
        false => Prepared::Q16K(Q16KRows::quantize(x, m, k)),
    }
}

/// [`matmul`] over activations prepared by [`prepare`] (`x` itself is read by the prefill path only).
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the matmul's shape, its prepared activations and the format's two kernels"
)]
pub fn matmul_with<const BB: usize>(
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    act: &Prepared,
    m: usize,
    y: &mut [f32],
    decode: impl Fn(&[u8; BB], &mut Block) -> (f32, f32),
    fused: Option<Fused<BB>>,
) {
    let nb = k / 256;
    if nb == 0 {
        return;
    }
    let Prepared::Q16K(xq) = act else {
        let mut dq = Dequantize::<BB, _> {
            decode: &decode,
            block: Block::default(),
        };
        panel::matmul(w, nb * BB, n, k, x, m, y, &mut dq);
        return;
    };
    if let Some(fused) = fused.filter(|_| m < FUSED_BELOW) {
        let (blocks, _) = w.as_chunks::<BB>();
        for (col, wrow) in blocks.chunks_exact(nb).take(n).enumerate() {
            for r in 0..m {
                let (xq, xd, xs) = xq.row(r);
                y[r * n + col] = fused(wrow, xq, xd, xs);
            }
        }
        return;
    }
    let mut row = Row {
        blocks: vec![Block::default(); nb],
        d: vec![(0.0, 0.0); nb],
    };
    let (blocks, _) = w.as_chunks::<BB>();
    for (col, wrow) in blocks.chunks_exact(nb).take(n).enumerate() {
        for ((b, out), d) in wrow.iter().zip(&mut row.blocks).zip(&mut row.d) {
            *d = decode(b, out);
        }
        for r in 0..m {
            y[r * n + col] = dot_row(&row, xq, r);
        }
    }
}
