//! The JavaScript facade: the only module that uses wasm-bindgen. It converts and forwards; the work is in
//! [`crate::engine`].
//!
//! - `deviceReport(kind)`: a device and the numerical self-check on it.
//! - `threadCount()` (and, in the threaded build, `initThreadPool(n)`): the CPU backend's threads.
//! - `KilnCounters` (`watchDevice()`): dispatches and device reads counted from now on, for benchmarks.
//! - [`engine`]: `KilnLoader` (a GGUF file pushed in pieces, each tensor to the device as it arrives),
//!   `KilnModel` (a loaded model; `chatStream` / `completionStream` validate a request and
//!   return a `KilnStream` whose `next()` gives chunks and `collect()` the full response).
//! - [`inspect`]: `KilnInspector` (a model's headers, and whether a device runs it: `Engine.inspect`).

pub mod engine;
pub mod inspect;

pub use engine::{KilnLoader, KilnModel, KilnStream, check_quantize};
pub use inspect::KilnInspector;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::engine::runtime::check::{CheckReport, check_device};
use crate::engine::runtime::device::{self, DeviceInfo};

// The OpenAI wire types (`ts/api.d.ts`, copied into the package by `cargo xtask`), re-exported from the
// generated `kiln.d.ts` so that `import type { ChatCompletion } from 'kiln-llm'` works.
#[wasm_bindgen(typescript_custom_section)]
const API_TYPES: &str = r#"export type * from "./api";"#;

/// Runs the module's constructors once, when the module is instantiated (wasm-bindgen's start function; see
/// [`device::run_constructors`], which the device functions also call for hosts that skip it, as
/// wasm-bindgen-test does).
#[wasm_bindgen(start)]
fn start() {
    device::run_constructors();
}

/// What `deviceReport()` resolves to: the device burn runs on and the self-check's result there.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceReport {
    device: DeviceInfo,
    check: CheckReport,
}

/// Initialises a device and runs the numerical self-check on it.
///
/// `kind` is `"webgpu"` (the default) or `"cpu"`. Resolves to `{ device, check }` (see `DeviceInfo` and
/// `CheckReport`); rejects with an `Error` when the device cannot be had or fails while computing.
#[wasm_bindgen(js_name = deviceReport)]
pub async fn device_report(kind: Option<String>) -> Result<JsValue, JsError> {
    install_panic_hook();
    let (device, info) = match kind.as_deref().unwrap_or("webgpu") {
        "webgpu" => {
            let gpu = device::gpu().await?;
            (gpu.device, gpu.info)
        }
        "cpu" => device::cpu(),
        other => {
            return Err(JsError::new(&format!(
                "unknown `kind` {other:?}: expected \"webgpu\" or \"cpu\""
            )));
        }
    };
    let check = check_device(&device).await?;
    let report = DeviceReport { device: info, check };
    Ok(report.serialize(&serde_wasm_bindgen::Serializer::json_compatible())?)
}

/// The threaded build's `initThreadPool(n)`: starts rayon's pool of `n` Web Workers over the shared memory.
/// `js/index.js` calls it once, right after the module's `init` and before any product runs (rayon's global
/// pool can be built only once, and the first use of rayon would build a pool of one instead).
#[cfg(feature = "threads")]
pub use wasm_bindgen_rayon::init_thread_pool;

/// The threads the CPU backend's products run on: rayon's pool in the threaded build, 1 otherwise.
#[wasm_bindgen(js_name = threadCount)]
pub fn thread_count() -> usize {
    #[cfg(feature = "threads")]
    {
        crate::kernels::cpu::split::threads()
    }
    #[cfg(not(feature = "threads"))]
    {
        1
    }
}

/// Dispatches and device reads counted while it lives (`crate::engine::runtime::counters`): for benchmarks.
#[wasm_bindgen]
pub struct KilnCounters {
    watch: crate::engine::runtime::counters::Watch,
}

/// Starts counting the wgpu dispatches (every kernel launch) and the reads from the device of the
/// generation loop; the returned object's `counts()` gives `{ dispatches, reads, read_bytes, by_kernel }`
/// so far, and `free()` stops counting.
#[wasm_bindgen(js_name = watchDevice)]
pub fn watch_device() -> KilnCounters {
    KilnCounters {
        watch: crate::engine::runtime::counters::watch(),
    }
}

#[wasm_bindgen]
impl KilnCounters {
    pub fn counts(&self) -> Result<JsValue, JsError> {
        let counts = self.watch.counts();
        Ok(counts.serialize(&serde_wasm_bindgen::Serializer::json_compatible())?)
    }
}

/// Sends Rust panics to the browser console, where they are otherwise reported as `unreachable`.
pub(crate) fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |panic| {
            web_sys::console::error_1(&format!("kiln panicked: {panic}").into());
            previous(panic);
        }));
    });
}
