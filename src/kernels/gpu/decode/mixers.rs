//! The fused decode step's kernels for the layers that are not plain attention (`model::step`): LFM2's
//! short-convolution block, Qwen3.5's Gated DeltaNet around its delta rule (`gpu::delta::delta_step`),
//! and Qwen3.5's gated attention around [`super::attention_append`].
//!
//! - [`conv_step`]: one position of a depthwise causal convolution from the layer's state, the new state
//!   written beside the output. LFM2 ([`ConvIn::Gated`]): `in_proj`'s `[B | C | x]` row in, the
//!   convolution over `B·x`, `C·conv` out. Qwen3.5 ([`ConvIn::Silu`]): the q/k/v row in, `silu(conv)` out.
//! - [`gated_rms_norm`]: the DeltaNet's output norm, per value head `rmsnorm(o)·w · silu(z)`.
//! - [`prepare_qk`]: per head RMSNorm and a rope over the first `rotary_dim` features of each head (the
//!   rest pass through), q read from a projection that interleaves each head's queries with its output
//!   gate; what `attention_append` then takes without its own norm and rope.
//! - [`gate_heads`]: attention's output times `sigmoid(gate)`, the gate read from that interleaved
//!   projection.
//!
//! Shapes: `b` sequences, `h` hidden size, `C` channels, `w` taps, `H` / `K` query / key-value heads,
//! `d` head dim, `r` rotary dims (even, at most `d`). Sums in f32; the outputs that feed a matrix
//! product are in the activation type (f16 where the device has it).

use burn::backend::Cube;
use burn::tensor::{DType, Shape, Tensor};
use cubecl::prelude::*;

use super::super::caps::{Features, act_dtype, elem};
use super::{ROW_WG, cube, cube_any, empty_dtype, empty_like, inv_rms, plane_rows};

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn conv_step_kernel<X: Float>(
    x: &[f32],
    state: &[f32],
    w: &[f32],
    bias: &[f32],
    out: &mut [X],
    next: &mut [f32],
    cin: usize,
    ch: usize,
    taps: usize,
    #[comptime] gated: bool,
    #[comptime] silu: bool,
    #[comptime] has_bias: bool,
    #[define(X)] _act: ElemType,
) {
    let c = CUBE_POS_X as usize * ROW_WG + UNIT_POS as usize;
    let row = CUBE_POS_Y as usize;
    if c < ch {
        let xi = row * cin;
        let mut input = x[xi + c];
        if comptime![gated] {
            input *= x[xi + 2 * ch + c];
        }
        // Filters `[C, w]`: tap `w − 1` on the new position; the state holds the `w − 1` before it.
        let s0 = row * (taps - 1) * ch;
        let mut y = 0.0f32;
        for j in 0..taps - 1 {
            let held = state[s0 + j * ch + c];
            y += w[c * taps + j] * held;
            if j > 0 {
                next[s0 + (j - 1) * ch + c] = held;
            }
        }
        y += w[c * taps + taps - 1] * input;
        next[s0 + (taps - 2) * ch + c] = input;
        if comptime![has_bias] {
            y += bias[c];
        }
        if comptime![silu] {
            y = y / (1.0f32 + f32::exp(-y));
        }
        if comptime![gated] {
            y *= x[xi + ch + c];
        }
        out[row * ch + c] = X::cast_from(y);
    }
}

/// What [`conv_step`] convolves and returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvIn {
    /// LFM2: the input row is `[B | C | x]` (`3C`); the convolution runs over `B·x` and returns `C·conv`.
    Gated,
    /// Qwen3.5's DeltaNet: the input row is the `C` channels; returns `silu(conv)`.
    Silu,
}

/// One position of a depthwise causal convolution for each of `b` sequences: `x: [b, C]` (`[b, 3C]` for
/// [`ConvIn::Gated`]) after `state: [b, w − 1, C]`, filters `weight: [C, w]` and `bias: [C]` → the output
/// `[b, C]` as `out` (f32, or f16 for a matrix product) and the next state (the last `w − 1` inputs), in
/// one launch. As `model::layers::conv::causal_conv` of one position, the taps summed in the same order.
///
/// # Panics
///
/// If the shapes disagree, the filters have fewer than 2 taps, or the tensors are not on a wgpu device.
pub fn conv_step(
    x: Tensor<2>,
    state: Tensor<3>,
    (weight, bias): (&Tensor<2>, Option<&Tensor<1>>),
    how: ConvIn,
    out: DType,
) -> (Tensor<2>, Tensor<3>) {
    let [b, cin] = x.dims();
    let [ch, taps] = weight.dims();
    let wide = match how {
        ConvIn::Gated => 3 * ch,
        ConvIn::Silu => ch,
    };
    assert!(
        taps >= 2
            && cin == wide
            && state.dims() == [b, taps - 1, ch]
            && bias.is_none_or(|t| t.dims() == [ch]),
        "conv_step: x {:?}, state {:?}, filters {:?} ({how:?})",
        x.dims(),
        state.dims(),
        weight.dims()
    );
    let x = cube(x, "conv_step x");
    let y = empty_dtype(&x, Shape::new([b, ch]), out);
    let next = empty_like(&x, Shape::new([b, taps - 1, ch]));
    let bias_t = match bias {
        Some(t) => cube(t.clone(), "conv_step bias"),
        // A one-element placeholder the kernel never reads.
        None => empty_like(&x, Shape::new([1])),
    };
    if b > 0 {
        unsafe {
            conv_step_kernel::launch_unchecked(
                &x.client,
                CubeCount::Static(ch.div_ceil(ROW_WG) as u32, b as u32, 1),
                CubeDim::new_1d(ROW_WG as u32),
                x.clone().into_buffer_arg(),
                cube(state, "conv_step state").into_buffer_arg(),
                cube(weight.clone(), "conv_step filters").into_buffer_arg(),
                bias_t.into_buffer_arg(),
                y.clone().into_buffer_arg(),
                next.clone().into_buffer_arg(),
                cin,
                ch,
                taps,
                how == ConvIn::Gated,
                how == ConvIn::Silu,
                bias.is_some(),
                elem(out),
            );
        }
    }
    (
        Tensor::from_primitive::<Cube>(y),
        Tensor::from_primitive::<Cube>(next),
    )
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn gated_rms_norm_kernel<X: Float>(
    o: &[f32],
    z: &[f32],
    w: &[f32],
    out: &mut [X],
    dv: usize,
    eps: f32,
    #[comptime] plane: bool,
    #[define(X)] _act: ElemType,
) {
    let base = CUBE_POS * dv;
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < dv {
        let v = o[base + e];
        ss += v * v;
        e += ROW_WG;
    }
    let inv = inv_rms(ss, dv, eps, plane);
    let mut e = UNIT_POS as usize;
    while e < dv {
        let g = z[base + e];
        out[base + e] = X::cast_from(o[base + e] * inv * w[e] * (g / (1.0f32 + f32::exp(-g))));
        e += ROW_WG;
    }
}

/// Per head of `dv` features: `rmsnorm(o)·w · silu(z)`, `o`, `z: [b, Hv·dv]`, `w: [dv]` → `[b, Hv·dv]`
/// (f16 where `f` has it), one workgroup per (sequence, head).
///
/// # Panics
///
/// If the shapes disagree or the tensors are not on a wgpu device.
pub fn gated_rms_norm(o: Tensor<2>, z: Tensor<2>, w: &Tensor<1>, eps: f32, f: Features) -> Tensor<2> {
    let [b, n] = o.dims();
    let [dv] = w.dims();
    assert!(
        dv > 0 && n.is_multiple_of(dv) && z.dims() == [b, n],
        "gated_rms_norm: o {:?}, z {:?}, w {:?}",
        o.dims(),
        z.dims(),
        w.dims()
    );
    let o = cube(o, "gated_rms_norm o");
    let dtype = act_dtype(f);
    let out = empty_dtype(&o, Shape::new([b, n]), dtype);
    if b * n > 0 {
        unsafe {
            gated_rms_norm_kernel::launch_unchecked(
                &o.client,
                CubeCount::Static((b * n / dv) as u32, 1, 1),
                CubeDim::new_1d(ROW_WG as u32),
                o.clone().into_buffer_arg(),
                cube(z, "gated_rms_norm z").into_buffer_arg(),
                cube(w.clone(), "gated_rms_norm weight").into_buffer_arg(),
                out.clone().into_buffer_arg(),
                dv,
                eps,
                plane_rows(f),
                elem(dtype),
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}

/// Element `at` of `q` for a query head, else of `k`.
#[cube]
#[allow(unused_assignments, reason = "the zero is the WGSL variable's declaration")]
fn q_or_k(q: &[f32], k: &[f32], is_q: bool, at: usize) -> f32 {
    let mut v = 0.0f32;
    if is_q {
        v = q[at];
    } else {
        v = k[at];
    }
    v
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
#[allow(
    clippy::collapsible_if,
    reason = "a comptime condition stays apart from a runtime one"
)]
fn prepare_qk_kernel(
    q: &[f32],
    k: &[f32],
    norms: &[f32],
    table: &[f32],
    q_out: &mut [f32],
    k_out: &mut [f32],
    heads: usize,
    kv_heads: usize,
    q_stride: usize,
    d: usize,
    rh: usize,
    cos_at: usize,
    sin_at: usize,
    eps: f32,
    #[comptime] norm: bool,
    #[comptime] rope: bool,
    #[comptime] plane: bool,
) {
    let hh = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let is_q = hh < heads;
    let src = select(
        is_q,
        (row * heads + hh) * q_stride,
        (row * kv_heads + hh - heads) * d,
    );
    let dst = select(is_q, (row * heads + hh) * d, (row * kv_heads + hh - heads) * d);
    let w0 = select(is_q, 0usize, d);
    let mut ss = 0.0f32;
    let mut e = UNIT_POS as usize;
    while e < d {
        let v = q_or_k(q, k, is_q, src + e);
        ss += v * v;
        e += ROW_WG;
    }
    let mut inv = inv_rms(ss, d, eps, plane);
    if !comptime![norm] {
        inv = 1.0f32;
    }
    let mut e = UNIT_POS as usize;
    while e < d {
        // Feature `e` and its rope partner, normalised.
        let mut scale = inv;
        let mut scale_p = inv;
        let p = select(e < rh, e + rh, select(e < 2 * rh, e - rh, e));
        if comptime![norm] {
            scale *= norms[w0 + e];
            scale_p *= norms[w0 + p];
        }
        let x = q_or_k(q, k, is_q, src + e) * scale;
        let mut y = x;
        if comptime![rope] {
            if e < 2 * rh {
                let xp = q_or_k(q, k, is_q, src + p) * scale_p;
                let i = select(e < rh, e, e - rh);
                let c = table[cos_at + i];
                let s = table[sin_at + i];
                // Rotate-half over the first `r` features: (x₁, x₂) → (x₁c − x₂s, x₂c + x₁s).
                y = select(e < rh, x * c - xp * s, x * c + xp * s);
            }
        }
        if is_q {
            q_out[dst + e] = y;
        } else {
            k_out[dst + e] = y;
        }
        e += ROW_WG;
    }
}

/// How [`prepare_qk`] treats the heads.
#[derive(Clone, Copy)]
pub struct QkPrep<'a> {
    /// Per-head RMSNorm weights of q then k, `[2d]`, and its epsilon.
    pub norms: Option<(&'a Tensor<1>, f32)>,
    /// The rope table `[2·max_pos, r / 2]` (cos of every position, then sin) and the position.
    pub rope: Option<(&'a Tensor<2>, usize)>,
    /// Whether q's projection interleaves each head's `d` queries with its `d` output gates
    /// (`[b, H·2d]`, Qwen3.5's gated attention).
    pub gated: bool,
}

/// q and k of one decode position as attention takes them: per head normalised (`norms`) and rotated
/// over their first `r` features (`rope`; rotate-half), the rest as they are. `q: [b, H·d]` (or `[b,
/// H·2d]`, `gated`), `k: [b, K·d]` → `([b, H·d], [b, K·d])`, f32, one workgroup per (sequence, head).
///
/// # Panics
///
/// If the shapes disagree, or the tensors are not on a wgpu device.
pub fn prepare_qk(
    q: Tensor<2>,
    k: Tensor<2>,
    d: usize,
    how: QkPrep<'_>,
    f: Features,
) -> (Tensor<2>, Tensor<2>) {
    let [b, qn] = q.dims();
    let [_, kn] = k.dims();
    let q_stride = if how.gated { 2 * d } else { d };
    let (heads, kv) = (qn / q_stride, kn / d);
    assert!(
        d > 0 && heads * q_stride == qn && kv * d == kn && k.dims()[0] == b,
        "prepare_qk: q {:?}, k {:?}, head dim {d}",
        q.dims(),
        k.dims()
    );
    let q = cube(q, "prepare_qk q");
    let none = || empty_like(&q, Shape::new([1]));
    let (norms, eps) = match how.norms {
        Some((w, eps)) => {
            assert_eq!(w.dims(), [2 * d], "prepare_qk: q/k norms");
            (cube(w.clone(), "prepare_qk norms"), eps)
        }
        None => (none(), 0.0),
    };
    let (table, rh, cos_at, sin_at) = match how.rope {
        Some((t, pos)) => {
            let [rows, rh] = t.dims();
            assert!(
                rows % 2 == 0 && pos < rows / 2 && rh > 0 && 2 * rh <= d,
                "prepare_qk: position {pos}, rope table {:?}, head dim {d}",
                t.dims()
            );
            (
                cube(t.clone(), "prepare_qk rope"),
                rh,
                pos * rh,
                (rows / 2 + pos) * rh,
            )
        }
        None => (none(), 0, 0, 0),
    };
    let q_out = empty_like(&q, Shape::new([b, heads * d]));
    let k_out = empty_like(&q, Shape::new([b, kv * d]));
    if b > 0 {
        unsafe {
            prepare_qk_kernel::launch_unchecked(
                &q.client,
                CubeCount::Static((heads + kv) as u32, b as u32, 1),
                CubeDim::new_1d(ROW_WG as u32),
                q.clone().into_buffer_arg(),
                cube(k, "prepare_qk k").into_buffer_arg(),
                norms.into_buffer_arg(),
                table.into_buffer_arg(),
                q_out.clone().into_buffer_arg(),
                k_out.clone().into_buffer_arg(),
                heads,
                kv,
                q_stride,
                d,
                rh,
                cos_at,
                sin_at,
                eps,
                how.norms.is_some(),
                how.rope.is_some(),
                plane_rows(f),
            );
        }
    }
    (
        Tensor::from_primitive::<Cube>(q_out),
        Tensor::from_primitive::<Cube>(k_out),
    )
}

#[cube(launch_unchecked)]
fn gate_heads_kernel<X: Float>(
    attn: &[X],
    q: &[f32],
    out: &mut [X],
    len: usize,
    d: usize,
    #[define(X)] _act: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        // Element `i` of head `i / d`: its gate is `d` past the head's queries in the `2d`-wide row.
        let g = q[(i / d) * 2 * d + d + i % d];
        out[i] = X::cast_from(f32::cast_from(attn[i]) / (1.0f32 + f32::exp(-g)));
    }
}

/// Attention's output `attn: [b, H·d]` times `sigmoid(gate)`, the gates read from the projection that
/// interleaves each head's queries and gates (`q: [b, H·2d]`), in `attn`'s type.
///
/// # Panics
///
/// If the shapes disagree or the tensors are not on a wgpu device.
pub fn gate_heads(attn: Tensor<2>, q: Tensor<2>, d: usize) -> Tensor<2> {
    let [b, n] = attn.dims();
    assert!(
        d > 0 && n.is_multiple_of(d) && q.dims() == [b, 2 * n],
        "gate_heads: attention {:?}, q {:?}, head dim {d}",
        attn.dims(),
        q.dims()
    );
    let attn = cube_any(attn, "gate_heads attention");
    let dtype = attn.dtype;
    let out = empty_dtype(&attn, Shape::new([b, n]), dtype);
    let len = b * n;
    if len > 0 {
        let dim = CubeDim::new_1d(ROW_WG as u32);
        let count = cubecl::calculate_cube_count_elemwise(&attn.client, len, dim);
        unsafe {
            gate_heads_kernel::launch_unchecked(
                &attn.client,
                count,
                dim,
                attn.clone().into_buffer_arg(),
                cube(q, "gate_heads q").into_buffer_arg(),
                out.clone().into_buffer_arg(),
                len,
                d,
                elem(dtype),
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
