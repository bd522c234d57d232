//! Idefics3 / SmolVLM (`Idefics3ForConditionalGeneration`, `SmolVLMForConditionalGeneration`): a
//! SigLIP encoder (`model.vision_model`), a connector that pixel-shuffles its patches and maps them
//! linearly to the language model's width (`model.connector.modality_projection.proj`), and a Llama
//! language model (`model.text_model`, resolved through the [`llama`](super::llama) family from
//! `text_config`). An image of `S`² pixels becomes `(S / p / s)²` embedding rows: 64 per 512² tile for
//! SmolVLM (patches of 16, `scale_factor` 4), each standing over one `<image>` token, not scaled.
//!
//! The pixel shuffle, for `g` patches per side and factor `s`: output token `i·(g/s) + j` concatenates
//! the `s × s` block of patches `(i·s + r)·g + (j·s + c)` in the order `(r, c)` row-major, so its feature
//! `(r·s + c)·D + e` is feature `e` of patch `(r, c)` of the block (transformers' `pixel_shuffle`).
//!
//! Shapes: `b` images, `n = g²` patches of `D` features, `T = (g/s)²` tokens, `h` the LM's hidden size.

use std::sync::Arc;

use burn::tensor::Tensor;

use crate::loader::LoadError;
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::input::Attend;
use crate::model::layers::linear::Linear;
use crate::model::placed::Tensors;
use crate::model::vision::{Layout, Project, Projector, VisionConfig, VisionFamily};

/// The Idefics3 family's vision part.
pub(crate) struct Idefics3;

impl VisionFamily for Idefics3 {
    fn layouts(&self) -> &'static [Layout] {
        &[Layout {
            tower: "model.vision_model",
            text: "model.text_model.",
            lm_head: "lm_head.weight",
            projector: "model.connector.",
        }]
    }

    fn attend(&self) -> Attend {
        Attend::Causal
    }

    fn load_projector(
        &self,
        v: &VisionConfig,
        text: &ModelConfig,
        layout: &Layout,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn Project>, LoadError> {
        let Projector::PixelShuffle { scale_factor } = v.projector else {
            return Err(ConfigError::Invalid {
                field: "model_type",
                reason: "an Idefics3 vision part needs the pixel-shuffle projector".into(),
            }
            .into());
        };
        let width = v.hidden_size * scale_factor * scale_factor;
        let proj = Linear::take(
            ckpt,
            &format!("{}modality_projection.proj", layout.projector),
            [text.hidden_size, width],
            false,
        )?;
        Ok(Arc::new(Connector {
            proj,
            side: v.patches_per_side(),
            scale: scale_factor,
        }))
    }
}

/// The pixel shuffle and the projection.
#[derive(Debug, Clone)]
struct Connector {
    /// `[h, D·s²]`, no bias.
    proj: Linear,
    /// Patches per side, `g`.
    side: usize,
    /// `s`.
    scale: usize,
}

impl Connector {
    /// `[b, n, D]` → `[b, T, D·s²]` (the module docs' layout).
    fn shuffle(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, _, d] = x.dims();
        let (g, s) = (self.side, self.scale);
        let k = g / s;
        // Patch (i·s + r)·g + (j·s + c) is element [i, r, j, c] of the grid reshaped [k, s, k, s].
        x.reshape([b, k, s, k, s, d])
            .permute([0, 1, 3, 2, 4, 5])
            .reshape([b, k * k, s * s * d])
    }
}

impl Project for Connector {
    fn forward(&self, hidden: Tensor<3>) -> Tensor<3> {
        self.proj.forward(self.shuffle(hidden))
    }
}
