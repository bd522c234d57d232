//! Two or three GEMVs in one launch (`kernels::gpu::matmul_group`, what the fused decode step runs for a
//! layer's q, k, v and its gate, up) against one launch per weight: bit for bit, in both layouts, with
//! the plain kernels and the device's own paths, for matrices of different formats and row counts (none
//! a multiple of a workgroup's rows), 1 and 3 rows of `x`; and `None` where the launch does not apply
//! (also for weights of other caps).

use burn::tensor::{DType, Tensor, TensorData};
use kiln::kernels::gpu::{self, GemvLayout};

use super::{Rng, device, feature_sets, random_blocks, read, upload};

/// A launch's matrices as (GGML type, rows), their `k`, and the rows of `x`.
type Case = (&'static [(u32, usize)], usize, usize);

#[test]
fn one_launch_equals_one_per_weight() {
    let device = device();
    let mut rng = Rng(0x6E3F_0001);
    // (GGML type, rows) per matrix, all of k elements, and the rows of x: q, k, v of mixed formats; a
    // K-quant pair. (Every case is a shader compile per layout and feature set on lavapipe.)
    let groups: [Case; 2] = [
        (&[(3, 130), (3, 33), (8, 47)], 96, 1),
        (&[(12, 70), (14, 129)], 512, 3),
    ];
    for (group, k, m) in groups {
        let ws: Vec<_> = group
            .iter()
            .map(|&(id, n)| upload(id, &random_blocks(&mut rng, id, n * k), n, k, &device))
            .collect();
        {
            let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
            for f in feature_sets() {
                for layout in [GemvLayout::Rows, GemvLayout::Split] {
                    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
                    let xt = if f.f16 { xt.cast(DType::F16) } else { xt };
                    let caps = gpu::Caps::of(&device).with_gemv(layout).with_features(f);
                    let ws: Vec<_> = ws.iter().map(|w| w.with_caps(caps)).collect();
                    let refs: Vec<_> = ws.iter().collect();
                    let got = gpu::matmul_group(&xt, &refs).expect("the launch applies");
                    assert_eq!(got.len(), ws.len());
                    for (i, (y, w)) in got.into_iter().zip(&ws).enumerate() {
                        let want = read(gpu::matmul(xt.clone(), w));
                        let y = read(y);
                        assert_eq!(y.len(), want.len());
                        for (j, (a, b)) in y.iter().zip(&want).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "k={k} m={m} {layout:?} {f:?}: matrix {i} output {j}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_launch_declines_what_it_does_not_cover() {
    let device = device();
    let mut rng = Rng(0x6E3F_0002);
    let k = 64;
    let w = |rng: &mut Rng, n: usize| upload(3, &random_blocks(rng, 3, n * k), n, k, &device);
    let (a, b) = (w(&mut rng, 8), w(&mut rng, 8));
    let x = |m: usize| Tensor::<2>::zeros([m, k], &device);
    assert!(gpu::matmul_group(&x(1), &[&a],).is_none(), "one weight");
    assert!(gpu::matmul_group(&x(1), &[&a, &b, &a, &b]).is_none(), "four");
    assert!(gpu::matmul_group(&x(9), &[&a, &b]).is_none(), "prefill rows");
    let split = b.with_caps(b.caps().with_gemv(GemvLayout::Split));
    assert!(
        gpu::matmul_group(&x(1), &[&a, &b]).is_some(),
        "two weights of the same caps"
    );
    assert!(
        gpu::matmul_group(&x(1), &[&a, &split]).is_none(),
        "weights of other caps"
    );
    let bytes = random_blocks(&mut rng, 3, 8 * k);
    let row = bytes.len() / 8;
    let parts = gpu::upload_with_limit(
        kiln::loader::GgmlType::Q4_1,
        &bytes,
        8,
        k,
        &device,
        3 * row as u64,
    )
    .expect("upload");
    assert!(parts.parts() > 1);
    assert!(
        gpu::matmul_group(&x(1), &[&a, &parts]).is_none(),
        "a weight in parts"
    );
    let other = upload(3, &random_blocks(&mut rng, 3, 8 * 2 * k), 8, 2 * k, &device);
    assert!(gpu::matmul_group(&x(1), &[&a, &other]).is_none(), "another k");
    // The fallback of `matmul_many` gives one launch's outputs per weight either way.
    let ys = gpu::matmul_many(x(1), &[&a, &parts]);
    assert_eq!(ys.iter().map(|y| y.dims()).collect::<Vec<_>>(), [[1, 8], [1, 8]]);
}
