//! SmolLM2-135M-Instruct (the default model, GGUF Q4_1) natively on the CPU backend: a real question gets the
//! right answer. Needs the data cache (`cargo xtask fetch`; `cargo xtask test` does it).
#![cfg(not(target_arch = "wasm32"))]

mod data;
mod real;

use burn::tensor::Device;
use kiln::api::response::FinishReason;
use kiln::api::{chat_request, completion_request};
use kiln::engine::LoadedModel;
use pollster::block_on;
use serde_json::json;

fn model_bytes() -> Vec<u8> {
    data::read(real::SMOLLM2)
}

#[test]
fn smollm2_answers_the_capital_of_france() {
    let model = kiln::engine::LoadedModel::from_gguf("smollm2-135m", &model_bytes(), &Device::flex())
        .expect("SmolLM2 loads");
    let answer = pollster::block_on(real::answers_paris(model));
    eprintln!("SmolLM2 (flex): {answer:?}");
}

/// The weights stay in the file's blocks: what the CPU backend holds is the file's tensor bytes (norms
/// widened to f32, a few KiB), not the 4.5× of f32 weights; the tied `lm_head` is the embedding table.
#[test]
fn smollm2_weights_stay_quantized() {
    let bytes = model_bytes();
    let g = kiln::loader::Gguf::parse(&bytes).unwrap();
    let quantized: u64 = g
        .tensors
        .iter()
        .filter(|(_, t)| t.ty.is_quantized())
        .map(|(_, t)| t.size())
        .sum();
    let m = LoadedModel::from_gguf("smollm2-135m", &bytes, &Device::flex()).unwrap();
    let held = m.memory().weight_bytes;
    eprintln!(
        "SmolLM2: file {} bytes, quantized tensors {quantized}, held {held}",
        bytes.len()
    );
    assert_eq!(
        held, quantized,
        "every quantized matrix is held as its blocks, the tied head once"
    );
    assert!(held < bytes.len() as u64);
}

#[test]
fn smollm2_streams_samples_and_completes() {
    let m = LoadedModel::from_gguf("smollm2-135m", &model_bytes(), &Device::flex()).unwrap();
    let body = json!({
        "model": "smollm2-135m",
        "messages": [{"role": "system", "content": "Answer in French."},
                     {"role": "user", "content": "Say hello and name a French dessert."}],
        "max_tokens": 24, "temperature": 0.7, "seed": 42, "n": 2, "logprobs": true, "top_logprobs": 3,
    });
    let full = block_on(
        m.chat(chat_request(body.clone(), &m.spec()).unwrap())
            .unwrap()
            .collect(),
    )
    .unwrap();
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let mut stream = m.chat(chat_request(streamed, &m.spec()).unwrap()).unwrap();
    let mut texts = [String::new(), String::new()];
    while let Some(chunk) = block_on(stream.next()) {
        for c in chunk.unwrap().choices {
            let piece = c.delta.content.unwrap_or_default();
            assert!(
                !piece.contains('\u{FFFD}'),
                "a delta splits a character: {piece:?}"
            );
            texts[c.index as usize].push_str(&piece);
        }
    }
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(Some(text), full.choices[i].message.content.as_ref(), "choice {i}");
        let lp = full.choices[i]
            .logprobs
            .as_ref()
            .unwrap()
            .content
            .as_ref()
            .unwrap();
        let bytes: Vec<u8> = lp.iter().flat_map(|t| t.bytes.clone().unwrap()).collect();
        assert!(String::from_utf8_lossy(&bytes).starts_with(text.as_str()));
    }
    eprintln!("SmolLM2 sampled: {texts:?}");
    // Completions: echo and a stop string.
    let c = block_on(
        m.complete(
            completion_request(
                json!({"model": "smollm2-135m", "prompt": "The capital of France is", "max_tokens": 16,
                       "temperature": 0, "echo": true, "stop": ["."]}),
                &m.spec(),
            )
            .unwrap(),
        )
        .unwrap()
        .collect(),
    )
    .unwrap();
    let text = &c.choices[0].text;
    assert!(
        text.starts_with("The capital of France is") && text.contains("Paris"),
        "{text:?}"
    );
    assert!(!text.contains('.'), "cut before the stop string: {text:?}");
    assert_eq!(c.choices[0].finish_reason, Some(FinishReason::Stop));
}

/// A three-turn chat on one engine reuses each earlier turn's KV state (`cached_tokens` at least the previous
/// prompt) and answers token for token as an engine that keeps no prefixes.
#[test]
fn smollm2_multi_turn_chat_reuses_the_prefix_and_answers_as_cold() {
    let bytes = model_bytes();
    let warm = LoadedModel::from_gguf("smollm2-135m", &bytes, &Device::flex()).unwrap();
    let cold = LoadedModel::from_gguf("smollm2-135m", &bytes, &Device::flex())
        .unwrap()
        .with_prefix_cache(0)
        .unwrap();
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut before = 0;
    for (turn, q) in ["Name a planet.", "How far is it from the Sun?", "And its moons?"]
        .iter()
        .enumerate()
    {
        messages.push(json!({"role": "user", "content": q}));
        let body = json!({"model": "smollm2-135m", "messages": messages, "max_tokens": 24, "temperature": 0});
        let run = |m: &LoadedModel| {
            block_on(
                m.chat(chat_request(body.clone(), &m.spec()).unwrap())
                    .unwrap()
                    .collect(),
            )
            .unwrap()
        };
        let (a, b) = (run(&warm), run(&cold));
        let text = a.choices[0].message.content.clone().unwrap_or_default();
        assert_eq!(Some(&text), b.choices[0].message.content.as_ref(), "turn {turn}");
        let cached = a.usage.prompt_tokens_details.cached_tokens.unwrap() as usize;
        eprintln!(
            "SmolLM2 turn {turn}: {} prompt tokens, {cached} cached: {text:?}",
            a.usage.prompt_tokens
        );
        assert!(
            turn == 0 || cached >= before,
            "turn {turn}: {cached} cached, previous prompt {before}"
        );
        before = a.usage.prompt_tokens as usize;
        messages.push(json!({"role": "assistant", "content": text}));
    }
}
