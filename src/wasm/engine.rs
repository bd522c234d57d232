//! The engine's JavaScript surface below the `Engine` wrapper: a loaded model ([`KilnModel`]) and a request
//! in flight ([`KilnStream`]). Conversion and plumbing only: requests arrive as plain JS objects (parsed and
//! validated by [`crate::api`] before any device work), chunks and responses leave as plain JS objects in
//! OpenAI's shapes, and errors leave as `{ status, error: { message, type, param, code } }`.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::api::{
    ApiError, not_an_object, parse_chat_from, parse_completion_from, validate_chat, validate_completion,
};
use crate::engine::protocol::respond::{Cancel, ChatStream, CompletionStream};
use crate::engine::runtime::device::{self, DeviceInfo};
use crate::engine::runtime::load::GgufLoader;
use crate::engine::{EncodedImages, EngineError, HfFiles, LoadedModel};
use crate::tokenizer::HfTokenizerFiles;
use burn::tensor::Device;

/// Plain-object serialisation (maps as objects, `u64` as numbers), as JSON would give.
pub(super) fn to_js(value: &impl Serialize) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| JsValue::from_str(&e.to_string()))
}

/// An OpenAI-shaped error object: `{ status, error: { message, type, param, code } }`.
fn api_error(e: &ApiError) -> JsValue {
    #[derive(Serialize)]
    struct Shaped {
        status: u16,
        error: crate::api::error::ErrorObject,
    }
    to_js(&Shaped {
        status: e.status(),
        error: e.body().error,
    })
    .unwrap_or_else(|err| err)
}

/// A request object from JavaScript, read into its request type by `parse` straight from the JS value
/// (`serde_wasm_bindgen`'s deserializer, no JSON value in between), with field paths in errors as
/// [`crate::api::parse_chat_from`] gives them. A body that is not a plain object (an array, `null`, a
/// string, `undefined`) is refused first.
///
/// `parse_chat_from` reads structs as maps, which is what makes unknown fields refused here: on its own,
/// `serde_wasm_bindgen` (0.6) looks up only a struct's declared fields; `tests/browser.rs` checks it.
fn js_request<T>(
    body: JsValue,
    parse: impl FnOnce(serde_wasm_bindgen::Deserializer) -> Result<T, ApiError>,
) -> Result<T, JsValue> {
    if !body.is_object() || js_sys::Array::is_array(&body) {
        return Err(api_error(&not_an_object()));
    }
    parse(serde_wasm_bindgen::Deserializer::from(body)).map_err(|e| api_error(&e))
}

/// Decoded images as the page hands them over: `{ width, height, data }` with `data` the RGBA bytes.
fn js_images(list: &js_sys::Array) -> Result<Vec<crate::engine::Image>, JsValue> {
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |k: &str| js_sys::Reflect::get(&item, &k.into()).unwrap_or(JsValue::UNDEFINED);
            let size = |k: &str| field(k).as_f64().filter(|v| *v >= 0.0 && v.fract() == 0.0);
            let bad = || {
                api_error(&ApiError::internal(format!(
                    "decoded image {i} is not {{ width, height, data }}"
                )))
            };
            let (width, height) = (size("width").ok_or_else(bad)?, size("height").ok_or_else(bad)?);
            let data = field("data");
            let rgba = match data.dyn_ref::<js_sys::Uint8ClampedArray>() {
                Some(a) => a.to_vec(),
                None => data.dyn_into::<js_sys::Uint8Array>().map_err(|_| bad())?.to_vec(),
            };
            if rgba.len() as f64 != width * height * 4.0 {
                return Err(bad());
            }
            Ok(crate::engine::Image {
                width: width as usize,
                height: height as usize,
                rgba,
            })
        })
        .collect()
}

/// A load that failed: 400 `model_load_failed`; files that do not belong together as one model are an
/// invalid `source` (422).
pub(super) fn load_error(e: &EngineError) -> JsValue {
    match e {
        EngineError::Shards(_) => source_error(e.to_string()),
        EngineError::LoadOption { option, .. } => api_error(&ApiError::invalid(option, e.to_string())),
        _ => api_error(&ApiError::cannot_serve(None, "model_load_failed", e.to_string())),
    }
}

/// A length a source declared, as JavaScript passes it (`0` where it declares none).
pub(super) fn declared(bytes: f64) -> Option<u64> {
    (bytes.is_finite() && bytes > 0.0).then_some(bytes as u64)
}

/// An invalid `source` (status 422, param `source`, like every invalid load option).
fn source_error(message: String) -> JsValue {
    api_error(&ApiError::invalid("source", message))
}

/// The device named by `device` (`"webgpu"`, `"cpu"` or `"auto"`, the default: a hardware WebGPU adapter,
/// else the CPU backend) with its description.
pub(super) async fn choose_device(device: Option<&str>) -> Result<(Device, DeviceInfo), JsValue> {
    match device.unwrap_or("auto") {
        "webgpu" => {
            let gpu = device::gpu()
                .await
                .map_err(|e| load_error(&EngineError::Device(e.to_string())))?;
            Ok((gpu.device, gpu.info))
        }
        "cpu" => Ok(device::cpu()),
        // A software adapter (SwiftShader, lavapipe: `deviceType` "Cpu") runs the model far slower than the
        // CPU backend does (measured: SmolLM2 decodes at 0.1 tok/s on SwiftShader, 15 tok/s on the CPU
        // backend in the same browser), so `auto` takes a hardware adapter or the CPU backend.
        "auto" => match device::gpu().await {
            Ok(gpu) if gpu.info.device_type != "Cpu" => Ok((gpu.device, gpu.info)),
            _ => Ok(device::cpu()),
        },
        other => Err(api_error(&ApiError::invalid(
            "device",
            format!("`device` must be \"webgpu\", \"cpu\" or \"auto\", got {other:?}"),
        ))),
    }
}

/// Calls the JavaScript `on_upload(loaded, total)` (if any) as weights reach the device.
fn reporter(on_upload: Option<js_sys::Function>) -> impl FnMut(u64, u64) {
    move |loaded, total| {
        if let Some(f) = &on_upload {
            // A throwing callback must not abort the load.
            let _ = f.call2(&JsValue::NULL, &(loaded as f64).into(), &(total as f64).into());
        }
    }
}

/// A model loaded on a device.
#[wasm_bindgen]
pub struct KilnModel {
    model: Rc<LoadedModel>,
    device: DeviceInfo,
}

/// Checks a `quantize` load option before anything is downloaded: throws the same 422 (param `quantize`)
/// that `KilnModel.fromHf` would, naming the choices.
#[wasm_bindgen(js_name = checkQuantize)]
pub fn check_quantize(name: String) -> Result<(), JsValue> {
    crate::loader::quantize_type(&name)
        .map(|_| ())
        .map_err(|e| api_error(&ApiError::invalid("quantize", e)))
}

/// A GGUF model loading piece by piece: `KilnLoader.gguf(device, onUpload, files)`, then `push(bytes)` for
/// each piece of the file in order (a fetch stream's chunks, slices of an `ArrayBuffer`), then
/// `finish(id)`. A model split into `files` files (llama.cpp's `gguf-split`): `pushTo(i, bytes)` each
/// file's first pieces until `headerIn(i)`, then the rest of every file. Each tensor goes to the device as
/// soon as its bytes are in (once every header is checked), so no file is ever whole in wasm memory. After
/// an error the loader is spent (what it placed is freed). A vision-language model in llama.cpp's layout
/// (`mmproj` true): the language model's files, then its mmproj as file `files`.
#[wasm_bindgen]
pub struct KilnLoader {
    inner: Option<GgufLoader<'static>>,
    device: DeviceInfo,
}

#[wasm_bindgen]
impl KilnLoader {
    /// A loader onto `device` (as for `KilnModel.fromGguf`) of a model in `files` files (default 1),
    /// plus an mmproj file after them where `mmproj` is true; `onUpload(loaded, total)` is called as
    /// tensors reach the device (bytes of tensor data). `contextLength`: the positions a request may take
    /// (default the model's, capped where the device has no room for the KV cache).
    pub async fn gguf(
        device: Option<String>,
        on_upload: Option<js_sys::Function>,
        files: Option<u32>,
        mmproj: Option<bool>,
        context_length: Option<u32>,
    ) -> Result<KilnLoader, JsValue> {
        super::install_panic_hook();
        let (device, info) = choose_device(device.as_deref()).await?;
        let files = files.unwrap_or(1) as usize;
        let mut loader = GgufLoader::files(&device, files, reporter(on_upload))
            .with_context(context_length.map(|n| n as usize));
        if mmproj == Some(true) {
            loader = loader.with_mmproj();
        }
        Ok(Self {
            inner: Some(loader),
            device: info,
        })
    }

    /// The length of file `file` (0-based) as its source declares it (`content-length`, a `Blob`'s size):
    /// a tensor ending past it is refused with the header. Before its first bytes.
    #[wasm_bindgen(js_name = declareLength)]
    pub fn declare_length(&mut self, file: u32, bytes: f64) {
        if let (Some(l), Some(len)) = (self.inner.as_mut(), declared(bytes)) {
            l.declare_len(file as usize, len);
        }
    }

    /// Whether file `file`'s header has been parsed (push its next pieces until it has).
    #[wasm_bindgen(js_name = headerIn)]
    pub fn header_in(&self, file: u32) -> bool {
        self.inner.as_ref().is_some_and(|l| l.header_in(file as usize))
    }

    /// The next bytes of file `file` (0-based) of a split model.
    #[wasm_bindgen(js_name = pushTo)]
    pub fn push_to(&mut self, file: u32, piece: &[u8]) -> Result<(), JsValue> {
        let loader = self.inner.as_mut().ok_or_else(Self::spent)?;
        loader.push_to(file as usize, piece).map_err(|e| {
            self.inner = None;
            load_error(&e)
        })
    }

    fn spent() -> JsValue {
        load_error(&EngineError::Load(crate::loader::LoadError::Gguf(
            crate::loader::GgufError::Malformed("the loader stopped at an earlier error".into()),
        )))
    }

    /// The next bytes of the file.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), JsValue> {
        self.push_to(0, piece)
    }

    /// The end of the file: the loaded model, named `id` in requests.
    pub fn finish(&mut self, id: String) -> Result<KilnModel, JsValue> {
        let loader = self.inner.take().ok_or_else(Self::spent)?;
        let model = loader.finish(&id).map_err(|e| load_error(&e))?;
        Ok(KilnModel {
            model: Rc::new(model),
            device: self.device.clone(),
        })
    }
}

/// A request's chunks, pulled one at a time, or collected into the full response.
#[wasm_bindgen]
pub struct KilnStream {
    inner: Rc<RefCell<Option<Pending>>>,
    cancel: Cancel,
    /// A chat request's images, until [`KilnStream::images`] has waited for their encoding.
    encoded: Rc<RefCell<Option<EncodedImages>>>,
}

enum Pending {
    Chat(Box<ChatStream>),
    Completion(CompletionStream),
}

#[wasm_bindgen]
impl KilnModel {
    /// Loads a single-file GGUF model from its bytes (all of them in wasm memory at once: prefer
    /// [`KilnLoader`], which takes the file in pieces). `device` is `"webgpu"`, `"cpu"` or `"auto"` (the
    /// default: WebGPU when the browser has an adapter, else the CPU backend). `id` is the name requests use
    /// in `model`. `onUpload(loaded, total)`, when given, is called as weights reach the device (bytes).
    #[wasm_bindgen(js_name = fromGguf)]
    pub async fn from_gguf(
        id: String,
        bytes: Vec<u8>,
        device: Option<String>,
        on_upload: Option<js_sys::Function>,
    ) -> Result<KilnModel, JsValue> {
        let mut loader = KilnLoader::gguf(device, on_upload, None, None, None).await?;
        loader.push(&bytes)?;
        loader.finish(id)
    }

    /// Loads a Hugging Face model from the bytes of its files: `{ config, tokenizer, tokenizerConfig?,
    /// chatTemplate?, generationConfig?, index?, weights: [{ name, bytes }] }` (`Uint8Array`s, except
    /// `chatTemplate`, a string). `device`, `id` and `onUpload` as for `fromGguf`. `quantize` (`"q8_0"`,
    /// `"q4_k"`, …) quantizes every float weight matrix as it loads.
    #[wasm_bindgen(js_name = fromHf)]
    pub async fn from_hf(
        id: String,
        files: JsValue,
        device: Option<String>,
        on_upload: Option<js_sys::Function>,
        quantize: Option<String>,
        context_length: Option<u32>,
    ) -> Result<KilnModel, JsValue> {
        super::install_panic_hook();
        let quantize = quantize
            .as_deref()
            .map(crate::loader::quantize_type)
            .transpose()
            .map_err(|e| api_error(&ApiError::invalid("quantize", e)))?;
        let bytes = |key: &str, required: bool| -> Result<Option<Vec<u8>>, JsValue> {
            let v = js_sys::Reflect::get(&files, &key.into()).unwrap_or(JsValue::UNDEFINED);
            if v.is_undefined() || v.is_null() {
                return match required {
                    true => Err(source_error(format!("`source.{key}` is missing"))),
                    false => Ok(None),
                };
            }
            match v.dyn_into::<js_sys::Uint8Array>() {
                Ok(a) => Ok(Some(a.to_vec())),
                Err(_) => Err(source_error(format!("`source.{key}` is not bytes"))),
            }
        };
        let config = bytes("config", true)?.unwrap_or_default();
        let tokenizer = bytes("tokenizer", true)?.unwrap_or_default();
        let tokenizer_config = bytes("tokenizerConfig", false)?;
        let generation_config = bytes("generationConfig", false)?;
        let index = bytes("index", false)?;
        let preprocessor = bytes("preprocessor", false)?;
        let chat_template = js_sys::Reflect::get(&files, &"chatTemplate".into())
            .ok()
            .and_then(|v| v.as_string());
        let list = js_sys::Reflect::get(&files, &"weights".into()).unwrap_or(JsValue::UNDEFINED);
        if !js_sys::Array::is_array(&list) {
            return Err(source_error(
                "`source.weights` must be an array of `{ name, bytes }`".into(),
            ));
        }
        let mut weights = Vec::new();
        for (i, item) in js_sys::Array::from(&list).iter().enumerate() {
            let name = js_sys::Reflect::get(&item, &"name".into())
                .ok()
                .and_then(|v| v.as_string())
                .ok_or_else(|| source_error(format!("`source.weights[{i}].name` is not a string")))?;
            let data = js_sys::Reflect::get(&item, &"bytes".into())
                .ok()
                .and_then(|v| v.dyn_into::<js_sys::Uint8Array>().ok())
                .ok_or_else(|| source_error(format!("`source.weights[{i}].bytes` is not bytes")))?;
            weights.push((name, data.to_vec()));
        }
        let (device, info) = choose_device(device.as_deref()).await?;
        let files = HfFiles {
            preprocessor: preprocessor.as_deref(),
            config: &config,
            weights: weights.iter().map(|(n, b)| (n.clone(), b.as_slice())).collect(),
            index: index.as_deref(),
            tokenizer: HfTokenizerFiles {
                tokenizer_json: &tokenizer,
                tokenizer_config: tokenizer_config.as_deref(),
                chat_template: chat_template.as_deref(),
                config: None,
                generation_config: generation_config.as_deref(),
            },
        };
        let mut report = reporter(on_upload);
        let model = LoadedModel::from_hf_quantized(&id, files, &device, quantize, &mut report)
            .and_then(|m| m.with_context(context_length.map(|n| n as usize), None))
            .map_err(|e| load_error(&e))?;
        Ok(Self {
            model: Rc::new(model),
            device: info,
        })
    }

    /// The id requests name in `model`.
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.model.id.clone()
    }

    /// The device the model runs on (`{ kind, backend, adapter, … }`).
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Result<JsValue, JsValue> {
        to_js(&self.device)
    }

    /// The `prefixCacheBytes` load option: this model, keeping the KV states of recent sequences in up to
    /// `bytes` bytes for prompts that start with one (0: none). Consumes this object. A value that is not
    /// a whole number of bytes, or too small for one sequence, is a 422 naming `prefixCacheBytes`.
    #[wasm_bindgen(js_name = withPrefixCache)]
    pub fn with_prefix_cache(self, bytes: f64) -> Result<KilnModel, JsValue> {
        let invalid = |message: String| api_error(&ApiError::invalid("prefixCacheBytes", message));
        if !(bytes.is_finite() && bytes >= 0.0 && bytes.fract() == 0.0 && bytes <= usize::MAX as f64) {
            return Err(invalid(format!(
                "`prefixCacheBytes` must be a whole number of bytes (0 or more), not {bytes}"
            )));
        }
        let model = Rc::try_unwrap(self.model)
            .map_err(|_| invalid("the prefix cache is set at load, before any request".into()))?;
        let model = model
            .with_prefix_cache(bytes as usize)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(KilnModel {
            model: Rc::new(model),
            device: self.device,
        })
    }

    /// The `chatTemplate` load option: this model, serving chat requests with `source` (a Jinja chat
    /// template) instead of its own or where it has none. Consumes this object. An invalid template is a
    /// 422 naming `chatTemplate`.
    #[wasm_bindgen(js_name = withChatTemplate)]
    pub fn with_chat_template(self, source: String) -> Result<KilnModel, JsValue> {
        let invalid = |message: String| api_error(&ApiError::invalid("chatTemplate", message));
        let model = Rc::try_unwrap(self.model)
            .map_err(|_| invalid("the chat template is set at load, before any request".into()))?;
        let model = model
            .with_chat_template(&source)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(KilnModel {
            model: Rc::new(model),
            device: self.device,
        })
    }

    /// The context the load granted: `{ length, modelLength, kvBytesPerPosition, bound }` (`bound`:
    /// `"model"`, `"option"`, `"memory"` or `"binding"`, what limits `length`).
    #[wasm_bindgen(getter)]
    pub fn context(&self) -> Result<JsValue, JsValue> {
        to_js(&self.model.context())
    }

    /// The model's bytes: `{ weightBytes, deviceBytesInUse, deviceBytesReserved }` (the device figures are
    /// `null` on the CPU backend, whose memory is the wasm memory).
    #[wasm_bindgen(getter)]
    pub fn memory(&self) -> Result<JsValue, JsValue> {
        to_js(&self.model.memory())
    }

    /// Parses and validates a chat request (throws the error object when it does not validate) and
    /// returns its stream; `images`: the request's `image_url` parts in order, as the page decoded them
    /// (`{ width, height, data }`, RGBA bytes). Nothing runs on the device until the stream is pulled
    /// (but the images' encoder).
    #[wasm_bindgen(js_name = chatStream)]
    pub fn chat_stream(&self, body: JsValue, images: Option<js_sys::Array>) -> Result<KilnStream, JsValue> {
        let req = js_request(body, parse_chat_from)?;
        let req = validate_chat(req, &self.model.spec()).map_err(|e| api_error(&e))?;
        let images = images.map(|a| js_images(&a)).transpose()?.unwrap_or_default();
        let (stream, encoded) = self
            .model
            .chat_encoding(req, &images)
            .map_err(|e| api_error(&e))?;
        let mut stream = KilnStream::new(Pending::Chat(Box::new(stream)));
        stream.encoded = Rc::new(RefCell::new(encoded));
        Ok(stream)
    }

    /// What the model takes besides text: `{ images: true, imageSize, tokensPerImage }` for a
    /// vision-language model, `null` for a text model.
    #[wasm_bindgen(getter)]
    pub fn vision(&self) -> Result<JsValue, JsValue> {
        match self.model.vision() {
            None => Ok(JsValue::NULL),
            Some(v) => to_js(&serde_json::json!({
                "images": true,
                "imageSize": v.config.image_size,
                "tokensPerImage": v.config.tokens_per_image(),
            })),
        }
    }

    /// As [`KilnModel::chat_stream`], for `POST /v1/completions` requests.
    #[wasm_bindgen(js_name = completionStream)]
    pub fn completion_stream(&self, body: JsValue) -> Result<KilnStream, JsValue> {
        let req = js_request(body, parse_completion_from)?;
        let req = validate_completion(req, &self.model.spec()).map_err(|e| api_error(&e))?;
        let stream = self.model.complete(req).map_err(|e| api_error(&e))?;
        Ok(KilnStream::new(Pending::Completion(stream)))
    }
}

impl KilnStream {
    fn new(p: Pending) -> Self {
        let cancel = match &p {
            Pending::Chat(s) => s.cancel_handle(),
            Pending::Completion(s) => s.cancel_handle(),
        };
        Self {
            inner: Rc::new(RefCell::new(Some(p))),
            cancel,
            encoded: Rc::new(RefCell::new(None)),
        }
    }

    /// Takes the stream out for one await (a second concurrent call finds it busy instead of panicking).
    fn take(inner: &Rc<RefCell<Option<Pending>>>) -> Result<Pending, JsValue> {
        inner.borrow_mut().take().ok_or_else(|| {
            api_error(&ApiError::cannot_serve(
                None,
                "stream_busy",
                "this stream is already being read, collected or was closed",
            ))
        })
    }
}

#[wasm_bindgen]
impl KilnStream {
    /// For a chat request with images: resolves to `{ images, tokens }` (how many images, how many prompt
    /// positions their rows take) once the device has encoded them; to `null` without images (or on a
    /// second call).
    pub fn images(&self) -> js_sys::Promise {
        let encoded = self.encoded.borrow_mut().take();
        wasm_bindgen_futures::future_to_promise(async move {
            let Some(mut e) = encoded else {
                return Ok(JsValue::NULL);
            };
            e.ready().await.map_err(|e| api_error(&e))?;
            to_js(&serde_json::json!({ "images": e.images, "tokens": e.tokens }))
        })
    }

    /// Resolves to the next chunk, or `undefined` when the stream is over; rejects with an error object.
    pub fn next(&self) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut pending = Self::take(&inner)?;
            let out = match &mut pending {
                Pending::Chat(s) => match s.next().await {
                    None => Ok(JsValue::UNDEFINED),
                    Some(Ok(chunk)) => to_js(&chunk),
                    Some(Err(e)) => Err(api_error(&e)),
                },
                Pending::Completion(s) => match s.next().await {
                    None => Ok(JsValue::UNDEFINED),
                    Some(Ok(chunk)) => to_js(&chunk),
                    Some(Err(e)) => Err(api_error(&e)),
                },
            };
            *inner.borrow_mut() = Some(pending);
            out
        })
    }

    /// Resolves to the full response: the rest of the stream collected (`chat.completion` or
    /// `text_completion`).
    pub fn collect(&self) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            match Self::take(&inner)? {
                Pending::Chat(s) => to_js(&s.collect().await.map_err(|e| api_error(&e))?),
                Pending::Completion(s) => to_js(&s.collect().await.map_err(|e| api_error(&e))?),
            }
        })
    }

    /// Aborts: a `next()` or `collect()` in flight stops at its next device step and rejects with
    /// `request_aborted`; the generation and its device buffers are dropped.
    pub fn close(&self) {
        self.cancel.set();
        self.inner.borrow_mut().take();
    }
}
