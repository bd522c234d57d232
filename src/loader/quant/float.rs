//! The unquantised types: one element per block, no scales.
//!
//! | type | bytes | element                                                                  |
//! |------|-------|--------------------------------------------------------------------------|
//! | F32  | 4     | IEEE binary32, little-endian                                             |
//! | F16  | 2     | IEEE binary16 (`ggml_fp16_t`), widened exactly                           |
//! | BF16 | 2     | the high half of a binary32 (`ggml_bf16_t`), widened by `bits << 16`     |
//!
//! Conversion to these types: F16 rounds to nearest even (`GGML_FP32_TO_FP16`, numpy's
//! `astype(np.float16)`); BF16 follows `ggml_compute_fp32_to_bf16` in `ggml-impl.h` (and gguf-py's
//! `BF16.quantize_blocks`): a NaN becomes a quiet NaN with its top 16 bits kept, everything else rounds to
//! nearest even on the low 16 bits (so large finite values may round to infinity, as in ggml).
//!
//! Sources: llama.cpp `ggml/src/ggml-impl.h` (`ggml_compute_fp32_to_bf16`, `ggml_compute_bf16_to_fp32`),
//! gguf-py `gguf/quants.py` (`BF16`, and the F16/F32 cases of `quantize`/`dequantize`).
//!
//! These types have no scale fields: [`BlockFormat::bad_scale`] is always `None` for them (a NaN weight is
//! data, not a broken block header).

use super::{BlockFormat, GgmlType, Quantize};
use half::f16;

/// `F32`: 4-byte little-endian IEEE binary32.
pub struct F32;

/// `F16`: 2-byte little-endian IEEE binary16.
pub struct F16;

/// `BF16`: 2-byte little-endian bfloat16 (the top half of an f32).
pub struct BF16;

impl BlockFormat for F32 {
    const TYPE: GgmlType = GgmlType::F32;
    const ELEMS: usize = 1;
    const BYTES: usize = 4;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

impl Quantize for F32 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&x[0].to_le_bytes());
    }
}

impl BlockFormat for F16 {
    const TYPE: GgmlType = GgmlType::F16;
    const ELEMS: usize = 1;
    const BYTES: usize = 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        out[0] = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

impl Quantize for F16 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&f16::from_f32(x[0]).to_le_bytes());
    }
}

impl BlockFormat for BF16 {
    const TYPE: GgmlType = GgmlType::BF16;
    const ELEMS: usize = 1;
    const BYTES: usize = 2;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        out[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

impl Quantize for BF16 {
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&f32_to_bf16(x[0]).to_le_bytes());
    }
}

/// `ggml_compute_bf16_to_fp32`: the bits shifted into the high half.
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `ggml_compute_fp32_to_bf16`: NaN → quiet NaN, otherwise round to nearest even.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    // In u64 as gguf-py does; the result of `>> 16` fits 16 bits except for the all-ones pattern, which is a
    // NaN and handled above.
    ((u64::from(u) + 0x7fff + u64::from((u >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16 values: ties to even (down), 1 + 3·2^-8 ties up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_to_f32(0xc040), -3.0);
    }
}
