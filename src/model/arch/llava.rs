//! LLaVA (`LlavaForConditionalGeneration`, llava-1.5 and the models built like it; llama.cpp's `mlp`
//! projector): a CLIP encoder (`vision_tower`; a class token, `pre_layrnorm`, quick GELU), whose hidden
//! state after `vision_feature_layer` layers (−2: the second to last, transformers' `hidden_states[-2]`;
//! no final LayerNorm) loses its class token's row (`vision_feature_select_strategy` `default`) and goes
//! through two linear maps with the erf GELU between them (`multi_modal_projector.linear_1`,
//! `linear_2`) to the width of the language model (`language_model`, resolved through its own family
//! from `text_config`). An image of `S`² pixels becomes `(S / p)²` rows (576 for llava-1.5's 336² and
//! patches of 14), each standing over one `<image>` token, not scaled; the rows attend causally.
//!
//! Shapes: `b` images, `t` encoder rows (`n = g²` patches after the class token), `D` the encoder's width,
//! `T` tokens per image (`n`, or `t` with `full`), `h` the LM's hidden size.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::activation::gelu;

use crate::loader::LoadError;
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::input::Attend;
use crate::model::layers::linear::Linear;
use crate::model::placed::Tensors;
use crate::model::vision::{
    CONDITIONAL_GENERATION, Encoder, Layout, Project, Projector, VisionConfig, VisionFamily,
};

/// The LLaVA family's vision part.
pub(crate) struct Llava;

impl VisionFamily for Llava {
    fn layouts(&self) -> &'static [Layout] {
        &CONDITIONAL_GENERATION
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
        let Projector::Mlp {
            layer,
            keep_class,
            bias,
        } = v.projector
        else {
            return Err(ConfigError::Invalid {
                field: "model_type",
                reason: "a LLaVA vision part needs the mlp projector".into(),
            }
            .into());
        };
        let (d, h, p) = (v.hidden_size, text.hidden_size, layout.projector);
        Ok(Arc::new(Mlp {
            linear_1: Linear::take(ckpt, &format!("{p}linear_1"), [h, d], bias)?,
            linear_2: Linear::take(ckpt, &format!("{p}linear_2"), [h, h], bias)?,
            layer,
            // A class token's row to drop (`default`): CLIP's, where the tower has one.
            drop_class: v.clip && !keep_class,
        }))
    }
}

/// The feature selection and the two-layer MLP.
#[derive(Debug, Clone)]
struct Mlp {
    /// `[h, D]`.
    linear_1: Linear,
    /// `[h, h]`.
    linear_2: Linear,
    /// The encoder's hidden state read: after this many layers.
    layer: usize,
    drop_class: bool,
}

impl Project for Mlp {
    fn features(&self, encoder: &Encoder, pixels: Tensor<4>) -> Tensor<3> {
        let x = encoder.hidden(pixels, self.layer);
        match self.drop_class {
            true => {
                let t = x.dims()[1];
                x.narrow(1, 1, t - 1)
            }
            false => x,
        }
    }

    fn forward(&self, features: Tensor<3>) -> Tensor<3> {
        self.linear_2.forward(gelu(self.linear_1.forward(features)))
    }
}
