//! Calls as the families' own templates write them in history (the assistant-turn lines of llama.cpp's
//! `models/templates/*.jinja`, copied), rendered with kiln's renderer, read back by the parser: the model
//! learnt its syntax from exactly this text.

use serde_json::json;

use super::super::{ToolCallParser, ToolEvent, ToolFormat};
use crate::tokenizer::{ChatTemplate, TemplateInputs};

/// Qwen-Qwen3-0.6B.jinja (the same lines as Qwen2.5's and QwQ's).
const QWEN3: &str = r#"{%- for message in messages %}{{- message.content }}
{%- for tool_call in message.tool_calls %}
    {%- if (loop.first and message.content) or (not loop.first) %}{{- '\n' }}{%- endif %}
    {%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
    {{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
    {%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
    {{- '}\n</tool_call>' }}
{%- endfor %}{%- endfor %}"#;

/// NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja
const HERMES2: &str = r#"{%- for message in messages %}
    {%- for tool_call in message.tool_calls %}
       {{- '
<tool_call>
' }}           {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}{{- '"name": "' }}{{- tool_call.name }}{{- '"' }}{{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments|tojson }}{%- endif %}
            {%- endif %}
             {{- '}' }}
            {{- '
</tool_call>' }}
    {%- endfor %}{%- endfor %}"#;

/// meta-llama-Llama-3.1-8B-Instruct.jinja (one call per message).
const LLAMA31: &str = r#"{%- for message in messages %}
        {%- set tool_call = message.tool_calls[0].function %}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}{%- endfor %}"#;

/// mistralai-Mistral-Nemo-Instruct-2407.jinja
const NEMO: &str = r#"{%- for message in messages %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}{{- ", " }}{%- else %}{{- "]" }}{%- endif %}
        {%- endfor %}{%- endfor %}"#;

/// Mistral-Small-3.2-24B-Instruct-2506.jinja
const SMALL32: &str = r#"{%- for message in messages %}
            {%- for tool_call in message.tool_calls %}
                {{- '[TOOL_CALLS]' + tool_call.function.name }}
                {{- '[CALL_ID]' + tool_call.id }}
                {{- '[ARGS]' + tool_call['function']['arguments']|tojson }}
            {%- endfor %}{%- endfor %}"#;

/// unsloth-mistral-Devstral-Small-2507.jinja
const DEVSTRAL: &str = r#"{%- for message in messages %}{{- message['content'] }}
            {%- for tool in message['tool_calls'] %}
                {%- set arguments = tool['function']['arguments'] %}
                {%- if arguments is not string %}{%- set arguments = arguments|tojson %}{%- endif %}
                {{- "[TOOL_CALLS]" + tool['function']['name'] + "[ARGS]" + arguments }}
            {%- endfor %}{%- endfor %}"#;

fn render(source: &str, content: &str, calls: usize) -> String {
    let call = |i: usize| {
        let (name, args) = match i {
            0 => (
                "get_weather",
                json!({"location": "Paris, \"FR\"", "days": [1, 2], "unit": null}),
            ),
            _ => ("search", json!({"q": "été </tool_call> [ARGS]", "n": {"max": 3}})),
        };
        json!({"id": format!("abcdefgh{i}"), "type": "function", "function": {"name": name, "arguments": args}})
    };
    let message = json!({
        "role": "assistant",
        "content": content,
        "tool_calls": (0..calls).map(call).collect::<Vec<_>>(),
    });
    let inputs = TemplateInputs {
        messages: vec![message],
        ..TemplateInputs::default()
    };
    ChatTemplate::new(source)
        .expect("template compiles")
        .render(&inputs)
        .expect("template renders")
}

fn parse(format: ToolFormat, text: &str) -> Vec<ToolEvent> {
    let mut p = ToolCallParser::new(format, vec!["get_weather".into(), "search".into()]);
    // Token-sized pieces, as generation delivers them.
    let chars: Vec<char> = text.chars().collect();
    let mut events: Vec<ToolEvent> = chars
        .chunks(3)
        .flat_map(|c| p.push(&c.iter().collect::<String>()))
        .collect();
    events.extend(p.finish().expect("the parser reads the template's calls"));
    events
}

/// The calls read back: (name, arguments) per call, and the content.
fn read_back(events: &[ToolEvent]) -> (Vec<(String, String)>, String) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut content = String::new();
    for e in events {
        match e {
            ToolEvent::Content(t) => content.push_str(t),
            ToolEvent::Start { index, name } => {
                assert_eq!(*index, calls.len());
                calls.push((name.clone(), String::new()));
            }
            ToolEvent::Arguments { index, fragment } => calls[*index].1.push_str(fragment),
        }
    }
    (calls, content)
}

#[test]
fn templates_calls_read_back() {
    let weather = r#"{"location": "Paris, \"FR\"", "days": [1, 2], "unit": null}"#;
    let search = r#"{"q": "été </tool_call> [ARGS]", "n": {"max": 3}}"#;
    let both = [
        ("get_weather".to_owned(), weather.to_owned()),
        ("search".to_owned(), search.to_owned()),
    ];
    let cases = [
        (QWEN3, ToolFormat::Hermes, "Let me check.", 2),
        (HERMES2, ToolFormat::Hermes, "", 2),
        (LLAMA31, ToolFormat::Llama3Json, "", 1),
        (NEMO, ToolFormat::Mistral, "", 2),
        (SMALL32, ToolFormat::MistralArgs, "", 2),
        (DEVSTRAL, ToolFormat::MistralArgs, "Sure.", 2),
    ];
    for (source, format, content, n) in cases {
        let text = render(source, content, n);
        let (calls, got_content) = read_back(&parse(format, &text));
        assert_eq!(calls, both[..n].to_vec(), "{format:?}: {text:?}");
        assert_eq!(got_content, content, "{format:?}: {text:?}");
        // The arguments are the JSON the template wrote, and parse to what was rendered.
        for (_, args) in &calls {
            assert!(text.contains(args.as_str()));
            assert!(serde_json::from_str::<serde_json::Value>(args).is_ok_and(|v| v.is_object()));
        }
    }
}
