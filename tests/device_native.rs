//! The device self-check natively: burn's CPU backend, and wgpu (Vulkan; lavapipe on CI).
#![cfg(not(target_arch = "wasm32"))]

use kiln::engine::runtime::check::check_device;
use kiln::engine::runtime::device::{self, DeviceKind};

#[test]
fn cpu_backend_matches_the_host() {
    let (device, info) = device::cpu();
    assert_eq!(info.kind, DeviceKind::Cpu);
    let report = pollster::block_on(check_device(&device)).expect("check runs");
    eprintln!("cpu: {report:?}");
    assert!(report.passed, "{report:?}");
}

#[test]
fn native_wgpu_matches_the_host() {
    let gpu = pollster::block_on(device::gpu()).expect("a wgpu adapter (install mesa-vulkan-drivers)");
    eprintln!("adapter: {:?}", gpu.info);
    assert_eq!(gpu.info.kind, DeviceKind::Gpu);
    let limits = gpu.info.limits.as_ref().expect("a GPU reports limits");
    assert!(limits.max_buffer_size > 0);
    let report = pollster::block_on(check_device(&gpu.device)).expect("check runs");
    eprintln!("wgpu: {report:?}");
    assert!(report.passed, "{report:?}");
    // The device is initialised once and shared: a second call gives the same adapter.
    let again = pollster::block_on(device::gpu()).expect("second call");
    assert_eq!(again.info, gpu.info);
}
