//! GGML tensor types: their block layouts, dequantisation to f32 and llama.cpp's reference quantisers, in
//! pure Rust.
//!
//! Every GGML type stores a row as a sequence of fixed-size *blocks*; a block holds
//! [`GgmlType::block_elems`] weights in [`GgmlType::block_bytes`] bytes (all fields little-endian, `f16`
//! scales unless noted). The formats live in submodules, one zero-sized struct per type implementing
//! [`BlockFormat`] and [`Quantize`] (every type has a quantiser), in the style of ggml's
//! `ggml_type_traits`; [`GgmlType`] dispatches to them:
//!
//! | module       | types                          | block                                        |
//! |--------------|--------------------------------|----------------------------------------------|
//! | [`float`]    | F32, F16, BF16                 | one element                                  |
//! | [`legacy`]   | Q4_0, Q4_1, Q5_0, Q5_1, Q8_0   | 32 elements, one (or two) f16 scales         |
//! | [`k_low`]    | Q2_K, Q3_K                     | 256-element super-blocks of 16 sub-blocks    |
//! | [`k_high`]   | Q4_K, Q5_K, Q6_K, Q8_K         | 256-element super-blocks of 8 / 16 sub-blocks|
//! | [`iq`]       | IQ4_NL, IQ4_XS                 | non-linear 4-bit codebook                    |
//!
//! [`kmath`] holds the scale searches the K-quant quantisers share (`make_qx_quants`,
//! `make_q3_quants`, `make_qkx2_quants`, `nearest_int`).
//!
//! Sources: llama.cpp `ggml/src/ggml-common.h` (the block structs), `ggml/src/ggml-quants.c`
//! (`dequantize_row_*`, `quantize_row_*_ref`), and gguf-py `gguf/quants.py` (numpy dequantisers and
//! the legacy quantisers), against which `tests/ggml_blocks.rs` checks every type
//! (`tests/fixtures/make_ggml_blocks.py` makes the fixtures). Dequantisation evaluates each element
//! with the same f32 operations in the same order as the C and numpy code, so results are bit-identical;
//! the quantisers follow the `_ref` C code operation by operation (no FMA contraction, no reordering) and
//! produce the same bytes as llama.cpp's `quantize_row_*_ref` built without floating-point contraction
//! (gcc `-ffp-contract=off`; a build that fuses multiply-adds, e.g. `-march=native` with gcc's default
//! `-ffp-contract=fast`, can differ in rare last-bit ties). The one intended difference: an IQ4_NL block
//! that is all (near) zero gets `d = 0` and zero nibbles, where C leaves the previous block's nibbles.
//!
//! `Q8_K` is the 256-element activation format of ggml's CPU dot products (f32 scale, block sums); it is
//! not a weight type kiln loads, so [`GgmlType::from_id`] does not return it, but it has a quantiser and a
//! dequantiser for CPU kernels.

pub mod float;
#[allow(non_camel_case_types)] // ggml's names: `Q4_K`, `IQ4_NL`, …
pub mod iq;
#[allow(non_camel_case_types)] // ggml's names: `Q4_K`, `IQ4_NL`, …
pub mod k_high;
#[allow(non_camel_case_types)] // ggml's names: `Q4_K`, `IQ4_NL`, …
pub mod k_low;
pub mod kmath;
pub mod legacy;

use half::f16;
use thiserror::Error;

/// Elements in a K-quant super-block (`QK_K`).
pub const QK_K: usize = 256;

/// A block format: its type, element and byte counts, and its dequantiser (ggml's type traits).
pub trait BlockFormat {
    /// The [`GgmlType`] this format is.
    const TYPE: GgmlType;
    /// Elements per block.
    const ELEMS: usize;
    /// Bytes per block.
    const BYTES: usize;

    /// Dequantises one block: `block.len() == BYTES`, `out.len() == ELEMS` (callers slice exact blocks;
    /// any bytes of that length are valid input).
    fn dequantize_block(block: &[u8], out: &mut [f32]);

    /// The name of the first scale field of `block` that is NaN or infinite, if any (`block.len() ==
    /// BYTES`). Unscaled types (F32, F16, BF16) have none.
    fn bad_scale(block: &[u8]) -> Option<&'static str> {
        let _ = block;
        None
    }

    /// Whether every scale field of `block` is finite.
    fn scales_finite(block: &[u8]) -> bool {
        Self::bad_scale(block).is_none()
    }
}

/// A block format with a deterministic quantiser (llama.cpp's `quantize_row_*_ref`).
pub trait Quantize: BlockFormat {
    /// Quantises one block: `x.len() == ELEMS`, `out.len() == BYTES` (every byte of `out` is written).
    fn quantize_block(x: &[f32], out: &mut [u8]);
}

/// Why a byte range is not a valid sequence of blocks.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BlockError {
    /// The byte length is not a whole number of blocks.
    #[error("{ty:?}: {len} bytes is not a whole number of {block_bytes}-byte blocks")]
    Length {
        ty: GgmlType,
        len: usize,
        block_bytes: usize,
    },
    /// A scale field is NaN or infinite.
    #[error("{ty:?}: block {block} has a non-finite scale `{field}`")]
    NonFiniteScale {
        ty: GgmlType,
        block: usize,
        field: &'static str,
    },
    /// The output slice does not hold exactly the elements of the input blocks.
    #[error("{ty:?}: {blocks} blocks hold {expected} elements, the output has {got}")]
    OutputLength {
        ty: GgmlType,
        blocks: usize,
        expected: usize,
        got: usize,
    },
}

/// A tensor storage type kiln reads (plus `Q8_K`, the activation format, see the module doc).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    /// Activations only: not returned by [`GgmlType::from_id`].
    Q8_K,
}

/// Runs `$body` with `$T` the format struct of `$ty`.
macro_rules! with_format {
    ($ty:expr, $T:ident => $body:expr) => {
        match $ty {
            GgmlType::F32 => {
                type $T = float::F32;
                $body
            }
            GgmlType::F16 => {
                type $T = float::F16;
                $body
            }
            GgmlType::BF16 => {
                type $T = float::BF16;
                $body
            }
            GgmlType::Q8_0 => {
                type $T = legacy::Q8_0;
                $body
            }
            GgmlType::Q4_0 => {
                type $T = legacy::Q4_0;
                $body
            }
            GgmlType::Q4_1 => {
                type $T = legacy::Q4_1;
                $body
            }
            GgmlType::Q5_0 => {
                type $T = legacy::Q5_0;
                $body
            }
            GgmlType::Q5_1 => {
                type $T = legacy::Q5_1;
                $body
            }
            GgmlType::Q2_K => {
                type $T = k_low::Q2_K;
                $body
            }
            GgmlType::Q3_K => {
                type $T = k_low::Q3_K;
                $body
            }
            GgmlType::Q4_K => {
                type $T = k_high::Q4_K;
                $body
            }
            GgmlType::Q5_K => {
                type $T = k_high::Q5_K;
                $body
            }
            GgmlType::Q6_K => {
                type $T = k_high::Q6_K;
                $body
            }
            GgmlType::Q8_K => {
                type $T = k_high::Q8_K;
                $body
            }
            GgmlType::IQ4_NL => {
                type $T = iq::IQ4_NL;
                $body
            }
            GgmlType::IQ4_XS => {
                type $T = iq::IQ4_XS;
                $body
            }
        }
    };
}

impl GgmlType {
    /// What the error for another type lists.
    pub const SUPPORTED: &'static str =
        "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

    /// Every type, `Q8_K` last.
    pub const ALL: [GgmlType; 16] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::IQ4_NL,
        Self::IQ4_XS,
        Self::Q8_K,
    ];

    /// The type for a GGML type id (`enum ggml_type` in `ggml.h`); `None` for ids kiln does not read
    /// (including `Q8_K`, 15).
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id && *t != Self::Q8_K)
    }

    /// The GGML type id (`enum ggml_type`).
    pub const fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::IQ4_NL => 20,
            Self::IQ4_XS => 23,
            Self::BF16 => 30,
        }
    }

    /// The type's name as gguf-py's `GGMLQuantizationType` and llama.cpp's docs spell it: `"Q4_K"`,
    /// `"F16"`, `"IQ4_XS"`, … (ggml's `ggml_type_name` is the same in lower case but for the `K`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ4_XS => "IQ4_XS",
        }
    }

    /// Whether the type is block-quantised (everything but F32, F16, BF16).
    pub fn is_quantized(self) -> bool {
        !matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        with_format!(self, T => T::ELEMS)
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        with_format!(self, T => T::BYTES)
    }

    /// Bytes of a row of `elems` elements; `None` if `elems` is not a whole number of blocks (or overflows).
    pub fn row_bytes(self, elems: usize) -> Option<usize> {
        if !elems.is_multiple_of(self.block_elems()) {
            return None;
        }
        (elems / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// Dequantises whole blocks of `bytes` (a length that is not a multiple of the block size drops the
    /// incomplete tail; callers pass exact tensor ranges).
    pub fn dequantize(self, bytes: &[u8]) -> Vec<f32> {
        let blocks = bytes.len() / self.block_bytes();
        let mut out = vec![0.0; blocks * self.block_elems()];
        let whole = &bytes[..blocks * self.block_bytes()];
        with_format!(self, T => dequantize_blocks::<T>(whole, &mut out));
        out
    }

    /// Dequantises `bytes` (whole blocks) into `out`, which must hold exactly their elements.
    pub fn dequantize_into(self, bytes: &[u8], out: &mut [f32]) -> Result<(), BlockError> {
        let blocks = self.whole_blocks(bytes)?;
        let expected = blocks * self.block_elems();
        if out.len() != expected {
            return Err(BlockError::OutputLength {
                ty: self,
                blocks,
                expected,
                got: out.len(),
            });
        }
        with_format!(self, T => dequantize_blocks::<T>(bytes, out));
        Ok(())
    }

    /// Checks that `bytes` is a whole number of blocks whose scale fields are all finite.
    pub fn check(self, bytes: &[u8]) -> Result<(), BlockError> {
        self.whole_blocks(bytes)?;
        with_format!(self, T => {
            for (block, b) in bytes.chunks_exact(T::BYTES).enumerate() {
                if let Some(field) = T::bad_scale(b) {
                    return Err(BlockError::NonFiniteScale { ty: self, block, field });
                }
            }
        });
        Ok(())
    }

    /// Quantises `x` with llama.cpp's reference quantiser; `None` if `x.len()` is not a whole number of
    /// blocks. Every type has a quantiser (Q2_K, Q3_K, IQ4_NL and IQ4_XS included).
    pub fn quantize(self, x: &[f32]) -> Option<Vec<u8>> {
        if !x.len().is_multiple_of(self.block_elems()) {
            return None;
        }
        let mut out = vec![0; x.len() / self.block_elems() * self.block_bytes()];
        with_format!(self, T => quantize_blocks::<T>(x, &mut out));
        Some(out)
    }

    fn whole_blocks(self, bytes: &[u8]) -> Result<usize, BlockError> {
        let block_bytes = self.block_bytes();
        if !bytes.len().is_multiple_of(block_bytes) {
            return Err(BlockError::Length {
                ty: self,
                len: bytes.len(),
                block_bytes,
            });
        }
        Ok(bytes.len() / block_bytes)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Dequantises whole blocks (`bytes.len() == out.len() / ELEMS * BYTES`).
pub fn dequantize_blocks<T: BlockFormat>(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes.chunks_exact(T::BYTES).zip(out.chunks_exact_mut(T::ELEMS)) {
        T::dequantize_block(b, o);
    }
}

/// Quantises whole blocks (`out.len() == x.len() / ELEMS * BYTES`).
pub fn quantize_blocks<T: Quantize>(x: &[f32], out: &mut [u8]) {
    for (xb, o) in x.chunks_exact(T::ELEMS).zip(out.chunks_exact_mut(T::BYTES)) {
        T::quantize_block(xb, o);
    }
}

/// The f16 at `b[at..at + 2]` as f32.
#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Writes `x` rounded to f16 (round to nearest even, as `GGML_FP32_TO_FP16`) at `b[at..at + 2]`.
#[inline]
pub(crate) fn put_f16(b: &mut [u8], at: usize, x: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(x).to_le_bytes());
}

/// `Some(field)` if the f16 at `b[at..]` is NaN or infinite.
#[inline]
pub(crate) fn bad_f16(b: &[u8], at: usize, field: &'static str) -> Option<&'static str> {
    (!f16_at(b, at).is_finite()).then_some(field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn h(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_le_bytes()
    }

    #[test]
    fn blocks_dequantize_by_the_reference_formulas() {
        // Q8_0: d = 0.5, q = -128..=-97.
        let mut b = h(0.5).to_vec();
        b.extend((0..32).map(|i: i32| (i - 128) as i8 as u8));
        let x = GgmlType::Q8_0.dequantize(&b);
        assert_eq!(x.len(), 32);
        assert_eq!((x[0], x[31]), (-64.0, -48.5));
        // Q4_0: byte j = (hi << 4) | lo with lo = j, hi = 15 - j; d = 2.
        let mut b = h(2.0).to_vec();
        b.extend((0..16u8).map(|j| ((15 - j) << 4) | j));
        let x = GgmlType::Q4_0.dequantize(&b);
        assert_eq!((x[0], x[15], x[16], x[31]), (-16.0, 14.0, 14.0, -16.0));
        // Q4_1: d = 0.25, m = -1.
        let mut b = h(0.25).to_vec();
        b.extend(h(-1.0));
        b.extend((0..16u8).map(|j| ((15 - j) << 4) | j));
        let x = GgmlType::Q4_1.dequantize(&b);
        assert_eq!((x[0], x[15], x[16], x[31]), (-1.0, 2.75, 2.75, -1.0));
        // Half types and a dropped partial block.
        assert_eq!(
            GgmlType::BF16.dequantize(&bf16::from_f32(3.0).to_le_bytes()),
            [3.0]
        );
        assert_eq!(GgmlType::F16.dequantize(&[h(1.5)[0], h(1.5)[1], 7]), [1.5]);
        assert_eq!(GgmlType::from_id(9), None, "Q8_1 is not read");
    }

    #[test]
    fn ids_names_and_sizes_agree() {
        for ty in GgmlType::ALL {
            if ty != GgmlType::Q8_K {
                assert_eq!(GgmlType::from_id(ty.id()), Some(ty), "{ty:?}");
            }
            assert_eq!(ty.name(), format!("{ty:?}"));
            assert_eq!(ty.row_bytes(ty.block_elems() * 3), Some(ty.block_bytes() * 3));
        }
    }
}
