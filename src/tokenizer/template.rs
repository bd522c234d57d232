//! Hugging Face chat templates (Jinja) rendered with `minijinja` the way transformers' `apply_chat_template`
//! renders them with Jinja2, byte for byte (checked on 69 real templates by `tests/chat_templates.rs`):
//! `trim_blocks` and `lstrip_blocks`, loop controls, Python string/dict/list methods (`.strip()`, `.items()`,
//! …), transformers' globals and tags (`raise_exception(msg)`, `strftime_now(fmt)`, `{% generation %}`), a
//! `tojson` that writes what Python's `json.dumps` writes (every argument honoured), values printed and
//! `| string`ed as Python's `str()` writes them (`True`, `None`, `{'a': 1}`), and Jinja2's `indent`,
//! `length` (0 for undefined) and `iterable`/`sequence` tests.
//!
//! The context is what `apply_chat_template` passes: `bos_token`, `eos_token`, the extra variables (e.g.
//! `enable_thinking`), `messages` normalised as transformers normalises them, `tools` and `documents` (`none`
//! when absent) and `add_generation_prompt`. A model without a template has none: kiln does not guess one
//! (chat requests are refused, see `ModelTokenizer::template`).

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

use super::pyfmt::{indent, py_str, tojson};

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
    /// The template's Jinja source (what the model family's tool-call and think syntax is read from).
    pub source: String,
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
        env.add_function(GENERATION, generation);
        env.add_filter("tojson", tojson);
        // Jinja2 prints and stringifies values the way Python's `str()` does (`True`, `None`, `{'a': 1}`).
        env.set_formatter(|out, _state, value| match value.as_str() {
            Some(s) => out.write_str(s).map_err(Error::from),
            None => out.write_str(&py_str(value)).map_err(Error::from),
        });
        env.add_filter("string", |v: Value| py_str(&v));
        // Jinja2's `Undefined` has length 0 (`message.content | length` on a message without content).
        let length = |v: Value| match v.len() {
            _ if v.is_undefined() => Ok(0),
            Some(n) => Ok(n),
            None => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot calculate length of value of type {}", v.kind()),
            )),
        };
        // Jinja2's tests: `none is iterable` is false and an undefined value is iterable; strings, dicts and
        // undefined values are sequences (they have `len` and `__getitem__`).
        env.add_test("iterable", |v: Value| {
            v.is_undefined() || (!v.is_none() && v.try_iter().is_ok())
        });
        env.add_test("sequence", |v: Value| {
            use minijinja::value::ValueKind as K;
            matches!(v.kind(), K::String | K::Seq | K::Map | K::Undefined)
        });
        env.add_filter("indent", indent);
        env.add_filter("length", length);
        env.add_filter("count", length);
        env.add_template_owned("chat", generation_tags(source))
            .map_err(|e| TemplateError::Syntax(detail(&e)))?;
        Ok(Self {
            env,
            source: source.to_owned(),
        })
    }

    /// Renders the prompt with the variables transformers' `apply_chat_template` passes: the special tokens,
    /// then `extra` (which may override them), then `messages` (keys whose value is null dropped, reasoning
    /// copied to `thinking` and `reasoning_content`), `tools` and `documents` (`none` when absent, so `tools is
    /// defined` holds as in Python) and `add_generation_prompt`.
    pub fn render(&self, inputs: &TemplateInputs) -> Result<String, TemplateError> {
        let mut ctx = serde_json::Map::new();
        ctx.insert("bos_token".into(), inputs.bos_token.clone().into());
        ctx.insert("eos_token".into(), inputs.eos_token.clone().into());
        ctx.extend(inputs.extra.clone());
        let messages = inputs.messages.iter().map(normalize_message).collect();
        ctx.insert("messages".into(), serde_json::Value::Array(messages));
        let tools = inputs.tools.clone().map(serde_json::Value::Array);
        ctx.insert("tools".into(), tools.unwrap_or_default());
        ctx.insert("documents".into(), serde_json::Value::Null);
        ctx.insert(
            "add_generation_prompt".into(),
            inputs.add_generation_prompt.into(),
        );
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

/// A message as transformers hands it to the template: top-level keys whose value is null dropped
/// (`_normalize_chat_messages`), and the reasoning (`reasoning_content`, else `thinking`, else `reasoning`)
/// put under both names templates read, as `{"thinking": r, **message, "reasoning_content": r}` does
/// (`_alias_reasoning_fields`).
fn normalize_message(m: &serde_json::Value) -> serde_json::Value {
    let Some(map) = m.as_object() else {
        return m.clone();
    };
    let kept = map.iter().filter(|(_, v)| !v.is_null());
    let kept: serde_json::Map<_, _> = kept.map(|(k, v)| (k.clone(), v.clone())).collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|k| kept.get(*k))
        .cloned();
    let Some(reasoning) = reasoning else {
        return kept.into();
    };
    let mut out = serde_json::Map::new();
    out.insert("thinking".into(), reasoning.clone());
    out.extend(kept);
    out.insert("reasoning_content".into(), reasoning);
    out.into()
}

/// The function `{% generation %}` blocks become (see [`generation_tags`]).
const GENERATION: &str = "__kiln_generation";

/// transformers' `{% generation %}…{% endgeneration %}` tag (it marks assistant tokens and renders its body
/// as a `call` block does, in its own scope) rewritten to `{% call __kiln_generation() %}…{% endcall %}`,
/// whitespace control kept.
fn generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let inner = rest[2..].find("%}").map(|end| &rest[2..2 + end]);
        let body = inner.map(|t| t.trim_start_matches(['-', '+']).trim_end_matches(['-', '+']));
        let replacement = match body.map(str::trim) {
            Some("generation") => format!("call {GENERATION}()"),
            Some("endgeneration") => "endcall".to_owned(),
            _ => {
                out.push_str("{%");
                rest = &rest[2..];
                continue;
            }
        };
        let (inner, body) = (inner.unwrap_or_default(), body.unwrap_or_default());
        let open = &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()];
        let close = &inner[open.len() + body.len()..];
        out.push_str(&format!("{{%{open} {replacement} {close}%}}"));
        rest = &rest[inner.len() + 4..];
    }
    out.push_str(rest);
    out
}

fn generation(state: &minijinja::State, kwargs: Kwargs) -> Result<Value, Error> {
    let caller: Value = kwargs.get("caller")?;
    kwargs.assert_all_used()?;
    caller.call(state, &[])
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

    /// ChatML, as used by Qwen and SmolLM.
    const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn chatml_renders_a_turn_and_the_generation_prompt() {
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

    /// Jinja2 behaviours kiln reproduces: (what, template, messages, variables, what transformers 5.24's
    /// `apply_chat_template` with Jinja2 3.1.6 renders).
    #[test]
    fn jinja2_behaviours_match_transformers() {
        let x = json!({"a": [1, 2.0, "it's", null, false], "b": "q\"'\n\u{a0}é"});
        let repr = r#"{'a': [1, 2.0, "it's", None, False], 'b': 'q"\'\n\xa0é'}"#;
        let cases = [
            (
                "{% generation %} renders its body in its own scope",
                "{% set x = 1 %}{% for m in messages %}\n  {%- generation -%}\n  <{{ m.content }}>{% set x = 2 %}\n  \
                 {%- endgeneration %}\n{% endfor %}{{ x }}",
                json!([{"role": "user", "content": "hi"}]),
                json!({}),
                "<hi>1".to_owned(),
            ),
            (
                "values print and stringify as Python's str()",
                "{{ true }} {{ none }} {{ x }} {{ x | string }} {{ 1.5 }} {{ 2 }}",
                json!([]),
                json!({ "x": x }),
                format!("True None {repr} {repr} 1.5 2"),
            ),
            (
                "tojson honours ensure_ascii, separators, sort_keys and a string indent",
                "{{ x | tojson(ensure_ascii=True) }}|{{ x | tojson(separators=(',', ':'), sort_keys=True) }}|\
                 {{ x | tojson(indent='\t') }}",
                json!([]),
                json!({"x": {"z": "é😀\u{7f}", "a": [1, {"b": null}]}}),
                "{\"z\": \"\\u00e9\\ud83d\\ude00\\u007f\", \"a\": [1, {\"b\": null}]}|\
                 {\"a\":[1,{\"b\":null}],\"z\":\"é😀\u{7f}\"}|\
                 {\n\t\"z\": \"é😀\u{7f}\",\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": null\n\t\t}\n\t]\n}"
                    .to_owned(),
            ),
            (
                "length of undefined, iterable and sequence tests",
                "{{ messages[0].content | length }}{{ none is iterable }}{{ undefined_thing is iterable }}\
                 {{ 's' is sequence }}{{ {} is sequence }}{{ 3 is sequence }}",
                json!([{"role": "user"}]),
                json!({}),
                "0FalseTrueTrueTrueFalse".to_owned(),
            ),
            (
                "indent keeps the trailing newline",
                "[{{ '{\\n' | indent(4, first=true) }}][{{ 'a\\n\\nb' | indent(2) }}]\
                 [{{ 'a\\n\\nb\\n' | indent(width='> ', blank=true) }}]",
                json!([]),
                json!({}),
                "[    {\n][a\n\n  b][a\n> \n> b\n> ]".to_owned(),
            ),
            (
                "null keys dropped, reasoning aliased, tools and documents defined as none",
                "{% for k, v in messages[0] | items %}{{ k }}={{ v }};{% endfor %}\
                 {{ tools is defined }}{{ tools is none }}{{ documents is none }}",
                json!([{"role": "assistant", "content": null, "reasoning": "r"}]),
                json!({}),
                "thinking=r;role=assistant;reasoning=r;reasoning_content=r;TrueTrueTrue".to_owned(),
            ),
        ];
        for (what, src, messages, extra, expected) in cases {
            let mut i = inputs(messages);
            i.add_generation_prompt = false;
            i.extra = extra.as_object().cloned().unwrap_or_default();
            let out = ChatTemplate::new(src).unwrap().render(&i).unwrap();
            assert_eq!(out, expected, "{what}");
        }
    }
}
