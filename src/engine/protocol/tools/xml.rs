//! Qwen3-Coder's XML tool calls, which Qwen3.5 (and Nemotron Nano 3, StepFun 3.5) write:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! <parameter=days>
//! 3
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! The parameters become a JSON object, as llama.cpp's Qwen3-Coder parser builds it (compact, keys in the
//! order written): a value is the text between `<parameter=…>\n` and `\n</parameter>`; a parameter whose
//! schema allows only strings (`"type": "string"`, or an `enum` of strings) is that text as a JSON string,
//! streamed as it comes; any other value is held until its close tag and taken as JSON when it parses to
//! a non-string (`3`, `true`, `[1, 2]`, `{…}`), else as a string. A call with no parameters is `{}`.

use serde_json::Value;

use super::scan::tag_at_start;
use super::{Mode, ToolCallParser, ToolEvent, ToolParseError};
use crate::engine::protocol::reasoning::partial_suffix;

const FUNCTION: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "\n</parameter>";
const CALL_CLOSE: &str = "</tool_call>";

/// Where a call is, after its `<tool_call>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Xml {
    /// Expecting `<function=`.
    #[default]
    Open,
    /// The function's name so far, up to `>`.
    Name(String),
    /// In the function, `count` parameters read: `<parameter=` or `</function>` next.
    Params { count: usize },
    /// A parameter's name so far, up to `>`.
    Key { count: usize, key: String },
    /// A parameter's value: `fresh` before its first line break is dropped; `string` values stream, others
    /// gather in `raw`.
    Value {
        count: usize,
        string: bool,
        fresh: bool,
        raw: String,
    },
    /// After `</function>`: `</tool_call>` next.
    Close,
}

impl Xml {
    /// Whether a call is complete here (only its `</tool_call>` may be missing).
    pub(super) fn complete(&self) -> bool {
        *self == Xml::Close
    }
}

/// What `<name>` up to `>` in `buf` gives: the text before `>`, and whether `>` was found.
fn up_to_gt(buf: &str) -> (&str, bool) {
    match buf.find('>') {
        Some(at) => (&buf[..at], true),
        None => (buf, false),
    }
}

impl ToolCallParser {
    /// Advances an XML call over `buf`: true when the mode changed (the call ended), false when more text
    /// is needed.
    pub(super) fn run_xml(&mut self, end: bool) -> Result<bool, ToolParseError> {
        let Mode::Xml(mut state) = std::mem::replace(&mut self.mode, Mode::Failed) else {
            return Ok(true);
        };
        let result = self.step_xml(&mut state, end);
        if self.mode == Mode::Failed {
            self.mode = Mode::Xml(state);
        }
        result
    }

    fn step_xml(&mut self, state: &mut Xml, end: bool) -> Result<bool, ToolParseError> {
        loop {
            match state {
                Xml::Open => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    match tag_at_start(&self.buf, FUNCTION) {
                        Some(true) => {
                            self.consume(FUNCTION.len());
                            *state = Xml::Name(String::new());
                        }
                        Some(false) => return Err(self.syntax("`<function=` after `<tool_call>`")),
                        None => return Ok(false),
                    }
                }
                Xml::Name(name) | Xml::Key { key: name, .. } => {
                    let (part, closed) = up_to_gt(&self.buf);
                    if part.contains(['<', '\n']) {
                        return Err(self.syntax("`>` after a name"));
                    }
                    name.push_str(part);
                    let used = part.len() + usize::from(closed);
                    self.consume(used);
                    if !closed {
                        return Ok(false);
                    }
                    let name = std::mem::take(name).trim().to_owned();
                    *state = match state {
                        Xml::Key { count, .. } => self.key(name, *count),
                        _ => {
                            self.name.clone_from(&name);
                            self.start_call(name)?;
                            Xml::Params { count: 0 }
                        }
                    };
                }
                Xml::Params { count } => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    let (param, close) = (
                        tag_at_start(&self.buf, PARAMETER),
                        tag_at_start(&self.buf, FUNCTION_CLOSE),
                    );
                    if param == Some(true) {
                        self.consume(PARAMETER.len());
                        *state = Xml::Key {
                            count: *count,
                            key: String::new(),
                        };
                    } else if close == Some(true) {
                        self.consume(FUNCTION_CLOSE.len());
                        let fragment = if *count == 0 { "{}" } else { "}" };
                        self.arguments(fragment.into());
                        *state = Xml::Close;
                    } else if param.is_none() || close.is_none() {
                        return Ok(false);
                    } else {
                        return Err(self.syntax("`<parameter=` or `</function>`"));
                    }
                }
                Xml::Value {
                    count,
                    string,
                    fresh,
                    raw,
                } => {
                    if *fresh {
                        if self.buf.is_empty() {
                            return Ok(false);
                        }
                        if self.buf.starts_with('\n') {
                            self.consume(1);
                        }
                        *fresh = false;
                    }
                    let (text, closed) = match self.buf.find(&PARAMETER_CLOSE[1..]) {
                        Some(at) => {
                            let text = &self.buf[..at];
                            (text.strip_suffix('\n').unwrap_or(text).to_owned(), Some(at))
                        }
                        None if end => (self.buf.clone(), None),
                        None => {
                            let partial = partial_suffix(&self.buf, PARAMETER_CLOSE)
                                .max(partial_suffix(&self.buf, &PARAMETER_CLOSE[1..]));
                            let keep = self.buf.len() - partial;
                            (self.buf[..keep].to_owned(), None)
                        }
                    };
                    let used = closed.map_or(text.len(), |at| at + PARAMETER_CLOSE.len() - 1);
                    self.consume(used);
                    let mut fragment = match *string {
                        true => escape(&text),
                        false => {
                            raw.push_str(&text);
                            String::new()
                        }
                    };
                    if closed.is_none() {
                        self.arguments(fragment);
                        return Ok(false);
                    }
                    match *string {
                        true => fragment.push('"'),
                        false => fragment = json_value(raw),
                    }
                    self.arguments(fragment);
                    *state = Xml::Params { count: *count };
                }
                Xml::Close => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    match tag_at_start(&self.buf, CALL_CLOSE) {
                        Some(true) => {
                            self.consume(CALL_CLOSE.len());
                            self.mode = Mode::Outside { fresh: true };
                            return Ok(true);
                        }
                        Some(false) => return Err(self.syntax("`</tool_call>`")),
                        None => return Ok(false),
                    }
                }
            }
        }
    }

    /// A parameter's key is complete: its JSON key goes out (with `"` when the value is a string).
    fn key(&mut self, key: String, count: usize) -> Xml {
        let string = self.string_only(&key);
        let mut fragment = String::from(if count == 0 { "{" } else { "," });
        fragment.push_str(&Value::from(key).to_string());
        fragment.push(':');
        if string {
            fragment.push('"');
        }
        self.arguments(fragment);
        Xml::Value {
            count: count + 1,
            string,
            fresh: true,
            raw: String::new(),
        }
    }

    /// The next piece of the current call's arguments (nothing when empty).
    pub(super) fn arguments(&mut self, fragment: String) {
        if !fragment.is_empty() {
            let index = self.calls - 1;
            self.emit(ToolEvent::Arguments { index, fragment });
        }
    }

    /// Whether parameter `key` of the current function takes only strings.
    fn string_only(&self, key: &str) -> bool {
        let schema = self
            .schemas
            .iter()
            .find(|(n, _)| *n == self.name)
            .and_then(|(_, s)| s.get("properties"))
            .and_then(|p| p.get(key));
        schema.and_then(types).is_some_and(|t| t == ["string"])
    }
}

/// The JSON types a schema allows (sorted, without duplicates), when it says: from `type`, `enum` or
/// `const` values, or the alternatives of `anyOf` / `oneOf`.
pub(super) fn types(schema: &Value) -> Option<Vec<&'static str>> {
    let name = |t: &str| -> Option<&'static str> {
        [
            "string", "number", "integer", "boolean", "object", "array", "null",
        ]
        .into_iter()
        .find(|n| *n == t)
    };
    let of_value = |v: &Value| match v {
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Null => "null",
    };
    let mut out: Vec<&'static str> = if let Some(t) = schema.get("type") {
        match t {
            Value::String(t) => vec![name(t)?],
            Value::Array(ts) => ts
                .iter()
                .map(|t| t.as_str().and_then(name))
                .collect::<Option<_>>()?,
            _ => return None,
        }
    } else if let Some(Value::Array(values)) = schema.get("enum") {
        values.iter().map(of_value).collect()
    } else if let Some(v) = schema.get("const") {
        vec![of_value(v)]
    } else if let Some(Value::Array(alts)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
        let each: Option<Vec<Vec<&'static str>>> = alts.iter().map(types).collect();
        each?.concat()
    } else {
        return None;
    };
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// A held value: its JSON when it parses to something other than a string, else the text as a string.
fn json_value(raw: &str) -> String {
    let trimmed = raw.trim();
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v) if !v.is_string() => trimmed.to_owned(),
        _ => Value::from(raw).to_string(),
    }
}

/// `text` escaped for the inside of a JSON string.
pub(super) fn escape(text: &str) -> String {
    let quoted = Value::from(text).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_types() {
        assert_eq!(types(&json!({"type": "string"})), Some(vec!["string"]));
        assert_eq!(types(&json!({"enum": ["a", "b"]})), Some(vec!["string"]));
        assert_eq!(
            types(&json!({"anyOf": [{"type": "integer"}, {"type": "null"}]})),
            Some(vec!["integer", "null"])
        );
        assert_eq!(types(&json!({"description": "anything"})), None);
        assert_eq!(json_value("3"), "3");
        assert_eq!(json_value(" [1, 2] "), "[1, 2]");
        assert_eq!(json_value("Paris"), "\"Paris\"");
        assert_eq!(json_value("\"quoted\""), "\"\\\"quoted\\\"\"");
        assert_eq!(escape("a \"b\"\n"), "a \\\"b\\\"\\n");
    }
}
