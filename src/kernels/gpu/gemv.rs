//! The decode GEMV: `y = x · Wᵀ` for `m ≤ GEMV_MAX_M` activation rows over packed GGML rows.
//!
//! Shapes: `x: [m, k]` f32 or f16 (row-major, contiguous; f16 where the device decodes in f16, see
//! `caps.rs`, widened to f32 as it is read), `w`: `n` packed rows of `k` elements, `y: [m, n]` f32,
//! row `i` of `y` written at `i · ldo + col0` (a weight split into parts writes its own columns; see
//! `matmul.rs`).
//!
//! **Layout.** Each thread owns `RPT` (4) weight rows, `GEMV_WG` (32) rows apart, so a workgroup covers
//! 128 rows; no shared memory, no barrier. It walks the rows' blocks together: per block it decodes each
//! row's scale (and min) once, reads the quants a `u32` word at a time, and accumulates
//! `d · Σ q·x + min · Σ x` into `m · RPT` register accumulators; each `x` element is read once for the
//! `RPT` rows (and `Σ x` formed once), each weight row once for all `m` rows of `x`. Software Vulkan
//! (llvmpipe, SwiftShader) runs a workgroup's threads as SIMD lanes of one CPU thread, where barriers,
//! per-element scale decoding and per-lane loads dominate; that is why the work is per block and per
//! several rows.
//!
//! **Formats.** Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_0, Q4_K and Q6_K have a per-block path here, and F16
//! and BF16 rows of a multiple of 8 elements one reading 8 elements at a time ([`gemv_format`]); every
//! other format (F32, Q2_K, Q3_K, Q5_K, IQ4_XS, and
//! 16-bit rows of other lengths) decodes its block element by element with [`dequant_elem`], still a
//! row's blocks in one thread. Each output is a sum in a fixed order (per block,
//! then across the row's blocks): the same inputs give the same bits on every launch.

use cubecl::prelude::*;

use super::dequant::{
    block_layout, byte_at, dequant_elem, f16_to_f32, half_at, id, iq4_value, scale_min_k4, signed_byte,
};

/// GEMV threads per workgroup.
pub(crate) const GEMV_WG: usize = 32;

/// The largest `m` the GEMV path takes.
pub(crate) const GEMV_MAX_M: usize = 8;

/// Weight rows per thread: each `x` element read serves this many rows.
pub(crate) const RPT: usize = 4;

/// Weight rows per workgroup.
pub(crate) const ROWS_PER_GROUP: usize = GEMV_WG * RPT;

/// Elements and bytes of one block of `fmt` (a supported format, checked at upload).
pub(crate) fn layout(fmt: u32) -> (usize, usize) {
    match fmt {
        F16_X8 | BF16_X8 => (8, 16),
        _ => block_layout(fmt).unwrap_or((1, 4)),
    }
}

/// The GEMV's own formats for 16-bit weights: rows read 8 elements (4 aligned words) at a time, for rows
/// of a multiple of 8 elements ([`gemv_format`]). F16 is decoded from its bits by hand, also where the
/// device has `shader-f16`: naga (wgpu 30) types `bitcast<vec2<f16>>(u32)` as a scalar (indexing it is
/// refused, widening it gives wrong values; measured on lavapipe), so the WGSL `f16` route is closed
/// natively.
pub(crate) const F16_X8: u32 = 0x100 | id::F16;
pub(crate) const BF16_X8: u32 = 0x100 | id::BF16;

/// The format the GEMV reads a weight of GGML type `fmt` with `k` elements per row as: 16-bit rows of a
/// multiple of 8 elements (every row then starts on a 16-byte boundary) in chunks of 8; every other
/// weight as it is.
pub(crate) fn gemv_format(fmt: u32, k: usize) -> u32 {
    match (fmt, k.is_multiple_of(8)) {
        (id::F16, true) => F16_X8,
        (id::BF16, true) => BF16_X8,
        _ => fmt,
    }
}

/// Half `h` (0: the low 16 bits) of `word` as f32, BF16 or F16.
#[cube]
fn half_of(word: u32, #[comptime] h: u32, #[comptime] bf16: bool) -> f32 {
    if comptime![bf16] {
        if comptime![h == 0] {
            f32::reinterpret(word << 16)
        } else {
            f32::reinterpret(word & 0xFFFF_0000)
        }
    } else {
        f16_to_f32((word >> (16 * h)) & 0xFFFF)
    }
}

/// The little-endian `u32` at the even byte offset `off` (two 16-bit reads: `off` need not be 4-aligned,
/// and nothing past the word holding byte `off + 3` is read).
#[cube]
fn word_at(w: &[u32], off: usize) -> u32 {
    half_at(w, off) | (half_at(w, off + 2) << 16)
}

/// `count` little-endian words from the even byte offset `off` into `q[at..at + count]`, with `count + 1`
/// aligned loads (`count` when `aligned`, a comptime promise that `off` is a multiple of 4). Where `off`
/// is 4-aligned the extra load repeats the last word (its bits are shifted out): nothing past the word
/// holding byte `off + 4·count − 1` is read.
#[cube]
fn load_words(
    w: &[u32],
    off: usize,
    q: &mut Array<u32>,
    at: usize,
    #[comptime] count: usize,
    #[comptime] aligned: bool,
) {
    let a = off / 4;
    if comptime![aligned] {
        #[unroll]
        for i in 0..count {
            q[at + i] = w[a + i];
        }
    } else {
        let sh = ((off % 4) * 8) as u32;
        let last = a + count - 1 + (off % 4) / 2;
        let mut prev = w[a];
        #[unroll]
        for i in 0..count {
            let mut at_next = a + i + 1;
            if at_next > last {
                at_next = last;
            }
            let next = w[at_next];
            // sh is 0 or 16; two shifts of at most 16 keep every shift below 32.
            q[at + i] = (prev >> sh) | ((next << 16) << (16 - sh));
            prev = next;
        }
    }
}

/// Adds block `blk` of each of the `RPT` rows starting at bytes `bases[r]` (elements `e0 = blk ·
/// block_elems ..`), dotted with each of the `m` rows of `x`, to `acc[i · RPT + r]`.
/// Element `i` of the activations, as f32 (f16 activations are widened: every sum is taken in f32).
#[cube]
fn xf<X: Float>(x: &[X], i: usize) -> f32 {
    f32::cast_from(x[i])
}

#[cube]
pub(crate) fn dot_block<X: Float>(
    x: &[X],
    w: &[u32],
    bases: &Array<usize>,
    blk: usize,
    k: usize,
    acc: &mut Array<f32>,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
) {
    let be = comptime![layout(fmt).0];
    let bb = comptime![layout(fmt).1];
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
        let mut bo = Array::<usize>::new(RPT);
        let mut d = Array::<f32>::new(RPT);
        let mut mn = Array::<f32>::new(RPT);
        let mut qh = Array::<u32>::new(RPT);
        #[unroll]
        for r in 0..RPT {
            bo[r] = bases[r] + blk * bb;
            d[r] = f16_to_f32(half_at(w, bo[r]));
            mn[r] = 0.0;
            qh[r] = 0;
            if comptime![has_min] {
                mn[r] = f16_to_f32(half_at(w, bo[r] + 2));
            }
            if comptime![five] {
                qh[r] = word_at(w, bo[r] + qs - 4);
            }
        }
        let mut sq = Array::<f32>::new(comptime![m * RPT]);
        let mut sx = Array::<f32>::new(m);
        #[unroll]
        for i in 0..m {
            sx[i] = 0.0;
            #[unroll]
            for r in 0..RPT {
                sq[i * RPT + r] = 0.0;
            }
        }
        // Q4_1 and Q5_1 blocks (20, 24 bytes) keep every row and field 4-aligned.
        let mut q = Array::<u32>::new(comptime![4 * RPT]);
        #[unroll]
        for r in 0..RPT {
            load_words(w, bo[r] + qs, &mut q, r * 4, 4usize, has_min);
        }
        #[unroll]
        for wi in 0..4usize {
            #[unroll]
            for b in 0..4usize {
                let j = 4 * wi + b;
                #[unroll]
                for i in 0..m {
                    let xl = xf(x, i * k + e0 + j);
                    let xh = xf(x, i * k + e0 + j + 16);
                    if comptime![has_min] {
                        sx[i] += xl + xh;
                    }
                    #[unroll]
                    for r in 0..RPT {
                        let word = q[r * 4 + wi];
                        let mut lo = (word >> ((8 * b) as u32)) & 0xF;
                        let mut hi = (word >> ((8 * b + 4) as u32)) & 0xF;
                        if comptime![five] {
                            lo |= ((qh[r] >> (j as u32)) & 1) << 4;
                            hi |= ((qh[r] >> ((j + 16) as u32)) & 1) << 4;
                        }
                        let mut vl = f32::cast_from(lo) - offset;
                        let mut vh = f32::cast_from(hi) - offset;
                        if comptime![fmt == id::IQ4_NL] {
                            vl = iq4_value(lo);
                            vh = iq4_value(hi);
                        }
                        sq[i * RPT + r] += vl * xl + vh * xh;
                    }
                }
            }
        }
        #[unroll]
        for i in 0..m {
            #[unroll]
            for r in 0..RPT {
                acc[i * RPT + r] += d[r] * sq[i * RPT + r] + mn[r] * sx[i];
            }
        }
    } else if comptime![fmt == id::Q8_0] {
        let mut bo = Array::<usize>::new(RPT);
        let mut d = Array::<f32>::new(RPT);
        #[unroll]
        for r in 0..RPT {
            bo[r] = bases[r] + blk * bb;
            d[r] = f16_to_f32(half_at(w, bo[r]));
        }
        let mut sq = Array::<f32>::new(comptime![m * RPT]);
        #[unroll]
        for i in 0..comptime![m * RPT] {
            sq[i] = 0.0;
        }
        let mut q = Array::<u32>::new(comptime![8 * RPT]);
        #[unroll]
        for r in 0..RPT {
            load_words(w, bo[r] + 2, &mut q, r * 8, 8usize, false);
        }
        #[unroll]
        for wi in 0..8usize {
            #[unroll]
            for b in 0..4usize {
                #[unroll]
                for i in 0..m {
                    let xv = xf(x, i * k + e0 + 4 * wi + b);
                    #[unroll]
                    for r in 0..RPT {
                        // Byte b sign-extended: shifted to the top, then an arithmetic shift down.
                        let v = i32::reinterpret(q[r * 8 + wi] << ((24 - 8 * b) as u32)) >> 24;
                        sq[i * RPT + r] += f32::cast_from(v) * xv;
                    }
                }
            }
        }
        #[unroll]
        for i in 0..m {
            #[unroll]
            for r in 0..RPT {
                acc[i * RPT + r] += d[r] * sq[i * RPT + r];
            }
        }
    } else if comptime![fmt == id::Q4_K] {
        // d, dmin, scales[12], qs[128] (144 bytes: every row and field 4-aligned). Four 64-element chunks,
        // each two sub-blocks of 32 (low nibbles of qs[32c..32c + 32], then the high ones) with their own
        // 6-bit scale and min: `Σ (d·sc)·q·x − (dmin·mn)·Σx` per sub-block.
        let mut bo = Array::<usize>::new(RPT);
        let mut d = Array::<f32>::new(RPT);
        let mut dm = Array::<f32>::new(RPT);
        #[unroll]
        for r in 0..RPT {
            bo[r] = bases[r] + blk * bb;
            d[r] = f16_to_f32(half_at(w, bo[r]));
            dm[r] = f16_to_f32(half_at(w, bo[r] + 2));
        }
        let mut c = 0usize;
        while c < 4 {
            let mut sl = Array::<f32>::new(comptime![m * RPT]);
            let mut sh = Array::<f32>::new(comptime![m * RPT]);
            let mut xl = Array::<f32>::new(m);
            let mut xh = Array::<f32>::new(m);
            #[unroll]
            for i in 0..m {
                xl[i] = 0.0;
                xh[i] = 0.0;
                #[unroll]
                for r in 0..RPT {
                    sl[i * RPT + r] = 0.0;
                    sh[i * RPT + r] = 0.0;
                }
            }
            let mut q = Array::<u32>::new(comptime![8 * RPT]);
            #[unroll]
            for r in 0..RPT {
                load_words(w, bo[r] + 16 + 32 * c, &mut q, r * 8, 8usize, true);
            }
            let ec = e0 + 64 * c;
            #[unroll]
            for wi in 0..8usize {
                #[unroll]
                for b in 0..4usize {
                    let l = 4 * wi + b;
                    #[unroll]
                    for i in 0..m {
                        let vl = xf(x, i * k + ec + l);
                        let vh = xf(x, i * k + ec + 32 + l);
                        xl[i] += vl;
                        xh[i] += vh;
                        #[unroll]
                        for r in 0..RPT {
                            let word = q[r * 8 + wi];
                            let lo = (word >> ((8 * b) as u32)) & 0xF;
                            let hi = (word >> ((8 * b + 4) as u32)) & 0xF;
                            sl[i * RPT + r] += f32::cast_from(lo) * vl;
                            sh[i * RPT + r] += f32::cast_from(hi) * vh;
                        }
                    }
                }
            }
            #[unroll]
            for r in 0..RPT {
                let a = scale_min_k4(w, bo[r] + 4, 2 * c);
                let z = scale_min_k4(w, bo[r] + 4, 2 * c + 1);
                let (sa, ma) = (f32::cast_from(a & 0xFF), f32::cast_from(a >> 8));
                let (sz, mz) = (f32::cast_from(z & 0xFF), f32::cast_from(z >> 8));
                #[unroll]
                for i in 0..m {
                    acc[i * RPT + r] += d[r] * sa * sl[i * RPT + r] - dm[r] * ma * xl[i]
                        + (d[r] * sz * sh[i * RPT + r] - dm[r] * mz * xh[i]);
                }
            }
            c += 1;
        }
    } else if comptime![fmt == id::Q6_K] {
        // ql[128], qh[64], scales[16] (i8), d (210 bytes: fields 2-aligned). Two 128-element halves; in
        // half h, element 32·qq + l (quarter qq, l < 32) is nibble qq / 2 of ql[64h + l + 32·(qq % 2)] with
        // bits 2qq.. of qh[32h + l] above it, minus 32, times scale 8h + 2qq + l / 16: `d · Σ sc·(q − 32)·x`.
        let mut bo = Array::<usize>::new(RPT);
        let mut d = Array::<f32>::new(RPT);
        #[unroll]
        for r in 0..RPT {
            bo[r] = bases[r] + blk * bb;
            d[r] = f16_to_f32(half_at(w, bo[r] + 208));
        }
        let mut h = 0usize;
        while h < 2 {
            let mut sq = Array::<f32>::new(comptime![m * RPT]);
            #[unroll]
            for i in 0..comptime![m * RPT] {
                sq[i] = 0.0;
            }
            let mut ql = Array::<u32>::new(comptime![16 * RPT]);
            let mut qh = Array::<u32>::new(comptime![8 * RPT]);
            let mut sc = Array::<f32>::new(comptime![8 * RPT]);
            #[unroll]
            for r in 0..RPT {
                load_words(w, bo[r] + 64 * h, &mut ql, r * 16, 16usize, false);
                load_words(w, bo[r] + 128 + 32 * h, &mut qh, r * 8, 8usize, false);
                #[unroll]
                for g in 0..8usize {
                    sc[r * 8 + g] = signed_byte(byte_at(w, bo[r] + 192 + 8 * h + g));
                }
            }
            let eh = e0 + 128 * h;
            // The word loop stays a loop: unrolled, the 4 × 4 × m × RPT body took lavapipe minutes to
            // compile.
            let mut wi = 0usize;
            while wi < 8 {
                #[unroll]
                for b in 0..4usize {
                    let l = 4 * wi + b;
                    #[unroll]
                    for qq in 0..4usize {
                        let g = 2 * qq + l / 16;
                        #[unroll]
                        for i in 0..m {
                            let xv = xf(x, i * k + eh + 32 * qq + l);
                            #[unroll]
                            for r in 0..RPT {
                                let lw = ql[r * 16 + wi + 8 * (qq % 2)];
                                let lo = (lw >> ((8 * b + 4 * (qq / 2)) as u32)) & 0xF;
                                let hb = (qh[r * 8 + wi] >> ((8 * b + 2 * qq) as u32)) & 3;
                                let v = f32::cast_from(lo | (hb << 4)) - 32.0;
                                sq[i * RPT + r] += sc[r * 8 + g] * v * xv;
                            }
                        }
                    }
                }
                wi += 1;
            }
            #[unroll]
            for i in 0..m {
                #[unroll]
                for r in 0..RPT {
                    acc[i * RPT + r] += d[r] * sq[i * RPT + r];
                }
            }
            h += 1;
        }
    } else if comptime![fmt == F16_X8 || fmt == BF16_X8] {
        // 8 elements of 16 bits, 4 words per row (rows start on 16-byte boundaries: see `gemv_format`).
        let bf16 = comptime![fmt == BF16_X8];
        let mut q = Array::<u32>::new(comptime![4 * RPT]);
        #[unroll]
        for r in 0..RPT {
            load_words(w, bases[r] + blk * 16, &mut q, r * 4, 4usize, true);
        }
        #[unroll]
        for wi in 0..4usize {
            #[unroll]
            for h in 0..2u32 {
                #[unroll]
                for i in 0..m {
                    let xv = xf(x, i * k + e0 + 2 * wi + h as usize);
                    #[unroll]
                    for r in 0..RPT {
                        acc[i * RPT + r] += half_of(q[r * 4 + wi], h, bf16) * xv;
                    }
                }
            }
        }
    } else {
        // Element by element (16-bit floats of odd rows, f32, and the K-quants without a path of their own).
        let mut j = 0usize;
        while j < be {
            let mut v = Array::<f32>::new(RPT);
            #[unroll]
            for r in 0..RPT {
                v[r] = dequant_elem(w, bases[r], e0 + j, fmt);
            }
            #[unroll]
            for i in 0..m {
                let xv = xf(x, i * k + e0 + j);
                #[unroll]
                for r in 0..RPT {
                    acc[i * RPT + r] += v[r] * xv;
                }
            }
            j += 1;
        }
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_kernel<X: Float>(
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
    #[define(X)] _act: ElemType,
) {
    gemv_rows::<X>(x, w, out, n, ldo, col0, k, row_bytes, CUBE_POS, m, fmt);
}

/// Workgroup `group`'s rows of the GEMV (the body of `gemv_kernel`, and of one matrix of
/// `gemv_multi.rs`'s launch).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_rows<X: Float>(
    x: &[X],
    w: &[u32],
    out: &mut [f32],
    n: usize,
    ldo: usize,
    col0: usize,
    k: usize,
    row_bytes: usize,
    group: usize,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
) {
    // Thread `tid` of workgroup `g` owns rows `g · ROWS_PER_GROUP + r · GEMV_WG + tid`, r < RPT. Rows past
    // `n` compute row `n - 1` again (and write nothing): every thread runs the same control flow.
    let first = group * ROWS_PER_GROUP + UNIT_POS as usize;
    let mut bases = Array::<usize>::new(RPT);
    #[unroll]
    for r in 0..RPT {
        let mut row = first + r * GEMV_WG;
        if row >= n {
            row = n - 1;
        }
        bases[r] = row * row_bytes;
    }
    let mut acc = Array::<f32>::new(comptime![m * RPT]);
    #[unroll]
    for i in 0..comptime![m * RPT] {
        acc[i] = 0.0;
    }
    let blocks = k / comptime![layout(fmt).0];
    let mut blk = 0usize;
    while blk < blocks {
        dot_block::<X>(x, w, &bases, blk, k, &mut acc, m, fmt);
        blk += 1;
    }
    #[unroll]
    for r in 0..RPT {
        let row = first + r * GEMV_WG;
        if row < n {
            #[unroll]
            for i in 0..m {
                out[i * ldo + col0 + row] = acc[i * RPT + r];
            }
        }
    }
}
