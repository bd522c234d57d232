//! `KilnInspector`: a GGUF model's headers pushed in pieces (each file's first megabytes), then
//! `report(device)`, what [`crate::engine::runtime::inspect`] says of them on that device — what a model
//! picker shows before anything large is downloaded.

use wasm_bindgen::prelude::*;

use super::engine::{choose_device, declared, load_error, to_js};
use crate::engine::EngineError;
use crate::engine::runtime::inspect::inspect;
use crate::loader::stream::GgufStream;
use crate::loader::{Gguf, GgufError, LoadError};

/// The headers of a model's files, gathered piece by piece (each file's stream keeps its header).
#[wasm_bindgen]
pub struct KilnInspector {
    streams: Vec<GgufStream>,
    mmproj: bool,
}

#[wasm_bindgen]
impl KilnInspector {
    /// An inspector of a model in `files` files (default 1; with `mmproj`, the last is its projector).
    #[wasm_bindgen(constructor)]
    pub fn new(files: Option<u32>, mmproj: Option<bool>) -> KilnInspector {
        super::install_panic_hook();
        let n = files.unwrap_or(1).max(1) as usize;
        Self {
            streams: (0..n).map(|_| GgufStream::new().header_only()).collect(),
            mmproj: mmproj == Some(true),
        }
    }

    /// The declared length of file `file` (as for `KilnLoader.declareLength`).
    #[wasm_bindgen(js_name = declareLength)]
    pub fn declare_length(&mut self, file: u32, bytes: f64) {
        if let (Some(s), Some(len)) = (self.streams.get_mut(file as usize), declared(bytes)) {
            s.declare_len(len);
        }
    }

    /// The next bytes of file `file`; push until `headerIn(file)` (later bytes are not looked at).
    #[wasm_bindgen(js_name = pushTo)]
    pub fn push_to(&mut self, file: u32, piece: &[u8]) -> Result<(), JsValue> {
        let Some(stream) = self.streams.get_mut(file as usize) else {
            return Ok(());
        };
        stream
            .push::<LoadError>(piece, &mut |_| Ok(()))
            .map_err(|e| load_error(&EngineError::Load(e)))
    }

    /// Whether file `file`'s header has been read.
    #[wasm_bindgen(js_name = headerIn)]
    pub fn header_in(&self, file: u32) -> bool {
        self.streams
            .get(file as usize)
            .is_some_and(|s| s.header().is_some())
    }

    /// The model as its headers describe it, and whether `device` (`"webgpu"`, `"cpu"` or `"auto"`) can
    /// run it: `{ architecture, name, files, parameters, tensorBytes, largestTensor, types, layers,
    /// vocabSize, contextLength, chatTemplate, vision, device: { runs, weightBytes, contextLength, error },
    /// deviceInfo }`.
    pub async fn report(&self, device: Option<String>) -> Result<JsValue, JsValue> {
        let headers: Vec<&Gguf<'static>> = self.streams.iter().filter_map(GgufStream::header).collect();
        if let Some(missing) = self.streams.iter().position(|s| s.header().is_none()) {
            return Err(load_error(&EngineError::Load(LoadError::Gguf(
                GgufError::Truncated(format!("the header of file {}", missing + 1)),
            ))));
        }
        let (device, info) = choose_device(device.as_deref()).await?;
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Report {
            #[serde(flatten)]
            inspection: crate::engine::runtime::inspect::Inspection,
            device_info: crate::engine::runtime::device::DeviceInfo,
        }
        to_js(&Report {
            inspection: inspect(&headers, self.mmproj, &device),
            device_info: info,
        })
    }
}
