//! File formats: safetensors (single file or sharded, seen through [`Weights`] under Hugging Face tensor
//! names), GGUF (header, metadata and tensor data, whole or streamed in pieces), the GGML block types, and
//! writing GGUF. What a GGUF's keys and tensor names mean for a model is model knowledge and lives in
//! `crate::model::gguf`. Every tensor is checked against the shape the config implies; a missing, extra or
//! mis-shaped tensor is an error naming it.

pub mod derive;
pub mod gguf;
pub mod gguf_write;
pub mod quant;
pub mod quantize;
pub mod safetensors;
pub mod split;
pub mod stream;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

pub use gguf::{Array, Gguf, GgufError, Value};
pub use quant::{BlockError, GgmlType};
pub use quantize::{Quantizing, quantize_type};
pub use safetensors::{Safetensors, SafetensorsError, ShardIndex};
pub use stream::GgufStream;

/// A tensor as the checkpoint stores it: its GGML type, its row-major shape (Hugging Face order,
/// `[out, in]` for a matrix) and its bytes, rows of whole blocks. Nothing is widened here; the model
/// decides what to keep quantized.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTensor<'a> {
    pub ty: GgmlType,
    pub shape: Vec<usize>,
    pub bytes: Cow<'a, [u8]>,
}

impl RawTensor<'_> {
    /// The values as f32 (for small tensors: norms, biases, and dense fallbacks).
    pub fn to_f32(&self) -> Vec<f32> {
        self.ty.dequantize(&self.bytes)
    }
}

/// A checkpoint as the decoder sees it: tensors by Hugging Face name, as stored.
pub trait Weights {
    /// Whether the checkpoint holds `name`.
    fn contains(&self, name: &str) -> bool;
    /// Takes tensor `name` as stored, checking its shape against `expected` and its blocks (a NaN or
    /// infinite scale is an error naming the tensor).
    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError>;
    /// The first tensor nobody took, if any (in the checkpoint's own naming).
    fn leftover(&self) -> Option<String>;
    /// Bytes of tensor data in the checkpoint (what loading reads, at most).
    fn total_bytes(&self) -> u64;
}

/// A [`Weights`] that reports loading progress: after each tensor taken, `on_progress(loaded, total)` in
/// bytes of the checkpoint's tensor data. `loaded` only grows; [`Reporting::finish`] reports the total.
pub struct Reporting<'w, 'f> {
    inner: &'w mut dyn Weights,
    loaded: u64,
    total: u64,
    on_progress: &'f mut dyn FnMut(u64, u64),
}

impl<'w, 'f> Reporting<'w, 'f> {
    pub fn new(inner: &'w mut dyn Weights, on_progress: &'f mut dyn FnMut(u64, u64)) -> Self {
        let total = inner.total_bytes();
        on_progress(0, total);
        Self {
            inner,
            loaded: 0,
            total,
            on_progress,
        }
    }

    /// Reports the end of loading (`loaded == total`).
    pub fn finish(self) {
        (self.on_progress)(self.total, self.total);
    }
}

impl Weights for Reporting<'_, '_> {
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(name)
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let raw = self.inner.take(name, expected)?;
        self.loaded = (self.loaded + raw.bytes.len() as u64).min(self.total);
        (self.on_progress)(self.loaded, self.total);
        Ok(raw)
    }

    fn leftover(&self) -> Option<String> {
        self.inner.leftover()
    }

    fn total_bytes(&self) -> u64 {
        self.inner.total_bytes()
    }
}

/// Weights could not be loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    File(#[from] SafetensorsError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error("tensor `{name}` ({ty}): {reason}")]
    Blocks {
        name: String,
        ty: &'static str,
        reason: String,
    },
    #[error("tensor `{0}` is missing")]
    Missing(String),
    #[error("tensor `{0}` is not part of this model (unexpected in the checkpoint)")]
    Extra(String),
    #[error("tensor `{name}` has shape {actual:?}, the config implies {expected:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error(
        "tensor `{name}` is listed in `model.safetensors.index.json` under shard `{shard}`, which was not given"
    )]
    Shard { name: String, shard: String },
    #[error("`model.safetensors.index.json` does not parse: {0}")]
    Index(String),
}

/// A set of safetensors files (one, or the shards of an index) seen as one name → tensor map.
pub struct Checkpoint<'a> {
    files: Vec<Safetensors<'a>>,
    /// Tensor name → index in `files`.
    owner: BTreeMap<String, usize>,
    taken: BTreeSet<String>,
    /// Prefixes of parts the model does not run ([`Checkpoint::skipping`]).
    skipped: Vec<&'static str>,
}

impl<'a> Checkpoint<'a> {
    /// The tensors under `prefixes` are parts the model does not run (a multimodal checkpoint's towers,
    /// where kiln loads its language model alone): never left over.
    pub fn skipping(mut self, prefixes: &[&'static str]) -> Self {
        self.skipped.extend_from_slice(prefixes);
        self
    }

    /// One `model.safetensors`.
    pub fn single(bytes: &'a [u8]) -> Result<Self, LoadError> {
        Self::shards(None, vec![("model.safetensors".into(), bytes)])
    }

    /// Shards by file name, with `model.safetensors.index.json` when there is one (it must then cover
    /// every tensor and name only given shards).
    pub fn shards(index: Option<&[u8]>, shards: Vec<(String, &'a [u8])>) -> Result<Self, LoadError> {
        let mut files = Vec::new();
        let mut owner = BTreeMap::new();
        for (i, (name, bytes)) in shards.iter().enumerate() {
            let file = Safetensors::parse(name, bytes)?;
            for tensor in file.tensors.keys() {
                owner.insert(tensor.clone(), i);
            }
            files.push(file);
        }
        if let Some(index) = index {
            let index: ShardIndex =
                serde_json::from_slice(index).map_err(|e| LoadError::Index(e.to_string()))?;
            for (tensor, shard) in index.weight_map {
                match shards.iter().position(|(n, _)| *n == shard) {
                    Some(i) if files[i].tensors.contains_key(&tensor) => {}
                    Some(_) => return Err(LoadError::Missing(tensor)),
                    None => return Err(LoadError::Shard { name: tensor, shard }),
                }
            }
        }
        Ok(Self {
            files,
            owner,
            taken: BTreeSet::new(),
            skipped: Vec::new(),
        })
    }
}

impl Weights for Checkpoint<'_> {
    fn contains(&self, name: &str) -> bool {
        self.owner.contains_key(name)
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let file = self
            .owner
            .get(name)
            .ok_or_else(|| LoadError::Missing(name.into()))?;
        let raw = self.files[*file]
            .raw(name)
            .ok_or_else(|| LoadError::Missing(name.into()))??;
        if raw.shape != expected {
            return Err(LoadError::Shape {
                name: name.into(),
                expected: expected.to_vec(),
                actual: raw.shape,
            });
        }
        self.taken.insert(name.into());
        Ok(raw)
    }

    /// Rotary `inv_freq` buffers of old checkpoints are recomputed from the config, and
    /// multi-token-prediction heads (`mtp.*`, Qwen3.5's) and the parts under [`Checkpoint::skipping`]'s
    /// prefixes are not run: none counts as extra.
    fn leftover(&self) -> Option<String> {
        self.owner
            .keys()
            .find(|n| {
                !self.taken.contains(*n)
                    && !n.ends_with("rotary_emb.inv_freq")
                    && !n.starts_with("mtp.")
                    && !self.skipped.iter().any(|p| n.starts_with(p))
            })
            .cloned()
    }

    fn total_bytes(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|f| f.tensors.values())
            .map(|t| (t.end - t.start) as u64)
            .sum()
    }
}
