//! The 2- and 3-bit K-quants: Q2_K and Q3_K, 256-element super-blocks of 16 sub-blocks of 16.
//!
//! Layouts (`ggml-common.h`, offsets in bytes, `d`/`dmin` f16):
//!
//! **Q2_K** (84 bytes): `scales[16]`@0, `qs[64]`@16, `d`@80, `dmin`@82. Sub-block `s` has the 4-bit scale
//! `scales[s] & 0xF` and 4-bit min `scales[s] >> 4`. Element `e = 128·n + 32·j + l` (`n` 0..2, `j` 0..4,
//! `l` 0..32) has the 2-bit `q = (qs[32·n + l] >> 2j) & 3` and
//! `x = (d·(scales[e/16] & 0xF))·q − dmin·(scales[e/16] >> 4)`.
//!
//! **Q3_K** (110 bytes): `hmask[32]`@0, `qs[64]`@32, `scales[12]`@96, `d`@108. The 16 signed 6-bit
//! scales: scale `s` has low nibble `scales[s] & 0xF` (`s < 8`) or `scales[s − 8] >> 4` (`s ≥ 8`) and high
//! two bits `(scales[8 + s%4] >> 2·(s/4)) & 3`, minus 32. Element `e` as in Q2_K has the low two bits
//! `(qs[32·n + l] >> 2j) & 3`, high bit `(hmask[l] >> (4n + j)) & 1`, and
//! `x = (d·(scale[e/16] − 32))·(low − (high ? 0 : 4))`.
//!
//! Reference quantisers (`quantize_row_q2_K_ref`, `quantize_row_q3_K_ref`):
//! - Q2_K: each sub-block's scale and min by `make_qkx2_quants(16, 3, weights |x|, rmin −0.5, rdelta 0.1,
//!   15 steps, mean absolute error)`; scales and mins quantised to 4 bits against their maxima
//!   (`d = max_scale/15`, `dmin = max_min/15`), then every element requantised with the stored scales:
//!   `q = clamp(nearest_int((x + dm)/dl), 0, 3)`.
//! - Q3_K: each sub-block's scale by `make_q3_quants(16, 4, do_rmse)`; the scales quantised to signed 6 bits
//!   against the largest magnitude (`d = −max/32`), then `q = clamp(nearest_int(x/dl), −4, 3) + 4`.
//!
//! The dequantisers are checked against gguf-py; the quantisers (gguf-py has none) byte for byte against
//! llama.cpp's C reference and by round-trip error. Sources: llama.cpp `ggml/src/ggml-quants.c`
//! (`dequantize_row_q2_K`, `dequantize_row_q3_K`, `quantize_row_q2_K_ref`, `quantize_row_q3_K_ref`),
//! gguf-py `gguf/quants.py` (`Q2_K`, `Q3_K`).

use super::kmath::{make_q3_quants, make_qkx2_quants, nearest_int};
use super::{BlockFormat, GgmlType, QK_K, Quantize, bad_f16, f16_at, put_f16};

/// `Q2_K`: 2-bit with 4-bit sub-block scales and mins, 2.625 bits per weight.
pub struct Q2_K;
/// `Q3_K`: 3-bit with signed 6-bit sub-block scales, 3.4375 bits per weight.
pub struct Q3_K;

/// Packs 256 two-bit values the K-quant way: `qs[32·n + l]` holds elements `128·n + l + 32·k` in bits
/// `2k..2k + 2`.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for n in 0..2 {
        for i in 0..32 {
            let e = 128 * n + i;
            qs[32 * n + i] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
        }
    }
}

impl BlockFormat for Q2_K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const ELEMS: usize = QK_K;
    /// scales, qs: 2 bits each, d, dmin: f16 (ggml-common.h's `block_q2_k`).
    const BYTES: usize = QK_K / 16 + QK_K / 4 + 2 * 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (scales, qs) = (&b[0..16], &b[16..80]);
        let (d, min) = (f16_at(b, 80), f16_at(b, 82));
        for (e, o) in out.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let sc = scales[e / 16];
            let dl = d * f32::from(sc & 0xF);
            let ml = min * f32::from(sc >> 4);
            let q = (qs[32 * n + l] >> (2 * j)) & 3;
            *o = dl * f32::from(q) - ml;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 80, "d").or_else(|| bad_f16(b, 82, "dmin"))
    }
}

impl Quantize for Q2_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        const Q4SCALE: f32 = 15.0;
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
            let (scale, min) =
                make_qkx2_quants(3, xs, &weights, &mut l[16 * j..16 * j + 16], -0.5, 0.1, 15, true);
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }
        let (sc, rest) = out.split_at_mut(16);
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_f16(rest, 64, max_scale / Q4SCALE);
        } else {
            sc.fill(0);
            put_f16(rest, 64, 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) as u8) << 4;
            }
            put_f16(rest, 66, max_min / Q4SCALE);
        } else {
            put_f16(rest, 66, 0.0);
        }
        let (d_all, dmin_all) = (f16_at(rest, 64), f16_at(rest, 66));
        for j in 0..16 {
            let d = d_all * f32::from(sc[j] & 0xF);
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * f32::from(sc[j] >> 4);
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut rest[0..64]);
    }
}

/// The 16 signed scales of a Q3_K block (`scales` is its 12 scale bytes), without the −32.
#[inline]
fn q3_scale(scales: &[u8], s: usize) -> i32 {
    let lo = if s < 8 {
        scales[s] & 0xF
    } else {
        scales[s - 8] >> 4
    };
    let hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    i32::from(lo | (hi << 4))
}

impl BlockFormat for Q3_K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ELEMS: usize = QK_K;
    /// hmask, qs: 2 bits each, scales: 12 bytes, d: f16 (ggml-common.h's `block_q3_k`).
    const BYTES: usize = QK_K / 8 + QK_K / 4 + 12 + 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (hmask, qs, scales) = (&b[0..32], &b[32..96], &b[96..108]);
        let d_all = f16_at(b, 108);
        let dl: [f32; 16] = std::array::from_fn(|s| d_all * (q3_scale(scales, s) - 32) as f32);
        for (e, o) in out.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let low = i32::from((qs[32 * n + l] >> (2 * j)) & 3);
            let high = (hmask[l] >> (4 * n + j)) & 1;
            let q = low - if high != 0 { 0 } else { 4 };
            *o = dl[e / 16] * q as f32;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 108, "d")
    }
}

impl Quantize for Q3_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16], true);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        out.fill(0);
        let (hmask, rest) = out.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(12);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // `int8_t l = nearest_int(…)` truncates to 8 bits before the clamp, as in C.
                let v = (i32::from(nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = v & 0xF;
                } else {
                    sc[j - 8] |= (v & 0xF) << 4;
                }
                sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
            }
            put_f16(dbytes, 0, 1.0 / iscale);
        } else {
            put_f16(dbytes, 0, 0.0);
        }
        let d_all = f16_at(dbytes, 0);
        for j in 0..16 {
            let d = d_all * (q3_scale(sc, j) - 32) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
            }
        }
        let mut low = [0u8; QK_K];
        for (e, &v) in l.iter().enumerate() {
            let mut v = v as u8 & 7;
            if v > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                v -= 4;
            }
            low[e] = v;
        }
        pack_2bit(&low, qs);
    }
}

// ggml-common.h's `static_assert`s of the blocks' sizes.
const _: () = assert!(Q3_K::BYTES == 110);
const _: () = assert!(Q2_K::BYTES == 84);
