//! A table of invalid requests: each gives the status, `param` and `code` it must be refused with.
#![cfg(not(target_arch = "wasm32"))]

use kiln::api::{ModelSpec, chat_request, completion_request};
use serde_json::{Value, json};

fn spec() -> ModelSpec {
    ModelSpec {
        id: "m".into(),
        context_length: 64,
        vocab_size: 100,
        images: false,
        video: false,
    }
}

fn chat(extra: Value) -> Value {
    let mut base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    base.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    base
}

fn completion(extra: Value) -> Value {
    let mut base = json!({"model": "m", "prompt": "hi"});
    base.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    base
}

fn msgs(messages: Value) -> Value {
    chat(json!({ "messages": messages }))
}

enum Endpoint {
    Chat,
    Completion,
}
use Endpoint::*;

#[rustfmt::skip]
fn table() -> Vec<(Endpoint, Value, u16, Option<&'static str>, &'static str)> {
    vec![
        // Sampling ranges, both endpoints.
        (Chat, chat(json!({"temperature": 2.5})), 422, Some("temperature"), "invalid_value"),
        (Chat, chat(json!({"temperature": -0.1})), 422, Some("temperature"), "invalid_value"),
        (Completion, completion(json!({"temperature": 3})), 422, Some("temperature"), "invalid_value"),
        (Chat, chat(json!({"top_p": 0})), 422, Some("top_p"), "invalid_value"),
        (Chat, chat(json!({"top_p": 1.01})), 422, Some("top_p"), "invalid_value"),
        (Completion, completion(json!({"top_p": -1})), 422, Some("top_p"), "invalid_value"),
        (Chat, chat(json!({"presence_penalty": 2.1})), 422, Some("presence_penalty"), "invalid_value"),
        (Chat, chat(json!({"presence_penalty": -2.5})), 422, Some("presence_penalty"), "invalid_value"),
        (Completion, completion(json!({"frequency_penalty": 9})), 422, Some("frequency_penalty"), "invalid_value"),
        (Chat, chat(json!({"frequency_penalty": -3})), 422, Some("frequency_penalty"), "invalid_value"),
        (Chat, chat(json!({"temperature": "hot"})), 422, Some("temperature"), "invalid_type"),
        // logit_bias.
        (Chat, chat(json!({"logit_bias": {"5": 101}})), 422, Some("logit_bias"), "invalid_value"),
        (Chat, chat(json!({"logit_bias": {"5": -100.5}})), 422, Some("logit_bias"), "invalid_value"),
        (Chat, chat(json!({"logit_bias": {"100": 1}})), 422, Some("logit_bias"), "invalid_value"),
        (Completion, completion(json!({"logit_bias": {"abc": 1}})), 422, Some("logit_bias"), "invalid_value"),
        (Completion, completion(json!({"logit_bias": {"-1": 1}})), 422, Some("logit_bias"), "invalid_value"),
        (Chat, chat(json!({"logit_bias": {"5": "x"}})), 422, Some("logit_bias.5"), "invalid_type"),
        // n.
        (Chat, chat(json!({"n": 0})), 422, Some("n"), "invalid_value"),
        (Chat, chat(json!({"n": 17})), 422, Some("n"), "invalid_value"),
        (Completion, completion(json!({"n": -1})), 422, Some("n"), "invalid_value"),
        (Completion, completion(json!({"n": 1.5})), 422, Some("n"), "invalid_type"),
        // stop.
        (Chat, chat(json!({"stop": ["a", "b", "c", "d", "e"]})), 422, Some("stop"), "invalid_value"),
        (Chat, chat(json!({"stop": ""})), 422, Some("stop[0]"), "invalid_value"),
        (Completion, completion(json!({"stop": ["a", ""]})), 422, Some("stop[1]"), "invalid_value"),
        (Completion, completion(json!({"stop": 5})), 422, Some("stop"), "invalid_type"),
        (Chat, chat(json!({"stop": [1]})), 422, Some("stop[0]"), "invalid_type"),
        // Token bounds and context.
        (Chat, chat(json!({"max_tokens": 0})), 422, Some("max_tokens"), "invalid_value"),
        (Chat, chat(json!({"max_completion_tokens": -5})), 422, Some("max_completion_tokens"), "invalid_value"),
        (Completion, completion(json!({"max_tokens": 0})), 422, Some("max_tokens"), "invalid_value"),
        (Completion, json!({"model": "m", "prompt": [1, 2, 3], "max_tokens": 62}), 400, Some("prompt[0]"), "context_length_exceeded"),
        (Completion, json!({"model": "m", "prompt": [[1], (0..64).collect::<Vec<u32>>()]}), 400, Some("prompt[1]"), "context_length_exceeded"),
        // logprobs.
        (Completion, completion(json!({"logprobs": 6})), 422, Some("logprobs"), "invalid_value"),
        (Completion, completion(json!({"logprobs": -1})), 422, Some("logprobs"), "invalid_value"),
        (Completion, completion(json!({"logprobs": true})), 422, Some("logprobs"), "invalid_type"),
        (Chat, chat(json!({"logprobs": true, "top_logprobs": 21})), 422, Some("top_logprobs"), "invalid_value"),
        (Chat, chat(json!({"logprobs": true, "top_logprobs": -1})), 422, Some("top_logprobs"), "invalid_value"),
        (Chat, chat(json!({"top_logprobs": 3})), 422, Some("top_logprobs"), "invalid_value"),
        (Chat, chat(json!({"logprobs": false, "top_logprobs": 3})), 422, Some("top_logprobs"), "invalid_value"),
        (Chat, chat(json!({"logprobs": 5})), 422, Some("logprobs"), "invalid_type"),
        // Prompts.
        (Completion, json!({"model": "m", "prompt": []}), 422, Some("prompt"), "invalid_value"),
        (Completion, json!({"model": "m", "prompt": [[]]}), 422, Some("prompt[0]"), "invalid_value"),
        (Completion, json!({"model": "m", "prompt": [1, 100]}), 422, Some("prompt[0]"), "invalid_value"),
        (Completion, json!({"model": "m", "prompt": ["a", 1]}), 422, Some("prompt"), "invalid_type"),
        (Completion, json!({"model": "m", "prompt": [-1]}), 422, Some("prompt[0]"), "invalid_type"),
        (Completion, json!({"model": "m", "prompt": {"text": "x"}}), 422, Some("prompt"), "invalid_type"),
        (Completion, json!({"model": "m"}), 422, Some("prompt"), "missing_required_parameter"),
        // Messages.
        (Chat, msgs(json!([])), 422, Some("messages"), "invalid_value"),
        (Chat, json!({"model": "m"}), 422, Some("messages"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "developer", "content": "x"}])), 422, Some("messages[0].role"), "invalid_type"),
        (Chat, msgs(json!([{"content": "x"}])), 422, Some("messages[0].role"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "user"}])), 422, Some("messages[0].content"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "user", "content": "x"}, {"role": "tool", "content": "42"}])), 422, Some("messages[1].tool_call_id"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "user", "content": "x", "tool_call_id": "c"}])), 422, Some("messages[0].tool_call_id"), "invalid_value"),
        (Chat, msgs(json!([{"role": "user", "content": "x", "tool_calls": []}])), 422, Some("messages[0].tool_calls"), "invalid_value"),
        (Chat, msgs(json!([{"role": "system", "content": "x", "reasoning_content": "r"}])), 422, Some("messages[0].reasoning_content"), "invalid_value"),
        (Chat, msgs(json!([{"role": "user", "content": "x", "refusal": "no"}])), 422, Some("messages[0].refusal"), "invalid_value"),
        (Chat, msgs(json!([{"role": "assistant"}])), 422, Some("messages[0].content"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "user", "content": []}])), 422, Some("messages[0].content"), "invalid_value"),
        (Chat, msgs(json!([{"role": "user", "content": 7}])), 422, Some("messages[0].content"), "invalid_type"),
        (Chat, msgs(json!([{"role": "user", "content": [{"type": "audio", "data": "x"}]}])), 422, Some("messages[0].content[0].type"), "invalid_type"),
        (Chat, msgs(json!([{"role": "user", "content": [{"type": "text"}]}])), 422, Some("messages[0].content[0].text"), "missing_required_parameter"),
        (Chat, msgs(json!([{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}])), 400, Some("messages[1].content[1].image_url"), "unsupported_content"),
        (Chat, msgs(json!([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}]}])), 400, Some("messages[0].content[0].video_url"), "unsupported_content"),
        (Chat, msgs(json!([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])), 422, Some("messages[0].content[0].image_url"), "invalid_value"),
        (Chat, msgs(json!([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bad name", "arguments": "{}"}}]}])), 422, Some("messages[0].tool_calls[0].function.name"), "invalid_value"),
        (Chat, msgs(json!([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}])), 422, Some("messages[0].tool_calls[0].function.arguments"), "missing_required_parameter"),
        // Tools and tool_choice.
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": "a.b"}}]})), 422, Some("tools[0].function.name"), "invalid_value"),
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": "x".repeat(65)}}]})), 422, Some("tools[0].function.name"), "invalid_value"),
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": ""}}]})), 422, Some("tools[0].function.name"), "invalid_value"),
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})), 422, Some("tools[1].function.name"), "invalid_value"),
        (Chat, chat(json!({"tools": [{"type": "retrieval", "function": {"name": "f"}}]})), 422, Some("tools[0].type"), "invalid_type"),
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]})), 422, Some("tools[0].function.parameters"), "invalid_type"),
        (Chat, chat(json!({"tool_choice": "sometimes"})), 422, Some("tool_choice"), "invalid_type"),
        (Chat, chat(json!({"tool_choice": "required"})), 422, Some("tool_choice"), "invalid_value"),
        (Chat, chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})), 422, Some("tool_choice.function.name"), "invalid_value"),
        (Chat, chat(json!({"tool_choice": {"type": "function"}})), 422, Some("tool_choice.function"), "missing_required_parameter"),
        // response_format.
        (Chat, chat(json!({"response_format": {"type": "xml"}})), 422, Some("response_format.type"), "invalid_type"),
        (Chat, chat(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})), 422, Some("response_format.json_schema.name"), "missing_required_parameter"),
        (Chat, chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}})), 422, Some("response_format.json_schema.schema"), "missing_required_parameter"),
        (Chat, chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}})), 422, Some("response_format.json_schema.name"), "invalid_value"),
        (Chat, chat(json!({"response_format": {"type": "json_schema"}})), 422, Some("response_format.json_schema"), "missing_required_parameter"),
        // Enums.
        (Chat, chat(json!({"reasoning_effort": "extreme"})), 422, Some("reasoning_effort"), "invalid_type"),
        (Chat, chat(json!({"service_tier": "priority"})), 422, Some("service_tier"), "invalid_type"),
        (Chat, chat(json!({"service_tier": "over-limit"})), 422, Some("service_tier"), "invalid_value"),
        (Completion, completion(json!({"service_tier": 1})), 422, Some("service_tier"), "invalid_type"),
        // Streaming.
        (Chat, chat(json!({"stream_options": {"include_usage": true}})), 422, Some("stream_options"), "invalid_value"),
        (Completion, completion(json!({"stream": false, "stream_options": {"include_usage": true}})), 422, Some("stream_options"), "invalid_value"),
        (Chat, chat(json!({"stream": true, "stream_options": {"include_usage": 1}})), 422, Some("stream_options.include_usage"), "invalid_type"),
        (Chat, chat(json!({"stream": "yes"})), 422, Some("stream"), "invalid_type"),
        // Model and unknown or unsupported fields.
        (Chat, chat(json!({"model": "gpt-4o"})), 404, Some("model"), "model_not_found"),
        (Completion, completion(json!({"model": "other"})), 404, Some("model"), "model_not_found"),
        (Chat, chat(json!({"model": 3})), 422, Some("model"), "invalid_type"),
        (Chat, chat(json!({"temprature": 1})), 422, Some("temprature"), "unknown_parameter"),
        (Completion, completion(json!({"messages": []})), 422, Some("messages"), "unknown_parameter"),
        (Chat, chat(json!({"audio": {"voice": "alloy", "format": "mp3"}})), 400, Some("audio"), "unsupported_parameter"),
        (Chat, chat(json!({"functions": [{"name": "f"}]})), 400, Some("functions"), "unsupported_parameter"),
        (Chat, chat(json!({"modalities": ["text", "audio"]})), 400, Some("modalities"), "unsupported_parameter"),
        (Completion, completion(json!({"suffix": "end"})), 400, Some("suffix"), "unsupported_parameter"),
        (Completion, completion(json!({"best_of": 3})), 400, Some("best_of"), "unsupported_parameter"),
        (Chat, chat(json!({"extra_body": 5})), 422, Some("extra_body"), "invalid_type"),
    ]
}

#[test]
fn invalid_requests_are_refused_with_status_param_and_code() {
    let table = table();
    assert!(table.len() >= 60, "{} rows", table.len());
    let mut failures = Vec::new();
    for (i, (endpoint, body, status, param, code)) in table.into_iter().enumerate() {
        let result = match endpoint {
            Chat => chat_request(body.clone(), &spec()).map(|_| ()),
            Completion => completion_request(body.clone(), &spec()).map(|_| ()),
        };
        match result {
            Ok(()) => failures.push(format!("row {i}: accepted {body}")),
            Err(e) => {
                let wire = serde_json::to_value(e.body()).unwrap();
                let got = (e.status(), e.param.as_deref(), e.code);
                if got != (status, param, code) || wire["error"]["type"] != "invalid_request_error" {
                    failures.push(format!(
                        "row {i}: {body}\n  want {:?}\n  got  {got:?}: {}",
                        (status, param, code),
                        e.message
                    ));
                }
                if let Some(p) = param {
                    // The message names the field it is about.
                    let leaf = p.rsplit(['.', '[']).next().unwrap().trim_end_matches(']');
                    if !e.message.contains(leaf) && !e.message.contains(p) {
                        failures.push(format!("row {i}: message {:?} does not name `{p}`", e.message));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
