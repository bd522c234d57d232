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

/// Qwen3.5-4B.jinja's assistant tool calls.
const QWEN35: &str = r#"{%- for message in messages %}{{- message.content }}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if loop.first %}
                {%- if message.content|trim %}
                    {{- '\n\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- else %}
                    {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- endif %}
            {%- else %}
                {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
            {%- endif %}
            {%- if tool_call.arguments is defined %}
                {%- for args_name, args_value in tool_call.arguments|items %}
                    {{- '<parameter=' + args_name + '>\n' }}
                    {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                    {{- args_value }}
                    {{- '\n</parameter>\n' }}
                {%- endfor %}
            {%- endif %}
            {{- '</function>\n</tool_call>' }}
        {%- endfor %}{%- endfor %}"#;

/// google-gemma-4-31B-it.jinja's `format_argument` and assistant tool calls.
const GEMMA4: &str = r#"{%- macro format_argument(argument, escape_keys=True) -%}
    {%- if argument is string -%}
        {{- '<|"|>' + argument + '<|"|>' -}}
    {%- elif argument is boolean -%}
        {{- 'true' if argument else 'false' -}}
    {%- elif argument is mapping -%}
        {{- '{' -}}
        {%- set ns = namespace(found_first=false) -%}
        {%- for key, value in argument | dictsort -%}
            {%- if ns.found_first %},{% endif -%}
            {%- set ns.found_first = true -%}
            {%- if escape_keys -%}
                {{- '<|"|>' + key + '<|"|>' -}}
            {%- else -%}
                {{- key -}}
            {%- endif -%}
            :{{- format_argument(value, escape_keys=escape_keys) -}}
        {%- endfor -%}
        {{- '}' -}}
    {%- elif argument is sequence -%}
        {{- '[' -}}
        {%- for item in argument -%}
            {{- format_argument(item, escape_keys=escape_keys) -}}
            {%- if not loop.last %},{% endif -%}
        {%- endfor -%}
        {{- ']' -}}
    {%- else -%}
        {{- argument -}}
    {%- endif -%}
{%- endmacro -%}
{%- for message in messages -%}{{- message.content -}}
                {%- for tool_call in message['tool_calls'] -%}
                    {%- set function = tool_call['function'] -%}
                    {{- '<|tool_call>call:' + function['name'] + '{' -}}
                    {%- if function['arguments'] is mapping -%}
                        {%- set ns_args = namespace(found_first=false) -%}
                        {%- for key, value in function['arguments'] | dictsort -%}
                            {%- if ns_args.found_first %},{% endif -%}
                            {%- set ns_args.found_first = true -%}
                            {{- key -}}:{{- format_argument(value, escape_keys=False) -}}
                        {%- endfor -%}
                    {%- elif function['arguments'] is string -%}
                        {{- function['arguments'] -}}
                    {%- endif -%}
                    {{- '}<tool_call|>' -}}
                {%- endfor -%}{%- endfor -%}"#;

/// The formats whose arguments are not JSON: the calls read back to the arguments the template was given
/// (values the XML template writes with Python's `str`, such as `None` and `True`, are left out).
#[test]
fn converted_calls_read_back() {
    let weather = json!({"location": "Paris, \"FR\"\nline 2", "days": [1, 2], "n": 3, "opts": {"max": 3}});
    let search = json!({"q": "été </tool_call> <|tool_call> [ARGS]", "flags": [true, null, 1.5]});
    for (source, format, content) in [
        (QWEN35, ToolFormat::QwenXml, "Let me check."),
        (GEMMA4, ToolFormat::Gemma4, "Sure."),
    ] {
        let search = match format {
            ToolFormat::QwenXml => json!({"q": search["q"]}),
            _ => search.clone(),
        };
        let calls = [("get_weather", &weather), ("search", &search)];
        let message = json!({"role": "assistant", "content": content, "tool_calls": calls.iter().map(|(n, a)| {
            json!({"id": "x", "type": "function", "function": {"name": n, "arguments": a}})
        }).collect::<Vec<_>>()});
        let inputs = TemplateInputs {
            messages: vec![message],
            ..TemplateInputs::default()
        };
        let text = ChatTemplate::new(source).unwrap().render(&inputs).unwrap();
        let (got, got_content) = read_back(&parse(format, &text));
        assert_eq!(got_content, content, "{format:?}: {text:?}");
        let got: Vec<(String, serde_json::Value)> = got
            .into_iter()
            .map(|(n, a)| (n, serde_json::from_str(&a).expect("JSON arguments")))
            .collect();
        let expected: Vec<(String, serde_json::Value)> =
            calls.iter().map(|(n, a)| (n.to_string(), (*a).clone())).collect();
        assert_eq!(got, expected, "{format:?}: {text:?}");
    }
}
