//! Device selection: the one file that decides where kiln's tensors live.
//!
//! - [`cpu`]: burn's pure-Rust `flex` backend. Native tests run here; in the browser it is the fallback when
//!   there is no WebGPU adapter.
//! - [`gpu`]: burn's wgpu runtime. In the browser that is WebGPU (`navigator.gpu`); natively it is whatever
//!   wgpu picks (Vulkan, on CI through Mesa's lavapipe).
//!
//! The adapter's type also picks the decode GEMV's layout (`kernels::gpu::GemvLayout`), reported in
//! [`DeviceInfo::gemv`], and its features the kernels' f16 and subgroup paths ([`DeviceInfo::features`]).
//!
//! burn registers a wgpu runtime once per adapter selector (a second `init` is an error), so [`gpu`]
//! initialises it on first use and hands out clones of the same [`Device`] afterwards, until a read finds
//! the device lost ([`gpu_lost`]); in the browser the next [`gpu`] call then acquires a new one.

use burn::tensor::Device;
#[cfg(feature = "webgpu")]
use burn::tensor::wgpu::{WgpuOptions, WgpuSetup, wgpu};
use serde::Serialize;

#[cfg(feature = "webgpu")]
use crate::kernels::caps::{self, Caps};
use crate::kernels::caps::{Features, GemvLayout};

/// Which kind of device a [`Gpu`] or [`cpu`] call produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// burn's wgpu runtime on a GPU adapter (WebGPU in the browser).
    Gpu,
    /// burn's `flex` CPU backend.
    Cpu,
}

/// What a device is, for logs, the demo page and (later) the engine's `device` report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    /// `gpu` or `cpu`.
    pub kind: DeviceKind,
    /// The graphics API: `BrowserWebGpu`, `Vulkan`, `Metal`, ... or `flex` for the CPU backend.
    pub backend: String,
    /// The adapter's name (in browsers, `GPUAdapterInfo.description`, often empty by privacy policy).
    pub adapter: String,
    /// wgpu's device type: `Cpu` for software adapters such as SwiftShader or lavapipe, `DiscreteGpu`, ...
    pub device_type: String,
    /// Driver name and version, where the platform tells (never in browsers).
    pub driver: String,
    /// Whether WGSL `f16` is available (`shader-f16`). Without it models run in f32.
    pub shader_f16: bool,
    /// Whether the adapter offers subgroup operations (`subgroups`).
    pub subgroups: bool,
    /// What kiln's kernels use of them (f16 decode activations and KV cache; subgroup reductions and the
    /// subgroup size they count on), chosen here from the adapter's features and a probe of its
    /// subgroups (`kernels::gpu::caps`); natively `KILN_F16=0` and `KILN_SUBGROUPS=0` turn them off.
    /// `None` on the CPU backend.
    pub features: Option<Features>,
    /// The adapter limits that bound model size and kernel shapes; `None` on the CPU backend.
    pub limits: Option<GpuLimits>,
    /// The decode GEMV's layout, chosen from the adapter's type (`rows` on software adapters, `split` on
    /// GPUs; natively `KILN_GEMV=rows|split` overrides); `None` on the CPU backend.
    pub gemv: Option<GemvLayout>,
    /// The CPU threads its products run on: the size of rayon's pool in a build with the `threads`
    /// feature (the package's threaded wasm build), else 1. 1 on wgpu devices, where the host only
    /// drives the GPU.
    pub threads: usize,
}

/// A few of the adapter's limits, in bytes or invocations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size_x: u32,
}

/// An initialised wgpu device and what it runs on.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub device: Device,
    pub info: DeviceInfo,
}

/// The device could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// wgpu found no usable adapter, or the adapter refused to create a device.
    #[error("no usable GPU adapter for `device`: {0}")]
    Unavailable(String),
}

/// Runs the wasm module's constructors (`inventory` registrations: pliron's, which cubecl's kernel compiler
/// needs, number in the thousands) once per module; a no-op natively, where the loader runs them.
///
/// Why it is called explicitly: when no export calls `__wasm_call_ctors`, wasm-ld deems the module
/// "command-style" and calls the constructors at the top of *every* exported function, i.e. on every call
/// from JavaScript into the module: each WebGPU object handed to wasm (`__externref_table_alloc`), each
/// callback, each method. Measured in Chromium (a CPU profile of SmolLM2's first chat request on WebGPU):
/// about a quarter of the main thread's 39 s went to re-running them, a single stretch of 34 s without a
/// task, past chromedriver's 30 s. Called from the package's start function and from [`cpu`] and [`gpu`]
/// (hosts such as wasm-bindgen-test skip start functions), the module is a "reactor" and its exports no
/// longer run them. The flag lives in linear memory, which the threaded build's workers share: the
/// registrations, made in that memory, are made once.
pub fn run_constructors() {
    #[cfg(target_family = "wasm")]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        unsafe extern "C" {
            fn __wasm_call_ctors();
        }
        static DONE: AtomicBool = AtomicBool::new(false);
        if !DONE.swap(true, Ordering::SeqCst) {
            // SAFETY: the linker-synthesised function runs the constructors, which only register
            // (`inventory` guards each registration, so even a second run would be harmless).
            unsafe { __wasm_call_ctors() }
        }
    }
}

/// Whether `device` is burn's CPU backend (`flex`).
pub fn is_cpu(device: &Device) -> bool {
    matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_))
}

/// burn's CPU backend and its description.
pub fn cpu() -> (Device, DeviceInfo) {
    run_constructors();
    let info = DeviceInfo {
        kind: DeviceKind::Cpu,
        backend: "flex".into(),
        adapter: "burn flex (CPU)".into(),
        device_type: "Cpu".into(),
        driver: String::new(),
        shader_f16: false,
        subgroups: false,
        features: None,
        limits: None,
        gemv: None,
        #[cfg(feature = "threads")]
        threads: crate::kernels::cpu::split::threads(),
        #[cfg(not(feature = "threads"))]
        threads: 1,
    };
    (Device::flex(), info)
}

/// Without the `webgpu` feature (the threaded wasm build): there is no wgpu device.
#[cfg(not(feature = "webgpu"))]
pub async fn gpu() -> Result<Gpu, DeviceError> {
    Err(DeviceError::Unavailable(
        "this build of kiln has no WebGPU backend (the threaded CPU build); the package's default build has"
            .into(),
    ))
}

/// wgpu devices lost so far ([`gpu_lost`]): the next [`gpu`] call acquires a new one.
#[cfg(feature = "webgpu")]
static LOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Records that `device` was lost (a read found it poisoned: wgpu reported the device gone). If it is the
/// device [`gpu`] hands out, the next [`gpu`] call acquires a new one (in the browser; natively it says
/// the process must restart). Engines on the lost device keep failing; new loads get the new device.
#[cfg(feature = "webgpu")]
pub fn gpu_lost(device: &Device) {
    let forget = |slot: &mut Option<Gpu>| {
        if slot.as_ref().is_some_and(|g| g.device == *device) {
            *slot = None;
            LOST.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    };
    #[cfg(target_family = "wasm")]
    GPU.with(|g| forget(&mut g.borrow_mut()));
    #[cfg(not(target_family = "wasm"))]
    forget(&mut GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
}

/// Without the WebGPU backend no device is ever lost.
#[cfg(not(feature = "webgpu"))]
pub fn gpu_lost(_: &Device) {}

#[cfg(all(feature = "webgpu", target_family = "wasm"))]
thread_local! {
    /// The device [`gpu`] hands out.
    static GPU: std::cell::RefCell<Option<Gpu>> = const { std::cell::RefCell::new(None) };
}
/// The device [`gpu`] hands out.
#[cfg(all(feature = "webgpu", not(target_family = "wasm")))]
static GPU: std::sync::Mutex<Option<Gpu>> = std::sync::Mutex::new(None);

/// The wgpu device (WebGPU in the browser), initialised on first call and shared afterwards; after a loss
/// ([`gpu_lost`]) a new one.
///
/// burn registers one runtime per adapter selector and never a second under the same one, so after `n`
/// losses the browser build asks under `DiscreteGpu(n - 1)`: in the browser every selector but
/// `IntegratedGpu` requests the same high-performance adapter, each as a new `GPUDevice`.
#[cfg(feature = "webgpu")]
pub async fn gpu() -> Result<Gpu, DeviceError> {
    use burn::tensor::DeviceKind as Selector;
    run_constructors();
    let lost = LOST.load(std::sync::atomic::Ordering::SeqCst);
    #[cfg(target_family = "wasm")]
    {
        if let Some(gpu) = GPU.with(|g| g.borrow().clone()) {
            return Ok(gpu);
        }
        let selector = match lost {
            0 => Selector::DefaultDevice,
            n => Selector::DiscreteGpu(n - 1),
        };
        let (device, setup) = batched(Device::wgpu_options().device_kind(selector))
            .init_with_setup_async()
            .await
            .map_err(|e| DeviceError::Unavailable(e.to_string()))?;
        let subgroups = match has_subgroups(&setup) {
            true => crate::kernels::gpu::caps::probe(&device).await,
            false => None,
        };
        let gpu = Gpu {
            info: describe(&device, &setup, subgroups),
            device,
        };
        GPU.with(|g| *g.borrow_mut() = Some(gpu.clone()));
        Ok(gpu)
    }
    #[cfg(not(target_family = "wasm"))]
    {
        // Natively the synchronous init is available; holding the lock across it makes concurrent first
        // calls (parallel tests) wait for one initialisation instead of racing burn's registration.
        let mut slot = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(gpu) = slot.as_ref() {
            return Ok(gpu.clone());
        }
        if lost > 0 {
            // Native selectors name real adapters (the n-th discrete GPU), so there is no other one to ask.
            return Err(DeviceError::Unavailable(
                "the wgpu device was lost, and burn's runtime cannot be registered again in this process: \
                 restart it"
                    .into(),
            ));
        }
        let (device, setup) = batched(Device::wgpu_options().device_kind(Selector::DefaultDevice))
            .init_with_setup()
            .map_err(|e| DeviceError::Unavailable(e.to_string()))?;
        let subgroups = match has_subgroups(&setup) && env_flag("KILN_SUBGROUPS") != Some(false) {
            true => crate::kernels::gpu::caps::probe_blocking(&device),
            false => None,
        };
        let gpu = Gpu {
            info: describe(&device, &setup, subgroups),
            device,
        };
        *slot = Some(gpu.clone());
        Ok(gpu)
    }
}

/// Kernel launches cubecl records into one command buffer before it submits it (cubecl's default is 32).
/// A fused decode step is `8 × layers + 5` launches (245 for SmolLM2's 30 layers, 261 for 32 layers) and
/// ends in a read, which submits what is queued; with 512 a step is one submission instead of eight
/// (issue 16: one submission per token).
#[cfg(feature = "webgpu")]
const TASKS_PER_SUBMIT: usize = 512;

/// `options` with [`TASKS_PER_SUBMIT`], unless `CUBECL_WGPU_MAX_TASKS` is set (natively, for comparisons):
/// then cubecl reads and checks it itself.
#[cfg(feature = "webgpu")]
fn batched(options: WgpuOptions) -> WgpuOptions {
    match std::env::var_os("CUBECL_WGPU_MAX_TASKS") {
        Some(_) => options,
        None => options.tasks_max(TASKS_PER_SUBMIT),
    }
}

/// Whether the adapter offers subgroup operations (and cubecl asked for them: it requests every feature).
#[cfg(feature = "webgpu")]
fn has_subgroups(setup: &WgpuSetup) -> bool {
    setup.adapter.features().contains(wgpu::Features::SUBGROUP)
}

/// A native `0`/`1` (also `off`/`on`) override from the environment; `None` when unset or other.
#[cfg(all(feature = "webgpu", not(target_family = "wasm")))]
fn env_flag(name: &str) -> Option<bool> {
    match std::env::var(name).as_deref() {
        Ok("0" | "off") => Some(false),
        Ok("1" | "on") => Some(true),
        _ => None,
    }
}

/// What the device is, and the kernel choices made for it (its [`Caps`], recorded for `device`);
/// `subgroups`: the subgroup size the probe accepted, if the adapter has subgroups.
#[cfg(feature = "webgpu")]
fn describe(device: &Device, setup: &WgpuSetup, subgroups: Option<u32>) -> DeviceInfo {
    let adapter = setup.adapter.get_info();
    let limits = setup.adapter.limits();
    let software = adapter.device_type == wgpu::DeviceType::Cpu;
    let gemv = match software {
        true => GemvLayout::Rows,
        false => GemvLayout::Split,
    };
    #[cfg(not(target_family = "wasm"))]
    let gemv = match std::env::var("KILN_GEMV").as_deref() {
        Ok("rows") => GemvLayout::Rows,
        Ok("split") => GemvLayout::Split,
        _ => gemv,
    };
    let shader_f16 = setup.adapter.features().contains(wgpu::Features::SHADER_F16);
    let f16 = shader_f16;
    #[cfg(not(target_family = "wasm"))]
    let f16 = f16 && env_flag("KILN_F16") != Some(false);
    let features = Features { f16, subgroups };
    caps::record(
        device,
        Caps {
            features,
            gemv,
            software,
        },
    );
    DeviceInfo {
        kind: DeviceKind::Gpu,
        backend: format!("{:?}", setup.backend),
        adapter: adapter.name,
        device_type: format!("{:?}", adapter.device_type),
        driver: [adapter.driver, adapter.driver_info]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        shader_f16,
        subgroups: has_subgroups(setup),
        features: Some(features),
        limits: Some(GpuLimits {
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: limits.max_compute_workgroup_size_x,
        }),
        gemv: Some(gemv),
        threads: 1,
    }
}
