//! Every response and chunk shape the api layer builds validates against OpenAI's schemas
//! (`tests/fixtures/openai-response-schemas.json`, extracted from `shared/spec/openai-openapi.json` by
//! `tests/fixtures/extract_openai_schemas.py`), so that a drift in field names, nullability or enums fails.
#![cfg(not(target_arch = "wasm32"))]

mod schema;

use kiln::api::request::{FunctionType, ServiceTier};
use kiln::api::response::*;
use schema::{assert_valid, validator};
use serde_json::{Value, json};

fn top(token: &str, logprob: f32) -> TopLogprob {
    TopLogprob {
        token: token.into(),
        logprob,
        bytes: Some(token.as_bytes().to_vec()),
    }
}

fn chat_logprobs() -> ChatLogprobs {
    ChatLogprobs {
        content: Some(vec![TokenLogprob {
            token: "Paris".into(),
            logprob: -0.01,
            bytes: Some(b"Paris".to_vec()),
            top_logprobs: vec![top("Paris", -0.01), top(" Lyon", -5.2)],
        }]),
        refusal: None,
    }
}

fn tool_call() -> ResponseToolCall {
    ResponseToolCall {
        id: response_id("call_", 7),
        kind: FunctionType::Function,
        function: ResponseFunctionCall {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        },
    }
}

fn chat_completion(choices: Vec<ChatChoice>, tier: ServiceTier) -> ChatCompletion {
    ChatCompletion {
        id: response_id("chatcmpl-", 0xdead_beef),
        object: ChatCompletionObject::ChatCompletion,
        created: 1_764_000_000,
        model: "smollm2-135m".into(),
        choices,
        usage: Usage::new(12, 5, 0, 2),
        service_tier: tier,
        system_fingerprint: "kiln-0.1.0-webgpu".into(),
    }
}

#[test]
fn chat_completions_match_openai_schema() {
    let plain = ChatChoice {
        index: 0,
        message: AssistantMessage {
            content: Some("Paris.".into()),
            ..Default::default()
        },
        finish_reason: FinishReason::Stop,
        logprobs: None,
    };
    let with_logprobs = ChatChoice {
        index: 1,
        logprobs: Some(chat_logprobs()),
        ..plain.clone()
    };
    let tools = ChatChoice {
        index: 2,
        message: AssistantMessage {
            content: None,
            tool_calls: Some(vec![tool_call()]),
            ..Default::default()
        },
        finish_reason: FinishReason::ToolCalls,
        logprobs: None,
    };
    let reasoning = ChatChoice {
        index: 3,
        message: AssistantMessage {
            content: Some("42".into()),
            reasoning_content: Some("Six times seven.".into()),
            reasoning: Some("Six times seven.".into()),
            ..Default::default()
        },
        finish_reason: FinishReason::Length,
        logprobs: None,
    };
    // `over-limit` and `no-limit` are the seed's own tiers, not OpenAI's: only the shared ones are checked.
    for tier in [ServiceTier::Auto, ServiceTier::Default, ServiceTier::Flex] {
        let response = chat_completion(
            vec![
                plain.clone(),
                with_logprobs.clone(),
                tools.clone(),
                reasoning.clone(),
            ],
            tier,
        );
        assert_valid("CreateChatCompletionResponse", &response);
    }
    let json = serde_json::to_value(chat_completion(vec![plain], ServiceTier::Default)).unwrap();
    assert_eq!(json["object"], "chat.completion");
    assert!(json["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(json["choices"][0]["message"]["refusal"], Value::Null);
    assert_eq!(json["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(json["usage"]["completion_tokens_details"]["reasoning_tokens"], 2);
    assert_eq!(json["service_tier"], "default");
}

fn chunk(choices: Vec<ChunkChoice>, usage: Option<Option<Usage>>) -> ChatCompletionChunk {
    ChatCompletionChunk {
        id: response_id("chatcmpl-", 1),
        object: ChatChunkObject::ChatCompletionChunk,
        created: 1_764_000_000,
        model: "smollm2-135m".into(),
        choices,
        usage,
        service_tier: Some(ServiceTier::Default),
        system_fingerprint: "kiln-0.1.0-webgpu".into(),
    }
}

#[test]
fn chat_chunks_match_openai_schema() {
    let first = ChunkChoice {
        index: 0,
        delta: Delta {
            role: Some(AssistantRole::Assistant),
            content: Some(String::new()),
            ..Default::default()
        },
        finish_reason: None,
        logprobs: None,
    };
    let text = ChunkChoice {
        delta: Delta {
            content: Some("Par".into()),
            ..Default::default()
        },
        logprobs: Some(chat_logprobs()),
        ..first.clone()
    };
    let reasoning = ChunkChoice {
        delta: Delta {
            reasoning_content: Some("hm".into()),
            reasoning: Some("hm".into()),
            ..Default::default()
        },
        ..first.clone()
    };
    let tool_head = ChunkChoice {
        delta: Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: Some(response_id("call_", 9)),
                kind: Some(FunctionType::Function),
                function: Some(FunctionDelta {
                    name: Some("get_weather".into()),
                    arguments: Some(String::new()),
                }),
            }]),
            ..Default::default()
        },
        ..first.clone()
    };
    let tool_args = ChunkChoice {
        delta: Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: None,
                kind: None,
                function: Some(FunctionDelta {
                    name: None,
                    arguments: Some(r#"{"city":"#.into()),
                }),
            }]),
            ..Default::default()
        },
        ..first.clone()
    };
    let last = ChunkChoice {
        delta: Delta::default(),
        finish_reason: Some(FinishReason::Stop),
        ..first.clone()
    };
    for (choices, usage) in [
        (vec![first], None),
        (vec![text.clone()], Some(None)),
        (vec![reasoning], None),
        (vec![tool_head, tool_args], None),
        (vec![last], Some(None)),
        (vec![], Some(Some(Usage::new(3, 4, 0, 0)))),
    ] {
        assert_valid("CreateChatCompletionStreamResponse", &chunk(choices, usage));
    }
    let usage_chunk = serde_json::to_value(chunk(vec![], Some(Some(Usage::new(3, 4, 0, 0))))).unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["total_tokens"], 7);
    assert_eq!(
        serde_json::to_value(chunk(vec![text], Some(None))).unwrap()["usage"],
        Value::Null
    );
}

#[test]
fn completions_match_openai_schema() {
    let logprobs = CompletionLogprobs {
        tokens: vec![" Paris".into(), ".".into()],
        token_logprobs: vec![Some(-0.2), Some(-1.5)],
        top_logprobs: vec![
            Some(TopLogprobs(vec![(" Paris".into(), -0.2), (" Lyon".into(), -3.0)])),
            Some(TopLogprobs(vec![(".".into(), -1.5)])),
        ],
        text_offset: vec![0, 6],
    };
    let choice = |index, logprobs| CompletionChoice {
        index,
        text: " Paris.".into(),
        finish_reason: Some(FinishReason::Length),
        logprobs,
    };
    let full = Completion {
        id: response_id("cmpl-", 3),
        object: TextCompletionObject::TextCompletion,
        created: 1_764_000_000,
        model: "smollm2-135m".into(),
        choices: vec![choice(0, None), choice(1, Some(logprobs))],
        usage: Some(Usage::new(4, 2, 0, 0)),
        service_tier: Some(ServiceTier::Auto),
        system_fingerprint: "kiln-0.1.0-cpu".into(),
    };
    assert_valid("CreateCompletionResponse", &full);
    let json = serde_json::to_value(&full).unwrap();
    assert_eq!(json["object"], "text_completion");
    assert!(json["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(json["choices"][1]["logprobs"]["text_offset"], json!([0, 6]));
}

#[test]
fn schema_check_can_fail() {
    // A drift the check must catch: a wrong finish reason and a missing `choices`.
    let mut bad = serde_json::to_value(chat_completion(vec![], ServiceTier::Default)).unwrap();
    bad["choices"] = json!([{"index": 0, "message": {"role": "assistant", "content": "x", "refusal": null},
        "finish_reason": "done", "logprobs": null}]);
    assert!(!validator("CreateChatCompletionResponse").is_valid(&bad));
    bad.as_object_mut().unwrap().remove("choices");
    assert!(!validator("CreateChatCompletionResponse").is_valid(&bad));
}
