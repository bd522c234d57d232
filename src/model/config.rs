//! `config.json` → [`ModelConfig`]: a serde mirror of the Hugging Face fields the Llama family uses, resolved
//! into one config the decoder reads (defaults applied, architecture features decided).
//!
//! Rope settings come either as transformers 4's `rope_theta` + `rope_scaling` or as transformers 5's
//! `rope_parameters` (which holds `rope_theta` and the scaling fields together).

use serde::Deserialize;

/// The architectures the decoder implements (`architectures[0]` / `model_type`).
pub const SUPPORTED: [(&str, &str); 4] = [
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3"),
];

/// `config.json` could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("`config.json` does not parse: {0}")]
    Json(String),
    #[error("unsupported `architectures`/`model_type` {0:?}; kiln supports {list}", list = supported_list())]
    Unsupported(String),
    #[error("model config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|(a, m)| format!("{a} ({m})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mirror of `config.json` (only what the decoder reads; other keys are ignored, as transformers does).
///
/// GGUF metadata is translated into this same mirror (see `loader::gguf_model`), so both formats resolve
/// through one function.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct HfConfig {
    #[serde(default)]
    pub(crate) architectures: Vec<String>,
    #[serde(default)]
    pub(crate) model_type: Option<String>,
    pub(crate) vocab_size: usize,
    pub(crate) hidden_size: usize,
    pub(crate) intermediate_size: usize,
    pub(crate) num_hidden_layers: usize,
    pub(crate) num_attention_heads: usize,
    #[serde(default)]
    pub(crate) num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub(crate) head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub(crate) rms_norm_eps: f64,
    #[serde(default)]
    pub(crate) rope_theta: Option<f64>,
    #[serde(default)]
    pub(crate) rope_scaling: Option<RopeFields>,
    #[serde(default)]
    pub(crate) rope_parameters: Option<RopeFields>,
    #[serde(default = "default_max_pos")]
    pub(crate) max_position_embeddings: usize,
    #[serde(default)]
    pub(crate) tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub(crate) attention_bias: Option<bool>,
    /// Mistral v0.1's sliding attention window; Qwen2 configs carry one too, switched off by
    /// `use_sliding_window: false`.
    #[serde(default)]
    pub(crate) sliding_window: Option<usize>,
    #[serde(default)]
    pub(crate) use_sliding_window: Option<bool>,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_max_pos() -> usize {
    2048
}

/// `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct RopeFields {
    #[serde(default, alias = "type")]
    rope_type: Option<String>,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    factor: Option<f64>,
    #[serde(default)]
    low_freq_factor: Option<f64>,
    #[serde(default)]
    high_freq_factor: Option<f64>,
    #[serde(default)]
    original_max_position_embeddings: Option<usize>,
}

/// Which family the weights come from; decides biases and q/k norms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
}

/// Llama 3.1/3.2's frequency-dependent rope scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
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
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    /// The usable context: `max_position_embeddings`, bounded by an active `sliding_window`.
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (Qwen2, or `attention_bias`).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before rope (Qwen3).
    pub qk_norm: bool,
    /// Per-frequency divisors of the rope inverse frequencies, `[head_dim / 2]`: GGUF's `rope_freqs.weight`,
    /// which llama.cpp's converter writes for Llama 3 scaling instead of the config fields.
    pub rope_factors: Option<Vec<f64>>,
}

impl ModelConfig {
    /// Parses and resolves `config.json`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ConfigError> {
        let c: HfConfig = serde_json::from_slice(bytes).map_err(|e| ConfigError::Json(e.to_string()))?;
        Self::resolve(c)
    }

    /// Resolves the mirror: defaults applied, architecture features decided, every size checked.
    pub(crate) fn resolve(c: HfConfig) -> Result<Self, ConfigError> {
        let name = c
            .architectures
            .first()
            .cloned()
            .or(c.model_type.clone())
            .unwrap_or_default();
        let arch = SUPPORTED
            .iter()
            .position(|(a, m)| *a == name || *m == name || c.model_type.as_deref() == Some(*m))
            .map(|i| [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3][i])
            .ok_or(ConfigError::Unsupported(name))?;
        let positive = |field: &'static str, v: usize| {
            if v == 0 {
                Err(ConfigError::Invalid {
                    field,
                    reason: "must be positive".into(),
                })
            } else {
                Ok(v)
            }
        };
        let num_heads = positive("num_attention_heads", c.num_attention_heads)?;
        let num_kv_heads = positive("num_key_value_heads", c.num_key_value_heads.unwrap_or(num_heads))?;
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(ConfigError::Invalid {
                field: "num_key_value_heads",
                reason: format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            });
        }
        let head_dim = match c.head_dim {
            Some(d) => positive("head_dim", d)?,
            None if c.hidden_size.is_multiple_of(num_heads) => c.hidden_size / num_heads,
            None => {
                return Err(ConfigError::Invalid {
                    field: "hidden_size",
                    reason: format!(
                        "{} is not a multiple of num_attention_heads = {num_heads}",
                        c.hidden_size
                    ),
                });
            }
        };
        if !head_dim.is_multiple_of(2) {
            return Err(ConfigError::Invalid {
                field: "head_dim",
                reason: format!("{head_dim} is odd; rope needs pairs"),
            });
        }
        let rope = c
            .rope_parameters
            .clone()
            .or(c.rope_scaling.clone())
            .unwrap_or_default();
        let rope_theta = rope.rope_theta.or(c.rope_theta).unwrap_or(10_000.0);
        let rope_scaling = match rope.rope_type.as_deref() {
            None | Some("default") => None,
            Some("llama3") => Some(Llama3Scaling {
                factor: rope.factor.unwrap_or(8.0),
                low_freq_factor: rope.low_freq_factor.unwrap_or(1.0),
                high_freq_factor: rope.high_freq_factor.unwrap_or(4.0),
                original_max_position_embeddings: rope.original_max_position_embeddings.unwrap_or(8192),
            }),
            Some(other) => {
                return Err(ConfigError::Invalid {
                    field: "rope_scaling",
                    reason: format!("rope type {other:?} is not supported (default, llama3)"),
                });
            }
        };
        // The decoder attends to the whole context. Within a sliding window that is the same computation, so
        // an active window bounds the usable context instead of being ignored.
        let window = c.sliding_window.filter(|_| c.use_sliding_window.unwrap_or(true));
        let max_position_embeddings = positive("max_position_embeddings", c.max_position_embeddings)?;
        let max_position_embeddings =
            window.map_or(max_position_embeddings, |w| w.min(max_position_embeddings));
        Ok(Self {
            arch,
            vocab_size: positive("vocab_size", c.vocab_size)?,
            hidden_size: positive("hidden_size", c.hidden_size)?,
            intermediate_size: positive("intermediate_size", c.intermediate_size)?,
            num_layers: positive("num_hidden_layers", c.num_hidden_layers)?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: c.rms_norm_eps,
            rope_theta,
            rope_scaling,
            max_position_embeddings: positive("max_position_embeddings", max_position_embeddings)?,
            tie_word_embeddings: c.tie_word_embeddings.unwrap_or(false),
            qkv_bias: arch == Arch::Qwen2 || c.attention_bias.unwrap_or(false),
            qk_norm: arch == Arch::Qwen3,
            rope_factors: None,
        })
    }

    /// Rope inverse frequencies, `[head_dim / 2]`, with Llama 3 scaling applied when configured.
    pub fn inv_freq(&self) -> Vec<f64> {
        let half = self.head_dim / 2;
        (0..half)
            .map(|i| {
                let f = 1.0 / self.rope_theta.powf(2.0 * i as f64 / self.head_dim as f64);
                if let Some(factor) = self.rope_factors.as_ref().and_then(|r| r.get(i)) {
                    return f / factor;
                }
                match self.rope_scaling {
                    None => f,
                    Some(s) => {
                        let old = s.original_max_position_embeddings as f64;
                        let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / s.factor
                        } else {
                            let smooth = (old / wavelen - s.low_freq_factor)
                                / (s.high_freq_factor - s.low_freq_factor);
                            (1.0 - smooth) * f / s.factor + smooth * f
                        }
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#""vocab_size": 32, "hidden_size": 64, "intermediate_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 4"#;

    fn parse(extra: &str) -> Result<ModelConfig, ConfigError> {
        ModelConfig::from_json(format!("{{{BASE}, {extra}}}").as_bytes())
    }

    #[test]
    fn transformers_4_and_5_rope_forms_resolve_alike() {
        let v4 = parse(
            r#""architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
            "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        )
        .unwrap();
        let v5 = parse(
            r#""architectures": ["LlamaForCausalLM"], "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
            "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        )
        .unwrap();
        assert_eq!(v4, v5);
        assert_eq!(v4.rope_theta, 500000.0);
        assert_eq!(v4.rope_scaling.unwrap().factor, 32.0);
        // Llama 2 style `{"type": "linear"}` is not implemented and says so.
        let e =
            parse(r#""model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}"#).unwrap_err();
        assert!(e.to_string().contains("linear"), "{e}");
    }

    #[test]
    fn defaults_and_architecture_features() {
        let q2 = parse(r#""architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 2"#).unwrap();
        assert_eq!(
            (q2.arch, q2.head_dim, q2.num_kv_heads, q2.qkv_bias, q2.qk_norm),
            (Arch::Qwen2, 16, 2, true, false)
        );
        assert_eq!((q2.rope_theta, q2.tie_word_embeddings), (10_000.0, false));
        let q3 = parse(r#""model_type": "qwen3", "head_dim": 32"#).unwrap();
        assert_eq!(
            (q3.arch, q3.head_dim, q3.qk_norm, q3.num_kv_heads),
            (Arch::Qwen3, 32, true, 4)
        );
        let m = parse(
            r#""architectures": ["MistralForCausalLM"], "attention_bias": true, "sliding_window": 1024,
            "max_position_embeddings": 32768"#,
        )
        .unwrap();
        assert!(m.qkv_bias && m.arch == Arch::Mistral);
        assert_eq!(
            m.max_position_embeddings, 1024,
            "an active sliding window bounds the context"
        );
        let q =
            parse(r#""model_type": "qwen2", "sliding_window": 1024, "use_sliding_window": false"#).unwrap();
        assert_eq!(q.max_position_embeddings, 2048, "a disabled window does not");
        let e = parse(r#""model_type": "llama", "num_key_value_heads": 3"#).unwrap_err();
        assert!(e.to_string().contains("num_key_value_heads"), "{e}");
    }

    #[test]
    fn llama3_scaling_keeps_high_divides_low_and_smooths_between() {
        let c = parse(
            r#""model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
            "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}"#,
        )
        .unwrap();
        let plain = ModelConfig {
            rope_scaling: None,
            ..c.clone()
        };
        let ratios: Vec<f64> = plain
            .inv_freq()
            .iter()
            .zip(c.inv_freq())
            .map(|(p, s)| p / s)
            .collect();
        assert!((ratios[0] - 1.0).abs() < 1e-12, "{ratios:?}");
        assert!(ratios[1] > 1.0 && ratios[1] < 8.0, "{ratios:?}");
        assert!(ratios[2..].iter().all(|r| (r - 8.0).abs() < 1e-9), "{ratios:?}");
    }
}
