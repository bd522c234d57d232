//! Tool calling end to end on the CPU backend, with the tiny random-weight Qwen3 over the real Qwen3
//! tokenizer and chat template (Hermes-style `<tool_call>` calls; see `tiny_qwen3/`):
//! - `tool_choice: "required"` and a named function give calls whose arguments validate against the tool's
//!   `parameters` schema, for 20 seeds of a model that knows nothing (the grammar does the work), with
//!   `finish_reason: "tool_calls"`, `call_…` ids and `content: null`;
//! - streamed `tool_calls` deltas (index, id, type and name first, then argument fragments) reassemble to
//!   the non-streamed call;
//! - the other families (Llama 3.1 JSON, Mistral Nemo `[TOOL_CALLS]`, Mistral Small 3.2 `[ARGS]`) through
//!   their real templates: forced calls parse back and validate;
//! - with `tool_choice: "auto"` plain text stays content;
//! - assistant messages with `tool_calls` and `tool` messages with `tool_call_id` render in the history;
//! - a model whose template has no tool syntax (SmolLM2, the default model) gets the generic format: the
//!   tools in its system turn, a named call forced and valid, `auto` answering or calling, the history of
//!   calls and results rendered as plain turns.
#![cfg(not(target_arch = "wasm32"))]

mod data;
#[allow(dead_code)]
mod real;
mod schema;
mod tiny_qwen3;

use burn::tensor::Device;
use kiln::api::chat_request;
use kiln::api::response::{ChatCompletion, FinishReason};
use kiln::engine::LoadedModel;
use kiln::engine::protocol::prompt;
use pollster::block_on;
use serde_json::{Value, json};
use tiny_qwen3::{tiny_qwen3, tiny_qwen3_with_template};

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}
        }, "required": ["city", "unit", "days"], "additionalProperties": false}}})
}

fn time() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time", "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"], "additionalProperties": false}}})
}

fn body(extra: Value) -> Value {
    let mut b = json!({
        "model": "qwen3-tiny",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather(), time()],
        "reasoning_effort": "none",
        "max_tokens": 120,
    });
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b
}

fn chat(m: &LoadedModel, b: Value) -> ChatCompletion {
    let out = block_on(
        m.chat(chat_request(b, &m.spec()).expect("valid"))
            .expect("served")
            .collect(),
    )
    .expect("generated");
    schema::assert_valid("CreateChatCompletionResponse", &out);
    out
}

fn schema_of(tool: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(&tool["function"]["parameters"]).unwrap()
}

fn assert_id(id: &str) {
    assert!(
        id.len() == 29 && id.starts_with("call_") && id[5..].chars().all(|c| c.is_ascii_alphanumeric()),
        "{id}"
    );
}

#[test]
fn required_and_named_calls_validate_for_20_seeds() {
    let m = tiny_qwen3();
    let validators = [
        ("get_weather", schema_of(&weather())),
        ("get_time", schema_of(&time())),
    ];
    for seed in 0..20 {
        for choice in [
            json!("required"),
            json!({"type": "function", "function": {"name": "get_time"}}),
        ] {
            let named = choice.is_object();
            let out = chat(
                &m,
                body(
                    json!({"tool_choice": choice, "temperature": 1, "seed": seed, "parallel_tool_calls": false}),
                ),
            );
            let c = &out.choices[0];
            assert_eq!(
                c.finish_reason,
                FinishReason::ToolCalls,
                "seed {seed}: {:?}",
                c.message
            );
            assert_eq!(c.message.content, None);
            let calls = c.message.tool_calls.as_ref().expect("tool_calls");
            assert_eq!(calls.len(), 1, "seed {seed}: parallel_tool_calls false");
            let call = &calls[0];
            assert_id(&call.id);
            if named {
                assert_eq!(call.function.name, "get_time");
            }
            let (_, v) = validators
                .iter()
                .find(|(n, _)| *n == call.function.name)
                .expect("a known tool");
            let args: Value = serde_json::from_str(&call.function.arguments)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}: {}", call.function.arguments));
            let errors: Vec<String> = v.iter_errors(&args).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "seed {seed}: {args}: {errors:?}");
        }
    }
}

#[test]
fn streamed_tool_call_deltas_reassemble_to_the_full_call() {
    let m = tiny_qwen3();
    let extra = json!({"tool_choice": "required", "temperature": 0.9, "seed": 11});
    let full = chat(&m, body(extra.clone()));
    let mut b = body(extra);
    b["stream"] = json!(true);
    let mut stream = m.chat(chat_request(b, &m.spec()).unwrap()).unwrap();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = None;
    let mut fragments = 0;
    while let Some(chunk) = block_on(stream.next()) {
        let chunk = chunk.unwrap();
        schema::assert_valid("CreateChatCompletionStreamResponse", &chunk);
        for c in chunk.choices {
            finish = c.finish_reason.or(finish);
            for d in c.delta.tool_calls.into_iter().flatten() {
                let f = d.function.unwrap();
                match d.id {
                    Some(id) => {
                        assert_eq!(d.index as usize, calls.len(), "a new call takes the next index");
                        assert_eq!(
                            f.arguments.as_deref(),
                            Some(""),
                            "the first delta of a call has empty arguments"
                        );
                        calls.push((
                            id,
                            f.name.expect("the first delta names the function"),
                            String::new(),
                        ));
                    }
                    None => {
                        assert!(
                            f.name.is_none() && d.kind.is_none(),
                            "later deltas carry only arguments"
                        );
                        fragments += 1;
                        calls[d.index as usize].2.push_str(&f.arguments.unwrap());
                    }
                }
            }
        }
    }
    assert_eq!(finish, Some(FinishReason::ToolCalls));
    assert!(fragments >= 2, "arguments arrive in pieces");
    let expected: Vec<(String, String)> = full.choices[0]
        .message
        .tool_calls
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.function.name.clone(), c.function.arguments.clone()))
        .collect();
    let streamed: Vec<(String, String)> = calls
        .iter()
        .map(|(id, n, a)| {
            assert_id(id);
            (n.clone(), a.clone())
        })
        .collect();
    assert_eq!(streamed, expected);
}

#[test]
fn auto_keeps_text_as_content_and_history_with_calls_renders() {
    let m = tiny_qwen3();
    // Plain text: no call opener, so everything is content and the finish reason is `length`.
    let ban_call = json!({"151657": -100});
    let out = chat(
        &m,
        body(json!({"tool_choice": "auto", "temperature": 0, "max_tokens": 8, "logit_bias": ban_call})),
    );
    assert_eq!(out.choices[0].finish_reason, FinishReason::Length);
    assert!(out.choices[0].message.tool_calls.is_none());
    assert!(
        !out.choices[0]
            .message
            .content
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    // A conversation with a call and its result in the history renders through the template.
    let history = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp\": 21}"},
    ]);
    let req = chat_request(
        json!({"model": "qwen3-tiny", "messages": history, "tools": [weather()]}),
        &m.spec(),
    )
    .unwrap();
    let (text, _) = prompt::chat_prompt(&m.tokenizer, &req.messages).unwrap();
    assert!(
        text.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\""),
        "{text}"
    );
    assert!(
        text.contains("<tool_response>\n{\"temp\": 21}\n</tool_response>"),
        "{text}"
    );
    let history_body = json!({"model": "qwen3-tiny", "messages": history, "tools": [weather()], "max_tokens": 4, "temperature": 0});
    let out = chat(&m, history_body.clone());
    assert_eq!(
        out.choices[0].message.role,
        kiln::api::response::AssistantRole::Assistant
    );
    // The same conversation again reuses its KV state (the tool format's prompt, calls and results), and
    // answers as before.
    let again = chat(&m, history_body);
    assert_eq!(
        again.usage.prompt_tokens_details.cached_tokens,
        Some(again.usage.prompt_tokens - 1)
    );
    assert_eq!(again.choices[0].message.content, out.choices[0].message.content);
}

#[test]
fn a_template_without_tool_syntax_gets_the_generic_format() {
    let m = LoadedModel::from_gguf("smollm2-135m", &data::read(real::SMOLLM2), &Device::flex()).unwrap();
    let question = json!([{"role": "user", "content": "What is the weather in Paris? Use the tool."}]);
    let v = schema_of(&weather());
    // Forced: a named call and `required`, valid against the schema, in the non-streamed and streamed shapes.
    for choice in [
        json!({"type": "function", "function": {"name": "get_weather"}}),
        json!("required"),
    ] {
        let out = chat(
            &m,
            json!({"model": "smollm2-135m", "messages": question, "tools": [weather(), time()],
                   "tool_choice": choice, "parallel_tool_calls": false, "max_tokens": 80, "temperature": 0}),
        );
        let c = &out.choices[0];
        assert_eq!(c.finish_reason, FinishReason::ToolCalls, "{choice}: {c:?}");
        let calls = c.message.tool_calls.as_ref().expect("calls");
        assert_id(&calls[0].id);
        let args: Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
        if calls[0].function.name == "get_weather" {
            assert!(v.is_valid(&args), "{args}");
        }
        eprintln!(
            "SmolLM2 generic tools, {choice}: {} {args}",
            calls[0].function.name
        );
    }
    // `auto`: the model may answer or call; either way the response is well formed (a malformed call is
    // content, not an error).
    let out = chat(
        &m,
        json!({"model": "smollm2-135m", "messages": question, "tools": [weather()], "max_tokens": 60,
               "temperature": 0}),
    );
    let c = &out.choices[0];
    match &c.message.tool_calls {
        Some(calls) => assert_eq!(c.finish_reason, FinishReason::ToolCalls, "{calls:?}"),
        None => assert!(c.message.content.is_some()),
    }
    // The prompt: the tools in the system turn; calls and results of the history as plain turns.
    let history = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp\": 21}"},
    ]);
    let out = chat(
        &m,
        json!({"model": "smollm2-135m", "messages": history, "tools": [weather()], "max_tokens": 24, "temperature": 0}),
    );
    eprintln!(
        "SmolLM2 after a tool result: {:?}",
        out.choices[0].message.content
    );
    assert!(
        out.usage.prompt_tokens > 200,
        "the tools text is in the prompt: {} tokens",
        out.usage.prompt_tokens
    );
}

#[test]
fn llama_and_mistral_families_force_parse_and_validate() {
    let v = schema_of(&weather());
    for template in [
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    ] {
        let m = tiny_qwen3_with_template(template);
        for seed in 0..5 {
            let b = json!({
                "model": "qwen3-tiny",
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [weather()],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "max_tokens": 120, "temperature": 1, "seed": seed,
            });
            let out = chat(&m, b);
            let c = &out.choices[0];
            assert_eq!(
                c.finish_reason,
                FinishReason::ToolCalls,
                "{template} seed {seed}: {:?}",
                c.message
            );
            let call = &c.message.tool_calls.as_ref().unwrap()[0];
            assert_eq!(call.function.name, "get_weather");
            let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
            assert!(v.is_valid(&args), "{template} seed {seed}: {args}");
        }
    }
}

#[test]
fn mistral_templates_get_nine_character_ids_in_the_history() {
    let m = tiny_qwen3_with_template("mistralai-Mistral-Nemo-Instruct-2407.jinja");
    let history = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abcdefghijklmnopqrstuvwx", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_abcdefghijklmnopqrstuvwx", "content": "{\"temp\": 21}"},
    ]);
    // The template raises on OpenAI's ids; kiln maps them (the same way for the call and its result).
    let out = chat(
        &m,
        json!({"model": "qwen3-tiny", "messages": history, "tools": [weather()], "max_tokens": 3, "temperature": 0}),
    );
    assert_eq!(out.usage.completion_tokens, 3);
}

/// The template's syntax is found once, at load (and again when `chatTemplate` replaces the template), and a
/// request is planned from it by a pure function: the same request plans to the same prompt, one text
/// processor and (forced) one constraint per choice.
#[test]
fn requests_are_planned_from_the_format_found_at_load() {
    use kiln::engine::protocol::plan;
    use kiln::engine::protocol::reasoning::ReasoningSyntax;
    use kiln::engine::protocol::tools::ToolFormat;
    let m = tiny_qwen3();
    let f = m.chat_format();
    assert!(f.template);
    assert_eq!(
        (f.tools, f.reasoning.clone(), f.short_call_ids()),
        (Some(ToolFormat::Hermes), Some(ReasoningSyntax::think()), false)
    );
    for (template, tools) in [
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3Json),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::Mistral),
        (
            "Mistral-Small-3.2-24B-Instruct-2506.jinja",
            ToolFormat::MistralArgs,
        ),
    ] {
        let f = tiny_qwen3_with_template(template).chat_format().clone();
        assert_eq!(
            (f.tools, f.reasoning.is_some(), f.short_call_ids()),
            (Some(tools), false, tools != ToolFormat::Llama3Json),
            "{template}"
        );
    }
    // `chatTemplate` at load: the format follows the new template.
    let plain = tiny_qwen3()
        .with_chat_template("{% for m in messages %}{{ m.content }}\n{% endfor %}")
        .unwrap();
    assert_eq!(
        (plain.chat_format().tools, plain.chat_format().reasoning.clone()),
        (None, None)
    );

    let forced = || {
        chat_request(
            body(json!({"n": 3, "tool_choice": "required", "temperature": 1})),
            &m.spec(),
        )
        .unwrap()
    };
    let (a, b) = (
        plan::chat(&m.format(), forced(), &[]).unwrap(),
        plan::chat(&m.format(), forced(), &[]).unwrap(),
    );
    assert_eq!((a.text(), a.prompt().ids()), (b.text(), b.prompt().ids()));
    assert_eq!((a.choices(), a.prompt().params().n), (3, 3));
    assert!(a.prompt().is_constrained() && a.prompt().params().keep_special);
    assert!(
        a.text().contains("<tools>") && a.text().contains("get_weather"),
        "{}",
        a.text()
    );
    assert_eq!(m.tokenizer.encode(a.text(), false).unwrap(), a.prompt().ids());

    // No tools: the messages through the template as they are, nothing constrained, special tokens dropped.
    let req = chat_request(
        json!({"model": "qwen3-tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}),
        &m.spec(),
    )
    .unwrap();
    let (text, ids) = prompt::chat_prompt(&m.tokenizer, &req.messages).unwrap();
    let p = plan::chat(&m.format(), req, &[]).unwrap();
    assert_eq!((p.text(), p.prompt().ids()), (text.as_str(), ids.as_slice()));
    assert_eq!(p.prompt().params().max_new, 5);
    assert!(!p.prompt().is_constrained() && !p.prompt().params().keep_special);
    assert!(
        p.stream.include_usage,
        "a non-streaming request is the stream collected, with usage"
    );
}
