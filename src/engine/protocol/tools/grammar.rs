//! The llguidance Lark grammar that forces tool calls in a family's syntax.
//!
//! Each call's arguments are constrained by its tool's `parameters` JSON schema through `%json { … }`, and
//! its name is one of the allowed names. Where name and arguments share a JSON object (Hermes, Llama 3,
//! Mistral Nemo) the object is one `%json` with an `anyOf` over the tools (llguidance's advice for several
//! functions); for `[TOOL_CALLS]name[ARGS]{…}` each tool is an alternative with its own `%json`.
//!
//! The JSON is written as the templates write it (Python's `json.dumps`: `", "` and `": "`, no other
//! whitespace), which is how the calls in the model's training conversations looked.
//!
//! Tags (`<tool_call>`, `[TOOL_CALLS]`, `<think>`, …) that are special tokens of the tokenizer are referenced
//! by id (`<[151657]>`), others are literal text.

use serde_json::{Value, json};

use super::ToolFormat;
use crate::engine::protocol::reasoning::ReasoningSyntax;

/// What the grammar allows besides the calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrammarOptions<'a> {
    /// `tool_choice: "required"` or a named function: the output is calls. When false (`"auto"`), a
    /// plain-text answer (one that never writes the family's call opener) is allowed instead.
    pub required: bool,
    /// `parallel_tool_calls`: one or more calls; otherwise exactly one.
    pub parallel: bool,
    /// The tokenizer's special tokens (text, id); a tag found here is referenced as that token.
    pub special_tokens: &'a [(String, u32)],
    /// A think block may come first; `true` when the prompt already opened it (it must then be closed).
    pub reasoning: Option<(&'a ReasoningSyntax, bool)>,
}

/// The grammar could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolGrammarError {
    #[error("a tool call grammar needs at least one function in `tools`")]
    NoTools,
    #[error("the `parameters` of function `{name}` is not a JSON schema object")]
    BadParameters { name: String },
}

/// The Lark grammar (llguidance's dialect) for calling `tools` (name, `parameters` schema; `Value::Null` for
/// a function without parameters) in `format`.
pub fn call_grammar(
    format: ToolFormat,
    tools: &[(String, Value)],
    options: &GrammarOptions,
) -> Result<String, ToolGrammarError> {
    if tools.is_empty() {
        return Err(ToolGrammarError::NoTools);
    }
    let tools = tools
        .iter()
        .map(|(name, params)| match params {
            Value::Null => Ok((name, json!({"type": "object"}))),
            Value::Object(_) => Ok((name, params.clone())),
            _ => Err(ToolGrammarError::BadParameters { name: name.clone() }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tag = |text: &str| match options.special_tokens.iter().find(|(t, _)| t == text) {
        Some((_, id)) => format!("<[{id}]>"),
        None => lark_string(text),
    };
    let object = |args_key: &str, id: bool| {
        let alternatives: Vec<Value> = tools
            .iter()
            .map(|(name, params)| {
                let mut properties = serde_json::Map::new();
                properties.insert("name".into(), json!({ "const": name }));
                properties.insert(args_key.into(), params.clone());
                let mut required = vec![json!("name"), json!(args_key)];
                if id {
                    properties.insert(
                        "id".into(),
                        json!({"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}),
                    );
                    required.push(json!("id"));
                }
                json!({"type": "object", "properties": properties, "required": required,
                       "additionalProperties": false})
            })
            .collect();
        match <[Value; 1]>::try_from(alternatives) {
            Ok([one]) => one,
            Err(many) => json!({ "anyOf": many }),
        }
    };
    let mut rules = Vec::new();
    let (calls, opener) = match format {
        ToolFormat::Hermes => {
            let sep = if options.parallel { "(\"\\n\" call)*" } else { "" };
            rules.push(format!("calls: call {sep}"));
            rules.push(format!(
                "call: {} \"\\n\" obj \"\\n\" {}",
                tag("<tool_call>"),
                tag("</tool_call>")
            ));
            rules.push(format!("obj: %json {}", with_layout(object("arguments", false))));
            ("calls", "<tool_call>")
        }
        ToolFormat::Llama3Json => {
            let sep = if options.parallel { "(\"; \" obj)*" } else { "" };
            rules.push(format!("calls: obj {sep}"));
            rules.push(format!("obj: %json {}", with_layout(object("parameters", false))));
            ("calls", "{")
        }
        ToolFormat::Mistral => {
            let mut array = json!({"type": "array", "items": object("arguments", true), "minItems": 1});
            if !options.parallel {
                array["maxItems"] = json!(1);
            }
            rules.push(format!("calls: {} arr", tag("[TOOL_CALLS]")));
            rules.push(format!("arr: %json {}", with_layout(array)));
            ("calls", "[TOOL_CALLS]")
        }
        ToolFormat::MistralArgs => {
            rules.push(format!("calls: call{}", if options.parallel { "+" } else { "" }));
            let names: Vec<String> = (0..tools.len()).map(|i| format!("call_{i}")).collect();
            rules.push(format!("call: {}", names.join(" | ")));
            // Mistral Small 3.2 writes the call's id between the name and the arguments.
            let call_id = if options.special_tokens.iter().any(|(t, _)| t == "[CALL_ID]") {
                format!(" ({} CALL_ID)?", tag("[CALL_ID]"))
            } else {
                String::new()
            };
            for (i, (name, params)) in tools.iter().enumerate() {
                let open = tag("[TOOL_CALLS]");
                let (name, args) = (lark_string(name), tag("[ARGS]"));
                rules.push(format!("call_{i}: {open} {name}{call_id} {args} args_{i}"));
                rules.push(format!("args_{i}: %json {}", with_layout(params.clone())));
            }
            rules.push("CALL_ID: /[a-zA-Z0-9]{9}/".into());
            ("calls", "[TOOL_CALLS]")
        }
    };
    let body = if options.required {
        calls.to_owned()
    } else {
        // A plain answer: anything that never writes the call opener (Llama 3: that does not start with `{`).
        let never = match format {
            ToolFormat::Llama3Json => format!("/(?s:[ \\t\\r\\n]*{}.*)/", regex_escape(opener)),
            _ => format!("/(?s:.*{}.*)/", regex_escape(opener)),
        };
        rules.push(format!("TEXT: /(?s:.+)/ & ~{never}"));
        format!("{calls} | TEXT")
    };
    let start = match options.reasoning {
        None => format!("start: {body}"),
        Some((syntax, inside)) => {
            let special = |t: &str| options.special_tokens.iter().any(|(s, _)| s == t);
            if special(&syntax.open) && special(&syntax.close) {
                let open = if inside { String::new() } else { tag(&syntax.open) };
                rules.push(format!("think: {open} THINK_BODY? {}", tag(&syntax.close)));
                rules.push("THINK_BODY: /(?s:.+)/".into());
            } else {
                // Literal tags: a lazy terminal ends at the first close tag.
                let open = if inside {
                    String::new()
                } else {
                    lark_string(&syntax.open)
                };
                rules.push("think[lazy]: THINK".into());
                rules.push(format!("THINK: {open} /(?s:.*)/ {}", lark_string(&syntax.close)));
            }
            rules.push("WS: /[ \\t\\r\\n]+/".into());
            let optional = if inside { "" } else { "?" };
            format!("start: (think WS?){optional} ({body})")
        }
    };
    rules.insert(0, start);
    Ok(rules.join("\n") + "\n")
}

/// The schema with llguidance's layout options: the separators of Python's `json.dumps`, no free whitespace.
fn with_layout(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        map.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// A Lark string literal (JSON string syntax; DEL, which Lark's lexer refuses raw, escaped).
fn lark_string(text: &str) -> String {
    serde_json::to_string(text)
        .unwrap_or_default()
        .replace('\u{7f}', "\\u007f")
}

/// `text` as a literal inside a Lark `/…/` regex.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
