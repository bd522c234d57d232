//! [`encoder_attention`]: the non-causal multi-head attention of a vision encoder (SigLIP, CLIP towers),
//! `softmax(q·kᵀ·scale)·v` per (sequence, head), every query seeing every key, as flash attention: an
//! online softmax over tiles of keys, so no `[n, n]` score matrix is ever written (Gemma 3's tower, 4096
//! patches × 16 heads, would need 1 GiB of f32 scores, past what a WebGPU buffer may hold). f32
//! throughout.
//!
//! Shapes: `q`, `k`, `v` and the output `[b, H, n, d]`, `1 ≤ d ≤` [`MAX_HEAD_DIM`] (need not be a power
//! of two: SigLIP so400m's heads are 72 wide; CLIP's and SmolVLM's 64; 80, 96, 128 elsewhere), any
//! `n ≥ 1`.
//!
//! **Tiling.** A tile of `t = min(32, 2048 / d)` keys (32 for `d = 64`, 28 for 72, 16 for 128) and their
//! values is staged in workgroup memory, `2 · t · d` floats: at most 16 KiB, WebGPU's default workgroup
//! storage. Each thread owns one query: its scaled `q` and its running output `o` in registers, its
//! running max `m` and sum `l` of `e^(score − m)`; keys update them as flash attention does,
//! `o ← o·e^(m − m′) + e^(s − m′)·v` with `m′` the new max. The first max is a finite "minus infinity"
//! (`−3·10³⁸`), so `e^(m − m′)` is 0, never NaN. Features go `w` at a time (`w` = 4, 2 or 1, the widest
//! dividing `d`): vector loads from workgroup memory and vector FMAs, whose lanes meet in each score's
//! final sum. Keys past `n` in the last tile are staged as copies of key `n − 1` and weigh nothing.
//!
//! Two launch layouts ([`AttentionLayout`], chosen by [`Caps::software`]), the same arithmetic:
//!
//! - [`AttentionLayout::Looped`] (GPUs): one launch; a workgroup of [`LOOP_WG`] queries loops over all
//!   the tiles, each key's score updating the state at once (the output rescaled only when the max
//!   grows).
//! - [`AttentionLayout::Blocks`] (software adapters: lavapipe, SwiftShader): one launch per tile of keys
//!   (`⌈n / t⌉` of them: 147 for Gemma 3's tower), each loop-free (every loop unrolled), the state kept
//!   between launches in the output (normalised so far) and a `[b·H·n, 2]` buffer of `(m, l)`; [`BLOCK_WG`]
//!   queries a workgroup. CPU implementations run a workgroup's invocations as SIMD lanes, and lavapipe
//!   (Mesa 22) loads one lane at a time inside any loop or branch (and wherever the lanes' addresses
//!   differ), but an address uniform across the lanes outside control flow once for all of them: here
//!   every staged key and value is read that way. Measured on lavapipe (two shared cores; SmolVLM's tower, `[1, 12, 1024, 64]`): 0.09 s a call,
//!   against 0.65 s looped and 0.35 s for burn's matmul, softmax, matmul; a looped prototype with 8–16
//!   queries a thread was about 1.5× slower than the blocks.
//!
//! **Loop limit.** lavapipe (Mesa 22) ends a shader's loops early, silently, once an invocation has run
//! 65 535 iterations of them all together (`LP_MAX_TGSI_LOOP_ITERATIONS`): a first prototype, looping
//! over keys and, inside, over features, returned wrong rows past 480 keys. The block layout has no
//! loops; the looped one runs `n + ⌈n / t⌉` iterations (its feature loops are unrolled), within the limit
//! up to `n ≈ 60 000`.

use burn::backend::Cube;
use burn::tensor::{Shape, Tensor};
use cubecl::prelude::*;

use super::Caps;
use super::decode::{cube, empty_like};

/// The widest head [`encoder_attention`] takes: its query and output live in a thread's registers.
pub const MAX_HEAD_DIM: usize = 128;

/// Floats of keys (and as many of values) staged per tile: 2 × 8 KiB of workgroup memory.
const TILE_FLOATS: usize = 2048;

/// The most keys per tile.
const MAX_TILE_KEYS: usize = 32;

/// Queries (threads) per workgroup of the looped layout.
pub const LOOP_WG: usize = 64;

/// Queries (threads) per workgroup of the block layout.
pub const BLOCK_WG: usize = 128;

/// The running max before any key: finite, so `exp(NEG − m)` is 0 rather than NaN.
const NEG: f32 = -3.0e38;

/// How [`encoder_attention_with`] launches (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionLayout {
    /// One launch looping over the key tiles: GPUs.
    Looped,
    /// One loop-free launch per key tile: software adapters.
    Blocks,
}

impl AttentionLayout {
    /// The layout for a device of `caps`: [`AttentionLayout::Blocks`] on software adapters, else
    /// [`AttentionLayout::Looped`].
    pub fn of(caps: Caps) -> AttentionLayout {
        match caps.software {
            true => AttentionLayout::Blocks,
            false => AttentionLayout::Looped,
        }
    }
}

/// Keys per tile for head dim `d`: as many as [`TILE_FLOATS`] holds, at most [`MAX_TILE_KEYS`].
fn tile_keys(d: usize) -> usize {
    (TILE_FLOATS / d).clamp(1, MAX_TILE_KEYS)
}

/// Stages keys `k0 .. k0 + t` of the head at `base` (`dv` vectors a key) into `ks` and `vs`, key `n − 1`
/// in place of those past `n`. Consecutive threads take consecutive vectors.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage<W: Size>(
    k: &[Vector<f32, W>],
    v: &[Vector<f32, W>],
    ks: &mut [Vector<f32, W>],
    vs: &mut [Vector<f32, W>],
    base: usize,
    k0: usize,
    n: usize,
    #[comptime] dv: usize,
    #[comptime] t: usize,
    #[comptime] wg: usize,
) {
    let tid = UNIT_POS as usize;
    #[unroll]
    for r in 0..comptime![(t * dv).div_ceil(wg)] {
        let idx = r * wg + tid;
        if idx < comptime![t * dv] {
            let key = k0 + idx / dv;
            let at = base + select(key < n, key, n - 1) * dv + idx % dv;
            ks[idx] = k[at];
            vs[idx] = v[at];
        }
    }
}

/// `q · k` for the query in `qv` and the staged key at `at` of `ks` (`dv` vectors).
#[cube]
fn dot<W: Size>(qv: &Array<Vector<f32, W>>, ks: &[Vector<f32, W>], at: usize, #[comptime] dv: usize) -> f32 {
    let mut acc = Vector::<f32, W>::new(0.0);
    #[unroll]
    for c in 0..dv {
        acc += qv[c] * ks[at + c];
    }
    let mut s = 0.0f32;
    #[unroll]
    for e in 0..acc.vector_size() {
        s += acc.extract(e);
    }
    s
}

/// The looped layout: thread `tid` of workgroup `(x, bh)` takes query `x · LOOP_WG + tid` of head `bh`
/// through every tile of keys.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn looped_kernel<W: Size>(
    q: &[Vector<f32, W>],
    k: &[Vector<f32, W>],
    v: &[Vector<f32, W>],
    out: &mut [Vector<f32, W>],
    n: usize,
    scale: f32,
    #[comptime] dv: usize,
    #[comptime] t: usize,
) {
    let tid = UNIT_POS as usize;
    let bh = CUBE_POS_Y as usize;
    let row = CUBE_POS_X as usize * LOOP_WG + tid;
    let base = bh * n * dv;
    // Threads past the last query compute query n − 1's attention too (every thread stages and meets
    // the barriers) and write nothing.
    let qa = base + select(row < n, row, n - 1) * dv;
    let sc = Vector::<f32, W>::new(scale);
    let mut qv = Array::<Vector<f32, W>>::new(dv);
    let mut o = Array::<Vector<f32, W>>::new(dv);
    #[unroll]
    for c in 0..dv {
        qv[c] = q[qa + c] * sc;
        o[c] = Vector::new(0.0);
    }
    let mut ks = Shared::<[Vector<f32, W>]>::new_slice(comptime![t * dv]);
    let mut vs = Shared::<[Vector<f32, W>]>::new_slice(comptime![t * dv]);
    let mut m = f32::new(NEG);
    let mut l = 0.0f32;
    let mut k0 = 0usize;
    while k0 < n {
        stage(k, v, &mut ks, &mut vs, base, k0, n, dv, t, LOOP_WG);
        sync_cube();
        let mut valid = n - k0;
        if valid > t {
            valid = t;
        }
        for j in 0..valid {
            let s = dot(&qv, &ks, j * dv, dv);
            if s > m {
                // A new max: rescale the state to it.
                let c = (m - s).exp();
                l *= c;
                let cv = Vector::<f32, W>::new(c);
                #[unroll]
                for i in 0..dv {
                    o[i] *= cv;
                }
                m = s;
            }
            let e = (s - m).exp();
            l += e;
            let p = Vector::<f32, W>::new(e);
            #[unroll]
            for i in 0..dv {
                o[i] += p * vs[j * dv + i];
            }
        }
        sync_cube();
        k0 += t;
    }
    if row < n {
        let inv = Vector::<f32, W>::new(1.0f32 / l);
        #[unroll]
        for c in 0..dv {
            out[qa + c] = o[c] * inv;
        }
    }
}

/// The block layout: thread `tid` of workgroup `(x, bh)` takes query `x · BLOCK_WG + tid` of head `bh`
/// through keys `k0 .. k0 + t`, from and back to its state in `out` (normalised output) and `ml` (max,
/// sum), which the launch with `k0 = 0` does not read. No loops: every address the scores and the
/// weighted sum read is uniform and outside control flow.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn block_kernel<W: Size>(
    q: &[Vector<f32, W>],
    k: &[Vector<f32, W>],
    v: &[Vector<f32, W>],
    out: &mut [Vector<f32, W>],
    ml: &mut [f32],
    n: usize,
    k0: usize,
    scale: f32,
    #[comptime] dv: usize,
    #[comptime] t: usize,
) {
    let tid = UNIT_POS as usize;
    let bh = CUBE_POS_Y as usize;
    let row = CUBE_POS_X as usize * BLOCK_WG + tid;
    let base = bh * n * dv;
    let mut ks = Shared::<[Vector<f32, W>]>::new_slice(comptime![t * dv]);
    let mut vs = Shared::<[Vector<f32, W>]>::new_slice(comptime![t * dv]);
    stage(k, v, &mut ks, &mut vs, base, k0, n, dv, t, BLOCK_WG);
    sync_cube();
    // Threads past the last query compute query n − 1's update and write nothing.
    let rc = select(row < n, row, n - 1);
    let qa = base + rc * dv;
    let sa = (bh * n + rc) * 2;
    let first = k0 == 0;
    let m0 = select(first, NEG, ml[sa]);
    let l0 = select(first, 0.0f32, ml[sa + 1]);
    let sc = Vector::<f32, W>::new(scale);
    let mut qv = Array::<Vector<f32, W>>::new(dv);
    #[unroll]
    for c in 0..dv {
        qv[c] = q[qa + c] * sc;
    }
    let mut s = Array::<f32>::new(t);
    let mut m = m0;
    #[unroll]
    for j in 0..t {
        let x = select(k0 + j < n, dot(&qv, &ks, j * dv, dv), NEG);
        s[j] = x;
        m = m.max(x);
    }
    // The state so far, unnormalised and rescaled to the new max: out · l0 · e^(m0 − m).
    let keep = l0 * (m0 - m).exp();
    let mut l = keep;
    #[unroll]
    for j in 0..t {
        let e = (s[j] - m).exp();
        s[j] = e;
        l += e;
    }
    let kv = Vector::<f32, W>::new(keep);
    let zero = Vector::<f32, W>::new(0.0);
    let mut o = Array::<Vector<f32, W>>::new(dv);
    #[unroll]
    for c in 0..dv {
        o[c] = select(first, zero, out[qa + c]) * kv;
    }
    #[unroll]
    for j in 0..t {
        let p = Vector::<f32, W>::new(s[j]);
        #[unroll]
        for c in 0..dv {
            o[c] += p * vs[j * dv + c];
        }
    }
    if row < n {
        let inv = Vector::<f32, W>::new(1.0f32 / l);
        #[unroll]
        for c in 0..dv {
            out[qa + c] = o[c] * inv;
        }
        ml[sa] = m;
        ml[sa + 1] = l;
    }
}

/// Non-causal attention `softmax(q · kᵀ · scale) · v` of each (sequence, head): `q`, `k`, `v`: `[b, H, n, d]`
/// (any strides: made contiguous f32 first, copied only if they are not) → `[b, H, n, d]` f32,
/// contiguous. In the layout for the device's [`Caps`] ([`AttentionLayout::of`]; see the module docs).
///
/// # Panics
///
/// If `q`, `k`, `v` differ in shape, `d` is 0 or above [`MAX_HEAD_DIM`], `b · H · n · d` reaches 2³¹
/// (kernel offsets are 32-bit), `b · H` exceeds 65 535 (workgroups a grid dimension may have), or the
/// tensors are not on a wgpu device.
pub fn encoder_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, scale: f32) -> Tensor<4> {
    let layout = AttentionLayout::of(Caps::of(&q.device()));
    encoder_attention_with(q, k, v, scale, layout)
}

/// [`encoder_attention`] in the given layout (tests and benchmarks run both on one device).
///
/// # Panics
///
/// As [`encoder_attention`].
pub fn encoder_attention_with(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    scale: f32,
    layout: AttentionLayout,
) -> Tensor<4> {
    let [b, heads, n, d] = q.dims();
    assert!(
        k.dims() == q.dims() && v.dims() == q.dims(),
        "encoder_attention: q {:?}, k {:?}, v {:?} differ",
        q.dims(),
        k.dims(),
        v.dims()
    );
    assert!(
        (1..=MAX_HEAD_DIM).contains(&d),
        "encoder_attention: head dim {d} outside 1..={MAX_HEAD_DIM}"
    );
    assert!(
        (b * heads * n).checked_mul(d).is_some_and(|e| e < 1 << 31) && b * heads <= 65_535,
        "encoder_attention: {:?} past 32-bit offsets or the grid's 65 535 workgroups",
        q.dims()
    );
    let q = cube(q, "encoder_attention q");
    let k = cube(k, "encoder_attention k");
    let v = cube(v, "encoder_attention v");
    let out = empty_like(&q, Shape::new([b, heads, n, d]));
    if b * heads * n == 0 {
        return Tensor::from_primitive::<Cube>(out);
    }
    // Features `w` at a time: the widest vector dividing `d`.
    let w = [4, 2, 1].into_iter().find(|w| d % w == 0).unwrap_or(1);
    let dv = d / w;
    let t = tile_keys(d);
    match layout {
        AttentionLayout::Looped => unsafe {
            looped_kernel::launch_unchecked(
                &q.client,
                CubeCount::Static(n.div_ceil(LOOP_WG) as u32, (b * heads) as u32, 1),
                CubeDim::new_1d(LOOP_WG as u32),
                w,
                q.clone().into_buffer_arg(),
                k.into_buffer_arg(),
                v.into_buffer_arg(),
                out.clone().into_buffer_arg(),
                n,
                scale,
                dv,
                t,
            );
        },
        AttentionLayout::Blocks => {
            let ml = empty_like(&q, Shape::new([b * heads * n, 2]));
            for k0 in (0..n).step_by(t) {
                unsafe {
                    block_kernel::launch_unchecked(
                        &q.client,
                        CubeCount::Static(n.div_ceil(BLOCK_WG) as u32, (b * heads) as u32, 1),
                        CubeDim::new_1d(BLOCK_WG as u32),
                        w,
                        q.clone().into_buffer_arg(),
                        k.clone().into_buffer_arg(),
                        v.clone().into_buffer_arg(),
                        out.clone().into_buffer_arg(),
                        ml.clone().into_buffer_arg(),
                        n,
                        k0,
                        scale,
                        dv,
                        t,
                    );
                }
            }
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
