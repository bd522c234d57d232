//! `KilnInspector`: a GGUF model's headers pushed in pieces (each file's first megabytes), then
//! `report(device)`, what [`crate::engine::runtime::inspect`] says of them on that device — what a model
//! picker shows before anything large is downloaded.

use wasm_bindgen::prelude::*;

use super::engine::{choose_device, load_error, to_js};
use crate::engine::EngineError;
use crate::engine::runtime::inspect::inspect;
use crate::loader::stream::{Event, GgufStream};
use crate::loader::{Gguf, LoadError};

/// The headers of a model's files, gathered piece by piece.
#[wasm_bindgen]
pub struct KilnInspector {
    streams: Vec<GgufStream>,
    headers: Vec<Option<Gguf<'static>>>,
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
            headers: vec![None; n],
            mmproj: mmproj == Some(true),
        }
    }

    /// The declared length of file `file` (as for `KilnLoader.declareLength`).
    #[wasm_bindgen(js_name = declareLength)]
    pub fn declare_length(&mut self, file: u32, bytes: f64) {
        if let Some(s) = self.streams.get_mut(file as usize)
            && bytes.is_finite()
            && bytes > 0.0
        {
            *s = std::mem::take(s).header_only().with_len(bytes as u64);
        }
    }

    /// The next bytes of file `file`; push until `headerIn(file)`.
    #[wasm_bindgen(js_name = pushTo)]
    pub fn push_to(&mut self, file: u32, piece: &[u8]) -> Result<(), JsValue> {
        let i = file as usize;
        let (Some(stream), Some(slot)) = (self.streams.get_mut(i), self.headers.get_mut(i)) else {
            return Ok(());
        };
        if slot.is_some() {
            return Ok(());
        }
        stream
            .push::<LoadError>(piece, &mut |e| {
                if let Event::Header(g) = e {
                    *slot = Some(g.clone());
                }
                Ok(())
            })
            .map_err(|e| load_error(&EngineError::Load(e)))
    }

    /// Whether file `file`'s header has been read.
    #[wasm_bindgen(js_name = headerIn)]
    pub fn header_in(&self, file: u32) -> bool {
        self.headers.get(file as usize).is_some_and(Option::is_some)
    }

    /// The model as its headers describe it, and whether `device` (`"webgpu"`, `"cpu"` or `"auto"`) can
    /// run it: `{ architecture, name, files, parameters, tensorBytes, largestTensor, types, layers,
    /// vocabSize, contextLength, chatTemplate, vision, device: { runs, weightBytes, contextLength, error },
    /// deviceInfo }`.
    pub async fn report(&self, device: Option<String>) -> Result<JsValue, JsValue> {
        let headers: Vec<&Gguf<'static>> = self.headers.iter().flatten().collect();
        if headers.len() != self.headers.len() {
            let missing = self.headers.iter().position(Option::is_none).unwrap_or(0);
            return Err(load_error(&EngineError::Load(LoadError::Gguf(
                crate::loader::GgufError::Truncated(format!("the header of file {}", missing + 1)),
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
