//! The decode GEMV: `y = x · Wᵀ` for `m ≤ GEMV_MAX_M` activation rows over packed GGML rows.
//!
//! Shapes: `x: [m, k]` f32 (row-major, contiguous), `w`: `n` packed rows of `k` elements, `y: [m, n]` f32,
//! row `i` of `y` written at `i · ldo + col0` (a weight split into parts writes its own columns; see
//! `matmul.rs`).
//!
//! **Layout.** `TPR` threads share one weight row, so a workgroup of `GEMV_WG` (64) threads covers
//! `64 / TPR` rows. Thread `lane` of a row takes the row's blocks `lane, lane + TPR, …` whole: it decodes
//! the block's scale (and min) once, reads its quants a `u32` word at a time, and accumulates
//! `d · Σ q·x + min · Σ x` into `m` register accumulators (the weight row is read once for all `m` rows).
//! With `TPR = 1` a thread owns its row and there is no shared memory and no barrier; otherwise one barrier
//! and a sum of `TPR` partials in shared memory. Software Vulkan (llvmpipe, SwiftShader) runs a
//! workgroup's threads as SIMD lanes of one CPU thread, where barriers and per-element scale decoding
//! dominate; that is why the work is per block.
//!
//! **Formats.** Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 have a per-block path here; every other format
//! (F32, F16, BF16, the K-quants, IQ4_XS) decodes its block element by element with
//! [`dequant_elem`], still one thread per block. Each output is a sum in a fixed order (per block, then
//! across the row's blocks and lanes): the same inputs give the same bits on every launch.

use cubecl::prelude::*;

use super::dequant::{block_layout, dequant_elem, f16_to_f32, half_at, id};

/// GEMV threads per workgroup.
pub(crate) const GEMV_WG: usize = 64;

/// The largest `m` the GEMV path takes.
pub(crate) const GEMV_MAX_M: usize = 8;

/// Threads per weight row.
pub(crate) const TPR: usize = 1;

/// Weight rows per workgroup.
pub(crate) const ROWS_PER_GROUP: usize = GEMV_WG / TPR;

/// Elements and bytes of one block of `fmt` (a supported format, checked at upload).
fn layout(fmt: u32) -> (usize, usize) {
    block_layout(fmt).unwrap_or((1, 4))
}

/// The little-endian `u32` at the even byte offset `off` (two 16-bit reads: `off` need not be 4-aligned,
/// and nothing past the word holding byte `off + 3` is read).
#[cube]
fn word_at(w: &[u32], off: usize) -> u32 {
    half_at(w, off) | (half_at(w, off + 2) << 16)
}

/// A signed byte (low 8 bits of `b`) as f32.
#[cube]
fn signed(b: u32) -> f32 {
    f32::cast_from(b & 0xFF) - f32::cast_from(((b >> 7) & 1) * 256)
}

/// IQ4 codebook entry `q` (as `dequant.rs`'s table).
#[cube]
fn iq4(q: u32) -> f32 {
    let quad = q / 4;
    let mut word = 0xBFAD_9881u32;
    if quad == 1 {
        word = 0xF6EA_DDCFu32;
    } else if quad == 2 {
        word = 0x2619_0D01u32;
    } else if quad == 3 {
        word = 0x7159_4535u32;
    }
    signed(word >> ((q % 4) * 8))
}

/// Adds block `blk` of the row at byte `base` (elements `e0 = blk · block_elems ..`) dotted with each of
/// the `m` rows of `x` to `acc`.
#[cube]
fn dot_block(
    x: &[f32],
    w: &[u32],
    base: usize,
    blk: usize,
    k: usize,
    acc: &mut Array<f32>,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
) {
    let be = comptime![layout(fmt).0];
    let bb = comptime![layout(fmt).1];
    let bo = base + blk * bb;
    let e0 = blk * be;
    if comptime![
        fmt == id::Q4_0 || fmt == id::Q4_1 || fmt == id::Q5_0 || fmt == id::Q5_1 || fmt == id::IQ4_NL
    ] {
        // 32 elements: element j < 16 the low nibble of qs[j], j + 16 the high one; Q5 adds bit j of qh.
        let qs = comptime![match fmt {
            id::Q4_1 => 4usize,
            id::Q5_0 => 6usize,
            id::Q5_1 => 8usize,
            _ => 2usize,
        }];
        let offset = comptime![match fmt {
            id::Q4_0 => 8.0f32,
            id::Q5_0 => 16.0f32,
            _ => 0.0f32,
        }];
        let has_min = comptime![fmt == id::Q4_1 || fmt == id::Q5_1];
        let five = comptime![fmt == id::Q5_0 || fmt == id::Q5_1];
        let d = f16_to_f32(half_at(w, bo));
        let mut mn = 0.0f32;
        let mut qh = 0u32;
        if comptime![has_min] {
            mn = f16_to_f32(half_at(w, bo + 2));
        }
        if comptime![five] {
            qh = word_at(w, bo + qs - 4);
        }
        let mut sq = Array::<f32>::new(m);
        let mut sx = Array::<f32>::new(m);
        #[unroll]
        for i in 0..m {
            sq[i] = 0.0;
            sx[i] = 0.0;
        }
        #[unroll]
        for wi in 0..4usize {
            let q = word_at(w, bo + qs + 4 * wi);
            #[unroll]
            for b in 0..4usize {
                let j = 4 * wi + b;
                let mut lo = (q >> ((8 * b) as u32)) & 0xF;
                let mut hi = (q >> ((8 * b + 4) as u32)) & 0xF;
                if comptime![five] {
                    lo |= ((qh >> (j as u32)) & 1) << 4;
                    hi |= ((qh >> ((j + 16) as u32)) & 1) << 4;
                }
                let mut vl = f32::cast_from(lo) - offset;
                let mut vh = f32::cast_from(hi) - offset;
                if comptime![fmt == id::IQ4_NL] {
                    vl = iq4(lo);
                    vh = iq4(hi);
                }
                #[unroll]
                for i in 0..m {
                    let xl = x[i * k + e0 + j];
                    let xh = x[i * k + e0 + j + 16];
                    sq[i] += vl * xl + vh * xh;
                    if comptime![has_min] {
                        sx[i] += xl + xh;
                    }
                }
            }
        }
        #[unroll]
        for i in 0..m {
            acc[i] += d * sq[i] + mn * sx[i];
        }
    } else if comptime![fmt == id::Q8_0] {
        let d = f16_to_f32(half_at(w, bo));
        let mut sq = Array::<f32>::new(m);
        #[unroll]
        for i in 0..m {
            sq[i] = 0.0;
        }
        #[unroll]
        for wi in 0..8usize {
            let q = word_at(w, bo + 2 + 4 * wi);
            #[unroll]
            for b in 0..4usize {
                let v = signed(q >> ((8 * b) as u32));
                #[unroll]
                for i in 0..m {
                    sq[i] += v * x[i * k + e0 + 4 * wi + b];
                }
            }
        }
        #[unroll]
        for i in 0..m {
            acc[i] += d * sq[i];
        }
    } else {
        // Element by element (16-bit floats, f32, and the K-quants without a path of their own).
        let mut j = 0usize;
        while j < be {
            let v = dequant_elem(w, base, e0 + j, fmt);
            #[unroll]
            for i in 0..m {
                acc[i] += v * x[i * k + e0 + j];
            }
            j += 1;
        }
    }
}

#[cube(launch_unchecked)]
pub(crate) fn gemv_kernel(
    x: &[f32],
    w: &[u32],
    out: &mut [f32],
    n: usize,
    ldo: usize,
    col0: usize,
    k: usize,
    row_bytes: usize,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
) {
    let tid = UNIT_POS as usize;
    let lane = tid - (tid / TPR) * TPR;
    let col = CUBE_POS * ROWS_PER_GROUP + tid / TPR;
    let mut acc = Array::<f32>::new(m);
    #[unroll]
    for i in 0..m {
        acc[i] = 0.0;
    }
    // Rows past `n` compute row `n - 1` again (and write nothing): the loop's control flow is then the
    // same for every thread, and `x`'s addresses are uniform across a row-per-thread workgroup, which
    // software Vulkan turns into one load per workgroup instead of one per thread.
    let mut row = col;
    if row >= n {
        row = n - 1;
    }
    let base = row * row_bytes;
    let blocks = k / comptime![layout(fmt).0];
    let mut blk = 0usize;
    if comptime![TPR > 1] {
        blk = lane;
    }
    while blk < blocks {
        dot_block(x, w, base, blk, k, &mut acc, m, fmt);
        blk += TPR;
    }
    if comptime![TPR == 1] {
        if col < n {
            #[unroll]
            for i in 0..m {
                out[i * ldo + col0 + col] = acc[i];
            }
        }
    } else {
        let mut partial = Shared::<[f32]>::new_slice(comptime![m * GEMV_WG]);
        #[unroll]
        for i in 0..m {
            partial[i * GEMV_WG + tid] = acc[i];
        }
        sync_cube();
        if lane == 0 && col < n {
            #[unroll]
            for i in 0..m {
                let mut sum = 0.0f32;
                #[unroll]
                for l in 0..TPR {
                    sum += partial[i * GEMV_WG + tid + l];
                }
                out[i * ldo + col0 + col] = sum;
            }
        }
    }
}
