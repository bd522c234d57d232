//! The gated delta rule on wgpu / WebGPU in one launch (Qwen3.5's Gated DeltaNet): the recurrent form of
//! `kernels::cpu::delta`, position after position, a workgroup per (sequence, value head) and a thread
//! per column of the head's state `S` (`dv` threads), which the thread keeps in registers (`dk` floats)
//! from the first position to the last. A position's normalised key and query are staged in workgroup
//! memory (2 · `dk` floats: 1 KiB at 128), so no thread waits on another's sum: each reads the whole key
//! and query and computes their norms itself.
//!
//! A decode step is one launch per layer instead of burn's dozen; a prefill of `s` positions is one
//! launch of `s` steps instead of the chunked form's ops per chunk (`kernels::delta`).
//!
//! Shapes as `kernels::delta`: `q`, `k` `[b, s, Hk, dk]`, `v` `[b, s, Hv, dv]`, `g`, `beta` `[b, s, Hv]`,
//! the state `[b, Hv, dk, dv]`; the output `[b, s, Hv, dv]`.

use burn::backend::Cube;
use burn::tensor::{Shape, Tensor};
use cubecl::prelude::*;

use super::decode::{cube, empty_like};

/// The largest `dk` (registers per thread) and `dv` (threads per workgroup) the kernel takes.
pub const MAX_DIM: usize = 256;

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn delta_kernel(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    out: &mut [f32],
    next: &mut [f32],
    s: usize,
    hk: usize,
    hv: usize,
    tiled: u32,
    #[comptime] dk: usize,
    #[comptime] dv: usize,
) {
    let c = UNIT_POS as usize;
    let j = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let kh = select(tiled == 1, j % hk, j / (hv / hk));
    let base = (row * hv + j) * dk * dv;
    let mut col = Array::<f32>::new(dk);
    #[unroll]
    for i in 0..dk {
        col[i] = state[base + i * dv + c];
    }
    let mut ks = Shared::<[f32]>::new_slice(dk);
    let mut qs = Shared::<[f32]>::new_slice(dk);
    let qscale = 1.0f32 / f32::sqrt(f32::cast_from(dk));
    for t in 0..s {
        sync_cube();
        let src = ((row * s + t) * hk + kh) * dk;
        #[unroll]
        for r in 0..comptime![dk.div_ceil(dv)] {
            let i = r * dv + c;
            if i < dk {
                ks[i] = k[src + i];
                qs[i] = q[src + i];
            }
        }
        sync_cube();
        let mut nk = 0.0f32;
        let mut nq = 0.0f32;
        #[unroll]
        for i in 0..dk {
            nk += ks[i] * ks[i];
            nq += qs[i] * qs[i];
        }
        let ik = 1.0f32 / f32::sqrt(nk + 1.0e-6);
        let iq = qscale / f32::sqrt(nq + 1.0e-6);
        let at = (row * s + t) * hv + j;
        let decay = f32::exp(g[at]);
        let mut mem = 0.0f32;
        #[unroll]
        for i in 0..dk {
            col[i] *= decay;
            mem += col[i] * (ks[i] * ik);
        }
        let delta = (v[at * dv + c] - mem) * beta[at];
        let mut o = 0.0f32;
        #[unroll]
        for i in 0..dk {
            col[i] += (ks[i] * ik) * delta;
            o += col[i] * (qs[i] * iq);
        }
        out[at * dv + c] = o;
    }
    #[unroll]
    for i in 0..dk {
        next[base + i * dv + c] = col[i];
    }
}

/// The gated delta rule over `s` positions from `state` on a wgpu device: the outputs and the next
/// state (see the module docs). `tiled`: value head `j` reads key head `j % Hk`, else `j / (Hv / Hk)`.
///
/// # Panics
///
/// If `dk` or `dv` exceeds [`MAX_DIM`], `Hk` does not divide `Hv`, or the tensors are not on a wgpu
/// device.
pub fn gated_delta(
    (q, k, v): (Tensor<4>, Tensor<4>, Tensor<4>),
    (g, beta): (Tensor<3>, Tensor<3>),
    state: Tensor<4>,
    tiled: bool,
) -> (Tensor<4>, Tensor<4>) {
    let [b, s, hk, dk] = q.dims();
    let [_, _, hv, dv] = v.dims();
    assert!(
        dk <= MAX_DIM && dv <= MAX_DIM && hk > 0 && hv.is_multiple_of(hk),
        "gated_delta: dk {dk}, dv {dv}, {hk} key heads, {hv} value heads"
    );
    let (q, k, v) = (
        cube(q, "gated_delta q"),
        cube(k, "gated_delta k"),
        cube(v, "gated_delta v"),
    );
    let (g, beta) = (cube(g, "gated_delta g"), cube(beta, "gated_delta beta"));
    let state = cube(state, "gated_delta state");
    let out = empty_like(&q, Shape::new([b, s, hv, dv]));
    let next = empty_like(&q, Shape::new([b, hv, dk, dv]));
    unsafe {
        delta_kernel::launch_unchecked(
            &q.client,
            CubeCount::Static(hv as u32, b as u32, 1),
            CubeDim::new_1d(dv as u32),
            q.clone().into_buffer_arg(),
            k.into_buffer_arg(),
            v.into_buffer_arg(),
            g.into_buffer_arg(),
            beta.into_buffer_arg(),
            state.into_buffer_arg(),
            out.clone().into_buffer_arg(),
            next.clone().into_buffer_arg(),
            s,
            hk,
            hv,
            u32::from(tiled),
            dk,
            dv,
        );
    }
    (
        Tensor::from_primitive::<Cube>(out),
        Tensor::from_primitive::<Cube>(next),
    )
}
