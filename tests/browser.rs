//! The device self-check in headless Chromium: burn on WebGPU, and burn's CPU backend compiled to wasm32.
//! Run by `wasm-pack test --headless --chrome` (see `cargo xtask test`).
#![cfg(target_arch = "wasm32")]

use kiln::engine::check::check_device;
use kiln::engine::device::{self, DeviceKind};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn webgpu_matches_the_host() {
    let gpu = device::gpu()
        .await
        .expect("a WebGPU adapter (chromium --enable-unsafe-webgpu)");
    console_log!("WebGPU adapter: {:?}", gpu.info);
    assert_eq!(gpu.info.kind, DeviceKind::Gpu);
    assert_eq!(gpu.info.backend, "BrowserWebGpu");
    let report = check_device(&gpu.device).await.expect("check runs");
    console_log!("WebGPU check: {report:?}");
    assert!(report.passed, "{report:?}");
}

#[wasm_bindgen_test]
async fn cpu_backend_in_wasm_matches_the_host() {
    let (device, _) = device::cpu();
    let report = check_device(&device).await.expect("check runs");
    console_log!("CPU (flex, wasm32) check: {report:?}");
    assert!(report.passed, "{report:?}");
}
