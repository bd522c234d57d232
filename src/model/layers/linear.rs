//! Weight matrices as the decoder holds them: quantized blocks where the device has a kernel for the
//! type ([`QuantWeight`]), dense f32 otherwise (f32/f16/bf16 checkpoints, and types a device cannot run
//! yet). The same matrix serves as a projection ([`Linear`]), as the embedding table, and as a tied
//! `lm_head` ([`Matrix`]).
//!
//! Shapes: a matrix is `[out, in]` (Hugging Face order, GGUF's row layout); activations `[b, s, in]`.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::kernels::QuantWeight;
use crate::loader::{LoadError, RawTensor};
use crate::model::placed::Tensors;

/// A matrix `W: [out, in]`.
#[derive(Debug, Clone)]
pub enum Matrix {
    /// `[out, in]` in f32 (the matmul reads it through a transposed view, as burn's `Linear` does).
    Dense(Box<Tensor<2>>),
    /// The checkpoint's blocks.
    Quant(QuantWeight),
}

impl Matrix {
    /// Places checkpoint tensor `name` of shape `[out, in]` on `device`, quantized where a kernel exists;
    /// a device that fails to take it is an error naming the tensor.
    pub fn load(name: &str, raw: &RawTensor<'_>, device: &Device) -> Result<Self, LoadError> {
        let [out, inp] = [raw.shape[0], raw.shape[1]];
        let placed =
            QuantWeight::place(raw.ty, &raw.bytes, out, inp, device).map_err(|e| LoadError::Blocks {
                name: name.into(),
                ty: raw.ty.name(),
                reason: e.to_string(),
            })?;
        Ok(match placed {
            Some(q) => Self::Quant(q),
            None => Self::Dense(Box::new(Tensor::from_data(
                TensorData::new(raw.to_f32(), [out, inp]),
                device,
            ))),
        })
    }

    /// `[out, in]`.
    pub fn dims(&self) -> [usize; 2] {
        match self {
            Self::Dense(t) => t.dims(),
            Self::Quant(q) => [q.n, q.k],
        }
    }

    /// `x: [r, in]` → `x · Wᵀ: [r, out]`.
    pub fn matmul(&self, x: Tensor<2>) -> Tensor<2> {
        match self {
            // f16 activations (the fused wgpu step's, see `kernels::gpu::caps`) meet f32 weights as f32.
            Self::Dense(w) => x
                .cast(burn::tensor::DType::F32)
                .matmul(w.as_ref().clone().transpose()),
            Self::Quant(q) => q.matmul(x),
        }
    }

    /// [`Matrix::matmul`] with a weight in kiln's GPU blocks run by `caps` instead of those it was
    /// uploaded under (the fused step's, [`Decoder::set_caps`](crate::model::Decoder::set_caps)).
    #[cfg(feature = "webgpu")]
    pub fn matmul_by(&self, x: Tensor<2>, caps: crate::kernels::caps::Caps) -> Tensor<2> {
        match self {
            Self::Quant(q) => match q.gpu() {
                Some(w) => crate::kernels::gpu::matmul(x, &w.with_caps(caps)),
                None => q.matmul(x),
            },
            Self::Dense(_) => self.matmul(x),
        }
    }

    /// Rows `ids` of `W` (an embedding lookup): `ids: [b][s]` → `[b, s, in]`.
    pub fn rows(&self, ids: &[Vec<u32>], device: &Device) -> Tensor<3> {
        let (b, s) = (ids.len(), ids.first().map_or(0, Vec::len));
        let [_, inp] = self.dims();
        match self {
            Self::Dense(w) => {
                let flat: Vec<i64> = ids.iter().flatten().map(|&id| i64::from(id)).collect();
                let ids = Tensor::<2, Int>::from_data(TensorData::new(flat, [b, s]), device);
                burn::tensor::module::embedding(w.as_ref().clone(), ids)
            }
            Self::Quant(q) => {
                let flat: Vec<u32> = ids.iter().flatten().copied().collect();
                q.rows(&flat, device).reshape([b, s, inp])
            }
        }
    }

    /// Bytes the matrix takes on its device.
    pub fn device_bytes(&self) -> usize {
        match self {
            Self::Dense(t) => 4 * t.dims().iter().product::<usize>(),
            Self::Quant(q) => q.device_bytes(),
        }
    }
}

/// `y = x Wᵀ + b`.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Matrix,
    /// `[out]`.
    pub bias: Option<Tensor<1>>,
}

impl Linear {
    /// `x: [b, s, in]` → `[b, s, out]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, s, n] = x.dims();
        let [out, _] = self.weight.dims();
        let y = self.weight.matmul(x.reshape([b * s, n])).reshape([b, s, out]);
        match &self.bias {
            Some(bias) => y + bias.clone().unsqueeze::<3>(),
            None => y,
        }
    }

    /// [`Linear::forward`] of each of `linears` on the same `x: [b, s, in]`: on the CPU backend with every
    /// weight quantized, one [`QuantWeight::matmul_many`] (a decode step's products in one run of the
    /// threaded build's team), else one forward after another. The results are the same either way.
    pub fn forward_many<const N: usize>(linears: [&Linear; N], x: Tensor<3>) -> [Tensor<3>; N] {
        let [b, s, n] = x.dims();
        let quant: Option<Vec<&QuantWeight>> = linears
            .iter()
            .map(|l| match &l.weight {
                Matrix::Quant(q) => Some(q),
                Matrix::Dense(_) => None,
            })
            .collect();
        let mut ys: Vec<Option<Tensor<2>>> = quant
            .and_then(|ws| QuantWeight::matmul_many(&ws, x.clone().reshape([b * s, n])))
            .map_or_else(Vec::new, |ys| ys.into_iter().map(Some).collect());
        std::array::from_fn(|i| {
            let l = linears[i];
            let Some(y) = ys.get_mut(i).and_then(Option::take) else {
                return l.forward(x.clone());
            };
            let [out, _] = l.weight.dims();
            let y = y.reshape([b, s, out]);
            match &l.bias {
                Some(bias) => y + bias.clone().unsqueeze::<3>(),
                None => y,
            }
        })
    }
}

impl Linear {
    /// `{prefix}.weight` of `shape` `[out, in]` (and `{prefix}.bias` `[out]` when `bias`) from `ckpt`.
    pub fn take(
        ckpt: &mut dyn Tensors,
        prefix: &str,
        shape: [usize; 2],
        bias: bool,
    ) -> Result<Self, LoadError> {
        let weight = ckpt.matrix(&format!("{prefix}.weight"), shape)?;
        let bias = match bias {
            true => Some(ckpt.vector(&format!("{prefix}.bias"), shape[0])?),
            false => None,
        };
        Ok(Self { weight, bias })
    }
}
