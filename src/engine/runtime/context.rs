//! The context a load grants: how many positions a request (prompt and completion) may take on this
//! device, chosen once the weights are placed, from the model's own context length, the load's
//! `contextLength` option and the room the device has for the KV cache.
//!
//! The KV cache grows as a request fills it (`model::layers::kv_cache`), so the grant allocates nothing:
//! it is the bound past which a request is refused up front (the 400 `context_length_exceeded` of
//! `engine::protocol::plan`) rather than failing for memory halfway through its answer. It also sizes the
//! rope tables, which are built for every granted position (Gemma 4's full-attention table for its
//! 131,072 positions took 256 MiB; for 8,192, 16 MiB).
//!
//! The room:
//! - the CPU backend in wasm32: the 4 GiB address space, less the weights, the prefix cache's budget and
//!   [`WASM_RESERVE`] for the module, the tokenizer and activations;
//! - WebGPU (wgpu): a layer's keys are one buffer, which must fit the device's largest storage binding;
//!   the device's memory is not reported, so without `contextLength` the cache is held to
//!   [`GPU_DEFAULT_KV`] (a larger `contextLength` is granted up to the binding's bound);
//! - the CPU backend natively: the model's own.
//!
//! A recurrent layer's state is fixed-size and does not grow with the context.

use burn::tensor::Device;
use serde::Serialize;

use crate::engine::EngineError;
use crate::model::config::CacheKind;
use crate::model::{Decoder, ModelConfig};

/// Bytes of wasm32's address space kept for the module, the tokenizer and a step's activations.
pub const WASM_RESERVE: u64 = 256 << 20;

/// The most bytes the KV cache of a full-length request takes on WebGPU when the load names no
/// `contextLength`.
pub const GPU_DEFAULT_KV: u64 = 2 << 30;

/// What bounds the granted context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Bound {
    /// The model's own context length.
    Model,
    /// The load's `contextLength`.
    Option,
    /// The memory the device has for the KV cache ([`GPU_DEFAULT_KV`] on WebGPU, the address space left
    /// on the CPU backend in wasm32).
    Memory,
    /// A layer's keys must fit one storage buffer binding.
    Binding,
}

/// The context a load granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// Positions a request may take (prompt and completion).
    pub length: usize,
    /// The model's own context length (its `max_position_embeddings` / `context_length`).
    pub model_length: usize,
    /// Bytes one position of one sequence takes in the KV cache, over every layer.
    pub kv_bytes_per_position: usize,
    /// What bounds `length`.
    pub bound: Bound,
}

/// What the KV cache of a model takes, and its weights: the inputs of [`grant`].
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// Bytes one position of one sequence takes over every layer (keys and values).
    pub per_position: usize,
    /// Bytes one position takes in the widest layer's keys (one buffer).
    pub widest: usize,
    /// Bytes the weights take on the device.
    pub weights: u64,
}

impl Room {
    /// The room of a model of config `c` whose cache holds `elem`-byte values and whose weights take
    /// `weights` bytes.
    pub fn of(c: &ModelConfig, elem: usize, weights: u64) -> Self {
        let own: Vec<usize> = (0..c.num_layers)
            .filter(|&i| c.layers.get(i).is_none_or(|l| matches!(l.cache, CacheKind::Kv)))
            .map(|i| {
                let (k, d) = c.attn_dims(i);
                k * d * elem
            })
            .collect();
        Self {
            per_position: 2 * own.iter().sum::<usize>(),
            widest: own.iter().copied().max().unwrap_or(0),
            weights,
        }
    }

    /// The room of `decoder`, its weights placed, as its cache holds values.
    pub fn of_decoder(decoder: &Decoder) -> Self {
        let elem = match decoder.cache_dtype() {
            burn::tensor::DType::F16 => 2,
            _ => 4,
        };
        Self::of(&decoder.config, elem, decoder.device_bytes())
    }
}

/// The context a model of `model_length` positions and `room` can be granted on `device`, `requested` by
/// the load (a request past the model's own context, or past what the device can hold, is an error
/// naming both); `prefix_budget`: the bytes the prefix cache may keep.
pub fn grant(
    room: &Room,
    device: &Device,
    model_length: usize,
    requested: Option<usize>,
    prefix_budget: u64,
) -> Result<Grant, EngineError> {
    let per_position = room.per_position;
    let cpu = super::device::is_cpu(device);
    let positions = |bytes: u64, per: usize| match per {
        0 => usize::MAX,
        per => usize::try_from(bytes / per as u64).unwrap_or(usize::MAX),
    };
    // (positions, what bounds them) the device holds at most; the default's own bound besides.
    let (hard, default) = if cpu && cfg!(target_family = "wasm") {
        let used = room.weights + prefix_budget + WASM_RESERVE;
        let left = (4u64 << 30).saturating_sub(used);
        ((positions(left, per_position), Bound::Memory), None)
    } else if cpu {
        ((usize::MAX, Bound::Model), None)
    } else {
        let binding = crate::kernels::max_binding_bytes(device).unwrap_or(u64::MAX);
        (
            (positions(binding, room.widest), Bound::Binding),
            Some((positions(GPU_DEFAULT_KV, per_position), Bound::Memory)),
        )
    };
    let (length, bound) = match requested {
        Some(0) => {
            return Err(option_error("must be at least 1 position".into()));
        }
        Some(n) if n > model_length => {
            return Err(option_error(format!(
                "{n} positions is more than the model's context length of {model_length}"
            )));
        }
        Some(n) if n > hard.0 => {
            return Err(option_error(format!(
                "{n} positions take {} MiB of KV cache ({per_position} bytes each); this device holds at most {} positions ({})",
                (n as u64 * per_position as u64) >> 20,
                hard.0,
                match hard.1 {
                    Bound::Binding => "a layer's keys must fit one storage buffer binding",
                    _ => "the address space wasm32 leaves beside the weights",
                }
            )));
        }
        Some(n) => (n, Bound::Option),
        None => [Some(hard), default]
            .into_iter()
            .flatten()
            .filter(|(n, _)| *n < model_length)
            .min_by_key(|(n, _)| *n)
            .unwrap_or((model_length, Bound::Model)),
    };
    if length == 0 {
        return Err(option_error(format!(
            "no room is left for the KV cache on this device ({per_position} bytes a position): choose a smaller quantization of the model"
        )));
    }
    Ok(Grant {
        length,
        model_length,
        kv_bytes_per_position: per_position,
        bound,
    })
}

fn option_error(message: String) -> EngineError {
    EngineError::LoadOption {
        option: "contextLength",
        message,
    }
}
