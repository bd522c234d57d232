//! Self-attention over the KV cache on the CPU: `softmax(q · kᵀ · scale [softcapped], masked) · v` per
//! query head, grouped-query attention read in place (query head `h` reads key-value head `h / (H / K)`,
//! never a copy per query head), the mask ([`crate::kernels::mask`]: causal, sliding window,
//! bidirectional spans) applied as the index range each query sees (no mask tensor, and no product over
//! keys no query of a piece can see).
//!
//! Work is cut into pieces of one batch row, one query head and up to [`BLOCK`] consecutive queries. A
//! piece multiplies its queries by the keys they can see with `gemm` (burn-flex's own f32 matmul) into a
//! scratch `[rows, keys]`, takes each row's softmax over its own visible keys (the others set to zero),
//! and multiplies by the values with `gemm` into the output. With the `threads` feature the pieces are
//! shared by the calling thread and the helpers of [`super::team`] (the last query blocks, which see the
//! most keys, first); a piece's arithmetic is the same whichever thread runs it, so the result does not
//! depend on the thread count.
//!
//! Shapes: `b` batch, `H` query heads, `K` key-value heads, `s` new positions (queries), `t` cached + new
//! positions (keys), `d` head dim. The queries are positions `t − s … t − 1`. Inputs are strided views
//! ([`Heads`]); the output is `[b, s, H, d]` row-major, i.e. `[b, s, H·d]` as the output projection takes
//! it.
//!
//! Accuracy: as burn's `matmul` + softmax + `matmul` of the generic path (the same `gemm` kernels, the
//! softmax of [`super::activation::softmax_rows`]); the masked keys, which that path carries as exact
//! zeros, are left out of the sums.

use gemm::{Parallelism, gemm};

use super::activation::{exp, softmax_rows};
use super::split::Disjoint;
use crate::kernels::mask::Mask;

/// Queries per piece: a multiple of `gemm`'s micro-kernel heights (12 rows on simd128; 16, 24 or 48
/// natively), so a piece's score product runs no narrow edge kernel.
pub const BLOCK: usize = 48;

/// A strided view of `[b, n, rows, d]` f32 values with contiguous rows of `d`: element `(i, j, r, e)` at
/// `data[offset + i·batch + j·head + r·row + e]`.
#[derive(Debug, Clone, Copy)]
pub struct Heads<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub batch: usize,
    pub head: usize,
    pub row: usize,
}

impl Heads<'_> {
    /// Index of row `r` of head `j` of batch row `i`.
    fn at(&self, i: usize, j: usize, r: usize) -> usize {
        self.offset + i * self.batch + j * self.head + r * self.row
    }
}

/// The attention's sizes and score options.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub b: usize,
    /// Query heads `H` (a multiple of `kv_heads`).
    pub heads: usize,
    /// Key-value heads `K`.
    pub kv_heads: usize,
    /// Queries (new positions) `s`.
    pub s: usize,
    /// Keys (cached + new positions) `t ≥ s`.
    pub t: usize,
    /// Head dim `d`.
    pub d: usize,
    /// The factor scores are multiplied by.
    pub scale: f32,
    /// Logit softcapping of the scores (`cap · tanh(x / cap)`), if any.
    pub softcap: Option<f32>,
}

/// The attention of `q` (`[b, H, s, d]`) over `k`, `v` (`[b, K, t, d]`, at least `t` rows each) under
/// `mask` (of `s` queries over `t` keys): `[b, s, H, d]` row-major. Panics if a view reaches past its data
/// (the caller builds them from tensor layouts) or the mask is of another size.
pub fn attention(q: Heads<'_>, k: Heads<'_>, v: Heads<'_>, dims: Dims, mask: Mask<'_>) -> Vec<f32> {
    let Dims { b, heads, s, d, .. } = dims;
    let mut out = vec![0.0f32; b * s * heads * d];
    if out.is_empty() || dims.t == 0 {
        return out;
    }
    assert!(dims.kv_heads > 0 && heads.is_multiple_of(dims.kv_heads) && dims.t >= s);
    assert!(mask.s == s && mask.t() == dims.t, "a mask of another size");
    for (view, n, rows) in [
        (&q, heads, s),
        (&k, dims.kv_heads, dims.t),
        (&v, dims.kv_heads, dims.t),
    ] {
        assert!(
            view.at(b - 1, n - 1, rows - 1) + d <= view.data.len(),
            "an attention view past its data"
        );
    }
    let blocks = s.div_ceil(BLOCK);
    let pieces = blocks * b * heads;
    // Shared by the pieces, each writing its own rows of one head.
    let dst = Disjoint(out.as_mut_ptr());
    let piece = |p: usize| {
        // The last query block first: it sees the most keys.
        let (block, rest) = (blocks - 1 - p / (b * heads), p % (b * heads));
        let (i, h) = (rest / heads, rest % heads);
        run_piece(&q, &k, &v, &dims, &mask, i, h, block, &dst);
    };
    #[cfg(feature = "threads")]
    {
        let threads = super::split::threads();
        let work = b * heads * s * dims.t * d * 2;
        if threads > 1 && pieces > 1 && work >= super::split::MIN_WORK {
            super::team::run(pieces, threads - 1, &piece);
            return out;
        }
    }
    (0..pieces).for_each(piece);
    out
}

/// Queries `block·BLOCK …` (at most [`BLOCK`]) of head `h` of batch row `i` into `out`.
#[allow(
    clippy::too_many_arguments,
    reason = "the operands, the sizes and the piece's place"
)]
fn run_piece(
    q: &Heads<'_>,
    k: &Heads<'_>,
    v: &Heads<'_>,
    dims: &Dims,
    mask: &Mask<'_>,
    i: usize,
    h: usize,
    block: usize,
    out: &Disjoint,
) {
    let Dims { heads, s, d, .. } = *dims;
    let kv = h / (heads / dims.kv_heads);
    let (q0, q1) = (block * BLOCK, (block * BLOCK + BLOCK).min(s));
    let rows = q1 - q0;
    // Query row r sees keys mask.keys(r); the piece multiplies by every key one of its rows sees.
    let seen = mask.keys_of(q0..q1);
    let (lo, cols) = (seen.start, seen.len());
    let mut scores = vec![0.0f32; rows * cols];
    // SAFETY: dst `rows × cols` row-major in `scores`; lhs `rows × d` from query row q0 with row stride
    // `q.row` (checked within `q.data` by `attention`); rhs `d × cols` is keys lo..lo + cols (within 0..t,
    // as the mask's size is checked) read column by column (column stride `k.row`), within `k.data`.
    unsafe {
        gemm(
            rows,
            cols,
            d,
            scores.as_mut_ptr(),
            1,
            cols as isize,
            false,
            q.data.as_ptr().add(q.at(i, h, q0)),
            1,
            q.row as isize,
            k.data.as_ptr().add(k.at(i, kv, lo)),
            k.row as isize,
            1,
            0.0,
            dims.scale,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    for (r, row) in scores.chunks_exact_mut(cols).enumerate() {
        let keys = mask.keys(q0 + r);
        let (a, z) = (keys.start - lo, keys.end - lo);
        row[..a].fill(0.0);
        row[z..].fill(0.0);
        let seen = &mut row[a..z];
        if let Some(cap) = dims.softcap {
            for x in seen.iter_mut() {
                *x = cap - 2.0 * cap / (exp(*x * 2.0 / cap) + 1.0);
            }
        }
        softmax_rows(seen, z - a);
    }
    // SAFETY: dst `rows × d` at output row (i, q0, h) with row stride H·d: inside `[b, s, H, d]`, and only
    // this piece writes head h of these rows; lhs `rows × cols` is `scores`; rhs `cols × d` is values
    // lo..lo + cols (within 0..t) with row stride `v.row`, within `v.data` as checked.
    unsafe {
        gemm(
            rows,
            d,
            cols,
            out.at(((i * s + q0) * heads + h) * d),
            1,
            (heads * d) as isize,
            false,
            scores.as_ptr(),
            1,
            cols as isize,
            v.data.as_ptr().add(v.at(i, kv, lo)),
            1,
            v.row as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}
