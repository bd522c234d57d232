//! Prefill products (many activation rows): a panel of weight rows dequantised to f32 at a time, then
//! multiplied by the `gemm` crate (burn-flex's own f32 matmul: packed, register-blocked micro-kernels,
//! AVX2/FMA natively, `simd128` on wasm32), while only `PANEL_BYTES` of f32 weights exist at a time. What
//! it costs beyond `gemm` is one decode per weight element per call and `O(m·k + m·n)` copies (measured
//! natively, single-threaded: 2.4–3.3× the integer kernels it replaced at m = 64/256, within 15–45 % of
//! burn-flex's f32 matmul on SmolLM2's shapes, and faster than it on the 49152-row lm_head; see
//! `examples/cpu_matmul_bench.rs`).
//!
//! Shapes as [`super::matmul`]: `x̂` is `m × k` row-major f32, the weights `n` rows of `row_bytes` bytes,
//! `y` is `m × n` row-major. Panel `p` holds weight rows `p·np … p·np + np` as `np × k` row-major f32 (the
//! `gemm` right-hand side `k × np`, column-major), and its product writes columns `p·np …` of `y`.
//!
//! Why not the integer dot products of the decode path: with one f32 scale per 32 (or 16) elements on both
//! sides, every block of every output pays a conversion and a scaled accumulation on top of its
//! multiply-adds, and natively the 128-bit `pmaddwd` runs at half the width of the 256-bit FMA `gemm`
//! uses; a dequantised panel costs one decode per weight element per call, spread over all `m` rows (a
//! few per cent at m = 64), and the rest is `gemm`'s f32 speed.
//!
//! Accuracy: the quantized formats multiply the activations' 16-bit values `d·q` ([`super::act`]), the
//! very numbers the integer kernels take, so a row's result does not depend on how many rows came with it
//! (beyond f32 summation order), and the bounds of `tests/kernels_cpu.rs` hold unchanged.

use gemm::{Parallelism, gemm};

/// A weight format's row dequantisation, `row_bytes` bytes into `k` f32 (as `GgmlType::dequantize`).
///
/// A trait with an `#[inline(always)]` method rather than a closure: LLVM outlines closures called from
/// the big per-type match of [`super::matmul`], which then run without its AVX2 code generation.
pub trait DecodeRow {
    fn decode_row(&mut self, row: &[u8], out: &mut [f32]);
}

/// Activation rows from which [`super::matmul`] takes this path (below it, the per-row kernels).
pub const ROWS_FROM: usize = 4;

/// Bytes of f32 weights dequantised per `gemm` call: a panel stays in L2 while `gemm` packs it.
const PANEL_BYTES: usize = 256 * 1024;

/// Weight rows per panel for rows of `k` elements: at least 16 (gemm's packing works in such strips),
/// a multiple of 16.
fn panel_rows(k: usize) -> usize {
    (PANEL_BYTES / (4 * k.max(1)) / 16 * 16).max(16)
}

/// `y[m, n] = x̂ · Wᵀ` with each weight row (`row_bytes` bytes of `w`) dequantised into `k` f32 by
/// `decode`; `y` is overwritten.
///
/// `gemm` runs untransposed on column-major operands, its fastest layout (measured 10–20 % faster than
/// burn-flex's row-major `x · W`): `x̂ᵀ` (`k × m`, copied once per call) as the left-hand side, a panel
/// in its natural row-major decode order as the column-major right-hand side, and the panel's `m × np`
/// result column-major in `t`, copied into its columns of `y` (`m·k + m·n` copies against `m·n·k`
/// multiply-adds).
///
/// Inlined into the format's kernel so that `decode_row` is compiled for the caller's target features
/// (AVX2 natively, see [`super::matmul`]).
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the product's shape, its operands and the row decoder"
)]
pub fn matmul(
    w: &[u8],
    row_bytes: usize,
    n: usize,
    k: usize,
    xh: &[f32],
    m: usize,
    y: &mut [f32],
    decode: &mut impl DecodeRow,
) {
    assert!(w.len() >= n * row_bytes && xh.len() >= m * k && y.len() >= m * n);
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let mut xt = vec![0.0f32; k * m];
    transpose(xh, m, k, &mut xt, m);
    let np = panel_rows(k).min(n);
    let mut panel = vec![0.0f32; np * k];
    let mut t = vec![0.0f32; np * m];
    for n0 in (0..n).step_by(np) {
        let rows = np.min(n - n0);
        for (i, out) in panel.chunks_exact_mut(k).take(rows).enumerate() {
            let at = (n0 + i) * row_bytes;
            decode.decode_row(&w[at..at + row_bytes], out);
        }
        // SAFETY: dst `m × rows` column-major (stride `m`) in `t` (`rows·m ≤ t.len()`), lhs `m × k`
        // column-major (stride `m`) in `xt` (`k·m` long), rhs `k × rows` column-major (stride `k`) in
        // `panel` (`rows·k ≤ np·k`): every index the strides reach is in bounds; `t` is exclusively
        // borrowed, so nothing aliases it.
        unsafe {
            gemm(
                m,
                rows,
                k,
                t.as_mut_ptr(),
                m as isize,
                1,
                false,
                xt.as_ptr(),
                m as isize,
                1,
                panel.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        transpose(&t[..rows * m], rows, m, &mut y[n0..], n);
    }
}

/// `dst[c·stride + r] = src[r·cols + c]` for `src` of `rows × cols` (row-major), in 8 × 8 tiles so that
/// both sides stream through whole cache lines.
fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32], stride: usize) {
    const T: usize = 8;
    for r0 in (0..rows).step_by(T) {
        let r1 = (r0 + T).min(rows);
        for c0 in (0..cols).step_by(T) {
            let c1 = (c0 + T).min(cols);
            for c in c0..c1 {
                let d = &mut dst[c * stride + r0..c * stride + r1];
                for (r, d) in (r0..r1).zip(d) {
                    *d = src[r * cols + c];
                }
            }
        }
    }
}
