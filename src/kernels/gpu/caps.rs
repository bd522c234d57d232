//! What the adapter offers kiln's kernels beyond plain WGSL: 16-bit floats (`shader-f16`) and subgroup
//! operations (`subgroups`), chosen once per device at its creation (`engine::runtime::device::gpu`) and reported
//! by `deviceReport` ([`Features`]); with the GEMV layout and whether the adapter is a software one, they
//! are the device's [`Caps`] (`kernels/caps.rs`): a value kernels are handed, not a process setting. Here:
//! how the kernels' element types follow them, and the subgroup [`probe`].
//!
//! - **f16** ([`Features::f16`]): the decode step keeps the activations that feed its matrix products
//!   (the normalised hidden state, the attention output, the gated activation) and the KV cache in f16;
//!   every sum is still taken in f32, and the residual stream and the logits stay f32 (Gemma's residual
//!   stream leaves f16's range). 16-bit weights are the file's bytes on every device, read 8 at a time
//!   (`gemv.rs`), their F16 bits decoded by hand: naga mistypes `bitcast<vec2<f16>>`, WGSL's way to
//!   read them as `f16`.
//! - **Subgroups** ([`Features::subgroups`]): reductions inside a workgroup go through subgroup shuffles
//!   and sums instead of shared memory and barriers: the split GEMV's partial sums, RMSNorm's sum of
//!   squares, the argmax. The kernels assume that a subgroup is a run of consecutive invocation indices
//!   (`UNIT_POS / PLANE_DIM` names it, `UNIT_POS % PLANE_DIM` is the lane), as every Vulkan, Metal and D3D
//!   driver lays out a one-dimensional workgroup, but WebGPU does not promise it: [`probe`] checks it on
//!   the device before subgroups are used, the smallest subgroup size the adapter states
//!   (`subgroupMinSize`) bounds every shuffle's width, and no subgroup may be wider than a workgroup of
//!   64 threads ([`MAX_SUBGROUP`]).
//!
//! SwiftShader (Chromium's software adapter) has neither feature; Mesa's lavapipe has both (f16, and
//! subgroups of 8), so the native tests run every kernel both ways.

use burn::backend::Cube;
use burn::tensor::{DType, Device, Shape, Tensor};
use cubecl::ir::FloatKind;
use cubecl::prelude::*;

use super::decode::empty_like;

pub use crate::kernels::caps::{Caps, Features, GemvLayout};

/// The kernels' element type for a float tensor of `dtype`: f16 for `F16`, else f32 (what every other
/// float tensor of kiln's kernels is, or is cast to).
pub(crate) fn elem(dtype: DType) -> ElemType {
    match dtype {
        DType::F16 => ElemType::Float(FloatKind::F16),
        _ => ElemType::Float(FloatKind::F32),
    }
}

/// The burn dtype of decode activations under `features`.
pub(crate) fn act_dtype(features: Features) -> DType {
    match features.f16 {
        true => DType::F16,
        false => DType::F32,
    }
}

/// Threads of the probe's workgroup.
const PROBE_WG: usize = 64;

/// Per thread (as f32, exact for these small integers): its lane, the subgroup size, the subgroup's sum of lane ids, and the index of the thread
/// whose value a shuffle by each mask 1, 2, 4 brought.
#[cube(launch_unchecked)]
fn probe_kernel(out: &mut [f32]) {
    let tid = UNIT_POS as usize;
    let lane = UNIT_POS_PLANE;
    out[tid * 6] = f32::cast_from(lane);
    out[tid * 6 + 1] = f32::cast_from(PLANE_DIM);
    out[tid * 6 + 2] = f32::cast_from(plane_sum(lane));
    out[tid * 6 + 3] = f32::cast_from(plane_shuffle_xor(UNIT_POS, 1u32));
    out[tid * 6 + 4] = f32::cast_from(plane_shuffle_xor(UNIT_POS, 2u32));
    out[tid * 6 + 5] = f32::cast_from(plane_shuffle_xor(UNIT_POS, 4u32));
}

/// Whether `words` (the probe's output) shows subgroups of one power-of-two size `s` in
/// `min..=max` that are runs of consecutive invocations with `lane = index % s`, whose sums and
/// shuffles behave; `Some(s)` then.
pub fn check_probe(words: &[u32], min: u32, max: u32) -> Option<u32> {
    let s = *words.get(1)?;
    let sane = s.is_power_of_two() && (4..=MAX_SUBGROUP).contains(&s) && (min..=max).contains(&s);
    let layout = words.len() == PROBE_WG * 6
        && words.chunks(6).enumerate().all(|(t, w)| {
            let t = t as u32;
            let first = t - t % s;
            w[0] == t % s
                && w[1] == s
                && w[2] == s * (s - 1) / 2
                && (first..first + s).contains(&t)
                && [1, 2, 4].iter().zip(&w[3..]).all(|(&m, &got)| got == t ^ m)
        });
    (sane && layout && (PROBE_WG as u32).is_multiple_of(s)).then_some(s)
}

/// The subgroup probe's output on `device` and the adapter's stated subgroup sizes (min, max); `None`
/// when the device is not wgpu.
fn launch_probe(device: &Device) -> Option<(Tensor<1>, u32, u32)> {
    let t = Tensor::<1>::zeros([1], device)
        .try_into_primitive::<Cube>()
        .ok()?;
    let props = t.client.properties();
    let (min, max) = (props.hardware.plane_size_min, props.hardware.plane_size_max);
    let out = empty_like(&t, Shape::new([PROBE_WG * 6]));
    unsafe {
        probe_kernel::launch_unchecked(
            &t.client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(PROBE_WG as u32),
            out.clone().into_buffer_arg(),
        );
    }
    Some((Tensor::from_primitive::<Cube>(out), min, max))
}

/// The subgroup size kernels may count on, from the probe's output `data` and the adapter's stated
/// `min..=max` (0 where it states none): the stated minimum, or the probed size where none is stated;
/// `None` unless [`check_probe`] accepts the layout and no subgroup may be wider than [`MAX_SUBGROUP`].
fn accept(data: burn::tensor::TensorData, min: u32, max: u32) -> Option<u32> {
    // Small integers, exact in f32.
    let words: Vec<u32> = data
        .try_to_vec::<f32>()
        .ok()?
        .into_iter()
        .map(|v| v as u32)
        .collect();
    match min {
        0 => check_probe(&words, 1, MAX_SUBGROUP),
        _ if max.max(min) > MAX_SUBGROUP => None,
        _ => check_probe(&words, min, max.max(min)).map(|_| min),
    }
}

/// The widest subgroup the kernels handle: their workgroups of 64 threads hold whole subgroups.
pub const MAX_SUBGROUP: u32 = 64;

/// Runs the subgroup probe on `device` (a wgpu device whose adapter has the `subgroups` feature) and
/// returns the subgroup size kernels may count on when the layout they assume holds ([`check_probe`]);
/// `None` when it does not, or the kernel did not run. Reads back asynchronously (the browser).
pub async fn probe(device: &Device) -> Option<u32> {
    let (out, min, max) = launch_probe(device)?;
    accept(out.into_data_async().await.ok()?, min, max)
}

/// [`probe`] with a blocking read (native only: the device is made under a lock).
#[cfg(not(target_family = "wasm"))]
pub fn probe_blocking(device: &Device) -> Option<u32> {
    let (out, min, max) = launch_probe(device)?;
    accept(out.into_data(), min, max)
}
