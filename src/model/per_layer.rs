//! Per-layer embeddings (Gemma 4's E2B/E4B): besides the embedding row that enters the first layer, each
//! token gives every layer an input of its own, `n` features wide, which the layer gates into its output
//! (`model::arch::gemma4`). For positions of ids `t` and first-layer rows `x` (scaled by `√h`):
//!
//! ```text
//! token = table[t] · √n                           reshaped [L, n]
//! model = rmsnorm(proj(x) / √h)                   reshaped [L, n], per layer, weight `norm`
//! input = (model + token) / √2
//! ```
//!
//! The table is as large as the rest of the model together (262 144 × 35 × 256 values in E2B), held in
//! its GGUF blocks and gathered a row per token; beside a GPU it stays in host memory
//! ([`HOST_TABLES`](super::placed::HOST_TABLES)), its rows dequantised there and uploaded, so that it
//! takes none of the device's memory and no storage buffer of its size.
//!
//! Shapes: `b` sequences, `s` positions, `L` layers, `n` the per-layer width, `h` the hidden size.

use burn::tensor::{Device, Tensor};

use super::config::ModelConfig;
use super::layers::linear::{Linear, Matrix};
use super::layers::norm::rms_norm;
use super::placed::Tensors;
use crate::loader::LoadError;

/// Hugging Face ↔ llama.cpp names of the per-layer embeddings' tensors.
pub const NAMES: [(&str, &str); 3] = [
    (
        "model.embed_tokens_per_layer.weight",
        "per_layer_token_embd.weight",
    ),
    (
        "model.per_layer_model_projection.weight",
        "per_layer_model_proj.weight",
    ),
    (
        "model.per_layer_projection_norm.weight",
        "per_layer_proj_norm.weight",
    ),
];

/// The per-layer embeddings' weights.
#[derive(Debug, Clone)]
pub struct PerLayer {
    /// `[V, L·n]`.
    table: Matrix,
    /// `[L·n, h]`.
    proj: Linear,
    /// `[n]`.
    norm: Tensor<1>,
    layers: usize,
    width: usize,
}

impl PerLayer {
    /// The tensors' shapes under `c`, by Hugging Face name (none without per-layer embeddings).
    pub fn shapes(c: &ModelConfig) -> Vec<(String, Vec<usize>)> {
        let Some((vocab, n)) = c.per_layer_input else {
            return Vec::new();
        };
        let (l, h) = (c.num_layers, c.hidden_size);
        vec![
            (NAMES[0].0.to_owned(), vec![vocab, l * n]),
            (NAMES[1].0.to_owned(), vec![l * n, h]),
            (NAMES[2].0.to_owned(), vec![n]),
        ]
    }

    /// Takes the tensors from `ckpt` when `c` has per-layer embeddings.
    pub fn load(c: &ModelConfig, ckpt: &mut dyn Tensors) -> Result<Option<Self>, LoadError> {
        let Some((vocab, n)) = c.per_layer_input else {
            return Ok(None);
        };
        let (l, h) = (c.num_layers, c.hidden_size);
        Ok(Some(Self {
            table: ckpt.matrix(NAMES[0].0, [vocab, l * n])?,
            proj: Linear {
                weight: ckpt.matrix(NAMES[1].0, [l * n, h])?,
                bias: None,
            },
            norm: ckpt.vector(NAMES[2].0, n)?,
            layers: l,
            width: n,
        }))
    }

    /// Every layer's input for the positions of `tokens` (`[b][s]`, ids within the table) whose
    /// first-layer rows are `x: [b, s, h]`: `[b, s, L, n]`.
    pub fn inputs(&self, tokens: &[Vec<u32>], x: Tensor<3>, eps: f64, device: &Device) -> Tensor<4> {
        let [b, s, h] = x.dims();
        let (l, n) = (self.layers, self.width);
        let token = self
            .table
            .rows(tokens, device)
            .mul_scalar((n as f64).sqrt())
            .reshape([b, s, l, n]);
        let model = self
            .proj
            .forward(x)
            .mul_scalar(1.0 / (h as f64).sqrt())
            .reshape([b, s, l, n]);
        let model = rms_norm(model, self.norm.clone(), eps);
        (model + token).mul_scalar(std::f64::consts::FRAC_1_SQRT_2)
    }

    /// The table's vocabulary.
    pub fn vocab(&self) -> usize {
        self.table.dims()[0]
    }

    /// Bytes the weights take on the device (the table none when it stays in host memory).
    pub fn device_bytes(&self) -> usize {
        self.table.device_bytes() + self.proj.weight.device_bytes()
    }
}
