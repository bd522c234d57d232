//! A multimodal model's vision part as its `config.json` describes it ([`VisionConfig`]): the encoder
//! tower (`vision_config`: a SigLIP/ViT stack), the projector that turns its output into the language
//! model's embedding rows ([`Projector`], chosen by the top level's `model_type`), and the placeholder
//! token those rows stand over. Errors name the field (`vision_config.<field>`, or the top level's).

use serde::Deserialize;

use crate::model::config::{ConfigError, HfConfig, ModelConfig, invalid, positive};

/// The mirror of a `vision_config` (the fields of the SigLIP/CLIP towers multimodal families use).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct VisionFields {
    #[serde(default)]
    pub(crate) model_type: Option<String>,
    #[serde(default)]
    pub(crate) hidden_size: usize,
    #[serde(default)]
    pub(crate) intermediate_size: usize,
    #[serde(default)]
    pub(crate) num_hidden_layers: usize,
    #[serde(default)]
    pub(crate) num_attention_heads: usize,
    #[serde(default)]
    pub(crate) num_channels: Option<usize>,
    #[serde(default)]
    pub(crate) image_size: usize,
    #[serde(default)]
    pub(crate) patch_size: usize,
    #[serde(default)]
    pub(crate) layer_norm_eps: Option<f64>,
    #[serde(default)]
    pub(crate) hidden_act: Option<String>,
}

/// How the encoder's output becomes the language model's embedding rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projector {
    /// Idefics3 / SmolVLM: a pixel shuffle merging `scale_factor`² neighbouring patches into one token
    /// (their features concatenated), then one linear map without bias to the LM's hidden size.
    PixelShuffle { scale_factor: usize },
    /// Gemma 3: the patch grid average-pooled to `tokens_per_image` tokens (a square), an RMSNorm of
    /// each (the soft-embedding norm), then one linear map to the LM's hidden size.
    AvgPool { tokens_per_image: usize },
    /// LLaVA (llama.cpp's `mlp`): the encoder's hidden state after `layer` layers (0: the embeddings),
    /// without its class token's row unless `keep_class`, then two linear maps (with biases where
    /// `bias`) with the erf GELU between them.
    Mlp {
        layer: usize,
        keep_class: bool,
        bias: bool,
    },
}

/// The encoder MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisionAct {
    /// SigLIP's `gelu_pytorch_tanh`.
    GeluTanh,
    /// CLIP's `quick_gelu`: `x · σ(1.702 x)`.
    QuickGelu,
}

/// A multimodal model's vision encoder and projector as its config describes them: the family's vision
/// part (`model::vision`) builds itself from this.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// `siglip_vision_model`, `idefics3_vision`, … (as `config.json` names it, if it does).
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_channels: usize,
    /// The side of the square image the encoder takes, in pixels.
    pub image_size: usize,
    /// The side of a square patch; it divides `image_size`.
    pub patch_size: usize,
    pub layer_norm_eps: f64,
    pub act: VisionAct,
    /// CLIP's embeddings: a class token before the patches (with its own position), a LayerNorm before
    /// the layers (`pre_layrnorm`), and a patch embedding without bias. SigLIP has none of these.
    pub clip: bool,
    pub projector: Projector,
    /// The placeholder token the image's embedding rows stand over in a prompt.
    pub image_token_id: u32,
}

impl VisionConfig {
    /// Resolves `vision_config` of the multimodal config `top` whose language model is `text`: defaults
    /// (3 channels, eps 1e-6 and GELU-tanh as SigLIP's) applied, the projector chosen by the top level's
    /// `model_type`, sizes checked.
    pub(crate) fn resolve(v: &VisionFields, top: &HfConfig, text: &ModelConfig) -> Result<Self, ConfigError> {
        let hidden_size = positive("vision_config.hidden_size", v.hidden_size)?;
        let num_heads = positive("vision_config.num_attention_heads", v.num_attention_heads)?;
        if !hidden_size.is_multiple_of(num_heads) {
            return Err(invalid(
                "vision_config.hidden_size",
                format!("{hidden_size} is not a multiple of num_attention_heads = {num_heads}"),
            ));
        }
        let image_size = positive("vision_config.image_size", v.image_size)?;
        let patch_size = positive("vision_config.patch_size", v.patch_size)?;
        if !image_size.is_multiple_of(patch_size) {
            return Err(invalid(
                "vision_config.patch_size",
                format!("{patch_size} does not divide image_size = {image_size}"),
            ));
        }
        let act = match v.hidden_act.as_deref() {
            None | Some("gelu_pytorch_tanh" | "gelu_tanh") => VisionAct::GeluTanh,
            Some("quick_gelu") => VisionAct::QuickGelu,
            Some(other) => {
                return Err(invalid(
                    "vision_config.hidden_act",
                    format!("{other:?}: kiln's vision encoder implements gelu_pytorch_tanh and quick_gelu"),
                ));
            }
        };
        let num_layers = positive("vision_config.num_hidden_layers", v.num_hidden_layers)?;
        let kind = top
            .model_type
            .as_deref()
            .or(top.architectures.first().map(String::as_str))
            .unwrap_or("");
        let side = image_size / patch_size;
        let (projector, default_image_token) = match kind {
            "idefics3"
            | "smolvlm"
            | "Idefics3ForConditionalGeneration"
            | "SmolVLMForConditionalGeneration" => {
                let scale_factor = positive("scale_factor", top.scale_factor.unwrap_or(2))?;
                if !side.is_multiple_of(scale_factor) {
                    return Err(invalid(
                        "scale_factor",
                        format!("{scale_factor} does not divide the {side} patches per side of the image"),
                    ));
                }
                (Projector::PixelShuffle { scale_factor }, 128_257)
            }
            "gemma3" | "Gemma3ForConditionalGeneration" => {
                let tokens = positive("mm_tokens_per_image", top.mm_tokens_per_image.unwrap_or(256))?;
                let per_side = tokens.isqrt();
                if per_side * per_side != tokens || !side.is_multiple_of(per_side) {
                    return Err(invalid(
                        "mm_tokens_per_image",
                        format!("{tokens} is not a square whose side divides the {side} patches per side"),
                    ));
                }
                (
                    Projector::AvgPool {
                        tokens_per_image: tokens,
                    },
                    262_144,
                )
            }
            "llava" | "LlavaForConditionalGeneration" => (mlp(top, num_layers)?, 32_000),
            other => {
                return Err(invalid(
                    "model_type",
                    format!(
                        "{other:?}: kiln's vision part knows the idefics3 / smolvlm (SmolVLM), gemma3 and llava \
                         projectors"
                    ),
                ));
            }
        };
        let image_token_id = top.image_token_id.unwrap_or(default_image_token);
        if image_token_id as usize >= text.vocab_size {
            return Err(invalid(
                "image_token_id",
                format!(
                    "{image_token_id} is outside the language model's vocabulary of {}",
                    text.vocab_size
                ),
            ));
        }
        Ok(Self {
            model_type: v.model_type.clone(),
            hidden_size,
            intermediate_size: positive("vision_config.intermediate_size", v.intermediate_size)?,
            num_layers,
            num_heads,
            num_channels: positive("vision_config.num_channels", v.num_channels.unwrap_or(3))?,
            image_size,
            patch_size,
            layer_norm_eps: v.layer_norm_eps.unwrap_or(1e-6),
            act,
            clip: v.model_type.as_deref() == Some("clip_vision_model"),
            projector,
            image_token_id,
        })
    }

    /// Patches along one side of the image.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// The embedding rows one image of `image_size`² becomes: its patches, merged by the projector.
    pub fn tokens_per_image(&self) -> usize {
        let side = self.patches_per_side();
        match self.projector {
            Projector::PixelShuffle { scale_factor } => (side / scale_factor).pow(2),
            Projector::AvgPool { tokens_per_image } => tokens_per_image,
            Projector::Mlp { keep_class, .. } => side * side + usize::from(keep_class && self.clip),
        }
    }
}

/// LLaVA's projector from the top level's fields, for an encoder of `layers` layers.
fn mlp(top: &HfConfig, layers: usize) -> Result<Projector, ConfigError> {
    let layer = match &top.vision_feature_layer {
        None => -2,
        Some(serde_json::Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| invalid("vision_feature_layer", format!("{n} is not a whole number")))?,
        Some(other) => {
            return Err(invalid(
                "vision_feature_layer",
                format!("{other}: kiln takes one layer (LLaVA-NeXT's lists of layers are not implemented)"),
            ));
        }
    };
    // `hidden_states` has the embeddings and each layer's output: `layers + 1` entries.
    let states = layers as i64 + 1;
    let index = if layer < 0 { states + layer } else { layer };
    if !(0..states).contains(&index) {
        return Err(invalid(
            "vision_feature_layer",
            format!("{layer} is not one of the encoder's {states} hidden states"),
        ));
    }
    let keep_class = match top.vision_feature_select_strategy.as_deref() {
        None | Some("default") => false,
        Some("full") => true,
        Some(other) => {
            return Err(invalid(
                "vision_feature_select_strategy",
                format!("{other:?}: \"default\" or \"full\""),
            ));
        }
    };
    match top.projector_hidden_act.as_deref() {
        None | Some("gelu") => {}
        Some(other) => {
            return Err(invalid(
                "projector_hidden_act",
                format!("{other:?}: kiln's LLaVA projector implements gelu"),
            ));
        }
    }
    Ok(Projector::Mlp {
        layer: index as usize,
        keep_class,
        bias: top.multimodal_projector_bias.unwrap_or(true),
    })
}
