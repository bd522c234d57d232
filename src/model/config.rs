//! The resolved model configuration ([`ModelConfig`]) and the mirror of `config.json` it is resolved from
//! ([`HfConfig`]). The mirror holds the Hugging Face fields of every supported family; which ones matter,
//! and their defaults, is each family's business (`model::arch::<family>`). GGUF metadata is translated into
//! the same mirror, so both formats resolve through one function per family.
//!
//! Rope settings come either as transformers 4's `rope_theta` + `rope_scaling` or as transformers 5's
//! `rope_parameters` (which holds `rope_theta` and the scaling fields together, for Gemma 3 once per layer
//! type: `{"full_attention": {..}, "sliding_attention": {..}}`).

use serde::Deserialize;

pub use super::arch::Arch;
use super::layers::rope::Rope;
use super::text_part::TextOnly;
pub use super::vision::config::VisionConfig;
use super::vision::config::VisionFields;

/// `config.json` could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("`config.json` does not parse: {0}")]
    Json(String),
    #[error("unsupported `architectures`/`model_type` {0:?}; kiln supports {list}", list = super::arch::supported_list())]
    Unsupported(String),
    #[error("model config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// `v`, or an error naming `field` when it is zero.
pub(crate) fn positive(field: &'static str, v: usize) -> Result<usize, ConfigError> {
    if v == 0 {
        return Err(invalid(field, "must be positive"));
    }
    Ok(v)
}

/// The mirror of `config.json` (only what some family reads; other keys are ignored, as transformers does).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct HfConfig {
    #[serde(default)]
    pub(crate) architectures: Vec<String>,
    #[serde(default)]
    pub(crate) model_type: Option<String>,
    #[serde(default)]
    pub(crate) vocab_size: usize,
    #[serde(default)]
    pub(crate) hidden_size: usize,
    #[serde(default)]
    pub(crate) intermediate_size: usize,
    #[serde(default)]
    pub(crate) num_hidden_layers: usize,
    #[serde(default)]
    pub(crate) num_attention_heads: usize,
    #[serde(default)]
    pub(crate) num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub(crate) head_dim: Option<usize>,
    #[serde(default)]
    pub(crate) rms_norm_eps: Option<f64>,
    #[serde(default)]
    pub(crate) rope_theta: Option<f64>,
    #[serde(default)]
    pub(crate) rope_scaling: Option<RopeFields>,
    /// A [`RopeFields`], or one per layer type (`full_attention`, `sliding_attention`).
    #[serde(default)]
    pub(crate) rope_parameters: Option<serde_json::Value>,
    /// Gemma 3's rope base of its sliding-window layers (transformers 4).
    #[serde(default)]
    pub(crate) rope_local_base_freq: Option<f64>,
    #[serde(default)]
    pub(crate) partial_rotary_factor: Option<f64>,
    #[serde(default)]
    pub(crate) max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub(crate) original_max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub(crate) tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub(crate) attention_bias: Option<bool>,
    #[serde(default)]
    pub(crate) sliding_window: Option<usize>,
    #[serde(default)]
    pub(crate) use_sliding_window: Option<bool>,
    /// Qwen2: layers from this index on use the window (when `use_sliding_window`).
    #[serde(default)]
    pub(crate) max_window_layers: Option<usize>,
    /// `"sliding_attention"` / `"full_attention"` per layer (transformers 5 writes it for most families).
    #[serde(default)]
    pub(crate) layer_types: Option<Vec<String>>,
    /// Gemma: every n-th layer is global (`sliding_window_pattern`, or transformers 5's private copy).
    #[serde(default, alias = "_sliding_window_pattern")]
    pub(crate) sliding_window_pattern: Option<usize>,
    #[serde(default)]
    pub(crate) query_pre_attn_scalar: Option<f64>,
    #[serde(default)]
    pub(crate) attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub(crate) final_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub(crate) hidden_activation: Option<String>,
    #[serde(default)]
    pub(crate) hidden_act: Option<String>,
    /// SmolLM3: per layer, 1 when the layer applies rope, 0 when it does not (NoPE).
    #[serde(default)]
    pub(crate) no_rope_layers: Option<Vec<u8>>,
    #[serde(default)]
    pub(crate) no_rope_layer_interval: Option<usize>,
    /// Qwen3.5's Gated DeltaNet: conv taps, key/value head dims and counts.
    #[serde(default)]
    pub(crate) linear_conv_kernel_dim: Option<usize>,
    #[serde(default)]
    pub(crate) linear_key_head_dim: Option<usize>,
    #[serde(default)]
    pub(crate) linear_value_head_dim: Option<usize>,
    #[serde(default)]
    pub(crate) linear_num_key_heads: Option<usize>,
    #[serde(default)]
    pub(crate) linear_num_value_heads: Option<usize>,
    /// Qwen3.5: every n-th layer is full attention, where `layer_types` is not given.
    #[serde(default)]
    pub(crate) full_attention_interval: Option<usize>,
    /// Not a `config.json` field: a GGUF file's delta-rule value heads are tiled (llama.cpp's order).
    #[serde(skip)]
    pub(crate) delta_tiled: Option<bool>,
    /// Gemma 4: per-layer overrides (`{"3": {"head_dim": 512}}`), or the size of full-attention layers'
    /// heads and their key-value heads that transformers derives them from.
    #[serde(default)]
    pub(crate) per_layer_config: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) global_head_dim: Option<usize>,
    #[serde(default)]
    pub(crate) num_global_key_value_heads: Option<usize>,
    #[serde(default)]
    pub(crate) attention_k_eq_v: Option<bool>,
    /// Gemma 4: the last this many layers attend to an earlier layer's keys and values.
    #[serde(default)]
    pub(crate) num_kv_shared_layers: Option<usize>,
    /// Gemma 4: the layers sharing keys and values have MLPs twice as wide.
    #[serde(default)]
    pub(crate) use_double_wide_mlp: Option<bool>,
    /// Gemma 4's per-layer embeddings: the width of each layer's input, and the vocabulary of its table.
    #[serde(default)]
    pub(crate) hidden_size_per_layer_input: Option<usize>,
    #[serde(default)]
    pub(crate) vocab_size_per_layer_input: Option<usize>,
    /// Not a `config.json` field: a GGUF file's MLP width per layer.
    #[serde(skip)]
    pub(crate) ffn_widths: Option<Vec<usize>>,
    /// LFM2: the RMSNorms' epsilon (its name for `rms_norm_eps`).
    #[serde(default)]
    pub(crate) norm_eps: Option<f64>,
    /// LFM2: the short convolutions' taps.
    #[serde(default, rename = "conv_L_cache")]
    pub(crate) conv_l_cache: Option<usize>,
    #[serde(default)]
    pub(crate) conv_bias: Option<bool>,
    /// LFM2: the indices of the attention layers (the others are conv blocks), where `layer_types` is not
    /// given.
    #[serde(default)]
    pub(crate) full_attn_idxs: Option<Vec<usize>>,
    /// LFM2's MLP width before `block_auto_adjust_ff_dim` (older configs; else `intermediate_size`).
    #[serde(default)]
    pub(crate) block_ff_dim: Option<usize>,
    #[serde(default)]
    pub(crate) block_auto_adjust_ff_dim: Option<bool>,
    #[serde(default)]
    pub(crate) block_ffn_dim_multiplier: Option<f64>,
    #[serde(default)]
    pub(crate) block_multiple_of: Option<usize>,
    /// A multimodal model's language model (`Gemma3ForConditionalGeneration`, `Idefics3…`): its fields
    /// are read from here, the top level naming the whole model.
    #[serde(default)]
    pub(crate) text_config: Option<Box<HfConfig>>,
    /// A multimodal model's vision encoder.
    #[serde(default)]
    pub(crate) vision_config: Option<VisionFields>,
    /// A multimodal model's placeholder token of image features (Gemma 3: `image_token_index`).
    #[serde(default, alias = "image_token_index")]
    pub(crate) image_token_id: Option<u32>,
    /// Gemma 3: the embedding rows of one image.
    #[serde(default)]
    pub(crate) mm_tokens_per_image: Option<usize>,
    /// Idefics3 / SmolVLM: the pixel shuffle's factor (patches per side merged into one token).
    #[serde(default)]
    pub(crate) scale_factor: Option<usize>,
    /// LLaVA: the encoder's hidden state the projector reads (`-2`: the second to last).
    #[serde(default)]
    pub(crate) vision_feature_layer: Option<serde_json::Value>,
    /// LLaVA: `default` (the class token's row dropped) or `full`.
    #[serde(default)]
    pub(crate) vision_feature_select_strategy: Option<String>,
    /// LLaVA: the activation between the projector's two linear maps.
    #[serde(default)]
    pub(crate) projector_hidden_act: Option<String>,
    /// LLaVA: whether the projector's linear maps have biases.
    #[serde(default)]
    pub(crate) multimodal_projector_bias: Option<bool>,
    /// Not a `config.json` field: a GGUF file of a fused-qkv family that stores q, k and v apart.
    #[serde(skip)]
    pub(crate) split_qkv: Option<bool>,
}

/// `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct RopeFields {
    #[serde(default, alias = "type")]
    pub(crate) rope_type: Option<String>,
    #[serde(default)]
    pub(crate) rope_theta: Option<f64>,
    #[serde(default)]
    pub(crate) factor: Option<f64>,
    #[serde(default)]
    pub(crate) low_freq_factor: Option<f64>,
    #[serde(default)]
    pub(crate) high_freq_factor: Option<f64>,
    #[serde(default)]
    pub(crate) original_max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub(crate) short_factor: Option<Vec<f64>>,
    #[serde(default)]
    pub(crate) long_factor: Option<Vec<f64>>,
    #[serde(default)]
    pub(crate) attention_factor: Option<f64>,
    #[serde(default)]
    pub(crate) partial_rotary_factor: Option<f64>,
}

impl HfConfig {
    /// The language model's fields: the nested `text_config` of a multimodal model (the top level's
    /// `tie_word_embeddings` inherited where it does not say; a `text_config` naming no architecture or
    /// `model_type` is refused naming the top level's), else the config itself.
    fn text_part(&self) -> Result<HfConfig, ConfigError> {
        let Some(text) = &self.text_config else {
            return Ok(self.clone());
        };
        if text.architectures.is_empty() && text.model_type.is_none() {
            let top = self.architectures.first().or(self.model_type.as_ref());
            return Err(ConfigError::Unsupported(format!(
                "{} (its `text_config` names no `model_type`)",
                top.map_or("", String::as_str)
            )));
        }
        let mut text = (**text).clone();
        text.tie_word_embeddings = text.tie_word_embeddings.or(self.tie_word_embeddings);
        Ok(text)
    }

    /// The rope fields of the layers of `layer_type` (`full_attention` / `sliding_attention`): transformers
    /// 5's `rope_parameters` (per layer type or shared), else transformers 4's `rope_scaling`.
    pub(crate) fn rope_fields(&self, layer_type: &str) -> Result<Option<RopeFields>, ConfigError> {
        let parse = |v: &serde_json::Value| {
            RopeFields::deserialize(v).map_err(|e| invalid("rope_parameters", e.to_string()))
        };
        match &self.rope_parameters {
            Some(serde_json::Value::Object(m))
                if m.contains_key("full_attention") || m.contains_key("sliding_attention") =>
            {
                m.get(layer_type).map(parse).transpose()
            }
            Some(serde_json::Value::Null) | None => Ok(self.rope_scaling.clone()),
            Some(v) => parse(v).map(Some),
        }
    }
}

/// The gate activation of the MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `silu(gate) · up` (Llama, Qwen, Phi, SmolLM3).
    Silu,
    /// `gelu_tanh(gate) · up` (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// How one decoder layer attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerKind {
    /// The sliding window: a query at position `i` sees keys `j` with `i - window < j <= i`; `None` attends
    /// to the whole context.
    pub window: Option<usize>,
    /// The index into [`ModelConfig::ropes`] of the rope this layer applies to q and k; `None` for a layer
    /// without positional encoding (SmolLM3's NoPE layers).
    pub rope: Option<usize>,
    /// What the layer keeps of the positions it has seen (chosen by its family).
    pub cache: CacheKind,
}

/// What one layer keeps of the positions it has seen: the seam through which the runner, `n > 1` forks
/// and the prefix cache handle every layer (`model::layers::kv_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Its own keys and values for every position (a windowed layer too: its window is a mask over them).
    Kv,
    /// The keys and values of the earlier layer `from` (which holds its own), appended by that layer in
    /// the same forward; the layer keeps nothing itself.
    SharedKv { from: usize },
    /// A short causal convolution's last `width − 1` inputs of `channels` channels (LFM2's conv blocks):
    /// a fixed-size state, `[b, width − 1, channels]` f32.
    Conv { channels: usize, width: usize },
    /// A gated delta rule's state (Qwen3.5's Gated DeltaNet): its causal convolution's last `width − 1`
    /// inputs of `channels` channels, and the matrix `S` of each of `heads` value heads, `[key_dim,
    /// value_dim]`, f32 (`model::layers::state`).
    Delta {
        channels: usize,
        width: usize,
        heads: usize,
        key_dim: usize,
        value_dim: usize,
    },
}

impl CacheKind {
    /// Whether the layer keeps a fixed-size state rather than keys and values per position.
    pub fn is_recurrent(self) -> bool {
        matches!(self, Self::Conv { .. } | Self::Delta { .. })
    }
}

/// The resolved configuration the decoder is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    /// The rope tables the layers index into (Gemma 3: global and local).
    pub ropes: Vec<Rope>,
    /// One per layer.
    pub layers: Vec<LayerKind>,
    /// The context length: the positions rope tables are built for.
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (Qwen2, or `attention_bias`).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before rope (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// q, k and v come from one `qkv_proj` (Phi-3).
    pub fused_qkv: bool,
    /// gate and up come from one `gate_up_proj`, gate rows first (Phi-3).
    pub fused_gate_up: bool,
    /// Convolution blocks carry biases (LFM2's `conv_bias`).
    pub conv_bias: bool,
    /// The q projection gives each head's queries then its output gate, `sigmoid(gate)` multiplying the
    /// head's attention output (Qwen3.5).
    pub attn_output_gate: bool,
    /// Delta-rule layers' value heads are in llama.cpp's tiled order (a GGUF file), not Hugging Face's
    /// grouped order (`kernels::delta`).
    pub delta_tiled: bool,
    /// Per layer `(key-value heads, head dim)` where they differ between layers (Gemma 4's full-attention
    /// layers); empty when every layer has `(num_kv_heads, head_dim)` ([`ModelConfig::attn_dims`]).
    pub layer_attn: Vec<(usize, usize)>,
    /// Per layer MLP width where it differs between layers (Gemma 4's double-wide MLPs); empty when every
    /// layer's is `intermediate_size` ([`ModelConfig::ffn_width`]).
    pub layer_ffn: Vec<usize>,
    /// Values are RMS-normalised per head without a weight before they are cached (Gemma 4).
    pub v_norm: bool,
    /// Per-layer embeddings (Gemma 4): `(vocabulary, width)` of each layer's extra input.
    pub per_layer_input: Option<(usize, usize)>,
    /// The factor of the attention scores `q · k` (`1/√head_dim`, Gemma's `query_pre_attn_scalar^-½`).
    pub attn_scale: f64,
    /// `cap · tanh(scores / cap)` of the attention scores (Gemma 2).
    pub attn_softcap: Option<f64>,
    /// `cap · tanh(logits / cap)` of the final logits (Gemma 2).
    pub final_softcap: Option<f64>,
    /// The factor of the embeddings (Gemma: `√hidden`).
    pub embed_scale: Option<f64>,
    pub act: Act,
    /// A multimodal model's vision encoder (its `vision_config`), `None` for a text model.
    pub vision: Option<VisionConfig>,
    /// A multimodal checkpoint read as its language model alone (`model::text_part`).
    pub text_only: Option<TextOnly>,
}

impl ModelConfig {
    /// Parses and resolves `config.json`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ConfigError> {
        let c: HfConfig = serde_json::from_slice(bytes).map_err(|e| ConfigError::Json(e.to_string()))?;
        Self::resolve(c)
    }

    /// Resolves the mirror through its family: defaults applied, architecture features decided, every size
    /// checked.
    pub(crate) fn resolve(c: HfConfig) -> Result<Self, ConfigError> {
        let text = c.text_part()?;
        let arch = Arch::of(&text)?;
        let mut config = arch.family().resolve(&text)?;
        config.text_only = TextOnly::of(&c);
        config.vision = match (&c.vision_config, config.text_only) {
            (Some(v), None) => Some(VisionConfig::resolve(v, &c, &config)?),
            _ => None,
        };
        config.check()?;
        Ok(config)
    }

    /// The checks every family's result must pass.
    fn check(&self) -> Result<(), ConfigError> {
        if self.layers.len() != self.num_layers {
            return Err(invalid(
                "layer_types",
                format!("{} entries for {} layers", self.layers.len(), self.num_layers),
            ));
        }
        for (i, kind) in self.layers.iter().enumerate() {
            if let CacheKind::SharedKv { from } = kind.cache
                && (from >= i || self.layers[from].cache != CacheKind::Kv)
            {
                return Err(invalid(
                    "layer_types",
                    format!(
                        "layer {i} shares the keys and values of layer {from}, which holds none before it"
                    ),
                ));
            }
            if kind.window == Some(0) {
                return Err(invalid("sliding_window", "must be positive"));
            }
            if let Some(r) = kind.rope
                && r >= self.ropes.len()
            {
                return Err(invalid(
                    "rope_parameters",
                    format!("layer rope {r} is not defined"),
                ));
            }
        }
        for (r, rope) in self.ropes.iter().enumerate() {
            // Against the heads of the layers that apply it.
            let mut dims: Vec<usize> = (0..self.num_layers)
                .filter(|&i| self.layers[i].rope == Some(r))
                .map(|i| self.attn_dims(i).1)
                .collect();
            if dims.is_empty() {
                dims.push(self.head_dim);
            }
            for d in dims {
                rope.check(d)?;
            }
        }
        Ok(())
    }

    /// The layers' common settings resolved from the mirror: sizes, heads, head_dim, eps, context, tied
    /// embeddings; one rope (from the shared rope fields), every layer full attention with it.
    pub(crate) fn base(arch: Arch, c: &HfConfig, default_eps: f64) -> Result<Self, ConfigError> {
        let num_heads = positive("num_attention_heads", c.num_attention_heads)?;
        let num_kv_heads = positive("num_key_value_heads", c.num_key_value_heads.unwrap_or(num_heads))?;
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(invalid(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        let head_dim = match c.head_dim {
            Some(d) => positive("head_dim", d)?,
            None if c.hidden_size.is_multiple_of(num_heads) => c.hidden_size / num_heads,
            None => {
                return Err(invalid(
                    "hidden_size",
                    format!(
                        "{} is not a multiple of num_attention_heads = {num_heads}",
                        c.hidden_size
                    ),
                ));
            }
        };
        let max_position_embeddings = positive(
            "max_position_embeddings",
            c.max_position_embeddings.unwrap_or(2048),
        )?;
        let num_layers = positive("num_hidden_layers", c.num_hidden_layers)?;
        let rope = Rope::resolve(c, "full_attention", head_dim, c.rope_theta.unwrap_or(10_000.0))?;
        Ok(Self {
            arch,
            vocab_size: positive("vocab_size", c.vocab_size)?,
            hidden_size: positive("hidden_size", c.hidden_size)?,
            intermediate_size: positive("intermediate_size", c.intermediate_size)?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: c.rms_norm_eps.unwrap_or(default_eps),
            ropes: vec![rope],
            layers: vec![
                LayerKind {
                    window: None,
                    rope: Some(0),
                    cache: CacheKind::Kv,
                };
                num_layers
            ],
            max_position_embeddings,
            tie_word_embeddings: c.tie_word_embeddings.unwrap_or(false),
            qkv_bias: c.attention_bias.unwrap_or(false),
            qk_norm: false,
            fused_qkv: false,
            fused_gate_up: false,
            conv_bias: false,
            attn_output_gate: false,
            delta_tiled: false,
            layer_attn: Vec::new(),
            layer_ffn: Vec::new(),
            v_norm: false,
            per_layer_input: None,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            embed_scale: None,
            act: Act::Silu,
            vision: None,
            text_only: None,
        })
    }

    /// Sets each layer's window from `layer_types` when the config lists them (`sliding_attention` layers
    /// get `window`), else from `sliding(i)`.
    pub(crate) fn set_windows(
        &mut self,
        c: &HfConfig,
        window: Option<usize>,
        sliding: impl Fn(usize) -> bool,
    ) -> Result<(), ConfigError> {
        let types = c.layer_types.as_ref();
        if let Some(t) = types
            && t.len() != self.num_layers
        {
            return Err(invalid(
                "layer_types",
                format!("{} entries for num_hidden_layers = {}", t.len(), self.num_layers),
            ));
        }
        for (i, kind) in self.layers.iter_mut().enumerate() {
            let is_sliding = match types {
                Some(t) => match t[i].as_str() {
                    "sliding_attention" => true,
                    "full_attention" => false,
                    other => return Err(invalid("layer_types", format!("unknown layer type {other:?}"))),
                },
                None => sliding(i),
            };
            kind.window = match (is_sliding, window) {
                (false, _) => None,
                (true, None) => return Err(invalid("sliding_window", "sliding layers need a window")),
                (true, Some(w)) => Some(positive("sliding_window", w)?),
            };
        }
        // A window that spans the whole context is full attention (Phi-3.5 and Phi-4-mini configs carry a
        // window of twice their context).
        let max = self.max_position_embeddings;
        for kind in &mut self.layers {
            kind.window = kind.window.filter(|&w| w < max);
        }
        Ok(())
    }

    /// Layer `i`'s `(key-value heads, head dim)`.
    pub fn attn_dims(&self, i: usize) -> (usize, usize) {
        self.layer_attn
            .get(i)
            .copied()
            .unwrap_or((self.num_kv_heads, self.head_dim))
    }

    /// Layer `i`'s MLP width.
    pub fn ffn_width(&self, i: usize) -> usize {
        self.layer_ffn.get(i).copied().unwrap_or(self.intermediate_size)
    }

    /// Whether some layer attends through a sliding window.
    pub fn has_window(&self) -> bool {
        self.layers.iter().any(|l| l.window.is_some())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
