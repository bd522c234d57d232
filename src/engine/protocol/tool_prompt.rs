//! Tools for a model whose chat template has no tool-call syntax (SmolLM2, the default model, is one), the
//! way llama.cpp's generic format serves them: the tools are described in the system turn, with the call
//! syntax spelled out as plain text, and the conversation's calls and results are written into ordinary
//! turns, so that any template renders them. The syntax is Hermes' (`<tool_call>{"name": …, "arguments":
//! …}</tool_call>`, the most common in training data), so the Hermes parser reads the reply and the Hermes
//! grammar forces `required` and named calls; under `auto` the model is free to answer, and a malformed call
//! comes back as content ([`super::chat_choice`]).
//!
//! - the first system message gets the tools text appended (a system message is inserted when there is
//!   none; [`in_first_user`] puts it in the first user message instead, for templates that refuse a system
//!   role);
//! - an assistant message's `tool_calls` become `<tool_call>` blocks after its content;
//! - `tool` messages become a user turn of `<tool_response>` blocks (consecutive results in one turn).

use serde_json::{Value, json};

/// `v` as Python's `json.dumps` writes it (`", "` and `": "`, nothing else), as templates' `tojson` and the
/// call grammar do.
pub fn dumps(v: &Value) -> String {
    match v {
        Value::Array(items) => format!("[{}]", items.iter().map(dumps).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), dumps(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        scalar => scalar.to_string(),
    }
}

/// The system text describing `tools` (as chat templates take them: `{"type": "function", "function":
/// {…}}`) and how to call them; `forced`: the reply must be calls (the grammar holds it to that anyway).
pub fn tools_text(tools: &[Value], forced: bool) -> String {
    let listed: Vec<String> = tools.iter().map(dumps).collect();
    let choice = match forced {
        true => "Reply with the function call only.",
        false => "If no function is needed, answer the user directly, without a tool call.",
    };
    format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with \
         function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\nFor each function \
         call, return a json object with function name and arguments within <tool_call></tool_call> XML \
         tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>\n\n{choice}",
        listed.join("\n")
    )
}

fn text_of(m: &Value) -> String {
    m.get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// `messages` (as [`super::prompt::template_message`] writes them) with the tools described in the system
/// turn and calls and results written as plain turns (see the module docs).
pub fn messages(messages: &[Value], tools: &[Value], forced: bool) -> Vec<Value> {
    let text = tools_text(tools, forced);
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    match messages.first() {
        Some(m) if m["role"] == "system" => {
            let content = text_of(m);
            let joined = match content.is_empty() {
                true => text,
                false => format!("{content}\n\n{text}"),
            };
            out.push(json!({"role": "system", "content": joined}));
        }
        _ => out.push(json!({"role": "system", "content": text})),
    }
    let skip = usize::from(messages.first().is_some_and(|m| m["role"] == "system"));
    for m in &messages[skip..] {
        match m["role"].as_str() {
            Some("assistant") if m.get("tool_calls").is_some_and(Value::is_array) => {
                let mut content = text_of(m);
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let f = &call["function"];
                    let object = json!({"name": f["name"], "arguments": f["arguments"]});
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&format!("<tool_call>\n{}\n</tool_call>", dumps(&object)));
                }
                out.push(json!({"role": "assistant", "content": content}));
            }
            Some("tool") => {
                let block = format!("<tool_response>\n{}\n</tool_response>", text_of(m));
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && last["tool_results"] == true => {
                        let joined = format!("{}\n{block}", text_of(last));
                        last["content"] = joined.into();
                    }
                    _ => out.push(json!({"role": "user", "content": block, "tool_results": true})),
                }
            }
            _ => out.push(m.clone()),
        }
    }
    for m in &mut out {
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_results");
        }
    }
    out
}

/// [`messages`]'s output for a template that refuses a system role: the system turn (with the tools text)
/// goes at the start of the first user message.
pub fn in_first_user(messages: Vec<Value>) -> Vec<Value> {
    let mut it = messages.into_iter();
    let Some(system) = it.next() else {
        return Vec::new();
    };
    let mut rest: Vec<Value> = it.collect();
    match rest.iter_mut().find(|m| m["role"] == "user") {
        Some(user) => {
            let joined = format!("{}\n\n{}", text_of(&system), text_of(user));
            user["content"] = joined.into();
        }
        None => rest.insert(0, json!({"role": "user", "content": text_of(&system)})),
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_go_to_the_system_turn_and_calls_and_results_into_plain_turns() {
        let tools = vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}})];
        let history = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Weather in Oslo and Rome?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
            ]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 3}"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "{\"temp\": 19}"}),
        ];
        let out = messages(&history, &tools, false);
        assert_eq!(out.len(), 4, "{out:#?}");
        let system = out[0]["content"].as_str().unwrap();
        assert!(system.starts_with("Be brief.\n\n# Tools"), "{system}");
        assert!(
            system.contains("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            "{system}"
        );
        assert!(system.ends_with("answer the user directly, without a tool call."));
        let calls = out[2]["content"].as_str().unwrap();
        assert_eq!(
            calls,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
        );
        assert!(out[2].get("tool_calls").is_none());
        assert_eq!(out[3]["role"], "user");
        assert_eq!(
            out[3]["content"],
            "<tool_response>\n{\"temp\": 3}\n</tool_response>\n<tool_response>\n{\"temp\": 19}\n</tool_response>"
        );
        assert!(out[3].get("tool_results").is_none());
        // No system message: one is inserted; or, for a template without a system role, the first user
        // message carries it.
        let plain = messages(&history[1..2], &tools, true);
        assert_eq!(plain[0]["role"], "system");
        assert!(
            plain[0]["content"]
                .as_str()
                .unwrap()
                .ends_with("Reply with the function call only.")
        );
        let merged = in_first_user(plain);
        assert_eq!(merged.len(), 1);
        assert!(
            merged[0]["content"]
                .as_str()
                .unwrap()
                .ends_with("\n\nWeather in Oslo and Rome?")
        );
    }
}
