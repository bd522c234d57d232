//! The decode GEMV for hardware GPUs: `y = x · Wᵀ` for `m ≤ GEMV_MAX_M` rows of `x`, each weight row's
//! blocks shared among threads. Same shapes, formats and output placement as `gemv.rs`.
//!
//! **Why a second layout.** `gemv.rs` gives a thread whole rows (4 of them, 128 rows per workgroup of 32):
//! right for software Vulkan, which runs a workgroup's threads as the SIMD lanes of one CPU thread, but on
//! a GPU a 576 × 576 matrix is then 5 workgroups, a few percent of the machine, each thread walking a
//! whole row alone. Here a workgroup of [`SPLIT_WG`] threads is `G` groups of `t` lanes (`t` the largest
//! power of two up to the row's block count, at most 64; `G = 64 / t`); group `g` owns rows
//! `CUBE_POS · G · RPT + g · RPT + r` (`r < RPT`), lane `l` dots blocks `l, l + t, …` of those rows
//! (through `gemv.rs`'s per-block code, the `x` block read once for the `RPT` rows), and the `t` partial
//! sums of each output meet in shared memory by a tree (`log₂ t` barriers). Consecutive lanes read
//! consecutive blocks, and the matrix spreads over `n / (G · RPT)` workgroups.
//!
//! **Subgroups** (`caps.rs`): where the adapter has them, `t` is at most the smallest subgroup size, a
//! group's lanes lie in one subgroup, and the partial sums meet by a butterfly of subgroup shuffles
//! (`log₂ t` of them per output, every lane ending with every sum): no shared memory and no barrier.
//!
//! Each output is a sum in a fixed order (per lane over its blocks, then the tree or the butterfly): the
//! same inputs give the same bits on every launch, though not the bits of `gemv.rs` (another order).
//!
//! Shared memory (without subgroups): `m · RPT · SPLIT_WG` floats, 8 KiB at `m = 8`.

use cubecl::prelude::*;

use super::gemv::{RPT, dot_block, layout};

/// Threads per workgroup.
pub(crate) const SPLIT_WG: usize = 64;

/// Lanes per row group for rows of `blocks` blocks: the largest power of two `≤ blocks`, in `1..=64`,
/// and at most `width` (a subgroup's, when the partial sums meet by shuffles).
pub(crate) fn lanes(blocks: usize, width: usize) -> usize {
    let mut t = 1;
    while t * 2 <= blocks.min(SPLIT_WG).min(width) {
        t *= 2;
    }
    t
}

/// Weight rows per workgroup for groups of `lanes` lanes.
pub(crate) fn rows_per_group(lanes: usize) -> usize {
    SPLIT_WG / lanes * RPT
}

/// The blocks of a row of `k` elements of `fmt` (a GGML type or one of the GEMV's own, `gemv.rs`).
pub(crate) fn blocks_of(fmt: u32, k: usize) -> usize {
    k / layout(fmt).0
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_split_kernel<X: Float>(
    x: &[X],
    w: &[u32],
    out: &mut [f32],
    n: usize,
    ldo: usize,
    col0: usize,
    k: usize,
    row_bytes: usize,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
    #[comptime] t: usize,
    #[comptime] shuffle: bool,
    #[define(X)] _act: ElemType,
) {
    let mut partial = Shared::<[f32]>::new_slice(comptime![partial_len(m, shuffle)]);
    gemv_split_rows::<X>(
        x,
        w,
        out,
        n,
        ldo,
        col0,
        k,
        row_bytes,
        CUBE_POS,
        &mut partial,
        m,
        fmt,
        t,
        shuffle,
    );
}

/// Floats of shared memory the split GEMV needs: `m · RPT · SPLIT_WG` for the tree, 1 (unused) when the
/// partial sums meet by shuffles.
pub(crate) fn partial_len(m: usize, shuffle: bool) -> usize {
    if shuffle { 1 } else { m * RPT * SPLIT_WG }
}

/// Workgroup `group`'s rows of the split GEMV (the body of `gemv_split_kernel`, and of one matrix of
/// `gemv_multi.rs`'s launch), its tree in `partial` ([`partial_len`] floats).
#[cube]
// `tid * 0 + c`: a runtime copy of the constant `c`, which the loop then halves.
#[allow(clippy::erasing_op)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_split_rows<X: Float>(
    x: &[X],
    w: &[u32],
    out: &mut [f32],
    n: usize,
    ldo: usize,
    col0: usize,
    k: usize,
    row_bytes: usize,
    group_of_cube: usize,
    partial: &mut Shared<[f32]>,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
    #[comptime] t: usize,
    #[comptime] shuffle: bool,
) {
    let tid = UNIT_POS as usize;
    let lane = tid % t;
    let group = tid / t;
    let groups = comptime![SPLIT_WG / t];
    let first = (group_of_cube * groups + group) * RPT;
    // Rows past `n` compute row `n − 1` again (and write nothing): every lane runs the same control flow.
    let mut bases = Array::<usize>::new(RPT);
    #[unroll]
    for r in 0..RPT {
        let mut row = first + r;
        if row >= n {
            row = n - 1;
        }
        bases[r] = row * row_bytes;
    }
    let mr = comptime![m * RPT];
    let mut acc = Array::<f32>::new(mr);
    #[unroll]
    for j in 0..mr {
        acc[j] = 0.0;
    }
    let blocks = k / comptime![layout(fmt).0];
    let mut blk = lane;
    while blk < blocks {
        dot_block::<X>(x, w, &bases, blk, k, &mut acc, m, fmt);
        blk += t;
    }
    if comptime![shuffle] {
        // A butterfly across the group's `t` lanes (one subgroup holds them: `t` ≤ the smallest subgroup
        // size, and subgroups are runs of consecutive invocations, see `caps.rs`): every lane ends with
        // every sum, in the same order on every lane.
        let mut half = tid * 0 + comptime![t / 2];
        while half > 0 {
            #[unroll]
            for j in 0..mr {
                acc[j] += plane_shuffle_xor(acc[j], half as u32);
            }
            half /= 2;
        }
        let mut j = lane;
        while j < mr {
            let row = first + j % RPT;
            if row < n {
                out[(j / RPT) * ldo + col0 + row] = acc[j];
            }
            j += t;
        }
    } else {
        // Output j of every thread at `j · SPLIT_WG + tid`; each group's lanes are contiguous.
        #[unroll]
        for j in 0..mr {
            partial[j * SPLIT_WG + tid] = acc[j];
        }
        sync_cube();
        let mut half = tid * 0 + comptime![t / 2];
        while half > 0 {
            if lane < half {
                #[unroll]
                for j in 0..mr {
                    partial[j * SPLIT_WG + tid] += partial[j * SPLIT_WG + tid + half];
                }
            }
            sync_cube();
            half /= 2;
        }
        let mut j = lane;
        while j < mr {
            let i = j / RPT;
            let row = first + j % RPT;
            if row < n {
                out[i * ldo + col0 + row] = partial[j * SPLIT_WG + group * t];
            }
            j += t;
        }
    }
}
