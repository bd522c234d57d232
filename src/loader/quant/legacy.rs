//! The original 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Layouts (`ggml-common.h`; `d`, `m` are f16, offsets in bytes):
//!
//! | type | bytes | fields                                  | element `j` (0..32)                    |
//! |------|-------|-----------------------------------------|----------------------------------------|
//! | Q4_0 | 18    | `d`@0, `qs[16]`@2                       | `x = d·(q − 8)`                        |
//! | Q4_1 | 20    | `d`@0, `m`@2, `qs[16]`@4                | `x = d·q + m`                          |
//! | Q5_0 | 22    | `d`@0, `qh: u32`@2, `qs[16]`@6          | `x = d·(q − 16)`                       |
//! | Q5_1 | 24    | `d`@0, `m`@2, `qh: u32`@4, `qs[16]`@8   | `x = d·q + m`                          |
//! | Q8_0 | 34    | `d`@0, `qs: [i8; 32]`@2                 | `x = d·q`                              |
//!
//! The 4-bit part of element `j < 16` is the low nibble of `qs[j]`, of element `j + 16` the high nibble
//! of `qs[j]`; in Q5 the fifth bit of element `j` is bit `j` of the little-endian `qh`.
//!
//! Reference quantisers (`quantize_row_*_ref`, reproduced by gguf-py byte for byte):
//! - Q4_0 / Q5_0: `max` = the element of largest magnitude (first one on ties), `d = max / −8` (`−16`),
//!   `q = min(15, trunc(x/d + 8.5))` (`min(31, trunc(x/d + 16.5))`), with `x/d` computed as `x·(1/d)`.
//! - Q4_1 / Q5_1: `d = (max − min) / 15` (`31`), `m = min`, `q = min(15, trunc((x − min)·(1/d) + 0.5))`.
//! - Q8_0: `d = amax / 127`, `q = round(x·(1/d))` (half away from zero).
//!
//! A zero `d` makes `1/d` zero (all `q` at the offset). Sources: llama.cpp `ggml/src/ggml-quants.c`
//! (`dequantize_row_q{4_0,4_1,5_0,5_1,8_0}`, `quantize_row_q{4_0,4_1,5_0,5_1,8_0}_ref`), gguf-py
//! `gguf/quants.py` (`Q4_0` … `Q8_0`).

use super::{BlockFormat, GgmlType, Quantize, bad_f16, f16_at, put_f16};

/// Elements per legacy block (`QK4_0` = `QK4_1` = `QK5_0` = `QK5_1` = `QK8_0`).
pub const QK: usize = 32;

/// `Q4_0`: 4-bit, symmetric.
pub struct Q4_0;
/// `Q4_1`: 4-bit with a minimum.
pub struct Q4_1;
/// `Q5_0`: 5-bit, symmetric.
pub struct Q5_0;
/// `Q5_1`: 5-bit with a minimum.
pub struct Q5_1;
/// `Q8_0`: 8-bit, symmetric.
pub struct Q8_0;

/// `1/d`, or 0 for a zero `d` (`id = d ? 1.0f/d : 0.0f`).
#[inline]
fn inv(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// The element of largest magnitude (the first on ties), as the `_ref` loops find it.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `(min, max)` starting from `(FLT_MAX, -FLT_MAX)` as the `_ref` loops do.
#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `(int8_t)(v)` then `MIN(hi, ·)`, for `v` in the range the quantisers produce (saturating otherwise).
#[inline]
fn trunc_min(v: f32, hi: i32) -> u8 {
    (v as i8 as i32).clamp(0, hi) as u8
}

/// Elements `0..32` of a Q5 block from its low nibbles and `qh`.
#[inline]
fn q5(qs: &[u8], qh: u32, j: usize) -> u8 {
    let lo = if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
    lo | ((((qh >> j) & 1) as u8) << 4)
}

impl BlockFormat for Q4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const ELEMS: usize = QK;
    /// d: f16, qs: 16 bytes of nibbles (ggml-common.h's `block_q4_0`).
    const BYTES: usize = 2 + QK / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        for (j, &q) in b[2..18].iter().enumerate() {
            out[j] = d * (f32::from(q & 0xF) - 8.0);
            out[j + 16] = d * (f32::from(q >> 4) - 8.0);
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d")
    }
}

impl Quantize for Q4_0 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let d = signed_absmax(x) / -8.0;
        let id = inv(d);
        put_f16(out, 0, d);
        for j in 0..16 {
            let lo = trunc_min(x[j] * id + 8.5, 15);
            let hi = trunc_min(x[j + 16] * id + 8.5, 15);
            out[2 + j] = lo | (hi << 4);
        }
    }
}

impl BlockFormat for Q4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const ELEMS: usize = QK;
    /// d, m: f16, qs: nibbles (ggml-common.h's `block_q4_1`).
    const BYTES: usize = 2 * 2 + QK / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for (j, &q) in b[4..20].iter().enumerate() {
            out[j] = d * f32::from(q & 0xF) + m;
            out[j + 16] = d * f32::from(q >> 4) + m;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d").or_else(|| bad_f16(b, 2, "m"))
    }
}

impl Quantize for Q4_1 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        put_f16(out, 0, d);
        put_f16(out, 2, min);
        for j in 0..16 {
            let lo = trunc_min((x[j] - min) * id + 0.5, 15);
            let hi = trunc_min((x[j + 16] - min) * id + 0.5, 15);
            out[4 + j] = lo | (hi << 4);
        }
    }
}

impl BlockFormat for Q5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const ELEMS: usize = QK;
    /// d: f16, qh: u32, qs: nibbles (ggml-common.h's `block_q5_0`).
    const BYTES: usize = 2 + 4 + QK / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        for (j, o) in out.iter_mut().enumerate() {
            *o = d * (f32::from(q5(qs, qh, j)) - 16.0);
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d")
    }
}

/// Packs 32 five-bit values into `qh` (returned) and 16 nibble bytes.
#[inline]
fn pack_q5(q: &[u8; QK], qs: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4);
        qh |= u32::from(q[j] >> 4) << j;
        qh |= u32::from(q[j + 16] >> 4) << (j + 16);
    }
    qh
}

impl Quantize for Q5_0 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let d = signed_absmax(x) / -16.0;
        let id = inv(d);
        put_f16(out, 0, d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_min(x[j] * id + 16.5, 31));
        let qh = pack_q5(&q, &mut out[6..22]);
        out[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

impl BlockFormat for Q5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const ELEMS: usize = QK;
    /// d, m: f16, qh: u32, qs: nibbles (ggml-common.h's `block_q5_1`).
    const BYTES: usize = 2 * 2 + 4 + QK / 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        for (j, o) in out.iter_mut().enumerate() {
            *o = d * f32::from(q5(qs, qh, j)) + m;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d").or_else(|| bad_f16(b, 2, "m"))
    }
}

impl Quantize for Q5_1 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        put_f16(out, 0, d);
        put_f16(out, 2, min);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_min((x[j] - min) * id + 0.5, 31));
        let qh = pack_q5(&q, &mut out[8..24]);
        out[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

impl BlockFormat for Q8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const ELEMS: usize = QK;
    /// d: f16, qs: i8 each (ggml-common.h's `block_q8_0`).
    const BYTES: usize = 2 + QK;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        for (o, &q) in out.iter_mut().zip(&b[2..34]) {
            *o = f32::from(q as i8) * d;
        }
    }

    fn bad_scale(b: &[u8]) -> Option<&'static str> {
        bad_f16(b, 0, "d")
    }
}

impl Quantize for Q8_0 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        put_f16(out, 0, d);
        for (o, &v) in out[2..34].iter_mut().zip(x) {
            *o = (v * id).round() as i8 as u8;
        }
    }
}

// ggml-common.h's `static_assert`s of the blocks' sizes.
const _: () = assert!(Q4_1::BYTES == 20);
const _: () = assert!(Q5_1::BYTES == 24);
const _: () = assert!(Q4_0::BYTES == 18);
const _: () = assert!(Q5_0::BYTES == 22);
const _: () = assert!(Q8_0::BYTES == 34);
