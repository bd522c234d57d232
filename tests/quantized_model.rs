//! The quantized path of a whole model against its reference: the same GGUF file loaded once as it is (the
//! matrices stay in their blocks and run through kiln's kernels) and once with every tensor dequantised to
//! f32 on the host (dense matrices, burn's matmul). Real files from the data cache: SmolLM2-135M Q4_1 (Q4_1
//! and Q8_0 tensors) and the Q4_K_M mix `cargo xtask fetch` derives from it (Q4_K, Q6_K, Q5_0, Q8_0), on the
//! CPU backend and on native wgpu (lavapipe on CI).
#![cfg(not(target_arch = "wasm32"))]

mod data;
#[allow(dead_code, reason = "the golden helpers other test files use")]
mod golden;

use std::borrow::Cow;

use burn::tensor::Device;
use kiln::kernels::caps::{Caps, Features};
use kiln::loader::{GgmlType, Gguf, LoadError, RawTensor, Weights};
use kiln::model::Decoder;
use kiln::model::GgufWeights;
use kiln::model::gguf as gguf_model;
use kiln::tokenizer::ModelTokenizer;

/// A checkpoint with every tensor widened to f32: what the quantized path is checked against.
struct Dequantised<'w>(&'w mut dyn Weights);

impl Weights for Dequantised<'_> {
    fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }
    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let raw = self.0.take(name, expected)?;
        let bytes: Vec<u8> = raw.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(RawTensor {
            ty: GgmlType::F32,
            shape: raw.shape,
            bytes: Cow::Owned(bytes),
        })
    }
    fn leftover(&self) -> Option<String> {
        self.0.leftover()
    }
    fn total_bytes(&self) -> u64 {
        self.0.total_bytes()
    }
}

/// The decoder as the product loads it (the streaming loader), or with every tensor widened to f32
/// (`dense`: the reference, through a checkpoint view of the file).
fn load(bytes: &[u8], device: &Device, dense: bool) -> Decoder {
    if !dense {
        return kiln::engine::LoadedModel::from_gguf("model", bytes, device)
            .expect("loads")
            .decoder;
    }
    let g = Gguf::parse(bytes).expect("parses");
    let config = gguf_model::config(&g).expect("config");
    let mut weights = GgufWeights::new(&g, &config).expect("weights");
    Decoder::load(config, &mut Dequantised(&mut weights), device).expect("loads")
}

/// A chat turn under the model's own tokenizer.
const PROMPT: &str = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nThe";

/// Logits of every prompt position but the last, then of one decode step for the last (both kernel paths:
/// tiled and GEMV).
fn logits(d: &Decoder, ids: &[u32]) -> Vec<f32> {
    let mut cache = d.new_cache(1, 64);
    let (prompt, next) = ids.split_at(ids.len() - 1);
    let mut out = d
        .forward(&[prompt.to_vec()], &mut cache, true)
        .expect("prefill")
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32");
    let step = d.forward(&[next.to_vec()], &mut cache, false).expect("decode");
    out.extend(step.into_data().try_to_vec::<f32>().expect("f32"));
    out
}

/// Relative error of `got` against `want`: the largest `|got - want|` over the largest `|want|`, and
/// at how many positions the argmax disagrees, counting a disagreement only where `want`'s best logit leads its second by more
/// than `slack` times the largest `|want|` (0: everywhere; a near tie may go either way under a rounding
/// of that size).
fn compare_ties(got: &[f32], want: &[f32], vocab: usize, slack: f32) -> (f32, usize) {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let argmax = |r: &[f32]| (0..r.len()).max_by(|&i, &j| r[i].total_cmp(&r[j])).unwrap_or(0);
    let lead = |r: &[f32]| {
        let best = argmax(r);
        let second = (0..r.len())
            .filter(|&i| i != best)
            .map(|i| r[i])
            .fold(f32::MIN, f32::max);
        r[best] - second
    };
    let disagree = got
        .chunks(vocab)
        .zip(want.chunks(vocab))
        .filter(|(a, b)| argmax(a) != argmax(b) && lead(b) > slack * scale)
        .count();
    (diff / scale, disagree)
}

fn check(file: &str, device: &Device, name: &str, tolerance: f32) {
    for f in feature_sets(device) {
        let tol = if f.f16 { F16_TOLERANCE } else { tolerance };
        check_with(file, device, f, &format!("{name} {f:?}"), tol);
    }
}

/// The kernel feature sets to run on `device`: the plain kernels, and the device's own optional paths
/// (f16 decode activations and KV cache, subgroup sums: `kernels::gpu::caps`) where a wgpu device has any.
fn feature_sets(device: &Device) -> Vec<Features> {
    let mut sets = vec![Features::BASE];
    let own = Caps::of(device).features;
    if !matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_)) && own != Features::BASE {
        sets.push(own);
    }
    sets
}

/// Quantized against dequantised logits with the decoders' kernels under `f`.
fn check_with(file: &str, device: &Device, f: Features, name: &str, tolerance: f32) {
    let bytes = data::read(file);
    let tokenizer = ModelTokenizer::from_gguf(&Gguf::parse(&bytes).expect("parses")).expect("tokenizer");
    let ids = tokenizer.encode(PROMPT, false).expect("encodes");
    assert!(ids.len() > 8, "{ids:?}");
    let mut quant = load(&bytes, device, false);
    let mut dense = load(&bytes, device, true);
    quant.set_caps(Caps::of(device).with_features(f));
    dense.set_caps(Caps::of(device).with_features(f));
    let vocab = quant.config.vocab_size;
    let slack = if f.f16 { 2.0 * tolerance } else { 0.0 };
    let (rel, disagree) = compare_ties(&logits(&quant, &ids), &logits(&dense, &ids), vocab, slack);
    eprintln!(
        "{file} on {name}: max |logit − dense| / max |logit| = {rel:e}, argmax disagrees at {disagree}"
    );
    assert!(rel <= tolerance, "{file} on {name}: relative error {rel}");
    assert_eq!(disagree, 0, "{file} on {name}: the most likely token changes");
}

fn gpu() -> Device {
    pollster::block_on(kiln::engine::runtime::device::gpu())
        .expect("a wgpu adapter (install mesa-vulkan-drivers)")
        .device
}

/// GPU kernels dequantise to f32 in registers: only the summation order differs from the dense path.
const GPU_TOLERANCE: f32 = 1e-4;
/// The CPU kernels round activations per block to 16-bit integers (see `kiln::kernels::cpu`): measured
/// 2.4e-4 (Q4_1) and 2.7e-4 (Q4_K_M); 8-bit activations (llama.cpp's) gave 3.1e-2 and 6.9e-2 and changed
/// the most likely token.
const CPU_TOLERANCE: f32 = 1e-3;
/// The fused decode step against the generic path on the tiny family fixtures (logits below ~10, two to
/// six layers): measured at most 3.8e-6 of the largest logit (Gemma 2's GGUF), f32 summation orders only.
const FUSED_TOLERANCE: f32 = 2e-5;
/// The decode step with f16 activations and KV cache (a device with `shader-f16`) against f32: each
/// product's input rounded to f16 (2⁻¹¹ relative), sums in f32. Measured on lavapipe at most 4.3e-3 of
/// the largest logit (Gemma 2's fixture over 64 steps), 2.1e-3 on SmolLM2 over 8 and 5.7e-4 for one
/// SmolLM2 step against the dequantised weights. The argmax may then differ only where the f32 logits'
/// best two are within twice this of each other (random tiny models have such near ties).
const F16_TOLERANCE: f32 = 1e-2;
/// [`F16_TOLERANCE`] for the 2026 families' fixtures: measured on lavapipe (24 steps) at most 1.6e-2 of
/// the largest logit for Qwen3.5's (1.3e-2 from safetensors, 1.6e-2 from its GGUF), 1.05e-2 for Gemma 4's,
/// 3.8e-3 for LFM2's; in f32 all stay within 8.3e-6.
const F16_TOLERANCE_2026: f32 = 3e-2;

#[test]
fn smollm2_q4_1_quantized_equals_dequantised() {
    check(data::SMOLLM2, &gpu(), "wgpu", GPU_TOLERANCE);
    check(data::SMOLLM2, &Device::flex(), "flex", CPU_TOLERANCE);
}

#[test]
fn smollm2_q4_k_m_quantized_equals_dequantised() {
    check(data::SMOLLM2_Q4KM, &gpu(), "wgpu", GPU_TOLERANCE);
    check(data::SMOLLM2_Q4KM, &Device::flex(), "flex", CPU_TOLERANCE);
}

/// The fused wgpu decode step (`Decoder::forward` with one position per sequence) against the generic
/// path on the same device and weights: `prompt` prefilled, then `steps` greedy steps of two sequences
/// (the second starting from another token). Asserts the same argmax at every step and logits within
/// `tolerance` of the largest; returns the largest relative difference seen.
fn fused_equals_generic(fused: &Decoder, prompt: &[u32], steps: usize, tolerance: f32, name: &str) -> f32 {
    fused_equals_generic_f16(fused, prompt, steps, (tolerance, F16_TOLERANCE), name)
}

/// [`fused_equals_generic`] with the tolerance of the f16 kernels given: `(f32, f16)`.
fn fused_equals_generic_f16(
    fused: &Decoder,
    prompt: &[u32],
    steps: usize,
    (tolerance, f16_tolerance): (f32, f32),
    name: &str,
) -> f32 {
    let mut worst = 0f32;
    for f in feature_sets(fused.device()) {
        // The device's own paths over at most 24 steps (past the fixtures' windows of 5 and 6 after a
        // 12-token prompt): the plain kernels' run covers the rest.
        let (tol, steps) = match f.f16 {
            true => (f16_tolerance, steps.min(24)),
            false => (tolerance, steps),
        };
        let name = format!("{name} {f:?}");
        let mut under = fused.clone();
        under.set_caps(Caps::of(fused.device()).with_features(f));
        worst = worst.max(fused_equals_generic_with(&under, prompt, steps, tol, &name));
    }
    worst
}

fn fused_equals_generic_with(
    fused: &Decoder,
    prompt: &[u32],
    steps: usize,
    tolerance: f32,
    name: &str,
) -> f32 {
    assert!(fused.is_fused(), "{name}: takes the fused step");
    let mut generic = fused.clone();
    generic.set_fused(false);
    let vocab = fused.config.vocab_size;
    let capacity = prompt.len() + steps;
    let (mut cf, mut cg) = (fused.new_cache(1, capacity), generic.new_cache(1, capacity));
    let prompt = [prompt.to_vec()];
    let read = |t: burn::tensor::Tensor<3>| t.into_data().try_to_vec::<f32>().expect("f32");
    let last = read(generic.forward(&prompt, &mut cg, false).expect("prefill"));
    let _ = fused.forward(&prompt, &mut cf, false).expect("prefill");
    cf.repeat_rows(2);
    cg.repeat_rows(2);
    let argmax = |r: &[f32]| (0..r.len()).max_by(|&i, &j| r[i].total_cmp(&r[j])).unwrap_or(0) as u32;
    let mut next = vec![vec![argmax(&last)], vec![argmax(&last) ^ 1]];
    let mut worst = 0f32;
    for step in 0..steps {
        let want = read(generic.forward(&next, &mut cg, false).expect("generic step"));
        let got = read(fused.forward(&next, &mut cf, false).expect("fused step"));
        let slack = if fused.caps().features.f16 {
            2.0 * tolerance
        } else {
            0.0
        };
        let (rel, disagree) = compare_ties(&got, &want, vocab, slack);
        assert!(rel <= tolerance, "{name}: step {step}: relative error {rel}");
        assert_eq!(disagree, 0, "{name}: step {step}: the most likely token changes");
        worst = worst.max(rel);
        next = want.chunks(vocab).map(|row| vec![argmax(row)]).collect();
    }
    eprintln!("{name}: fused vs generic over {steps} steps: max relative difference {worst:e}");
    worst
}

/// SmolLM2 (the Llama layer) over 8 steps: logits within `GPU_TOLERANCE` of the largest (only f32
/// summation orders differ).
#[test]
fn smollm2_fused_decode_step_equals_the_generic_path() {
    let bytes = data::read(data::SMOLLM2);
    let tokenizer = ModelTokenizer::from_gguf(&Gguf::parse(&bytes).expect("parses")).expect("tokenizer");
    let ids = tokenizer.encode(PROMPT, false).expect("encodes");
    fused_equals_generic(&load(&bytes, &gpu(), false), &ids, 8, GPU_TOLERANCE, "smollm2");
}

/// The tiny golden fixtures whose layers the fused step covers beyond Llama's: Gemma 3 (sandwich norms,
/// q/k norms, GELU-tanh, √h embeddings, local layers of window 5 with their own rope, the query scale
/// 24^-½), Gemma 2 (attention and final softcaps, window 6), Qwen3 (q/k norms) and SmolLM3 (NoPE layers),
/// as safetensors and, for the Gemmas, as llama.cpp writes them (quantised GGUF): 64 greedy steps each, far
/// past every window. Logits within `FUSED_TOLERANCE` of the largest.
#[test]
fn family_fixtures_fused_decode_step_equals_the_generic_path() {
    let gpu = gpu();
    for f in golden::fixtures() {
        if !["gemma3", "gemma2", "qwen3", "smollm3"].contains(&f.name) {
            continue;
        }
        let (decoder, golden) = golden::load(&f, &gpu);
        fused_equals_generic(&decoder, &golden.prompt_ids, 64, FUSED_TOLERANCE, f.name);
    }
    for (name, bytes) in [
        (
            "tiny-gemma3.gguf",
            &include_bytes!("fixtures/gguf/tiny-gemma3.gguf")[..],
        ),
        (
            "tiny-gemma2.gguf",
            &include_bytes!("fixtures/gguf/tiny-gemma2.gguf")[..],
        ),
    ] {
        let prompt: Vec<u32> = (1..13).map(|i| i * 37 % 500).collect();
        fused_equals_generic(&load(bytes, &gpu, false), &prompt, 64, FUSED_TOLERANCE, name);
    }
}

/// The 2026 families' fixtures through the fused step: LFM2 (conv blocks: `conv_step` advancing the
/// state; attention with q/k norms), Qwen3.5 (Gated DeltaNets: `conv_step`, `delta_step` with the decay
/// and `beta` computed in it, `gated_rms_norm`; gated attention with a quarter-head rope through
/// `prepare_qk` and `gate_heads`) and Gemma 4 (layers reading an earlier layer's keys and values through
/// `attention_shared`, v normalised per head, two head sizes, the per-layer inputs' block, the layer
/// scalar in `add_rms_norm_scaled`), as safetensors and as llama.cpp writes them (Qwen3.5's file with
/// its value heads tiled), two sequences of 64 greedy steps.
#[test]
fn families_2026_fused_decode_step_equals_the_generic_path() {
    let gpu = gpu();
    for f in golden::fixtures_2026() {
        let (decoder, golden) = golden::load(&f, &gpu);
        let tolerances = (FUSED_TOLERANCE, F16_TOLERANCE_2026);
        fused_equals_generic_f16(&decoder, &golden.prompt_ids, 64, tolerances, f.name);
    }
    for (name, bytes) in [
        (
            "tiny-lfm2.gguf",
            &include_bytes!("fixtures/gguf/tiny-lfm2.gguf")[..],
        ),
        (
            "tiny-qwen35.gguf",
            &include_bytes!("fixtures/gguf/tiny-qwen35.gguf")[..],
        ),
        (
            "tiny-gemma4.gguf",
            &include_bytes!("fixtures/gguf/tiny-gemma4.gguf")[..],
        ),
    ] {
        let prompt: Vec<u32> = (1..13).map(|i| i * 37 % 500).collect();
        let tolerances = (FUSED_TOLERANCE, F16_TOLERANCE_2026);
        fused_equals_generic_f16(&load(bytes, &gpu, false), &prompt, 64, tolerances, name);
    }
}
