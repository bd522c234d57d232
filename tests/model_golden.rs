//! The decoder on burn's CPU backend against transformers' golden outputs, and loading errors.
#![cfg(not(target_arch = "wasm32"))]

mod golden;

use burn::tensor::Device;
use golden::{cache_equals_recompute, fixtures, greedy_matches, logits_match};
use kiln::loader::{Checkpoint, LoadError, SafetensorsError};
use kiln::model::{ConfigError, Decoder, ModelConfig};

#[test]
fn logits_match_transformers() {
    for f in fixtures() {
        let diff = pollster::block_on(logits_match(&f, &Device::flex()));
        eprintln!("{}: max |logit - golden| = {diff:e}", f.name);
    }
}

#[test]
fn greedy_64_tokens_match_transformers() {
    for f in fixtures() {
        pollster::block_on(greedy_matches(&f, &Device::flex()));
    }
}

#[test]
fn kv_cache_equals_recompute_for_32_steps() {
    for f in fixtures() {
        pollster::block_on(cache_equals_recompute(&f, &Device::flex(), 32));
    }
}

fn load(config: &[u8], weights: &[u8]) -> Result<Decoder, String> {
    let config = ModelConfig::from_json(config).map_err(|e| e.to_string())?;
    let mut ckpt = Checkpoint::single(weights).map_err(|e| e.to_string())?;
    Decoder::load(config, &mut ckpt, &Device::flex()).map_err(|e| e.to_string())
}

#[test]
fn loading_errors_name_what_is_wrong() {
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
