//! What a model picker needs to know of a GGUF model before it is downloaded ([`inspect`]): the headers
//! alone (the first megabytes of each file) give its family, sizes, context and chat template, and the
//! checks a load makes with them ([`super::staging::stage_all`]) say whether this device can run it —
//! and, where it cannot, the error the load would give, with its numbers.

use std::collections::BTreeMap;

use burn::tensor::Device;
use serde::Serialize;

use super::staging::{default_limit, held_bytes, stage_all};
use crate::loader::Gguf;

/// A model as its headers describe it, and whether a device can run it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// `general.architecture` (`llama`, `qwen3`, `gemma3`, …).
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Files of the model (a split model's shards, and an mmproj).
    pub files: usize,
    /// Parameters (elements of every tensor).
    pub parameters: u64,
    /// Bytes of tensor data in the files.
    pub tensor_bytes: u64,
    /// The largest tensor: what a load holds at once in memory besides what is placed.
    pub largest_tensor: Option<TensorSize>,
    /// Bytes of tensor data by GGML type (`Q4_K`, `F32`, …).
    pub types: BTreeMap<&'static str, u64>,
    /// `<arch>.block_count`.
    pub layers: Option<u64>,
    /// Tokens of the vocabulary (`tokenizer.ggml.tokens`).
    pub vocab_size: Option<usize>,
    /// The model's own context length (`<arch>.context_length`).
    pub context_length: Option<u64>,
    /// Whether the file carries a chat template (`tokenizer.chat_template`): without one, chat requests
    /// need the `chatTemplate` load option.
    pub chat_template: bool,
    /// Whether an mmproj was given (a vision-language model).
    pub vision: bool,
    /// Whether this device can run it.
    pub device: Fit,
}

/// A tensor and its size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorSize {
    pub name: String,
    pub bytes: u64,
}

/// Whether a device can run a model, as a load would find out from the headers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fit {
    /// The headers pass every check a load makes before placing anything.
    pub runs: bool,
    /// Bytes the weights take as this device would hold them (quantized blocks packed where it has a
    /// kernel, other tensors widened to f32).
    pub weight_bytes: u64,
    /// The context a load would grant by default (a first estimate: the KV cache in f16 where the
    /// device has it), when it runs.
    pub context_length: Option<usize>,
    /// Why it does not run: the load's error message.
    pub error: Option<String>,
}

/// `headers` (a model's files in order; `mmproj`: the last is its projector) inspected for `device`.
pub fn inspect(headers: &[&Gguf<'static>], mmproj: bool, device: &Device) -> Inspection {
    let first = headers.first();
    let text = |key: &str| first.and_then(|g| g.str(key).ok().flatten()).map(str::to_owned);
    let architecture = text("general.architecture");
    let arch_u64 = |key: &str| {
        let arch = architecture.as_deref()?;
        first?.get(&format!("{arch}.{key}"))?.as_u64()
    };
    let tensors = || headers.iter().flat_map(|g| g.tensors.iter());
    let mut types = BTreeMap::new();
    for (_, t) in tensors() {
        *types.entry(t.ty.name()).or_insert(0) += t.size();
    }
    let weight_bytes = headers.iter().map(|g| held_bytes(g, device)).sum();
    let fit = match stage_all(headers, mmproj, device, default_limit(device), None) {
        Ok(s) => Fit {
            runs: true,
            weight_bytes,
            context_length: Some(s.config.max_position_embeddings),
            error: None,
        },
        Err(e) => Fit {
            runs: false,
            weight_bytes,
            context_length: None,
            error: Some(e.to_string()),
        },
    };
    Inspection {
        name: text("general.name"),
        files: headers.len(),
        parameters: tensors()
            .map(|(_, t)| t.dims.iter().map(|&d| d as u64).product::<u64>())
            .sum(),
        tensor_bytes: tensors().map(|(_, t)| t.size()).sum(),
        largest_tensor: tensors()
            .max_by_key(|(_, t)| t.size())
            .map(|(name, t)| TensorSize {
                name: name.clone(),
                bytes: t.size(),
            }),
        types,
        layers: arch_u64("block_count"),
        vocab_size: first
            .and_then(|g| g.strings("tokenizer.ggml.tokens").ok().flatten())
            .map(|v| v.len()),
        context_length: arch_u64("context_length"),
        chat_template: first.is_some_and(|g| g.get("tokenizer.chat_template").is_some()),
        vision: mmproj,
        device: fit,
        architecture,
    }
}
