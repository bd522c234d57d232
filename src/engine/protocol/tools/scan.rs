//! Character-level scanners for tool-call JSON: where a JSON value ends, and a call object
//! (`{"name": …, "arguments": …}`, keys in any order) whose `arguments` text streams out as it arrives.
//!
//! The scanners only track structure (strings, escapes, nesting); a complete `name` or `arguments` is then
//! checked with `serde_json`, so every accepted call is valid JSON. Also the small tests on text that all
//! the parsers share: a tag at the start of the buffer, name characters, Llama 3's first key, and whether
//! complete `arguments` are a JSON object.

use super::ToolParseError;

/// How a character relates to the value being scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// Part of the value, which continues.
    In,
    /// The value's last character.
    EndedWith,
    /// Not part of the value: it ended just before (a number, `true`, … ended by a delimiter).
    EndedBefore,
}

/// Finds the end of one JSON value, a character at a time.
#[derive(Debug, Clone, Default)]
pub(super) struct ValueScan {
    started: bool,
    scalar: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    /// The value's text, for callers that keep it.
    pub text: String,
}

impl ValueScan {
    pub fn is_fresh(&self) -> bool {
        !self.started
    }

    pub fn feed(&mut self, c: char) -> Scan {
        if !self.started {
            self.started = true;
            match c {
                '{' | '[' => self.depth = 1,
                '"' => self.in_string = true,
                _ => self.scalar = true,
            }
            return Scan::In;
        }
        if self.scalar {
            return match c {
                ',' | '}' | ']' | ' ' | '\t' | '\n' | '\r' => Scan::EndedBefore,
                _ => Scan::In,
            };
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if c == '\\' {
                self.escape = true;
            } else if c == '"' {
                self.in_string = false;
                if self.depth == 0 {
                    return Scan::EndedWith;
                }
            }
            return Scan::In;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    return Scan::EndedWith;
                }
            }
            _ => {}
        }
        Scan::In
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Skip,
    Name,
    Arguments,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Open,
    BeforeKey,
    Key,
    Colon,
    BeforeValue,
    Value,
    AfterValue,
}

/// One call object, fed a character at a time.
#[derive(Debug, Clone, Default)]
pub(super) struct CallObject {
    state: State,
    /// The current key's raw JSON text, or the name's.
    raw: String,
    key_scan: ValueScan,
    kind: Kind,
    value: ValueScan,
    /// The complete name, until taken.
    name_ready: Option<String>,
    /// A name was seen.
    pub name: Option<String>,
    /// An `arguments` (or `parameters`) value was seen.
    pub has_arguments: bool,
    /// `arguments` text not yet emitted.
    pub pending: String,
    /// The call's start has been emitted (set by the parser).
    pub started: bool,
}

impl CallObject {
    /// The name, once, when it has just completed.
    pub fn take_name(&mut self) -> Option<String> {
        self.name_ready.take()
    }

    /// Feeds one character (`at`: its byte offset in the output); true when it closed the object.
    pub fn feed(&mut self, c: char, at: usize) -> Result<bool, ToolParseError> {
        let syntax = |expected| ToolParseError::Syntax { at, expected };
        let ws = c.is_whitespace();
        match self.state {
            State::Open if ws => {}
            State::Open if c == '{' => self.state = State::BeforeKey,
            State::Open => return Err(syntax("`{` opening a tool call")),
            State::BeforeKey | State::AfterValue if ws => {}
            State::BeforeKey if c == '"' => {
                self.raw.clear();
                self.key_scan = ValueScan::default();
                self.key_scan.feed(c);
                self.raw.push(c);
                self.state = State::Key;
            }
            State::BeforeKey | State::AfterValue if c == '}' => return Ok(true),
            State::BeforeKey => return Err(syntax("a key in a tool call")),
            State::Key => {
                self.raw.push(c);
                if self.key_scan.feed(c) == Scan::EndedWith {
                    self.state = State::Colon;
                }
            }
            State::Colon if ws => {}
            State::Colon if c == ':' => {
                let key: String = serde_json::from_str(&self.raw).map_err(|_| syntax("a JSON key"))?;
                self.kind = match key.as_str() {
                    "name" if self.name.is_some() => return Err(syntax("one `name`")),
                    "name" => Kind::Name,
                    "arguments" | "parameters" if self.has_arguments => {
                        return Err(syntax("one `arguments`"));
                    }
                    "arguments" | "parameters" => Kind::Arguments,
                    _ => Kind::Skip,
                };
                self.state = State::BeforeValue;
            }
            State::Colon => return Err(syntax("`:` after a key")),
            State::BeforeValue if ws => {}
            State::BeforeValue => {
                match self.kind {
                    Kind::Name if c != '"' => return Err(syntax("a string `name`")),
                    Kind::Arguments if c != '{' => {
                        return Err(ToolParseError::BadArguments {
                            detail: "they do not start with `{`".into(),
                        });
                    }
                    Kind::Arguments => self.has_arguments = true,
                    _ => {}
                }
                self.value = ValueScan::default();
                self.raw.clear();
                self.state = State::Value;
                return self.feed(c, at);
            }
            State::Value => {
                let scan = self.value.feed(c);
                if scan != Scan::EndedBefore {
                    match self.kind {
                        Kind::Name => self.raw.push(c),
                        Kind::Arguments => {
                            self.pending.push(c);
                            self.raw.push(c);
                        }
                        Kind::Skip => {}
                    }
                }
                if scan == Scan::In {
                    return Ok(false);
                }
                match self.kind {
                    Kind::Name => {
                        let name: String =
                            serde_json::from_str(&self.raw).map_err(|_| syntax("a JSON string"))?;
                        self.name = Some(name.clone());
                        self.name_ready = Some(name);
                    }
                    Kind::Arguments => check_arguments(&self.raw)?,
                    Kind::Skip => {}
                }
                self.state = State::AfterValue;
                if scan == Scan::EndedBefore {
                    return self.feed(c, at);
                }
            }
            State::AfterValue if c == ',' => self.state = State::BeforeKey,
            State::AfterValue => return Err(syntax("`,` or `}` in a tool call")),
        }
        Ok(false)
    }
}

/// Llama 3: whether text after an opening `{` starts a call (first key `"name"` or `"type"`), or `None`
/// while it could still go either way.
pub(super) fn llama3_first_key(after_brace: &str) -> Option<bool> {
    let rest = after_brace.trim_start();
    let keys = ["\"name\"", "\"type\""];
    if keys.iter().any(|k| rest.starts_with(k)) {
        Some(true)
    } else if keys.iter().any(|k| k.starts_with(rest)) {
        None
    } else {
        Some(false)
    }
}

/// Whether `buf` starts with `tag`: `Some(true)`, `Some(false)`, or `None` while `buf` is a proper prefix.
pub(super) fn tag_at_start(buf: &str, tag: &str) -> Option<bool> {
    if buf.starts_with(tag) {
        Some(true)
    } else if tag.starts_with(buf) {
        None
    } else {
        Some(false)
    }
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

/// Checks that a complete `arguments` text is a JSON object.
pub(super) fn check_arguments(text: &str) -> Result<(), ToolParseError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(_) => Err(ToolParseError::BadArguments {
            detail: "not an object".into(),
        }),
        Err(e) => Err(ToolParseError::BadArguments {
            detail: e.to_string(),
        }),
    }
}
