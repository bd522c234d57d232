//! The device side of sampling: each row's `k` largest logits with their ids, and the softmax mass at a
//! temperature, so that a decode step reads back a few hundred bytes instead of `V` floats (Gemma 3's
//! 262 144-token vocabulary is 1 MiB per token).
//!
//! Shapes: `logits: [b, V]` → [`TopK`]: `top: [b, 2k]` (`(value, id)` pairs, ids as f32, exact below
//! 2²⁴; the largest value first, the lower id first on ties: the order of [`crate::sampling::top_k`]) and
//! `stats: [b, 2C]` (per chunk of [`CHUNK`] logits its max `m_c` and `Σ exp((l − m_c) / t)`), `C = ⌈V / CHUNK⌉`.
//!
//! How: one launch per level. Level 1 loads [`CHUNK`] logits per workgroup (one workgroup per chunk and
//! row) into shared memory, padded with `f32::MIN` (id `PAD_ID`, so padding sorts last), sorts them by
//! a bitonic network and writes the chunk's first `k` pairs (and the chunk's stats). Each further level
//! treats the `C · k` pairs of the previous one as its input, until one chunk is left: ⌈log₁₆ V⌉ levels
//! for `k = 64` (3 for 262 144 ids, 2 for 49 152). Exact: every pair of the top `k` survives each level,
//! since it is among the top `k` of its chunk.
//!
//! Shared memory: `2 · CHUNK` f32 plus [`WG`] partial sums, 9 KiB (WebGPU guarantees 16 KiB).
//!
//! Greedy needs only the first pair: [`argmax`] finds it in one launch (a scan and a tree per row, or
//! subgroup shuffles and one barrier where the device has subgroups), with no sort and no stats; on
//! lavapipe the three sorting levels cost more than reading a 49 152-logit row.

use burn::backend::Cube;
use burn::tensor::{Shape, Tensor};
use cubecl::prelude::*;

use super::decode::{cube, empty_like};

/// Logits (or pairs) sorted per workgroup.
pub const CHUNK: usize = 1024;
/// Threads per workgroup: each loads, compares and sums `CHUNK / WG` elements.
const WG: usize = 256;
/// Per thread.
const PER: usize = CHUNK / WG;
/// The most pairs a level keeps per chunk (at most a sixteenth of a chunk, so each level shrinks the input).
pub use crate::sampling::candidates::MAX_K;
/// The id of padding: above any vocabulary (exact in f32).
const PAD_ID: f32 = 16_777_216.0;
/// The value of padding: below any finite logit.
const PAD: f32 = -3.0e38;

/// Whether pair `(va, ia)` comes before `(vb, ib)`: the larger value, then the lower id.
#[cube]
fn before(va: f32, ia: f32, vb: f32, ib: f32) -> bool {
    va > vb || (va == vb && ia < ib)
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn top_k_kernel(
    input: &[f32],
    out: &mut [f32],
    stats: &mut [f32],
    n: usize,
    k: usize,
    inv_t: f32,
    #[comptime] first: bool,
) {
    let chunk = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let chunks = CUBE_COUNT_X as usize;
    let tid = UNIT_POS as usize;
    let mut sv = Shared::<[f32]>::new_slice(CHUNK);
    let mut si = Shared::<[f32]>::new_slice(CHUNK);
    let mut partial = Shared::<[f32]>::new_slice(WG);
    // Load: level 1 reads logits (the id is the index), later levels `(value, id)` pairs.
    for e in 0..PER {
        let slot = e * WG + tid;
        let at = chunk * CHUNK + slot;
        let mut v = f32::cast_from(tid) * 0.0 + PAD;
        let mut id = f32::cast_from(tid) * 0.0 + PAD_ID;
        if at < n {
            if comptime![first] {
                v = input[row * n + at];
                id = f32::cast_from(at);
            } else {
                v = input[(row * n + at) * 2];
                id = input[(row * n + at) * 2 + 1];
            }
        }
        sv[slot] = v;
        si[slot] = id;
    }
    sync_cube();
    // Bitonic sort of CHUNK pairs into `before` order: stage `size`, step `stride`; each thread
    // compare-exchanges CHUNK / 2 / WG pairs per step.
    let mut size = 2usize;
    while size <= CHUNK {
        let mut stride = size / 2;
        while stride > 0 {
            for e in 0..comptime![PER / 2] {
                let p = e * WG + tid;
                let i = 2 * stride * (p / stride) + p % stride;
                let j = i + stride;
                let (va, ia, vb, ib) = (sv[i], si[i], sv[j], si[j]);
                // Ascending blocks of `size` alternate with descending ones, then merge.
                let forward = (i & size) == 0;
                if before(vb, ib, va, ia) == forward {
                    sv[i] = vb;
                    si[i] = ib;
                    sv[j] = va;
                    si[j] = ia;
                }
            }
            sync_cube();
            stride /= 2;
        }
        size *= 2;
    }
    if tid < k {
        let o = ((row * chunks + chunk) * k + tid) * 2;
        out[o] = sv[tid];
        out[o + 1] = si[tid];
    }
    if comptime![first] {
        // The chunk's max (its first pair) and its softmax mass at temperature 1 / inv_t.
        let m = sv[0];
        let mut s = 0.0f32;
        for e in 0..PER {
            let slot = tid * PER + e;
            if si[slot] < PAD_ID {
                s += ((sv[slot] - m) * inv_t).exp();
            }
        }
        partial[tid] = s;
        sync_cube();
        if tid == 0 {
            let mut total = 0.0f32;
            for i in 0..WG {
                total += partial[i];
            }
            let o = (row * chunks + chunk) * 2;
            stats[o] = m;
            stats[o + 1] = total;
        }
    }
}

/// Greedy's one candidate: each row's largest logit and its id (the lower id on ties), one workgroup per
/// row: each thread scans a strided share (keeping the first of equal values), then a tree over the
/// threads in shared memory. Writes `(value, id)` at `out[2 · row]`.
#[cube(launch_unchecked)]
// `tid * 0 + c`: a runtime copy of the constant `c`, which the loop then halves.
#[allow(clippy::erasing_op)]
fn argmax_kernel(logits: &[f32], out: &mut [f32], v: usize, #[comptime] plane: bool) {
    let row = CUBE_POS;
    let tid = UNIT_POS as usize;
    let mut best = f32::cast_from(tid) * 0.0 + PAD;
    let mut at = f32::cast_from(tid) * 0.0 + PAD_ID;
    let mut e = tid;
    while e < v {
        let l = logits[row * v + e];
        if l > best {
            best = l;
            at = f32::cast_from(e);
        }
        e += WG;
    }
    let mut sv = Shared::<[f32]>::new_slice(WG);
    let mut si = Shared::<[f32]>::new_slice(WG);
    if comptime![plane] {
        // A butterfly over each subgroup (`before` is a total order, so every lane ends with its
        // subgroup's best pair), then the first lane of each posts it (`caps.rs`: subgroups are
        // `PLANE_DIM` consecutive threads) and thread 0 takes the best of the posted pairs.
        let mut half = PLANE_DIM / 2;
        while half > 0 {
            let ov = plane_shuffle_xor(best, half);
            let oi = plane_shuffle_xor(at, half);
            if before(ov, oi, best, at) {
                best = ov;
                at = oi;
            }
            half /= 2;
        }
        if UNIT_POS_PLANE == 0 {
            let slot = (UNIT_POS / PLANE_DIM) as usize;
            sv[slot] = best;
            si[slot] = at;
        }
        sync_cube();
        if tid == 0 {
            let planes = (WG as u32 / PLANE_DIM) as usize;
            for i in 1..planes {
                if before(sv[i], si[i], best, at) {
                    best = sv[i];
                    at = si[i];
                }
            }
            out[row * 2] = best;
            out[row * 2 + 1] = at;
        }
    } else {
        sv[tid] = best;
        si[tid] = at;
        sync_cube();
        let mut half = tid * 0 + WG / 2;
        while half > 0 {
            if tid < half && before(sv[tid + half], si[tid + half], sv[tid], si[tid]) {
                sv[tid] = sv[tid + half];
                si[tid] = si[tid + half];
            }
            sync_cube();
            half /= 2;
        }
        if tid == 0 {
            out[row * 2] = sv[0];
            out[row * 2 + 1] = si[0];
        }
    }
}

#[cube(launch_unchecked)]
fn adjust_kernel(logits: &mut [f32], entries: &[f32], v: usize, m: usize) {
    let i = ABSOLUTE_POS;
    if i < m {
        let row = u32::cast_from(entries[i * 4]) as usize;
        let id = u32::cast_from(entries[i * 4 + 1]) as usize;
        let at = row * v + id;
        logits[at] = (logits[at] + entries[i * 4 + 2]) - entries[i * 4 + 3];
    }
}

pub use crate::sampling::candidates::Adjust;

/// Applies `entries` to `logits: [b, V]` in place (one launch; none for no entries). Each `(row, id)`
/// at most once; entries outside the tensor are dropped.
pub fn adjust(logits: &Tensor<2>, entries: &[Adjust]) {
    let [b, v] = logits.dims();
    let flat: Vec<f32> = entries
        .iter()
        .filter(|e| (e.row as usize) < b && (e.id as usize) < v)
        .flat_map(|e| [e.row as f32, e.id as f32, e.add, e.sub])
        .collect();
    let m = flat.len() / 4;
    if m == 0 {
        return;
    }
    let table = Tensor::<1>::from_data(burn::tensor::TensorData::new(flat, [4 * m]), &logits.device());
    let target = match logits.clone().try_into_primitive::<Cube>() {
        Ok(t) => t,
        Err(e) => panic!("adjust: logits not on a wgpu device: {e:?}"),
    };
    assert!(target.is_contiguous(), "adjust: logits must be contiguous");
    let table = cube(table, "adjust table");
    let dim = CubeDim::new_1d(WG as u32);
    let count = cubecl::calculate_cube_count_elemwise(&target.client, m, dim);
    unsafe {
        adjust_kernel::launch_unchecked(
            &target.client,
            count,
            dim,
            target.clone().into_buffer_arg(),
            table.into_buffer_arg(),
            v,
            m,
        );
    }
}

/// Each row's `k` largest logits and the per-chunk softmax mass (see the module docs), on the device.
#[derive(Debug, Clone)]
pub struct TopK {
    /// `[b, 2k]`: `(value, id)` pairs, best first.
    pub top: Tensor<2>,
    /// `[b, 2C]`: per chunk of [`CHUNK`] logits `(max, Σ exp((l − max) / t))`.
    pub stats: Tensor<2>,
}

/// `logits: [b, V]` → each row's largest logit and its id, `[b, 2]` (as [`TopK::top`] with `k = 1`), in
/// one launch: greedy's candidate, without the sort; through subgroups where `f` has them (the same
/// pair either way).
pub fn argmax(logits: Tensor<2>, f: super::caps::Features) -> Tensor<2> {
    let [b, v] = logits.dims();
    assert!(v > 0 && v < PAD_ID as usize, "argmax: {v} logits");
    let input = cube(logits, "select logits");
    let out = empty_like(&input, Shape::new([b, 2]));
    if b > 0 {
        unsafe {
            argmax_kernel::launch_unchecked(
                &input.client,
                CubeCount::Static(b as u32, 1, 1),
                CubeDim::new_1d(WG as u32),
                input.clone().into_buffer_arg(),
                out.clone().into_buffer_arg(),
                v,
                f.subgroups.is_some(),
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}

/// `logits: [b, V]` → the top `k` pairs of each row and its chunk stats at temperature `t` (`t = 0`:
/// greedy, the sums are then meaningless). Launches ⌈log₁₆ V⌉ kernels (1 for `V ≤ CHUNK`).
///
/// # Panics
///
/// If `k` is 0 or above [`MAX_K`] or `V`, or `V` reaches 2²⁴ (ids would not be exact in f32).
pub fn top_k(logits: Tensor<2>, k: usize, t: f32) -> TopK {
    let [b, v] = logits.dims();
    assert!(
        (1..=MAX_K.min(v)).contains(&k) && v < PAD_ID as usize,
        "top_k: k = {k} for {v} logits"
    );
    let inv_t = if t > 0.0 { 1.0 / t } else { 0.0 };
    let mut input = cube(logits, "select logits");
    let mut n = v;
    let mut first = true;
    let chunks1 = v.div_ceil(CHUNK);
    let stats = empty_like(&input, Shape::new([b, 2 * chunks1]));
    loop {
        let chunks = n.div_ceil(CHUNK);
        let out = empty_like(&input, Shape::new([b, 2 * chunks * k]));
        if b > 0 {
            unsafe {
                top_k_kernel::launch_unchecked(
                    &input.client,
                    CubeCount::Static(chunks as u32, b as u32, 1),
                    CubeDim::new_1d(WG as u32),
                    input.clone().into_buffer_arg(),
                    out.clone().into_buffer_arg(),
                    stats.clone().into_buffer_arg(),
                    n,
                    k,
                    inv_t,
                    first,
                );
            }
        }
        input = out;
        if chunks == 1 {
            break;
        }
        n = chunks * k;
        first = false;
    }
    TopK {
        top: Tensor::from_primitive::<Cube>(input),
        stats: Tensor::from_primitive::<Cube>(stats),
    }
}
