//! kiln's quantized kernels on a device against the reference (each weight row dequantised by the loader's
//! block formats, then an f64 dot): the matmul on a decode shape (GEMV path) and a prefill shape (tiled
//! path), and the embedding gather, per GGML type. Shared by the browser tests (`browser.rs`: WebGPU on
//! SwiftShader, and the CPU backend in wasm32) and by `kernels_gpu.rs` (native wgpu), which with
//! `kernels_cpu.rs` also tests the kernels directly, on many more shapes.

use burn::tensor::{Device, Tensor, TensorData};
use kiln::kernels::{QuantWeight, reference};
use kiln::loader::GgmlType;

/// What a matmul may differ from the reference by, relative to `Σ|x|·|w|` of each output: GPU kernels
/// dequantise to f32 (only the summation order differs, about `k·2⁻²⁴`); the CPU kernels round activations
/// per block to 16-bit integers (at most 2⁻¹⁶ of the block's largest value per element; `kiln::kernels::cpu`).
pub fn tolerance(device: &Device) -> f32 {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Flex(_) => 5e-4,
        _ => 1e-4,
    }
}

/// The types a device's kernels read, in the order the default model and `Q4_K_M` files need them, then
/// the other weight types (F32 weights stay dense burn tensors: `QuantWeight::place` keeps none).
pub const TYPES: [GgmlType; 14] = [
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q5_1,
    GgmlType::Q5_K,
    GgmlType::F16,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::BF16,
];

/// A deterministic pseudo-random value in [-1, 1).
fn noise(i: usize, seed: usize) -> f32 {
    let x = (i as u64 ^ (seed as u64) << 32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

async fn read(t: Tensor<2>) -> Vec<f32> {
    t.into_data_async()
        .await
        .expect("read back")
        .try_to_vec::<f32>()
        .expect("f32")
}

/// Checks `ty` on `device`: `y = x·Wᵀ` for `m` = 1 and 9 rows, and rows 0, n-1 and 2 of the table.
/// Returns the worst relative error seen. Panics (naming the type, shape and element) past the tolerance.
pub async fn check(ty: GgmlType, device: &Device) -> f32 {
    let (n, k) = (7, 2 * ty.block_elems().max(128));
    let values: Vec<f32> = (0..n * k).map(|i| noise(i, 1) * (1.0 + (i % 5) as f32)).collect();
    let w = ty.quantize(&values).unwrap_or_else(|| panic!("{ty:?} quantizes"));
    let q = QuantWeight::place(ty, &w, n, k, device)
        .unwrap_or_else(|e| panic!("{ty:?}: {e}"))
        .unwrap_or_else(|| panic!("{ty:?}: no kernel here"));
    assert!(
        q.bytes() >= w.len() && q.bytes() <= w.len().div_ceil(4) * 4,
        "{ty:?}: the blocks, unwidened (at most padded to whole words): {} for {}",
        q.bytes(),
        w.len()
    );
    let mut worst = 0f32;
    for m in [1, 9] {
        let x: Vec<f32> = (0..m * k).map(|i| noise(i, 2 + m)).collect();
        let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), device);
        let got = read(q.matmul(xt)).await;
        let want = reference::matmul(ty, &w, n, k, &x, m);
        let scale = reference::magnitude(ty, &w, n, k, &x, m);
        for (i, ((g, r), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
            let rel = (g - r).abs() / s.max(f32::MIN_POSITIVE);
            worst = worst.max(rel);
            assert!(
                rel <= tolerance(device),
                "{ty:?} m={m} n={n} k={k}: y[{}, {}] = {g}, reference {r} (Σ|x||w| = {s})",
                i / n,
                i % n
            );
        }
    }
    let ids = [0u32, n as u32 - 1, 2];
    let rows = read(q.rows(&ids, device)).await;
    let dense = ty.dequantize(&w);
    for (r, &id) in ids.iter().enumerate() {
        let start = id as usize * k;
        assert_eq!(
            rows[r * k..(r + 1) * k],
            dense[start..start + k],
            "{ty:?}: embedding row {id}"
        );
    }
    worst
}
