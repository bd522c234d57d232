//! The prefix cache end to end on the tiny random GGUF model (CPU backend): a multi-turn chat, repeated and
//! extended completions prompts, `n > 1`, an aborted stream, and the load option's bounds. Each answer that
//! reuses a prefix is compared with the same request on a model that keeps none (`prefixCacheBytes: 0`):
//! greedy text identical, and `cached_tokens` the prefix it did not run.
#![cfg(not(target_arch = "wasm32"))]

use burn::tensor::Device;
use kiln::api::response::{ChatCompletion, Completion};
use kiln::api::{chat_request, completion_request};
use kiln::engine::{EngineError, LoadedModel};
use pollster::block_on;
use serde_json::{Value, json};

const GGUF: &[u8] = include_bytes!("fixtures/gguf/tiny-llama.gguf");

fn model(prefix_bytes: Option<usize>) -> LoadedModel {
    let m = LoadedModel::from_gguf("tiny", GGUF, &Device::flex()).expect("the fixture loads");
    match prefix_bytes {
        Some(b) => m.with_prefix_cache(b).expect("a valid budget"),
        None => m,
    }
}

/// Bans the random model's special tokens (EOS among them) so that every answer runs its budget.
fn no_special() -> Value {
    json!({"0": -100, "1": -100, "2": -100})
}

fn chat(m: &LoadedModel, messages: &Value, extra: Value) -> ChatCompletion {
    let mut body = json!({
        "model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0, "logit_bias": no_special(),
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let req = chat_request(body, &m.spec()).expect("valid");
    block_on(m.chat(req).expect("served").collect()).expect("generated")
}

/// A completion and its usage.
fn complete(m: &LoadedModel, prompt: Value, extra: Value) -> (Completion, kiln::api::response::Usage) {
    let mut body = json!({
        "model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 0, "logit_bias": no_special(),
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let req = completion_request(body, &m.spec()).expect("valid");
    let out = block_on(m.complete(req).expect("served").collect()).expect("generated");
    let usage = out.usage.clone().expect("usage");
    (out, usage)
}

fn cached(usage: &kiln::api::response::Usage) -> u32 {
    usage
        .prompt_tokens_details
        .cached_tokens
        .expect("cached_tokens is reported")
}

fn content(c: &ChatCompletion) -> String {
    c.choices[0].message.content.clone().unwrap_or_default()
}

#[test]
fn a_multi_turn_chat_reuses_its_earlier_turns_and_answers_as_cold() {
    let (warm, cold) = (model(None), model(Some(0)));
    let mut messages = json!([{"role": "system", "content": "You are terse."}]);
    let mut prompt_before = 0;
    for turn in 0..4 {
        messages
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": format!("Question {turn}: what is {turn} plus one?")}));
        let (a, b) = (
            chat(&warm, &messages, json!({})),
            chat(&cold, &messages, json!({})),
        );
        assert_eq!(
            content(&a),
            content(&b),
            "turn {turn}: reused and cold answers differ"
        );
        assert_eq!(a.usage.prompt_tokens, b.usage.prompt_tokens);
        assert_eq!(cached(&b.usage), 0, "a model keeping no prefixes reports none");
        let got = cached(&a.usage);
        if turn == 0 {
            assert_eq!(got, 0, "nothing is kept before the first request");
        } else {
            // At least the previous turn's prompt, and never the last prompt token (it must run).
            assert!(
                got as usize >= prompt_before && got < a.usage.prompt_tokens,
                "turn {turn}: cached {got} of {} (previous prompt {prompt_before})",
                a.usage.prompt_tokens
            );
        }
        prompt_before = a.usage.prompt_tokens as usize;
        messages
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": content(&a)}));
    }
    assert_eq!(
        warm.prefix_cache().len(),
        1,
        "one conversation, one kept sequence"
    );
    assert!(warm.memory().prefix_cache_bytes > 0);
    assert_eq!(cold.memory().prefix_cache_bytes, 0);
}

#[test]
fn completions_reuse_repeated_and_extended_prompts_with_n_and_logprobs() {
    let (warm, cold) = (model(None), model(Some(0)));
    let prompt = "The sea was calm and the boat";
    let (first, usage) = complete(&warm, json!(prompt), json!({}));
    assert_eq!(cached(&usage), 0);
    let n = usage.prompt_tokens;
    // The same prompt again: all but its last token come from the cache.
    let (again, usage) = complete(&warm, json!(prompt), json!({}));
    assert_eq!(cached(&usage), n - 1);
    assert_eq!(again.choices[0].text, first.choices[0].text);
    // The prompt with the first answer after it: its prompt and the fed answer tokens are reused.
    let longer = format!("{prompt}{}", first.choices[0].text);
    let extra = json!({"n": 2, "temperature": 0.8, "seed": 7, "logprobs": 2});
    let ((a, usage), (b, _)) = (
        complete(&warm, json!(longer), extra.clone()),
        complete(&cold, json!(longer), extra),
    );
    assert!(
        cached(&usage) >= n,
        "cached {} of a prompt extending {n} tokens",
        cached(&usage)
    );
    for (x, y) in a.choices.iter().zip(&b.choices) {
        assert_eq!(
            x.text, y.text,
            "choice {}: seeded sampling after a reused prefix",
            x.index
        );
        let (lx, ly) = (x.logprobs.as_ref().unwrap(), y.logprobs.as_ref().unwrap());
        for (p, q) in lx.token_logprobs.iter().zip(&ly.token_logprobs) {
            let (p, q) = (p.unwrap_or(0.0), q.unwrap_or(0.0));
            assert!((p - q).abs() < 1e-3, "logprob {p} vs {q}");
        }
    }
    // Echoed prompt logprobs score every prompt position: no reuse.
    let (_, echoed) = complete(&warm, json!(prompt), json!({"echo": true, "logprobs": 1}));
    assert_eq!(cached(&echoed), 0);
    // Several prompts in one request: the second continues the first.
    let (_, both) = complete(&warm, json!([prompt, longer]), json!({}));
    assert!(cached(&both) >= n, "summed over the prompts");
}

#[test]
fn an_aborted_stream_keeps_what_it_ran() {
    let warm = model(None);
    let messages = json!([{"role": "user", "content": "Count the waves."}]);
    let mut body = json!({
        "model": "tiny", "messages": messages, "max_tokens": 40, "temperature": 0,
        "logit_bias": no_special(), "stream": true,
    });
    let req = chat_request(body.clone(), &warm.spec()).expect("valid");
    let mut stream = warm.chat(req).expect("served");
    let mut text = String::new();
    for _ in 0..6 {
        let chunk = block_on(stream.next()).expect("a chunk").expect("no error");
        if let Some(c) = chunk.choices.first().and_then(|c| c.delta.content.clone()) {
            text.push_str(&c);
        }
    }
    drop(stream);
    assert_eq!(warm.prefix_cache().len(), 1, "the aborted run's state is kept");
    // The same request again, streamed with usage: the whole prompt but its last token was kept, and the
    // answer starts as the aborted one did.
    body["stream_options"] = json!({"include_usage": true});
    let req = chat_request(body, &warm.spec()).expect("valid");
    let mut stream = warm.chat(req).expect("served");
    let (mut again, mut usage) = (String::new(), None);
    while let Some(chunk) = block_on(stream.next()) {
        let chunk = chunk.expect("no error");
        if let Some(c) = chunk.choices.first().and_then(|c| c.delta.content.clone()) {
            again.push_str(&c);
        }
        if let Some(Some(u)) = chunk.usage {
            usage = Some(u);
        }
    }
    let usage = usage.expect("a usage chunk");
    assert_eq!(cached(&usage), usage.prompt_tokens - 1);
    assert!(again.starts_with(&text), "{again:?} continues {text:?}");
}

#[test]
fn a_budget_that_cannot_hold_a_sequence_is_refused_naming_the_option() {
    let m = LoadedModel::from_gguf("tiny", GGUF, &Device::flex()).expect("loads");
    match m.with_prefix_cache(1000) {
        Err(e @ EngineError::LoadOption { option, .. }) => {
            assert_eq!(option, "prefixCacheBytes");
            assert!(e.to_string().contains("cannot hold one sequence"), "{e}");
        }
        other => panic!("expected a load option error, got {:?}", other.map(|_| ())),
    }
    // Evicted within budget: a budget of one block of positions keeps one such sequence at a time.
    let c = model(None).decoder.config.clone();
    let least = 8 * c.num_layers * c.num_kv_heads * c.head_dim * 256;
    assert!(model(None).with_prefix_cache(least - 1).is_err());
    let small = model(Some(least));
    for p in ["one two", "three four", "five six"] {
        // Prompt and answer fill the 256-position context: each kept cache has grown to one whole block.
        let room = 256 - small.tokenizer.encode(p, true).expect("encodes").len();
        let (_, usage) = complete(&small, json!(p), json!({"max_tokens": room}));
        assert_eq!(usage.completion_tokens as usize, room);
        assert_eq!(small.prefix_cache().bytes(), least, "one block kept");
    }
    assert_eq!(small.prefix_cache().len(), 1);
}

/// Models with recurrent layers (LFM2's convolutions, Qwen3.5's delta rule) go back only to a kept
/// snapshot of their states: a continued conversation reuses its whole kept sequence, a prompt that
/// leaves a kept one part way resumes from the snapshot at that prompt's end, and every answer equals a
/// cold run's.
#[test]
fn recurrent_models_reuse_their_states_and_answer_as_cold() {
    for (name, bytes) in [
        ("lfm2", &include_bytes!("fixtures/gguf/tiny-lfm2.gguf")[..]),
        ("qwen35", &include_bytes!("fixtures/gguf/tiny-qwen35.gguf")[..]),
    ] {
        let load = |budget| {
            LoadedModel::from_gguf("tiny", bytes, &Device::flex())
                .expect("the fixture loads")
                .with_prefix_cache(budget)
                .expect("a valid budget")
        };
        let (warm, cold) = (load(64 << 20), load(0));
        let mut messages = json!([{"role": "system", "content": "You are terse."}]);
        let mut prompt_before = 0;
        for turn in 0..3 {
            messages.as_array_mut().unwrap().push(
                json!({"role": "user", "content": format!("Question {turn}: what is {turn} plus one?")}),
            );
            let (a, b) = (
                chat(&warm, &messages, json!({})),
                chat(&cold, &messages, json!({})),
            );
            assert_eq!(
                content(&a),
                content(&b),
                "{name} turn {turn}: reused and cold answers differ"
            );
            let got = cached(&a.usage);
            assert!(
                turn == 0 && got == 0 || got as usize >= prompt_before && got < a.usage.prompt_tokens,
                "{name} turn {turn}: cached {got} of {} (previous prompt {prompt_before})",
                a.usage.prompt_tokens
            );
            prompt_before = a.usage.prompt_tokens as usize;
            messages
                .as_array_mut()
                .unwrap()
                .push(json!({"role": "assistant", "content": content(&a)}));
        }
        // The same conversation with another last question: it leaves the kept sequence inside the last
        // user turn, so it resumes from the snapshot at the end of the previous prompt... or earlier.
        let mut other = messages.clone();
        let last = other.as_array_mut().unwrap();
        last.pop();
        last.pop();
        last.push(json!({"role": "user", "content": "Something else entirely?"}));
        let (a, b) = (chat(&warm, &other, json!({})), chat(&cold, &other, json!({})));
        assert_eq!(
            content(&a),
            content(&b),
            "{name}: a prompt leaving the kept sequence"
        );
        let got = cached(&a.usage) as usize;
        assert!(
            got > 0 && got < a.usage.prompt_tokens as usize,
            "{name}: cached {got}"
        );
    }
}
