//! Golden checks of the decoder against transformers, shared by the native tests (`model_golden.rs`, CPU
//! backend) and the browser tests (`browser.rs`, WebGPU). The fixtures are tiny random models written by
//! `tests/fixtures/make_golden.py`: Llama (f32, llama3 rope scaling, tied embeddings), Qwen2 (bf16, q/k/v
//! biases) and Qwen3 (f16, q/k norms, head_dim ≠ hidden/heads), all with GQA; and by
//! `make_golden_families.py`: Gemma 3 (sliding window 5 < the prompt, local/global layers), Gemma 2
//! (softcapping), Phi-3 (LongRoPE, fused projections), Phi-4-mini (partial rotary) and SmolLM3 (NoPE);
//! and by `make_golden_bidirectional.py`: Gemma 3's logits with a bidirectional image-token block; and by
//! `make_golden_2026.py` ([`fixtures_2026`]): LFM2 (short convolutions), Qwen3.5 (Gated DeltaNet) and
//! Gemma 4 (per-layer embeddings, shared keys and values), each with a 152-token prompt.

use burn::tensor::{Device, Tensor};
use kiln::kernels::caps::{Caps, Features};
use kiln::loader::{Checkpoint, LoadError, SafetensorsError};
use kiln::model::{Attend, Chunk, ConfigError, Decoder, ModelConfig};
use serde::Deserialize;

pub mod vision;

/// Logits must match transformers' within this max-abs difference.
pub const LOGITS_TOLERANCE: f32 = 1e-3;

pub struct Fixture {
    pub name: &'static str,
    pub config: &'static [u8],
    pub weights: &'static [u8],
    pub golden: &'static str,
}

macro_rules! fixture {
    ($name:literal) => {
        Fixture {
            name: $name,
            config: include_bytes!(concat!("../fixtures/golden/", $name, "/config.json")),
            weights: include_bytes!(concat!("../fixtures/golden/", $name, "/model.safetensors")),
            golden: include_str!(concat!("../fixtures/golden/", $name, "/golden.json")),
        }
    };
}

pub fn fixtures() -> [Fixture; 8] {
    [
        fixture!("llama"),
        fixture!("qwen2"),
        fixture!("qwen3"),
        fixture!("gemma3"),
        fixture!("gemma2"),
        fixture!("phi3"),
        fixture!("phi4"),
        fixture!("smollm3"),
    ]
}

/// The 2026 families (`make_golden_2026.py`): LFM2, Qwen3.5, Gemma 4.
pub fn fixtures_2026() -> [Fixture; 3] {
    [fixture!("lfm2"), fixture!("qwen3_5"), fixture!("gemma4")]
}

#[derive(Deserialize)]
pub struct Golden {
    pub prompt_ids: Vec<u32>,
    /// `[prompt_len][vocab]`.
    pub logits: Vec<Vec<f32>>,
    pub greedy_ids: Vec<u32>,
    /// Phi fixtures: a prompt longer than `original_max_position_embeddings` (LongRoPE's long factors)...
    #[serde(default)]
    pub long_prompt_ids: Vec<u32>,
    /// ... and transformers' logits at its last 4 positions, `[4][vocab]` (the 2026 families: a
    /// 152-token prompt and its last 8, `long_logits`).
    #[serde(default, alias = "long_logits")]
    pub long_logits_last: Vec<Vec<f32>>,
}

pub fn load(f: &Fixture, device: &Device) -> (Decoder, Golden) {
    let config = ModelConfig::from_json(f.config).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let mut ckpt = Checkpoint::single(f.weights).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let decoder = Decoder::load(config, &mut ckpt, device).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    (decoder, serde_json::from_str(f.golden).expect("golden.json"))
}

async fn read(t: Tensor<3>) -> Vec<f32> {
    t.into_data_async()
        .await
        .expect("read back")
        .try_to_vec::<f32>()
        .expect("f32")
}

/// Largest element-wise `|a - b|`.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |best, (i, &v)| if v > best.1 { (i, v) } else { best },
        )
        .0 as u32
}

/// All-position logits of the prompt within [`LOGITS_TOLERANCE`] of transformers'.
pub async fn logits_match(f: &Fixture, device: &Device) -> f32 {
    let (decoder, golden) = load(f, device);
    let mut cache = decoder.new_cache(1, golden.prompt_ids.len());
    let logits = decoder
        .forward(std::slice::from_ref(&golden.prompt_ids), &mut cache, true)
        .expect("forward");
    let got = read(logits).await;
    let want: Vec<f32> = golden.logits.concat();
    assert_eq!(got.len(), want.len(), "{}: logits size", f.name);
    let diff = max_abs_diff(&got, &want);
    assert!(
        diff <= LOGITS_TOLERANCE,
        "{}: max |logit - golden| = {diff}",
        f.name
    );
    diff
}

/// For fixtures with a long prompt (LongRoPE): the logits of its last positions, the prompt run in one
/// forward into a cache of its length, within [`LOGITS_TOLERANCE`] of transformers'. `None` when the
/// fixture has none.
pub async fn long_logits_match(f: &Fixture, device: &Device) -> Option<f32> {
    let (decoder, golden) = load(f, device);
    if golden.long_prompt_ids.is_empty() {
        return None;
    }
    let n = golden.long_prompt_ids.len();
    let mut cache = decoder.new_cache(1, n);
    let logits = decoder
        .forward(std::slice::from_ref(&golden.long_prompt_ids), &mut cache, true)
        .expect("forward");
    let last = golden.long_logits_last.len();
    let got = read(logits.narrow(1, n - last, last)).await;
    let diff = max_abs_diff(&got, &golden.long_logits_last.concat());
    assert!(
        diff <= LOGITS_TOLERANCE,
        "{}: long prompt: max |logit - golden| = {diff}",
        f.name
    );
    Some(diff)
}

/// Runs `tokens` after what `cache` holds, then `n` greedy one-token steps; the greedy ids.
async fn greedy_after(
    decoder: &Decoder,
    cache: &mut kiln::model::KvCache,
    tokens: &[u32],
    n: usize,
) -> Vec<u32> {
    let mut logits = decoder
        .forward(&[tokens.to_vec()], cache, false)
        .expect("prefill");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let next = argmax(&read(logits).await);
        out.push(next);
        logits = decoder.forward(&[vec![next]], cache, false).expect("decode step");
    }
    out
}

/// 64 greedy tokens with the KV cache (prefill, then one-token steps) equal transformers'.
pub async fn greedy_matches(f: &Fixture, device: &Device) {
    let (decoder, golden) = load(f, device);
    let n = golden.greedy_ids.len();
    let mut cache = decoder.new_cache(1, golden.prompt_ids.len() + n);
    let out = greedy_after(&decoder, &mut cache, &golden.prompt_ids, n).await;
    assert_eq!(out, golden.greedy_ids, "{}: greedy continuation", f.name);
}

/// At every step of a `steps`-token run, the cached step's logits equal a full recompute of the sequence,
/// within 1e-4. The fused decode step (where the family takes it) runs in f32: its f16 kernels' rounding,
/// on devices with `shader-f16`, is checked against the generic path in `tests/quantized_model.rs`.
pub async fn cache_equals_recompute(f: &Fixture, device: &Device, steps: usize) {
    let (mut decoder, golden) = load(f, device);
    decoder.set_caps(Caps::of(device).with_features(Features::BASE));
    let mut seq = golden.prompt_ids.clone();
    let mut cache = decoder.new_cache(1, seq.len() + steps);
    let mut cached = read(
        decoder
            .forward(&[seq.clone()], &mut cache, false)
            .expect("prefill"),
    )
    .await;
    for step in 0..steps {
        let mut fresh_cache = decoder.new_cache(1, seq.len());
        let full = read(
            decoder
                .forward(&[seq.clone()], &mut fresh_cache, false)
                .expect("recompute"),
        )
        .await;
        let diff = max_abs_diff(&cached, &full);
        assert!(
            diff <= 1e-4,
            "{}: step {step}: cached vs recomputed logits differ by {diff}",
            f.name
        );
        let next = argmax(&cached);
        seq.push(next);
        cached = read(decoder.forward(&[vec![next]], &mut cache, false).expect("step")).await;
    }
}

/// Loads a decoder, with any error as its message.
pub fn load_result(config: &[u8], weights: &[u8], device: &Device) -> Result<Decoder, String> {
    let config = ModelConfig::from_json(config).map_err(|e| e.to_string())?;
    let mut ckpt = Checkpoint::single(weights).map_err(|e| e.to_string())?;
    Decoder::load(config, &mut ckpt, device).map_err(|e| e.to_string())
}

/// A truncated file, a missing tensor, a wrong dtype, a mis-shaped tensor and an unsupported architecture
/// each give an error naming what is wrong (never a panic).
pub fn loading_errors(device: &Device) {
    let load = |config: &[u8], weights: &[u8]| load_result(config, weights, device);
    let f = &fixtures()[0];
    // Truncated weights.
    let cut = &f.weights[..f.weights.len() / 2];
    let e = Checkpoint::single(cut).err().expect("truncated file is refused");
    assert!(
        matches!(e, LoadError::File(SafetensorsError::Truncated { .. })),
        "{e}"
    );
    assert!(load(f.config, &f.weights[..4]).unwrap_err().contains("truncated"));

    // A missing tensor: rename one in the header (same length, so offsets stay valid).
    let renamed = replace(f.weights, b"model.norm.weight", b"model.norm.weighx");
    let e = load(f.config, &renamed).unwrap_err();
    assert!(e.contains("`model.norm.weight` is missing"), "{e}");

    // A wrong dtype: the first F32 tag becomes I32.
    let wrong = replace(f.weights, b"\"F32\"", b"\"I32\"");
    let e = load(f.config, &wrong).unwrap_err();
    assert!(e.contains("dtype `I32`"), "{e}");

    // A mis-shaped tensor: the config promises a larger vocabulary than the embedding has.
    let config = String::from_utf8(f.config.to_vec())
        .unwrap()
        .replace("\"vocab_size\": 512", "\"vocab_size\": 513");
    let e = load(config.as_bytes(), f.weights).unwrap_err();
    assert!(
        e.contains("model.embed_tokens.weight") && e.contains("[513, 64]") && e.contains("[512, 64]"),
        "{e}"
    );

    // An unsupported architecture lists the supported ones.
    let e = ModelConfig::from_json(
        br#"{"architectures": ["GPT2LMHeadModel"], "vocab_size": 1, "hidden_size": 2,
        "intermediate_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1}"#,
    )
    .unwrap_err();
    assert!(
        matches!(e, ConfigError::Unsupported(_)) && e.to_string().contains("Qwen3ForCausalLM"),
        "{e}"
    );
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    let mut out = bytes.to_vec();
    out[at..at + from.len()].copy_from_slice(to);
    out
}

/// Prefix reuse (the engine's prefix cache): the golden prompt's first half runs into a cache that then ran
/// other tokens; cut back to that half (as a continued kept sequence is) or copied out of it (as a left
/// one is), the cache runs the rest of the prompt as one chunk at a nonzero position, and the first `steps`
/// greedy tokens (at most the golden 64) still equal transformers'. The chunk crosses Gemma 3's window of 5.
/// The fused decode step runs in f32, as in [`cache_equals_recompute`]: in f16 on lavapipe, the 15th
/// greedy token after the prefix of Qwen3.5's tiny random model changed (the f16 step's logits are within
/// 1.6e-2 of the largest of the generic path's: `tests/quantized_model.rs`).
pub async fn reused_prefix_greedy_matches(f: &Fixture, device: &Device, steps: usize) {
    let (mut decoder, golden) = load(f, device);
    decoder.set_caps(Caps::of(device).with_features(Features::BASE));
    let (prompt, n) = (&golden.prompt_ids, steps.min(golden.greedy_ids.len()));
    let half = prompt.len() / 2;
    let capacity = prompt.len() + n;
    for copied in [false, true] {
        let mut cache = decoder.new_cache(1, capacity);
        // The shared half, then another sequence's end; a recurrent model keeps its states where they
        // part (a no-op for attention-only models), as a prefill's end does.
        decoder
            .forward(&[prompt[..half].to_vec()], &mut cache, false)
            .expect("the shared half");
        cache.snapshot();
        decoder
            .forward(&[prompt[..3].to_vec()], &mut cache, false)
            .expect("the other sequence");
        let mut cache = match copied {
            true => cache.copy_prefix(half),
            false => {
                cache.truncate(half);
                cache
            }
        };
        let out = greedy_after(&decoder, &mut cache, &prompt[half..], n).await;
        assert_eq!(
            out,
            golden.greedy_ids[..n],
            "{}: greedy after a reused prefix (copied: {copied})",
            f.name
        );
    }
}

/// The golden prompt as chunks: ids, embedding rows of ids taken from the model itself
/// ([`Decoder::embeddings`], causal), ids, rows. Prefilled as chunks it gives exactly (bit for bit) the
/// logits of every position of the same prompt as ids, and leaves the same cache: the next 8 greedy steps
/// give the same logits too.
pub async fn mixed_chunks_equal_ids(f: &Fixture, device: &Device) {
    let (decoder, golden) = load(f, device);
    let p = &golden.prompt_ids;
    assert!(p.len() >= 12, "{}: a prompt of 12 ids", f.name);
    let rows = |r: std::ops::Range<usize>| decoder.embeddings(&p[r]).expect("embedding rows");
    let (a, b) = (rows(3..7), rows(9..p.len()));
    let chunks = [
        Chunk::Ids(&p[..3]),
        Chunk::Rows {
            rows: &a,
            attend: Attend::Causal,
        },
        Chunk::Ids(&p[7..9]),
        Chunk::Rows {
            rows: &b,
            attend: Attend::Causal,
        },
    ];
    let steps = 8;
    let mut by_ids = decoder.new_cache(1, p.len() + steps);
    let mut by_chunks = decoder.new_cache(1, p.len() + steps);
    let want = read(
        decoder
            .forward(std::slice::from_ref(p), &mut by_ids, true)
            .expect("ids"),
    )
    .await;
    let got = read(decoder.prefill(&chunks, &mut by_chunks, true).expect("chunks")).await;
    assert_eq!(got.len(), want.len(), "{}: logits size", f.name);
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(
        same(&got, &want),
        "{}: chunks differ from ids by {}",
        f.name,
        max_abs_diff(&got, &want)
    );
    let v = decoder.config.vocab_size;
    let mut next = argmax(&want[want.len() - v..]);
    for step in 0..steps {
        let want = read(decoder.forward(&[vec![next]], &mut by_ids, false).expect("step")).await;
        let got = read(
            decoder
                .forward(&[vec![next]], &mut by_chunks, false)
                .expect("step"),
        )
        .await;
        assert!(
            same(&got, &want),
            "{}: step {step} after the chunks differs",
            f.name
        );
        next = argmax(&want);
    }
}

/// The positions [`bidirectional_logits`] runs as one bidirectional chunk.
pub const SPAN: std::ops::Range<usize> = 3..9;

/// `span` (all-position logits with [`SPAN`] bidirectional) against `causal` (the same prompt causal):
/// the positions before the span keep their logits (within 1e-4) and the span's move (by more than 1e-2).
pub fn span_moves_only_its_positions(name: &str, span: &[f32], causal: &[f32], vocab: usize) {
    let (a, b) = (SPAN.start * vocab, SPAN.end * vocab);
    assert!(
        max_abs_diff(&span[..a], &causal[..a]) <= 1e-4,
        "{name}: before the span"
    );
    assert!(
        max_abs_diff(&span[a..b], &causal[a..b]) > 1e-2,
        "{name}: the span is causal"
    );
}

/// The golden prompt with positions 3..9 ([`SPAN`]) as one bidirectional chunk (Gemma 3's image tokens: rows taken
/// from the model's own embeddings), all-position logits `[12 · V]`: in one prefill, or with the first 3
/// ids run before (the span then starts at a cached position). With the fused step off, so that the KV
/// cache is f32 on every device (the fused step's f16 cache would round the prefix's keys: measured
/// 2.6e-3 on the logits on lavapipe, which is that cache's business, not the mask's).
pub async fn bidirectional_logits(f: &Fixture, device: &Device) -> (Vec<f32>, Vec<f32>) {
    let (mut decoder, golden) = load(f, device);
    decoder.set_fused(false);
    let p = &golden.prompt_ids;
    let rows = decoder.embeddings(&p[SPAN]).expect("embedding rows");
    let span = Chunk::Rows {
        rows: &rows,
        attend: Attend::Bidirectional,
    };
    let mut cache = decoder.new_cache(1, p.len());
    let whole = [Chunk::Ids(&p[..SPAN.start]), span, Chunk::Ids(&p[SPAN.end..])];
    let one = read(decoder.prefill(&whole, &mut cache, true).expect("one prefill")).await;
    let mut cache = decoder.new_cache(1, p.len());
    let mut two = read(decoder.prefill(&whole[..1], &mut cache, true).expect("first ids")).await;
    two.extend(
        read(
            decoder
                .prefill(&whole[1..], &mut cache, true)
                .expect("after a prefix"),
        )
        .await,
    );
    (one, two)
}

/// transformers' all-position logits of a fixture's golden prompt with [`SPAN`] one bidirectional
/// block: Gemma 3's image-token mask built from `token_type_ids` by transformers' own functions
/// (`tests/fixtures/make_golden_bidirectional.py`; sliding layers AND their window of 5 with it).
#[derive(Deserialize)]
pub struct SpanGolden {
    pub prompt_ids: Vec<u32>,
    /// `[start, end)`: [`SPAN`].
    pub span: [usize; 2],
    /// `[prompt_len][vocab]`.
    pub logits: Vec<Vec<f32>>,
}

/// The fixtures with a [`SpanGolden`] (Gemma 3's, whose window of 5 the span of 6 crosses).
pub fn span_golden(f: &Fixture) -> Option<SpanGolden> {
    let json = match f.name {
        "gemma3" => include_str!("../fixtures/golden/gemma3/bidirectional.json"),
        _ => return None,
    };
    Some(serde_json::from_str(json).expect("bidirectional.json"))
}

/// `got` ([`bidirectional_logits`] of `f`) within [`LOGITS_TOLERANCE`] of transformers' logits of the
/// same span ([`span_golden`]); the largest difference, or `None` for a fixture without one.
pub fn span_matches_transformers(f: &Fixture, got: &[f32]) -> Option<f32> {
    let want = span_golden(f)?;
    let golden: Golden = serde_json::from_str(f.golden).expect("golden.json");
    assert_eq!(want.prompt_ids, golden.prompt_ids, "{}: the same prompt", f.name);
    assert_eq!(want.span, [SPAN.start, SPAN.end], "{}: the same span", f.name);
    let want: Vec<f32> = want.logits.concat();
    assert_eq!(got.len(), want.len(), "{}: all positions", f.name);
    let diff = max_abs_diff(got, &want);
    assert!(
        diff <= LOGITS_TOLERANCE,
        "{}: a bidirectional span: max |logit - transformers| = {diff}",
        f.name
    );
    Some(diff)
}

/// Causal all-position logits of the golden prompt, with the fused step off as in
/// [`bidirectional_logits`] (an f32 KV cache on every device).
pub async fn causal_logits(f: &Fixture, device: &Device) -> Vec<f32> {
    let (mut decoder, golden) = load(f, device);
    decoder.set_fused(false);
    let mut cache = decoder.new_cache(1, golden.prompt_ids.len());
    read(
        decoder
            .forward(std::slice::from_ref(&golden.prompt_ids), &mut cache, true)
            .expect("forward"),
    )
    .await
}
