//! Loading a GGUF model as its bytes arrive ([`GgufLoader`]): the header gives the config, the tokenizer
//! and the tensor list, which is checked against the config (and against what the device can hold)
//! before anything is allocated; then each tensor goes to the device as soon as its last byte is in, and
//! its bytes are dropped. Peak memory is the placed weights plus the one tensor being completed: the file
//! is never whole in memory. A file whose bytes are all there is the same path fed in one piece.

use std::collections::BTreeMap;

use burn::backend::DispatchDevice;
use burn::tensor::Device;

use crate::engine::EngineError;
use crate::engine::loaded::LoadedModel;
use crate::kernels::QuantWeight;
use crate::loader::stream::{Event, GgufStream};
use crate::loader::{Gguf, LoadError};
use crate::model::gguf::{self as gguf_model, CONFIG_TENSORS, Fixups};
use crate::model::{Decoder, ModelConfig, Placed, Staged};
use crate::tokenizer::ModelTokenizer;

/// The most weight bytes the CPU backend can hold in wasm32's 4 GiB address space, leaving room for the
/// KV cache, activations and the module itself.
pub const WASM_WEIGHT_LIMIT: u64 = (4 << 30) - (512 << 20);

/// What the header told us, while the tensors arrive.
struct Staging {
    config: ModelConfig,
    tokenizer: ModelTokenizer,
    /// GGUF name → Hugging Face name.
    names: BTreeMap<String, String>,
    /// The converter's changes to undo (q/k permutation, norm shift).
    fixups: Fixups,
    staged: Staged,
    loaded: u64,
    total: u64,
}

/// A GGUF model loading piece by piece: [`GgufLoader::push`] the file's bytes in order, then
/// [`GgufLoader::finish`]. After an error the loader is spent; the device memory of what was placed is
/// freed with it.
pub struct GgufLoader<'f> {
    device: Device,
    stream: GgufStream,
    staging: Option<Staging>,
    /// `(loaded, total)` bytes of tensor data on the device, after the header and after each tensor.
    on_upload: Box<dyn FnMut(u64, u64) + 'f>,
    /// The most bytes the weights may take as held on the device.
    weight_limit: Option<u64>,
    /// An error stopped the load: every later call is refused.
    failed: bool,
}

impl<'f> GgufLoader<'f> {
    pub fn new(device: &Device, on_upload: impl FnMut(u64, u64) + 'f) -> Self {
        Self {
            device: device.clone(),
            stream: GgufStream::new(),
            staging: None,
            on_upload: Box::new(on_upload),
            weight_limit: default_limit(device),
            failed: false,
        }
    }

    /// Caps the bytes the weights may take as held on the device (quantized blocks packed, other matrices
    /// widened to f32): a file beyond it is refused when its header arrives, before any allocation.
    pub fn with_weight_limit(mut self, limit: Option<u64>) -> Self {
        self.weight_limit = limit;
        self
    }

    /// The next bytes of the file.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), EngineError> {
        if self.failed {
            return Err(spent());
        }
        let Self {
            device,
            stream,
            staging,
            on_upload,
            weight_limit,
            ..
        } = self;
        let limit = *weight_limit;
        let result = stream.push(piece, &mut |event| {
            handle(event, device, limit, staging, on_upload.as_mut())
        });
        if result.is_err() {
            // The stream stopped inside a tensor: what follows cannot be placed. Free what was.
            self.failed = true;
            self.staging = None;
        }
        result
    }

    /// The end of the file: the model, once every tensor has arrived.
    pub fn finish(self, id: &str) -> Result<LoadedModel, EngineError> {
        if self.failed {
            return Err(spent());
        }
        let Self {
            device,
            stream,
            mut staging,
            mut on_upload,
            weight_limit,
            ..
        } = self;
        stream.finish(&mut |event| handle(event, &device, weight_limit, &mut staging, on_upload.as_mut()))?;
        let Some(mut s) = staging else {
            return Err(LoadError::Gguf(crate::loader::GgufError::Truncated("the header".into())).into());
        };
        let decoder = Decoder::assemble(s.config, &mut s.staged, &device)?;
        on_upload(s.total, s.total);
        Ok(LoadedModel::new(id, decoder, s.tokenizer))
    }
}

/// The error of a loader that an earlier error stopped.
fn spent() -> EngineError {
    LoadError::Gguf(crate::loader::GgufError::Malformed(
        "the load stopped at an earlier error".into(),
    ))
    .into()
}

fn handle(
    event: Event<'_>,
    device: &Device,
    limit: Option<u64>,
    staging: &mut Option<Staging>,
    on_upload: &mut dyn FnMut(u64, u64),
) -> Result<(), EngineError> {
    match event {
        Event::Header(g) => {
            let s = stage(g, device, limit)?;
            on_upload(0, s.total);
            *staging = Some(s);
        }
        Event::Tensor { name, info, bytes } => {
            let Some(s) = staging.as_mut() else {
                return Ok(());
            };
            if CONFIG_TENSORS.contains(&name) {
                gguf_model::config_tensor(&mut s.config, name, info, bytes)?;
                s.loaded = (s.loaded + bytes.len() as u64).min(s.total);
                on_upload(s.loaded, s.total);
                return Ok(());
            }
            let hf = s
                .names
                .get(name)
                .ok_or_else(|| LoadError::Extra(name.into()))?
                .clone();
            let raw = gguf_model::prepare(&hf, name, info, bytes, s.fixups)?;
            let placed = Placed::new(&hf, &raw, device)?;
            s.staged.insert(hf, placed);
            s.loaded = (s.loaded + bytes.len() as u64).min(s.total);
            on_upload(s.loaded, s.total);
        }
    }
    Ok(())
}

/// The header checked against the model it describes, before any tensor is placed: every tensor known,
/// of the shape the config implies, none missing, and the weights within what the device can hold.
fn stage(g: &Gguf<'static>, device: &Device, limit: Option<u64>) -> Result<Staging, EngineError> {
    let config = gguf_model::config_from_metadata(g)?;
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
        let hf = config
            .arch
            .family()
            .hf_name_of(name)
            .ok_or_else(|| LoadError::Extra(name.clone()))?;
        let shape = expected.get(&hf).ok_or_else(|| LoadError::Extra(name.clone()))?;
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
        check_fit(g, device, limit)?;
    }
    check_bindings(g, device)?;
    let total = g.tensors.iter().map(|(_, t)| (t.end - t.start) as u64).sum();
    Ok(Staging {
        config,
        tokenizer,
        names,
        fixups,
        staged: Staged::new(),
        loaded: 0,
        total,
    })
}

/// The weight limit of `device`: on the CPU backend in wasm32, the weights must fit in the 4 GiB address
/// space with room to run; elsewhere none is known up front (WebGPU does not report its memory).
fn default_limit(device: &Device) -> Option<u64> {
    let cpu = matches!(device.as_dispatch(), DispatchDevice::Flex(_));
    (cfg!(target_family = "wasm") && cpu).then_some(WASM_WEIGHT_LIMIT)
}

/// Refuses a model whose weights, as `device` would hold them (quantized blocks packed where it has a
/// kernel, other tensors widened to f32), take more than `limit` bytes.
fn check_fit(g: &Gguf<'static>, device: &Device, limit: u64) -> Result<(), EngineError> {
    let held: u64 = g
        .tensors
        .iter()
        .map(|(_, t)| {
            let elements: usize = t.dims.iter().product();
            match t.dims.len() == 2 && QuantWeight::keeps(t.ty, t.end - t.start, device) {
                true => (t.end - t.start) as u64,
                false => 4 * elements as u64,
            }
        })
        .sum();
    if held > limit {
        return Err(EngineError::TooLarge {
            needed: held >> 20,
            limit: limit >> 20,
        });
    }
    Ok(())
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

/// The header's model with its bytes all there: [`GgufLoader`] fed in one piece.
pub fn from_gguf(
    id: &str,
    bytes: &[u8],
    device: &Device,
    on_upload: &mut dyn FnMut(u64, u64),
) -> Result<LoadedModel, EngineError> {
    let mut loader = GgufLoader::new(device, on_upload);
    loader.push(bytes)?;
    loader.finish(id)
}
