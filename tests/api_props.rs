//! Property test: parse + validate never panic, whatever JSON comes in, and every refusal is a well-formed
//! OpenAI error. 12,000 generated values per run (6,000 arbitrary documents, 6,000 valid requests with one
//! field replaced by arbitrary JSON); `fuzz/` holds a cargo-fuzz target for longer runs.
#![cfg(not(target_arch = "wasm32"))]

use kiln::api::{ApiError, ModelSpec, chat_request, completion_request};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn spec() -> ModelSpec {
    ModelSpec {
        id: "m".into(),
        context_length: 32,
        vocab_size: 50,
        images: false,
        video: false,
    }
}

/// Arbitrary JSON, biased toward the keys and values requests use so that deep paths are reached.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("model".to_owned()),
        Just("messages".to_owned()),
        Just("prompt".to_owned()),
        Just("role".to_owned()),
        Just("content".to_owned()),
        Just("type".to_owned()),
        Just("text".to_owned()),
        Just("stop".to_owned()),
        Just("tools".to_owned()),
        Just("function".to_owned()),
        Just("name".to_owned()),
        Just("tool_choice".to_owned()),
        Just("logit_bias".to_owned()),
        "[a-z_]{1,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop_oneof![
            Just("m"),
            Just("user"),
            Just("assistant"),
            Just("tool"),
            Just("system"),
            Just("text"),
            Just("image_url"),
            Just("function"),
            Just("auto"),
            Just("required"),
            Just("json_schema"),
            Just("")
        ]
        .prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn check(result: Result<(), ApiError>) {
    if let Err(e) = result {
        assert!(matches!(e.status(), 400 | 404 | 422), "{e:?}");
        assert!(!e.message.is_empty());
        let wire = serde_json::to_value(e.body()).unwrap();
        assert_eq!(wire["error"]["type"], "invalid_request_error");
        assert!(wire["error"]["code"].is_string());
    }
}

fn valid_chat() -> Value {
    json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "temperature": 0.5, "stop": ["x"], "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "auto", "logprobs": true, "top_logprobs": 2, "max_tokens": 4})
}

fn valid_completion() -> Value {
    json!({"model": "m", "prompt": [[1, 2, 3]], "logprobs": 2, "echo": true, "max_tokens": 4, "n": 2})
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_never_panics(body in json_value()) {
        check(chat_request(body.clone(), &spec()).map(|_| ()));
        check(completion_request(body, &spec()).map(|_| ()));
    }

    #[test]
    fn arbitrary_object_never_panics(body in prop::collection::btree_map("[a-z_]{1,20}", json_value(), 0..8)) {
        let body = Value::Object(body.into_iter().collect());
        check(chat_request(body.clone(), &spec()).map(|_| ()));
        check(completion_request(body, &spec()).map(|_| ()));
    }

    #[test]
    fn chat_with_one_field_replaced_never_panics(
        field in prop::sample::select(vec!["model", "messages", "temperature", "top_p", "n", "stop", "tools",
            "tool_choice", "logprobs", "top_logprobs", "max_tokens", "max_completion_tokens", "logit_bias",
            "response_format", "stream", "stream_options", "seed", "service_tier", "reasoning_effort"]),
        value in json_value(),
    ) {
        let mut body = valid_chat();
        body[field] = value;
        check(chat_request(body, &spec()).map(|_| ()));
    }

    #[test]
    fn completion_with_one_field_replaced_never_panics(
        field in prop::sample::select(vec!["model", "prompt", "temperature", "n", "stop", "logprobs", "echo",
            "max_tokens", "logit_bias", "stream", "stream_options", "best_of", "suffix", "seed"]),
        value in json_value(),
    ) {
        let mut body = valid_completion();
        body[field] = value;
        check(completion_request(body, &spec()).map(|_| ()));
    }
}

#[test]
fn the_valid_bases_validate() {
    chat_request(valid_chat(), &spec()).unwrap();
    completion_request(valid_completion(), &spec()).unwrap();
}
