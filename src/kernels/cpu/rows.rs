//! Row-wise kernels of a layer on the CPU, each one pass over its rows where burn's ops take several: the
//! RMSNorm ([`rms_norm`], seven tensor ops on the generic path), the vision encoders' LayerNorm
//! ([`layer_norm`], three passes per row where the generic path makes nine tensor ops, its square a `powf`
//! per element) and the rotate-half rotary embedding
//! ([`rope`], about a dozen: narrows, four products, a sum, a difference, a concatenation). In a decode
//! step the generic path's cost is mostly the ops themselves (an allocation and a dispatch each, on tensors
//! of one row), in a prefill the passes over memory; both run on one thread there.
//!
//! With the `threads` feature a large call (a prefill's rows) is cut into pieces of whole rows run on the
//! [`super::team`]; a row's arithmetic is the same whichever thread runs it, so the result does not depend
//! on the thread count (`tests/cpu_activation.rs` checks it bit for bit).
//!
//! Accuracy: [`rope`] rounds as the generic path does (each product, then the sum or difference: the same
//! f32 operations in the same order, so the same bits). [`rms_norm`] sums the squares in eight lanes
//! (another order than burn's `mean_dim`), then as the generic path: `x · (1 / √(mean + eps)) · w`;
//! [`layer_norm`] likewise sums the row and the squares of the centred row in eight lanes.

use super::attention::Heads;

/// Elements per piece when a call is split across the team (also the gated activations' pieces,
/// [`super::activation::gated`]).
pub const PIECE: usize = 1 << 14;

/// The threads a call may use: rayon's pool and the caller in the `threads` build, else one.
pub(super) fn threads() -> usize {
    match cfg!(feature = "threads") {
        true => super::split::threads(),
        false => 1,
    }
}

/// Runs `f(rows)` over row ranges covering `0..rows` (rows of `cols` elements): the whole range at once,
/// or with more than one thread, for a call of at least two [`PIECE`]s, pieces of whole rows on the team.
pub(super) fn for_rows(
    threads: usize,
    rows: usize,
    cols: usize,
    f: &(dyn Fn(std::ops::Range<usize>) + Sync),
) {
    let per = (PIECE / cols.max(1)).max(1);
    if threads > 1 && rows.saturating_mul(cols) >= 2 * PIECE && rows > per {
        super::team::run(rows.div_ceil(per), threads - 1, &|p| {
            f(p * per..((p + 1) * per).min(rows));
        });
        return;
    }
    f(0..rows);
}

/// RMSNorm of each row of `cols = w.len()` elements: `out = x / √(mean(x²) + eps) · w`. `x` and `out` are
/// `rows × cols` row-major, of one length, a multiple of `cols`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_on(threads(), x, w, eps, out);
}

/// [`rms_norm`] on `threads` threads (the caller and the [`super::team`]'s helpers), whatever the build:
/// for the tests, which compare it bit for bit with one thread.
pub fn rms_norm_on(threads: usize, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let cols = w.len();
    assert!(cols > 0 && x.len() == out.len() && x.len().is_multiple_of(cols));
    let dst = super::split::Disjoint(out.as_mut_ptr());
    for_rows(threads, x.len() / cols, cols, &|range| {
        // SAFETY: `out` has rows × cols elements, and each range is handed to one piece only, which writes
        // only its own rows; `out` outlives `for_rows`.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(range.start * cols), range.len() * cols) };
        let x = &x[range.start * cols..range.end * cols];
        for (o, x) in out.chunks_exact_mut(cols).zip(x.chunks_exact(cols)) {
            let inv = 1.0 / (sum_squares(x) / cols as f32 + eps).sqrt();
            for ((o, &x), &w) in o.iter_mut().zip(x).zip(w) {
                *o = x * inv * w;
            }
        }
    });
}

/// LayerNorm of each row of `cols = w.len()` elements: `out = (x − mean) / √(var + eps) · w + b`, the
/// biased variance of the centred row (PyTorch's `LayerNorm`). `x` and `out` are `rows × cols` row-major, of
/// one length, a multiple of `cols`; `b` is as long as `w`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    layer_norm_on(threads(), x, w, b, eps, out);
}

/// [`layer_norm`] on `threads` threads, whatever the build (as [`rms_norm_on`]).
pub fn layer_norm_on(threads: usize, x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let cols = w.len();
    assert!(cols > 0 && b.len() == cols && x.len() == out.len() && x.len().is_multiple_of(cols));
    let dst = super::split::Disjoint(out.as_mut_ptr());
    for_rows(threads, x.len() / cols, cols, &|range| {
        // SAFETY: as in `rms_norm_on`: each range of rows is written by one piece only.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(range.start * cols), range.len() * cols) };
        let x = &x[range.start * cols..range.end * cols];
        for (o, x) in out.chunks_exact_mut(cols).zip(x.chunks_exact(cols)) {
            let mean = sum(x) / cols as f32;
            // The centred row goes into `o` first: its squares give the variance, then it is scaled in place.
            for (o, &x) in o.iter_mut().zip(x) {
                *o = x - mean;
            }
            let inv = 1.0 / (sum_squares(o) / cols as f32 + eps).sqrt();
            for ((o, &w), &b) in o.iter_mut().zip(w).zip(b) {
                *o = *o * inv * w + b;
            }
        }
    });
}

/// `Σ x` in eight lanes (vectorized by LLVM), the lanes added pairwise, then the tail.
fn sum(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<8>();
    let mut acc = [0.0f32; 8];
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let [a, b, c, d, e, f, g, h] = acc;
    ((a + e) + (b + f)) + ((c + g) + (d + h)) + tail.iter().sum::<f32>()
}

/// `Σ x²` in eight lanes (vectorized by LLVM), the lanes added pairwise, then the tail.
fn sum_squares(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<8>();
    let mut acc = [0.0f32; 8];
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    let [a, b, c, d, e, f, g, h] = acc;
    ((a + e) + (b + f)) + ((c + g) + (d + h)) + tail.iter().map(|v| v * v).sum::<f32>()
}

/// Rotate-half rope of `x`, `[b, n, s, d]` (a strided view), into `out`, `[b, n, s, d]` row-major: the first
/// `2 · half` features of each row rotate, `(x₁, x₂) → (x₁·cos − x₂·sin, x₂·cos + x₁·sin)` with the
/// cos and sin of the row's position (`cos`, `sin`: `[s, half]` row-major), the rest pass through.
pub fn rope(x: Heads<'_>, shape: (usize, usize, usize, usize), cos: &[f32], sin: &[f32], out: &mut [f32]) {
    rope_on(threads(), x, shape, cos, sin, out);
}

/// [`rope`] on `threads` threads, whatever the build (as [`rms_norm_on`]).
pub fn rope_on(
    threads: usize,
    x: Heads<'_>,
    shape: (usize, usize, usize, usize),
    cos: &[f32],
    sin: &[f32],
    out: &mut [f32],
) {
    let (b, n, s, d) = shape;
    let half = cos.len() / s.max(1);
    assert!(2 * half <= d && cos.len() == s * half && sin.len() == cos.len() && out.len() == b * n * s * d);
    if out.is_empty() {
        return;
    }
    assert!(
        x.offset + (b - 1) * x.batch + (n - 1) * x.head + (s - 1) * x.row + d <= x.data.len(),
        "a rope view past its data"
    );
    let dst = super::split::Disjoint(out.as_mut_ptr());
    for_rows(threads, b * n * s, d, &|range| {
        // SAFETY: `out` has b·n·s rows of d, and each range is handed to one piece only, which writes only
        // its own rows; `out` outlives `for_rows`.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(range.start * d), range.len() * d) };
        for (row, o) in range.zip(out.chunks_exact_mut(d)) {
            let (i, j, r) = (row / (n * s), row / s % n, row % s);
            let at = x.offset + i * x.batch + j * x.head + r * x.row;
            let x = &x.data[at..at + d];
            let (c, sn) = (&cos[r * half..(r + 1) * half], &sin[r * half..(r + 1) * half]);
            let (x1, rest) = x.split_at(half);
            let (x2, pass) = rest.split_at(half);
            let (o1, rest) = o.split_at_mut(half);
            let (o2, o_pass) = rest.split_at_mut(half);
            for e in 0..half {
                o1[e] = x1[e] * c[e] - x2[e] * sn[e];
                o2[e] = x2[e] * c[e] + x1[e] * sn[e];
            }
            o_pass.copy_from_slice(pass);
        }
    });
}
