//! Models at the sizes people run (issue 42). Random-weight GGUF files of real shapes — Llama 3.1 8B (4.9
//! GB, tensors past 2³² in the file) and Llama 3.2 1B in llama.cpp's Q4_K_M mix with Llama 3's vocabulary —
//! come from `tests/fixtures/make_llama_shape_files.py` straight through a pipe (nothing on disk) and
//! stream into the loader as a download does in the browser: 16 MiB pieces, each a fresh allocation
//! (wasm-bindgen copies a pushed piece into wasm memory). Gemma 3 270M (the data cache's real Q4_K_M file)
//! brings a 262,144-token vocabulary.
//!
//! Host memory is counted by this binary's global allocator. On WebGPU the weights live on the device, so
//! the Rust heap is what a wasm module's memory would hold; natively on lavapipe the device's memory is the
//! driver's own allocations, which this allocator does not see. The bound held: from the moment the
//! headers are staged (header, tokenizer and module already in), the heap grows by at most the largest
//! tensor + 64 MiB until the model is assembled.
//!
//! Needs the data cache (`cargo xtask fetch`; gguf-py, the tokenizer vocabularies, Gemma 3) and numpy
//! (`cargo xtask test` installs both).

#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::tensor::Device;
use kiln::engine::runtime::inspect::inspect;
use kiln::engine::runtime::load::{GgufLoader, WASM_WEIGHT_LIMIT};
use kiln::engine::runtime::runner::greedy;
use kiln::engine::{EngineError, LoadedModel};
use kiln::loader::Gguf;

/// The heap now, and its most since the last [`reset_peak`].
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocations of [`BIG`] bytes or more since the last [`reset_peak`]. In a wasm module's memory, which
/// never shrinks, each is a block the module keeps: two of them (an earlier large tensor's freed block
/// beside a larger one's) add up, where the live bytes this allocator counts do not show it.
static BIG_ALLOCS: AtomicUsize = AtomicUsize::new(0);
const BIG: usize = 64 << 20;

struct Counting;

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if layout.size() >= BIG {
            BIG_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size >= BIG && new_size > layout.size() {
            BIG_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        if !p.is_null() {
            if new_size >= layout.size() {
                let now =
                    CURRENT.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn reset_peak() -> usize {
    BIG_ALLOCS.store(0, Ordering::Relaxed);
    let now = CURRENT.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// One test at a time: the allocator's counts are the process's.
static SERIAL: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;
/// What a load may hold beyond its largest tensor (issue 42's bound).
const SLACK: usize = 64 * MIB;
/// The pieces a download arrives in (`js/index.js` hands the loader slices of this size).
const PIECE: usize = 16 * MIB;

fn cache() -> PathBuf {
    std::env::var_os("KILN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/kiln"))
}

/// The writer script's output for `model` (`1b`, `8b`), as a pipe.
fn shape_file(model: &str) -> std::process::Child {
    let cache = cache();
    let python = match std::path::Path::new("/usr/bin/python3").is_file() {
        true => "/usr/bin/python3",
        false => "python3",
    };
    Command::new(python)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PYTHONPATH", cache.join("llama.cpp/gguf-py"))
        .arg("tests/fixtures/make_llama_shape_files.py")
        .arg("-")
        .args(["--only", model, "--vocab-dir"])
        .arg(cache.join("llama.cpp/models"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with numpy and the data cache's gguf-py (`cargo xtask test` installs them)")
}

/// The next piece of `from`: up to [`PIECE`] bytes in a new allocation, empty at the end.
fn piece(from: &mut impl Read) -> Vec<u8> {
    let mut buf = vec![0u8; PIECE];
    let mut n = 0;
    while n < PIECE {
        match from.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading the model: {e}"),
        }
    }
    buf.truncate(n);
    buf
}

/// What a streamed load held.
struct Streamed {
    /// The model, or the load's error.
    model: Result<LoadedModel, EngineError>,
    /// Bytes pushed until the load ended (or failed).
    pushed: u64,
    /// The heap when the headers were staged (the loader's first report), and its most above that.
    staged_at: usize,
    peak_above: usize,
    /// Allocations of 64 MiB or more after the staging.
    big_allocs: usize,
    /// The first bytes of the file (its header, for [`inspect`]).
    head: Vec<u8>,
}

/// Streams `from` into a loader on `device` (with `limit` as its weight limit when given).
fn stream(from: &mut impl Read, device: &Device, limit: Option<u64>) -> Streamed {
    let staged = std::cell::Cell::new(None);
    let mut loader = GgufLoader::new(device, |loaded, _| {
        if loaded == 0 && staged.get().is_none() {
            staged.set(Some(reset_peak()));
        }
    });
    if let Some(limit) = limit {
        loader = loader.with_weight_limit(Some(limit));
    }
    let (mut pushed, mut head) = (0u64, Vec::new());
    let mut failed = None;
    loop {
        let p = piece(from);
        if p.is_empty() {
            break;
        }
        if head.len() < 32 * MIB {
            head.extend_from_slice(&p[..p.len().min(32 * MIB - head.len())]);
        }
        pushed += p.len() as u64;
        if let Err(e) = loader.push(&p) {
            failed = Some(e);
            break;
        }
    }
    let model = match failed {
        Some(e) => Err(e),
        None => loader.finish("big"),
    };
    let staged_at = staged.get().unwrap_or_else(reset_peak);
    let peak_above = PEAK.load(Ordering::Relaxed).saturating_sub(staged_at);
    Streamed {
        model,
        pushed,
        staged_at,
        peak_above,
        big_allocs: BIG_ALLOCS.load(Ordering::Relaxed),
        head,
    }
}

fn gpu() -> Device {
    pollster::block_on(kiln::engine::runtime::device::gpu())
        .expect("a wgpu adapter (install mesa-vulkan-drivers)")
        .device
}

/// The largest tensor of the model whose header is at the start of `head`.
fn largest(head: &[u8]) -> (String, usize) {
    let g = Gguf::parse_header(head).expect("the header");
    let (name, t) = g.tensors.iter().max_by_key(|(_, t)| t.size()).unwrap();
    (name.clone(), t.size() as usize)
}

fn check_bound(what: &str, s: &Streamed) -> (String, usize) {
    let (name, size) = largest(&s.head);
    eprintln!(
        "{what}: heap {} MiB at staging, then at most {} MiB more; largest tensor `{name}` {} MiB, bound {} MiB",
        s.staged_at / MIB,
        s.peak_above / MIB,
        size / MIB,
        (size + SLACK) / MIB
    );
    // One large block (the gather buffer, of the largest tensor's size) for the whole load.
    assert!(
        s.big_allocs <= 1,
        "{what}: {} allocations of 64 MiB or more while loading (a wasm module keeps each)",
        s.big_allocs
    );
    assert!(
        s.peak_above <= size + SLACK,
        "{what}: the load held {} MiB beyond the staged headers, more than the largest tensor `{name}` ({} MiB) + 64 MiB",
        s.peak_above / MIB,
        size / MIB
    );
    (name, size)
}

#[test]
fn llama_8b_shape_loads_on_wgpu_within_the_memory_bound_and_answers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = shape_file("8b");
    let mut out = child.stdout.take().unwrap();
    let device = gpu();
    let s = stream(&mut out, &device, None);
    assert!(child.wait().unwrap().success(), "the writer failed");
    let model = match &s.model {
        Ok(_) => s.model.as_ref().unwrap(),
        Err(e) => panic!("the 8B shape does not load on wgpu: {e}"),
    };
    assert!(s.pushed > 4 << 30, "a file past 4 GiB: {} bytes", s.pushed);
    let c = &model.decoder.config;
    assert_eq!(
        (c.num_layers, c.hidden_size, c.num_kv_heads, c.vocab_size),
        (32, 4096, 8, 128256)
    );
    // Every tensor placed: the weights on the device are the file's tensors (the quantized blocks as
    // they are, padded to words).
    let weights = model.memory().weight_bytes;
    assert!(weights > 4_800_000_000, "{weights} bytes of weights placed");
    check_bound("Llama 3.1 8B shape on wgpu", &s);
    // The context: the model's 131,072 positions, capped where the KV cache outgrows 2 GiB.
    let grant = model.context();
    assert_eq!(grant.model_length, 131072);
    assert!(
        grant.length < 131072 && grant.length * grant.kv_bytes_per_position <= 2 << 30,
        "{grant:?}"
    );
    // One greedy token after a prompt of Llama 3's BOS and a few ids.
    let out = pollster::block_on(greedy(&model.decoder, &[128000, 791, 6864, 315], 1, &[]))
        .expect("a greedy token");
    assert_eq!(out.len(), 1);
    assert!((out[0] as usize) < 128256);
}

#[test]
fn llama_8b_shape_on_the_cpu_backend_is_refused_from_its_header() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = shape_file("8b");
    let mut out = child.stdout.take().unwrap();
    // The CPU backend in wasm32: weights within the address space (natively, the limit the wasm build has).
    let s = stream(&mut out, &Device::flex(), Some(WASM_WEIGHT_LIMIT));
    drop(out);
    let _ = child.kill();
    let _ = child.wait();
    let e = s.model.expect_err("the 8B shape does not fit wasm32").to_string();
    eprintln!("the CPU backend's refusal: {e}");
    assert!(
        matches!(e, _ if e.contains("does not fit the CPU backend")),
        "{e}"
    );
    assert!(
        e.contains("4 GiB") && e.contains("webgpu") && e.contains("MiB"),
        "{e}"
    );
    assert!(
        s.pushed <= 2 * PIECE as u64,
        "refused after {} bytes: the header alone decides",
        s.pushed
    );
    // What a model picker sees before downloading: the same answer, from the header.
    let g = Gguf::parse_header(&s.head).unwrap();
    let report = inspect(&[&g], false, &Device::flex());
    assert_eq!(report.architecture.as_deref(), Some("llama"));
    assert_eq!((report.layers, report.context_length), (Some(32), Some(131072)));
    assert_eq!(report.vocab_size, Some(128256));
    assert!(report.chat_template);
    assert!(report.parameters > 8_000_000_000 && report.parameters < 8_100_000_000);
    assert!(report.tensor_bytes > 4_900_000_000);
    let largest = report.largest_tensor.clone().unwrap();
    assert_eq!(largest.name, "output.weight");
    assert_eq!(
        report.types.keys().copied().collect::<Vec<_>>(),
        ["F32", "Q4_K", "Q6_K"]
    );
    // Natively the CPU backend has no address-space limit: it runs here, and would not in wasm32.
    assert!(report.device.runs, "{:?}", report.device);
}

#[test]
fn llama_1b_and_gemma3_262k_vocabulary_load_on_wgpu_within_the_memory_bound() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = gpu();
    let mut child = shape_file("1b");
    let mut out = child.stdout.take().unwrap();
    let s = stream(&mut out, &device, None);
    assert!(child.wait().unwrap().success());
    s.model.as_ref().expect("the 1B shape loads");
    let (name, _) = check_bound("Llama 3.2 1B shape on wgpu", &s);
    assert_eq!(name, "token_embd.weight");

    let path = cache().join("gemma3/gemma-3-270m-q4_k_m.gguf");
    let mut file = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (`cargo xtask fetch`)", path.display()));
    let s = stream(&mut file, &device, None);
    let model = s.model.as_ref().expect("Gemma 3 270M loads");
    assert_eq!(model.decoder.config.vocab_size, 262144);
    let (name, _) = check_bound("Gemma 3 270M (262k vocabulary) on wgpu", &s);
    assert_eq!(name, "token_embd.weight");
}
