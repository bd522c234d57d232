//! The fused decode-step kernels (`kernels::gpu::decode`) against plain host references (f64), on odd
//! shapes: rows and widths that are not multiples of the workgroup (64 threads; 32 for attention), more
//! cached positions than attention threads and fewer (and none), grouped-query heads, a cache with more
//! room than positions; the cache append checked over the whole cache (only position `pos` changes).
//!
//! Tolerance: `|y − y_ref| ≤ 1e-5 · (1 + |y_ref|)` for RMSNorm, rope and SiLU·up (a few f32 roundings
//! per output); attention `≤ 3e-5 · (1 + |y_ref|)` (an f32 softmax and weighted sum of ≤ 70 terms, the
//! scores below 10 in magnitude here).

use burn::tensor::{Tensor, TensorData};
use kiln::kernels::gpu::decode::{self as fused, CacheSlot};

use super::{Rng, device};

fn vec(rng: &mut Rng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.unit() * scale).collect()
}

fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    let data = pollster::block_on(t.into_data_async()).expect("read back");
    data.try_to_vec::<f32>().expect("f32 data")
}

fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
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
    let device = device();
    let mut rng = Rng(0xD3C0_0001);
    for (r, h) in [(1, 576), (3, 70), (9, 64), (2, 1)] {
        let x = vec(&mut rng, r * h, 3.0);
        let delta = vec(&mut rng, r * h, 1.0);
        let w = vec(&mut rng, h, 2.0);
        let t = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let wt = Tensor::<1>::from_data(TensorData::new(w.clone(), [h]), &device);
        let xd: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let got = read(fused::rms_norm(t(&x, [r, h]), &wt, 1e-5));
        close(&got, &host_norm(&xd, &w, h, 1e-5), 1e-5, "rms_norm");
        let sum: Vec<f64> = x.iter().zip(&delta).map(|(&a, &b)| f64::from(a + b)).collect();
        let (s, n) = fused::add_rms_norm(t(&x, [r, h]), t(&delta, [r, h]), &wt, 1e-6);
        close(&read(s), &sum, 0.0, "add_rms_norm sum");
        close(&read(n), &host_norm(&sum, &w, h, 1e-6), 1e-5, "add_rms_norm");
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

#[test]
fn attention_append_matches_the_host_with_grouped_heads() {
    let device = device();
    let mut rng = Rng(0xD3C0_0003);
    // (b, H, K, d, A, pos): more cached positions than threads (32) and fewer, none, exactly 32.
    for (b, heads, kv, d, alloc, pos) in [
        (1, 9, 3, 64, 80, 69),
        (2, 4, 2, 8, 40, 36),
        (3, 2, 1, 6, 5, 0),
        (1, 3, 3, 16, 33, 32),
    ] {
        let (half, max_pos) = (d / 2, pos + 3);
        let q = vec(&mut rng, b * heads * d, 1.0);
        let k = vec(&mut rng, b * kv * d, 1.0);
        let v = vec(&mut rng, b * kv * d, 2.0);
        let cos = vec(&mut rng, max_pos * half, 1.0);
        let sin = vec(&mut rng, max_pos * half, 1.0);
        let kc = vec(&mut rng, b * kv * alloc * d, 1.0);
        let vc = vec(&mut rng, b * kv * alloc * d, 2.0);
        let t2 = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let t4 = |v: &[f32]| Tensor::<4>::from_data(TensorData::new(v.to_vec(), [b, kv, alloc, d]), &device);
        let (mut keys, mut values) = (t4(&kc), t4(&vc));
        let got = read(fused::attention_append(
            t2(&q, [b, heads * d]),
            t2(&k, [b, kv * d]),
            t2(&v, [b, kv * d]),
            (&t2(&cos, [max_pos, half]), &t2(&sin, [max_pos, half])),
            pos,
            CacheSlot {
                keys: &mut keys,
                values: &mut values,
            },
        ));
        // The cache as it should be: position `pos` replaced, every other one untouched.
        let (qr, kr) = (rot(&q, d, pos, &cos, &sin), rot(&k, d, pos, &cos, &sin));
        let mut kw: Vec<f64> = kc.iter().map(|&x| f64::from(x)).collect();
        let mut vw: Vec<f64> = vc.iter().map(|&x| f64::from(x)).collect();
        for bh in 0..b * kv {
            let (at, src) = ((bh * alloc + pos) * d, bh * d);
            kw[at..at + d].copy_from_slice(&kr[src..src + d]);
            for j in 0..d {
                vw[at + j] = f64::from(v[src + j]);
            }
        }
        let what = format!("b={b} H={heads} K={kv} d={d} pos={pos}");
        close(&read(keys), &kw, 1e-5, &format!("keys {what}"));
        close(&read(values), &vw, 0.0, &format!("values {what}"));
        let mut want = Vec::new();
        for bi in 0..b {
            for hd in 0..heads {
                let kh = hd / (heads / kv);
                let qv = &qr[(bi * heads + hd) * d..][..d];
                let row = |p: usize| ((bi * kv + kh) * alloc + p) * d;
                let scores: Vec<f64> = (0..=pos)
                    .map(|p| (0..d).map(|j| qv[j] * kw[row(p) + j]).sum::<f64>() / (d as f64).sqrt())
                    .collect();
                let top = scores.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                for j in 0..d {
                    want.push((0..=pos).map(|p| e[p] * vw[row(p) + j]).sum::<f64>() / sum);
                }
            }
        }
        close(&got, &want, 3e-5, &format!("attention {what}"));
    }
}

#[test]
fn silu_mul_matches_the_host() {
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
    close(&read(fused::silu_mul(t(&g), t(&u))), &want, 1e-5, "silu_mul");
}
