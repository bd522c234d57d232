//! A numerical self-check of a device: the decoder's core kernels run there and are compared with the host.
//!
//! The computation is the shape of one attention-plus-norm step, on deterministic pseudo-random inputs:
//!
//! ```text
//! a: [batch, rows, inner]   b: [batch, inner, cols]   g: [cols]
//! y = rms_norm(softmax(a · b / sqrt(inner), -1), g, eps)       y: [batch, rows, cols]
//! ```
//!
//! It exercises a batched matmul, an exp/max/sum reduction (softmax), a mean-of-squares reduction with
//! broadcasting (RMSNorm) and an async read back to the host, which is every kind of operation the decoder
//! needs. The host reference is computed in f64 with plain loops, independently of burn. Shapes are
//! deliberately not multiples of common tile sizes so that edge handling in the kernels is covered.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor, TensorData};
use serde::Serialize;

use crate::model::rms_norm;

/// `[batch, rows, inner, cols]` of the check.
pub const SHAPE: [usize; 4] = [2, 33, 80, 48];
/// RMSNorm epsilon used by the check (Llama's usual value).
pub const EPS: f64 = 1e-5;
/// An element passes when `|device - host| <= ATOL + RTOL * |host|`. f32 accumulation over `inner` = 80
/// terms, an `exp` and a `sqrt` stay far inside this; a wrong index, a missing reduction or a broken
/// broadcast are off by orders of magnitude more.
pub const ATOL: f64 = 1e-4;
/// Relative part of the tolerance, see [`ATOL`].
pub const RTOL: f64 = 1e-4;

/// What the check measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// `[batch, rows, inner, cols]`.
    pub shape: [usize; 4],
    /// Largest `|device - host|` over all outputs.
    pub max_abs_diff: f64,
    /// Number of outputs outside `ATOL + RTOL * |host|`.
    pub mismatches: usize,
    /// Sum of all device outputs, a fingerprint to show.
    pub checksum: f64,
    /// Absolute and relative tolerance.
    pub tolerance: [f64; 2],
    /// No mismatches (a NaN, or a missing or extra output, is one).
    pub passed: bool,
}

/// The device failed while computing or reading back.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("reading the result back from the device failed: {0}")]
    ReadBack(String),
}

/// Runs the check on `device` and compares with the host reference.
pub async fn check_device(device: &Device) -> Result<CheckReport, CheckError> {
    let [batch, rows, inner, cols] = SHAPE;
    let (a, b, g) = inputs();
    let ta = Tensor::<3>::from_data(TensorData::new(a.clone(), [batch, rows, inner]), device);
    let tb = Tensor::<3>::from_data(TensorData::new(b.clone(), [batch, inner, cols]), device);
    let tg = Tensor::<1>::from_data(TensorData::new(g.clone(), [cols]), device);

    let scores = ta.matmul(tb).div_scalar((inner as f64).sqrt());
    let y = rms_norm(softmax(scores, 2), tg, EPS);
    let data = y
        .into_data_async()
        .await
        .map_err(|e| CheckError::ReadBack(format!("{e:?}")))?;
    let got = data
        .as_slice::<f32>()
        .map_err(|e| CheckError::ReadBack(format!("{e:?}")))?;

    Ok(compare(got, &host_reference(&a, &b, &g)))
}

/// Compares device outputs with the host reference, element by element.
fn compare(got: &[f32], want: &[f64]) -> CheckReport {
    let mut report = CheckReport {
        shape: SHAPE,
        max_abs_diff: 0.0,
        mismatches: want.len().abs_diff(got.len()),
        checksum: 0.0,
        tolerance: [ATOL, RTOL],
        passed: false,
    };
    for (&d, &h) in got.iter().zip(want) {
        // NaN compares false everywhere: count it as a mismatch and as an infinite difference.
        let diff = (f64::from(d) - h).abs();
        let diff = if diff.is_nan() { f64::INFINITY } else { diff };
        if diff > ATOL + RTOL * h.abs() {
            report.mismatches += 1;
        }
        report.max_abs_diff = report.max_abs_diff.max(diff);
        report.checksum += f64::from(d);
    }
    report.passed = report.mismatches == 0;
    report
}

/// Deterministic inputs in [-1, 1): `a` row-major `[batch, rows, inner]`, `b` `[batch, inner, cols]`, and
/// a norm weight `g` in [0.5, 1.5).
fn inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let [batch, rows, inner, cols] = SHAPE;
    // xorshift64*: fixed seed, no dependency, identical on every target.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40; // 24 random bits
        bits as f32 / (1u32 << 24) as f32
    };
    let a = (0..batch * rows * inner).map(|_| next() * 2.0 - 1.0).collect();
    let b = (0..batch * inner * cols).map(|_| next() * 2.0 - 1.0).collect();
    let g = (0..cols).map(|_| next() + 0.5).collect();
    (a, b, g)
}

/// The same computation in f64 with plain loops.
fn host_reference(a: &[f32], b: &[f32], g: &[f32]) -> Vec<f64> {
    let [batch, rows, inner, cols] = SHAPE;
    let scale = 1.0 / (inner as f64).sqrt();
    let mut out = Vec::with_capacity(batch * rows * cols);
    for n in 0..batch {
        for r in 0..rows {
            let mut row: Vec<f64> = (0..cols)
                .map(|c| {
                    let dot: f64 = (0..inner)
                        .map(|k| {
                            f64::from(a[(n * rows + r) * inner + k])
                                * f64::from(b[(n * inner + k) * cols + c])
                        })
                        .sum();
                    dot * scale
                })
                .collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            row.iter_mut().for_each(|v| *v = (*v - max).exp());
            let sum: f64 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= sum);
            let mean_sq = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let inv_rms = 1.0 / (mean_sq + EPS).sqrt();
            out.extend(row.iter().zip(g).map(|(v, &w)| v * inv_rms * f64::from(w)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_reference_rows_are_normalised_softmax() {
        let (a, b, _) = inputs();
        let ones = vec![1.0f32; SHAPE[3]];
        let y = host_reference(&a, &b, &ones);
        for row in y.chunks(SHAPE[3]) {
            // Softmax output is positive; after RMSNorm with unit weight the mean square is just under 1
            // (softmax values are ~1/48, so eps = 1e-5 is not negligible against their mean square).
            assert!(row.iter().all(|&v| v > 0.0));
            let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
            assert!(ms > 0.9 && ms < 1.0, "mean square {ms}");
        }
    }

    #[test]
    fn compare_flags_wrong_missing_and_nan_outputs() {
        let want = vec![1.0f64, -2.0, 0.5, 1e-6];
        let exact: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        let ok = compare(&exact, &want);
        assert!(
            ok.passed && ok.mismatches == 0 && ok.max_abs_diff < 1e-7,
            "{ok:?}"
        );

        // Off by 3e-4 at |host| = 1: outside 1e-4 + 1e-4 * 1.
        let mut off = exact.clone();
        off[0] += 3e-4;
        let r = compare(&off, &want);
        assert!(
            !r.passed && r.mismatches == 1 && (r.max_abs_diff - 3e-4).abs() < 1e-6,
            "{r:?}"
        );

        let mut nan = exact.clone();
        nan[2] = f32::NAN;
        let r = compare(&nan, &want);
        assert!(
            !r.passed && r.mismatches == 1 && r.max_abs_diff.is_infinite(),
            "{r:?}"
        );

        let r = compare(&exact[..3], &want);
        assert!(!r.passed && r.mismatches == 1, "{r:?}");
    }

    #[test]
    fn inputs_are_deterministic_and_in_range() {
        let (a1, b1, g1) = inputs();
        let (a2, _, _) = inputs();
        assert_eq!(a1, a2);
        assert!(a1.iter().chain(&b1).all(|v| (-1.0..1.0).contains(v)));
        assert!(g1.iter().all(|v| (0.5..1.5).contains(v)));
        // Not degenerate: the values spread over the range.
        let mean = a1.iter().sum::<f32>() / a1.len() as f32;
        assert!(mean.abs() < 0.1, "mean {mean}");
    }
}
