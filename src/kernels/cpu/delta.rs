//! The gated delta rule on the CPU (Qwen3.5's Gated DeltaNet), in its recurrent form for every position:
//! per sequence and value head, a matrix `S` (`dk × dv`) that each position decays, corrects and reads.
//!
//! For position `t` of value head `j` (key head `j / (Hv / Hk)`, or `j % Hk` in llama.cpp's tiled order), with `q̂ = q / ‖q‖ / √dk` and `k̂ = k /
//! ‖k‖` (‖·‖ with 1e-6 inside the root, as transformers' `l2norm`):
//!
//! ```text
//! S ← S · exp(g_t)
//! δ = (v_t − Sᵀ k̂) · β_t
//! S ← S + k̂ δᵀ
//! o_t = Sᵀ q̂
//! ```
//!
//! This is transformers' `torch_recurrent_gated_delta_rule` step for step (its chunked form for prefill
//! computes the same in another order). A position costs `3 · dk · dv` multiply-adds per head, a small
//! part of the layer's projections: the recurrence over positions stays sequential, and heads are split
//! across the threaded build's team (each head's arithmetic is the same on any thread, so the result does
//! not depend on the thread count).
//!
//! Layouts (row-major f32): `q`, `k` `[b, s, Hk, dk]`; `v` `[b, s, Hv, dv]`; `g`, `beta` `[b, s, Hv]`;
//! `state` `[b, Hv, dk, dv]`; the output `[b, s, Hv, dv]`.

use super::split::Disjoint;

/// The sizes of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub b: usize,
    pub s: usize,
    pub key_heads: usize,
    pub value_heads: usize,
    pub dk: usize,
    pub dv: usize,
    /// Value heads in llama.cpp's tiled order (value head `j` reads key head `j % Hk`) rather than
    /// Hugging Face's grouped order (`j / (Hv / Hk)`).
    pub tiled: bool,
}

/// The epsilon inside the l2 norms of q and k.
pub const L2_EPS: f32 = 1e-6;

/// Runs `s` positions of every sequence and value head from `state` (updated in place) and returns the
/// outputs `[b, s, Hv, dv]`.
///
/// # Panics
/// When a slice's length does not match `d`, or `Hk` does not divide `Hv`.
pub fn gated_delta(
    d: Dims,
    (q, k, v): (&[f32], &[f32], &[f32]),
    (g, beta): (&[f32], &[f32]),
    state: &mut [f32],
) -> Vec<f32> {
    gated_delta_on(super::rows::threads(), d, (q, k, v), (g, beta), state)
}

/// [`gated_delta`] on `threads` threads, whatever the build (the tests compare thread counts bit for bit).
pub fn gated_delta_on(
    threads: usize,
    d: Dims,
    (q, k, v): (&[f32], &[f32], &[f32]),
    (g, beta): (&[f32], &[f32]),
    state: &mut [f32],
) -> Vec<f32> {
    let Dims {
        b,
        s,
        key_heads: hk,
        value_heads: hv,
        dk,
        dv,
        tiled,
    } = d;
    assert!(
        hk > 0 && hv.is_multiple_of(hk),
        "{hk} key heads do not divide {hv} value heads"
    );
    assert_eq!(q.len(), b * s * hk * dk);
    assert_eq!(k.len(), q.len());
    assert_eq!(v.len(), b * s * hv * dv);
    assert_eq!(g.len(), b * s * hv);
    assert_eq!(beta.len(), g.len());
    assert_eq!(state.len(), b * hv * dk * dv);
    let mut out = vec![0.0f32; b * s * hv * dv];
    let (dst, states) = (Disjoint(out.as_mut_ptr()), Disjoint(state.as_mut_ptr()));
    let group = hv / hk;
    let head = |p: usize| {
        let (row, j) = (p / hv, p % hv);
        let kh = if tiled { j % hk } else { j / group };
        // SAFETY: head p of row `row` owns state[p·dk·dv ..][..dk·dv] and, at every position t, the output
        // out[((row·s + t)·hv + j)·dv ..][..dv]: disjoint across heads; each p runs once, and `out` and
        // `state` outlive the call.
        let st = unsafe { std::slice::from_raw_parts_mut(states.at(p * dk * dv), dk * dv) };
        let (mut qn, mut kn, mut mem) = (vec![0.0f32; dk], vec![0.0f32; dk], vec![0.0f32; dv]);
        for t in 0..s {
            let at = (row * s + t) * hk + kh;
            unit(&q[at * dk..(at + 1) * dk], 1.0 / (dk as f32).sqrt(), &mut qn);
            unit(&k[at * dk..(at + 1) * dk], 1.0, &mut kn);
            let at = (row * s + t) * hv + j;
            let (decay, bt) = (g[at].exp(), beta[at]);
            let vt = &v[at * dv..(at + 1) * dv];
            mem.fill(0.0);
            for (srow, &ki) in st.chunks_exact_mut(dv).zip(&kn) {
                for (m, s) in mem.iter_mut().zip(srow.iter_mut()) {
                    *s *= decay;
                    *m += *s * ki;
                }
            }
            for (m, &vj) in mem.iter_mut().zip(vt) {
                *m = (vj - *m) * bt;
            }
            // SAFETY: position t's output of this head, owned by p (see above).
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(at * dv), dv) };
            for ((srow, &ki), &qi) in st.chunks_exact_mut(dv).zip(&kn).zip(&qn) {
                for ((s, &dj), o) in srow.iter_mut().zip(mem.iter()).zip(o.iter_mut()) {
                    *s += ki * dj;
                    *o += *s * qi;
                }
            }
        }
    };
    let heads = b * hv;
    match threads > 1 && heads > 1 && s * dk * dv >= super::rows::PIECE {
        true => super::team::run(heads, threads - 1, &head),
        false => (0..heads).for_each(head),
    }
    out
}

/// `out = x / √(Σx² + eps) · scale`.
fn unit(x: &[f32], scale: f32, out: &mut [f32]) {
    let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f32>() + L2_EPS).sqrt() * scale;
    for (o, &a) in out.iter_mut().zip(x) {
        *o = a * inv;
    }
}
