//! Checkpoint tensors placed on the device, as the decoder assembles itself from them ([`Tensors`]): 1-D
//! tensors (norms, biases) as f32 vectors, matrices as [`Matrix`] (quantized blocks where the device has a
//! kernel). Two sources: [`Placing`] takes each tensor from a [`Weights`] when the decoder asks for it (a
//! checkpoint whose bytes are all there), [`Staged`] holds tensors placed as they arrived (a file
//! streamed in pieces, in its own order).
//!
//! Shapes: a vector is `[n]`; a matrix `[out, in]`.

use std::collections::BTreeMap;

use burn::tensor::{Device, Tensor, TensorData};

use super::layers::linear::Matrix;
use crate::loader::{LoadError, RawTensor, Weights};

/// A tensor on its device.
#[derive(Debug, Clone)]
pub enum Placed {
    /// `[n]` in f32 (boxed: a burn tensor is large beside a matrix handle).
    Vector(Box<Tensor<1>>),
    /// `[out, in]`.
    Matrix(Matrix),
}

impl Placed {
    /// Places a 1-D or 2-D checkpoint tensor on `device`. Other ranks are a shape error naming the tensor.
    pub fn new(name: &str, raw: &RawTensor<'_>, device: &Device) -> Result<Self, LoadError> {
        match raw.shape.as_slice() {
            &[_] => Ok(Self::Vector(Box::new(vector(raw, device)))),
            &[_, _] => Ok(Self::Matrix(Matrix::load(name, raw, device)?)),
            other => Err(LoadError::Shape {
                name: name.into(),
                expected: vec![],
                actual: other.to_vec(),
            }),
        }
    }

    fn dims(&self) -> Vec<usize> {
        match self {
            Self::Vector(v) => v.dims().to_vec(),
            Self::Matrix(m) => m.dims().to_vec(),
        }
    }
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
        Matrix::load(name, &raw, &self.device)
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
            Placed::Matrix(m) => Err(LoadError::Shape {
                name: name.into(),
                expected: vec![n],
                actual: m.dims().to_vec(),
            }),
        }
    }

    fn matrix(&mut self, name: &str, shape: [usize; 2]) -> Result<Matrix, LoadError> {
        match self.take(name, &shape)? {
            Placed::Matrix(m) => Ok(m),
            Placed::Vector(v) => Err(LoadError::Shape {
                name: name.into(),
                expected: shape.to_vec(),
                actual: v.dims().to_vec(),
            }),
        }
    }

    fn leftover(&self) -> Option<String> {
        self.tensors.keys().next().cloned()
    }
}
