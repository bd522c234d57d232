//! Activations quantized to 16 bits once per call, for the integer dot products of the kernels.
//!
//! - [`Q16Rows`] (for the 32-element weight formats): `m` rows of `k` values in blocks of 32, each block a
//!   scale `d = amax / 32767` (f32), 32 × i16 `q` with `x ≈ d·q`, and `s = d · Σq` (`Σq` summed exactly in
//!   i32, for the formats with a minimum: `Σ (dw·q + m)·x = dw·Σq·x + m·s`).
//! - [`Q16KRows`] (for the K-quants): blocks of 256, each `d` (f32), 256 × i16, and the 16 exact sums of 16
//!   consecutive `q` (i32; `|Σ| ≤ 16 · 32767 < 2¹⁹`), the counterpart of llama.cpp's `block_q8_K`.
//!
//! Rounding is to nearest (ties to even) and `|q| ≤ 32767`, so every element is off by at most `d / 2 =
//! amax / 65534` (plus f32 rounding of `x · 32767 / amax`, a relative `2ε` of `|x|`). A block of zeros has
//! `d = 0`, `q = 0`. Why 16 bits rather than llama.cpp's 8: the weights are widened to i16 for
//! `i32x4.dot_i16x8_s` / `pmaddwd` anyway, so i16 activations cost the same multiply-adds (and save the
//! widening of the activation side), while the error drops 258-fold, to the f32 path's level.

/// 1.5 · 2²³: adding it to a float of magnitude below 2²² leaves the nearest integer in the low mantissa
/// bits (llama.cpp's `nearest_int`), branch-free and vectorizable where `f32::round` is a libm call.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// The largest quantized magnitude, `2¹⁵ − 1` (symmetric, so `−q` never overflows).
pub const QMAX: i16 = i16::MAX;

/// `v` rounded to the nearest integer and clamped to ±32767 (`v` finite, `|v| ≤ 2²²`; others give some
/// i16).
#[inline(always)]
fn round_i16(v: f32) -> i16 {
    let i = ((v + ROUND_MAGIC).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000;
    i.clamp(-i32::from(QMAX), i32::from(QMAX)) as i16
}

/// Quantizes `x` (a whole number of `N`-element blocks) into `q`, returning each block's scale in `d`.
fn quantize_blocks<const N: usize>(x: &[f32], q: &mut [[i16; N]], d: &mut [f32]) {
    let (xb, _) = x.as_chunks::<N>();
    let qmax = f32::from(QMAX);
    for ((xb, qb), db) in xb.iter().zip(q.iter_mut()).zip(d.iter_mut()) {
        // Eight running maxima, by comparison (`f32::max` is IEEE maxNum, which neither wasm's `f32x4.max`
        // nor x86's `maxps` is: it would not vectorize; a NaN here yields garbage `q`, never a panic).
        let mut lanes = [0.0f32; 8];
        for c in xb.as_chunks::<8>().0 {
            for (m, v) in lanes.iter_mut().zip(c) {
                let a = v.abs();
                *m = if a > *m { a } else { *m };
            }
        }
        let amax = lanes.iter().fold(0.0f32, |m, &a| if a > m { a } else { m });
        let id = if amax > 0.0 { qmax / amax } else { 0.0 };
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = round_i16(v * id);
        }
        *db = amax / qmax;
    }
}

/// `d·q` of each block, row-major.
fn dequantize_blocks<const N: usize>(q: &[[i16; N]], d: &[f32]) -> Vec<f32> {
    q.iter()
        .zip(d)
        .flat_map(|(q, &d)| q.map(|v| d * f32::from(v)))
        .collect()
}

/// `Σ q` exactly (at most 256 · 32767 in magnitude).
#[inline(always)]
fn sum(q: &[i16]) -> i32 {
    q.iter().map(|&v| i32::from(v)).sum()
}

/// A product's activations as its kernels read them, prepared once per product: every range of a split
/// product ([`super::split`]) reads the same, instead of quantizing (and on wasm permuting) them again.
#[derive(Debug, Clone, Default)]
pub enum Prepared {
    /// The f32 activations as given: the float weights, and the prefill path (dequantised panels through
    /// `gemm`).
    #[default]
    F32,
    /// 32-element blocks for the 32-element formats' decode path, with their nibble-order copy where the
    /// wasm kernel of the format reads one (`q32::nib`).
    Q16 {
        xq: Q16Rows,
        nib: Option<Vec<[i16; 32]>>,
    },
    /// Super-blocks of 256 for the K-quants' decode path.
    Q16K(Q16KRows),
}

/// `m × k` activations in 32-element 16-bit blocks; block `b` of row `r` is index `r · (k / 32) + b`.
#[derive(Debug, Clone, Default)]
pub struct Q16Rows {
    /// Elements per row.
    pub k: usize,
    /// The quantized values.
    pub q: Vec<[i16; 32]>,
    /// Block scales, `x ≈ d·q`.
    pub d: Vec<f32>,
    /// `d · Σq` per block (`Σq` exact: `|Σq| ≤ 32 · 32767 < 2²⁰`, so also exact as f32).
    pub s: Vec<f32>,
}

impl Q16Rows {
    /// Quantizes `m` rows of `k` (a multiple of 32) values.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        debug_assert!(k.is_multiple_of(32) && x.len() == m * k);
        let nb = m * (k / 32);
        let mut r = Self {
            k,
            q: vec![[0; 32]; nb],
            d: vec![0.0; nb],
            s: vec![0.0; nb],
        };
        quantize_blocks::<32>(&x[..nb * 32], &mut r.q, &mut r.d);
        for ((s, q), d) in r.s.iter_mut().zip(&r.q).zip(&r.d) {
            *s = d * sum(q) as f32;
        }
        r
    }

    /// The blocks of row `r`: values, scales, sums.
    #[inline]
    pub fn row(&self, r: usize) -> (&[[i16; 32]], &[f32], &[f32]) {
        let nb = self.k / 32;
        let i = r * nb..(r + 1) * nb;
        (&self.q[i.clone()], &self.d[i.clone()], &self.s[i])
    }

    /// The values these blocks stand for (`d·q`), row-major: the kernels' exact input.
    pub fn dequantize(&self) -> Vec<f32> {
        dequantize_blocks(&self.q, &self.d)
    }
}

/// `m × k` activations in 16-bit super-blocks of 256; super-block `b` of row `r` is `r · (k / 256) + b`.
#[derive(Debug, Clone, Default)]
pub struct Q16KRows {
    /// Elements per row.
    pub k: usize,
    /// The quantized values.
    pub q: Vec<[i16; 256]>,
    /// Super-block scales, `x ≈ d·q`.
    pub d: Vec<f32>,
    /// Exact sums of each 16 consecutive values.
    pub bsums: Vec<[i32; 16]>,
}

impl Q16KRows {
    /// Quantizes `m` rows of `k` (a multiple of 256) values.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        debug_assert!(k.is_multiple_of(256) && x.len() == m * k);
        let nb = m * (k / 256);
        let mut r = Self {
            k,
            q: vec![[0; 256]; nb],
            d: vec![0.0; nb],
            bsums: vec![[0; 16]; nb],
        };
        quantize_blocks::<256>(&x[..nb * 256], &mut r.q, &mut r.d);
        for (bs, q) in r.bsums.iter_mut().zip(&r.q) {
            let (q16, _) = q.as_chunks::<16>();
            for (s, q) in bs.iter_mut().zip(q16) {
                *s = sum(q);
            }
        }
        r
    }

    /// The super-blocks of row `r`: values, scales, sums of 16.
    #[inline]
    pub fn row(&self, r: usize) -> (&[[i16; 256]], &[f32], &[[i32; 16]]) {
        let nb = self.k / 256;
        let i = r * nb..(r + 1) * nb;
        (&self.q[i.clone()], &self.d[i.clone()], &self.bsums[i])
    }

    /// The values these blocks stand for (`d·q`), row-major: the kernels' exact input.
    pub fn dequantize(&self) -> Vec<f32> {
        dequantize_blocks(&self.q, &self.d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_within_half_a_step() {
        assert_eq!(
            [
                round_i16(0.49),
                round_i16(0.51),
                round_i16(-2.5),
                round_i16(32766.6),
                round_i16(-40000.0)
            ],
            [0, 1, -2, 32767, -32767]
        );
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 31.5) * 0.013).collect();
        let q = Q16Rows::quantize(&x, 2, 32);
        for (b, (xb, xq)) in x.chunks(32).zip(q.dequantize().chunks(32)).enumerate() {
            let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            assert!(
                xb.iter()
                    .zip(xq)
                    .all(|(a, b)| (a - b).abs() <= amax / 65534.0 + 2.0 * f32::EPSILON * a.abs()),
                "block {b}"
            );
        }
        assert_eq!(Q16Rows::quantize(&[0.0; 32], 1, 32).d, [0.0]);
        let k = Q16KRows::quantize(&[1.0; 256], 1, 256);
        assert_eq!(k.bsums[0], [16 * 32767; 16]);
    }
}
