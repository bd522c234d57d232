//! The non-linear 4-bit formats IQ4_NL and IQ4_XS: 4-bit indices into the fixed codebook
//! [`KVALUES_IQ4NL`] (`kvalues_iq4nl`, 16 signed values denser near zero), times a scale.
//!
//! Layouts (`ggml-common.h`, offsets in bytes, `d` f16):
//!
//! **IQ4_NL** (18 bytes, 32 elements): `d`@0, `qs[16]`@2. Element `j < 16` is the low nibble of `qs[j]`,
//! element `j + 16` the high nibble; `x = d·kvalues[q]`.
//!
//! **IQ4_XS** (136 bytes, 256 elements): `d`@0, `scales_h: u16`@2, `scales_l[4]`@4, `qs[128]`@8. Sub-block
//! `s` (0..8, 32 elements) has the 6-bit scale `ls = ((scales_l[s/2] >> 4·(s%2)) & 0xF) |
//! (((scales_h >> 2s) & 3) << 4)`; its element `j < 16` is the low nibble of `qs[16s + j]`, `j + 16` the
//! high nibble; `x = (d·(ls − 32))·kvalues[q]`.
//!
//! Reference quantisers (`quantize_row_iq4_nl_ref`, `quantize_row_iq4_xs_ref`, both through
//! `quantize_row_iq4_nl_impl` without importance weights, weights `x²`): for each 32-element sub-block
//! the scale starts at `max/−127` (`max` the element of largest magnitude) and is refitted by weighted least
//! squares after picking the nearest codebook entries (`best_index_int8`); IQ4_XS also tries the 15
//! scales `max/(t − 127)`, `t ∈ −7..=7`, then quantises the sub-block scales to signed 6 bits against
//! `d = −max_scale/32` and re-picks every index with the stored sub-block scale. IQ4_NL stores its one
//! scale directly. A sub-block whose largest magnitude is below `GROUP_MAX_EPS` gets scale 0; in IQ4_NL
//! (one sub-block per block) its nibbles are 0 here, where the C code leaves those of the previous block in
//! its reused index buffer (uninitialised for the first), so only `d = 0` is defined there.
//!
//! The dequantisers are checked against gguf-py; the quantisers (gguf-py has none) byte for byte against
//! llama.cpp's C reference (`tests/fixtures/ggml/llama_ref.bin`). Sources:
//! llama.cpp `ggml/src/ggml-quants.c` (`dequantize_row_iq4_nl`, `dequantize_row_iq4_xs`,
//! `quantize_row_iq4_nl_impl`, `best_index_int8`), `ggml/src/ggml-common.h` (`kvalues_iq4nl`), gguf-py
//! `gguf/quants.py` (`IQ4_NL`, `IQ4_XS`).

use super::kmath::{GROUP_MAX_EPS, nearest_int};
use super::{BlockFormat, GgmlType, QK_K, Quantize, bad_f16, f16_at, put_f16};

/// `kvalues_iq4nl`: the IQ4 codebook.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `IQ4_NL`: 32 codebook indices and one scale, 4.5 bits per weight.
pub struct IQ4_NL;
/// `IQ4_XS`: 256 codebook indices, 6-bit sub-block scales, 4.25 bits per weight.
pub struct IQ4_XS;

/// `best_index_int8(n, val, x)`: the index of the entry of the sorted `val` nearest `x` (the upper one on
/// ties).
pub fn best_index_int8(val: &[i8], x: f32) -> usize {
    let n = val.len();
    let v = |i: usize| f32::from(val[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(n - 1) {
        return n - 1;
    }
    let (mut ml, mut mu) = (0, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x { mu - 1 } else { mu }
}

/// Decodes 32 elements from 16 nibble bytes with scale `dl`.
#[inline]
fn decode32(qs: &[u8], dl: f32, out: &mut [f32]) {
    for j in 0..16 {
        out[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0xF)]);
        out[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]);
    }
}

impl BlockFormat for IQ4_NL {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const ELEMS: usize = 32;
    /// d: f16, qs: nibbles (ggml-common.h's `block_iq4_nl`).
    const BYTES: usize = 2 + 32 / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        decode32(&b[2..18], f16_at(b, 0), out);
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d")
    }
}

impl BlockFormat for IQ4_XS {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const ELEMS: usize = QK_K;
    /// d: f16, scales_h: u16, scales_l, qs: nibbles (ggml-common.h's `block_iq4_xs`).
    const BYTES: usize = 2 + 2 + QK_K / 64 + QK_K / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        let (scales_l, qs) = (&b[4..8], &b[8..136]);
        for (s, o) in out.chunks_exact_mut(32).enumerate() {
            let ls = ((scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | ((((scales_h >> (2 * s)) & 3) as u8) << 4);
            let dl = d * (i32::from(ls) - 32) as f32;
            decode32(&qs[16 * s..16 * s + 16], dl, o);
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d")
    }
}

/// `quantize_row_iq4_nl_impl(super_block_size = x.len(), 32, x, …, quant_weights = NULL, ntry)`: writes
/// the f16 super-scale into `dh`, the nibbles into `q4` and (for more than one sub-block) the 6-bit
/// scales into `scales_h`/`scales_l`.
fn quantize_iq4(x: &[f32], ntry: i32, dh: &mut [u8], q4: &mut [u8], scales_h: &mut u16, scales_l: &mut [u8]) {
    const BS: usize = 32;
    let values = &KVALUES_IQ4NL;
    let v0 = f32::from(values[0]);
    let nb = x.len() / BS;
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; QK_K / BS];
    q4.fill(0);
    put_f16(dh, 0, 0.0);
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for ib in 0..nb {
        let xb = &x[ib * BS..ib * BS + BS];
        let lb = &mut l[ib * BS..ib * BS + BS];
        let weight: [f32; BS] = std::array::from_fn(|j| xb[j] * xb[j]);
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for j in 0..BS {
            let li = best_index_int8(values, id * xb[j]);
            lb[j] = li as u8;
            let q = f32::from(values[li]);
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry as f32 + v0) / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..BS {
                let q = f32::from(values[best_index_int8(values, id * xb[j])]);
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    if nb > 1 {
        *scales_h = 0;
        let d = -max_scale / 32.0;
        put_f16(dh, 0, d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 0..BS {
                l[ib * BS + j] = best_index_int8(values, idl * x[ib * BS + j]) as u8;
            }
            let ls = (ls + 32) as u8;
            let (l_l, l_h) = (ls & 0xF, ls >> 4);
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            *scales_h |= u16::from(l_h) << (2 * (ib % 8));
        }
    } else {
        put_f16(dh, 0, scales[0]);
        if ntry > 0 {
            let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
            for j in 0..x.len() {
                l[j] = best_index_int8(values, id * x[j]) as u8;
            }
        }
    }
    for i in 0..x.len() / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

impl Quantize for IQ4_NL {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (dh, q4) = out.split_at_mut(2);
        let mut unused_h = 0;
        quantize_iq4(x, -1, dh, q4, &mut unused_h, &mut []);
    }
}

impl Quantize for IQ4_XS {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (dh, rest) = out.split_at_mut(2);
        let (sh, rest) = rest.split_at_mut(2);
        let (scales_l, q4) = rest.split_at_mut(4);
        let mut scales_h = 0;
        quantize_iq4(x, 7, dh, q4, &mut scales_h, scales_l);
        sh.copy_from_slice(&scales_h.to_le_bytes());
    }
}

// ggml-common.h's `static_assert`s of the blocks' sizes.
const _: () = assert!(IQ4_NL::BYTES == 18);
const _: () = assert!(IQ4_XS::BYTES == 136);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_picks_the_nearest_codebook_entry() {
        let v = &KVALUES_IQ4NL;
        assert_eq!(best_index_int8(v, -200.0), 0);
        assert_eq!(best_index_int8(v, 200.0), 15);
        assert_eq!(best_index_int8(v, 0.0), 8);
        assert_eq!(best_index_int8(v, -5.0), 7);
        assert_eq!(best_index_int8(v, f32::NAN), 15);
    }
}
