//! Round trips of every request field and every union form: JSON → request type → JSON gives the
//! canonical form (unions normalised: a stop string becomes an array, a token prompt an array of arrays, a
//! tool call without `type` gets `"function"`), parsing that again gives the same value, and the request
//! validates.
#![cfg(not(target_arch = "wasm32"))]

use kiln::api::request::{
    CallOptions, Content, ContentPart, Prompt, ReasoningEffort, ResponseFormat, ServiceTier,
};
use kiln::api::{ApiError, ModelSpec, parse_chat, parse_completion, validate_chat, validate_completion};
use serde_json::{Value, json};

fn spec() -> ModelSpec {
    ModelSpec {
        id: "m".into(),
        context_length: 4096,
        vocab_size: 1000,
        images: true,
        video: true,
    }
}

/// JSON equality up to what JSON does not distinguish: `1` vs `1.0`, and a `null` member vs no member.
fn norm(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.iter().map(norm).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), norm(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Parses `input`, checks it serialises to `canonical`, that `canonical` parses to the same value, and that
/// the request validates.
fn roundtrip<T: serde::Serialize + PartialEq + std::fmt::Debug + Clone, V>(
    input: Value,
    canonical: Value,
    parse: fn(Value) -> Result<T, ApiError>,
    validate: fn(T, &ModelSpec) -> Result<V, ApiError>,
) -> T {
    let parsed = parse(input.clone()).unwrap_or_else(|e| panic!("{input}: {e:?}"));
    assert_eq!(
        norm(&serde_json::to_value(&parsed).unwrap()),
        norm(&canonical),
        "canonical form of {input}"
    );
    assert_eq!(
        parse(canonical.clone()).unwrap(),
        parsed,
        "reparse of {canonical}"
    );
    if let Err(e) = validate(parsed.clone(), &spec()) {
        panic!("{input} does not validate: {e:?}");
    }
    parsed
}

fn chat_roundtrip(input: Value, canonical: Value) -> kiln::api::ChatCompletionRequest {
    roundtrip(input, canonical, parse_chat, validate_chat)
}

fn completion_roundtrip(input: Value, canonical: Value) -> kiln::api::CompletionRequest {
    roundtrip(input, canonical, parse_completion, validate_completion)
}

#[test]
fn chat_request_with_every_field() {
    let full = json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}},
                {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}
            ], "name": "ann"},
            {"role": "assistant", "content": null, "reasoning_content": "Look it up.", "reasoning": "Look it up.",
             "refusal": null,
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]},
            {"role": "tool", "content": "a cat", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "A cat."}
        ],
        "store": false,
        "max_tokens": 100,
        "max_completion_tokens": 50,
        "temperature": 0.7,
        "top_p": 0.9,
        "tools": [{"type": "function", "function": {
            "name": "lookup", "description": "Look something up",
            "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}},
            "strict": true, "defer_loading": false}}],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "reasoning_effort": "low",
        "n": 2,
        "stream": true,
        "stream_options": {"include_usage": true},
        "stop": ["\n\n", "END"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"17": -100, "42": 2.5},
        "logprobs": true,
        "top_logprobs": 3,
        "user": "u-1",
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "description": "An answer", "schema": {"type": "object"}, "strict": true}},
        "extra_body": {"anything": [1, 2]},
        "service_tier": "flex",
        "seed": -7,
        "parallel_tool_calls": false,
        "metadata": {"k": "v"},
        "modalities": ["text"]
    });
    let parsed = chat_roundtrip(full.clone(), full);
    // Fields the api layer resolves.
    let valid = validate_chat(parsed, &spec()).unwrap();
    assert_eq!(
        valid.common.max_tokens,
        Some(50),
        "the smaller of max_tokens and max_completion_tokens"
    );
    assert_eq!(valid.common.n, 2);
    assert!(valid.common.stream && valid.common.include_usage);
    assert_eq!(valid.common.sampling.logit_bias, vec![(17, -100.0), (42, 2.5)]);
    assert_eq!(valid.common.sampling.seed, Some((-7i64) as u64));
    assert_eq!(valid.common.service_tier, Some(ServiceTier::Flex));
    assert_eq!(valid.logprobs, Some(3));
    assert!(!valid.parallel_tool_calls);
    assert_eq!(valid.tool_choice.function_name(), Some("lookup"));
    assert!(matches!(valid.response_format, ResponseFormat::JsonSchema { .. }));
    assert_eq!(valid.reasoning_effort, Some(ReasoningEffort::Low));
    match &valid.messages[1].content {
        Some(Content::Parts(parts)) => assert!(matches!(parts[2], ContentPart::VideoUrl { .. })),
        other => panic!("{other:?}"),
    }
}

#[test]
fn chat_union_forms() {
    let base = |extra: Value| {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    // stop: string → [string]; array stays.
    chat_roundtrip(base(json!({"stop": "x"})), base(json!({"stop": ["x"]})));
    chat_roundtrip(
        base(json!({"stop": ["x", "y"]})),
        base(json!({"stop": ["x", "y"]})),
    );
    // tool_choice: every string form and the named form (with and without `type`).
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    for choice in ["none", "auto", "required"] {
        let v = base(json!({"tools": tools, "tool_choice": choice}));
        chat_roundtrip(v.clone(), v);
    }
    chat_roundtrip(
        base(json!({"tools": [{"function": {"name": "f"}}], "tool_choice": {"function": {"name": "f"}}})),
        base(json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "f"}}})),
    );
    // response_format: each type.
    for format in [json!({"type": "text"}), json!({"type": "json_object"})] {
        let v = base(json!({ "response_format": format }));
        chat_roundtrip(v.clone(), v);
    }
    // reasoning_effort and service_tier: every value.
    for effort in ["none", "minimal", "low", "medium", "high", "xhigh", "max"] {
        let v = base(json!({ "reasoning_effort": effort }));
        chat_roundtrip(v.clone(), v);
    }
    // `over-limit` only appears in responses (refused in requests, see api_invalid.rs); `auto` resolves to
    // `default` in responses.
    for (tier, reported) in [
        ("auto", "default"),
        ("default", "default"),
        ("flex", "flex"),
        ("no-limit", "no-limit"),
    ] {
        let v = base(json!({ "service_tier": tier }));
        let parsed = chat_roundtrip(v.clone(), v);
        let valid = validate_chat(parsed, &spec()).unwrap();
        assert_eq!(
            serde_json::to_value(valid.common.response_tier()).unwrap(),
            reported
        );
    }
    // Assistant tool calls without `type` get it; content as text parts only.
    chat_roundtrip(
        base(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]}]}),
        ),
        base(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]}]}),
        ),
    );
    // Explicit nulls are "absent".
    chat_roundtrip(
        base(json!({"temperature": null, "stop": null, "tools": null, "tool_choice": null, "n": null})),
        base(json!({})),
    );
}

#[test]
fn completion_request_with_every_field_and_prompt_form() {
    let full = json!({
        "model": "m",
        "prompt": ["Once upon", "In a"],
        "stream": true,
        "stream_options": {"include_usage": false},
        "max_tokens": 20,
        "temperature": 0,
        "top_p": 0.5,
        "n": 3,
        "logprobs": 5,
        "echo": true,
        "stop": ["."],
        "presence_penalty": 1,
        "frequency_penalty": 2,
        "logit_bias": {"0": 100},
        "user": "u",
        "extra_body": {},
        "service_tier": "auto",
        "seed": 42,
        "best_of": 1,
        "suffix": ""
    });
    let parsed = completion_roundtrip(full.clone(), full);
    let valid = validate_completion(parsed, &spec()).unwrap();
    assert_eq!((valid.common.n, valid.logprobs, valid.echo), (3, Some(5), true));
    assert_eq!(valid.common.sampling.temperature, 0.0);
    assert!(!valid.common.include_usage);

    let base = |prompt: Value| json!({"model": "m", "prompt": prompt});
    let p = completion_roundtrip(base(json!("text")), base(json!(["text"])));
    assert_eq!(p.prompt, Prompt::Texts(vec!["text".into()]));
    completion_roundtrip(base(json!(["a", "b"])), base(json!(["a", "b"])));
    let p = completion_roundtrip(base(json!([1, 2, 3])), base(json!([[1, 2, 3]])));
    assert_eq!(p.prompt, Prompt::Tokens(vec![vec![1, 2, 3]]));
    completion_roundtrip(base(json!([[1, 2], [3]])), base(json!([[1, 2], [3]])));
    // stop as a single string.
    completion_roundtrip(
        json!({"model": "m", "prompt": "x", "stop": "\n"}),
        json!({"model": "m", "prompt": ["x"], "stop": ["\n"]}),
    );
}

#[test]
fn call_options_carry_ai_project_id() {
    let options: CallOptions = serde_json::from_value(json!({"ai_project_id": "proj-1"})).unwrap();
    assert_eq!(options.ai_project_id.as_deref(), Some("proj-1"));
    assert_eq!(
        serde_json::to_value(&options).unwrap(),
        json!({"ai_project_id": "proj-1"})
    );
    assert!(serde_json::from_value::<CallOptions>(json!({"project": "x"})).is_err());
}
