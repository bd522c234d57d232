//! Hugging Face chat templates (Jinja) rendered with `minijinja`, configured the way transformers'
//! `apply_chat_template` configures Jinja2: `trim_blocks` and `lstrip_blocks` on, loop controls
//! (`break`/`continue`), Python string/dict/list methods (`.strip()`, `.items()`, …), and the globals and
//! filters real templates call: `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson` that writes what
//! Python's `json.dumps(x, ensure_ascii=False)` writes (`", "` and `": "` separators, keys in their given
//! order, no HTML escaping; `indent=` honoured).
//!
//! The context is `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, and when given `tools` and
//! any extra variables (e.g. `enable_thinking`). A model without a template gets [`CHATML`].

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

/// The documented default for models that ship no template: ChatML, as used by Qwen and SmolLM.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A chat template could not be compiled or rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("the model's `chat_template` does not compile: {0}")]
    Syntax(String),
    #[error("the model's `chat_template` refused the conversation: {0}")]
    Raised(String),
    #[error("the model's `chat_template` failed to render: {0}")]
    Render(String),
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTemplate")
    }
}

/// What a template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct TemplateInputs {
    /// The messages as JSON objects (`role`, `content` as a string, `tool_calls`, …).
    pub messages: Vec<serde_json::Value>,
    /// Tool definitions as transformers passes them: `{"type": "function", "function": {...}}`.
    pub tools: Option<Vec<serde_json::Value>>,
    pub add_generation_prompt: bool,
    pub bos_token: String,
    pub eos_token: String,
    /// Further template variables (`enable_thinking`, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {msg}"),
    ))
}

impl ChatTemplate {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |fmt: String| {
            Value::from(super::time::strftime_now(&fmt))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| TemplateError::Syntax(detail(&e)))?;
        Ok(Self { env })
    }

    /// Renders the prompt.
    pub fn render(&self, inputs: &TemplateInputs) -> Result<String, TemplateError> {
        let mut ctx = inputs.extra.clone();
        ctx.insert(
            "messages".into(),
            serde_json::Value::Array(inputs.messages.clone()),
        );
        if let Some(tools) = &inputs.tools {
            ctx.insert("tools".into(), serde_json::Value::Array(tools.clone()));
        }
        ctx.insert(
            "add_generation_prompt".into(),
            inputs.add_generation_prompt.into(),
        );
        ctx.insert("bos_token".into(), inputs.bos_token.clone().into());
        ctx.insert("eos_token".into(), inputs.eos_token.clone().into());
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError::Render(detail(&e)))?;
        tmpl.render(Value::from_serialize(&ctx)).map_err(|e| {
            let text = detail(&e);
            match text.split_once("raise_exception: ") {
                Some((_, msg)) => TemplateError::Raised(msg.split(" (in chat").next().unwrap_or(msg).into()),
                None => TemplateError::Render(text),
            }
        })
    }
}

/// An error with its causes, on one line.
fn detail(e: &Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=indent)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write_py_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Python `json.dumps` formatting: `", "`/`": "` separators without indent, `","` + newline with it.
fn write_py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => out.push_str(&py_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        J::String(s) => py_string(s, out),
        J::Array(items) if items.is_empty() => out.push_str("[]"),
        J::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                write_py_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if map.is_empty() => out.push_str("{}"),
        J::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_string(k, out);
                out.push_str(": ");
                write_py_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

/// Python's `repr(float)` for the values JSON can hold.
fn py_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        let s = format!("{f:?}");
        // Rust writes `1e-5`, Python `1e-05`.
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// A JSON string as Python writes it with `ensure_ascii=False`.
fn py_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inputs(messages: serde_json::Value) -> TemplateInputs {
        TemplateInputs {
            messages: messages.as_array().cloned().unwrap_or_default(),
            add_generation_prompt: true,
            ..Default::default()
        }
    }

    #[test]
    fn chatml_default_renders_a_turn_and_the_generation_prompt() {
        let t = ChatTemplate::new(CHATML).unwrap();
        let out = t
            .render(&inputs(json!([{"role": "user", "content": "Hi"}])))
            .unwrap();
        assert_eq!(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn python_flavoured_templates_work() {
        let src = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}\
                   {% endif %}{{ m['content'].strip() | upper }}{% if loop.index == 1 %}{% continue %}{% endif %}\
                   !{% endfor %}{{ tools | tojson }}";
        let t = ChatTemplate::new(src).unwrap();
        let mut i = inputs(json!([{"role": "user", "content": " a "}, {"role": "user", "content": "b"}]));
        i.tools = Some(vec![
            json!({"name": "f", "z": 1, "a": [1.5, "<é>\n"], "e": 1e-05}),
        ]);
        assert_eq!(
            t.render(&i).unwrap(),
            "AB![{\"name\": \"f\", \"z\": 1, \"a\": [1.5, \"<é>\\n\"], \"e\": 1e-05}]"
        );
        let e = t
            .render(&inputs(json!([{"role": "system", "content": "x"}])))
            .unwrap_err();
        assert_eq!(e, TemplateError::Raised("no system".into()), "{e}");
        assert!(matches!(
            ChatTemplate::new("{% if %}"),
            Err(TemplateError::Syntax(_))
        ));
    }

    #[test]
    fn tojson_indent_matches_python() {
        let t = ChatTemplate::new("{{ x | tojson(indent=4) }}").unwrap();
        let mut i = inputs(json!([]));
        i.extra
            .insert("x".into(), json!({"a": [1, {}], "b": {"c": null}}));
        assert_eq!(
            t.render(&i).unwrap(),
            "{\n    \"a\": [\n        1,\n        {}\n    ],\n    \"b\": {\n        \"c\": null\n    }\n}"
        );
    }
}
