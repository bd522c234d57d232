//! A GGUF file as a model: metadata → [`ModelConfig`] (translated by the file's architecture into the
//! mirror of `config.json`, then resolved by the same function), llama.cpp tensor names → Hugging Face
//! names, and the converter's changes undone so that both formats hold the same values: the q/k row
//! permutation of Llama-style files, the `1 + w` of Gemma's norms. Model knowledge, kept in `model/`: the
//! loader reads the file's bytes (`crate::loader::gguf`); this module says what its keys and names mean,
//! reading metadata for the architectures ([`Meta`]) and asking [`Arch`] for what is theirs.
//!
//! llama.cpp's `convert_hf_to_gguf.py` permutes the rows of `q_proj` and `k_proj` (weights and biases) of
//! Llama/Mistral checkpoints so that its interleaved-pair rope applies: within each head of `d` rows, HF row
//! `half·d/2 + i` is stored at row `2i + half`. NeoX-rope families (Qwen, Gemma, Phi-3) keep HF order.

use std::borrow::Cow;
use std::collections::BTreeSet;

use super::ModelConfig;
use super::arch::{Arch, phi3};
use super::config::HfConfig;
use super::layers::rope::RopeScaling;
use crate::loader::gguf::{Gguf, GgufError, TensorInfo};
use crate::loader::quant::GgmlType;
use crate::loader::{LoadError, RawTensor, Weights};

fn meta(key: &str, reason: impl Into<String>) -> LoadError {
    LoadError::Gguf(GgufError::Metadata {
        key: key.into(),
        reason: reason.into(),
    })
}

/// The file's `general.architecture`.
pub fn arch(g: &Gguf<'_>) -> Result<Arch, LoadError> {
    let name = g
        .str("general.architecture")?
        .ok_or_else(|| meta("general.architecture", "is missing"))?;
    Ok(Arch::of_gguf(name)?)
}

/// A file's metadata as an architecture reads it: `<arch>.<key>` values, typed, with errors naming the key.
pub struct Meta<'g, 'a> {
    g: &'g Gguf<'a>,
    arch: String,
}

impl<'g, 'a> Meta<'g, 'a> {
    pub fn new(g: &'g Gguf<'a>) -> Result<Self, LoadError> {
        let arch = g
            .str("general.architecture")?
            .ok_or_else(|| meta("general.architecture", "is missing"))?;
        Ok(Self {
            g,
            arch: arch.to_owned(),
        })
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// An error naming `<arch>.<k>`.
    pub fn error(&self, k: &str, reason: impl Into<String>) -> LoadError {
        meta(&self.key(k), reason)
    }

    pub fn usize(&self, k: &str) -> Result<usize, LoadError> {
        Ok(self.g.usize(&self.key(k))?)
    }

    pub fn opt_usize(&self, k: &str) -> Result<Option<usize>, LoadError> {
        match self.g.get(&self.key(k)) {
            None => Ok(None),
            Some(crate::loader::Value::Array(_)) => Err(self.error(k, "is an array, not a number")),
            Some(_) => Ok(Some(self.usize(k)?)),
        }
    }

    pub fn opt_f64(&self, k: &str) -> Result<Option<f64>, LoadError> {
        match self.g.get(&self.key(k)) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.error(k, format!("{v:?} is not a number"))),
        }
    }

    /// `<arch>.<k>` when it is an array of flags (or numbers, nonzero = true); `None` when absent or a scalar.
    pub fn opt_bools(&self, k: &str) -> Result<Option<Vec<bool>>, LoadError> {
        let Some(crate::loader::Value::Array(a)) = self.g.get(&self.key(k)) else {
            return Ok(None);
        };
        match a {
            crate::loader::Array::Bool(v) => Ok(Some(v.clone())),
            _ => (0..a.len())
                .map(|i| {
                    a.f64_at(i)
                        .map(|x| x != 0.0)
                        .ok_or_else(|| self.error(k, "is not an array of flags"))
                })
                .collect::<Result<_, _>>()
                .map(Some),
        }
    }

    /// `<arch>.<k>` when it is an array of numbers (one per layer); `None` when absent or a scalar.
    pub fn opt_usizes(&self, k: &str) -> Result<Option<Vec<usize>>, LoadError> {
        let Some(crate::loader::Value::Array(a)) = self.g.get(&self.key(k)) else {
            return Ok(None);
        };
        (0..a.len())
            .map(|i| match a.f64_at(i) {
                Some(x) if x >= 0.0 && x.fract() == 0.0 => Ok(x as usize),
                _ => Err(self.error(k, "is not an array of counts")),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    pub fn str(&self, k: &str) -> Result<Option<&'g str>, LoadError> {
        Ok(self.g.str(&self.key(k))?)
    }

    /// The file's tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&'g TensorInfo> {
        self.g.tensor(name)
    }

    /// The keys every architecture shares, as the mirror of a `config.json` of architecture `hf_arch`.
    pub(crate) fn common(&self, hf_arch: &str) -> Result<HfConfig, LoadError> {
        let embed = self
            .tensor("token_embd.weight")
            .ok_or_else(|| LoadError::Missing("token_embd.weight".into()))?;
        let vocab_size = match self.opt_usize("vocab_size")? {
            Some(v) => v,
            None => *embed
                .dims
                .get(1)
                .ok_or_else(|| meta("token_embd.weight", "is not 2-D"))?,
        };
        let heads = self.usize("attention.head_count")?;
        let hidden = self.usize("embedding_length")?;
        let head_dim = self.opt_usize("attention.key_length")?;
        if let (Some(k), Some(v)) = (head_dim, self.opt_usize("attention.value_length")?)
            && k != v
        {
            return Err(self.error(
                "attention.value_length",
                format!("{v} differs from key_length {k}"),
            ));
        }
        let rope_scaling = match self.str("rope.scaling.type")? {
            None | Some("none") => None,
            Some("linear") => Some(crate::model::config::RopeFields {
                rope_type: Some("linear".into()),
                factor: Some(
                    self.opt_f64("rope.scaling.factor")?
                        .ok_or_else(|| self.error("rope.scaling.factor", "is missing for linear scaling"))?,
                ),
                ..Default::default()
            }),
            Some(other) => {
                return Err(self.error(
                    "rope.scaling.type",
                    format!("rope scaling {other:?} is not supported"),
                ));
            }
        };
        let d = head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let partial_rotary_factor = match self.opt_usize("rope.dimension_count")? {
            Some(rot) if d > 0 && rot != d => Some(rot as f64 / d as f64),
            _ => None,
        };
        Ok(HfConfig {
            architectures: vec![hf_arch.to_owned()],
            vocab_size,
            hidden_size: hidden,
            // Per layer in some files (Gemma 4's double-wide MLPs): the widest, each in `ffn_widths`.
            intermediate_size: match self.opt_usizes("feed_forward_length")? {
                Some(w) => w.iter().copied().max().unwrap_or(0),
                None => self.usize("feed_forward_length")?,
            },
            ffn_widths: self.opt_usizes("feed_forward_length")?,
            num_hidden_layers: self.usize("block_count")?,
            num_attention_heads: heads,
            // Per layer in hybrid files (0 for a layer without attention): the attention layers' count.
            num_key_value_heads: match self.opt_usizes("attention.head_count_kv")? {
                Some(per_layer) => per_layer.into_iter().max().filter(|&k| k > 0),
                None => self.opt_usize("attention.head_count_kv")?,
            },
            head_dim,
            rms_norm_eps: Some(
                self.opt_f64("attention.layer_norm_rms_epsilon")?
                    .ok_or_else(|| self.error("attention.layer_norm_rms_epsilon", "is missing"))?,
            ),
            rope_theta: self.opt_f64("rope.freq_base")?,
            rope_scaling,
            partial_rotary_factor,
            max_position_embeddings: Some(self.opt_usize("context_length")?.unwrap_or(2048)),
            tie_word_embeddings: Some(self.tensor("output.weight").is_none()),
            attention_bias: Some(self.tensor("blk.0.attn_q.bias").is_some()),
            sliding_window: self.opt_usize("attention.sliding_window")?,
            ..HfConfig::default()
        })
    }
}

/// Resolves the model config from GGUF metadata and the tensors that belong to the config
/// ([`CONFIG_TENSORS`]: rope frequency factors).
pub fn config(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
    let mut config = config_from_metadata(g)?;
    for name in CONFIG_TENSORS {
        if let Some(info) = g.tensor(name) {
            config_tensor(&mut config, name, info, g.data(info))?;
        }
    }
    Ok(config)
}

/// The tensor of Llama 3 rope frequency factors, which the config consumes.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// Tensors that hold config values rather than weights: Llama 3's `rope_freqs`, LongRoPE's long and short
/// factors. Each is `[rotary_dim / 2]`.
pub const CONFIG_TENSORS: [&str; 3] = [ROPE_FREQS, phi3::ROPE_LONG, phi3::ROPE_SHORT];

/// [`config`] from the metadata alone (a header parsed before the tensor data arrives): without the
/// values of [`CONFIG_TENSORS`], which [`config_tensor`] adds once their bytes are there.
pub fn config_from_metadata(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
    let arch = arch(g)?;
    let hf = arch.gguf_config(&Meta::new(g)?)?;
    Ok(ModelConfig::resolve(hf)?)
}

/// The shape of config tensor `name` under `config`.
pub fn config_tensor_shape(config: &ModelConfig) -> Vec<usize> {
    vec![config.ropes.first().map_or(config.head_dim, |r| r.rotary_dim) / 2]
}

/// Sets the config values held by tensor `name` (one of [`CONFIG_TENSORS`]) from its bytes.
pub fn config_tensor(
    config: &mut ModelConfig,
    name: &str,
    info: &TensorInfo,
    bytes: &[u8],
) -> Result<(), LoadError> {
    let shape = info.shape();
    let expected = config_tensor_shape(config);
    if shape != expected {
        return Err(LoadError::Shape {
            name: name.into(),
            expected,
            actual: shape,
        });
    }
    info.ty.check(bytes).map_err(|e| LoadError::Blocks {
        name: name.into(),
        ty: info.ty.name(),
        reason: e.to_string(),
    })?;
    let values: Vec<f64> = info.ty.dequantize(bytes).into_iter().map(f64::from).collect();
    let Some(rope) = config.ropes.first_mut() else {
        return Ok(());
    };
    match (name, &mut rope.scaling) {
        (phi3::ROPE_LONG, RopeScaling::LongRope(l)) => l.long_factor = values,
        (phi3::ROPE_SHORT, RopeScaling::LongRope(l)) => l.short_factor = values,
        (ROPE_FREQS, _) => rope.factors = Some(values),
        _ => {
            return Err(LoadError::Blocks {
                name: name.into(),
                ty: info.ty.name(),
                reason: "LongRoPE factors in a file whose metadata sets no LongRoPE".into(),
            });
        }
    }
    Ok(())
}

/// What loading undoes of the converter's changes to a file's tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fixups {
    /// `(heads, kv_heads)` when q/k rows must be un-permuted (Llama-style files).
    pub permuted: Option<(usize, usize)>,
    /// Subtracted from every `*norm.weight` (Gemma's `1 + w`).
    pub norm_shift: f32,
    /// The language model's architecture, whose family undoes the rest (`Family::gguf_fix`); `None` in
    /// an mmproj file.
    pub arch: Option<Arch>,
}

/// The [`Fixups`] of file `g` holding a model of `config`.
pub fn fixups(config: &ModelConfig) -> Fixups {
    Fixups {
        permuted: config
            .arch
            .family()
            .gguf_permuted()
            .then_some((config.num_heads, config.num_kv_heads)),
        norm_shift: config.arch.family().gguf_norm_shift(),
        arch: Some(config.arch),
    }
}

/// GGUF tensors seen under Hugging Face names.
pub struct GgufWeights<'g, 'a> {
    file: &'g Gguf<'a>,
    arch: Arch,
    fixups: Fixups,
    taken: BTreeSet<String>,
}

impl<'g, 'a> GgufWeights<'g, 'a> {
    pub fn new(file: &'g Gguf<'a>, config: &ModelConfig) -> Result<Self, LoadError> {
        Ok(Self {
            file,
            arch: config.arch,
            fixups: fixups(config),
            // Consumed by `config`, or parts kiln does not run.
            taken: CONFIG_TENSORS
                .iter()
                .map(|s| s.to_string())
                .chain(
                    file.tensors
                        .iter()
                        .map(|(n, _)| n.clone())
                        .filter(|n| config.arch.family().gguf_ignored(config, n)),
                )
                .collect(),
        })
    }
}

/// The bytes of GGUF tensor `g` (Hugging Face name `hf`) as the model takes them: blocks checked (a NaN
/// or infinite scale is an error naming the tensor), q/k rows un-permuted and norm shifts undone where
/// `fixups` says so, then the family's own changes undone (`Family::gguf_fix`).
pub fn prepare<'b>(
    hf: &str,
    g: &str,
    info: &TensorInfo,
    bytes: &'b [u8],
    fixups: Fixups,
) -> Result<RawTensor<'b>, LoadError> {
    let blocks = |reason: String| LoadError::Blocks {
        name: format!("{g} ({hf})"),
        ty: info.ty.name(),
        reason,
    };
    info.ty.check(bytes).map_err(|e| blocks(e.to_string()))?;
    let shape = info.shape();
    let shifted = fixups
        .arch
        .map_or(g.ends_with("norm.weight"), |a| a.family().gguf_shifted(g));
    let raw = match fixups.norm_shift != 0.0 && shifted {
        true => {
            let shift = fixups.norm_shift;
            let values: Vec<u8> = info
                .ty
                .dequantize(bytes)
                .into_iter()
                .flat_map(|v| (v - shift).to_le_bytes())
                .collect();
            RawTensor {
                ty: GgmlType::F32,
                shape,
                bytes: Cow::Owned(values),
            }
        }
        false => unpermuted(hf, info, bytes, fixups, blocks)?,
    };
    match fixups.arch {
        Some(arch) => arch.family().gguf_fix(hf, raw),
        None => Ok(raw),
    }
}

/// `bytes` of tensor `hf` with q/k rows un-permuted where `fixups` says so.
fn unpermuted<'b>(
    hf: &str,
    info: &TensorInfo,
    bytes: &'b [u8],
    fixups: Fixups,
    blocks: impl Fn(String) -> LoadError,
) -> Result<RawTensor<'b>, LoadError> {
    let shape = info.shape();
    let bytes = match fixups.permuted {
        Some((heads, kv_heads)) if hf.contains("q_proj") || hf.contains("k_proj") => {
            let heads = if hf.contains("q_proj") { heads } else { kv_heads };
            let rows = shape[0];
            if rows == 0 || !bytes.len().is_multiple_of(rows) || !rows.is_multiple_of(2 * heads) {
                return Err(blocks(format!(
                    "its {rows} rows cannot be un-permuted into {heads} heads"
                )));
            }
            Cow::Owned(unpermute(bytes, rows, bytes.len() / rows, heads))
        }
        _ => Cow::Borrowed(bytes),
    };
    Ok(RawTensor {
        ty: info.ty,
        shape,
        bytes,
    })
}

/// Undoes the converter's permutation of `rows` rows of `width` bytes each, `heads` heads each
/// `rows / heads` rows. Rows of a quantized tensor are whole blocks, so this works on any storage type.
fn unpermute(stored: &[u8], rows: usize, width: usize, heads: usize) -> Vec<u8> {
    let d = rows / heads;
    let mut out = vec![0; stored.len()];
    for head in 0..heads {
        for half in 0..2 {
            for i in 0..d / 2 {
                let hf = head * d + half * (d / 2) + i;
                let gg = head * d + 2 * i + half;
                out[hf * width..(hf + 1) * width].copy_from_slice(&stored[gg * width..(gg + 1) * width]);
            }
        }
    }
    out
}

/// The first tensor of `file` (by its GGUF name) not in `taken`.
pub(crate) fn untaken(file: &Gguf<'_>, taken: &BTreeSet<String>) -> Option<String> {
    file.tensors
        .iter()
        .map(|(n, _)| n)
        .find(|n| !taken.contains(*n))
        .cloned()
}

/// Bytes of tensor data in `file`.
pub(crate) fn tensor_bytes(file: &Gguf<'_>) -> u64 {
    file.tensors.iter().map(|(_, t)| t.size()).sum()
}

impl Weights for GgufWeights<'_, '_> {
    fn contains(&self, name: &str) -> bool {
        self.arch
            .family()
            .gguf_name(name)
            .is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let g = self
            .arch
            .family()
            .gguf_name(name)
            .ok_or_else(|| LoadError::Missing(name.into()))?;
        let info = self
            .file
            .tensor(&g)
            .ok_or_else(|| LoadError::Missing(format!("{g} ({name})")))?;
        let shape = info.shape();
        if shape != self.arch.family().gguf_shape(name, expected) {
            return Err(LoadError::Shape {
                name: format!("{g} ({name})"),
                expected: expected.to_vec(),
                actual: shape,
            });
        }
        let raw = prepare(name, &g, info, self.file.data(info), self.fixups)?;
        self.taken.insert(g);
        Ok(raw)
    }

    fn leftover(&self) -> Option<String> {
        untaken(self.file, &self.taken)
    }

    fn total_bytes(&self) -> u64 {
        tensor_bytes(self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways_that_matter() {
        let gguf_name = |hf: &str| Arch::Llama.family().gguf_name(hf);
        let hf_name = |g: &str| Arch::Llama.family().hf_name_of(g);
        assert_eq!(
            gguf_name("model.embed_tokens.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            gguf_name("model.layers.12.self_attn.k_proj.bias").as_deref(),
            Some("blk.12.attn_k.bias")
        );
        assert_eq!(
            gguf_name("model.layers.0.post_attention_layernorm.weight").as_deref(),
            Some("blk.0.ffn_norm.weight")
        );
        assert_eq!(gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq"), None);
        for hf in [
            "model.embed_tokens.weight",
            "lm_head.weight",
            "model.layers.3.self_attn.q_norm.weight",
            "model.layers.0.mlp.down_proj.weight",
        ] {
            assert_eq!(gguf_name(hf).and_then(|g| hf_name(&g)).as_deref(), Some(hf));
        }
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }

    #[test]
    fn unpermute_inverts_the_converters_permutation() {
        // One head of d = 4 rows, width 1: HF rows [a0 a1 b0 b1] (halves a, b) are stored as [a0 b0 a1 b1].
        let stored = [0u8, 2, 1, 3];
        assert_eq!(unpermute(&stored, 4, 1, 1), [0, 1, 2, 3]);
        // Two heads of d = 4, width 2.
        let hf: Vec<u8> = (0..16).collect();
        let mut stored = vec![0; 16];
        for head in 0..2 {
            for half in 0..2 {
                for i in 0..2 {
                    let (h, g) = (head * 4 + half * 2 + i, head * 4 + 2 * i + half);
                    stored[g * 2..g * 2 + 2].copy_from_slice(&hf[h * 2..h * 2 + 2]);
                }
            }
        }
        assert_eq!(unpermute(&stored, 8, 2, 2), hf);
    }
}
