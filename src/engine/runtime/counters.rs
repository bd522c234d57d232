//! What the device work costs, counted where it happens (for the benchmark; nothing reads them to decide):
//!
//! - **dispatches**: kernel launches on wgpu (WebGPU in the browser, Vulkan natively), every one burn or
//!   kiln issues, through cubecl's launch observer (one launch is one compute dispatch). The CPU backend
//!   launches none (and a build without the `webgpu` feature counts none).
//! - **reads** and **read bytes**: transfers from the device to the host by the generation loop
//!   ([`note_read`], called by each of its reads), on every backend.
//!
//! [`watch`] starts counting and returns the guard that holds the counts; counting stops when it drops.
//! One watch at a time (a second replaces the first's launch observer while it lives).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[cfg(feature = "webgpu")]
use cubecl::logging::{LaunchObservation, LaunchObserver};
use serde::Serialize;

static READS: AtomicU64 = AtomicU64::new(0);
static READ_BYTES: AtomicU64 = AtomicU64::new(0);

/// Records one read of `bytes` from the device.
pub(crate) fn note_read(bytes: usize) {
    READS.fetch_add(1, Ordering::Relaxed);
    READ_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

#[derive(Default)]
struct Launches {
    total: AtomicU64,
    by_kernel: Mutex<BTreeMap<&'static str, u64>>,
}

#[cfg(feature = "webgpu")]
impl LaunchObserver for Launches {
    fn launched(&self, kernel: &'static str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut map) = self.by_kernel.lock() {
            *map.entry(kernel).or_default() += 1;
        }
    }
}

/// Counts since a [`Watch`] started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    pub dispatches: u64,
    pub reads: u64,
    pub read_bytes: u64,
    /// Dispatches per kernel name.
    pub by_kernel: BTreeMap<String, u64>,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let by_kernel = self
            .by_kernel
            .iter()
            .map(|(k, &n)| (k.clone(), n - earlier.by_kernel.get(k).copied().unwrap_or(0)))
            .filter(|&(_, n)| n > 0)
            .collect();
        Counts {
            dispatches: self.dispatches - earlier.dispatches,
            reads: self.reads - earlier.reads,
            read_bytes: self.read_bytes - earlier.read_bytes,
            by_kernel,
        }
    }
}

/// Counting in progress; see the module docs.
pub struct Watch {
    launches: Arc<Launches>,
    reads: u64,
    read_bytes: u64,
    #[cfg(feature = "webgpu")]
    _observing: LaunchObservation,
}

/// Starts counting.
pub fn watch() -> Watch {
    let launches = Arc::new(Launches::default());
    Watch {
        #[cfg(feature = "webgpu")]
        _observing: LaunchObservation::new(launches.clone()),
        launches,
        reads: READS.load(Ordering::Relaxed),
        read_bytes: READ_BYTES.load(Ordering::Relaxed),
    }
}

impl Watch {
    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let by_kernel = self
            .launches
            .by_kernel
            .lock()
            .map(|m| m.iter().map(|(k, &n)| (k.to_string(), n)).collect())
            .unwrap_or_default();
        Counts {
            dispatches: self.launches.total.load(Ordering::Relaxed),
            reads: READS.load(Ordering::Relaxed) - self.reads,
            read_bytes: READ_BYTES.load(Ordering::Relaxed) - self.read_bytes,
            by_kernel,
        }
    }
}
