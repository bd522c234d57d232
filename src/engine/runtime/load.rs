//! Loading a GGUF model as its bytes arrive ([`GgufLoader`]), from one file or the files of a split model:
//! the headers give the config, the tokenizer and the tensor list, which is checked against the config
//! (and against what the device can hold) before anything is allocated; then each tensor goes to the device as soon as its last byte is in, and
//! its bytes are dropped. Peak memory is the placed weights plus the one tensor being completed: the file
//! is never whole in memory. A file whose bytes are all there is the same path fed in one piece.
//!
//! A vision-language model in llama.cpp's layout comes as the language model's file(s) and an `mmproj`
//! file ([`GgufLoader::with_mmproj`]): its header is checked against the language model's (width, image
//! token) with the others, and its tensors are placed as they arrive, under the Hugging Face names of
//! the family's vision part.

use burn::tensor::Device;

use super::staging::{Staging, default_limit, stage_all};
use crate::engine::EngineError;
use crate::engine::loaded::LoadedModel;
use crate::loader::gguf::TensorInfo;
use crate::loader::stream::{Event, GgufStream};
use crate::loader::{Gguf, GgufError, LoadError};
use crate::model::gguf::{self as gguf_model, CONFIG_TENSORS};
use crate::model::vision::assemble_in;
use crate::model::vision::gguf as mmproj;
use crate::model::{Decoder, ModelConfig, Placed};

pub use super::staging::WASM_WEIGHT_LIMIT;

/// A GGUF model loading piece by piece, from one file or from the files of a split model (llama.cpp's
/// `gguf-split`, `loader::split`): [`GgufLoader::push`] (or [`GgufLoader::push_to`] file `i`) the bytes
/// of each file in order, then [`GgufLoader::finish`]. Nothing is placed until every file's header is in
/// and checked: against the other files, then all tensors together against the model. Push each file's
/// first bytes until [`GgufLoader::header_in`] says its header parsed, then the rest of every file: tensors
/// that complete before the last header is in are held (at most what those first pieces carried). After
/// an error the loader is spent; the device memory of what was placed is freed with it.
pub struct GgufLoader<'f> {
    streams: Vec<GgufStream>,
    state: State<'f>,
    /// An error stopped the load: every later call is refused.
    failed: bool,
}

/// What the loader's streams report into.
struct State<'f> {
    device: Device,
    /// Whether each file's header has been parsed.
    parsed: Vec<bool>,
    /// The headers parsed while another file's is still missing (cleared once all are in and staged; the
    /// last one, and a single file's, is only borrowed from its stream).
    held: Vec<Option<Gguf<'static>>>,
    staging: Option<Staging>,
    /// Tensors completed before every header was in: `(file, name, info, bytes)`.
    early: Vec<(usize, String, TensorInfo, Vec<u8>)>,
    /// Whether the last file is an mmproj.
    mmproj: bool,
    /// `(loaded, total)` bytes of tensor data on the device, after the headers and after each tensor.
    on_upload: Box<dyn FnMut(u64, u64) + 'f>,
    /// The most bytes the weights may take as held on the device.
    weight_limit: Option<u64>,
    /// The load's `contextLength`.
    context: Option<usize>,
}

impl<'f> GgufLoader<'f> {
    /// A loader of one file.
    pub fn new(device: &Device, on_upload: impl FnMut(u64, u64) + 'f) -> Self {
        Self::files(device, 1, on_upload)
    }

    /// A loader of a model in `files` files (at least one).
    pub fn files(device: &Device, files: usize, on_upload: impl FnMut(u64, u64) + 'f) -> Self {
        let files = files.max(1);
        Self {
            streams: (0..files).map(|_| GgufStream::new()).collect(),
            state: State {
                device: device.clone(),
                parsed: vec![false; files],
                held: vec![None; files],
                staging: None,
                early: Vec::new(),
                mmproj: false,
                on_upload: Box::new(on_upload),
                weight_limit: default_limit(device),
                context: None,
            },
            failed: false,
        }
    }

    /// Caps the bytes the weights may take as held on the device (quantized blocks packed, other matrices
    /// widened to f32): a model beyond it is refused when its headers are in, before any allocation.
    pub fn with_weight_limit(mut self, limit: Option<u64>) -> Self {
        self.state.weight_limit = limit;
        self
    }

    /// Serves at most `positions` positions (the load's `contextLength`); without it the model's own
    /// context, capped where the device has no room for its KV cache (`runtime::context`). A context the
    /// device cannot hold is refused with the headers, before any tensor is placed.
    pub fn with_context(mut self, positions: Option<usize>) -> Self {
        self.state.context = positions;
        self
    }

    /// One more file, pushed last: the `mmproj` of a vision-language model (its vision tower and
    /// projector, llama.cpp's `clip` file) whose language model the other files hold.
    pub fn with_mmproj(mut self) -> Self {
        if !self.state.mmproj {
            self.state.mmproj = true;
            self.streams.push(GgufStream::new());
            self.state.parsed.push(false);
            self.state.held.push(None);
        }
        self
    }

    /// Declares the length of file `file` (before its first bytes): a tensor that would end past it is
    /// refused, named, once the header parses.
    pub fn declare_len(&mut self, file: usize, len: u64) {
        if let Some(stream) = self.streams.get_mut(file) {
            stream.declare_len(len);
        }
    }

    /// Whether file `file`'s header has been parsed.
    pub fn header_in(&self, file: usize) -> bool {
        self.state.parsed.get(file).copied().unwrap_or(false)
    }

    /// The next bytes of the (first) file.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), EngineError> {
        self.push_to(0, piece)
    }

    /// The next bytes of file `file` (0-based).
    pub fn push_to(&mut self, file: usize, piece: &[u8]) -> Result<(), EngineError> {
        if self.failed {
            return Err(spent());
        }
        let n = self.streams.len();
        let Some(stream) = self.streams.get_mut(file) else {
            self.failed = true;
            return Err(no_file(file, n));
        };
        let state = &mut self.state;
        let result = stream.push(piece, &mut |event| state.handle(file, event));
        if result.is_err() {
            // A stream stopped inside a tensor: what follows cannot be placed. Free what was.
            self.failed = true;
            self.state.staging = None;
        }
        result
    }

    /// The end of every file: the model, once every tensor has arrived.
    pub fn finish(self, id: &str) -> Result<LoadedModel, EngineError> {
        if self.failed {
            return Err(spent());
        }
        let Self {
            streams, mut state, ..
        } = self;
        for (file, stream) in streams.into_iter().enumerate() {
            stream.finish(&mut |event| state.handle(file, event))?;
        }
        let Some(mut s) = state.staging else {
            let file = state.parsed.iter().position(|p| !p).unwrap_or(0);
            let what = match state.parsed.len() {
                1 => "the header".to_owned(),
                _ => format!("the header of file {}", file + 1),
            };
            return Err(LoadError::Gguf(GgufError::Truncated(what)).into());
        };
        let (context, model_length) = (state.context, Some(s.model_length));
        let model = match s.vision {
            None => {
                let decoder = Decoder::assemble(s.config, &mut s.staged, &state.device)?;
                LoadedModel::new(id, decoder, s.tokenizer).with_context(context, model_length)?
            }
            Some(v) => {
                let config = ModelConfig {
                    vision: Some(v.config),
                    ..s.config
                };
                let (decoder, vision) = assemble_in(config, &mut s.staged, &state.device, v.names.layout)
                    .map_err(|e| mmproj::in_mmproj(e, &v.names))?;
                LoadedModel::new(id, decoder, s.tokenizer)
                    .with_context(context, model_length)?
                    .with_vision(vision, v.processor)?
            }
        };
        (state.on_upload)(s.total, s.total);
        Ok(model)
    }
}

/// The error of a loader that an earlier error stopped.
fn spent() -> EngineError {
    LoadError::Gguf(GgufError::Malformed(
        "the load stopped at an earlier error".into(),
    ))
    .into()
}

fn no_file(file: usize, n: usize) -> EngineError {
    LoadError::Gguf(GgufError::Malformed(format!(
        "bytes for file {} of a model in {n} file(s)",
        file + 1
    )))
    .into()
}

impl State<'_> {
    fn handle(&mut self, file: usize, event: Event<'_>) -> Result<(), EngineError> {
        match event {
            Event::Header(g) => {
                self.parsed[file] = true;
                if !self.parsed.iter().all(|&p| p) {
                    self.held[file] = Some(g.clone());
                    return Ok(());
                }
                let held = std::mem::take(&mut self.held);
                let headers: Vec<&Gguf<'static>> = held
                    .iter()
                    .enumerate()
                    .map(|(j, h)| if j == file { Some(g) } else { h.as_ref() })
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                let s = stage_all(
                    &headers,
                    self.mmproj,
                    &self.device,
                    self.weight_limit,
                    self.context,
                )?;
                (self.on_upload)(0, s.total);
                self.staging = Some(s);
                for (file, name, info, bytes) in std::mem::take(&mut self.early) {
                    self.tensor(file, &name, &info, &bytes)?;
                }
            }
            Event::Tensor { name, info, bytes } => match self.staging {
                Some(_) => self.tensor(file, name, info, bytes)?,
                None => self
                    .early
                    .push((file, name.to_owned(), info.clone(), bytes.to_vec())),
            },
        }
        Ok(())
    }

    /// Places tensor `name` of file `file` (the model is staged).
    fn tensor(
        &mut self,
        file: usize,
        name: &str,
        info: &TensorInfo,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        let Some(s) = self.staging.as_mut() else {
            return Ok(());
        };
        let projector = self.mmproj && file + 1 == self.parsed.len();
        if let (true, Some(v)) = (projector, s.vision.as_ref()) {
            let hf =
                v.hf.get(name)
                    .ok_or_else(|| LoadError::Extra(format!("{name} (mmproj)")))?
                    .clone();
            let raw = gguf_model::prepare(&hf, name, info, bytes, v.names.fixups)?;
            let placed = match v.names.dense.contains(&name) {
                true => Placed::dense(&raw, &self.device),
                false => Placed::new(&hf, &raw, &self.device)?,
            };
            s.staged.insert(hf, placed);
        } else if CONFIG_TENSORS.contains(&name) {
            gguf_model::config_tensor(&mut s.config, name, info, bytes)?;
        } else if s.config.arch.family().gguf_ignored(&s.config, name) {
            // A part of the file kiln does not run (multi-token-prediction blocks): read past.
        } else {
            let hf = s
                .names
                .get(name)
                .ok_or_else(|| LoadError::Extra(name.into()))?
                .clone();
            let raw = gguf_model::prepare(&hf, name, info, bytes, s.fixups)?;
            let placed = Placed::new(&hf, &raw, &self.device)?;
            s.staged.insert(hf, placed);
        }
        s.loaded = (s.loaded + bytes.len() as u64).min(s.total);
        (self.on_upload)(s.loaded, s.total);
        Ok(())
    }
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
