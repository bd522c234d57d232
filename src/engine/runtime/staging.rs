//! A GGUF model's headers checked against the model they describe and the device it would run on, before
//! any tensor is placed ([`stage_all`]): the files against each other (a split model's), every tensor
//! known and of the shape the config implies, none missing, the weights within what the device can hold
//! (wasm32's address space on the CPU backend, a storage binding per row on WebGPU), the context the
//! device has room for; and a vision-language model's mmproj against its language model. The loader
//! ([`super::load`]) stages as soon as the headers are in; [`super::inspect`] reports the same checks
//! without loading.

use std::collections::BTreeMap;

use burn::tensor::Device;

use super::context::{self, Room};
use super::device::is_cpu;
use super::prefix_cache::DEFAULT_BUDGET;
use crate::engine::EngineError;
use crate::kernels::QuantWeight;
use crate::kernels::caps::Caps;
use crate::loader::{Gguf, LoadError, split};
use crate::model::gguf::{self as gguf_model, CONFIG_TENSORS, Fixups};
use crate::model::layers::state::{self, MAX_SNAPSHOTS};
use crate::model::vision::gguf as mmproj;
use crate::model::vision::preprocess::ImageProcessor;
use crate::model::{ModelConfig, Staged, VisionConfig};
use crate::tokenizer::ModelTokenizer;

/// The most weight bytes the CPU backend can hold in wasm32's 4 GiB address space, leaving room for the
/// KV cache, activations and the module itself.
pub const WASM_WEIGHT_LIMIT: u64 = (4 << 30) - (512 << 20);

/// What the headers told us, while the tensors arrive.
pub(super) struct Staging {
    pub(super) config: ModelConfig,
    pub(super) tokenizer: ModelTokenizer,
    /// GGUF name → Hugging Face name.
    pub(super) names: BTreeMap<String, String>,
    /// The converter's changes to undo (q/k permutation, norm shift).
    pub(super) fixups: Fixups,
    pub(super) staged: Staged,
    /// The mmproj's part, for a vision-language model.
    pub(super) vision: Option<VisionStaging>,
    pub(super) loaded: u64,
    pub(super) total: u64,
    /// The model's own context length (the config holds the first estimate of the grant).
    pub(super) model_length: usize,
}

/// What an mmproj's header told us.
pub(super) struct VisionStaging {
    pub(super) config: VisionConfig,
    pub(super) processor: ImageProcessor,
    pub(super) names: mmproj::Names,
    /// mmproj name → Hugging Face name.
    pub(super) hf: BTreeMap<String, String>,
}

/// The header checked against the model it describes, before any tensor is placed: every tensor known,
/// of the shape the config implies, none missing, and the weights within what the device can hold.
fn stage(
    g: &Gguf<'static>,
    device: &Device,
    limit: Option<u64>,
    context: Option<usize>,
) -> Result<Staging, EngineError> {
    let mut config = gguf_model::config_from_metadata(g)?;
    let tokenizer = ModelTokenizer::from_gguf(g)?;
    let fixups = gguf_model::fixups(&config);
    let expected: BTreeMap<String, Vec<usize>> = config
        .arch
        .family()
        .checkpoint_shapes(&config)
        .into_iter()
        .collect();
    let mut names = BTreeMap::new();
    for (name, info) in &g.tensors {
        if CONFIG_TENSORS.contains(&name.as_str()) {
            // Read into the config when it arrives; its shape is known now.
            let expected = gguf_model::config_tensor_shape(&config);
            if info.shape() != expected {
                return Err(LoadError::Shape {
                    name: name.clone(),
                    expected,
                    actual: info.shape(),
                }
                .into());
            }
            continue;
        }
        if config.arch.family().gguf_ignored(&config, name) {
            continue;
        }
        let hf = config
            .arch
            .family()
            .hf_name_of(name)
            .ok_or_else(|| LoadError::Extra(name.clone()))?;
        let shape = expected.get(&hf).ok_or_else(|| LoadError::Extra(name.clone()))?;
        let shape = &config.arch.family().gguf_shape(&hf, shape);
        if info.shape() != *shape {
            return Err(LoadError::Shape {
                name: format!("{name} ({hf})"),
                expected: shape.clone(),
                actual: info.shape(),
            }
            .into());
        }
        names.insert(name.clone(), hf);
    }
    let present: std::collections::BTreeSet<&str> = names.values().map(String::as_str).collect();
    if let Some((missing, _)) = expected
        .iter()
        .find(|(hf, _)| *hf != "lm_head.weight" && !present.contains(hf.as_str()))
    {
        let g_name = config.arch.family().gguf_name(missing).unwrap_or_default();
        return Err(LoadError::Missing(format!("{g_name} ({missing})")).into());
    }
    if let Some(limit) = limit {
        // With a recurrent model's states: one sequence's, and the snapshots it may keep.
        let states: usize = config
            .layers
            .iter()
            .map(|l| state::State::bytes_of(l.cache, 1))
            .sum();
        check_fit(g, device, limit, (states * (1 + MAX_SNAPSHOTS)) as u64)?;
    }
    check_bindings(g, device)?;
    // The context, estimated with the cache's values in f16 where the device has it (the fused step's):
    // the rope tables are built for it, and the grant made once the decoder is assembled is at most it.
    let model_length = config.max_position_embeddings;
    let elem = match !is_cpu(device) && Caps::of(device).features.f16 {
        true => 2,
        false => 4,
    };
    let room = Room::of(&config, elem, held_bytes(g, device));
    let first = context::grant(&room, device, model_length, context, DEFAULT_BUDGET as u64)?;
    config.max_position_embeddings = first.length;
    let total = g.tensors.iter().map(|(_, t)| t.size()).sum();
    Ok(Staging {
        model_length,
        config,
        tokenizer,
        names,
        fixups,
        staged: Staged::new(),
        vision: None,
        loaded: 0,
        total,
    })
}

/// The mmproj header `g` checked against the language model's (`lm`, whose config is `text`): its
/// vision config, how it prepares images, and the Hugging Face name of each of its tensors.
fn stage_vision(
    g: &Gguf<'static>,
    lm: &Gguf<'static>,
    text: &ModelConfig,
) -> Result<VisionStaging, EngineError> {
    let vocab = lm
        .strings("tokenizer.ggml.tokens")
        .map_err(LoadError::Gguf)?
        .unwrap_or_default();
    let config = mmproj::vision_config(g, text, &vocab)?;
    let processor = mmproj::image_processor(g, &config)?;
    let names = mmproj::names(&config, g)?;
    let hf = g
        .tensors
        .iter()
        .map(|(name, _)| {
            mmproj::hf_name(name, &names)
                .map(|hf| (name.clone(), hf))
                .ok_or_else(|| LoadError::Extra(format!("{name} (mmproj)")))
        })
        .collect::<Result<_, _>>()?;
    Ok(VisionStaging {
        config,
        processor,
        names,
        hf,
    })
}

/// The weight limit of `device`: on the CPU backend in wasm32, the weights must fit in the 4 GiB address
/// space with room to run; elsewhere none is known up front (WebGPU does not report its memory).
pub(super) fn default_limit(device: &Device) -> Option<u64> {
    (cfg!(target_family = "wasm") && is_cpu(device)).then_some(WASM_WEIGHT_LIMIT)
}

/// The bytes the weights of `g` take as `device` would hold them (quantized blocks packed where it has a
/// kernel, other tensors widened to f32; a table kept in host memory beside a GPU, none).
pub(super) fn held_bytes(g: &Gguf<'static>, device: &Device) -> u64 {
    g.tensors
        .iter()
        .filter(|(name, _)| !crate::model::placed::kept_on_host(name, device))
        .map(|(_, t)| {
            let elements: u64 = t.dims.iter().map(|&d| d as u64).product();
            let bytes = usize::try_from(t.size()).unwrap_or(usize::MAX);
            match t.dims.len() == 2 && QuantWeight::keeps(t.ty, bytes, device) {
                true => t.size(),
                false => 4 * elements,
            }
        })
        .sum()
}

/// Refuses a model whose weights take more than `limit` bytes on `device` ([`held_bytes`]), with `more`
/// bytes of another file's (an mmproj's).
fn check_fit(g: &Gguf<'static>, device: &Device, limit: u64, more: u64) -> Result<(), EngineError> {
    let held = held_bytes(g, device) + more;
    if held <= limit {
        return Ok(());
    }
    // (the device as the message names it, where the limit comes from, what to do instead)
    let (name, why, advice) = match is_cpu(device) {
        true => (
            "the CPU backend",
            "and a wasm32 module addresses 4 GiB, with room kept for the KV cache, activations and the module",
            "load it with `device: 'webgpu'` (its weights stream to the GPU, whose memory is not the module's), or choose a smaller quantization of the model",
        ),
        false => (
            "this device",
            "and the load was given a weight limit",
            "choose a smaller quantization of the model",
        ),
    };
    Err(EngineError::TooLarge {
        needed: held.div_ceil(1 << 20),
        limit: limit >> 20,
        device: name,
        why,
        advice,
    })
}

/// Refuses, on wgpu, a matrix one of whose rows exceeds the largest storage buffer binding (a weight is
/// split across buffers by whole rows, so a row is the unit that must fit).
fn check_bindings(g: &Gguf<'static>, device: &Device) -> Result<(), EngineError> {
    let Some(limit) = crate::kernels::max_binding_bytes(device) else {
        return Ok(());
    };
    for (name, t) in &g.tensors {
        let row = t.ty.row_bytes(t.dims[0]).unwrap_or(0) as u64;
        if t.dims.len() == 2 && row > limit {
            return Err(LoadError::Blocks {
                name: name.clone(),
                ty: t.ty.name(),
                reason: format!(
                    "a row takes {row} bytes, more than the device's largest storage buffer binding ({limit} bytes)"
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// Every header of a model in (`headers`: its files in order; `mmproj`: the last is a vision-language
/// model's projector) checked as [`stage`] and [`stage_vision`] check them, the files against each other
/// first (a 422 naming them when they do not belong together), with the weights held to `limit` bytes
/// and the context to `context` positions.
pub(super) fn stage_all(
    headers: &[&Gguf<'static>],
    mmproj: bool,
    device: &Device,
    limit: Option<u64>,
    context: Option<usize>,
) -> Result<Staging, EngineError> {
    let (headers, projector) = match mmproj {
        true => headers.split_at(headers.len().saturating_sub(1)),
        false => (headers, &[][..]),
    };
    split::check(headers).map_err(|e| EngineError::Shards(e.to_string()))?;
    let mut s = match headers {
        [one] => stage(one, device, limit, context)?,
        [first, rest @ ..] => {
            // One view of every file's tensors: the model's (offsets are per file, sizes whole).
            let mut all = (*first).clone();
            for g in rest {
                all.tensors.extend(g.tensors.iter().cloned());
            }
            stage(&all, device, limit, context)?
        }
        [] => {
            return Err(EngineError::Shards("no file was given".into()));
        }
    };
    if let (Some(g), Some(lm)) = (projector.first(), headers.first()) {
        s.vision = Some(stage_vision(g, lm, &s.config)?);
        if let Some(limit) = limit {
            let all = headers.iter().map(|h| held_bytes(h, device)).sum();
            check_fit(g, device, limit, all)?;
        }
        check_bindings(g, device)?;
        s.total += g.tensors.iter().map(|(_, t)| t.size()).sum::<u64>();
    }
    Ok(s)
}
