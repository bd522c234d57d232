//! A device's capabilities as kiln's kernels use them ([`Caps`]): its optional kernel paths
//! ([`Features`]: f16 activations, subgroup reductions), the decode GEMV's layout ([`GemvLayout`]) and
//! whether the adapter is a software one. `engine::runtime::device::gpu` makes them once per device
//! ([`record`]); a weight takes them at upload and a decoder at assembly ([`Caps::of`]), and hands them to
//! every kernel it launches. Nothing here is a process setting a kernel reads: tests and benchmarks hand a
//! kernel, a weight or a decoder other caps the device also has.
//!
//! The CPU backend has none of these paths ([`Caps::BASE`]). How the wgpu kernels use them, and the
//! subgroup probe, are in `kernels::gpu::caps`.

use burn::tensor::Device;

/// The optional kernel paths a device takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Features {
    /// Decode activations and the KV cache in f16 (`shader-f16`).
    pub f16: bool,
    /// Subgroup reductions: the smallest subgroup size any kernel may run with (a power of two, 4 to
    /// [`MAX_SUBGROUP`]), or `None` without them.
    pub subgroups: Option<u32>,
}

impl Features {
    /// Plain f32 kernels, no subgroups: what every WebGPU adapter runs.
    pub const BASE: Features = Features {
        f16: false,
        subgroups: None,
    };

    /// The width of a shuffle reduction over `lanes` lanes: `lanes` itself when subgroups are on and a
    /// subgroup holds them all, else `None` (shared memory).
    pub fn shuffle_width(&self, lanes: usize) -> Option<usize> {
        self.subgroups
            .map(|s| s as usize)
            .filter(|&s| lanes <= s && lanes.is_power_of_two())
            .map(|_| lanes)
    }
}

/// How the decode GEMV spreads a matrix over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GemvLayout {
    /// Whole rows per thread (`gemv.rs`): software Vulkan (lavapipe, SwiftShader), where a workgroup's
    /// threads are the SIMD lanes of one CPU thread.
    Rows,
    /// A row's blocks shared by a workgroup's lanes, summed in shared memory (`gemv_split.rs`): GPUs.
    Split,
}

/// What a device offers kiln's kernels and how they run on it: a value handed to every kernel that
/// chooses (the GEMVs through their [`GpuWeight`](super::GpuWeight), the decode kernels and the argmax
/// as an argument), made once per device by `engine::runtime::device::gpu` and held by what runs there
/// (a weight, a decoder). Tests and benchmarks hand a kernel other caps the device also has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// f16 activations and subgroup reductions.
    pub features: Features,
    /// The decode GEMV's layout.
    pub gemv: GemvLayout,
    /// A software adapter (lavapipe, SwiftShader): choices that pay off only on GPUs (splitting a long
    /// attention span, selecting nucleus candidates on the device) are not taken.
    pub software: bool,
}

impl Caps {
    /// What every WebGPU adapter runs: plain f32 kernels, whole rows per GEMV thread, no GPU-only
    /// choices.
    pub const BASE: Caps = Caps {
        features: Features::BASE,
        gemv: GemvLayout::Rows,
        software: true,
    };

    /// The caps `device::gpu` made for `device` ([`record`]), or [`Caps::BASE`] for a device it did not
    /// make (the CPU backend's).
    pub fn of(device: &Device) -> Caps {
        let recorded = RECORDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        recorded
            .iter()
            .find(|(d, _)| d == device)
            .map_or(Caps::BASE, |&(_, caps)| caps)
    }

    /// These caps with `features` instead.
    pub fn with_features(self, features: Features) -> Caps {
        Caps { features, ..self }
    }

    /// These caps with the GEMV layout `gemv` instead.
    pub fn with_gemv(self, gemv: GemvLayout) -> Caps {
        Caps { gemv, ..self }
    }
}

/// Each device `device::gpu` made, with the caps it found: the record [`Caps::of`] reads when a weight
/// is uploaded or a decoder assembled. Kernels never read it.
static RECORDED: std::sync::Mutex<Vec<(Device, Caps)>> = std::sync::Mutex::new(Vec::new());

/// Records the caps of a device just made (`engine::runtime::device::gpu`; a device made again after a
/// loss replaces its record).
pub fn record(device: &Device, caps: Caps) {
    let mut recorded = RECORDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    recorded.retain(|(d, _)| d != device);
    recorded.push((device.clone(), caps));
}
