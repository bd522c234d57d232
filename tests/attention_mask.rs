//! The CPU backend's attention (`kiln::kernels::cpu::attention`) under every mask kiln expresses
//! (`kiln::kernels::mask`: causal, sliding window, bidirectional spans; with a cached prefix, GQA and a
//! logit softcap) against a host reference in f64 that builds its mask from the rule itself, key by key.
//! Tolerance: 1e-5 absolute on outputs of magnitude ≤ 1 (f32 scores and sums over at most 200 keys).

use std::ops::Range;

use kiln::kernels::cpu::attention::{Dims, Heads, attention};
use kiln::kernels::mask::Mask;

fn wave(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7 + seed * 13) % 97) as f32 / 48.5 - 1.0) * 0.9)
        .collect()
}

/// Whether query position `q` sees key `j`: the rule of the mask module's docs, written out.
fn sees(q: usize, j: usize, window: Option<usize>, spans: &[Range<usize>]) -> bool {
    let span = spans.iter().any(|sp| sp.contains(&q) && sp.contains(&j));
    (j <= q || span) && window.is_none_or(|w| j > q || q - j < w)
}

/// `[b, s, H, d]` row-major, in f64, from contiguous `q: [b, H, s, d]`, `k`, `v: [b, K, t, d]`.
#[allow(clippy::too_many_arguments, reason = "the operands and the mask's parts")]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    window: Option<usize>,
    spans: &[Range<usize>],
) -> Vec<f64> {
    let Dims {
        b,
        heads,
        kv_heads,
        s,
        t,
        d,
        scale,
        softcap,
    } = dims;
    let pos = t - s;
    let mut out = vec![0.0f64; b * s * heads * d];
    for i in 0..b {
        for h in 0..heads {
            let kv = h / (heads / kv_heads);
            for r in 0..s {
                let qrow = &q[((i * heads + h) * s + r) * d..][..d];
                let keys: Vec<usize> = (0..t).filter(|&j| sees(pos + r, j, window, spans)).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let krow = &k[((i * kv_heads + kv) * t + j) * d..][..d];
                        let x: f64 = qrow
                            .iter()
                            .zip(krow)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        let x = x * f64::from(scale);
                        softcap.map_or(x, |c| f64::from(c) * (x / f64::from(c)).tanh())
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                let o = &mut out[((i * s + r) * heads + h) * d..][..d];
                for (&j, w) in keys.iter().zip(&e) {
                    let vrow = &v[((i * kv_heads + kv) * t + j) * d..][..d];
                    for (o, &x) in o.iter_mut().zip(vrow) {
                        *o += w / sum * f64::from(x);
                    }
                }
            }
        }
    }
    out
}

fn contiguous(data: &[f32], n: usize, rows: usize, d: usize) -> Heads<'_> {
    Heads {
        data,
        offset: 0,
        batch: n * rows * d,
        head: rows * d,
        row: d,
    }
}

#[test]
#[allow(clippy::single_range_in_vec_init, reason = "lists of spans, some of one")]
fn cpu_attention_matches_the_host_reference_under_every_mask() {
    // (cached positions, new positions, spans)
    let cases: [(usize, usize, Vec<Range<usize>>); 6] = [
        (0, 12, vec![]),
        (0, 12, vec![3..9]),
        (5, 7, vec![6..10]),
        (0, 70, vec![2..3, 10..60, 64..70]),
        (20, 130, vec![20..84, 100..150]),
        (40, 1, vec![]),
    ];
    for (pos, s, spans) in cases {
        for window in [None, Some(1), Some(4), Some(50)] {
            for softcap in [None, Some(2.0)] {
                let (b, heads, kv_heads, d) = (2, 4, 2, 8);
                let t = pos + s;
                let q = wave(b * heads * s * d, 1);
                let k = wave(b * kv_heads * t * d, 2);
                let v = wave(b * kv_heads * t * d, 3);
                let dims = Dims {
                    b,
                    heads,
                    kv_heads,
                    s,
                    t,
                    d,
                    scale: 0.35,
                    softcap,
                };
                let mask = Mask {
                    pos,
                    s,
                    window,
                    spans: &spans,
                };
                Mask::check(pos, s, &spans).expect("valid spans");
                let got = attention(
                    contiguous(&q, heads, s, d),
                    contiguous(&k, kv_heads, t, d),
                    contiguous(&v, kv_heads, t, d),
                    dims,
                    mask,
                );
                let want = reference(&q, &k, &v, dims, window, &spans);
                let diff = got
                    .iter()
                    .zip(&want)
                    .map(|(&g, &w)| (f64::from(g) - w).abs())
                    .fold(0.0, f64::max);
                assert!(
                    diff <= 1e-5,
                    "pos {pos} s {s} spans {spans:?} window {window:?} softcap {softcap:?}: off by {diff:e}"
                );
            }
        }
    }
}
