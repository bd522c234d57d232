//! The sampling kernels (`kernels::gpu::select`) against the host, on native wgpu: `top_k` on rows that
//! are not multiples of the 1024-logit chunk or of the 256-thread workgroup (1 to 262 147 logits: one
//! level to four), with ties (the lower id first, as `sampling::top_k`), batches of several rows, and
//! `k` from 1 to 64, bit for bit, and `argmax` as the first of them (with and without subgroups); the chunk sums `Σ exp((l − m) / t)` within `1e-5` relative of an f64
//! sum over the same chunk (an f32 sum of ≤ 1024 terms in `(0, 1]`), the chunk maxima exactly; `adjust`
//! as the host sampler's `(l + add) − sub`, bit for bit, entries outside the tensor dropped.

use burn::tensor::{Tensor, TensorData};
use kiln::kernels::gpu::Features;
use kiln::kernels::gpu::select::{self, Adjust, CHUNK};
use kiln::sampling::top_k;

use super::{Rng, device, read};

fn logits(rng: &mut Rng, b: usize, v: usize) -> Vec<f32> {
    // Values on a coarse grid: many ties, so the id order on ties is exercised.
    (0..b * v).map(|_| (rng.unit() * 64.0).round() / 8.0).collect()
}

#[test]
fn top_k_matches_the_host_on_odd_shapes() {
    let dev = device();
    let mut rng = Rng(0x5EED_7A11);
    for (b, v, k) in [
        (1, 1, 1),
        (1, 63, 5),
        (2, 64, 64),
        (1, 1000, 64),
        (3, 1025, 64),
        (1, 4097, 17),
        (2, 49_159, 64),
        (1, 262_147, 64),
    ] {
        let host = logits(&mut rng, b, v);
        let t = 0.8f32;
        let x = Tensor::<2>::from_data(TensorData::new(host.clone(), [b, v]), &dev);
        let found = select::top_k(x.clone(), k, t);
        let best = read(select::argmax(
            x.clone(),
            kiln::kernels::caps::Caps::of(&dev).features,
        ));
        // The plain kernel's tree and the subgroup path (where the device has one) agree bit for bit.
        let plain = read(select::argmax(x, Features::BASE));
        assert_eq!(best, plain, "b {b}, v {v}: argmax with and without subgroups");
        let (top, stats) = (read(found.top), read(found.stats));
        let chunks = v.div_ceil(CHUNK);
        assert_eq!(
            (top.len(), stats.len()),
            (b * 2 * k, b * 2 * chunks),
            "b {b}, v {v}, k {k}"
        );
        for r in 0..b {
            let row = &host[r * v..(r + 1) * v];
            let got: Vec<(u32, f32)> = top[r * 2 * k..(r + 1) * 2 * k]
                .chunks_exact(2)
                .map(|p| (p[1] as u32, p[0]))
                .collect();
            assert_eq!(got, top_k(row, k), "b {b}, v {v}, k {k}: row {r}");
            let first = top_k(row, 1)[0];
            assert_eq!(
                (best[2 * r + 1] as u32, best[2 * r]),
                first,
                "v {v}: argmax of row {r}"
            );
            for (c, chunk) in row.chunks(CHUNK).enumerate() {
                let m = chunk.iter().copied().fold(f32::MIN, f32::max);
                let want: f64 = chunk
                    .iter()
                    .map(|&l| (f64::from(l - m) / f64::from(t)).exp())
                    .sum();
                let (gm, gs) = (stats[(r * chunks + c) * 2], stats[(r * chunks + c) * 2 + 1]);
                assert_eq!(gm, m, "v {v}: chunk {c} max");
                assert!(
                    (f64::from(gs) - want).abs() <= 1e-5 * want,
                    "v {v}: chunk {c} sum {gs} vs {want}"
                );
            }
        }
    }
}

#[test]
fn adjust_is_the_host_samplers_arithmetic() {
    let dev = device();
    let mut rng = Rng(0xAD_1057);
    let (b, v) = (3, 777);
    let host = logits(&mut rng, b, v);
    let entries = [
        Adjust {
            row: 0,
            id: 0,
            add: 2.5,
            sub: 0.0,
        },
        Adjust {
            row: 0,
            id: 776,
            add: -100.0,
            sub: 0.3,
        },
        Adjust {
            row: 2,
            id: 5,
            add: 0.0,
            sub: 1.7,
        },
        Adjust {
            row: 1,
            id: 400,
            add: 0.1,
            sub: 0.2,
        },
        // Outside the tensor: dropped.
        Adjust {
            row: 3,
            id: 0,
            add: 9.0,
            sub: 0.0,
        },
        Adjust {
            row: 0,
            id: 777,
            add: 9.0,
            sub: 0.0,
        },
    ];
    let x = Tensor::<2>::from_data(TensorData::new(host.clone(), [b, v]), &dev);
    select::adjust(&x, &entries);
    let mut want = host;
    for e in &entries[..4] {
        let l = &mut want[e.row as usize * v + e.id as usize];
        *l = (*l + e.add) - e.sub;
    }
    assert_eq!(read(x), want);
}
