//! Tool calls: which syntax a model family writes them in, parsing them out of the output as it streams, and
//! the grammar that forces them (`tool_choice` `required` or a named function).
//!
//! kiln renders `tools` through the model's own chat template; the model answers in its family's syntax:
//! - [`ToolFormat::Hermes`] (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3): `<tool_call>\n{"name": "f", "arguments":
//!   {…}}\n</tool_call>`, possibly several in a row; text before the first is content.
//! - [`ToolFormat::Llama3Json`] (Llama 3.1 / 3.2 / 3.3): the whole output is `{"name": "f", "parameters": {…}}`,
//!   optionally after `<|python_tag|>`, several separated by `;`. Output that does not open with
//!   `<|python_tag|>` or with `{` whose first key is `"name"` (or `"type"`) is content.
//! - [`ToolFormat::Mistral`] (Mistral Nemo): `[TOOL_CALLS][{"name": "f", "arguments": {…}, "id": "…"}, …]`.
//! - [`ToolFormat::MistralArgs`] (Mistral Small 3.2, Devstral, Ministral 3): `[TOOL_CALLS]f[ARGS]{…}` per call,
//!   `[CALL_ID]id` optionally between the name and `[ARGS]`.
//! - [`ToolFormat::QwenXml`] (Qwen3.5, Qwen3-Coder, Nemotron Nano 3): `<tool_call>\n<function=f>\n
//!   <parameter=k>\nv\n</parameter>\n</function>\n</tool_call>`, the parameters made into JSON ([`xml`]).
//! - [`ToolFormat::Gemma4`]: `<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>`, Gemma's notation made into JSON
//!   ([`gemma`]).
//!
//! The Mistral parsers accept both Mistral syntaxes, and inside a call object `arguments` and `parameters`
//! are synonyms, keys come in any order and other keys (`id`, `type`) are skipped.
//!
//! [`ToolCallParser`] turns text fragments into [`ToolEvent`]s the way OpenAI streams `tool_calls`: a call's
//! [`ToolEvent::Start`] once its name is complete, then [`ToolEvent::Arguments`] fragments as soon as they are
//! known to belong to its `arguments` object. The fragments concatenate to the object **exactly as the model
//! wrote it**, from its `{` to its matching `}` (surrounding whitespace dropped, inner whitespace kept), which
//! is the JSON string OpenAI puts in `function.arguments`; a call without `arguments` gets `{}` (the XML and
//! Gemma 4 formats, whose arguments are not JSON, stream the JSON they convert to). Content is
//! passed through verbatim, except whitespace between content and a call, between calls and after them.
//!
//! Malformed output is an error from [`ToolCallParser::finish`] (pushes after the first error return no
//! events): a name not among the request's tools, `arguments` that is not a JSON object (checked with
//! `serde_json` when it closes), a wrapper that breaks the family's syntax, or output that ends inside a call.
//! Events already returned stand; [`ToolCallParser::text`] keeps the whole output so that the caller can
//! fall back to returning it as content.

mod gemma;
mod grammar;
mod scan;
mod xml;

pub use grammar::{GrammarOptions, ToolGrammarError, call_grammar};

use super::reasoning::partial_suffix;
use gemma::Gemma;
use scan::{CallObject, Scan, ValueScan, check_arguments, is_name_char, llama3_first_key, tag_at_start};
use xml::Xml;

/// A model family's tool-call syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3Json,
    Mistral,
    MistralArgs,
    QwenXml,
    Gemma4,
}

/// The tool-call syntax a chat template teaches, if kiln knows it. Keys on the template text:
/// - `[TOOL_CALLS]` → [`ToolFormat::MistralArgs`] when `[ARGS]` appears too, else [`ToolFormat::Mistral`];
/// - `'<|tool_call>call:'` → [`ToolFormat::Gemma4`] (llama.cpp's test);
/// - `<tool_call>`, `<function=` and `<parameter=`, unless the template writes `<tool_call><function=`
///   without the line break → [`ToolFormat::QwenXml`] (llama.cpp's test for its Qwen3-Coder parser);
/// - `<tool_call>` with a JSON `"name"` key, and none of the markers of other `<tool_call>` syntaxes
///   (Qwen3-Coder's `<function=`, GLM's `<arg_key>`, MiniMax's `<invoke`, Apriel's `<tool_calls>`) →
///   [`ToolFormat::Hermes`];
/// - Llama 3's header tokens with `"parameters"` → [`ToolFormat::Llama3Json`].
pub fn tool_format(template_source: &str) -> Option<ToolFormat> {
    let src = template_source;
    if src.contains("'<|tool_call>call:'") {
        return Some(ToolFormat::Gemma4);
    }
    let xml = ["<tool_call>", "<function=", "<parameter="];
    if xml.iter().all(|m| src.contains(m)) && !src.contains("'<tool_call><function=' ~ tool_call.name ~ '>'")
    {
        return Some(ToolFormat::QwenXml);
    }
    if src.contains("[TOOL_CALLS]") {
        return Some(if src.contains("[ARGS]") {
            ToolFormat::MistralArgs
        } else {
            ToolFormat::Mistral
        });
    }
    let other = ["<function=", "<arg_key>", "<invoke", "<tool_calls>"];
    if src.contains("<tool_call>") && src.contains("\"name\"") && !other.iter().any(|m| src.contains(m)) {
        return Some(ToolFormat::Hermes);
    }
    if src.contains("<|start_header_id|>") && src.contains("\"parameters\"") {
        return Some(ToolFormat::Llama3Json);
    }
    None
}

/// One step of a choice's output, as streaming needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Plain text outside calls.
    Content(String),
    /// A call begins: its index among this choice's calls, and the function's name.
    Start { index: usize, name: String },
    /// The next piece of a call's `arguments` JSON text.
    Arguments { index: usize, fragment: String },
}

/// The model's tool calls could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolParseError {
    #[error("the model called `{name}`, which is not one of the request's `tools`")]
    UnknownTool { name: String },
    #[error("a tool call of the model has no `name`")]
    MissingName,
    #[error("the `arguments` of a tool call of the model are not a JSON object: {detail}")]
    BadArguments { detail: String },
    #[error("a tool call of the model is malformed at byte {at} of its output: expected {expected}")]
    Syntax { at: usize, expected: &'static str },
    #[error("the model's output ended inside a tool call")]
    Truncated,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const GEMMA_OPEN: &str = "<|tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Content, looking for the family's opening tag; `fresh` after a call (whitespace is dropped).
    Outside {
        fresh: bool,
    },
    /// Llama 3: nothing decided yet (leading whitespace, or a prefix of a call opener).
    Undecided,
    /// Llama 3: the output is content, to the end.
    AllContent,
    /// Expecting a call object (after `<tool_call>`, after `<|python_tag|>` or `;`, inside a Nemo array).
    Object,
    /// Inside a call object.
    InObject,
    /// After a call object: Hermes expects `</tool_call>`, Llama 3 `;` or the end, Nemo `,` or `]`.
    AfterObject,
    /// Mistral: after `[TOOL_CALLS]`, expecting `[` or a name.
    AfterToolCalls,
    /// Mistral `name[CALL_ID]id[ARGS]{…}`: the name, then the markers, then the arguments.
    ArgsName,
    ArgsMarker,
    ArgsValue,
    /// Inside an XML call (after `<tool_call>`).
    Xml(Xml),
    /// Inside a Gemma 4 call (after `<|tool_call>`).
    Gemma(Gemma),
    Failed,
}

/// Parses one choice's output into content and tool calls, fragment by fragment.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    format: ToolFormat,
    tool_names: Vec<String>,
    /// `(name, parameters schema)` of the tools, where known (the XML format types its values by them).
    schemas: Vec<(String, serde_json::Value)>,
    mode: Mode,
    /// Text not yet consumed (a possible tag prefix, held whitespace, or not yet processed).
    buf: String,
    /// Bytes of the output consumed before `buf`.
    offset: usize,
    /// The whole output.
    text: String,
    /// Calls started so far.
    calls: usize,
    object: CallObject,
    /// Mistral `[ARGS]` syntax: the name so far; XML: the current call's name. Mistral's arguments' scanner.
    name: String,
    value: ValueScan,
    error: Option<ToolParseError>,
    events: Vec<ToolEvent>,
}

impl ToolCallParser {
    /// `tool_names`: the names of the request's `tools` (a call of any other name is an error).
    pub fn new(format: ToolFormat, tool_names: Vec<String>) -> Self {
        let mode = match format {
            ToolFormat::Llama3Json => Mode::Undecided,
            _ => Mode::Outside { fresh: false },
        };
        Self {
            format,
            tool_names,
            schemas: Vec::new(),
            mode,
            buf: String::new(),
            offset: 0,
            text: String::new(),
            calls: 0,
            object: CallObject::default(),
            name: String::new(),
            value: ValueScan::default(),
            error: None,
            events: Vec::new(),
        }
    }

    /// The tools' `(name, parameters schema)`: an XML parameter whose schema allows only strings is a
    /// string, others are JSON where they parse ([`xml`]).
    pub fn with_schemas(mut self, schemas: Vec<(String, serde_json::Value)>) -> Self {
        self.schemas = schemas;
        self
    }

    /// The whole output pushed so far (for a fallback to plain content).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many calls have started.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Adds a fragment and returns the events it completes.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.text.push_str(text);
        if self.mode == Mode::Failed {
            return Vec::new();
        }
        self.buf.push_str(text);
        if let Err(e) = self.run(false) {
            self.fail(e);
        }
        std::mem::take(&mut self.events)
    }

    /// Ends the output: the remaining events, or why the calls are malformed.
    pub fn finish(&mut self) -> Result<Vec<ToolEvent>, ToolParseError> {
        if self.mode != Mode::Failed
            && let Err(e) = self.run(true).and_then(|()| self.end())
        {
            self.fail(e);
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(std::mem::take(&mut self.events)),
        }
    }

    fn fail(&mut self, e: ToolParseError) {
        self.mode = Mode::Failed;
        self.error = Some(e);
        self.buf.clear();
    }

    fn emit(&mut self, event: ToolEvent) {
        match (self.events.last_mut(), event) {
            (Some(ToolEvent::Content(a)), ToolEvent::Content(b)) => a.push_str(&b),
            (
                Some(ToolEvent::Arguments {
                    index: i,
                    fragment: a,
                }),
                ToolEvent::Arguments {
                    index: j,
                    fragment: b,
                },
            ) if *i == j => a.push_str(&b),
            (_, ToolEvent::Content(b)) if b.is_empty() => {}
            (_, event) => self.events.push(event),
        }
    }

    /// Drops the first `n` bytes of `buf`.
    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        self.offset += n;
    }

    fn syntax(&self, expected: &'static str) -> ToolParseError {
        ToolParseError::Syntax {
            at: self.offset,
            expected,
        }
    }

    /// Skips leading whitespace; false when nothing else is buffered.
    fn skip_ws(&mut self) -> bool {
        let ws = self.buf.len() - self.buf.trim_start().len();
        self.consume(ws);
        !self.buf.is_empty()
    }

    fn opener(&self) -> &'static str {
        match self.format {
            ToolFormat::Hermes | ToolFormat::QwenXml => HERMES_OPEN,
            ToolFormat::Gemma4 => GEMMA_OPEN,
            ToolFormat::Llama3Json => PYTHON_TAG,
            ToolFormat::Mistral | ToolFormat::MistralArgs => TOOL_CALLS,
        }
    }

    /// Processes `buf` as far as it can be decided; `end`: no more text will come.
    fn run(&mut self, end: bool) -> Result<(), ToolParseError> {
        loop {
            match self.mode {
                Mode::Outside { fresh } => {
                    if fresh && !self.skip_ws() {
                        return Ok(());
                    }
                    let tag = self.opener();
                    if let Some(at) = self.buf.find(tag) {
                        // Whitespace between content and a call is not content.
                        let content = self.buf[..at].trim_end().to_owned();
                        self.emit(ToolEvent::Content(content));
                        self.consume(at + tag.len());
                        self.mode = match self.format {
                            ToolFormat::Hermes => Mode::Object,
                            ToolFormat::QwenXml => Mode::Xml(Xml::default()),
                            ToolFormat::Gemma4 => Mode::Gemma(Gemma::default()),
                            _ => Mode::AfterToolCalls,
                        };
                        continue;
                    }
                    // Hold back a possible start of the tag, and the whitespace before it.
                    let keep = if end {
                        self.buf.len()
                    } else {
                        let partial = partial_suffix(&self.buf, tag);
                        self.buf[..self.buf.len() - partial].trim_end().len()
                    };
                    let content = self.buf[..keep].to_owned();
                    self.emit(ToolEvent::Content(content));
                    self.consume(keep);
                    self.mode = Mode::Outside { fresh: false };
                    return Ok(());
                }
                Mode::Undecided => {
                    let rest = self.buf.trim_start();
                    if let Some(after) = rest.strip_prefix(PYTHON_TAG) {
                        let n = self.buf.len() - after.len();
                        self.consume(n);
                        self.mode = Mode::Object;
                        continue;
                    }
                    let decided = match rest.strip_prefix('{') {
                        Some(obj) => llama3_first_key(obj),
                        None if PYTHON_TAG.starts_with(rest) => None,
                        None => Some(false),
                    };
                    match decided {
                        Some(true) => self.mode = Mode::Object,
                        Some(false) => self.mode = Mode::AllContent,
                        None if end => self.mode = Mode::AllContent,
                        None => return Ok(()),
                    }
                }
                Mode::AllContent => {
                    let content = std::mem::take(&mut self.buf);
                    self.offset += content.len();
                    self.emit(ToolEvent::Content(content));
                    return Ok(());
                }
                Mode::Object => {
                    if !self.skip_ws() {
                        return Ok(());
                    }
                    if !self.buf.starts_with('{') {
                        return Err(self.syntax("`{` opening a tool call"));
                    }
                    self.object = CallObject::default();
                    self.mode = Mode::InObject;
                }
                Mode::InObject => {
                    let mut used = 0;
                    let mut done = false;
                    let buf = std::mem::take(&mut self.buf);
                    for c in buf.chars() {
                        used += c.len_utf8();
                        let at = self.offset + used - c.len_utf8();
                        if self.object.feed(c, at)? {
                            done = true;
                            break;
                        }
                    }
                    self.buf = buf;
                    self.consume(used);
                    self.drain_object()?;
                    if !done {
                        return Ok(());
                    }
                    if self.object.name.is_none() {
                        return Err(ToolParseError::MissingName);
                    }
                    if !self.object.has_arguments {
                        let index = self.calls - 1;
                        self.emit(ToolEvent::Arguments {
                            index,
                            fragment: "{}".into(),
                        });
                    }
                    self.mode = Mode::AfterObject;
                }
                Mode::AfterObject => {
                    if !self.skip_ws() {
                        return Ok(());
                    }
                    match self.format {
                        // (XML and Gemma 4 calls never get here.)
                        ToolFormat::Hermes | ToolFormat::QwenXml | ToolFormat::Gemma4 => {
                            match tag_at_start(&self.buf, HERMES_CLOSE) {
                                Some(true) => {
                                    self.consume(HERMES_CLOSE.len());
                                    self.mode = Mode::Outside { fresh: true };
                                }
                                Some(false) => return Err(self.syntax("`</tool_call>`")),
                                None => return Ok(()),
                            }
                        }
                        ToolFormat::Llama3Json => {
                            if self.buf.starts_with(';') {
                                self.consume(1);
                                self.mode = Mode::Object;
                            } else if self.buf.starts_with('{') {
                                self.mode = Mode::Object;
                            } else {
                                self.mode = Mode::AllContent;
                            }
                        }
                        ToolFormat::Mistral | ToolFormat::MistralArgs => {
                            if self.buf.starts_with(',') {
                                self.consume(1);
                                self.mode = Mode::Object;
                            } else if self.buf.starts_with(']') {
                                self.consume(1);
                                self.mode = Mode::Outside { fresh: true };
                            } else {
                                return Err(self.syntax("`,` or `]` in the `[TOOL_CALLS]` array"));
                            }
                        }
                    }
                }
                Mode::AfterToolCalls => {
                    if !self.skip_ws() {
                        return Ok(());
                    }
                    if self.buf.starts_with('[') {
                        self.consume(1);
                        self.mode = Mode::Object;
                    } else {
                        self.name.clear();
                        self.mode = Mode::ArgsName;
                    }
                }
                Mode::ArgsName => {
                    let len = self
                        .buf
                        .find(|c: char| !is_name_char(c))
                        .unwrap_or(self.buf.len());
                    self.name.push_str(&self.buf[..len]);
                    self.consume(len);
                    if self.buf.is_empty() {
                        return Ok(());
                    }
                    if self.name.is_empty() {
                        return Err(self.syntax("a function name after `[TOOL_CALLS]`"));
                    }
                    let name = std::mem::take(&mut self.name);
                    self.start_call(name)?;
                    self.mode = Mode::ArgsMarker;
                }
                Mode::ArgsMarker => match (tag_at_start(&self.buf, ARGS), tag_at_start(&self.buf, CALL_ID)) {
                    (Some(true), _) => {
                        self.consume(ARGS.len());
                        self.value = ValueScan::default();
                        self.mode = Mode::ArgsValue;
                    }
                    (_, Some(true)) => {
                        // The model's own call id: skipped (the caller makes OpenAI-style ids).
                        match self.buf[CALL_ID.len()..].find('[') {
                            Some(len) => self.consume(CALL_ID.len() + len),
                            None => return Ok(()),
                        }
                    }
                    (None, _) | (_, None) => return Ok(()),
                    _ => return Err(self.syntax("`[ARGS]` after the function name")),
                },
                Mode::ArgsValue => {
                    if self.value.is_fresh() && !self.skip_ws() {
                        return Ok(());
                    }
                    if self.value.is_fresh() && !self.buf.starts_with('{') {
                        return Err(ToolParseError::BadArguments {
                            detail: "it does not start with `{`".into(),
                        });
                    }
                    let mut used = 0;
                    let mut done = false;
                    for c in self.buf.chars() {
                        used += c.len_utf8();
                        if self.value.feed(c) != Scan::In {
                            done = true;
                            break;
                        }
                    }
                    let fragment = self.buf[..used].to_owned();
                    self.consume(used);
                    self.value.text.push_str(&fragment);
                    let index = self.calls - 1;
                    self.emit(ToolEvent::Arguments { index, fragment });
                    if !done {
                        return Ok(());
                    }
                    check_arguments(&self.value.text)?;
                    self.mode = Mode::Outside { fresh: true };
                }
                Mode::Xml(_) => {
                    if !self.run_xml(end)? {
                        return Ok(());
                    }
                }
                Mode::Gemma(_) => {
                    if !self.run_gemma(end)? {
                        return Ok(());
                    }
                }
                Mode::Failed => return Ok(()),
            }
        }
    }

    /// Checks the state at the end of the output.
    fn end(&mut self) -> Result<(), ToolParseError> {
        match self.mode {
            Mode::Outside { .. } | Mode::AllContent | Mode::Failed => Ok(()),
            // Hermes: a complete object whose `</tool_call>` never came (the model stopped right after it).
            Mode::AfterObject
                if self.format != ToolFormat::Mistral && self.format != ToolFormat::MistralArgs =>
            {
                Ok(())
            }
            // A complete call whose `</tool_call>` (`<tool_call|>`) never came.
            Mode::Xml(ref s) if s.complete() => Ok(()),
            Mode::Gemma(ref s) if s.complete() => Ok(()),
            // Llama 3: `;` then nothing.
            Mode::Object if self.format == ToolFormat::Llama3Json && self.calls > 0 => Ok(()),
            _ => Err(ToolParseError::Truncated),
        }
    }

    /// Turns what the call object parsed into events.
    fn drain_object(&mut self) -> Result<(), ToolParseError> {
        if let Some(name) = self.object.take_name() {
            self.start_call(name)?;
        }
        if self.object.started && !self.object.pending.is_empty() {
            let fragment = std::mem::take(&mut self.object.pending);
            let index = self.calls - 1;
            self.emit(ToolEvent::Arguments { index, fragment });
        }
        Ok(())
    }

    fn start_call(&mut self, name: String) -> Result<(), ToolParseError> {
        if !self.tool_names.contains(&name) {
            return Err(ToolParseError::UnknownTool { name });
        }
        let index = self.calls;
        self.calls += 1;
        self.object.started = true;
        self.emit(ToolEvent::Start { index, name });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
