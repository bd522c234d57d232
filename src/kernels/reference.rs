//! The reference quantized matmul: each weight row dequantised by the loader's block formats
//! ([`GgmlType::dequantize_into`], llama.cpp's `dequantize_row_*`), then dotted with the activations in
//! f64. Slow and exact; the CPU and WebGPU kernels are tested against it.

use crate::loader::GgmlType;

/// `y[m, n] = Σ_k x[m, k] · W[n, k]` with `w` holding `n` rows of `k` elements of `ty`, row-major.
/// Panics on lengths that do not match (a test helper, never fed user input).
pub fn matmul(ty: GgmlType, w: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    let row = ty.row_bytes(k).expect("k is a whole number of blocks");
    assert_eq!(w.len(), row * n, "weight bytes");
    assert_eq!(x.len(), m * k, "activation length");
    let mut dense = vec![0.0f32; k];
    let mut y = vec![0.0f32; m * n];
    for (j, wrow) in w.chunks_exact(row).enumerate() {
        ty.dequantize_into(wrow, &mut dense).expect("whole blocks");
        for (i, xrow) in x.chunks_exact(k).enumerate() {
            let dot: f64 = xrow
                .iter()
                .zip(&dense)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            y[i * n + j] = dot as f32;
        }
    }
    y
}

/// `Σ_k |x[m, k]| · |W[n, k]|` per output: the scale that rounding errors of any summation order (and
/// of 8-bit activation quantization) are proportional to. Same layout as [`matmul`].
pub fn magnitude(ty: GgmlType, w: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    let abs_w: Vec<f32> = w
        .chunks_exact(ty.row_bytes(k).expect("whole blocks"))
        .flat_map(|r| ty.dequantize(r))
        .map(f32::abs)
        .collect();
    let abs_x: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    let mut y = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|c| abs_x[i * k + c] * abs_w[j * k + c]).sum();
        }
    }
    y
}
