//! [`attention_append`]: one decode position's attention with its cache append, in one launch. Per
//! (sequence, query head) one workgroup of [`ATT_WG`] threads:
//!
//! 1. every thread loads its query head, RMS-normalised per head when the layer has q/k norms (Qwen3,
//!    Gemma 3), then rotated (rotate-half rope at `pos`; not for NoPE layers);
//! 2. the first query head of each key-value head writes that head's key (normalised and rotated the same
//!    way) and value into the cache at `pos` (positions before `pos` are all anyone reads from the cache in
//!    this launch);
//! 3. thread `j` takes the cached positions `start + j, start + j + ATT_WG, …` below `pos` (`start` is
//!    0, or `pos + 1 − w` for a window of `w`) with an online softmax (running max, sum and `d` weighted
//!    values in registers) of the scores `q·k · scale`, capped to `cap · tanh(s / cap)` when the layer caps
//!    them (Gemma 2); thread 0 also the new position, from the launch's own key and value;
//! 4. one barrier, then the merge of the `ATT_WG` partial states, `ATT_WG` output columns at a time
//!    through `ATT_WG²` shared floats (4 KiB, whatever `d`: a head of 256 would need 32 KiB at once, past
//!    WebGPU's default 16 KiB of workgroup storage).
//!
//! **Split over the sequence** ([`split_len`]: on GPUs, spans of 512 cached positions or more): the grid
//! is (head, split), each workgroup takes one split of [`SPLIT`] cached positions (the last one also the
//! new position; the first writes the cache) and writes its softmax state `(max, sum, d weighted values)`
//! instead of the output, and a second launch (`merge_kernel`) combines a head's splits: one workgroup
//! per head becomes `⌈span / SPLIT⌉`, for a long context's few heads.
//!
//! A layer that shares an earlier layer's cache ([`attention_shared`]) runs the same kernel without step 2,
//! reading position `pos` from the cache with the others.
//!
//! Shapes: `b` sequences, `H` / `K` query / key-value heads, `d` head dim (even), `A` positions allocated
//! in the cache `[b, K, A, d]`; `q: [b, H·d]`, `k`, `v: [b, K·d]`; rope tables `[max_pos, d / 2]`.

use burn::backend::Cube;
use burn::tensor::{Shape, Tensor};
use cubecl::prelude::*;

use super::super::caps::{Caps, Features, act_dtype, elem};
use super::{cube, cube_any, cube_as, empty_dtype, empty_like};

/// Threads per (sequence, head) of the attention kernel; also the output columns merged per round.
pub(crate) const ATT_WG: usize = 32;

/// Head dims up to this have their loops over features unrolled; wider heads (Gemma 3's 256) keep them
/// as loops, which compile several times faster on lavapipe and run no slower.
const UNROLL: usize = 64;

/// One online-softmax step of a thread's state (`m[0]` running max, `m[1]` running sum, `o` weighted
/// values) for a new score: rescales the state to the new max and returns the new position's weight,
/// which the caller adds to `m[1]` and times the position's values to `o`.
#[cube]
fn online(score: f32, m: &mut Array<f32>, o: &mut Array<f32>, #[comptime] d: usize) -> f32 {
    if score > m[0] {
        let c = (m[0] - score).exp();
        m[1] *= c;
        #[unroll(comptime![d <= UNROLL])]
        for j in 0..d {
            o[j] *= c;
        }
        m[0] = score;
    }
    let e = (score - m[0]).exp();
    m[1] += e;
    e
}

/// Feature `i` of the head at `at` of `x`, times `s · w[w0 + i]` when the layer normalises per head.
#[cube]
fn feature(x: &[f32], w: &[f32], w0: usize, at: usize, i: usize, s: f32, #[comptime] norm: bool) -> f32 {
    let mut y = x[at + i];
    if norm {
        y = y * s * w[w0 + i];
    }
    y
}

/// `1 / sqrt(mean(x²) + eps)` of the `d` features at `at` of `x` (1 without the per-head norm).
#[cube]
fn head_inv_rms(x: &[f32], at: usize, eps: f32, #[comptime] d: usize, #[comptime] norm: bool) -> f32 {
    let mut inv = 1.0f32;
    if norm {
        let mut ss = 0.0f32;
        for j in 0..d {
            let v = x[at + j];
            ss += v * v;
        }
        inv = 1.0 / (ss / f32::cast_from(d) + eps).sqrt();
    }
    inv
}

/// A table's entry at `at` (`fill` without rope: cos 1, sin 0 rotate by nothing, exactly).
#[cube]
fn table(t: &[f32], at: usize, fill: f32, #[comptime] rope: bool) -> f32 {
    let mut y = fill;
    if rope {
        y = t[at];
    }
    y
}

/// The attention logit of a dot product: scaled, then softcapped when the layer caps.
#[cube]
fn logit(dot: f32, scale: f32, cap: f32, #[comptime] softcap: bool) -> f32 {
    let mut s = dot * scale;
    if softcap {
        // cap·tanh(s/cap) without `tanh` (NaN for large arguments on SwiftShader): cap·(1 − 2/(e^(2s/cap) + 1)).
        s = cap - 2.0f32 * cap / ((2.0f32 * s / cap).exp() + 1.0f32);
    }
    s
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
#[allow(
    clippy::collapsible_if,
    reason = "comptime conditions stay apart from runtime ones"
)]
fn attend_append_kernel<C: Float, X: Float>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    rope_t: &[f32],
    qkn: &[f32],
    keys: &mut [C],
    values: &mut [C],
    out: &mut [X],
    sin_at: usize,
    heads: usize,
    kv_heads: usize,
    pos: usize,
    start: usize,
    chunk: usize,
    alloc: usize,
    scale: f32,
    cap: f32,
    eps: f32,
    #[comptime] d: usize,
    #[comptime] rope: bool,
    #[comptime] norm: bool,
    #[comptime] softcap: bool,
    #[comptime] split: bool,
    #[comptime] own: bool,
    #[define(C, X)] _types: [ElemType; 2],
) {
    let half = comptime![d / 2];
    let unroll = comptime![d <= UNROLL];
    // Workgroup (bh, sp): query head bh's cached positions `lo..hi` of split sp (all of them without a
    // split); the last split also takes the new position.
    let bh = CUBE_POS_X as usize;
    let sp = CUBE_POS_Y as usize;
    let splits = CUBE_COUNT_Y as usize;
    let lo = start + sp * chunk;
    let mut hi = lo + chunk;
    if sp + 1 == splits {
        hi = pos;
        if comptime![!own] {
            // A layer sharing another's cache finds position `pos` there too.
            hi = pos + 1;
        }
    }
    let bi = bh / heads;
    let head = bh % heads;
    let group = heads / kv_heads;
    let kh = head / group;
    let tid = UNIT_POS as usize;
    let qo = bh * d;
    let ko = (bi * kv_heads + kh) * d;
    let cb = pos * half;
    let kv0 = (bi * kv_heads + kh) * alloc * d;
    let qs = head_inv_rms(q, qo, eps, d, norm);
    let ks = head_inv_rms(k, ko, eps, d, comptime![norm && own]);
    // This head's query, normalised and rotated.
    let mut qv = Array::<f32>::new(d);
    let mut o = Array::<f32>::new(d);
    #[unroll(unroll)]
    for i in 0..half {
        let c = table(rope_t, cb + i, 1.0, rope);
        let s = table(rope_t, sin_at + cb + i, 0.0, rope);
        let x1 = feature(q, qkn, 0, qo, i, qs, norm);
        let x2 = feature(q, qkn, 0, qo, i + half, qs, norm);
        qv[i] = x1 * c - x2 * s;
        qv[i + half] = x2 * c + x1 * s;
        o[i] = 0.0;
        o[i + half] = 0.0;
    }
    // The first query head of each key-value head writes the key and the value at `pos` (in the first
    // split: no launch reads position `pos` from the cache).
    if comptime![own] {
        if head == kh * group && sp == 0 {
            let dst = kv0 + pos * d;
            let mut i = tid;
            while i < half {
                let c = table(rope_t, cb + i, 1.0, rope);
                let s = table(rope_t, sin_at + cb + i, 0.0, rope);
                let x1 = feature(k, qkn, d, ko, i, ks, norm);
                let x2 = feature(k, qkn, d, ko, i + half, ks, norm);
                keys[dst + i] = C::cast_from(x1 * c - x2 * s);
                keys[dst + i + half] = C::cast_from(x2 * c + x1 * s);
                values[dst + i] = C::cast_from(v[ko + i]);
                values[dst + i + half] = C::cast_from(v[ko + i + half]);
                i += ATT_WG;
            }
        }
    }
    // (running max, running sum); a finite "minus infinity": exp(m - score) is then 0, never NaN.
    let mut state = Array::<f32>::new(2usize);
    state[0] = f32::cast_from(tid) * 0.0 - 3.0e38;
    state[1] = 0.0;
    let mut p = lo + tid;
    while p < hi {
        let at = kv0 + p * d;
        let mut dot = 0.0f32;
        #[unroll(unroll)]
        for j in 0..d {
            dot += qv[j] * f32::cast_from(keys[at + j]);
        }
        let e = online(logit(dot, scale, cap, softcap), &mut state, &mut o, d);
        #[unroll(unroll)]
        for j in 0..d {
            o[j] += e * f32::cast_from(values[at + j]);
        }
        p += ATT_WG;
    }
    // The new position, from this launch's own key (normalised and rotated here) and value.
    if comptime![own] {
        if tid == 0 && sp + 1 == splits {
            let mut dot = 0.0f32;
            #[unroll(unroll)]
            for i in 0..half {
                let c = table(rope_t, cb + i, 1.0, rope);
                let s = table(rope_t, sin_at + cb + i, 0.0, rope);
                let x1 = feature(k, qkn, d, ko, i, ks, norm);
                let x2 = feature(k, qkn, d, ko, i + half, ks, norm);
                dot += qv[i] * (x1 * c - x2 * s) + qv[i + half] * (x2 * c + x1 * s);
            }
            let e = online(logit(dot, scale, cap, softcap), &mut state, &mut o, d);
            #[unroll(unroll)]
            for j in 0..d {
                o[j] += e * v[ko + j];
            }
        }
    }
    let mut sm = Shared::<[f32]>::new_slice(ATT_WG);
    let mut sl = Shared::<[f32]>::new_slice(ATT_WG);
    let mut so = Shared::<[f32]>::new_slice(comptime![ATT_WG * ATT_WG]);
    sm[tid] = state[0];
    sl[tid] = state[1];
    sync_cube();
    let mut top = sm[0];
    for i in 1..ATT_WG {
        if sm[i] > top {
            top = sm[i];
        }
    }
    let mut wt = Array::<f32>::new(ATT_WG);
    let mut den = 0.0f32;
    for i in 0..ATT_WG {
        wt[i] = (sm[i] - top).exp();
        den += wt[i] * sl[i];
    }
    // Columns `base..base + ATT_WG` per round: every thread posts its share, thread `j` merges column
    // `base + j`.
    #[unroll(unroll)]
    for c in 0..comptime![d.div_ceil(ATT_WG)] {
        let base = c * ATT_WG;
        #[unroll(unroll)]
        for j in 0..ATT_WG {
            if base + j < d {
                so[tid * ATT_WG + j] = o[base + j];
            }
        }
        sync_cube();
        if base + tid < d {
            let mut num = 0.0f32;
            for i in 0..ATT_WG {
                num += wt[i] * so[i * ATT_WG + tid];
            }
            if comptime![split] {
                // The split's state for `merge_kernel`: `(max, sum, d unnormalised outputs)`.
                out[(bh * splits + sp) * (d + 2) + 2 + base + tid] = X::cast_from(num);
            } else {
                out[qo + base + tid] = X::cast_from(num / den);
            }
        }
        sync_cube();
    }
    if comptime![split] && tid == 0 {
        out[(bh * splits + sp) * (d + 2)] = X::cast_from(top);
        out[(bh * splits + sp) * (d + 2) + 1] = X::cast_from(den);
    }
}

/// Merges the `splits` partial states of each query head (`part: [b·H, splits, d + 2]`, as
/// `attend_append_kernel` writes them in split mode) into its output `out: [b·H, d]`: with `M` the
/// largest max, `Σ_s o_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M)`. One workgroup of [`ATT_WG`] threads per head,
/// thread `j` on columns `j, j + ATT_WG, …`.
#[cube(launch_unchecked)]
fn merge_kernel<X: Float>(
    part: &[f32],
    out: &mut [X],
    splits: usize,
    #[comptime] d: usize,
    #[define(X)] _act: ElemType,
) {
    let bh = CUBE_POS;
    let p0 = bh * splits * (d + 2);
    let mut top = part[p0];
    for s in 1..splits {
        let m = part[p0 + s * (d + 2)];
        if m > top {
            top = m;
        }
    }
    let mut den = 0.0f32;
    for s in 0..splits {
        let at = p0 + s * (d + 2);
        den += part[at + 1] * (part[at] - top).exp();
    }
    let mut c = UNIT_POS as usize;
    while c < d {
        let mut num = 0.0f32;
        for s in 0..splits {
            let at = p0 + s * (d + 2);
            num += part[at + 2 + c] * (part[at] - top).exp();
        }
        out[bh * d + c] = X::cast_from(num / den);
        c += ATT_WG;
    }
}

/// Where [`attention_append`] writes: a layer's cache `[b, K, A, d]` (made contiguous in place if it
/// was not).
pub struct CacheSlot<'a> {
    pub keys: &'a mut Tensor<4>,
    pub values: &'a mut Tensor<4>,
}

/// How a layer attends, beyond its q, k, v and cache.
#[derive(Clone, Copy)]
pub struct Attend<'a> {
    /// The rotate-half rope table, `[2·max_pos, d / 2]`: cos of every position, then sin (one binding:
    /// WebGPU guarantees only 8 storage buffers per shader stage, and SwiftShader gives 10); `None` for a
    /// layer without positional encoding.
    pub rope: Option<&'a Tensor<2>>,
    /// Per-head RMSNorm weights of q then k (`[2d]`, applied before rope) and its epsilon.
    pub qk_norm: Option<(&'a Tensor<1>, f32)>,
    /// The factor of the scores `q · k` (`1/√d`, Gemma's `query_pre_attn_scalar^-½`).
    pub scale: f32,
    /// A sliding window: the query at `pos` sees keys `j` with `pos − j < w` only.
    pub window: Option<usize>,
    /// `cap · tanh(score / cap)` of the scaled scores before the softmax.
    pub softcap: Option<f32>,
}

impl Attend<'_> {
    /// A Llama layer's: rope from a `[2·max_pos, d / 2]` cos-then-sin table, scores scaled by `1/√d`, no
    /// norm, window or cap.
    pub fn plain(d: usize, rope: &Tensor<2>) -> Attend<'_> {
        Attend {
            rope: Some(rope),
            qk_norm: None,
            scale: 1.0 / (d as f32).sqrt(),
            window: None,
            softcap: None,
        }
    }
}

/// One decode position's attention with its cache append (see the module docs): q and k of position
/// `pos` normalised per head and rotated as `how` says, the keys and `v` written into `slot` at `pos`, and
/// each query head's softmax attention over cached positions `0..pos` (or the window's last ones) and the
/// new one, reading key-value head `head / (H / K)` in place. `q: [b, H·d]`, `k`, `v: [b, K·d]` → `[b, H·d]`.
///
/// # Panics
///
/// If the shapes disagree (the cache must be `[b, K, A, d]` with `pos < A`, `pos < max_pos`, `K`
/// dividing `H`, `d` even, norm weights `[d]`), or a window is 0.
///
/// The output is in the activation type of `caps.features` (f16 or f32); the cache keeps its own type
/// (f16 or f32, as the cache was made). Long spans on GPUs are split ([`split_len`]).
#[allow(clippy::too_many_arguments)]
pub fn attention_append(
    q: Tensor<2>,
    k: Tensor<2>,
    v: Tensor<2>,
    how: Attend<'_>,
    pos: usize,
    slot: CacheSlot<'_>,
    caps: Caps,
) -> Tensor<2> {
    launch(
        q,
        Some((k, v)),
        how,
        pos,
        slot,
        caps.features,
        chunk_at(how, pos, caps),
    )
}

/// [`split_len`] of the cached span that the query at `pos` sees under `how`'s window.
fn chunk_at(how: Attend<'_>, pos: usize, caps: Caps) -> Option<usize> {
    let start = how.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    split_len(pos - start, caps)
}

/// Cached positions per split of the attention kernel: a span of at least `2 · SPLIT` cached positions is
/// cut into splits of [`SPLIT`] on GPUs, where one workgroup per head would leave most of the machine
/// idle (a 9-head model's 9 workgroups); software adapters, whose few CPU threads the heads already
/// fill, take the span whole (`None`) up to [`SOFTWARE_SPAN`] positions.
pub fn split_len(span: usize, caps: Caps) -> Option<usize> {
    (span >= 2 * SPLIT && (!caps.software || span > SOFTWARE_SPAN)).then_some(SPLIT)
}

/// The longest span a software adapter takes whole. lavapipe (Mesa 22) silently ends a shader's loops
/// once an invocation has run 65 535 iterations of them all together (`LP_MAX_TGSI_LOOP_ITERATIONS`); a
/// thread's loops over a whole span run about `2·d` iterations for each of its `span / ATT_WG` positions
/// (heads wider than 64 keep their feature loops), so 9000 positions at `d = 128` came out wrong. Split,
/// a thread takes `SPLIT / ATT_WG` positions.
pub const SOFTWARE_SPAN: usize = 2048;

/// Cached positions per split where the attention is split ([`split_len`]): 8 per thread.
pub const SPLIT: usize = 256;

/// [`attention_append`] under `f` with the cached span cut into splits of `chunk` positions (`None`: one
/// workgroup per head takes it whole). Split, each (head, split) workgroup writes its partial softmax
/// state and a second launch merges them: two launches instead of one.
#[allow(clippy::too_many_arguments)]
pub fn attention_append_split(
    q: Tensor<2>,
    k: Tensor<2>,
    v: Tensor<2>,
    how: Attend<'_>,
    pos: usize,
    slot: CacheSlot<'_>,
    f: Features,
    chunk: Option<usize>,
) -> Tensor<2> {
    launch(q, Some((k, v)), how, pos, slot, f, chunk)
}

/// The attention of a layer that shares an earlier layer's keys and values (Gemma 4's last layers): as
/// [`attention_append`], but nothing is written, and position `pos` is read from `slot` too (the
/// layer that owns it wrote it earlier in the same step). `q: [b, H·d]` → `[b, H·d]`.
///
/// # Panics
///
/// As [`attention_append`].
pub fn attention_shared(
    q: Tensor<2>,
    how: Attend<'_>,
    pos: usize,
    slot: CacheSlot<'_>,
    caps: Caps,
) -> Tensor<2> {
    launch(q, None, how, pos, slot, caps.features, chunk_at(how, pos, caps))
}

/// [`attention_append_split`] with the position's own key and value (`kv`), or reading it from the cache
/// (`None`: [`attention_shared`]).
#[allow(clippy::too_many_arguments)]
fn launch(
    q: Tensor<2>,
    kv_new: Option<(Tensor<2>, Tensor<2>)>,
    how: Attend<'_>,
    pos: usize,
    slot: CacheSlot<'_>,
    f: Features,
    chunk: Option<usize>,
) -> Tensor<2> {
    let [b, kv, alloc, d] = slot.keys.dims();
    let [bq, hd] = q.dims();
    let heads = hd / d.max(1);
    let fits = |t: &Tensor<2>| t.dims() == [b, kv * d];
    assert!(
        bq == b
            && d % 2 == 0
            && hd == heads * d
            && heads % kv == 0
            && kv_new.as_ref().is_none_or(|(k, v)| fits(k) && fits(v))
            && slot.values.dims() == slot.keys.dims(),
        "attention_append: q {:?}, k and v {:?} do not fit the cache {:?}",
        q.dims(),
        kv_new.as_ref().map(|(k, v)| (k.dims(), v.dims())),
        slot.keys.dims()
    );
    assert!(pos < alloc, "attention_append: position {pos} beyond the cache");
    if let Some(t) = how.rope {
        let [rows, half] = t.dims();
        assert!(
            rows % 2 == 0 && pos < rows / 2 && half == d / 2,
            "attention_append: position {pos}, rope table {:?}",
            t.dims()
        );
    }
    if let Some((w, _)) = how.qk_norm {
        // A sharing layer normalises only q: k's weights may be absent.
        let fits = w.dims() == [2 * d] || (kv_new.is_none() && w.dims() == [d]);
        assert!(fits, "attention_append: q/k norms {:?}", w.dims());
    }
    assert!(how.window != Some(0), "attention_append: an empty window");
    assert!(chunk != Some(0), "attention_append: splits of no position");
    let start = how.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    // Splits of `chunk` cached positions (the last one also the new position): at least one.
    let span = pos - start;
    let (chunk, splits) = match chunk {
        Some(c) if span > c => (c, span.div_ceil(c)),
        _ => (span.max(1), 1),
    };
    let q = cube(q, "attention_append q");
    let keys = cube_any(slot.keys.clone(), "attention_append keys");
    let values = cube_as(slot.values.clone(), keys.dtype, "attention_append values");
    // Keep the (possibly copied) contiguous cache tensors: the kernel writes into them.
    *slot.keys = Tensor::from_primitive::<Cube>(keys.clone());
    *slot.values = Tensor::from_primitive::<Cube>(values.clone());
    let dtype = act_dtype(f);
    let out = empty_dtype(&q, Shape::new([b, hd]), dtype);
    // Split, the first launch writes f32 partial states (`[b·H, splits, d + 2]`) where the output would be.
    let part = match splits {
        1 => None,
        _ => Some(empty_like(&q, Shape::new([b * heads * splits * (d + 2)]))),
    };
    let first = part.as_ref().unwrap_or(&out);
    let types = [elem(keys.dtype), elem(first.dtype)];
    // Absent tables and norms bind a one-element placeholder the kernel never reads.
    let none = || empty_like(&q, Shape::new([1]));
    let (rope_t, sin_at) = match how.rope {
        Some(t) => (cube(t.clone(), "rope table"), t.dims()[0] / 2 * t.dims()[1]),
        None => (none(), 0),
    };
    let (qkn, eps) = match how.qk_norm {
        Some((w, eps)) => (cube(w.clone(), "q/k norms"), eps),
        None => (none(), 0.0),
    };
    let own = kv_new.is_some();
    let (k, v) = match kv_new {
        Some((k, v)) => (cube(k, "attention_append k"), cube(v, "attention_append v")),
        None => (none(), none()),
    };
    if b > 0 {
        unsafe {
            attend_append_kernel::launch_unchecked(
                &q.client,
                CubeCount::Static((b * heads) as u32, splits as u32, 1),
                CubeDim::new_1d(ATT_WG as u32),
                q.clone().into_buffer_arg(),
                k.into_buffer_arg(),
                v.into_buffer_arg(),
                rope_t.into_buffer_arg(),
                qkn.into_buffer_arg(),
                keys.into_buffer_arg(),
                values.into_buffer_arg(),
                first.clone().into_buffer_arg(),
                sin_at,
                heads,
                kv,
                pos,
                start,
                chunk,
                alloc,
                how.scale,
                how.softcap.unwrap_or(1.0),
                eps,
                d,
                how.rope.is_some(),
                how.qk_norm.is_some(),
                how.softcap.is_some(),
                part.is_some(),
                own,
                types,
            );
            if let Some(part) = &part {
                merge_kernel::launch_unchecked(
                    &q.client,
                    CubeCount::Static((b * heads) as u32, 1, 1),
                    CubeDim::new_1d(ATT_WG as u32),
                    part.clone().into_buffer_arg(),
                    out.clone().into_buffer_arg(),
                    splits,
                    d,
                    elem(dtype),
                );
            }
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
