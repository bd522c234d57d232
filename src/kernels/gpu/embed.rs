//! The embedding gather: rows `ids` of a packed table, dequantised.
//!
//! Shapes: `ids: [len]` (i32 or u32), table: `n` packed rows of `k` elements, `out: [len, k]` f32.
//!
//! One thread per output element. An id outside `0..n` yields a row of zeros rather than a read past the
//! table ([`embedding`](super::embedding) documents it). A table split into several buffers (see
//! [`GpuWeight`]) takes one launch per part: each writes the output rows whose ids fall in its rows, and
//! the first part also the zero rows, so every output element is written exactly once.

use burn::backend::Cube;
use burn::tensor::{DType, IntDType, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

use super::GpuWeight;
use super::dequant::dequant_elem;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

#[cube(launch_unchecked)]
pub(crate) fn embed_kernel<I: Int>(
    ids: &[I],
    w: &[u32],
    out: &mut [f32],
    total: usize,
    n: usize,
    row0: usize,
    table_rows: usize,
    k: usize,
    row_bytes: usize,
    #[comptime] fmt: u32,
) {
    let pos = ABSOLUTE_POS;
    if pos < total {
        let r = pos / k;
        let e = pos % k;
        // i32, not i64: WGSL has no 64-bit integers.
        let id = i32::cast_from(ids[r]);
        // The first part also writes the zeros of ids outside the whole table.
        let mut write = row0 == 0;
        let mut v = 0.0f32;
        if id >= 0 {
            let row = id as usize;
            if row < table_rows {
                write = false;
            }
            if row >= row0 && row < row0 + n {
                write = true;
                v = dequant_elem(w, (row - row0) * row_bytes, e, fmt);
            }
        }
        if write {
            out[pos] = v;
        }
    }
}

/// Rows `ids` of the table, dequantised: `ids: [len]` Int → `[len, k]` f32. An id outside `0..n` gives
/// a row of zeros (the kernel never reads past the table).
///
/// # Panics
///
/// If `ids` is not on the table's (wgpu) device.
pub fn embedding(w: &GpuWeight, ids: Tensor<1, burn::tensor::Int>) -> Tensor<2> {
    let [len] = ids.dims();
    // The kernel reads i32 or u32 ids (WGSL has no 64-bit integers).
    let ids = match ids.dtype() {
        DType::I32 | DType::U32 => ids,
        _ => ids.cast(IntDType::I32),
    };
    let ids = match ids.try_into_primitive::<Cube>() {
        Ok(ids) => into_contiguous(ids),
        Err(e) => panic!("embedding: ids are not on a wgpu device: {e:?}"),
    };
    assert!(
        ids.device == w.device,
        "embedding: ids and the table are on different devices"
    );
    let out = empty_device_dtype(
        ids.client.clone(),
        ids.device.clone(),
        Shape::new([len, w.k]),
        DType::F32,
    );
    let total = len * w.k;
    if total == 0 {
        return Tensor::from_primitive::<Cube>(out);
    }
    let cube_dim = CubeDim::new_1d(WG);
    let count = cubecl::calculate_cube_count_elemwise(&w.client, total, cube_dim);
    let dtype = ids.dtype;
    for part in &w.parts {
        let weights = unsafe { BufferArg::from_raw_parts(part.handle.clone(), part.words) };
        let ids_arg = ids.clone().into_buffer_arg();
        let out_arg = out.clone().into_buffer_arg();
        // The ids' element type is the kernel's only type parameter: the launch is otherwise the same.
        macro_rules! launch {
            ($id:ty) => {
                embed_kernel::launch_unchecked::<$id>(
                    &w.client,
                    count.clone(),
                    cube_dim,
                    ids_arg,
                    weights,
                    out_arg,
                    total,
                    part.rows,
                    part.row0,
                    w.n,
                    w.k,
                    w.row_bytes,
                    w.fmt,
                )
            };
        }
        unsafe {
            match dtype {
                DType::U32 => launch!(u32),
                _ => launch!(i32),
            }
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
