//! The vision encoder's attention kernel (`kernels::gpu::encoder_attention`) against a host reference
//! (f64), in both launch layouts (looped: GPUs; one launch per tile of keys: software adapters) and in
//! the device's own: one query and several, fewer and more queries than a workgroup (64 looped, 128 per
//! block) and keys than a tile (32 at `d = 64`, 28 at 72, 25 at 80, 16 at 128), a partial last tile; head
//! dims that are multiples of 4 (SigLIP's 72, CLIP's 64, 80, 128), of 2 only (18) and odd (7); inputs
//! made by reshape + swap_dims from `[b, n, H·d]` as the encoder makes them (not contiguous).
//!
//! Tolerance `|y − y_ref| ≤ 1e-5 · (1 + |y_ref|)`: f32 scores (here within ±20) and an f32 weighted sum,
//! against f64; measured below 1e-6.

use burn::tensor::{Tensor, TensorData};
use kiln::kernels::gpu::encoder_attention::{AttentionLayout, encoder_attention, encoder_attention_with};

use super::{Rng, device};

/// `softmax(q · kᵀ · scale) · v` of each of the `b·H` heads of row-major `[b, H, n, d]` data, in f64.
fn host_attention(q: &[f32], k: &[f32], v: &[f32], [b, h, n, d]: [usize; 4], scale: f64) -> Vec<f64> {
    let mut out = vec![0.0; b * h * n * d];
    let mut w = vec![0.0f64; n];
    for head in 0..b * h {
        let at = |x: &[f32], r: usize, c: usize| f64::from(x[(head * n + r) * d + c]);
        for i in 0..n {
            for (j, wj) in w.iter_mut().enumerate() {
                *wj = (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale;
            }
            let top = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            w.iter_mut().for_each(|x| *x = (*x - top).exp());
            let sum: f64 = w.iter().sum();
            for c in 0..d {
                out[(head * n + i) * d + c] = (0..n).map(|j| w[j] * at(v, j, c)).sum::<f64>() / sum;
            }
        }
    }
    out
}

fn close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

fn read(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 data")
}

#[test]
fn encoder_attention_matches_the_host() {
    let device = device();
    let mut rng = Rng(0xE1C0_0A77);
    let layouts = [AttentionLayout::Looped, AttentionLayout::Blocks];
    let shapes = [
        [1, 1, 1, 64],
        [2, 3, 5, 72],
        [1, 2, 63, 80],
        [2, 1, 65, 128],
        [1, 3, 129, 72],
        [2, 2, 70, 18],
        [1, 2, 33, 7],
        [1, 2, 300, 64],
    ];
    for shape in shapes {
        let [b, h, n, d] = shape;
        let mut data = |s: f32| (0..b * h * n * d).map(|_| rng.unit() * s).collect::<Vec<f32>>();
        // Uniform q, k in ±3: scores of standard deviation 3 (peaked softmaxes), values in ±1.
        let (q, k, v) = (data(3.0), data(3.0), data(1.0));
        let scale = (d as f64).powf(-0.5);
        let want = host_attention(&q, &k, &v, shape, scale);
        let t = |x: &[f32]| Tensor::<4>::from_data(TensorData::new(x.to_vec(), shape), &device);
        for layout in layouts {
            let got = read(encoder_attention_with(t(&q), t(&k), t(&v), scale as f32, layout));
            close(&got, &want, &format!("{shape:?} {layout:?}"));
        }
        let got = read(encoder_attention(t(&q), t(&k), t(&v), scale as f32));
        close(&got, &want, &format!("{shape:?} the device's layout"));
    }
    // Not contiguous: each of q, k, v split from `[b, n, H·d]` into heads, `[b, H, n, d]` by its strides.
    for [b, h, n, d] in [[2, 3, 65, 72], [1, 4, 40, 64]] {
        let mut data = |s: f32| (0..b * n * h * d).map(|_| rng.unit() * s).collect::<Vec<f32>>();
        let (x, y, z) = (data(3.0), data(3.0), data(1.0));
        // The host's copy in `[b, H, n, d]` order.
        let heads = |x: &[f32]| {
            let mut out = vec![0.0f32; x.len()];
            for (bi, hi, i, c) in (0..b).flat_map(|bi| {
                (0..h).flat_map(move |hi| (0..n).flat_map(move |i| (0..d).map(move |c| (bi, hi, i, c))))
            }) {
                out[((bi * h + hi) * n + i) * d + c] = x[(bi * n + i) * h * d + hi * d + c];
            }
            out
        };
        let scale = (d as f64).powf(-0.5);
        let want = host_attention(&heads(&x), &heads(&y), &heads(&z), [b, h, n, d], scale);
        let split = |x: &[f32]| {
            Tensor::<3>::from_data(TensorData::new(x.to_vec(), [b, n, h * d]), &device)
                .reshape([b, n, h, d])
                .swap_dims(1, 2)
        };
        for layout in layouts {
            let got = read(encoder_attention_with(
                split(&x),
                split(&y),
                split(&z),
                scale as f32,
                layout,
            ));
            close(&got, &want, &format!("strided [{b}, {h}, {n}, {d}] {layout:?}"));
        }
    }
}
