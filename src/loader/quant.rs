//! GGML tensor types and their dequantisation to f32, following llama.cpp's `ggml-quants.c` reference
//! (`dequantize_row_*`).
//!
//! Block formats (`d`, `m` are f16; weights run along the row, 32 per block):
//! - `Q8_0`: `d`, then 32 × i8 `q`; `x = d·q`.
//! - `Q4_0`: `d`, then 16 bytes; element `j` is the low nibble of byte `j`, element `j + 16` the high
//!   nibble; `x = d·(q − 8)`.
//! - `Q4_1`: `d`, `m`, then 16 bytes as in `Q4_0`; `x = d·q + m`.
//!
//! Read today: F32, F16, BF16, Q8_0, Q4_0, Q4_1. Next: the K-quants of the common `Q4_K_M` files (Q4_K and
//! Q6_K, 256-element super-blocks), then Q5_K/Q5_0/Q5_1.

use half::{bf16, f16};

/// A tensor storage type kiln reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl GgmlType {
    /// What the error for another type lists.
    pub const SUPPORTED: &'static str = "F32, F16, BF16, Q8_0, Q4_0, Q4_1";

    /// The type for a GGML type id (`enum ggml_type`).
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
        }
    }

    /// Dequantises whole blocks of `bytes` (a length that is not a multiple of the block size drops the
    /// incomplete tail; callers pass exact tensor ranges).
    pub fn dequantize(self, bytes: &[u8]) -> Vec<f32> {
        let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let blocks = bytes.chunks_exact(self.block_bytes());
        let mut out = Vec::with_capacity(blocks.len() * self.block_elems());
        match self {
            Self::F32 => out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            Self::F16 => out.extend(blocks.map(half)),
            Self::BF16 => out.extend(blocks.map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())),
            Self::Q8_0 => {
                for b in blocks {
                    let d = half(b);
                    out.extend(b[2..].iter().map(|&q| d * f32::from(q as i8)));
                }
            }
            Self::Q4_0 => {
                for b in blocks {
                    let d = half(b);
                    let qs = &b[2..];
                    out.extend(qs.iter().map(|&q| d * (f32::from(q & 0xF) - 8.0)));
                    out.extend(qs.iter().map(|&q| d * (f32::from(q >> 4) - 8.0)));
                }
            }
            Self::Q4_1 => {
                for b in blocks {
                    let (d, m) = (half(b), half(&b[2..]));
                    let qs = &b[4..];
                    out.extend(qs.iter().map(|&q| d * f32::from(q & 0xF) + m));
                    out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(GgmlType::from_id(12), None, "Q4_K is not read yet");
    }
}
