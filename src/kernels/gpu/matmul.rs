//! `y = x · Wᵀ` over packed GGML rows: the launch of the GEMV kernel for decode (`m ≤ 8`, `gemv.rs`) and
//! a tiled kernel for prefill (`m > 8`). Both dequantise in the kernel; no f32 weight is written to global memory.
//!
//! Shapes: `x: [m, k]` f32, or f16 for the GEMV (row-major, contiguous; the tiled kernel takes f16 widened),
//! `w`: `n` packed rows of `k` elements, `y: [m, n]` f32.
//!
//! A weight in several buffers (see [`GpuWeight`]) takes one launch per part: the kernels see the part's
//! `n` rows as the whole matrix and write output column `col0 + c` of rows `ldo` floats apart (`col0` the
//! part's first row, `ldo` the whole matrix's `n`). Every output is still one row's dot product in the same
//! order, so the split changes no bit of `y`.
//!
//! **GEMV** (`m ≤ 8`, decode): per block, in one of two layouts ([`GemvLayout`], chosen for the device
//! at its creation): whole rows per thread (`gemv.rs`, for software Vulkan) or a row's blocks shared by a
//! workgroup's lanes (`gemv_split.rs`, for GPUs). In the row layout (software adapters) larger `m` runs
//! through the GEMV too, 8 rows of `x` per launch; in the split layout (GPUs) it takes the tiled kernel.
//!
//! **Tiled.** A workgroup of 16 × 16 threads computes a `TILE × TILE` (32 × 32) tile of `y`, each thread
//! a 2 × 2 sub-tile (rows `ty, ty + 16`, columns `tx, tx + 16`). Per K step of `TILE` elements (one
//! Q4_0/Q8_0/… block, an eighth of a K-quant super-block) the workgroup dequantises a `TILE × TILE` tile
//! of W and loads one of x into shared memory (4 elements per thread each, consecutive threads on
//! consecutive `k`), then accumulates in registers. Rows are padded to `TILE + 1` floats so the column
//! reads do not collide in banks. Elements past `m`, `n` or `k` load as 0 and are never read from global
//! memory; outputs past `m`, `n` are not written. Shared memory: 2 × 32 × 33 × 4 B ≈ 8.4 KiB.

use burn::backend::Cube;
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::kernel::{into_contiguous, slice};
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

use super::GemvLayout;
use super::GpuWeight;
use super::dequant::dequant_elem;
use super::gemv::{GEMV_MAX_M, GEMV_WG, ROWS_PER_GROUP, gemv_format, gemv_kernel};
use super::gemv_split::{SPLIT_WG, blocks_of, gemv_split_kernel, lanes, rows_per_group};

/// Tile edge (outputs per side, and the K step).
pub(crate) const TILE: usize = 32;

/// Threads per side of the workgroup.
pub(crate) const THREADS: usize = 16;

const PITCH: usize = TILE + 1;

#[cube(launch_unchecked)]
pub(crate) fn tiled_kernel(
    x: &[f32],
    w: &[u32],
    out: &mut [f32],
    m: usize,
    n: usize,
    ldo: usize,
    col0: usize,
    k: usize,
    row_bytes: usize,
    #[comptime] fmt: u32,
) {
    let tid = UNIT_POS as usize;
    let tx = tid % THREADS;
    let ty = tid / THREADS;
    let tile_col = CUBE_POS_X as usize * TILE;
    let row0 = CUBE_POS_Y as usize * TILE;
    let mut xs = Shared::<[f32]>::new_slice(comptime![TILE * PITCH]);
    let mut ws = Shared::<[f32]>::new_slice(comptime![TILE * PITCH]);
    let mut a00 = 0.0f32;
    let mut a01 = 0.0f32;
    let mut a10 = 0.0f32;
    let mut a11 = 0.0f32;
    let mut k0 = 0usize;
    while k0 < k {
        #[unroll]
        for q in 0..4 {
            let idx = tid + q * THREADS * THREADS;
            let r = idx / TILE;
            let c = idx % TILE;
            let gk = k0 + c;
            let gm = row0 + r;
            let gn = tile_col + r;
            let mut xv = 0.0f32;
            if gm < m && gk < k {
                xv = x[gm * k + gk];
            }
            let mut wv = 0.0f32;
            if gn < n && gk < k {
                wv = dequant_elem(w, gn * row_bytes, gk, fmt);
            }
            xs[r * PITCH + c] = xv;
            ws[r * PITCH + c] = wv;
        }
        sync_cube();
        #[unroll]
        for kk in 0..TILE {
            let x0 = xs[ty * PITCH + kk];
            let x1 = xs[(ty + THREADS) * PITCH + kk];
            let w0 = ws[tx * PITCH + kk];
            let w1 = ws[(tx + THREADS) * PITCH + kk];
            a00 += x0 * w0;
            a01 += x0 * w1;
            a10 += x1 * w0;
            a11 += x1 * w1;
        }
        sync_cube();
        k0 += TILE;
    }
    let r0 = row0 + ty;
    let r1 = r0 + THREADS;
    let c0 = tile_col + tx;
    let c1 = c0 + THREADS;
    if r0 < m && c0 < n {
        out[r0 * ldo + col0 + c0] = a00;
    }
    if r0 < m && c1 < n {
        out[r0 * ldo + col0 + c1] = a01;
    }
    if r1 < m && c0 < n {
        out[r1 * ldo + col0 + c0] = a10;
    }
    if r1 < m && c1 < n {
        out[r1 * ldo + col0 + c1] = a11;
    }
}

/// The largest number of workgroups along one grid dimension (WebGPU's default limit).
const MAX_GROUPS: usize = 65535;

/// A grid of at least `groups` workgroups, 2-D when one dimension cannot hold them (`CUBE_POS` is
/// linear over both).
pub(crate) fn linear_grid(groups: usize) -> CubeCount {
    let x = groups.clamp(1, MAX_GROUPS);
    let y = groups.div_ceil(x).max(1);
    CubeCount::Static(x as u32, y as u32, 1)
}

/// `y = x · Wᵀ`: `x: [m, k]` f32 on the weight's device → `[m, n]` f32, decode steps by the weight's
/// [`Caps`](super::Caps): their GEMV layout, subgroup reductions in the split GEMV. An f16 `x` is read as
/// f16 by the GEMV (the tiled kernel takes it widened to f32 first).
///
/// # Panics
///
/// If `x` is not `[m, k]` with the weight's `k`, or not on the weight's (wgpu) device.
pub fn matmul(x: Tensor<2>, w: &GpuWeight) -> Tensor<2> {
    let (layout, features) = (w.caps.gemv, w.caps.features);
    let [m, k] = x.dims();
    assert_eq!(k, w.k, "matmul: x is [{m}, {k}], the weight [{}, {}]", w.n, w.k);
    // Software adapters run every `m` through the GEMV, 8 rows of `x` at a time: the tiled kernel's
    // barriers cost more there than reading the weights once per 8 rows (a 64-token prefill of SmolLM2 on
    // lavapipe: see the README). GPUs take the tiled kernel for `m > 8`.
    let gemv_rows = match (m <= GEMV_MAX_M, layout) {
        (true, _) => Some(m),
        (false, GemvLayout::Rows) => Some(GEMV_MAX_M),
        (false, GemvLayout::Split) => None,
    };
    let x = match (x.dtype(), gemv_rows) {
        (DType::F16, Some(_)) => x,
        _ => x.cast(DType::F32),
    };
    let x_type = super::caps::elem(x.dtype());
    let x = match x.try_into_primitive::<Cube>() {
        Ok(x) => into_contiguous(x),
        Err(e) => panic!("matmul: x is not on a wgpu device: {e:?}"),
    };
    assert!(
        x.device == w.device,
        "matmul: x and the weight are on different devices"
    );
    let out = empty_device_dtype(
        x.client.clone(),
        x.device.clone(),
        Shape::new([m, w.n]),
        DType::F32,
    );
    if m == 0 {
        return Tensor::from_primitive::<Cube>(out);
    }
    let fmt = gemv_format(w.fmt, w.k);
    for part in &w.parts {
        let weights = || unsafe { BufferArg::from_raw_parts(part.handle.clone(), part.words) };
        let Some(step) = gemv_rows else {
            let count = CubeCount::Static(part.rows.div_ceil(TILE) as u32, m.div_ceil(TILE) as u32, 1);
            unsafe {
                tiled_kernel::launch_unchecked(
                    &w.client,
                    count,
                    CubeDim::new_1d((THREADS * THREADS) as u32),
                    x.clone().into_buffer_arg(),
                    weights(),
                    out.clone().into_buffer_arg(),
                    m,
                    part.rows,
                    w.n,
                    part.row0,
                    w.k,
                    w.row_bytes,
                    w.fmt,
                );
            }
            continue;
        };
        for r0 in (0..m).step_by(step) {
            let rows = step.min(m - r0);
            // Rows r0.. of x (a view where the offset is aligned, else a copy); their outputs start at
            // row r0 of y.
            let xs = match (r0, rows) == (0, m) {
                true => x.clone(),
                false => slice(x.clone(), &[r0..r0 + rows, 0..k]),
            };
            let col0 = part.row0 + r0 * w.n;
            let ys = out.clone().into_buffer_arg();
            if layout == GemvLayout::Split {
                let blocks = blocks_of(fmt, w.k);
                let width = features
                    .subgroups
                    .map_or(SPLIT_WG, |s| (s as usize).min(SPLIT_WG));
                let t = lanes(blocks, width);
                let shuffle = features.shuffle_width(t).is_some();
                unsafe {
                    gemv_split_kernel::launch_unchecked(
                        &w.client,
                        linear_grid(part.rows.div_ceil(rows_per_group(t))),
                        CubeDim::new_1d(SPLIT_WG as u32),
                        xs.into_buffer_arg(),
                        weights(),
                        ys,
                        part.rows,
                        w.n,
                        col0,
                        w.k,
                        w.row_bytes,
                        rows,
                        fmt,
                        t,
                        shuffle,
                        x_type,
                    );
                }
            } else {
                unsafe {
                    gemv_kernel::launch_unchecked(
                        &w.client,
                        linear_grid(part.rows.div_ceil(ROWS_PER_GROUP)),
                        CubeDim::new_1d(GEMV_WG as u32),
                        xs.into_buffer_arg(),
                        weights(),
                        ys,
                        part.rows,
                        w.n,
                        col0,
                        w.k,
                        w.row_bytes,
                        rows,
                        fmt,
                        x_type,
                    );
                }
            }
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
