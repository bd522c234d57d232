//! The fused decode-step kernels (`kernels::gpu::decode`) against plain host references (f64), on odd
//! shapes: rows and widths that are not multiples of the workgroup (64 threads; 32 for attention), more
//! cached positions than attention threads and fewer (and none), grouped-query heads, a cache with more
//! room than positions; the cache append checked over the whole cache (only position `pos` changes).
//! Attention also with per-head q/k norms, score scales other than `1/√d`, sliding windows shorter and
//! longer than the cache, logit softcaps, no rope, and heads of 80 and 256 (several merge rounds).
//!
//! Every case runs with the plain f32 kernels and with the device's optional paths (`caps.rs`: on lavapipe
//! f16 activations and KV cache, and subgroup sums), each against the same host reference.
//!
//! Tolerance: `|y − y_ref| ≤ 1e-5 · (1 + |y_ref|)` for RMSNorm, rope and the gated activations (a few f32
//! roundings per output; the sandwich norm's second norm `2e-5`, two norms deep); attention
//! `≤ 3e-5 · (1 + |y_ref|)` (an f32 softmax and weighted sum of ≤ 70 terms, the scores below 10 in
//! magnitude here). An output written in f16 adds its rounding, `2⁻¹¹ · |y_ref|`; an f16 cache holds the
//! f16 roundings of the test's values, which the reference then reads too.

use burn::tensor::{DType, Tensor, TensorData};
use half::f16;
use kiln::kernels::caps::Caps;
use kiln::kernels::gpu::caps::Features;
use kiln::kernels::gpu::decode::{self as fused, Attend, CacheSlot, Gate};

use super::{Rng, device, feature_sets};

fn vec(rng: &mut Rng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * scale).collect()
}

fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    let data = pollster::block_on(t.cast(DType::F32).into_data_async()).expect("read back");
    data.try_to_vec::<f32>().expect("f32 data")
}

/// The relative rounding of an output written under `f`: f16's half ulp, or nothing for f32.
fn rounding(f: Features) -> f64 {
    if f.f16 { 2f64.powi(-11) } else { 0.0 }
}

fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    close_rel(got, want, tol, 0.0, what);
}

/// [`close`] plus a relative error `rel · |y_ref|` (an f16 output's rounding).
fn close_rel(got: &[f32], want: &[f64], tol: f64, rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * (1.0 + w.abs()) + rel * w.abs(),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// `v` as f16 would hold it.
fn round16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
}

fn host_norm(x: &[f64], w: &[f32], h: usize, eps: f64) -> Vec<f64> {
    x.chunks(h)
        .flat_map(|row| {
            let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / h as f64 + eps).sqrt();
            row.iter().zip(w).map(move |(v, &w)| v * inv * f64::from(w))
        })
        .collect()
}

#[test]
fn rms_norm_and_add_rms_norm_match_the_host() {
    for f in feature_sets() {
        check_rms_norms(f);
    }
}

fn check_rms_norms(f: Features) {
    let device = device();
    let mut rng = Rng(0xD3C0_0001);
    let rel = rounding(f);
    for (r, h) in [(1, 576), (3, 70), (9, 64), (2, 1)] {
        let x = vec(&mut rng, r * h, 3.0);
        let delta = vec(&mut rng, r * h, 1.0);
        let w = vec(&mut rng, h, 2.0);
        let t = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let wt = Tensor::<1>::from_data(TensorData::new(w.clone(), [h]), &device);
        let xd: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let got = read(fused::rms_norm(t(&x, [r, h]), &wt, 1e-5, f));
        close_rel(
            &got,
            &host_norm(&xd, &w, h, 1e-5),
            1e-5,
            rel,
            &format!("rms_norm {f:?}"),
        );
        let sum: Vec<f64> = x.iter().zip(&delta).map(|(&a, &b)| f64::from(a + b)).collect();
        let (s, n) = fused::add_rms_norm(t(&x, [r, h]), t(&delta, [r, h]), None, &wt, 1e-6, f);
        close(&read(s), &sum, 0.0, "add_rms_norm sum");
        let want = host_norm(&sum, &w, h, 1e-6);
        close_rel(&read(n), &want, 1e-5, rel, &format!("add_rms_norm {f:?}"));
    }
}

/// Rotate-half rope of each `d`-wide head of `x` at `pos`, in f64.
fn rot(x: &[f32], d: usize, pos: usize, cos: &[f32], sin: &[f32]) -> Vec<f64> {
    let half = d / 2;
    x.chunks(d)
        .flat_map(|hd| {
            let (x1, x2) = hd.split_at(half);
            let c = |i: usize| f64::from(cos[pos * half + i]);
            let s = |i: usize| f64::from(sin[pos * half + i]);
            let a: Vec<f64> = (0..half)
                .map(|i| f64::from(x1[i]) * c(i) - f64::from(x2[i]) * s(i))
                .collect();
            let b: Vec<f64> = (0..half)
                .map(|i| f64::from(x2[i]) * c(i) + f64::from(x1[i]) * s(i))
                .collect();
            a.into_iter().chain(b)
        })
        .collect()
}

/// Per-head RMSNorm of each `d`-wide head of `x` by `w`, in f32 like the kernel's inputs.
fn head_norm(x: &[f32], w: &[f32], d: usize, eps: f64) -> Vec<f32> {
    let xd: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    host_norm(&xd, w, d, eps).into_iter().map(|v| v as f32).collect()
}

/// One attention case: `(b, H, K, d, A, pos)` and how the layer attends.
struct Case {
    shape: (usize, usize, usize, usize, usize, usize),
    rope: bool,
    norm: bool,
    scale: Option<f64>,
    window: Option<usize>,
    softcap: Option<f64>,
    /// Cached positions per split of the kernel (`None`: one workgroup per head).
    chunk: Option<usize>,
}

const fn case(shape: (usize, usize, usize, usize, usize, usize)) -> Case {
    Case {
        shape,
        rope: true,
        norm: false,
        scale: None,
        window: None,
        softcap: None,
        chunk: None,
    }
}

/// [`check_attention_with`] under every feature set the device has.
fn check_attention(rng: &mut Rng, c: &Case) {
    for f in feature_sets() {
        let seed = rng.next();
        check_attention_with(&mut Rng(seed), c, f);
    }
}

fn check_attention_with(rng: &mut Rng, c: &Case, f: Features) {
    let device = device();
    let (b, heads, kv, d, alloc, pos) = c.shape;
    let (half, max_pos, eps) = (d / 2, pos + 3, 1e-6);
    let q = vec(rng, b * heads * d, 1.0);
    let k = vec(rng, b * kv * d, 1.0);
    let v = vec(rng, b * kv * d, 2.0);
    let cos = vec(rng, max_pos * half, 1.0);
    let sin = vec(rng, max_pos * half, 1.0);
    // What the cache holds before the launch: an f16 cache holds the values' f16 roundings.
    let (kc, vc) = (
        vec(rng, b * kv * alloc * d, 1.0),
        vec(rng, b * kv * alloc * d, 2.0),
    );
    let (kc, vc) = match f.f16 {
        true => (round16(&kc), round16(&vc)),
        false => (kc, vc),
    };
    let cache_dtype = if f.f16 { DType::F16 } else { DType::F32 };
    let (qw, kw_) = (vec(rng, d, 2.0), vec(rng, d, 2.0));
    let t1 = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &device);
    let t2 =
        |v: &[f32], shape: [usize; 2]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device);
    let t4 = |v: &[f32]| {
        Tensor::<4>::from_data(TensorData::new(v.to_vec(), [b, kv, alloc, d]), &device).cast(cache_dtype)
    };
    let (mut keys, mut values) = (t4(&kc), t4(&vc));
    let table = t2(&[cos.clone(), sin.clone()].concat(), [2 * max_pos, half]);
    let norms = t1(&[qw.clone(), kw_.clone()].concat());
    let scale = c.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let how = Attend {
        rope: c.rope.then_some(&table),
        qk_norm: c.norm.then_some((&norms, eps as f32)),
        scale: scale as f32,
        window: c.window,
        softcap: c.softcap.map(|cap| cap as f32),
    };
    let got = read(fused::attention_append_split(
        t2(&q, [b, heads * d]),
        t2(&k, [b, kv * d]),
        t2(&v, [b, kv * d]),
        how,
        pos,
        CacheSlot {
            keys: &mut keys,
            values: &mut values,
        },
        f,
        c.chunk,
    ));
    // The host reference: per-head norm, then rope (no rope: unrotated).
    let (qn, kn) = match c.norm {
        true => (head_norm(&q, &qw, d, eps), head_norm(&k, &kw_, d, eps)),
        false => (q.clone(), k.clone()),
    };
    let turn = |x: &[f32]| match c.rope {
        true => rot(x, d, pos, &cos, &sin),
        false => x.iter().map(|&v| f64::from(v)).collect(),
    };
    let (qr, kr) = (turn(&qn), turn(&kn));
    // The cache as it should be: position `pos` replaced, every other one untouched.
    let mut kw: Vec<f64> = kc.iter().map(|&x| f64::from(x)).collect();
    let mut vw: Vec<f64> = vc.iter().map(|&x| f64::from(x)).collect();
    for bh in 0..b * kv {
        let (at, src) = ((bh * alloc + pos) * d, bh * d);
        kw[at..at + d].copy_from_slice(&kr[src..src + d]);
        for j in 0..d {
            vw[at + j] = f64::from(v[src + j]);
        }
    }
    let what = format!(
        "b={b} H={heads} K={kv} d={d} pos={pos} rope={} norm={} scale={:?} window={:?} cap={:?} \
         chunk={:?} {f:?}",
        c.rope, c.norm, c.scale, c.window, c.softcap, c.chunk
    );
    // The new position's key and value are written in the cache's type (the launch's own attention reads
    // them unrounded: the reference uses `kw`, `vw` at `pos` unrounded too).
    let rel = rounding(f);
    assert_eq!(keys.dtype(), cache_dtype, "the cache keeps its type");
    close_rel(&read(keys.clone()), &kw, 1e-5, rel, &format!("keys {what}"));
    close_rel(&read(values.clone()), &vw, 0.0, rel, &format!("values {what}"));
    let first = c.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    // Attention over a cache holding `kw`, `vw`.
    let attend = |kw: &[f64], vw: &[f64]| {
        let mut want = Vec::new();
        for bi in 0..b {
            for hd in 0..heads {
                let kh = hd / (heads / kv);
                let qv = &qr[(bi * heads + hd) * d..][..d];
                let row = |p: usize| ((bi * kv + kh) * alloc + p) * d;
                let scores: Vec<f64> = (first..=pos)
                    .map(|p| {
                        let s = (0..d).map(|j| qv[j] * kw[row(p) + j]).sum::<f64>() * scale;
                        c.softcap.map_or(s, |cap| cap * (s / cap).tanh())
                    })
                    .collect();
                let top = scores.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                for j in 0..d {
                    want.push(
                        (first..=pos)
                            .zip(&e)
                            .map(|(p, e)| e * vw[row(p) + j])
                            .sum::<f64>()
                            / sum,
                    );
                }
            }
        }
        want
    };
    let want = attend(&kw, &vw);
    close_rel(&got, &want, 3e-5, rel, &format!("attention {what}"));
    // The same queries as a layer that shares this cache (Gemma 4's): nothing written, position `pos`
    // read from the cache the launch above wrote, so as the cache holds it (f16-rounded in an f16 cache).
    let caps = Caps::of(&device).with_features(f);
    let held = |t: &Tensor<4>| read(t.clone()).iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let want = attend(&held(&keys), &held(&values));
    let slot = CacheSlot {
        keys: &mut keys,
        values: &mut values,
    };
    let shared = read(fused::attention_shared(
        t2(&q, [b, heads * d]),
        how,
        pos,
        slot,
        caps,
    ));
    close_rel(&shared, &want, 3e-5, rel, &format!("shared attention {what}"));
    close_rel(
        &read(keys),
        &kw,
        1e-5,
        rel,
        &format!("keys after the shared attention {what}"),
    );
}

#[test]
fn attention_append_matches_the_host_with_grouped_heads() {
    let mut rng = Rng(0xD3C0_0003);
    // (b, H, K, d, A, pos): more cached positions than threads (32) and fewer, none, exactly 32.
    for shape in [
        (1, 9, 3, 64, 80, 69),
        (2, 4, 2, 8, 40, 36),
        (3, 2, 1, 6, 5, 0),
        (1, 3, 3, 16, 33, 32),
    ] {
        check_attention(&mut rng, &case(shape));
    }
}

/// Gemma's and Qwen3's attention: per-head q/k norms, a score scale other than `1/√d`, sliding windows
/// shorter than the cache (and longer, and of one position), logit softcapping, no rope (NoPE), heads
/// wider than the merge round (`d` = 256: eight rounds; 80: a partial last round).
#[test]
fn attention_append_scales_windows_caps_and_norms() {
    let mut rng = Rng(0xD3C0_0005);
    let cases = [
        Case {
            norm: true,
            scale: Some(24f64.powf(-0.5)),
            window: Some(5),
            ..case((1, 4, 2, 32, 80, 69))
        },
        Case {
            window: Some(40),
            ..case((2, 4, 1, 8, 64, 50))
        },
        Case {
            window: Some(100),
            softcap: Some(2.0),
            ..case((1, 3, 1, 16, 40, 36))
        },
        Case {
            window: Some(1),
            ..case((1, 2, 2, 6, 10, 7))
        },
        Case {
            window: Some(3),
            norm: true,
            ..case((2, 2, 1, 8, 4, 1))
        },
        Case {
            softcap: Some(0.5),
            scale: Some(0.3),
            ..case((1, 6, 3, 16, 50, 45))
        },
        Case {
            rope: false,
            ..case((2, 4, 2, 8, 40, 36))
        },
        Case {
            norm: true,
            scale: Some(1.0 / 16.0),
            window: Some(33),
            ..case((1, 4, 1, 256, 48, 40))
        },
        Case {
            norm: true,
            softcap: Some(5.0),
            ..case((1, 2, 1, 80, 40, 35))
        },
        // Gemma 4's full-attention layers: heads of 512, one key-value head, scale 1.
        Case {
            norm: true,
            scale: Some(1.0),
            ..case((1, 8, 1, 512, 48, 40))
        },
    ];
    for c in &cases {
        check_attention(&mut rng, c);
    }
}

/// The attention split over the sequence (`attention_append_split`: partial softmax states per split,
/// then their merge): splits of 16, 5 and 7 positions (the last one ragged), a window cutting through a
/// split, a span of exactly one split (no split), softcaps and norms, and a 600-position cache in splits
/// of the kernel's own length (`SPLIT`).
#[test]
fn split_attention_matches_the_host() {
    let mut rng = Rng(0xD3C0_0008);
    let cases = [
        Case {
            chunk: Some(16),
            ..case((1, 9, 3, 64, 80, 69))
        },
        Case {
            chunk: Some(5),
            ..case((1, 3, 3, 16, 33, 32))
        },
        Case {
            chunk: Some(7),
            window: Some(40),
            ..case((2, 4, 1, 8, 64, 50))
        },
        Case {
            chunk: Some(32),
            ..case((1, 3, 3, 16, 33, 32))
        },
        Case {
            chunk: Some(3),
            norm: true,
            softcap: Some(2.0),
            ..case((2, 2, 1, 80, 12, 10))
        },
        Case {
            chunk: Some(fused::SPLIT),
            ..case((1, 4, 2, 64, 640, 600))
        },
    ];
    for c in &cases {
        check_attention(&mut rng, c);
    }
}

#[test]
fn norm_add_rms_norm_matches_the_host() {
    for f in feature_sets() {
        check_norm_add_rms_norm(f);
    }
}

fn check_norm_add_rms_norm(f: Features) {
    let device = device();
    let mut rng = Rng(0xD3C0_0006);
    for (r, h) in [(1, 640), (3, 70), (2, 64), (1, 1)] {
        let x = vec(&mut rng, r * h, 3.0);
        let delta = vec(&mut rng, r * h, 5.0);
        let (wd, w) = (vec(&mut rng, h, 2.0), vec(&mut rng, h, 2.0));
        let t = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let t1 = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [h]), &device);
        let dd: Vec<f64> = delta.iter().map(|&v| f64::from(v)).collect();
        let sum: Vec<f64> = x
            .iter()
            .zip(host_norm(&dd, &wd, h, 1e-6))
            .map(|(&a, b)| f64::from(a) + b)
            .collect();
        let (s, n) = fused::add_rms_norm(t(&x, [r, h]), t(&delta, [r, h]), Some(&t1(&wd)), &t1(&w), 1e-6, f);
        close(&read(s), &sum, 1e-5, "norm_add_rms_norm sum");
        let want = host_norm(&sum, &w, h, 1e-6);
        close_rel(
            &read(n),
            &want,
            2e-5,
            rounding(f),
            &format!("norm_add_rms_norm {f:?}"),
        );
    }
}

#[test]
fn gelu_tanh_mul_matches_the_host() {
    for f in feature_sets() {
        check_gelu_tanh_mul(f);
    }
}

fn check_gelu_tanh_mul(feat: Features) {
    let device = device();
    let mut rng = Rng(0xD3C0_0007);
    let (r, f) = (3, 333);
    let g = vec(&mut rng, r * f, 8.0);
    let u = vec(&mut rng, r * f, 2.0);
    let t = |v: &[f32]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), [r, f]), &device);
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044_715 * g * g * g);
            0.5 * g * (1.0 + inner.tanh()) * f64::from(u)
        })
        .collect();
    close_rel(
        &read(fused::gated(t(&g), t(&u), Gate::GeluTanh, feat)),
        &want,
        1e-5,
        rounding(feat),
        &format!("gelu_tanh_mul {feat:?}"),
    );
}

#[test]
fn silu_mul_matches_the_host() {
    for f in feature_sets() {
        check_silu_mul(f);
    }
}

fn check_silu_mul(feat: Features) {
    let device = device();
    let mut rng = Rng(0xD3C0_0004);
    let (r, f) = (3, 333);
    let g = vec(&mut rng, r * f, 8.0);
    let u = vec(&mut rng, r * f, 2.0);
    let t = |v: &[f32]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), [r, f]), &device);
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            g / (1.0 + (-g).exp()) * f64::from(u)
        })
        .collect();
    let got = read(fused::gated(t(&g), t(&u), Gate::Silu, feat));
    close_rel(&got, &want, 1e-5, rounding(feat), &format!("silu_mul {feat:?}"));
}

/// A long cache with a wide head on every adapter: 9000 cached positions at `d = 128`, split as
/// `split_len` splits them (also on a software adapter, where one workgroup per head would run a thread's
/// loops past the 65 535 iterations after which lavapipe, Mesa 22, ends them early without an error:
/// that gave wrong outputs), and a span of `SOFTWARE_SPAN` positions taken whole.
#[test]
fn long_caches_attend_as_the_host_does() {
    let mut rng = Rng(0xD3C0_0009);
    let caps = kiln::kernels::caps::Caps::of(&device());
    let chunk = fused::split_len(9000, caps);
    assert_eq!(chunk, Some(fused::SPLIT));
    check_attention(
        &mut rng,
        &Case {
            chunk,
            ..case((1, 1, 1, 128, 9010, 9000))
        },
    );
    let whole = fused::SOFTWARE_SPAN;
    check_attention(&mut rng, &case((1, 1, 1, 128, whole + 2, whole)));
}
