//! The language model of a multimodal checkpoint, read through its own names: [`TextPart`] renames the
//! decoder's `model.*` and `lm_head.weight` to where the checkpoint keeps them (`model.language_model.*`),
//! for a vision-language model whose vision part kiln runs (`model::vision`) and for one whose towers it
//! does not run yet ([`TextOnly`]: Qwen3.5 and Gemma 4, whose checkpoints are all multimodal), loaded as
//! the language model alone with the towers read past. A request with an image for such a model is
//! refused as for any text model.

use burn::tensor::Tensor;

use super::config::HfConfig;
use super::layers::linear::Matrix;
use super::placed::Tensors;
use crate::loader::LoadError;

/// A multimodal checkpoint loaded as its language model: its towers are not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextOnly {
    /// The top level's architecture (`config.json`'s `architectures[0]`).
    pub arch: &'static str,
    /// The top level's `model_type`.
    pub model_type: &'static str,
    /// What stands for the language model's `model.`.
    pub text: &'static str,
    /// The prefixes of the towers' tensors, read past.
    pub towers: &'static [&'static str],
}

/// The multimodal checkpoints kiln reads as their language models (transformers 5's names).
pub const TEXT_ONLY: [TextOnly; 2] = [
    TextOnly {
        arch: "Qwen3_5ForConditionalGeneration",
        model_type: "qwen3_5",
        text: "model.language_model.",
        towers: &["model.visual."],
    },
    TextOnly {
        arch: "Gemma4ForConditionalGeneration",
        model_type: "gemma4",
        text: "model.language_model.",
        towers: &[
            "model.vision_tower.",
            "model.embed_vision.",
            "model.audio_tower.",
            "model.embed_audio.",
        ],
    },
];

impl TextOnly {
    /// The entry of a config whose language model is under `text_config` and whose top level names a
    /// [`TEXT_ONLY`] model.
    pub(crate) fn of(c: &HfConfig) -> Option<Self> {
        c.text_config.as_ref()?;
        TEXT_ONLY.iter().copied().find(|t| match c.architectures.first() {
            Some(a) => a == t.arch,
            None => c.model_type.as_deref() == Some(t.model_type),
        })
    }
}

/// The language model's view of a multimodal checkpoint: its `model.*` and `lm_head.weight` names where
/// the checkpoint keeps them.
pub(crate) struct TextPart<'a> {
    inner: &'a mut dyn Tensors,
    /// What stands for `model.`.
    text: &'static str,
    /// Where `lm_head.weight` is.
    lm_head: &'static str,
}

impl<'a> TextPart<'a> {
    pub(crate) fn new(inner: &'a mut dyn Tensors, text: &'static str, lm_head: &'static str) -> Self {
        Self { inner, text, lm_head }
    }

    fn name(&self, name: &str) -> String {
        match name.strip_prefix("model.") {
            Some(rest) => format!("{}{rest}", self.text),
            None if name == "lm_head.weight" => self.lm_head.to_owned(),
            None => name.to_owned(),
        }
    }
}

impl Tensors for TextPart<'_> {
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(&self.name(name))
    }

    fn vector(&mut self, name: &str, n: usize) -> Result<Tensor<1>, LoadError> {
        let name = self.name(name);
        self.inner.vector(&name, n)
    }

    fn matrix(&mut self, name: &str, shape: [usize; 2]) -> Result<Matrix, LoadError> {
        let name = self.name(name);
        self.inner.matrix(&name, shape)
    }

    fn flat(&mut self, name: &str, shape: &[usize]) -> Result<Tensor<1>, LoadError> {
        let name = self.name(name);
        self.inner.flat(&name, shape)
    }

    fn skip(&mut self, name: &str, shape: &[usize]) -> Result<(), LoadError> {
        let name = self.name(name);
        self.inner.skip(&name, shape)
    }

    fn leftover(&self) -> Option<String> {
        self.inner.leftover()
    }
}
