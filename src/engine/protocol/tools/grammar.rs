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
//!
//! The two formats whose arguments are not JSON follow the tools' schemas parameter by parameter, in the
//! order their templates write them: Qwen3-Coder's XML (Qwen3.5) in `properties` order, Gemma 4 in sorted
//! key order (its template's `dictsort`), optional parameters optional. A parameter that takes only strings
//! is text (between `<|"|>` marks for Gemma 4), one of its `enum` values when it has them; one that takes
//! only numbers, booleans or null is `%json` of its schema; anything else is any text for the XML format,
//! and for Gemma 4 any value of its notation (what llama.cpp's Gemma 4 grammar allows for every argument).

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
        ToolFormat::QwenXml => {
            let sep = if options.parallel { "(\"\\n\" call)*" } else { "" };
            rules.push(format!("calls: call {sep}"));
            let fns: Vec<String> = (0..tools.len()).map(|i| format!("fn_{i}")).collect();
            rules.push(format!(
                "call: {} \"\\n\" ({}) {}",
                tag("<tool_call>"),
                fns.join(" | "),
                tag("</tool_call>")
            ));
            for (i, (name, params)) in tools.iter().enumerate() {
                let mut body = Vec::new();
                for (j, (key, schema, required)) in parameters(params, false).into_iter().enumerate() {
                    let rule = format!("p_{i}_{j}");
                    let open = format!("<parameter={key}>\n");
                    let close = "\n</parameter>\n";
                    match value_kind(&schema) {
                        Kind::Strings(Some(values)) => {
                            let values: Vec<String> = values.iter().map(|v| lark_string(v)).collect();
                            let (open, close) = (lark_string(&open), lark_string(close));
                            rules.push(format!("{rule}: {open} ({}) {close}", values.join(" | ")));
                        }
                        Kind::Json => {
                            let (open, close) = (lark_string(&open), lark_string(close));
                            rules.push(format!("{rule}: {open} %json {} {close}", with_layout(schema)));
                        }
                        Kind::Strings(None) | Kind::Any => {
                            rules.push(format!("{rule}[lazy]: P_{i}_{j}"));
                            let (open, close) = (lark_string(&open), lark_string(close));
                            rules.push(format!("P_{i}_{j}: {open} /(?s:.*)/ {close}"));
                        }
                    }
                    body.push(if required { rule } else { format!("{rule}?") });
                }
                let open = lark_string(&format!("<function={name}>\n"));
                let close = lark_string("</function>\n");
                rules.push(format!("fn_{i}: {open} {} {close}", body.join(" ")));
            }
            ("calls", "<tool_call>")
        }
        ToolFormat::Gemma4 => {
            rules.push(format!("calls: call{}", if options.parallel { "+" } else { "" }));
            let fns: Vec<String> = (0..tools.len()).map(|i| format!("fn_{i}")).collect();
            let (open, close) = (tag("<|tool_call>"), tag("<tool_call|>"));
            rules.push(format!("call: {open} \"call:\" ({}) {close}", fns.join(" | ")));
            let quote = tag("<|\"|>");
            for (i, (name, params)) in tools.iter().enumerate() {
                let entries: Vec<(String, bool)> = parameters(params, true)
                    .into_iter()
                    .map(|(key, schema, required)| {
                        let value = match value_kind(&schema) {
                            Kind::Strings(Some(values)) => {
                                let values: Vec<String> = values.iter().map(|v| lark_string(v)).collect();
                                format!("{quote} ({}) {quote}", values.join(" | "))
                            }
                            Kind::Strings(None) => "g_str".to_owned(),
                            Kind::Json => format!("%json {}", with_layout(schema)),
                            Kind::Any => "g_value".to_owned(),
                        };
                        (format!("{} {value}", lark_string(&format!("{key}:"))), required)
                    })
                    .collect();
                let body = gemma_entries(&mut rules, i, &entries);
                rules.push(format!("fn_{i}: {} \"{{\" {body} \"}}\"", lark_string(name)));
            }
            rules.push("g_str[lazy]: G_STR".into());
            rules.push(format!("G_STR: {quote} /(?s:.*)/ {quote}"));
            rules.push("g_value: g_str | g_dict | g_list | G_BARE".into());
            rules.push("g_dict: \"{\" (g_kv (\",\" g_kv)*)? \"}\"".into());
            rules.push("g_kv: G_KEY \":\" g_value".into());
            rules.push("g_list: \"[\" (g_value (\",\" g_value)*)? \"]\"".into());
            rules.push("G_KEY: /[^:}<,{\\[\\]\\s]+/".into());
            rules.push("G_BARE: /-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?|true|false|null/".into());
            ("calls", "<|tool_call>")
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

/// How a parameter's value is constrained.
enum Kind {
    /// Only strings: raw text, or one of these values.
    Strings(Option<Vec<String>>),
    /// Only numbers, booleans or null: JSON of its schema.
    Json,
    /// Anything else (objects, arrays, mixed types, no types given).
    Any,
}

fn value_kind(schema: &Value) -> Kind {
    let Some(types) = super::xml::types(schema) else {
        return Kind::Any;
    };
    if types == ["string"] {
        let values = schema.get("enum").and_then(Value::as_array).and_then(|v| {
            v.iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        });
        return Kind::Strings(values);
    }
    let scalar = ["number", "integer", "boolean", "null"];
    match types.iter().all(|t| scalar.contains(t)) {
        true => Kind::Json,
        false => Kind::Any,
    }
}

/// The `(key, schema, required)` of a tool's parameters, in `properties` order or sorted.
fn parameters(params: &Value, sorted: bool) -> Vec<(String, Value, bool)> {
    let required: Vec<&str> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out: Vec<(String, Value, bool)> = params
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .map(|(k, v)| (k.clone(), v.clone(), required.contains(&k.as_str())))
                .collect()
        })
        .unwrap_or_default();
    if sorted {
        out.sort_by(|a, b| a.0.cmp(&b.0));
    }
    out
}

/// Gemma 4's `key:value` entries of tool `i`, comma-separated, optional ones optional: rules `first_i_j`
/// (nothing written yet from entry `j` on) and `rest_i_j` (something written); the expression for all of
/// them (empty when there are none).
fn gemma_entries(rules: &mut Vec<String>, i: usize, entries: &[(String, bool)]) -> String {
    let n = entries.len();
    for (j, (entry, required)) in entries.iter().enumerate().rev() {
        let rest = if j + 1 < n {
            format!(" rest_{i}_{}", j + 1)
        } else {
            String::new()
        };
        let first = match (required, j + 1 < n) {
            (true, _) => format!("{entry}{rest}"),
            (false, true) => format!("{entry}{rest} | first_{i}_{}", j + 1),
            (false, false) => format!("({entry})?"),
        };
        rules.push(format!("first_{i}_{j}: {first}"));
        if j == 0 {
            continue;
        }
        let more = match required {
            true => format!("\",\" {entry}{rest}"),
            false => format!("(\",\" {entry})?{rest}"),
        };
        rules.push(format!("rest_{i}_{j}: {more}"));
    }
    match n {
        0 => String::new(),
        _ => format!("first_{i}_0"),
    }
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
