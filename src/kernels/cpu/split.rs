//! A quantized product split across rayon's pool (the `threads` feature): the `n` output features are cut
//! into one contiguous range of weight rows per thread, and each range runs the single-threaded kernel of
//! [`super::matmul`] on its own rows, so every thread streams its own share of the weight bytes (decode is
//! bound by reading them) and the arithmetic is the same as on one thread, output for output: the split
//! changes no result bit (`tests/kernels_cpu.rs` checks it against the unsplit kernel).
//!
//! Shapes as [`super::matmul`]: `x` is `m × k` row-major f32, `w` is `n` rows of `row_bytes` bytes, `y` is
//! `m × n` row-major. With one activation row a range's outputs are a contiguous piece of `y` and are
//! written in place; with more, each range computes its `m × n_range` block into a buffer of its own and
//! copies it into its columns of `y` (`m · n` floats in all, against `m · n · k` multiply-adds, on the
//! thread that ran the range).
//!
//! The threads are the calling thread and the helpers of [`super::team`], hosted by rayon's pool (on wasm32
//! wasm-bindgen-rayon's Web Workers). Only the `threads` build splits products ([`super::matmul`]); the
//! code is compiled everywhere so that the native tests run it ([`matmul_split`]).

use super::team;
use crate::loader::quant::GgmlType;

/// Below this many multiply-adds (`m · n · k`) a product runs on the calling thread alone: waking the pool
/// costs tens of microseconds, about what a 64 Ki-element product takes on one core.
pub(super) const MIN_WORK: usize = 1 << 16;

/// Ranges are whole multiples of this many weight rows: 48 is the least common multiple of `gemm`'s
/// micro-kernel heights (see [`super::panel`]), and a multiple of the decode kernels' four rows per pass.
const ROW_ALIGN: usize = 48;

/// Ranges per thread: the team claims ranges as it goes, so a helper that starts late (or a core that
/// is busy elsewhere) leaves its share to the others instead of holding up the product.
const RANGES_PER_THREAD: usize = 2;

/// Ranges per thread for the decode path (`m < panel::ROWS_FROM`): finer, because a range costs little
/// there (the activations are quantized once per product, and each range writes its outputs in place),
/// and in the browser the helpers (Web Workers) finish their ranges later than the page's thread (a CDP
/// profile of a 2-thread decode had the page's thread waiting for its helper 27% of the time with 2 ranges
/// per thread).
const DECODE_RANGES_PER_THREAD: usize = 4;

/// The weight rows of each range when `n` rows are split across `threads`, or `None` when the product is
/// better left on one thread (a pool of one, too little work, or too few rows to share).
pub fn range_rows(threads: usize, n: usize, k: usize, m: usize) -> Option<usize> {
    if threads < 2 || m.saturating_mul(n).saturating_mul(k) < MIN_WORK {
        return None;
    }
    let rows = balanced(threads, n, align(k, m), per_thread(m));
    (rows < n).then_some(rows)
}

/// What ranges are whole multiples of: for the prefill path (`m ≥ panel::ROWS_FROM`) whole panels of
/// [`super::panel`], so that every `gemm` call is the one the unsplit product makes (`gemm`'s summation
/// order depends on its shape: ranges cut across panels change low bits); else [`ROW_ALIGN`] rows.
fn align(k: usize, m: usize) -> usize {
    match m >= super::panel::ROWS_FROM {
        true => super::panel::panel_rows(k),
        false => ROW_ALIGN,
    }
}

/// Ranges per thread wanted for `m` activation rows.
fn per_thread(m: usize) -> usize {
    match m >= super::panel::ROWS_FROM {
        true => RANGES_PER_THREAD,
        false => DECODE_RANGES_PER_THREAD,
    }
}

/// Rows per range, a multiple of `align`, for `n` rows on `threads` threads: the fewest units of `align`
/// rows on the busiest thread (ranges claimed in turn), and among those the range count nearest
/// `per_thread` per thread. E.g. 6 prefill panels on 2 threads: 3 ranges of 2 panels keep one
/// thread busy for 4 panels; 2 ranges of 3 (or 6 of 1) for 3.
///
/// Past 16 units per range the imbalance is at most a sixteenth: the even cut is taken without a search.
fn balanced(threads: usize, n: usize, align: usize, per_thread: usize) -> usize {
    let units = n.div_ceil(align).max(1);
    let even = units.div_ceil(threads * per_thread);
    if even > 16 {
        return even * align;
    }
    let cost = |per: usize| {
        let ranges = units.div_ceil(per);
        let busiest = ranges.div_ceil(threads) * per;
        (busiest, ranges.abs_diff(threads * per_thread))
    };
    let per = (1..=units).min_by_key(|&per| cost(per)).unwrap_or(1);
    per * align
}

/// The single-threaded product of one range: `kernel(w, n, y)`, `n` weight rows `w` into an `m × n` `y`.
pub type RangeKernel<'a> = dyn Fn(&[u8], usize, &mut [f32]) + Sync + 'a;

/// `y[m, n] = x · Wᵀ` as [`super::matmul`], with `y` zeroed, in ranges of `rows` weight rows shared by the
/// calling thread and up to `helpers` of the [`team`]'s helpers. `kernel(w, n, y)` is the single-threaded product of `n`
/// weight rows `w` into an `m × n` row-major `y` (also zeroed).
#[allow(
    clippy::too_many_arguments,
    reason = "the product's shape, its operands and the kernel"
)]
pub fn matmul(
    ty: GgmlType,
    w: &[u8],
    n: usize,
    k: usize,
    m: usize,
    y: &mut [f32],
    rows: usize,
    helpers: usize,
    kernel: &RangeKernel<'_>,
) {
    let row_bytes = k / ty.block_elems() * ty.block_bytes();
    let ranges = n.div_ceil(rows);
    let nr = |i: usize| rows.min(n - i * rows);
    let weights = |i: usize| &w[i * rows * row_bytes..(i * rows + nr(i)) * row_bytes];
    if m == 1 {
        let out = Disjoint(y.as_mut_ptr());
        team::run(ranges, helpers, &|i| {
            // SAFETY: range i is y[i·rows .. i·rows + nr(i)], within y (n elements) and disjoint from every
            // other range; the team runs each range once, and `y` outlives `run`.
            let out = unsafe { std::slice::from_raw_parts_mut(out.at(i * rows), nr(i)) };
            kernel(weights(i), nr(i), out);
        });
        return;
    }
    let out = Disjoint(y.as_mut_ptr());
    team::run(ranges, helpers, &|i| {
        let mut block = vec![0.0; m * nr(i)];
        kernel(weights(i), nr(i), &mut block);
        let n0 = i * rows;
        for (r, piece) in block.chunks_exact(nr(i)).enumerate() {
            // SAFETY: row r's columns n0 .. n0 + nr(i) of y (m × n) are in bounds and written by range i
            // only; the team runs each range once, and `y` outlives `run`.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at(r * n + n0), nr(i)) };
            dst.copy_from_slice(piece);
        }
    });
}

/// [`super::matmul`] split into ranges for `threads` threads whether or not the product is large enough to
/// be worth it (at least two ranges where `n` allows): for the tests, which compare it bit for bit with the
/// one-thread kernels. Runs on the caller and the [`team`] as the `threads` build does.
pub fn matmul_split(
    ty: GgmlType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    threads: usize,
) -> Vec<f32> {
    let mut y = vec![0.0; m * n];
    if m == 0 || n == 0 || k == 0 {
        return y;
    }
    let rows = match m >= super::panel::ROWS_FROM {
        true => balanced(threads.max(2), n, align(k, m), RANGES_PER_THREAD),
        false => n.div_ceil(threads.max(2) * DECODE_RANGES_PER_THREAD).max(1),
    };
    let helpers = threads.saturating_sub(1);
    let act = super::prepare(ty, x, m, k);
    matmul(ty, w, n, k, m, &mut y, rows, helpers, &|w, n, y| {
        super::one_thread(ty, w, n, k, x, &act, m, y)
    });
    y
}

/// One weight of a [`matmul_many`]: `n` rows of `k` elements of `ty`, in its GGML blocks.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub ty: GgmlType,
    pub w: &'a [u8],
    pub n: usize,
}

/// `x · W_jᵀ` for each weight `W_j` of `parts` and one activation row `x` (`1 × k`): the products of a
/// decode step that share their input (a layer's q, k and v, its gate and up), as [`super::matmul`] of
/// each, bit for bit, but all of their ranges in one team run. The team waits for its slowest piece once
/// per run, so one run for three products waits once instead of three times, and the combined run has
/// more ranges to balance between a fast and a slow thread. Each weight is cut as [`range_rows`] cuts it
/// alone (one range when it is too small to split). `None` when no weight would be split (a pool of one,
/// or products too small to share): run them one by one.
pub fn matmul_many(parts: &[Part<'_>], k: usize, x: &[f32]) -> Option<Vec<Vec<f32>>> {
    let threads = threads();
    let rows: Vec<Option<usize>> = parts.iter().map(|p| range_rows(threads, p.n, k, 1)).collect();
    if k == 0 || rows.iter().all(Option::is_none) {
        return None;
    }
    let rows = |j: usize| rows[j].unwrap_or(parts[j].n);
    Some(many(parts, k, x, threads - 1, &rows))
}

/// [`matmul_many`] cut into ranges for `threads` threads whether or not the products are large enough to
/// be worth it (as [`matmul_split`] cuts one product): for the tests, which compare it bit for bit with
/// the one-thread kernels.
pub fn matmul_many_split(parts: &[Part<'_>], k: usize, x: &[f32], threads: usize) -> Vec<Vec<f32>> {
    if k == 0 {
        return parts.iter().map(|p| vec![0.0; p.n]).collect();
    }
    let rows = |j: usize| parts[j].n.div_ceil(threads.max(2) * DECODE_RANGES_PER_THREAD);
    many(parts, k, x, threads.saturating_sub(1), &rows)
}

/// The products of `parts` on one row `x` in ranges of `rows(j)` weight rows of part `j`, every range of
/// every part shared by the calling thread and up to `helpers` helpers in one [`team::run`].
fn many(
    parts: &[Part<'_>],
    k: usize,
    x: &[f32],
    helpers: usize,
    rows: &dyn Fn(usize) -> usize,
) -> Vec<Vec<f32>> {
    // Quantized once per weight (formats differ in what they read), before the team starts.
    let acts: Vec<_> = parts.iter().map(|p| super::prepare(p.ty, x, 1, k)).collect();
    let mut ys: Vec<Vec<f32>> = parts.iter().map(|p| vec![0.0; p.n]).collect();
    // (part, first row, rows) of every range, part by part.
    let mut ranges = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let step = rows(j).max(1);
        ranges.extend((0..p.n).step_by(step).map(|r0| (j, r0, step.min(p.n - r0))));
    }
    let outs: Vec<Disjoint> = ys.iter_mut().map(|y| Disjoint(y.as_mut_ptr())).collect();
    team::run(ranges.len(), helpers, &|i| {
        let (j, r0, n) = ranges[i];
        let p = parts[j];
        let row_bytes = k / p.ty.block_elems() * p.ty.block_bytes();
        // SAFETY: range i is ys[j][r0 .. r0 + n], within ys[j] (p.n elements) and disjoint from every other
        // range; the team runs each range once, and `ys` outlives `run`.
        let out = unsafe { std::slice::from_raw_parts_mut(outs[j].at(r0), n) };
        let w = &p.w[r0 * row_bytes..(r0 + n) * row_bytes];
        super::one_thread(p.ty, w, n, k, x, &acts[j], 1, out);
    });
    ys
}

/// An output's base pointer, shared by the team's threads, each writing its own disjoint range (a split
/// product's `y` here and those of [`matmul_many`], the outputs of [`super::activation::gated`], [`super::rows`] and [`super::attention`]).
pub(super) struct Disjoint(pub(super) *mut f32);
// SAFETY: the ranges written through it are disjoint (see `matmul`, `activation::gated`, `rows`, `attention`).
unsafe impl Sync for Disjoint {}
impl Disjoint {
    /// Element `i` (a method, so that closures capture the `Sync` wrapper, not its raw pointer).
    pub(super) fn at(&self, i: usize) -> *mut f32 {
        // SAFETY (of callers): `i` is within the slice the pointer came from.
        self.0.wrapping_add(i)
    }
}

/// The threads products are split across: rayon's pool, whose workers host the team's helpers, and the
/// calling thread, which takes ranges itself (so the pool is started with one thread fewer than the
/// threads wanted; `js/index.js` does).
pub fn threads() -> usize {
    rayon::current_num_threads() + 1
}
