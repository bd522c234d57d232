//! A vision-language model's vision part ([`Vision`]): the encoder tower shared by the families
//! ([`encoder`]: SigLIP- and CLIP-style ViTs) and the family's projector, which turns the encoder's patches into
//! embedding rows of the language model's width. Those rows stand where the image's placeholder tokens
//! stand in a prompt (a [`Chunk::Rows`](super::Chunk) of `Decoder::prefill`).
//!
//! A multimodal family is chosen by the config's projector ([`Projector`], from the top level's
//! `model_type`) and implements [`VisionFamily`] in its own file of `model::arch` (`idefics3` for
//! SmolVLM, `gemma` for Gemma 3, `llava` for LLaVA): where its tower's, projector's and language model's tensors live in a
//! checkpoint ([`Layout`]s), and its projector.
//! [`assemble`] builds both parts of one checkpoint: the vision part first, then the language model
//! through its family (`model::arch`) under the checkpoint's prefix, so that a tensor neither takes is
//! an error naming it.
//!
//! Images reach the encoder as transformers' image processors make them ([`preprocess`], on Pillow's
//! resampling in [`resize`]), bit for bit.
//!
//! Shapes: `b` images, `C` channels, `S` the image side (`image_size`), `n` patches, `D` the encoder's
//! width, `T` tokens per image, `h` the language model's hidden size.

pub mod config;
pub mod encoder;
pub mod gguf;
pub mod preprocess;
pub mod resize;

use std::fmt::Debug;
use std::sync::Arc;

use burn::tensor::{Device, Tensor};

pub use config::{Projector, VisionConfig};
pub use encoder::Encoder;

use super::config::{ConfigError, ModelConfig};
use super::decoder::Decoder;
use super::input::Attend;
use super::placed::{Placing, Tensors};
use super::text_part::TextPart;
use crate::loader::{LoadError, Weights};

/// Where a multimodal checkpoint keeps its parts' tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The encoder's prefix (`model.vision_model`).
    pub tower: &'static str,
    /// What stands for the language model's `model.` (`model.text_model.`).
    pub text: &'static str,
    /// The language model's `lm_head.weight` (where it has one).
    pub lm_head: &'static str,
    /// The projector's prefix, with its trailing dot (`model.connector.`).
    pub projector: &'static str,
}

/// How transformers' `Gemma3ForConditionalGeneration` and `LlavaForConditionalGeneration` checkpoints
/// name their parts, three ways: the Hub's files (transformers 4), transformers 5's `save_pretrained` (a
/// tower without `vision_model`), and transformers 5's module tree.
pub(crate) const CONDITIONAL_GENERATION: [Layout; 3] = [
    Layout {
        tower: "vision_tower.vision_model",
        text: "language_model.model.",
        lm_head: "language_model.lm_head.weight",
        projector: "multi_modal_projector.",
    },
    Layout {
        tower: "vision_tower",
        text: "language_model.model.",
        lm_head: "language_model.lm_head.weight",
        projector: "multi_modal_projector.",
    },
    Layout {
        tower: "model.vision_tower.vision_model",
        text: "model.language_model.",
        lm_head: "lm_head.weight",
        projector: "model.multi_modal_projector.",
    },
];

/// What a multimodal family adds to its language model (one implementation per family, in
/// `model::arch`).
pub(crate) trait VisionFamily: Sync {
    /// The layouts its checkpoints come in (transformers 4's and 5's names may differ); the first is
    /// what a load expects when none matches.
    fn layouts(&self) -> &'static [Layout];
    /// How an image's rows attend to each other in the language model.
    fn attend(&self) -> Attend;
    /// Takes the projector's tensors from `ckpt` under `layout`.
    fn load_projector(
        &self,
        v: &VisionConfig,
        text: &ModelConfig,
        layout: &Layout,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn Project>, LoadError>;
}

/// The layout of `family` whose patch embedding `ckpt` holds (else its first, whose missing tensor the
/// load then names).
fn layout_of(family: &dyn VisionFamily, ckpt: &dyn Tensors) -> Layout {
    let layouts = family.layouts();
    let probe = |l: &&Layout| ckpt.contains(&format!("{}.embeddings.patch_embedding.weight", l.tower));
    *layouts.iter().find(probe).unwrap_or(&layouts[0])
}

/// A family's projector: the encoder's features `[b, n, D]` → embedding rows `[b, T, h]`.
pub(crate) trait Project: Debug + Send + Sync {
    /// The encoder's features it reads, `[b, n, D]`: the last hidden state (after the final LayerNorm)
    /// unless the family reads another.
    fn features(&self, encoder: &Encoder, pixels: Tensor<4>) -> Tensor<3> {
        encoder.forward(pixels)
    }

    fn forward(&self, features: Tensor<3>) -> Tensor<3>;
}

impl Projector {
    /// The multimodal family this projector belongs to, or an error naming the config's `model_type`
    /// where kiln does not run its vision part yet.
    pub(crate) fn family(&self) -> Result<&'static dyn VisionFamily, ConfigError> {
        match self {
            Projector::PixelShuffle { .. } => Ok(&super::arch::idefics3::Idefics3),
            Projector::AvgPool { .. } => Ok(&super::arch::gemma::Gemma3Vision),
            Projector::Mlp { .. } => Ok(&super::arch::llava::Llava),
        }
    }
}

/// Pixels a vision part cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VisionError {
    #[error(
        "the image's pixel values are {got:?}; the encoder takes [b, {channels}, {side}, {side}] with b > 0"
    )]
    Pixels {
        got: Vec<usize>,
        channels: usize,
        side: usize,
    },
}

/// A multimodal model's vision part on a device.
#[derive(Debug, Clone)]
pub struct Vision {
    pub config: VisionConfig,
    encoder: Encoder,
    projector: Arc<dyn Project>,
    attend: Attend,
}

impl Vision {
    /// `pixels: [b, C, S, S]` (preprocessed: resized, rescaled, normalised) → each image's embedding rows
    /// `[b, T, h]`, to be placed over its `T` placeholder tokens as they are (not scaled).
    pub fn encode(&self, pixels: Tensor<4>) -> Result<Tensor<3>, VisionError> {
        let c = &self.config;
        let [b, ch, hi, wi] = pixels.dims();
        if b == 0 || ch != c.num_channels || hi != c.image_size || wi != c.image_size {
            return Err(VisionError::Pixels {
                got: pixels.dims().to_vec(),
                channels: c.num_channels,
                side: c.image_size,
            });
        }
        Ok(self.projector.forward(self.features(pixels)))
    }

    /// `pixels: [b, C, S, S]` (checked by [`Vision::encode`]) → the encoder's features its projector
    /// reads, `[b, n, D]`.
    pub fn features(&self, pixels: Tensor<4>) -> Tensor<3> {
        self.projector.features(&self.encoder, pixels)
    }

    /// How an image's rows attend to each other in a prompt (`Chunk::Rows`): causal as text (SmolVLM) or
    /// bidirectionally (Gemma 3).
    pub fn attend(&self) -> Attend {
        self.attend
    }

    /// The encoder tower (its intermediate outputs, for tests and benchmarks).
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}

/// Builds a multimodal model from its tensors on `device`: the vision part (encoder, projector), then
/// the language model (`config` without its `vision`) from the rest. A config without `vision` is an
/// error naming `vision_config`.
pub fn assemble(
    config: ModelConfig,
    ckpt: &mut dyn Tensors,
    device: &Device,
) -> Result<(Decoder, Vision), LoadError> {
    let layout = layout_of(vision_of(&config)?.projector.family()?, ckpt);
    assemble_in(config, ckpt, device, layout)
}

/// The vision part of `config`; a text model's is an error naming `vision_config`.
fn vision_of(config: &ModelConfig) -> Result<VisionConfig, ConfigError> {
    config.vision.clone().ok_or_else(|| ConfigError::Invalid {
        field: "vision_config",
        reason: "a text model has no vision part".into(),
    })
}

/// [`assemble`] with the checkpoint's names under `layout`.
pub(crate) fn assemble_in(
    config: ModelConfig,
    ckpt: &mut dyn Tensors,
    device: &Device,
    layout: Layout,
) -> Result<(Decoder, Vision), LoadError> {
    let v = vision_of(&config)?;
    let family = v.projector.family()?;
    let encoder = Encoder::take(ckpt, layout.tower, &v, device)?;
    let projector = family.load_projector(&v, &config, &layout, ckpt)?;
    let text = ModelConfig {
        vision: None,
        ..config
    };
    let mut part = TextPart::new(ckpt, layout.text, layout.lm_head);
    let decoder = Decoder::assemble(text, &mut part, device)?;
    let vision = Vision {
        config: v,
        encoder,
        projector,
        attend: family.attend(),
    };
    Ok((decoder, vision))
}

/// [`assemble`] from a checkpoint whose bytes are all there, placing each tensor as it is taken.
pub fn load(
    config: ModelConfig,
    ckpt: &mut dyn Weights,
    device: &Device,
) -> Result<(Decoder, Vision), LoadError> {
    assemble(config, &mut Placing::new(ckpt, device), device)
}
