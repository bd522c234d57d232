//! Checkpoint tensors placed on the device, as the decoder assembles itself from them ([`Tensors`]): 1-D
//! tensors (norms, biases) as f32 vectors, matrices as [`Matrix`] (quantized blocks where the device has a
//! kernel). Two sources: [`Placing`] takes each tensor from a [`Weights`] when the decoder asks for it (a
//! checkpoint whose bytes are all there), [`Staged`] holds tensors placed as they arrived (a file
//! streamed in pieces, in its own order).
//!
//! A table the model only reads by rows and that is as large as the rest of it (Gemma 4's per-layer
//! embeddings, [`HOST_TABLES`]) stays in host memory beside a GPU device: its rows are dequantised on the
//! host and uploaded a few at a time, as llama.cpp keeps its input tables on the CPU.
//!
//! Tensors of higher rank (a vision tower's convolution `[out, in, kh, kw]`) are placed dense in f32 and
//! taken through [`dense`] at the rank the caller names; a matrix used otherwise than as a weight through
//! [`dense_matrix`].
//!
//! Shapes: a vector is `[n]`; a matrix `[out, in]`; a dense tensor any shape, row-major.

use std::collections::BTreeMap;

use burn::backend::DispatchDevice;
use burn::tensor::{Device, Tensor, TensorData};

use super::layers::linear::Matrix;
use crate::kernels::QuantWeight;
use crate::loader::{LoadError, RawTensor, Weights};

/// The tables (by Hugging Face name) read only by rows, kept in host memory on every device.
pub const HOST_TABLES: [&str; 1] = [super::per_layer::NAMES[0].0];

/// Whether the tensor a GGUF file names `gguf_name` stays in host memory beside `device` (a
/// [`HOST_TABLES`] table on a device other than the CPU): it takes none of the device's memory.
pub fn kept_on_host(gguf_name: &str, device: &Device) -> bool {
    super::per_layer::NAMES
        .iter()
        .any(|(hf, gguf)| *gguf == gguf_name && host_table(hf, device))
}

/// Whether the matrix Hugging Face names `name` stays in host memory beside `device`: a [`HOST_TABLES`]
/// table on a device other than the CPU.
fn host_table(name: &str, device: &Device) -> bool {
    !matches!(device.as_dispatch(), DispatchDevice::Flex(_)) && HOST_TABLES.contains(&name)
}

/// Places matrix `name`: a [`HOST_TABLES`] table in host memory ([`QuantWeight::host`]) beside a device
/// other than the CPU, every other matrix as [`Matrix::load`] does.
fn place_matrix(name: &str, raw: &RawTensor<'_>, device: &Device) -> Result<Matrix, LoadError> {
    if host_table(name, device) {
        let [n, k] = [raw.shape[0], raw.shape[1]];
        if let Some(q) = QuantWeight::host(raw.ty, &raw.bytes, n, k) {
            return Ok(Matrix::Quant(q));
        }
    }
    Matrix::load(name, raw, device)
}

/// A tensor on its device.
#[derive(Debug, Clone)]
pub enum Placed {
    /// `[n]` in f32 (boxed: a burn tensor is large beside a matrix handle).
    Vector(Box<Tensor<1>>),
    /// `[out, in]`.
    Matrix(Matrix),
    /// Rank 3 or more, in f32: its elements `[n]` in row-major order, and its shape.
    Dense { flat: Box<Tensor<1>>, shape: Vec<usize> },
}

impl Placed {
    /// Places a checkpoint tensor on `device`: 1-D as a vector, 2-D as a matrix, higher ranks dense. A
    /// tensor of rank 0 is a shape error naming it.
    pub fn new(name: &str, raw: &RawTensor<'_>, device: &Device) -> Result<Self, LoadError> {
        match raw.shape.as_slice() {
            &[_] => Ok(Self::Vector(Box::new(vector(raw, device)))),
            &[_, _] => Ok(Self::Matrix(place_matrix(name, raw, device)?)),
            [] => Err(LoadError::Shape {
                name: name.into(),
                expected: vec![1],
                actual: vec![],
            }),
            shape => Ok(Self::Dense {
                flat: Box::new(vector(raw, device)),
                shape: shape.to_vec(),
            }),
        }
    }

    /// Places a checkpoint tensor of any rank dense in f32 (a matrix used otherwise than as a weight:
    /// see [`dense_matrix`]).
    pub fn dense(raw: &RawTensor<'_>, device: &Device) -> Self {
        Self::Dense {
            flat: Box::new(vector(raw, device)),
            shape: raw.shape.clone(),
        }
    }

    fn dims(&self) -> Vec<usize> {
        match self {
            Self::Vector(v) => v.dims().to_vec(),
            Self::Matrix(m) => m.dims().to_vec(),
            Self::Dense { shape, .. } => shape.clone(),
        }
    }
}

/// Takes tensor `name` of `shape` (rank 1, or 3 and more; a matrix is [`Tensors::matrix`]) from `ckpt` as
/// a dense f32 tensor.
pub fn dense<const D: usize>(
    ckpt: &mut dyn Tensors,
    name: &str,
    shape: [usize; D],
) -> Result<Tensor<D>, LoadError> {
    const { assert!(D != 2, "matrices are taken with `Tensors::matrix`") };
    Ok(ckpt.flat(name, &shape)?.reshape(shape))
}

/// Takes the 2-D tensor `name` of `shape` from `ckpt` as a dense f32 operand: a tensor used otherwise than
/// as a weight's `x · Wᵀ` (Gemma 3's projection, applied as `x · W`), which no kernel reads in blocks.
pub fn dense_matrix(ckpt: &mut dyn Tensors, name: &str, shape: [usize; 2]) -> Result<Tensor<2>, LoadError> {
    Ok(ckpt.flat(name, &shape)?.reshape(shape))
}

/// A 1-D checkpoint tensor (a norm, a bias) as an f32 vector on `device`.
fn vector(raw: &RawTensor<'_>, device: &Device) -> Tensor<1> {
    let n: usize = raw.shape.iter().product();
    Tensor::from_data(TensorData::new(raw.to_f32(), [n]), device)
}

/// The decoder's view of a checkpoint while it assembles itself: tensors by Hugging Face name, on the
/// device, each checked against the shape the config implies.
pub trait Tensors {
    /// Whether the checkpoint holds `name`.
    fn contains(&self, name: &str) -> bool;
    /// The `[n]` tensor `name`.
    fn vector(&mut self, name: &str, n: usize) -> Result<Tensor<1>, LoadError>;
    /// The `[out, in]` tensor `name`.
    fn matrix(&mut self, name: &str, shape: [usize; 2]) -> Result<Matrix, LoadError>;
    /// The elements `[n]` (row-major, f32) of tensor `name` of `shape` ([`dense`] and [`dense_matrix`]
    /// shape them; a matrix a streamed load placed in blocks is an error naming it).
    fn flat(&mut self, name: &str, shape: &[usize]) -> Result<Tensor<1>, LoadError>;
    /// Reads past tensor `name` of `shape` without placing it: a part a checkpoint holds that the model
    /// does not run (Gemma 4's shared layers' own keys and values), so that it is not left over.
    fn skip(&mut self, name: &str, shape: &[usize]) -> Result<(), LoadError>;
    /// The first tensor nobody took, if any.
    fn leftover(&self) -> Option<String>;
}

/// Tensors taken from a [`Weights`] and placed when asked for.
pub struct Placing<'w> {
    weights: &'w mut dyn Weights,
    device: Device,
}

impl<'w> Placing<'w> {
    pub fn new(weights: &'w mut dyn Weights, device: &Device) -> Self {
        Self {
            weights,
            device: device.clone(),
        }
    }
}

impl Tensors for Placing<'_> {
    fn contains(&self, name: &str) -> bool {
        self.weights.contains(name)
    }

    fn vector(&mut self, name: &str, n: usize) -> Result<Tensor<1>, LoadError> {
        Ok(vector(&self.weights.take(name, &[n])?, &self.device))
    }

    fn matrix(&mut self, name: &str, shape: [usize; 2]) -> Result<Matrix, LoadError> {
        let raw = self.weights.take(name, &shape)?;
        place_matrix(name, &raw, &self.device)
    }

    fn flat(&mut self, name: &str, shape: &[usize]) -> Result<Tensor<1>, LoadError> {
        Ok(vector(&self.weights.take(name, shape)?, &self.device))
    }

    fn skip(&mut self, name: &str, shape: &[usize]) -> Result<(), LoadError> {
        self.weights.take(name, shape).map(drop)
    }

    fn leftover(&self) -> Option<String> {
        self.weights.leftover()
    }
}

/// Tensors already placed, by Hugging Face name (each taken once).
#[derive(Debug, Default)]
pub struct Staged {
    tensors: BTreeMap<String, Placed>,
}

impl Staged {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds tensor `name`.
    pub fn insert(&mut self, name: String, tensor: Placed) {
        self.tensors.insert(name, tensor);
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<Placed, LoadError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| LoadError::Missing(name.into()))?;
        if t.dims() != expected {
            return Err(LoadError::Shape {
                name: name.into(),
                expected: expected.to_vec(),
                actual: t.dims(),
            });
        }
        Ok(t)
    }
}

impl Tensors for Staged {
    fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    fn vector(&mut self, name: &str, n: usize) -> Result<Tensor<1>, LoadError> {
        match self.take(name, &[n])? {
            Placed::Vector(v) => Ok(*v),
            _ => unreachable!("a placed tensor of shape [n] is a vector"),
        }
    }

    fn matrix(&mut self, name: &str, shape: [usize; 2]) -> Result<Matrix, LoadError> {
        match self.take(name, &shape)? {
            Placed::Matrix(m) => Ok(m),
            _ => unreachable!("a placed tensor of shape [out, in] is a matrix"),
        }
    }

    fn flat(&mut self, name: &str, shape: &[usize]) -> Result<Tensor<1>, LoadError> {
        match self.take(name, shape)? {
            Placed::Vector(v) => Ok(*v),
            Placed::Dense { flat, .. } => Ok(*flat),
            Placed::Matrix(Matrix::Dense(m)) => Ok(m.reshape([shape.iter().product::<usize>()])),
            Placed::Matrix(m) => Err(LoadError::Shape {
                name: format!("{name} (placed in blocks, needed as a dense f32 operand)"),
                expected: shape.to_vec(),
                actual: m.dims().to_vec(),
            }),
        }
    }

    fn skip(&mut self, name: &str, shape: &[usize]) -> Result<(), LoadError> {
        self.take(name, shape).map(drop)
    }

    fn leftover(&self) -> Option<String> {
        self.tensors.keys().next().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::quant::GgmlType;

    /// A convolution weight `[out, in, kh, kw]` placed as it arrived (a streamed file) is taken back as a
    /// dense tensor, row-major as stored; a wrong shape is an error naming the stored one.
    #[test]
    fn a_rank_4_tensor_is_placed_dense() {
        let device = Device::flex();
        let values: Vec<f32> = (0..2 * 3 * 2 * 2).map(|v| v as f32 * 0.5).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let raw = RawTensor {
            ty: GgmlType::F32,
            shape: vec![2, 3, 2, 2],
            bytes: bytes.into(),
        };
        let mut staged = Staged::new();
        staged.insert(
            "patch.weight".into(),
            Placed::new("patch.weight", &raw, &device).unwrap(),
        );
        let e = dense::<4>(&mut staged, "patch.weight", [2, 3, 4, 1]).unwrap_err();
        assert!(
            matches!(e, LoadError::Shape { ref actual, .. } if *actual == [2, 3, 2, 2]),
            "{e}"
        );
        staged.insert(
            "patch.weight".into(),
            Placed::new("patch.weight", &raw, &device).unwrap(),
        );
        let t = dense::<4>(&mut staged, "patch.weight", [2, 3, 2, 2]).unwrap();
        assert_eq!(t.dims(), [2, 3, 2, 2]);
        let got = t
            .narrow(0, 1, 1)
            .narrow(1, 2, 1)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(got, values[20..24]);
        assert!(staged.leftover().is_none());
        let scalar = RawTensor { shape: vec![], ..raw };
        assert!(Placed::new("s", &scalar, &device).is_err());
    }

    /// A matrix taken as a dense operand: from a streamed load when it was placed in f32 (row-major as
    /// stored); one the CPU backend keeps in blocks (Q8_0) is an error naming it.
    #[test]
    fn a_matrix_is_taken_dense_where_it_is_f32() {
        let device = Device::flex();
        let values: Vec<f32> = (0..2 * 32).map(|v| v as f32).collect();
        let raw = RawTensor {
            ty: GgmlType::F32,
            shape: vec![2, 32],
            bytes: values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        };
        let mut staged = Staged::new();
        staged.insert("proj".into(), Placed::new("proj", &raw, &device).unwrap());
        let t = dense_matrix(&mut staged, "proj", [2, 32]).unwrap();
        assert_eq!(t.into_data().try_to_vec::<f32>().unwrap(), values);
        // One Q8_0 block per row: an f16 scale of 1.0 and 32 bytes.
        let block: Vec<u8> = [0x00, 0x3c].into_iter().chain([1u8; 32]).collect();
        let q8 = RawTensor {
            ty: GgmlType::Q8_0,
            shape: vec![2, 32],
            bytes: [block.clone(), block].concat().into(),
        };
        staged.insert("q".into(), Placed::new("q", &q8, &device).unwrap());
        let e = dense_matrix(&mut staged, "q", [2, 32]).unwrap_err();
        assert!(e.to_string().contains("q (placed in blocks"), "{e}");
    }
}
