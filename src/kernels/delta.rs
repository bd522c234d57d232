//! The gated delta rule (Qwen3.5's Gated DeltaNet) on any device: the CPU backend runs its recurrent form
//! ([`super::cpu::delta`]), wgpu and WebGPU the same form in one launch of kiln's own (`gpu::delta`);
//! burn's ops ([`gated_delta_ops`]: one step for a decode position, the chunked form for a prefill) are
//! the path for anything else, and what the kernels are checked against besides the plain recurrence.
//!
//! The chunked form (transformers' `torch_chunk_gated_delta_rule`, after the DeltaNet paper's UT
//! transform) takes [`CHUNK`] positions at once: within a chunk the corrections the positions make to each
//! other are one triangular solve, the chunk reads the state once and writes it once. [`CHUNK`] is 16: a
//! chunk's `[16, 128]` tile of keys or values is 8 KiB, two of them fill WebGPU's 16 KiB of workgroup
//! memory, the size a kernel of its own would take; the solve is 16 steps of forward substitution.
//!
//! Shapes: `b` sequences, `s` positions, `Hk` / `Hv` key / value heads (`Hk` divides `Hv`; value head `j`
//! reads key head `j / (Hv / Hk)`, or `j % Hk` where the heads are tiled as llama.cpp stores them), `dk` / `dv` head dims. `q`, `k` `[b, s, Hk, dk]` (not yet
//! normalised), `v` `[b, s, Hv, dv]`, `g` (log decay) and `beta` `[b, s, Hv]`, the state `[b, Hv, dk,
//! dv]`, the output `[b, s, Hv, dv]`.

use burn::backend::flex::FlexTensor;
use burn::backend::{DispatchDevice, Flex};
use burn::tensor::{Tensor, TensorData};

use super::cpu::delta::{Dims, L2_EPS, gated_delta as cpu_gated_delta};
use super::with_flex_values;

/// Positions per chunk of the chunked form.
pub const CHUNK: usize = 16;

/// Runs the gated delta rule over `s` positions from `state`: the outputs and the next state.
pub fn gated_delta(
    (q, k, v): (Tensor<4>, Tensor<4>, Tensor<4>),
    (g, beta): (Tensor<3>, Tensor<3>),
    state: Tensor<4>,
    tiled: bool,
) -> (Tensor<4>, Tensor<4>) {
    let [b, s, hk, dk] = q.dims();
    let [_, _, hv, dv] = v.dims();
    if matches!(q.device().as_dispatch(), DispatchDevice::Flex(_)) {
        let d = Dims {
            b,
            s,
            key_heads: hk,
            value_heads: hv,
            dk,
            dv,
            tiled,
        };
        let mut next = with_flex_values(state, <[f32]>::to_vec);
        let out = with_flex_values(q, |q| {
            with_flex_values(k, |k| {
                with_flex_values(v, |v| {
                    with_flex_values(g, |g| {
                        with_flex_values(beta, |beta| cpu_gated_delta(d, (q, k, v), (g, beta), &mut next))
                    })
                })
            })
        });
        let flex = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(values, shape)))
        };
        return (flex(out, [b, s, hv, dv]), flex(next, [b, hv, dk, dv]));
    }
    #[cfg(feature = "webgpu")]
    if matches!(q.device().as_dispatch(), DispatchDevice::Cube(_))
        && dk <= super::gpu::delta::MAX_DIM
        && dv <= super::gpu::delta::MAX_DIM
    {
        return super::gpu::delta::gated_delta((q, k, v), (g, beta), state, tiled);
    }
    gated_delta_ops((q, k, v), (g, beta), state, tiled)
}

/// [`gated_delta`] in burn's ops on any device (what devices other than the CPU backend run; the tests
/// run it on the CPU backend too).
pub fn gated_delta_ops(
    (q, k, v): (Tensor<4>, Tensor<4>, Tensor<4>),
    (g, beta): (Tensor<3>, Tensor<3>),
    state: Tensor<4>,
    tiled: bool,
) -> (Tensor<4>, Tensor<4>) {
    let s = q.dims()[1];
    let (q, k, v, g, beta) = prepared(q, k, v, g, beta, tiled);
    let (out, next) = match s {
        1 => step(q, k, v, g, beta, state),
        _ => chunked(q, k, v, g, beta, state),
    };
    (out.swap_dims(1, 2), next)
}

/// The inputs as both forms take them: q and k l2-normalised (q also scaled by `1/√dk`) and repeated to
/// the value heads (grouped or `tiled`), everything heads-first: q, k `[b, Hv, s, dk]`, v `[b, Hv, s, dv]`, g and beta `[b, Hv,
/// s]`.
fn prepared(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    g: Tensor<3>,
    beta: Tensor<3>,
    tiled: bool,
) -> (Tensor<4>, Tensor<4>, Tensor<4>, Tensor<3>, Tensor<3>) {
    let [b, s, hk, dk] = q.dims();
    let [_, _, hv, _] = v.dims();
    let unit = |x: Tensor<4>, scale: f64| {
        let inv = (x.clone() * x.clone())
            .sum_dim(3)
            .add_scalar(L2_EPS)
            .sqrt()
            .recip();
        x * inv.mul_scalar(scale)
    };
    let heads = |x: Tensor<4>| {
        let x = match tiled {
            true => x.unsqueeze_dim::<5>(2).expand([b, s, hv / hk, hk, dk]),
            false => x.unsqueeze_dim::<5>(3).expand([b, s, hk, hv / hk, dk]),
        };
        x.reshape([b, s, hv, dk]).swap_dims(1, 2)
    };
    let q = heads(unit(q, 1.0 / (dk as f64).sqrt()));
    let k = heads(unit(k, 1.0));
    (q, k, v.swap_dims(1, 2), g.swap_dims(1, 2), beta.swap_dims(1, 2))
}

/// One position (`s` = 1) in the recurrent form: outputs `[b, Hv, 1, dv]` and the next state.
fn step(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    g: Tensor<3>,
    beta: Tensor<3>,
    state: Tensor<4>,
) -> (Tensor<4>, Tensor<4>) {
    let state = state * g.exp().unsqueeze_dim::<4>(3); // [b, Hv, 1, 1] broadcast
    let remembered = k.clone().matmul(state.clone()); // [b, Hv, 1, dv]
    let delta = (v - remembered) * beta.unsqueeze_dim::<4>(3);
    let state = state + k.swap_dims(2, 3).matmul(delta);
    (q.matmul(state.clone()), state)
}

/// Every position in chunks of [`CHUNK`] (the last one padded with positions that neither decay nor
/// write the state): outputs `[b, Hv, s, dv]` and the next state.
fn chunked(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    g: Tensor<3>,
    beta: Tensor<3>,
    mut state: Tensor<4>,
) -> (Tensor<4>, Tensor<4>) {
    let [b, h, s, dk] = q.dims();
    let dv = v.dims()[3];
    let c = CHUNK;
    let n = s.div_ceil(c);
    let pad4 = |x: Tensor<4>| {
        let [b, h, _, d] = x.dims();
        match n * c - s {
            0 => x,
            p => Tensor::cat(vec![x.clone(), Tensor::zeros([b, h, p, d], &x.device())], 2),
        }
    };
    let pad3 = |x: Tensor<3>| pad4(x.unsqueeze_dim::<4>(3)).reshape([b, h, n, c]);
    let chunks = |x: Tensor<4>| {
        let d = x.dims()[3];
        pad4(x).reshape([b, h, n, c, d])
    };
    let (g, beta) = (pad3(g), pad3(beta)); // [b, H, n, c]
    let (q, k, v) = (chunks(q), chunks(k), chunks(v)); // [b, H, n, c, d]
    let beta5 = beta.unsqueeze_dim::<5>(4);
    let (k_beta, v_beta) = (k.clone() * beta5.clone(), v * beta5);
    let cum = g.cumsum(3); // [b, H, n, c]: log decay from the chunk's start to each position
    // decay[i, j] = exp(cum_i − cum_j) for j ≤ i, else 0.
    let diff = cum.clone().unsqueeze_dim::<5>(4) - cum.clone().unsqueeze_dim::<5>(3);
    let lower = Tensor::<2>::ones([c, c], &diff.device()).tril(0).unsqueeze::<5>();
    let decay = diff.tril(0).exp() * lower;
    let kt = k.clone().swap_dims(3, 4);
    let strictly = (k_beta.clone().matmul(kt.clone()) * decay.clone()).tril(-1);
    let inverse = unit_lower_inverse(strictly); // (I + L)⁻¹, [b, H, n, c, c]
    let cum_exp = cum.clone().exp().unsqueeze_dim::<5>(4);
    let new_values = inverse.clone().matmul(v_beta);
    let k_cumdecay = inverse.matmul(k_beta * cum_exp.clone());
    let intra = q.clone().matmul(kt) * decay;
    let q = q * cum_exp;
    let last = cum.clone().narrow(3, c - 1, 1); // [b, H, n, 1]
    let k = k * (last.clone() - cum).exp().unsqueeze_dim::<5>(4);
    let chunk_decay = last.exp(); // [b, H, n, 1]
    let pick = |x: &Tensor<5>, i: usize, d: usize| x.clone().narrow(2, i, 1).reshape([b, h, c, d]);
    let mut outs = Vec::with_capacity(n);
    for i in 0..n {
        let v_new = pick(&new_values, i, dv) - pick(&k_cumdecay, i, dk).matmul(state.clone());
        let read = pick(&q, i, dk).matmul(state.clone());
        outs.push(read + pick(&intra, i, c).matmul(v_new.clone()));
        let fade = chunk_decay.clone().narrow(2, i, 1).reshape([b, h, 1, 1]);
        state = state * fade + pick(&k, i, dk).swap_dims(2, 3).matmul(v_new);
    }
    (Tensor::cat(outs, 2).narrow(2, 0, s), state)
}

/// `(I + L)⁻¹` of strictly lower triangular `L` (`[.., c, c]`) by forward substitution: row `i` of the
/// inverse `T` is `e_i − L[i, :i] · T[:i]`.
fn unit_lower_inverse(l: Tensor<5>) -> Tensor<5> {
    let [b, h, n, c, _] = l.dims();
    let device = l.device();
    let eye = |i: usize| {
        let mut row = vec![0.0f32; c];
        row[i] = 1.0;
        Tensor::<1>::from_data(TensorData::new(row, [c]), &device).reshape([1, 1, 1, 1, c])
    };
    let mut t = Tensor::<5>::zeros([b, h, n, c, c], &device);
    for i in 0..c {
        let row = eye(i) - l.clone().narrow(3, i, 1).matmul(t.clone()); // [b, H, n, 1, c]
        t = t.slice_assign([0..b, 0..h, 0..n, i..i + 1, 0..c], row);
    }
    t
}
