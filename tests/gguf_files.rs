//! GGUF files: the tiny quantised Llama, Qwen2 and Qwen3 fixtures (`tests/fixtures/make_gguf.py`,
//! Q8_0/Q4_0/Q4_1/F16/BF16 tensors) load and their logits match transformers run on the dequantised
//! weights; corrupted files give errors, never a panic or an allocation larger than 3× the file.
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use burn::tensor::Device;
use kiln::loader::{GgmlType, Gguf, GgufError};
use kiln::model::Decoder;
use kiln::model::gguf as gguf_model;
use serde::Deserialize;

/// Tracks the largest single allocation made by a thread while it has tracking on.
struct Tracking;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACK.with(Cell::get) {
            LARGEST.with(|l| l.set(l.get().max(layout.size())));
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACK.with(Cell::get) {
            LARGEST.with(|l| l.set(l.get().max(new_size)));
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// Parses `bytes`, returning the result and the largest single allocation the parse made.
fn parse_tracked(bytes: &[u8]) -> (Result<usize, GgufError>, usize) {
    LARGEST.with(|l| l.set(0));
    TRACK.with(|t| t.set(true));
    let result = Gguf::parse(bytes).map(|g| g.tensors.len());
    TRACK.with(|t| t.set(false));
    (result, LARGEST.with(Cell::get))
}

const TINY: &[u8] = include_bytes!("fixtures/gguf/tiny-llama.gguf");
const TINY_GOLDEN: &str = include_str!("fixtures/gguf/tiny-llama.golden.json");
const TINY_QWEN2: &[u8] = include_bytes!("fixtures/gguf/tiny-qwen2.gguf");
const TINY_QWEN2_GOLDEN: &str = include_str!("fixtures/gguf/tiny-qwen2.golden.json");
const TINY_QWEN3: &[u8] = include_bytes!("fixtures/gguf/tiny-qwen3.gguf");
const TINY_QWEN3_GOLDEN: &str = include_str!("fixtures/gguf/tiny-qwen3.golden.json");

/// Logits of the quantised model must match the dequantised reference within this max-abs difference. On
/// wgpu the kernels dequantise to f32, so only the summation order differs (measured ~1e-5).
const TOLERANCE: f32 = 1e-3;
/// The CPU kernels round each activation block to 16-bit integers (`kiln::kernels::cpu`), a relative error
/// of at most 2⁻¹⁶ of the block's largest value per element; through two layers that measured up to 1.0e-3
/// on these fixtures (logits of magnitude ~6; 8-bit activations, llama.cpp's choice, gave 0.25).
const CPU_TOLERANCE: f32 = 2e-3;

#[derive(Deserialize)]
struct Golden {
    prompt_ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy_ids: Vec<u32>,
    /// How far quantisation moved the logits from the unquantised model's (recorded by the generator).
    max_abs_diff_vs_unquantized: f32,
    /// Phi fixtures: a prompt beyond `original_context_length` (LongRoPE's long factors) and the
    /// reference logits of its last 4 positions.
    #[serde(default)]
    long_prompt_ids: Vec<u32>,
    #[serde(default)]
    long_logits_last: Vec<Vec<f32>>,
}

/// The decoder as the product loads it: the streaming loader, fed the whole file.
fn load(bytes: &[u8], device: &Device) -> Decoder {
    kiln::engine::LoadedModel::from_gguf("fixture", bytes, device)
        .expect("the fixture loads")
        .decoder
}

/// Native wgpu (lavapipe on CI): kiln's quantized GEMV / tiled kernels.
fn gpu() -> Device {
    pollster::block_on(kiln::engine::runtime::device::gpu())
        .expect("a wgpu adapter (install mesa-vulkan-drivers)")
        .device
}

/// On both devices: the CPU backend (quantized weights in host memory, kiln's CPU kernels) and wgpu.
fn check_logits(bytes: &[u8], golden: &str, name: &str) {
    check_logits_on(bytes, golden, &format!("{name} (wgpu)"), &gpu(), TOLERANCE);
    check_logits_on(
        bytes,
        golden,
        &format!("{name} (flex)"),
        &Device::flex(),
        CPU_TOLERANCE,
    );
}

fn check_logits_on(bytes: &[u8], golden: &str, name: &str, device: &Device, tolerance: f32) {
    let golden: Golden = serde_json::from_str(golden).expect("golden json");
    assert!(
        golden.max_abs_diff_vs_unquantized > 10.0 * TOLERANCE,
        "{name}: the fixture must be quantised enough to tell a quantised load from the original"
    );
    let decoder = load(bytes, device);
    let mut cache = decoder.new_cache(1, golden.prompt_ids.len() + golden.greedy_ids.len());
    let logits = decoder
        .forward(std::slice::from_ref(&golden.prompt_ids), &mut cache, true)
        .expect("forward");
    let got = logits.into_data().try_into_vec::<f32>().expect("f32");
    let want = golden.logits.concat();
    assert_eq!(got.len(), want.len());
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    eprintln!("{name}: max |logit - dequantised reference| = {diff:e}");
    assert!(diff <= tolerance, "{name}: logits differ by {diff}");
    let prompt = golden.prompt_ids.clone();
    let out = pollster::block_on(kiln::engine::runtime::runner::greedy(
        &decoder,
        &prompt,
        golden.greedy_ids.len(),
        &[],
    ))
    .expect("greedy");
    assert_eq!(out, golden.greedy_ids, "{name}: greedy continuation");
    if !golden.long_prompt_ids.is_empty() {
        let n = golden.long_prompt_ids.len();
        let mut cache = decoder.new_cache(1, n);
        let logits = decoder
            .forward(std::slice::from_ref(&golden.long_prompt_ids), &mut cache, true)
            .expect("long forward");
        let last = golden.long_logits_last.len();
        let got = logits
            .narrow(1, n - last, last)
            .into_data()
            .try_into_vec::<f32>()
            .expect("f32");
        let diff = got
            .iter()
            .zip(golden.long_logits_last.concat())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        eprintln!("{name}: long prompt: max |logit - dequantised reference| = {diff:e}");
        assert!(diff <= tolerance, "{name}: long-prompt logits differ by {diff}");
    }
}

/// The families of `make_golden_families.py` as llama.cpp's converter writes them: Gemma 3 (norms stored
/// `1 + w`, window 5, the query scale llama.cpp derives from key_length), Gemma 2 (softcapping keys), Phi-3
/// and Phi-4-mini (fused `attn_qkv`/`ffn_up`, LongRoPE factor tensors, partial rotary) and SmolLM3
/// (permuted q/k, NoPE every 4th layer).
#[test]
fn family_ggufs_match_their_dequantised_references() {
    macro_rules! family {
        ($name:literal) => {
            (
                $name,
                &include_bytes!(concat!("fixtures/gguf/tiny-", $name, ".gguf"))[..],
                include_str!(concat!("fixtures/gguf/tiny-", $name, ".golden.json")),
            )
        };
    }
    for (name, bytes, golden) in [
        family!("gemma3"),
        family!("gemma2"),
        family!("phi3"),
        family!("phi4"),
        family!("smollm3"),
    ] {
        check_logits(bytes, golden, &format!("tiny-{name}.gguf"));
    }
}

#[test]
fn tiny_llama_gguf_matches_the_dequantised_reference() {
    let g = Gguf::parse(TINY).unwrap();
    let types: Vec<GgmlType> = g.tensors.iter().map(|(_, t)| t.ty).collect();
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        assert!(types.contains(&ty), "the fixture holds a {ty:?} tensor");
    }
    check_logits(TINY, TINY_GOLDEN, "tiny-llama.gguf");
}

#[test]
fn tiny_qwen2_gguf_matches_the_dequantised_reference() {
    check_logits(TINY_QWEN2, TINY_QWEN2_GOLDEN, "tiny-qwen2.gguf");
}

#[test]
fn tiny_qwen3_gguf_matches_the_dequantised_reference() {
    check_logits(TINY_QWEN3, TINY_QWEN3_GOLDEN, "tiny-qwen3.gguf");
}

#[test]
fn metadata_resolves_like_config_json() {
    let from_gguf = gguf_model::config(&Gguf::parse(TINY).unwrap()).unwrap();
    let from_json =
        kiln::model::ModelConfig::from_json(include_bytes!("fixtures/golden/llama/config.json")).unwrap();
    // GGUF carries Llama 3 rope scaling as precomputed per-frequency factors (`rope_freqs.weight`).
    let (a, b) = (
        from_gguf.ropes[0].inv_freq(false),
        from_json.ropes[0].inv_freq(false),
    );
    let rel = a
        .iter()
        .zip(&b)
        .map(|(x, y)| ((x - y) / y).abs())
        .fold(0.0, f64::max);
    assert!(rel < 1e-6, "inv_freq differ by {rel}");
    // GGUF stores the epsilon as f32.
    assert_eq!(from_gguf.rms_norm_eps as f32, from_json.rms_norm_eps as f32);
    let strip = |c: kiln::model::ModelConfig| kiln::model::ModelConfig {
        ropes: vec![kiln::model::layers::rope::Rope::plain(
            c.ropes[0].theta,
            c.head_dim,
        )],
        rms_norm_eps: 0.0,
        ..c
    };
    assert_eq!(strip(from_gguf), strip(from_json));
}

/// Offsets of interesting places in a GGUF header: after the counts, and each tensor info's type field.
fn tensor_type_offsets(bytes: &[u8], g: &Gguf<'_>) -> Vec<usize> {
    g.tensors
        .iter()
        .map(|(name, info)| {
            let mut needle = (name.len() as u64).to_le_bytes().to_vec();
            needle.extend(name.as_bytes());
            needle.extend((info.dims.len() as u32).to_le_bytes());
            let at = bytes
                .windows(needle.len())
                .position(|w| w == needle)
                .expect("tensor info found");
            at + needle.len() + 8 * info.dims.len()
        })
        .collect()
}

#[test]
fn corrupt_files_are_errors_without_panics_or_huge_allocations() {
    let g = Gguf::parse(TINY).unwrap();
    let header_end = g.tensors.iter().map(|(_, t)| t.start as usize).min().unwrap();
    // String arrays take up to 3× their file bytes in memory (see `loader::gguf`).
    let limit = 3 * TINY.len();
    let mut checked = 0;
    let mut expect_error = |bytes: &[u8], what: &str| {
        let (result, largest) = parse_tracked(bytes);
        assert!(result.is_err(), "{what}: parsed");
        assert!(
            largest <= limit,
            "{what}: allocated {largest} bytes for a {limit}-byte file"
        );
        checked += 1;
    };
    // Truncated at every byte of the header, and in the data of every tensor.
    for cut in 0..header_end {
        expect_error(&TINY[..cut], &format!("cut at {cut}"));
    }
    for (name, t) in &g.tensors {
        expect_error(&TINY[..t.end as usize - 1], &format!("cut in `{name}`"));
    }
    // Wrong magic and versions.
    let mut bad = TINY.to_vec();
    bad[..4].copy_from_slice(b"GGML");
    assert!(matches!(Gguf::parse(&bad), Err(GgufError::Magic(_))));
    for v in [0u32, 1, 4, u32::MAX] {
        let mut bad = TINY.to_vec();
        bad[4..8].copy_from_slice(&v.to_le_bytes());
        assert!(
            matches!(Gguf::parse(&bad), Err(GgufError::Version(x)) if x == v),
            "version {v}"
        );
    }
    // An unknown tensor type (Q8_1 = 9 is an activation format, IQ2_XXS = 16 is not read; 1000 does not
    // exist).
    let at = tensor_type_offsets(TINY, &g)[0];
    for ty in [9u32, 16, 1000] {
        let mut bad = TINY.to_vec();
        bad[at..at + 4].copy_from_slice(&ty.to_le_bytes());
        match Gguf::parse(&bad) {
            Err(e @ GgufError::UnsupportedType { .. }) => {
                assert!(e.to_string().contains(&format!("`{}`", g.tensors[0].0)), "{e}")
            }
            other => panic!("type {ty}: {:?}", other.map(|g| g.tensors.len())),
        }
    }
    // Absurd counts, lengths, dimensions and offsets: every 8-byte window of the header overwritten with
    // huge values. Any result is acceptable except a panic or a huge allocation; most must be errors.
    let mut errors = 0;
    for at in 8..header_end.saturating_sub(8) {
        for v in [u64::MAX, 1 << 62, 1 << 40, u32::MAX as u64] {
            let mut bad = TINY.to_vec();
            bad[at..at + 8].copy_from_slice(&v.to_le_bytes());
            let (result, largest) = parse_tracked(&bad);
            assert!(largest <= limit, "u64 {v:#x} at {at}: allocated {largest} bytes");
            errors += usize::from(result.is_err());
        }
    }
    assert!(errors > 0);
    eprintln!("{checked} truncations and {errors} absurd-value corruptions refused");
}

#[test]
fn unsupported_architecture_and_missing_metadata_are_named() {
    let g = Gguf::parse(TINY).unwrap();
    // Rename the architecture value `llama` → `llamb` (same length, offsets unchanged).
    let mut bad = TINY.to_vec();
    let key = b"general.architecture";
    let at = bad.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 8;
    assert_eq!(&bad[at..at + 5], b"llama");
    bad[at + 4] = b'b';
    let e = gguf_model::config(&Gguf::parse(&bad).unwrap()).unwrap_err();
    assert!(e.to_string().contains("llamb"), "{e}");
    // Rename a required key.
    let mut bad = TINY.to_vec();
    let key = b"llama.block_count";
    let at = bad.windows(key.len()).position(|w| w == key).unwrap();
    bad[at + key.len() - 1] = b'X';
    let e = gguf_model::config(&Gguf::parse(&bad).unwrap()).unwrap_err();
    assert!(e.to_string().contains("`llama.block_count`"), "{e}");
    assert!(g.get("llama.block_count").is_some());
}

/// A family file whose values are inconsistent is an error naming the key or field: a per-layer window
/// pattern of the wrong length, KV heads that do not divide the heads, LongRoPE factors without the
/// original context; an unknown family lists the supported ones.
#[test]
fn inconsistent_family_metadata_is_named() {
    use kiln::loader::{Array, Value, gguf_write};
    let rewrite = |file: &[u8], edit: &dyn Fn(&mut std::collections::BTreeMap<String, Value>)| {
        let g = Gguf::parse(file).unwrap();
        let mut meta = g.metadata.clone();
        edit(&mut meta);
        gguf_write::write(&meta, &gguf_write::tensors_of(&g)).unwrap()
    };
    let error = |bytes: &[u8]| {
        gguf_model::config(&Gguf::parse(bytes).unwrap())
            .unwrap_err()
            .to_string()
    };
    let gemma = include_bytes!("fixtures/gguf/tiny-gemma3.gguf");
    let phi = include_bytes!("fixtures/gguf/tiny-phi3.gguf");
    assert!(gguf_model::config(&Gguf::parse(gemma).unwrap()).is_ok());
    let bad = rewrite(gemma, &|m| {
        m.insert(
            "gemma3.attention.sliding_window_pattern".into(),
            Value::Array(Array::Bool(vec![true, false])),
        );
    });
    let e = error(&bad);
    assert!(e.contains("gemma3.attention.sliding_window_pattern"), "{e}");
    let bad = rewrite(gemma, &|m| {
        m.insert("gemma3.attention.head_count_kv".into(), Value::U32(3));
    });
    let e = error(&bad);
    assert!(e.contains("num_key_value_heads"), "{e}");
    // A window of 0 is none, as llama.cpp reads it (its converter writes a null window as 0).
    let none = rewrite(gemma, &|m| {
        m.insert("gemma3.attention.sliding_window".into(), Value::U32(0));
    });
    let c = gguf_model::config(&Gguf::parse(&none).unwrap()).unwrap();
    assert!(!c.has_window(), "{:?}", c.layers);
    let bad = rewrite(phi, &|m| {
        m.remove("phi3.rope.scaling.original_context_length");
    });
    let e = error(&bad);
    assert!(e.contains("original_max_position_embeddings"), "{e}");
    let bad = rewrite(phi, &|m| {
        m.insert("general.architecture".into(), Value::String("phi2".into()));
    });
    let e = error(&bad);
    assert!(
        e.contains("phi2") && e.contains("gemma3") && e.contains("smollm3"),
        "{e}"
    );
}

/// An mmproj that does not fit its language model, or is malformed, is an error naming the key or the
/// tensor, never a panic: another projector type, rows of another width than the LM's hidden size, an LM
/// vocabulary without the image token, a missing tensor, a tensor of the wrong shape, a text model's GGUF
/// given as the mmproj. The same from both files whole and streamed in pieces (`GgufLoader::with_mmproj`).
#[test]
fn bad_mmproj_files_are_named() {
    use kiln::loader::gguf_write::{tensors_of, write};
    use kiln::loader::{Array, Value};
    let lm_bytes = include_bytes!("fixtures/gguf/tiny-smolvlm.gguf");
    let mm_bytes = include_bytes!("fixtures/gguf/tiny-smolvlm-mmproj.gguf");
    let (lm, mm) = (Gguf::parse(lm_bytes).unwrap(), Gguf::parse(mm_bytes).unwrap());
    let device = Device::flex();
    let load = |lm_bytes: &[u8], mm_bytes: &[u8]| {
        let (lm, mm) = (Gguf::parse(lm_bytes).unwrap(), Gguf::parse(mm_bytes).unwrap());
        let whole = kiln::model::vision::gguf::load(&lm, &mm, &device)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        let mut loader = kiln::engine::runtime::load::GgufLoader::files(&device, 1, |_, _| {}).with_mmproj();
        let streamed = [lm_bytes, mm_bytes]
            .into_iter()
            .enumerate()
            .try_for_each(|(file, bytes)| bytes.chunks(1000).try_for_each(|p| loader.push_to(file, p)))
            .and_then(|()| loader.finish("tiny").map(|_| ()))
            .unwrap_err()
            .to_string();
        format!("{whole} | streamed: {streamed}")
    };
    let with_meta = |g: &Gguf, key: &str, v: Value| {
        let mut meta = g.metadata.clone();
        meta.insert(key.into(), v);
        write(&meta, &tensors_of(g)).unwrap()
    };
    let cases = [
        (
            load(
                lm_bytes,
                &with_meta(&mm, "clip.projector_type", Value::String("resampler".into())),
            ),
            "clip.projector_type",
        ),
        (
            load(
                lm_bytes,
                &with_meta(&mm, "clip.vision.projection_dim", Value::U32(48)),
            ),
            "clip.vision.projection_dim",
        ),
        (load(lm_bytes, lm_bytes), "general.architecture"),
    ];
    for (e, key) in cases {
        assert_eq!(e.matches(key).count(), 2, "{key}: {e}");
    }
    // The LM's vocabulary without `<image>`.
    let mut meta = lm.metadata.clone();
    if let Some(Value::Array(Array::String(tokens))) = meta.get_mut("tokenizer.ggml.tokens") {
        for t in tokens.iter_mut().filter(|t| *t == "<image>") {
            *t = "<picture>".into();
        }
    }
    let e = load(&write(&meta, &tensors_of(&lm)).unwrap(), mm_bytes);
    assert!(
        e.matches("<image>").count() == 2 && e.matches("tokenizer.ggml.tokens").count() == 2,
        "{e}"
    );
    // A tensor missing, and one of another shape.
    let tensors = tensors_of(&mm);
    let missing: Vec<_> = tensors
        .iter()
        .filter(|t| t.name != "v.blk.1.ffn_up.weight")
        .copied()
        .collect();
    let e = load(lm_bytes, &write(&mm.metadata, &missing).unwrap());
    assert_eq!(e.matches("v.blk.1.ffn_up.weight").count(), 2, "{e}");
    let e = load(
        lm_bytes,
        &with_meta(&mm, "clip.vision.feed_forward_length", Value::U32(32)),
    );
    assert_eq!(e.matches("v.blk.0.ffn_up.weight").count(), 2, "{e}");
}

/// A weight limit (wasm32's address space on the CPU backend) counts the mmproj's weights with the
/// language model's: a limit the language model fits alone refuses the pair when their headers are in.
#[test]
fn the_mmproj_counts_toward_the_weight_limit() {
    use kiln::engine::runtime::load::GgufLoader;
    let lm = include_bytes!("fixtures/gguf/tiny-smolvlm.gguf");
    let mm = include_bytes!("fixtures/gguf/tiny-smolvlm-mmproj.gguf");
    let device = Device::flex();
    let limit = Some(lm.len() as u64);
    let mut alone = GgufLoader::files(&device, 1, |_, _| {}).with_weight_limit(limit);
    alone.push(lm).expect("the language model fits alone");
    alone.finish("tiny").expect("loads");
    let mut pair = GgufLoader::files(&device, 1, |_, _| {})
        .with_weight_limit(limit)
        .with_mmproj();
    pair.push_to(0, lm).expect("its header waits for the mmproj's");
    let e = pair.push_to(1, mm).expect_err("the two do not fit").to_string();
    assert!(e.contains("the model does not fit"), "{e}");
}
