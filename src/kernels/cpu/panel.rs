//! Prefill products (many activation rows): a panel of weight rows dequantised to f32 at a time, then
//! multiplied by the `gemm` crate (burn-flex's own f32 matmul: packed, register-blocked micro-kernels,
//! AVX2/FMA natively, `simd128` on wasm32), while only `PANEL_BYTES` of f32 weights exist at a time. What
//! it costs beyond `gemm` is one decode per weight element per call (SIMD on wasm32), spread over all `m`
//! rows. Measured single-threaded on SmolLM2's shapes (`examples/cpu_matmul_bench.rs`, natively and in
//! V8 through `bench/wasm_matmul.mjs`): natively 2.4–3.3× the integer kernels it replaced at m = 64/256;
//! in wasm within the run-to-run noise (±10 %) of burn-flex's f32 matmul at m = 64 and 512.
//!
//! Shapes as [`super::matmul`]: `x` is `m × k` row-major f32, the weights `n` rows of `row_bytes` bytes,
//! `y` is `m × n` row-major. Panel `p` holds weight rows `p·np … p·np + np` as `np × k` row-major f32, and
//! its product writes columns `p·np …` of `y` in place (see [`matmul`]).
//!
//! Why not the integer dot products of the decode path: with one f32 scale per 32 (or 16) elements on both
//! sides, every block of every output pays a conversion and a scaled accumulation on top of its
//! multiply-adds, and natively the 128-bit `pmaddwd` runs at half the width of the 256-bit FMA `gemm`
//! uses; a dequantised panel costs one decode per weight element per call, and the rest is `gemm`'s f32
//! speed.
//!
//! Accuracy: the activations go in as they are (no 16-bit blocks as in the decode kernels, whose
//! quantization cost 3 % of a prefill in wasm), so the result is the f32 product of the dequantised
//! weights up to `gemm`'s summation order; a row's value can differ from the decode path's (fewer than
//! `ROWS_FROM` rows) by that path's activation rounding, within the bounds of `tests/kernels_cpu.rs`.

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

/// Weight rows per panel for rows of `k` elements: a multiple of 48, the least common multiple of
/// `gemm`'s micro-kernel heights (12 rows on simd128, 3 vectors of 4 lanes; 16, 24 or 48 natively), so no
/// panel ends in a narrower edge kernel (measured in V8: with 112-row panels a tenth of `gemm`'s time went
/// to its 4- and 8-row edge kernels).
pub(crate) fn panel_rows(k: usize) -> usize {
    (PANEL_BYTES / (4 * k.max(1)) / 48 * 48).max(48)
}

/// `y[m, n] = x · Wᵀ` with each weight row (`row_bytes` bytes of `w`) dequantised into `k` f32 by
/// `decode`; `y` is overwritten.
///
/// Each panel's product is computed as `yᵀ` columns: `gemm` multiplies the panel (`np × k`, row-major as
/// decoded) by `xᵀ` (`k × m`, which is `x` read column-major) into `np × m` column-major with a column
/// stride of `n`, which is exactly columns `n0 …` of the row-major `y`. No copy of `x` or `y` is made: the
/// operands are read in place through strides and `gemm` packs them as it does for burn-flex's own
/// `x · Wᵀ` (the same call with the roles of the operands swapped).
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
    x: &[f32],
    m: usize,
    y: &mut [f32],
    decode: &mut impl DecodeRow,
) {
    assert!(w.len() >= n * row_bytes && x.len() >= m * k && y.len() >= m * n);
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let np = panel_rows(k).min(n);
    let mut panel = vec![0.0f32; np * k];
    // Activation rows a block at a time (outside the panels), so the block `gemm` packs for each panel is
    // read from the cache rather than from memory: an encoder's 5 tiles are 5120 rows (15 MiB at k = 768),
    // which every panel would otherwise stream in whole. A panel is then decoded once per block.
    let mb = x_rows(k);
    for m0 in (0..m).step_by(mb) {
        let mr = mb.min(m - m0);
        block(
            w,
            row_bytes,
            n,
            k,
            &x[m0 * k..(m0 + mr) * k],
            mr,
            &mut y[m0 * n..(m0 + mr) * n],
            decode,
            &mut panel,
            np,
        );
    }
}

/// Activation rows per block of [`matmul`]: `X_BYTES` of them, at least 64 and a multiple of 16.
fn x_rows(k: usize) -> usize {
    (X_BYTES / (4 * k.max(1))).clamp(64, 4096) / 16 * 16
}

/// Bytes of f32 activations per block of [`matmul`] (within a core's L2 with the panel).
const X_BYTES: usize = 1 << 20;

/// [`matmul`] of one block of `m` activation rows (`x`, and `y` from its first row), panel by panel.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the product's shape, its operands, the row decoder and the panel's buffer"
)]
fn block(
    w: &[u8],
    row_bytes: usize,
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    decode: &mut impl DecodeRow,
    panel: &mut [f32],
    np: usize,
) {
    for n0 in (0..n).step_by(np) {
        let rows = np.min(n - n0);
        for (i, out) in panel.chunks_exact_mut(k).take(rows).enumerate() {
            let at = (n0 + i) * row_bytes;
            decode.decode_row(&w[at..at + row_bytes], out);
        }
        // SAFETY: dst `rows × m` with row stride 1 and column stride `n` from `y[n0]`: the largest index
        // is `n0 + rows − 1 + (m − 1)·n < m·n ≤ y.len()`; lhs `rows × k` row-major (row stride `k`) in
        // `panel` (`rows·k ≤ np·k`); rhs `k × m` with row stride 1 and column stride `k` in `x`
        // (largest index `k − 1 + (m − 1)·k < m·k ≤ x.len()`). `y` is exclusively borrowed, so nothing
        // aliases the destination.
        unsafe {
            gemm(
                rows,
                m,
                k,
                y.as_mut_ptr().add(n0),
                n as isize,
                1,
                false,
                panel.as_ptr(),
                1,
                k as isize,
                x.as_ptr(),
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
    }
}
