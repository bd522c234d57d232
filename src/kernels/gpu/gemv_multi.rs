//! Two or three decode GEMVs over the same activations in one launch: a layer's q, k and v projections,
//! or its gate and up projections. Each matrix keeps its own buffer, format and output; the launch's
//! workgroups are the matrices' workgroups one after the other (`CUBE_POS < g₀`: the first matrix,
//! then the second, …), each running the body of the single-matrix kernel of the device's layout
//! (`gemv.rs` rows or `gemv_split.rs` split) on its matrix. The branch taken is the same for every
//! thread of a workgroup, so the split layout's barriers and shuffles stay in uniform control flow.
//!
//! Every output is the single-matrix kernel's, bit for bit (the same body on the same rows): the
//! launch saves dispatches (a Llama layer's eleven become eight) and gives the small k and v
//! matrices the company of q's workgroups.
//!
//! Shapes: `x: [m, k]` (f32 or f16, `m ≤ GEMV_MAX_M`), matrix `i`: `n_i` rows of `k` elements in one
//! buffer (a weight split over several buffers takes the single-matrix path), `y_i: [m, n_i]` f32.

use burn::backend::Cube;
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

use super::caps::elem;
use super::gemv::{GEMV_MAX_M, GEMV_WG, ROWS_PER_GROUP, gemv_format, gemv_rows};
use super::gemv_split::{SPLIT_WG, blocks_of, gemv_split_rows, lanes, partial_len, rows_per_group};
use super::{GemvLayout, GpuWeight};

/// How one matrix of the launch runs: its format (the GEMV's, see `gemv_format`), and in the split
/// layout its lanes per row group.
#[derive(Clone, Copy)]
struct Plan {
    fmt: u32,
    lanes: usize,
    groups: usize,
}

#[cube]
#[allow(clippy::too_many_arguments)]
fn body<X: Float>(
    x: &[X],
    w: &[u32],
    out: &mut [f32],
    n: usize,
    k: usize,
    row_bytes: usize,
    group: usize,
    partial: &mut Shared<[f32]>,
    #[comptime] m: usize,
    #[comptime] fmt: u32,
    #[comptime] split: bool,
    #[comptime] t: usize,
    #[comptime] shuffle: bool,
) {
    if comptime![split] {
        gemv_split_rows::<X>(
            x, w, out, n, n, 0, k, row_bytes, group, partial, m, fmt, t, shuffle,
        );
    } else {
        gemv_rows::<X>(x, w, out, n, n, 0, k, row_bytes, group, m, fmt);
    }
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gemv_multi_kernel<X: Float>(
    x: &[X],
    w0: &[u32],
    w1: &[u32],
    w2: &[u32],
    y0: &mut [f32],
    y1: &mut [f32],
    y2: &mut [f32],
    n0: usize,
    n1: usize,
    n2: usize,
    g0: usize,
    g1: usize,
    rb0: usize,
    rb1: usize,
    rb2: usize,
    k: usize,
    #[comptime] m: usize,
    #[comptime] split: bool,
    #[comptime] shuffle: bool,
    #[comptime] three: bool,
    #[comptime] f0: u32,
    #[comptime] f1: u32,
    #[comptime] f2: u32,
    #[comptime] t0: usize,
    #[comptime] t1: usize,
    #[comptime] t2: usize,
    #[define(X)] _act: ElemType,
) {
    // One tree's worth of shared memory, whichever matrix this workgroup serves.
    let mut partial = Shared::<[f32]>::new_slice(comptime![partial_len(m, shuffle)]);
    let g = CUBE_POS;
    if g < g0 {
        body::<X>(x, w0, y0, n0, k, rb0, g, &mut partial, m, f0, split, t0, shuffle);
    } else if g < g0 + g1 {
        body::<X>(
            x,
            w1,
            y1,
            n1,
            k,
            rb1,
            g - g0,
            &mut partial,
            m,
            f1,
            split,
            t1,
            shuffle,
        );
    } else if comptime![three] {
        body::<X>(
            x,
            w2,
            y2,
            n2,
            k,
            rb2,
            g - g0 - g1,
            &mut partial,
            m,
            f2,
            split,
            t2,
            shuffle,
        );
    }
}

/// `x · W_iᵀ` for each of `ws` (two or three weights of `x`'s `k`, on its device, with the same caps) in
/// one launch, in their GEMV layout and under their features; `None` where the launch does not apply (`m`
/// above the GEMV's, a weight in several buffers, another count, weights of other caps), and the caller
/// runs one GEMV per weight.
pub fn matmul_group(x: &Tensor<2>, ws: &[&GpuWeight]) -> Option<Vec<Tensor<2>>> {
    let [m, k] = x.dims();
    let caps = ws.first()?.caps;
    let fits = |w: &&GpuWeight| w.k == k && w.parts.len() == 1 && w.caps == caps;
    if !(2..=3).contains(&ws.len()) || !(1..=GEMV_MAX_M).contains(&m) || !ws.iter().all(fits) {
        return None;
    }
    let (layout, features) = (caps.gemv, caps.features);
    let x = match x.dtype() {
        DType::F16 => x.clone(),
        _ => x.clone().cast(DType::F32),
    };
    let x_type = elem(x.dtype());
    let x = into_contiguous(x.try_into_primitive::<Cube>().ok()?);
    if ws.iter().any(|w| w.device != x.device) {
        return None;
    }
    let split = layout == GemvLayout::Split;
    let width = features
        .subgroups
        .map_or(SPLIT_WG, |s| (s as usize).min(SPLIT_WG));
    let plans: Vec<Plan> = ws
        .iter()
        .map(|w| {
            let fmt = gemv_format(w.fmt, k);
            let lanes = lanes(blocks_of(fmt, k), width);
            let rows = if split {
                rows_per_group(lanes)
            } else {
                ROWS_PER_GROUP
            };
            Plan {
                fmt,
                lanes,
                groups: w.n.div_ceil(rows),
            }
        })
        .collect();
    // The split layout's butterfly only where every matrix's groups fit a subgroup.
    let shuffle = split && plans.iter().all(|p| features.shuffle_width(p.lanes).is_some());
    let outs: Vec<_> = ws
        .iter()
        .map(|w| {
            empty_device_dtype(
                x.client.clone(),
                x.device.clone(),
                Shape::new([m, w.n]),
                DType::F32,
            )
        })
        .collect();
    let three = ws.len() == 3;
    // The absent third matrix, never reached (`three` is false): the first weight again (read-only
    // twice is one usage) and a one-element output of its own. Not the first output again: where
    // cubecl gives each allocation its own buffer (wasm), it declares a buffer the shader never
    // writes read-only, and WebGPU refuses a buffer bound read-write and read-only in one dispatch.
    let spare;
    let (w2, y2, p2) = match three {
        true => (ws[2], &outs[2], plans[2]),
        false => {
            spare = empty_device_dtype(x.client.clone(), x.device.clone(), Shape::new([1]), DType::F32);
            (ws[0], &spare, plans[0])
        }
    };
    let weights =
        |w: &GpuWeight| unsafe { BufferArg::from_raw_parts(w.parts[0].handle.clone(), w.parts[0].words) };
    let total: usize = plans.iter().map(|p| p.groups).sum();
    let dim = CubeDim::new_1d(if split { SPLIT_WG } else { GEMV_WG } as u32);
    unsafe {
        gemv_multi_kernel::launch_unchecked(
            &ws[0].client,
            super::matmul::linear_grid(total),
            dim,
            x.clone().into_buffer_arg(),
            weights(ws[0]),
            weights(ws[1]),
            weights(w2),
            outs[0].clone().into_buffer_arg(),
            outs[1].clone().into_buffer_arg(),
            y2.clone().into_buffer_arg(),
            ws[0].n,
            ws[1].n,
            w2.n,
            plans[0].groups,
            plans[1].groups,
            ws[0].row_bytes,
            ws[1].row_bytes,
            w2.row_bytes,
            k,
            m,
            split,
            shuffle,
            three,
            plans[0].fmt,
            plans[1].fmt,
            p2.fmt,
            plans[0].lanes,
            plans[1].lanes,
            p2.lanes,
            x_type,
        );
    }
    Some(outs.into_iter().map(Tensor::from_primitive::<Cube>).collect())
}
