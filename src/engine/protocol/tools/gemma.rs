//! Gemma 4's tool calls, as its template writes them in history and the model writes them:
//!
//! ```text
//! <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,tags:[<|"|>a<|"|>],opts:{deep:true}}<tool_call|>
//! ```
//!
//! The arguments are Gemma's own notation: a dict of bare keys, strings between `<|"|>` marks, numbers,
//! `true` / `false` / `null`, lists and nested dicts. They become JSON as llama.cpp's Gemma 4 parser
//! (`gemma4_to_json`) makes it: compact, keys quoted and escaped, strings escaped, everything else as
//! written; the JSON streams out as the call is read. A bare value that is not a JSON number, boolean or
//! null (`unit:celsius`) is malformed, as it is for llama.cpp, except Python's `None` / `True` /
//! `False`, read as `null` / `true` / `false` (the template itself writes a null argument as `None`). Calls may follow each other; after the last
//! the model writes `<|tool_response>` (an end-of-generation token, usually not in the text), which is
//! dropped.

use serde_json::Value;

use super::scan::tag_at_start;
use super::xml::escape;
use super::{Mode, ToolCallParser, ToolParseError};
use crate::engine::protocol::reasoning::partial_suffix;

const CALL: &str = "call:";
const CLOSE: &str = "<tool_call|>";
const RESPONSE: &str = "<|tool_response>";
/// Gemma 4's string delimiter (one token).
const QUOTE: &str = "<|\"|>";

/// Where a call is, after its `<|tool_call>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Gemma {
    /// Expecting `call:`.
    #[default]
    Call,
    /// The function's name so far, up to `{`.
    Name(String),
    /// Inside the arguments.
    Args(Args),
    /// After the arguments: `<tool_call|>` next.
    Close,
    /// After a call: a `<|tool_response>` is dropped.
    After,
}

impl Gemma {
    /// Whether a call is complete here.
    pub(super) fn complete(&self) -> bool {
        matches!(self, Gemma::Close | Gemma::After)
    }
}

/// The arguments being converted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Args {
    /// Open containers, innermost last: `true` for a dict, `false` for a list.
    stack: Vec<bool>,
    expect: Expect,
    /// A key or a bare value so far.
    word: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Expect {
    /// After `{`: a key or `}`.
    #[default]
    KeyOrEnd,
    /// After `,` in a dict.
    Key,
    /// Inside a key, up to `:`.
    InKey,
    /// After `:` or `,` in a list.
    Value,
    /// After `[`: a value or `]`.
    ValueOrEnd,
    /// Inside `<|"|>…<|"|>`.
    InString,
    /// Inside a number, boolean or null.
    InBare,
    /// After a value: `,` or the container's end.
    CommaOrEnd,
}

impl ToolCallParser {
    /// Advances a Gemma 4 call over `buf`: true when the mode changed (the call ended), false when more text
    /// is needed.
    pub(super) fn run_gemma(&mut self, end: bool) -> Result<bool, ToolParseError> {
        let Mode::Gemma(mut state) = std::mem::replace(&mut self.mode, Mode::Failed) else {
            return Ok(true);
        };
        let result = self.step_gemma(&mut state, end);
        if self.mode == Mode::Failed {
            self.mode = Mode::Gemma(state);
        }
        result
    }

    fn step_gemma(&mut self, state: &mut Gemma, end: bool) -> Result<bool, ToolParseError> {
        loop {
            match state {
                Gemma::Call => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    match tag_at_start(&self.buf, CALL) {
                        Some(true) => {
                            self.consume(CALL.len());
                            *state = Gemma::Name(String::new());
                        }
                        Some(false) => return Err(self.syntax("`call:` after `<|tool_call>`")),
                        None => return Ok(false),
                    }
                }
                Gemma::Name(name) => {
                    let (part, open) = match self.buf.find('{') {
                        Some(at) => (&self.buf[..at], true),
                        None => (self.buf.as_str(), false),
                    };
                    if part.contains(['<', '\n', '}']) {
                        return Err(self.syntax("`{` after the function name"));
                    }
                    name.push_str(part);
                    let used = part.len() + usize::from(open);
                    self.consume(used);
                    if !open {
                        return Ok(false);
                    }
                    let name = std::mem::take(name).trim().to_owned();
                    self.start_call(name)?;
                    self.arguments("{".into());
                    *state = Gemma::Args(Args {
                        stack: vec![true],
                        ..Args::default()
                    });
                }
                Gemma::Args(args) => match self.step_args(args, end)? {
                    true => *state = Gemma::Close,
                    false => return Ok(false),
                },
                Gemma::Close => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    match tag_at_start(&self.buf, CLOSE) {
                        Some(true) => {
                            self.consume(CLOSE.len());
                            *state = Gemma::After;
                        }
                        Some(false) => return Err(self.syntax("`<tool_call|>`")),
                        None => return Ok(false),
                    }
                }
                Gemma::After => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    match tag_at_start(&self.buf, RESPONSE) {
                        Some(true) => self.consume(RESPONSE.len()),
                        Some(false) => {}
                        None if end => {}
                        None => return Ok(false),
                    }
                    self.mode = Mode::Outside { fresh: true };
                    return Ok(true);
                }
            }
        }
    }

    /// Converts arguments text: true once the outer dict has closed, false when more text is needed.
    fn step_args(&mut self, a: &mut Args, end: bool) -> Result<bool, ToolParseError> {
        loop {
            match a.expect {
                Expect::InString => match self.buf.find(QUOTE) {
                    Some(at) => {
                        let fragment = escape(&self.buf[..at]) + "\"";
                        self.consume(at + QUOTE.len());
                        self.arguments(fragment);
                        a.expect = Expect::CommaOrEnd;
                    }
                    None => {
                        let partial = if end { 0 } else { partial_suffix(&self.buf, QUOTE) };
                        let keep = self.buf.len() - partial;
                        let fragment = escape(&self.buf[..keep]);
                        self.consume(keep);
                        self.arguments(fragment);
                        return Ok(false);
                    }
                },
                Expect::InKey => match self.buf.find([':', '}']) {
                    Some(at) if self.buf[at..].starts_with(':') => {
                        a.word.push_str(&self.buf[..at]);
                        self.consume(at + 1);
                        let key = std::mem::take(&mut a.word);
                        let key = key.trim();
                        let key = key
                            .strip_prefix(QUOTE)
                            .and_then(|k| k.strip_suffix(QUOTE))
                            .unwrap_or(key);
                        self.arguments(format!("{}:", Value::from(key)));
                        a.expect = Expect::Value;
                    }
                    Some(_) => return Err(self.syntax("`:` after a key")),
                    None => {
                        a.word.push_str(&self.buf);
                        let n = self.buf.len();
                        self.consume(n);
                        return Ok(false);
                    }
                },
                Expect::InBare => {
                    let stop = self.buf.find(|c: char| ",}]<".contains(c) || c.is_whitespace());
                    let n = stop.unwrap_or(self.buf.len());
                    a.word.push_str(&self.buf[..n]);
                    self.consume(n);
                    if stop.is_none() && !end {
                        return Ok(false);
                    }
                    let word = std::mem::take(&mut a.word);
                    // The template writes a null with Python's `str`: `None` (and would write `True`).
                    let python = [("None", "null"), ("True", "true"), ("False", "false")];
                    let word = match python.iter().find(|(p, _)| *p == word) {
                        Some((_, json)) => json.to_string(),
                        None => word,
                    };
                    match serde_json::from_str::<Value>(&word) {
                        Ok(Value::Number(_) | Value::Bool(_) | Value::Null) => self.arguments(word),
                        _ => {
                            return Err(ToolParseError::BadArguments {
                                detail: format!("`{word}` is not a string, number, boolean or null"),
                            });
                        }
                    }
                    a.expect = Expect::CommaOrEnd;
                }
                Expect::KeyOrEnd | Expect::Key => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    if a.expect == Expect::KeyOrEnd && self.buf.starts_with('}') {
                        if self.close(a) {
                            return Ok(true);
                        }
                    } else {
                        a.word.clear();
                        a.expect = Expect::InKey;
                    }
                }
                Expect::Value | Expect::ValueOrEnd => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    if a.expect == Expect::ValueOrEnd && self.buf.starts_with(']') {
                        if self.close(a) {
                            return Ok(true);
                        }
                        continue;
                    }
                    match tag_at_start(&self.buf, QUOTE) {
                        Some(true) => {
                            self.consume(QUOTE.len());
                            self.arguments("\"".into());
                            a.expect = Expect::InString;
                            continue;
                        }
                        None => return Ok(false),
                        Some(false) => {}
                    }
                    let (fragment, dict) = match self.buf.as_bytes()[0] {
                        b'{' => ("{", true),
                        b'[' => ("[", false),
                        b',' | b'}' | b']' | b':' | b'<' => return Err(self.syntax("a value")),
                        _ => {
                            a.word.clear();
                            a.expect = Expect::InBare;
                            continue;
                        }
                    };
                    self.consume(1);
                    self.arguments(fragment.into());
                    a.stack.push(dict);
                    a.expect = match dict {
                        true => Expect::KeyOrEnd,
                        false => Expect::ValueOrEnd,
                    };
                }
                Expect::CommaOrEnd => {
                    if !self.skip_ws() {
                        return Ok(false);
                    }
                    let dict = a.stack.last().copied();
                    match (self.buf.as_bytes()[0], dict) {
                        (b',', Some(dict)) => {
                            self.consume(1);
                            self.arguments(",".into());
                            a.expect = match dict {
                                true => Expect::Key,
                                false => Expect::Value,
                            };
                        }
                        (b'}', Some(true)) | (b']', Some(false)) => {
                            if self.close(a) {
                                return Ok(true);
                            }
                        }
                        _ => return Err(self.syntax("`,` or the end of a dict or list")),
                    }
                }
            }
        }
    }

    /// Closes the innermost container (its close is the first byte of `buf`): true when it was the outer
    /// dict.
    fn close(&mut self, a: &mut Args) -> bool {
        let fragment = if a.stack.pop() == Some(true) { "}" } else { "]" };
        self.consume(1);
        self.arguments(fragment.into());
        a.expect = Expect::CommaOrEnd;
        a.stack.is_empty()
    }
}
