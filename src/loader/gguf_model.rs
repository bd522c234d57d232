//! A GGUF file as a Llama-family model: metadata → [`ModelConfig`] (through the same resolver as
//! `config.json`), and llama.cpp tensor names → Hugging Face names, with the converter's q/k row permutation
//! undone for `llama`-architecture files.
//!
//! llama.cpp's `convert_hf_to_gguf.py` permutes the rows of `q_proj` and `k_proj` (weights and biases) of
//! Llama/Mistral checkpoints so that its interleaved-pair rope applies: within each head of `d` rows, HF row
//! `half·d/2 + i` is stored at row `2i + half`. Qwen2/Qwen3 files keep HF order (llama.cpp uses NeoX rope
//! for them).

use std::borrow::Cow;
use std::collections::BTreeSet;

use super::gguf::{Gguf, GgufError, TensorInfo};
use super::{LoadError, RawTensor, Weights};
use crate::model::ModelConfig;
use crate::model::config::HfConfig;

/// GGUF `general.architecture` → the Hugging Face architecture it resolves as.
const ARCHS: [(&str, &str); 3] = [
    ("llama", "LlamaForCausalLM"),
    ("qwen2", "Qwen2ForCausalLM"),
    ("qwen3", "Qwen3ForCausalLM"),
];

fn meta(key: &str, reason: impl Into<String>) -> LoadError {
    LoadError::Gguf(GgufError::Metadata {
        key: key.into(),
        reason: reason.into(),
    })
}

/// Resolves the model config from GGUF metadata (`<arch>.*` keys) and, for Llama 3 rope scaling, the
/// `rope_freqs.weight` tensor.
pub fn config(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
    let mut config = config_from_metadata(g)?;
    if let Some(info) = g.tensor(ROPE_FREQS) {
        rope_factors(&mut config, info, g.data(info))?;
    }
    Ok(config)
}

/// The tensor of Llama 3 rope frequency factors, which the config consumes.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// [`config`] from the metadata alone (a header parsed before the tensor data arrives): without the rope
/// factors of `rope_freqs.weight`, which [`rope_factors`] adds once its bytes are there.
pub fn config_from_metadata(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
    let arch = g
        .str("general.architecture")?
        .ok_or_else(|| meta("general.architecture", "is missing"))?;
    let hf_arch = ARCHS
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, hf)| hf.to_string())
        .ok_or_else(|| crate::model::ConfigError::Unsupported(format!("GGUF architecture `{arch}`")))?;
    let key = |k: &str| format!("{arch}.{k}");
    let opt_usize = |k: &str| -> Result<Option<usize>, LoadError> {
        match g.get(&key(k)) {
            None => Ok(None),
            Some(_) => Ok(Some(g.usize(&key(k))?)),
        }
    };
    let opt_f64 = |k: &str| -> Result<Option<f64>, LoadError> {
        match g.get(&key(k)) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| meta(&key(k), format!("{v:?} is not a number"))),
        }
    };
    let embed = g
        .tensor("token_embd.weight")
        .ok_or_else(|| LoadError::Missing("token_embd.weight".into()))?;
    let vocab_size = match opt_usize("vocab_size")? {
        Some(v) => v,
        None => *embed
            .dims
            .get(1)
            .ok_or_else(|| meta("token_embd.weight", "is not 2-D"))?,
    };
    let heads = g.usize(&key("attention.head_count"))?;
    let head_dim = opt_usize("attention.key_length")?;
    if let (Some(k), Some(v)) = (head_dim, opt_usize("attention.value_length")?)
        && k != v
    {
        return Err(meta(
            &key("attention.value_length"),
            format!("{v} differs from key_length {k}"),
        ));
    }
    match g.str(&key("rope.scaling.type"))? {
        None | Some("none") => {}
        Some(other) => {
            return Err(meta(
                &key("rope.scaling.type"),
                format!("rope scaling {other:?} is not supported"),
            ));
        }
    }
    let hf = HfConfig {
        architectures: vec![hf_arch],
        vocab_size,
        hidden_size: g.usize(&key("embedding_length"))?,
        intermediate_size: g.usize(&key("feed_forward_length"))?,
        num_hidden_layers: g.usize(&key("block_count"))?,
        num_attention_heads: heads,
        num_key_value_heads: opt_usize("attention.head_count_kv")?,
        head_dim,
        rms_norm_eps: opt_f64("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| meta(&key("attention.layer_norm_rms_epsilon"), "is missing"))?,
        rope_theta: opt_f64("rope.freq_base")?,
        max_position_embeddings: opt_usize("context_length")?.unwrap_or(2048),
        tie_word_embeddings: Some(g.tensor("output.weight").is_none()),
        attention_bias: Some(g.tensor("blk.0.attn_q.bias").is_some()),
        sliding_window: opt_usize("attention.sliding_window")?,
        ..HfConfig::default()
    };
    let config = ModelConfig::resolve(hf)?;
    if let Some(rot) = opt_usize("rope.dimension_count")?
        && rot != config.head_dim
    {
        return Err(meta(
            &key("rope.dimension_count"),
            format!(
                "partial rotary ({rot} of head_dim {}) is not supported",
                config.head_dim
            ),
        ));
    }
    Ok(config)
}

/// Sets `config.rope_factors` from the bytes of `rope_freqs.weight` (`[head_dim / 2]`).
pub fn rope_factors(config: &mut ModelConfig, info: &TensorInfo, bytes: &[u8]) -> Result<(), LoadError> {
    let shape = info.shape();
    if shape != [config.head_dim / 2] {
        return Err(LoadError::Shape {
            name: ROPE_FREQS.into(),
            expected: vec![config.head_dim / 2],
            actual: shape,
        });
    }
    info.ty.check(bytes).map_err(|e| LoadError::Blocks {
        name: ROPE_FREQS.into(),
        ty: info.ty.name(),
        reason: e.to_string(),
    })?;
    let factors = info.ty.dequantize(bytes);
    config.rope_factors = Some(factors.into_iter().map(f64::from).collect());
    Ok(())
}

/// GGUF tensors seen under Hugging Face names.
pub struct GgufWeights<'g, 'a> {
    file: &'g Gguf<'a>,
    /// `(heads, kv_heads)` when q/k rows must be un-permuted (`llama` files).
    permuted: Option<(usize, usize)>,
    taken: BTreeSet<String>,
}

impl<'g, 'a> GgufWeights<'g, 'a> {
    pub fn new(file: &'g Gguf<'a>, config: &ModelConfig) -> Result<Self, LoadError> {
        Ok(Self {
            file,
            permuted: permutation(file, config)?,
            // Consumed by `config` (rope factors).
            taken: BTreeSet::from([ROPE_FREQS.to_owned()]),
        })
    }
}

/// `(heads, kv_heads)` when the file's q/k rows are permuted (`llama` files), for [`prepare`].
pub fn permutation(g: &Gguf<'_>, config: &ModelConfig) -> Result<Option<(usize, usize)>, LoadError> {
    let llama = g_arch(g)? == "llama";
    Ok(llama.then_some((config.num_heads, config.num_kv_heads)))
}

fn g_arch<'g>(g: &'g Gguf<'_>) -> Result<&'g str, LoadError> {
    g.str("general.architecture")?
        .ok_or_else(|| meta("general.architecture", "is missing"))
}

/// The llama.cpp name of a Hugging Face tensor name.
pub fn gguf_name(hf: &str) -> Option<String> {
    if let Some((_, g)) = GLOBAL.iter().find(|(h, _)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (part, kind) = rest.rsplit_once('.')?;
    let (_, g) = LAYER.iter().find(|(h, _)| *h == part)?;
    Some(format!("blk.{layer}.{g}.{kind}"))
}

/// Hugging Face → llama.cpp names of the model-wide tensors.
const GLOBAL: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// Hugging Face → llama.cpp names of a layer's tensors (the part between `layers.{i}.` and `.weight`).
const LAYER: [(&str, &str); 11] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// The bytes of GGUF tensor `g` (Hugging Face name `hf`) as the model takes them: blocks checked (a NaN
/// or infinite scale is an error naming the tensor), q/k rows un-permuted where `permuted` says so.
pub fn prepare<'b>(
    hf: &str,
    g: &str,
    info: &TensorInfo,
    bytes: &'b [u8],
    permuted: Option<(usize, usize)>,
) -> Result<RawTensor<'b>, LoadError> {
    let blocks = |reason: String| LoadError::Blocks {
        name: format!("{g} ({hf})"),
        ty: info.ty.name(),
        reason,
    };
    info.ty.check(bytes).map_err(|e| blocks(e.to_string()))?;
    let shape = info.shape();
    let bytes = match permuted {
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

/// The Hugging Face name of a llama.cpp tensor name (the inverse of [`gguf_name`]).
pub fn hf_name(g: &str) -> Option<String> {
    if let Some((hf, _)) = GLOBAL.iter().find(|(_, n)| *n == g) {
        return Some(hf.to_string());
    }
    let rest = g.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let (hf, _) = LAYER.iter().find(|(_, n)| *n == part)?;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
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

impl Weights for GgufWeights<'_, '_> {
    fn contains(&self, name: &str) -> bool {
        gguf_name(name).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let g = gguf_name(name).ok_or_else(|| LoadError::Missing(name.into()))?;
        let info = self
            .file
            .tensor(&g)
            .ok_or_else(|| LoadError::Missing(format!("{g} ({name})")))?;
        let shape = info.shape();
        if shape != expected {
            return Err(LoadError::Shape {
                name: format!("{g} ({name})"),
                expected: expected.to_vec(),
                actual: shape,
            });
        }
        let raw = prepare(name, &g, info, self.file.data(info), self.permuted)?;
        self.taken.insert(g);
        Ok(raw)
    }

    fn leftover(&self) -> Option<String> {
        self.file
            .tensors
            .iter()
            .map(|(n, _)| n)
            .find(|n| !self.taken.contains(*n))
            .cloned()
    }

    fn total_bytes(&self) -> u64 {
        self.file
            .tensors
            .iter()
            .map(|(_, t)| (t.end - t.start) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways_that_matter() {
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
