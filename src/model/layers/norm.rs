//! Root-mean-square layer normalisation, as used by every Llama-family decoder ([`rms_norm`]), and the
//! mean-centred LayerNorm with a bias of vision encoders ([`layer_norm`]).

use burn::tensor::Tensor;

use crate::kernels;

/// RMSNorm over the last dimension: `y = x / sqrt(mean(x², -1) + eps) * weight`.
///
/// Shapes: `x` is `[..., hidden]` (any rank `D`), `weight` is `[hidden]`; the result has the shape of `x`.
/// The mean of squares is taken in the tensor's dtype (f32 on every device kiln targets today).
/// On the CPU backend one pass per row ([`kernels::rms_norm`]), elsewhere burn's ops.
pub fn rms_norm<const D: usize>(x: Tensor<D>, weight: Tensor<1>, eps: f64) -> Tensor<D> {
    if let Some(y) = kernels::rms_norm(&x, &weight, eps) {
        return y;
    }
    // [..., 1]: the reciprocal root mean square of each row.
    let inv_rms = x
        .clone()
        .powi_scalar(2)
        .mean_dim(D - 1)
        .add_scalar(eps)
        .sqrt()
        .recip();
    // weight: [hidden] -> [1, ..., 1, hidden] so it broadcasts over the leading dimensions.
    x * inv_rms * weight.unsqueeze::<D>()
}

/// LayerNorm over the last dimension: `y = (x − mean) / sqrt(var + eps) · weight + bias` (the biased
/// variance, as PyTorch's `LayerNorm`). On the CPU backend one pass per row ([`kernels::layer_norm`]),
/// elsewhere burn's ops.
///
/// Shapes: `x` is `[..., hidden]`, `weight` and `bias` are `[hidden]`; the result has the shape of `x`.
pub fn layer_norm<const D: usize>(x: Tensor<D>, weight: &Tensor<1>, bias: &Tensor<1>, eps: f64) -> Tensor<D> {
    if let Some(y) = kernels::layer_norm(&x, weight, bias, eps) {
        return y;
    }
    let centred = x.clone() - x.mean_dim(D - 1);
    let inv_std = (centred.clone() * centred.clone())
        .mean_dim(D - 1)
        .add_scalar(eps)
        .sqrt()
        .recip();
    centred * inv_std * weight.clone().unsqueeze::<D>() + bias.clone().unsqueeze::<D>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    fn read(t: Tensor<2>) -> Vec<f32> {
        let data = pollster::block_on(t.into_data_async()).expect("read back");
        data.as_slice::<f32>().expect("f32 data").to_vec()
    }

    #[test]
    fn unit_weight_gives_rows_of_unit_rms() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(
            TensorData::new(vec![1.0f32, -2.0, 3.0, 0.5, 10.0, 0.0, 0.0, -4.0], [2, 4]),
            &device,
        );
        let w = Tensor::<1>::ones([4], &device);
        let y = read(rms_norm(x, w, 0.0));
        for row in y.chunks(4) {
            let ms: f32 = row.iter().map(|v| v * v).sum::<f32>() / 4.0;
            assert!((ms - 1.0).abs() < 1e-5, "mean square {ms} of {row:?}");
        }
        // Signs and ratios inside a row are kept: 1 : -2 : 3 : 0.5.
        assert!((y[1] / y[0] + 2.0).abs() < 1e-5 && (y[2] / y[0] - 3.0).abs() < 1e-5);
    }

    #[test]
    fn layer_norm_centres_scales_and_shifts() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 6.0], [1, 4]), &device);
        let w = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0, 1.0, 1.0], [4]), &device);
        let b = Tensor::<1>::from_data(TensorData::new(vec![0.5f32, 0.0, 0.0, -1.0], [4]), &device);
        // mean 3, biased variance (4 + 1 + 0 + 9) / 4 = 3.5.
        let y = read(layer_norm(x, &w, &b, 0.0));
        let s = 3.5f32.sqrt();
        let want = [-2.0 / s + 0.5, -2.0 / s, 0.0, 3.0 / s - 1.0];
        for (got, want) in y.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{y:?} vs {want:?}");
        }
    }

    #[test]
    fn weight_scales_each_column_and_eps_damps_small_rows() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(TensorData::new(vec![1e-3f32; 4], [1, 4]), &device);
        let w = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [4]), &device);
        // rms = 1e-3; with eps = 1e-6 the denominator is sqrt(1e-6 + 1e-6) = 1.41421e-3.
        let y = read(rms_norm(x, w, 1e-6));
        for (i, v) in y.iter().enumerate() {
            let expected = 1e-3 / (2e-6f32).sqrt() * (i as f32 + 1.0);
            assert!((v - expected).abs() < 1e-4, "column {i}: {v} vs {expected}");
        }
    }
}
