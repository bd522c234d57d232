//! The gated delta rule on wgpu / WebGPU in one launch (Qwen3.5's Gated DeltaNet): the recurrent form of
//! `kernels::cpu::delta`, position after position, a workgroup per (sequence, value head) and a thread
//! per column of the head's state `S` (`dv` threads), which the thread keeps in registers (`dk` floats)
//! from the first position to the last. A position's normalised key and query are staged in workgroup
//! memory (2 · `dk` floats: 1 KiB at 128), so no thread waits on another's sum: each reads the whole key
//! and query and computes their norms itself.
//!
//! A prefill of `s` positions is one launch of `s` steps ([`gated_delta`]) instead of the chunked form's
//! ops per chunk (`kernels::delta`). The fused decode step (`model::step`) takes [`delta_step`]: the same
//! recurrence for one position, reading q, k and v from the convolution's packed output and computing the
//! decay and `beta` from the raw projections itself, so that a DeltaNet's rule is one launch.
//!
//! Shapes as `kernels::delta`: `q`, `k` `[b, s, Hk, dk]`, `v` `[b, s, Hv, dv]`, `g`, `beta` `[b, s, Hv]`,
//! the state `[b, Hv, dk, dv]`; the output `[b, s, Hv, dv]`.

use burn::backend::Cube;
use burn::tensor::{Shape, Tensor};
use cubecl::prelude::*;

use super::decode::{cube, empty_like};

/// The largest `dk` (registers per thread) and `dv` (threads per workgroup) the kernel takes.
pub const MAX_DIM: usize = 256;

/// The recurrence of one (sequence, value head) over `s` positions (see the module docs), shared by the
/// two kernels. `gates`: with `raw`, `g` and `beta` hold the projections `a` and `b` (`[b, s, Hv]`) and
/// the log decay is `gates[j] · softplus(a + gates[Hv + j])`, `beta = sigmoid(b)` (`gates`: `−exp(A_log)`
/// then `dt_bias`); without, `g` and `beta` are the log decay and `beta` themselves.
///
/// Where q, k and v are read: position `p = row · s + t` of
/// query/key head `kh` at `p · qk_stride + q0 + kh · dk` (keys from `k0`), of value head `j` at
/// `p · v_stride + v0 + j · dv`. Separate tensors: strides `Hk·dk` and `Hv·dv`, offsets 0; the packed
/// `[b, C]` row of the convolution's output (q, then k, then v): strides `C`, offsets 0, `Hk·dk`,
/// `2·Hk·dk`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn delta_run(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    gates: &[f32],
    state: &[f32],
    out: &mut [f32],
    next: &mut [f32],
    qk_stride: usize,
    v_stride: usize,
    q0: usize,
    k0: usize,
    v0: usize,
    s: usize,
    hk: usize,
    hv: usize,
    tiled: u32,
    #[comptime] raw: bool,
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
        let p = row * s + t;
        let qsrc = p * qk_stride + q0 + kh * dk;
        let ksrc = p * qk_stride + k0 + kh * dk;
        #[unroll]
        for r in 0..comptime![dk.div_ceil(dv)] {
            let i = r * dv + c;
            if i < dk {
                ks[i] = k[ksrc + i];
                qs[i] = q[qsrc + i];
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
        let gi = p * hv + j;
        let mut lg = g[gi];
        let mut bt = beta[gi];
        if comptime![raw] {
            // softplus(x) = max(x, 0) + ln(1 + e^−|x|), as the generic path computes it.
            let x = lg + gates[hv + j];
            lg = gates[j] * (f32::max(x, 0.0) + f32::ln(1.0f32 + f32::exp(-f32::abs(x))));
            bt = 1.0f32 / (1.0f32 + f32::exp(-bt));
        }
        let decay = f32::exp(lg);
        let mut mem = 0.0f32;
        #[unroll]
        for i in 0..dk {
            col[i] *= decay;
            mem += col[i] * (ks[i] * ik);
        }
        let delta = (v[p * v_stride + v0 + j * dv + c] - mem) * bt;
        let mut o = 0.0f32;
        #[unroll]
        for i in 0..dk {
            col[i] += (ks[i] * ik) * delta;
            o += col[i] * (qs[i] * iq);
        }
        out[gi * dv + c] = o;
    }
    #[unroll]
    for i in 0..dk {
        next[base + i * dv + c] = col[i];
    }
}

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
    let (qk_stride, v_stride) = (hk * dk, hv * dv);
    delta_run(
        q, k, v, g, beta, g, state, out, next, qk_stride, v_stride, 0, 0, 0, s, hk, hv, tiled, false, dk, dv,
    );
}

/// One decode position from the packed convolution output `qkv: [b, C]` and the raw gate projections
/// `a`, `b_raw: [b, Hv]` (see [`delta_run`]): seven bindings, within WebGPU's eight.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn delta_step_kernel(
    qkv: &[f32],
    a: &[f32],
    b_raw: &[f32],
    gates: &[f32],
    state: &[f32],
    out: &mut [f32],
    next: &mut [f32],
    hk: usize,
    hv: usize,
    tiled: u32,
    #[comptime] dk: usize,
    #[comptime] dv: usize,
) {
    let c = 2 * hk * dk + hv * dv;
    delta_run(
        qkv,
        qkv,
        qkv,
        a,
        b_raw,
        gates,
        state,
        out,
        next,
        c,
        c,
        0,
        hk * dk,
        2 * hk * dk,
        1usize,
        hk,
        hv,
        tiled,
        true,
        dk,
        dv,
    );
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

/// Qwen3.5's Gated DeltaNet heads: `Hk` key heads of `dk`, `Hv` value heads of `dv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
}

impl Heads {
    /// The convolved channels: q and k (`Hk·dk` each), then v (`Hv·dv`).
    pub fn channels(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }
}

/// One decode position of the gated delta rule for each of `b` sequences, from the convolution's packed
/// output `qkv: [b, C]` (q, k, v; not yet normalised) and the raw gate projections `a`, `b_raw: [b, Hv]`,
/// with `gates: [2·Hv]` (`−exp(A_log)` then `dt_bias`): the outputs `[b, Hv·dv]` and the next state
/// `[b, Hv, dk, dv]`, in one launch (the decay and `beta` computed in it).
///
/// # Panics
///
/// If the shapes disagree with `heads`, `dk` or `dv` exceeds [`MAX_DIM`], `Hk` does not divide `Hv`, or
/// the tensors are not on a wgpu device.
pub fn delta_step(
    qkv: Tensor<2>,
    (a, b_raw): (Tensor<2>, Tensor<2>),
    gates: &Tensor<1>,
    state: Tensor<4>,
    heads: Heads,
    tiled: bool,
) -> (Tensor<2>, Tensor<4>) {
    let Heads { hk, hv, dk, dv } = heads;
    let [b, c] = qkv.dims();
    assert!(
        dk <= MAX_DIM
            && dv <= MAX_DIM
            && hk > 0
            && hv.is_multiple_of(hk)
            && c == heads.channels()
            && a.dims() == [b, hv]
            && b_raw.dims() == [b, hv]
            && gates.dims() == [2 * hv]
            && state.dims() == [b, hv, dk, dv],
        "delta_step: qkv {:?}, a {:?}, b {:?}, gates {:?}, state {:?} for {heads:?}",
        qkv.dims(),
        a.dims(),
        b_raw.dims(),
        gates.dims(),
        state.dims()
    );
    let qkv = cube(qkv, "delta_step qkv");
    let out = empty_like(&qkv, Shape::new([b, hv * dv]));
    let next = empty_like(&qkv, Shape::new([b, hv, dk, dv]));
    if b > 0 {
        unsafe {
            delta_step_kernel::launch_unchecked(
                &qkv.client,
                CubeCount::Static(hv as u32, b as u32, 1),
                CubeDim::new_1d(dv as u32),
                qkv.clone().into_buffer_arg(),
                cube(a, "delta_step a").into_buffer_arg(),
                cube(b_raw, "delta_step b").into_buffer_arg(),
                cube(gates.clone(), "delta_step gates").into_buffer_arg(),
                cube(state, "delta_step state").into_buffer_arg(),
                out.clone().into_buffer_arg(),
                next.clone().into_buffer_arg(),
                hk,
                hv,
                u32::from(tiled),
                dk,
                dv,
            );
        }
    }
    (
        Tensor::from_primitive::<Cube>(out),
        Tensor::from_primitive::<Cube>(next),
    )
}
