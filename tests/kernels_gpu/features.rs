//! The device's optional kernel paths (`kernels::caps`, `kernels::gpu::caps`): what the device reports, the subgroup
//! probe's layout check, and the GEMV in both layouts with f16 activations and with subgroup shuffles
//! (lanes 1 to 8 per row group: every butterfly width lavapipe's subgroups of 8 allow) against the host.
//!
//! Tolerance of the GEMV: as `kernels_gpu.rs`, `|y − y_ref| ≤ 1e-4 · Σ|x||w|`, with the reference
//! computed from the activations as the kernel reads them (f16-rounded when they are f16): the f16 path
//! changes what is multiplied, not how the sums are taken (f32).

use burn::tensor::{DType, Tensor, TensorData};
use half::f16;
use kiln::kernels::gpu::caps::{self, Features};
use kiln::kernels::gpu::{self, GemvLayout};

use super::{Rng, device, host_dequantize, random_blocks, read, upload};

/// The device reports what its kernels use, and uses no feature its adapter lacks; lavapipe (Mesa's
/// software Vulkan, what CI runs) has f16 and subgroups of 8, which the probe accepts.
#[test]
fn the_device_reports_the_features_in_use() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("wgpu");
    let info = gpu.info;
    let f = info.features.expect("a wgpu device reports its features");
    let caps = gpu::Caps::of(&gpu.device);
    assert_eq!(f, caps.features, "the report is what the kernels take");
    assert_eq!(
        info.gemv,
        Some(caps.gemv),
        "the report is the GEMV layout the weights take"
    );
    assert!(!f.f16 || info.shader_f16, "f16 only with shader-f16: {info:?}");
    assert!(
        f.subgroups.is_none() || info.subgroups,
        "subgroups only where the adapter has them"
    );
    let untouched = ["KILN_F16", "KILN_SUBGROUPS"]
        .iter()
        .all(|v| std::env::var_os(v).is_none());
    if info.adapter.contains("llvmpipe") && untouched {
        assert_eq!(
            f,
            Features {
                f16: true,
                subgroups: Some(8)
            },
            "lavapipe: {info:?}"
        );
    }
}

/// The probe's check accepts subgroups of consecutive invocations and refuses any other layout.
#[test]
fn the_probe_refuses_layouts_the_kernels_do_not_assume() {
    // What a device with subgroups of `s`, lane = index % s, would write.
    let words = |s: u32, lane: &dyn Fn(u32) -> u32| -> Vec<u32> {
        (0..64u32)
            .flat_map(|t| [lane(t), s, s * (s - 1) / 2, t ^ 1, t ^ 2, t ^ 4])
            .collect()
    };
    assert_eq!(caps::check_probe(&words(8, &|t| t % 8), 8, 8), Some(8));
    assert_eq!(caps::check_probe(&words(32, &|t| t % 32), 4, 64), Some(32));
    // Interleaved subgroups (lanes t / 8 of eight subgroups t % 8): refused.
    assert_eq!(caps::check_probe(&words(8, &|t| t / 8), 8, 8), None);
    // A size outside the stated range, or not a power of two.
    assert_eq!(caps::check_probe(&words(16, &|t| t % 16), 8, 8), None);
    assert_eq!(caps::check_probe(&words(12, &|t| t % 12), 4, 64), None);
    // Shuffles that do not bring lane ^ mask.
    let mut bad = words(8, &|t| t % 8);
    bad[3] = 5;
    assert_eq!(caps::check_probe(&bad, 8, 8), None);
    assert_eq!(caps::check_probe(&[], 8, 8), None);
}

/// The GEMV with the device's features against the host, for a format of each family: f16 activations
/// in both layouts, subgroup shuffles in the split one with 8 blocks per row (groups of 8 lanes: three
/// butterfly levels), 1 and 3 blocks (1 and 2 lanes), and 3 rows of `x`; and the plain shared-memory
/// tree at 8 lanes, which the other tests no longer reach on a device with subgroups. (Each case is a
/// shader compile on lavapipe, about a second: the other formats' shuffles at 1 and 2 lanes are in
/// `kernels_gpu.rs`.)
#[test]
fn gemv_with_f16_activations_and_subgroups_matches_the_host() {
    let device = device();
    let own = gpu::Caps::of(&device).features;
    let mut rng = Rng(0xFEA7_0001);
    // (GGML type, block elements, blocks per row, rows of x, layout, features).
    let mut cases = Vec::new();
    // Q4_1, Q8_0, Q4_K, Q6_K, Q5_0, F16.
    for (id, be) in [(3u32, 32usize), (8, 32), (12, 256), (14, 256), (6, 32), (1, 1)] {
        let nb = if be == 1 { 40 } else { 8 };
        cases.push((id, be, nb, 1, GemvLayout::Rows, own));
        cases.push((id, be, nb, 1, GemvLayout::Split, own));
    }
    cases.extend([
        (3, 32, 1, 1, GemvLayout::Split, own),
        (3, 32, 3, 1, GemvLayout::Split, own),
        (12, 256, 8, 3, GemvLayout::Split, own),
        (3, 32, 8, 1, GemvLayout::Split, Features::BASE),
        (12, 256, 8, 1, GemvLayout::Split, Features::BASE),
    ]);
    for (id, be, nb, m, layout, f) in cases {
        let (n, k) = (67, nb * be);
        let bytes = random_blocks(&mut rng, id, n * k);
        let w_host = host_dequantize(id, &bytes);
        let w = upload(id, &bytes, n, k, &device);
        let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
        let xs: Vec<f32> = match f.f16 {
            true => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
            false => x.clone(),
        };
        let xt = Tensor::<2>::from_data(TensorData::new(x, [m, k]), &device);
        let xt = if f.f16 { xt.cast(DType::F16) } else { xt };
        let y = read(gpu::matmul(
            xt,
            &w.with_caps(w.caps().with_gemv(layout).with_features(f)),
        ));
        assert_eq!(y.len(), m * n);
        for i in 0..m {
            for j in 0..n {
                let (mut dot, mut mag) = (0.0f64, 0.0f64);
                for e in 0..k {
                    let p = f64::from(xs[i * k + e]) * f64::from(w_host[j * k + e]);
                    dot += p;
                    mag += p.abs();
                }
                let got = f64::from(y[i * n + j]);
                assert!(
                    (got - dot).abs() <= 1e-4 * mag + 1e-30,
                    "type {id} k={k} m={m} {layout:?} {f:?}: y[{i},{j}] = {got} vs {dot}"
                );
            }
        }
    }
}
