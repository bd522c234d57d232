//! Every request knob end to end on a real (tiny, random-weight) GGUF model with its own tokenizer and chat
//! template (`tests/fixtures/gguf/tiny-llama.gguf`), on the CPU backend: each test fails if its knob is
//! ignored. Every response and chunk is validated against OpenAI's schemas.
#![cfg(not(target_arch = "wasm32"))]

mod schema;

use burn::tensor::Device;
use kiln::api::response::{ChatCompletion, ChatCompletionChunk, Completion, FinishReason};
use kiln::api::{chat_request, completion_request};
use kiln::engine::LoadedModel;
use kiln::loader::Gguf;
use pollster::block_on;
use schema::assert_valid;
use serde_json::{Value, json};

fn model() -> LoadedModel {
    LoadedModel::from_gguf(
        "tiny",
        include_bytes!("fixtures/gguf/tiny-llama.gguf"),
        &Device::flex(),
    )
    .expect("the fixture loads")
}

/// The random model often picks its special tokens (ids 0–2, EOS among them); banning them keeps every
/// choice running to its token budget, so that each test sees the knob it checks.
fn no_special() -> Value {
    json!({"0": -100, "1": -100, "2": -100})
}

fn chat_body(extra: Value) -> Value {
    let mut body = json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me a story about the sea."}],
        "max_tokens": 24,
        "temperature": 0,
        "logit_bias": no_special(),
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn chat(m: &LoadedModel, extra: Value) -> ChatCompletion {
    let req = chat_request(chat_body(extra), &m.spec()).expect("valid");
    let out = block_on(m.chat(req).expect("served").collect()).expect("generated");
    assert_valid("CreateChatCompletionResponse", &out);
    out
}

fn chat_chunks(m: &LoadedModel, extra: Value) -> Vec<ChatCompletionChunk> {
    let mut body = chat_body(extra);
    body["stream"] = json!(true);
    let req = chat_request(body, &m.spec()).expect("valid");
    let mut stream = m.chat(req).expect("served");
    let mut chunks = Vec::new();
    while let Some(c) = block_on(stream.next()) {
        let c = c.expect("chunk");
        assert_valid("CreateChatCompletionStreamResponse", &c);
        chunks.push(c);
    }
    chunks
}

fn complete(m: &LoadedModel, body: Value) -> Completion {
    let mut body = body;
    body["model"] = json!("tiny");
    body["logit_bias"] = no_special();
    let req = completion_request(body, &m.spec()).expect("valid");
    let out = block_on(m.complete(req).expect("served").collect()).expect("generated");
    assert_valid("CreateCompletionResponse", &out);
    out
}

fn text(c: &ChatCompletion, i: usize) -> String {
    c.choices[i].message.content.clone().unwrap_or_default()
}

/// Ids of the generated tokens, through logprobs (the tokens' bytes decoded back would be lossy).
fn token_texts(c: &ChatCompletion) -> Vec<String> {
    c.choices[0]
        .logprobs
        .as_ref()
        .unwrap()
        .content
        .as_ref()
        .unwrap()
        .iter()
        .map(|t| t.token.clone())
        .collect()
}

#[test]
fn max_tokens_ends_with_length_and_counts_usage() {
    let m = model();
    let c = chat(&m, json!({"max_tokens": 5}));
    assert_eq!(c.choices[0].finish_reason, FinishReason::Length);
    assert_eq!(c.usage.completion_tokens, 5);
    assert_eq!(c.usage.total_tokens, c.usage.prompt_tokens + 5);
    assert!(c.usage.prompt_tokens > 10, "the template wraps the message");
    let c = chat(&m, json!({"max_completion_tokens": 3, "max_tokens": 7}));
    assert_eq!(c.usage.completion_tokens, 3, "the smaller bound wins");
}

#[test]
fn logit_bias_forces_and_bans_tokens() {
    let m = model();
    let forced = chat(
        &m,
        json!({"logit_bias": {"300": 100}, "temperature": 1, "seed": 1, "logprobs": true}),
    );
    let token = m.tokenizer.token_text(300);
    assert!(
        token_texts(&forced).iter().all(|t| *t == token),
        "{:?}",
        token_texts(&forced)
    );
    let greedy = chat(&m, json!({"logprobs": true, "max_tokens": 1}));
    let first = greedy.choices[0]
        .logprobs
        .as_ref()
        .unwrap()
        .content
        .as_ref()
        .unwrap()[0]
        .clone();
    let id = (0..512)
        .find(|&i| {
            m.tokenizer.token_text(i) == first.token
                && m.tokenizer.token_bytes(i) == first.bytes.clone().unwrap()
        })
        .unwrap();
    let banned = chat(
        &m,
        json!({"logprobs": true, "max_tokens": 1, "logit_bias": {id.to_string(): -100}}),
    );
    let other = &banned.choices[0]
        .logprobs
        .as_ref()
        .unwrap()
        .content
        .as_ref()
        .unwrap()[0];
    assert_ne!(other.token, first.token, "-100 bans the greedy token");
}

#[test]
fn seeds_repeat_and_differ() {
    let m = model();
    let run = |seed: u64| {
        text(
            &chat(&m, json!({"temperature": 1.0, "seed": seed, "max_tokens": 32})),
            0,
        )
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn n_gives_indexed_choices_and_summed_usage() {
    let m = model();
    let c = chat(
        &m,
        json!({"n": 3, "temperature": 1.0, "seed": 3, "max_tokens": 6}),
    );
    assert_eq!(c.choices.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(c.usage.completion_tokens, 18);
    let texts: Vec<String> = (0..3).map(|i| text(&c, i)).collect();
    assert!(
        texts[0] != texts[1] || texts[1] != texts[2],
        "the choices are sampled independently"
    );
    // Choice 0 of n = 3 is the same as the only choice of n = 1 with the same seed.
    let one = chat(&m, json!({"temperature": 1.0, "seed": 3, "max_tokens": 6}));
    assert_eq!(text(&one, 0), texts[0]);
}

#[test]
fn stop_strings_cut_across_tokens_in_full_and_streamed_responses() {
    let m = model();
    let plain = chat(&m, json!({"logprobs": true}));
    let full = text(&plain, 0);
    let tokens = token_texts(&plain);
    // A stop string made of the end of one token and the start of the next.
    let (i, a) = tokens
        .iter()
        .enumerate()
        .skip(2)
        .find(|(_, t)| !t.is_empty() && !t.contains('\u{FFFD}'))
        .unwrap();
    let b = tokens[i + 1..].iter().find(|t| !t.is_empty()).unwrap();
    let stop = format!("{}{}", a.chars().last().unwrap(), b.chars().next().unwrap());
    let expected = &full[..full.find(&stop).unwrap()];
    let cut = chat(&m, json!({"stop": [stop.clone(), "never-there"]}));
    assert_eq!(text(&cut, 0), expected, "stop {stop:?}");
    assert_eq!(cut.choices[0].finish_reason, FinishReason::Stop);
    let streamed: String = chat_chunks(&m, json!({"stop": stop}))
        .iter()
        .flat_map(|c| c.choices.iter().filter_map(|ch| ch.delta.content.clone()))
        .collect();
    assert_eq!(streamed, expected);
}

#[test]
fn streaming_shape_and_equality_with_the_full_response() {
    let m = model();
    let extra = json!({"temperature": 0.8, "seed": 11, "n": 2});
    let mut with_usage = extra.clone();
    with_usage["stream_options"] = json!({"include_usage": true});
    let chunks = chat_chunks(&m, with_usage);
    let full = chat(&m, extra);
    let first = &chunks[0];
    for c in &chunks {
        assert_eq!(
            (&c.id, c.created, &c.model, &c.system_fingerprint),
            (&first.id, first.created, &first.model, &first.system_fingerprint)
        );
    }
    for i in 0..2u32 {
        let mine: Vec<&kiln::api::response::ChunkChoice> = chunks
            .iter()
            .flat_map(|c| c.choices.iter())
            .filter(|c| c.index == i)
            .collect();
        assert_eq!(
            mine[0].delta.role,
            Some(kiln::api::response::AssistantRole::Assistant)
        );
        assert!(mine[..mine.len() - 1].iter().all(|c| c.finish_reason.is_none()));
        assert!(mine.last().unwrap().finish_reason.is_some());
        let text: String = mine.iter().filter_map(|c| c.delta.content.clone()).collect();
        assert_eq!(text, full.choices[i as usize].message.content.clone().unwrap());
    }
    let last = chunks.last().unwrap();
    assert!(last.choices.is_empty());
    // The same usage, except that the full response (run second) found its prompt in the prefix cache.
    let mut usage = last.usage.clone().flatten().unwrap();
    assert_eq!(usage.prompt_tokens_details.cached_tokens, Some(0));
    assert_eq!(
        full.usage.prompt_tokens_details.cached_tokens,
        Some(full.usage.prompt_tokens - 1)
    );
    usage.prompt_tokens_details = full.usage.prompt_tokens_details.clone();
    assert_eq!(usage, full.usage);
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.usage == Some(None)));
    // Without include_usage there is no usage key and no usage chunk.
    let chunks = chat_chunks(&m, json!({}));
    assert!(chunks.iter().all(|c| c.usage.is_none() && !c.choices.is_empty()));
}

#[test]
fn chat_logprobs_have_the_requested_shape() {
    let m = model();
    let c = chat(&m, json!({"logprobs": true, "top_logprobs": 5, "max_tokens": 12}));
    let content = c.choices[0].logprobs.as_ref().unwrap().content.clone().unwrap();
    assert_eq!(content.len() as u32, c.usage.completion_tokens);
    for t in &content {
        assert_eq!(t.top_logprobs.len(), 5);
        assert!(
            t.top_logprobs.windows(2).all(|w| w[0].logprob >= w[1].logprob),
            "sorted"
        );
        assert!(t.logprob <= 0.0);
        assert_eq!(
            t.logprob, t.top_logprobs[0].logprob,
            "greedy picks the most likely"
        );
        let mass: f32 = t.top_logprobs.iter().map(|x| x.logprob.exp()).sum();
        assert!(mass <= 1.0 + 1e-4);
        assert_eq!(t.bytes.as_deref().map(String::from_utf8_lossy).unwrap(), t.token);
    }
    let joined: Vec<u8> = content.iter().flat_map(|t| t.bytes.clone().unwrap()).collect();
    assert_eq!(
        String::from_utf8_lossy(&joined),
        text(&c, 0),
        "the tokens' bytes are the text"
    );
}

#[test]
fn completions_echo_logprobs_and_multiple_prompts() {
    let m = model();
    let prompt = "Once upon a time";
    let c = complete(
        &m,
        json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "echo": true, "logprobs": 2}),
    );
    let choice = &c.choices[0];
    assert!(choice.text.starts_with(prompt), "{:?}", choice.text);
    let lp = choice.logprobs.as_ref().unwrap();
    let prompt_tokens = c.usage.as_ref().unwrap().prompt_tokens as usize;
    assert_eq!(lp.tokens.len(), prompt_tokens + 8);
    assert_eq!(
        lp.token_logprobs[0], None,
        "the first prompt token has no context"
    );
    assert!(lp.token_logprobs[1..].iter().all(|l| l.is_some_and(|l| l <= 0.0)));
    // Two alternatives, plus the chosen token when it is not among them.
    assert!(
        lp.top_logprobs[1..]
            .iter()
            .all(|t| (1..=3).contains(&t.as_ref().unwrap().len()))
    );
    // Most likely first, in the JSON object's key order too (as OpenAI orders them).
    let json = serde_json::to_value(lp).unwrap();
    for t in json["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t.is_null())
    {
        let values: Vec<f64> = t
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{t}");
    }
    assert_eq!(lp.text_offset[0], 0);
    assert!(lp.text_offset.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(lp.text_offset[prompt_tokens] as usize, prompt.chars().count());
    // Without echo the text is only the completion, and equals the echoed one's tail.
    let plain = complete(&m, json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}));
    assert_eq!(format!("{prompt}{}", plain.choices[0].text), choice.text);
    // Two prompts × n = 2: indices prompt·n + i, usage summed over both.
    let two = complete(
        &m,
        json!({"prompt": ["a b", "c d e"], "n": 2, "max_tokens": 4, "temperature": 1, "seed": 5}),
    );
    assert_eq!(
        two.choices.iter().map(|c| c.index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(two.usage.as_ref().unwrap().completion_tokens, 16);
    // Token prompts work as text prompts do.
    let ids = m.tokenizer.encode(prompt, true).unwrap();
    let by_ids = complete(&m, json!({"prompt": ids, "max_tokens": 8, "temperature": 0}));
    assert_eq!(by_ids.choices[0].text, plain.choices[0].text);
}

#[test]
fn what_cannot_be_served_is_refused_before_generation() {
    let m = model();
    // (Tools on a template without tool syntax are served in the generic format: tests/tools.rs.)
    let e = match chat_request(chat_body(json!({"max_tokens": 250})), &m.spec()) {
        Err(e) => e,
        Ok(req) => m
            .chat(req)
            .err()
            .expect("a 250-token completion after the prompt exceeds 256"),
    };
    assert_eq!(e.code, "context_length_exceeded");
}

#[test]
fn streamed_deltas_never_split_a_utf8_character() {
    let m = model();
    // The fixture's byte tokens: id 3 + b is byte b. "é" is 0xC3 0xA9, "🦀" four bytes.
    let mut detok = kiln::engine::protocol::detok::Detokenizer::default();
    let mut pieces = Vec::new();
    for b in "aé🦀".bytes() {
        pieces.push(detok.push(&m.tokenizer, 3 + u32::from(b)).unwrap());
    }
    assert_eq!(pieces, ["a", "", "é", "", "", "", "🦀"]);
    assert_eq!(detok.flush(&m.tokenizer).unwrap(), "");
    // A dangling lead byte at the end is flushed as decoded.
    let mut detok = kiln::engine::protocol::detok::Detokenizer::default();
    assert_eq!(detok.push(&m.tokenizer, 3 + 0xC3).unwrap(), "");
    assert_eq!(detok.flush(&m.tokenizer).unwrap(), "\u{FFFD}");
}

#[test]
fn a_cancelled_stream_stops_at_its_next_step() {
    let m = model();
    let mut body = chat_body(json!({"max_tokens": 20}));
    body["stream"] = json!(true);
    let mut stream = m.chat(chat_request(body, &m.spec()).unwrap()).unwrap();
    assert!(block_on(stream.next()).unwrap().is_ok());
    stream.cancel_handle().set();
    let e = block_on(stream.next()).unwrap().unwrap_err();
    assert_eq!(e.code, "request_aborted");
    assert!(block_on(stream.next()).is_none(), "nothing after the abort");
}

/// The fixture rewritten without `tokenizer.chat_template`, as a base model's GGUF is.
fn without_template() -> Vec<u8> {
    use kiln::loader::gguf_write::{tensors_of, write};
    let bytes = include_bytes!("fixtures/gguf/tiny-llama.gguf");
    let g = Gguf::parse(bytes).expect("the fixture parses");
    let mut metadata = g.metadata.clone();
    assert!(metadata.remove("tokenizer.chat_template").is_some());
    let tensors = tensors_of(&g);
    write(&metadata, &tensors).expect("written")
}

#[test]
fn a_model_without_a_chat_template_serves_completions_and_refuses_chat_until_given_one() {
    let file = without_template();
    let m = LoadedModel::from_gguf("tiny", &file, &Device::flex()).expect("loads without a template");
    let done = complete(
        &m,
        json!({"prompt": "The sea", "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(
        done.usage.map(|u| u.completion_tokens),
        Some(4),
        "completions need no template"
    );
    let req = chat_request(chat_body(json!({})), &m.spec()).expect("valid");
    let e = m.chat(req).err().expect("refused");
    assert_eq!((e.status(), e.code), (400, "no_chat_template"));
    assert!(
        e.message.contains("chatTemplate"),
        "says how to pass one: {}",
        e.message
    );

    // The load option: the fixture's own template given back gives the original model's replies.
    let template = match Gguf::parse(include_bytes!("fixtures/gguf/tiny-llama.gguf"))
        .unwrap()
        .str("tokenizer.chat_template")
    {
        Ok(Some(t)) => t.to_string(),
        other => panic!("the fixture has a template: {other:?}"),
    };
    let m = m.with_chat_template(&template).expect("compiles");
    assert_eq!(
        chat(&m, json!({})).choices[0].message.content,
        chat(&model(), json!({})).choices[0].message.content
    );
    let bad = LoadedModel::from_gguf("tiny", &file, &Device::flex())
        .unwrap()
        .with_chat_template("{% for m in messages %}");
    assert!(
        bad.is_err(),
        "a template that does not compile is refused at load"
    );
}

/// A completions request plans to one prompt per prompt given, in order: ids as the tokenizer gives them
/// (or as given), each budget checked, `echo` text and prompt scoring carried.
#[test]
fn completion_requests_plan_one_prompt_each() {
    use kiln::engine::protocol::plan;
    let m = model();
    let body =
        json!({"model": "tiny", "prompt": ["Once upon", "a time"], "echo": true, "logprobs": 2, "n": 2});
    let p = plan::completion(&m.format(), completion_request(body, &m.spec()).unwrap()).unwrap();
    assert_eq!(p.prompts.len(), 2);
    for (prompt, text) in p.prompts.iter().zip(["Once upon", "a time"]) {
        assert_eq!(prompt.ids(), m.tokenizer.encode(text, true).unwrap());
        assert_eq!(prompt.echo(), Some(text));
        let params = prompt.params();
        assert_eq!(
            (params.n, params.logprobs, params.prompt_logprobs, params.max_new),
            (2, Some(2), true, 16)
        );
    }
    let body = json!({"model": "tiny", "prompt": [[5, 6, 7]], "max_tokens": 4});
    let p = plan::completion(&m.format(), completion_request(body, &m.spec()).unwrap()).unwrap();
    assert_eq!(
        (
            p.prompts[0].ids(),
            p.prompts[0].echo(),
            p.prompts[0].params().max_new
        ),
        (&[5, 6, 7][..], None, 4)
    );
}
