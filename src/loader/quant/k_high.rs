//! The 4-, 5-, 6- and 8-bit K-quants: Q4_K, Q5_K, Q6_K and the activation format Q8_K (256 elements
//! each).
//!
//! Layouts (`ggml-common.h`, offsets in bytes, `d`/`dmin` f16 unless noted):
//!
//! **Q4_K** (144 bytes): `d`@0, `dmin`@2, `scales[12]`@4, `qs[128]`@16. Eight sub-blocks of 32 with a 6-bit
//! scale `sc` and min `m` each ([`get_scale_min_k4`]). Element `e` lies in sub-block `s = e/32` and is the
//! low (`s` even) or high (`s` odd) nibble of `qs[32·(e/64) + e%32]`; `x = (d·sc)·q − dmin·m`.
//!
//! **Q5_K** (176 bytes): `d`@0, `dmin`@2, `scales[12]`@4, `qh[32]`@16, `qs[128]`@48. As Q4_K plus a fifth
//! bit, bit `e/32` of `qh[e%32]`, worth 16.
//!
//! **Q6_K** (210 bytes): `ql[128]`@0, `qh[64]`@128, `scales: [i8; 16]`@192, `d`@208. Element
//! `e = 128·n + 32·k + l` (`n` 0..2, `k` 0..4, `l` 0..32) has low nibble from `ql[64·n + 32·(k%2) + l]`
//! (low nibble for `k < 2`, high for `k ≥ 2`), high two bits `(qh[32·n + l] >> 2k) & 3`, and
//! `x = (d·scales[e/16])·(q − 32)`.
//!
//! **Q8_K** (292 bytes): `d: f32`@0, `qs: [i8; 256]`@4, `bsums: [i16; 16]`@260 (the sum of each 16
//! quants, for the CPU dot products); `x = d·q`. Not a weight format (see the parent module).
//!
//! Reference quantisers (`quantize_row_q{4,5,6,8}_K_ref`):
//! - Q4_K / Q5_K: each sub-block by `make_qkx2_quants(32, 15 / 31, weights = rms(x) + |x|, rmin −1 / −0.5,
//!   rdelta 0.1, 20 / 15 steps)`; scales and mins to 6 bits against their maxima (`d = max_scale/63`,
//!   `dmin = max_min/63`), then `q = clamp(nearest_int((x + dmin·m)/(d·sc)), 0, 15 / 31)`.
//! - Q6_K: each sub-block of 16 by `make_qx_quants(16, 32, rmse_type 1)`; scales to signed 8 bits
//!   (`d = −max/128`), then `q = clamp(nearest_int(x/(d·sc)), −32, 31) + 32`.
//! - Q8_K: `d = −max/127` for the element of largest magnitude, `q = min(127, nearest_int(x/d))`.
//!
//! The dequantisers of Q4_K, Q5_K and Q6_K are checked against gguf-py (which has no Q8_K); the quantisers
//! (gguf-py has none) byte for byte against llama.cpp's C reference and by round-trip error. Sources:
//! llama.cpp `ggml/src/ggml-quants.c` (`dequantize_row_q{4,5,6,8}_K`, `quantize_row_q{4,5,6,8}_K_ref`),
//! gguf-py `gguf/quants.py` (`Q4_K`, `Q5_K`, `Q6_K`).

use super::kmath::{GROUP_MAX_EPS, get_scale_min_k4, make_qkx2_quants, make_qx_quants, nearest_int};
use super::{BlockFormat, GgmlType, QK_K, Quantize, bad_f16, f16_at, put_f16};

/// `Q4_K`: 4-bit with 6-bit sub-block scales and mins, 4.5 bits per weight.
pub struct Q4_K;
/// `Q5_K`: 5-bit with 6-bit sub-block scales and mins, 5.5 bits per weight.
pub struct Q5_K;
/// `Q6_K`: 6-bit with 8-bit sub-block scales, 6.5625 bits per weight.
pub struct Q6_K;
/// `Q8_K`: 8-bit activations with an f32 scale and 16-element block sums.
pub struct Q8_K;

/// Scale and min pairs `(d·sc, dmin·m)` of the 8 sub-blocks of a Q4_K/Q5_K block.
fn k4_scales(b: &[u8]) -> [(f32, f32); 8] {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    std::array::from_fn(|s| {
        let (sc, m) = get_scale_min_k4(s, &b[4..16]);
        (d * f32::from(sc), min * f32::from(m))
    })
}

/// The shared first half of the Q4_K / Q5_K quantisers: fills `out[0..16]` (`d`, `dmin`, the 12 scale
/// bytes) and `l` with the requantised values `0..=nmax`.
fn quantize_k4_scales(x: &[f32], nmax: i32, rmin: f32, nstep: i32, out: &mut [u8], l: &mut [u8; QK_K]) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        let (scale, min) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut out[4..16];
    sc.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(out, 0, max_scale / 63.0);
    put_f16(out, 2, max_min / 63.0);
    let (d_all, dmin_all) = (f16_at(out, 0), f16_at(out, 2));
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, &out[4..16]);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m);
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

fn bad_d_dmin(b: &[u8]) -> Option<&'static str> {
    bad_f16(b, 0, "d").or_else(|| bad_f16(b, 2, "dmin"))
}

impl BlockFormat for Q4_K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const ELEMS: usize = QK_K;
    /// d, dmin: f16, scales: 12 bytes, qs: nibbles (ggml-common.h's `block_q4_k`).
    const BYTES: usize = 2 * 2 + 12 + QK_K / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let sm = k4_scales(b);
        let qs = &b[16..144];
        for (e, o) in out.iter_mut().enumerate() {
            let s = e / 32;
            let byte = qs[32 * (e / 64) + e % 32];
            let q = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let (d1, m1) = sm[s];
            *o = d1 * f32::from(q) - m1;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_d_dmin(b)
    }
}

impl Quantize for Q4_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let mut l = [0u8; QK_K];
        quantize_k4_scales(x, 15, -1.0, 20, out, &mut l);
        let qs = &mut out[16..144];
        for c in 0..4 {
            for i in 0..32 {
                qs[32 * c + i] = l[64 * c + i] | (l[64 * c + i + 32] << 4);
            }
        }
    }
}

impl BlockFormat for Q5_K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ELEMS: usize = QK_K;
    /// d, dmin: f16, scales: 12 bytes, qh, qs: nibbles (ggml-common.h's `block_q5_k`).
    const BYTES: usize = 2 * 2 + 12 + QK_K / 8 + QK_K / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let sm = k4_scales(b);
        let (qh, qs) = (&b[16..48], &b[48..176]);
        for (e, o) in out.iter_mut().enumerate() {
            let s = e / 32;
            let byte = qs[32 * (e / 64) + e % 32];
            let lo = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let hi = if qh[e % 32] & (1 << s) != 0 { 16 } else { 0 };
            let (d1, m1) = sm[s];
            *o = d1 * f32::from(lo + hi) - m1;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_d_dmin(b)
    }
}

impl Quantize for Q5_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let mut l = [0u8; QK_K];
        quantize_k4_scales(x, 31, -0.5, 15, out, &mut l);
        let (qh, qs) = out[16..176].split_at_mut(32);
        qh.fill(0);
        for c in 0..4 {
            for i in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + i], l[64 * c + i + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= 1 << (2 * c);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= 2 << (2 * c);
                }
                qs[32 * c + i] = l1 | (l2 << 4);
            }
        }
    }
}

impl BlockFormat for Q6_K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ELEMS: usize = QK_K;
    /// ql: nibbles, qh: 2 bits each, scales: i8, d: f16 (ggml-common.h's `block_q6_k`).
    const BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for (e, o) in out.iter_mut().enumerate() {
            let (n, k, l) = (e / 128, (e / 32) % 4, e % 32);
            let byte = ql[64 * n + 32 * (k % 2) + l];
            let lo = if k < 2 { byte & 0xF } else { byte >> 4 };
            let hi = (qh[32 * n + l] >> (2 * k)) & 3;
            let q = i32::from(lo | (hi << 4)) - 32;
            *o = d * f32::from(sc[e / 16] as i8) * q as f32;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 208, "d")
    }
}

impl Quantize for Q6_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for ib in 0..16 {
            let scale = make_qx_quants(
                32,
                &x[16 * ib..16 * ib + 16],
                &mut l[16 * ib..16 * ib + 16],
                1,
                None,
            );
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        out.fill(0);
        if max_abs_scale < GROUP_MAX_EPS {
            return;
        }
        let (ql, rest) = out.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(16);
        let iscale = -128.0 / max_scale;
        put_f16(dbytes, 0, 1.0 / iscale);
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d_all = f16_at(dbytes, 0);
        for j in 0..16 {
            let d = d_all * f32::from(sc[j] as i8);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        let l: [u8; QK_K] = std::array::from_fn(|e| l[e] as u8 & 63);
        for n in 0..2 {
            for i in 0..32 {
                let e = 128 * n + i;
                let (q1, q2, q3, q4) = (l[e], l[e + 32], l[e + 64], l[e + 96]);
                ql[64 * n + i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                ql[64 * n + i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                qh[32 * n + i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}

impl BlockFormat for Q8_K {
    const TYPE: GgmlType = GgmlType::Q8_K;
    const ELEMS: usize = QK_K;
    /// d: f32, qs: i8 each, bsums: i16 per 16 (ggml-common.h's `block_q8_k`).
    const BYTES: usize = 4 + QK_K + 2 * (QK_K / 16);

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (o, &q) in out.iter_mut().zip(&b[4..260]) {
            *o = d * f32::from(q as i8);
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        (!d.is_finite()).then_some("d")
    }
}

impl Quantize for Q8_K {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.fill(0);
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            return;
        }
        let iscale = -127.0 / max;
        for (o, &v) in out[4..260].iter_mut().zip(x) {
            *o = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let sum: i32 = out[4 + 16 * j..4 + 16 * j + 16]
                .iter()
                .map(|&q| i32::from(q as i8))
                .sum();
            out[260 + 2 * j..262 + 2 * j].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

// ggml-common.h's `static_assert`s of the blocks' sizes.
const _: () = assert!(Q5_K::BYTES == 176);
const _: () = assert!(Q8_K::BYTES == 292);
const _: () = assert!(Q4_K::BYTES == 144);
const _: () = assert!(Q6_K::BYTES == 210);
