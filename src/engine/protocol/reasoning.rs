//! Splitting a reasoning model's thinking from its answer.
//!
//! Qwen3, QwQ, DeepSeek-R1 and their kin write `<think>…</think>` before the answer; Gemma 4 writes
//! `<|channel>thought\n…<channel|>`. OpenAI-compatible servers return the inside as `reasoning_content` and
//! the rest as `content`, in full responses and in streamed deltas alike. [`ReasoningSplitter`] does that
//! split incrementally over text fragments of any size: a tag cut across fragments is held back until it
//! either completes or fails (as [`super::detok::StopMatcher`] holds back a partial stop string), so the
//! concatenated output does not depend on where the text was cut.
//!
//! The rules, which follow what Qwen3's template does when it re-renders `reasoning_content` in history
//! (`reasoning_content.strip('\n')` between `<think>\n` and `\n</think>\n\n`, `content.lstrip('\n')`):
//! - Reasoning is trimmed: whitespace right after the open tag and right before the close tag is dropped.
//! - Whitespace right after the close tag (Qwen3's `\n\n`) is not content.
//! - Unless the prompt already ends inside an open think block (`starts_inside`, see
//!   [`prompt_ends_in_think`]), a think block counts only if it is the first non-whitespace text: otherwise
//!   the model did not think and everything, tags included, is content, untouched.
//! - A think block never closed (the output hit `max_tokens`) is all reasoning.
//! - Text after the close tag is content verbatim, even if it contains further tags, except for two family
//!   rules taken from llama.cpp's parsers ([`ReasoningSyntax`]): Qwen3.5 and the other Qwen3-Coder-style
//!   templates end a think block at `<tool_call>` too (kept as content, for the tool-call parser), and
//!   Gemma 4's thought blocks may come anywhere (every one is reasoning; a stray `<channel|>` is dropped).

/// A model family's think tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasoningSyntax {
    pub open: String,
    pub close: String,
    /// A tag that also ends the block, and is then the start of the content (Qwen3.5's `<tool_call>`, as
    /// llama.cpp's Qwen3-Coder parser takes it: the model may call a tool without closing its thoughts).
    pub ended_by: Option<String>,
    /// Blocks may come anywhere in the output, each of them reasoning, and a close tag outside a block is
    /// dropped (Gemma 4, as llama.cpp's Gemma 4 parser reads its channels).
    pub anywhere: bool,
}

impl ReasoningSyntax {
    /// `<think>` / `</think>`: Qwen3, QwQ, DeepSeek-R1 (and its distills), SmolLM3, GLM, …
    pub fn think() -> Self {
        Self {
            open: "<think>".into(),
            close: "</think>".into(),
            ended_by: None,
            anywhere: false,
        }
    }

    /// `<think>` / `</think>`, a `<tool_call>` also ending the block: Qwen3.5 and the other templates with
    /// Qwen3-Coder's XML tool calls.
    pub fn think_until_call() -> Self {
        Self {
            ended_by: Some("<tool_call>".into()),
            ..Self::think()
        }
    }

    /// `<|channel>thought` / `<channel|>`: Gemma 4's thought channel, which may open more than once.
    pub fn gemma4() -> Self {
        Self {
            open: "<|channel>thought".into(),
            close: "<channel|>".into(),
            ended_by: None,
            anywhere: true,
        }
    }
}

/// The think tags a chat template uses, if any: templates of reasoning models mention the close tag (to strip
/// reasoning from history, or to close an empty think block when thinking is off); Gemma 4's name its
/// thought channel.
pub fn reasoning_syntax(template_source: &str) -> Option<ReasoningSyntax> {
    let src = template_source;
    if src.contains("<|channel>thought") {
        return Some(ReasoningSyntax::gemma4());
    }
    if !src.contains("</think>") {
        return None;
    }
    let xml_calls = ["<tool_call>", "<function=", "<parameter="]
        .iter()
        .all(|m| src.contains(m));
    Some(match xml_calls {
        true => ReasoningSyntax::think_until_call(),
        false => ReasoningSyntax::think(),
    })
}

/// Whether a rendered prompt ends inside an open think block (the open tag after the last close tag), as
/// DeepSeek-R1's and QwQ's generation prompts do (`<｜Assistant｜><think>\n`): the model's output then starts
/// with reasoning, and the splitter must be built with `starts_inside`.
pub fn prompt_ends_in_think(prompt: &str, syntax: &ReasoningSyntax) -> bool {
    match (prompt.rfind(&syntax.open), prompt.rfind(&syntax.close)) {
        (Some(open), Some(close)) => open > close,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// What a fragment of output contributes to each part (either may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

impl Split {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: a think block may still open.
    Start,
    /// Inside the think block; `fresh` while only whitespace has followed the open tag.
    Reasoning { fresh: bool },
    /// The answer; `fresh` while only whitespace has followed the close tag.
    Content { fresh: bool },
}

/// Splits one choice's output into reasoning and content, fragment by fragment.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    syntax: ReasoningSyntax,
    state: State,
    /// Text received but not yet attributed (a possible tag prefix, or whitespace whose fate is open).
    held: String,
}

impl ReasoningSplitter {
    /// `starts_inside`: the prompt ended inside an open think block ([`prompt_ends_in_think`]).
    pub fn new(syntax: ReasoningSyntax, starts_inside: bool) -> Self {
        let state = if starts_inside {
            State::Reasoning { fresh: true }
        } else {
            State::Start
        };
        Self {
            syntax,
            state,
            held: String::new(),
        }
    }

    /// Whether the output is (so far) inside the think block.
    pub fn in_reasoning(&self) -> bool {
        matches!(self.state, State::Reasoning { .. })
    }

    /// Adds a fragment and returns what can be attributed now.
    pub fn push(&mut self, text: &str) -> Split {
        self.held.push_str(text);
        let mut out = Split::default();
        let mut buf = std::mem::take(&mut self.held);
        loop {
            match self.state {
                State::Start => {
                    let rest = buf.trim_start();
                    if let Some(after) = rest.strip_prefix(self.syntax.open.as_str()) {
                        buf = after.to_owned();
                        self.state = State::Reasoning { fresh: true };
                    } else if self.syntax.open.starts_with(rest) {
                        self.held = buf; // whitespace, or a prefix of the open tag
                        return out;
                    } else {
                        self.state = State::Content { fresh: false };
                    }
                }
                State::Reasoning { fresh } => {
                    if fresh {
                        buf = buf.trim_start().to_owned();
                        if buf.is_empty() {
                            return out;
                        }
                        self.state = State::Reasoning { fresh: false };
                    }
                    let close = buf.find(self.syntax.close.as_str());
                    let ended = self.syntax.ended_by.as_deref().and_then(|t| buf.find(t));
                    let first = match (close, ended) {
                        (Some(c), Some(e)) if e < c => Some((e, false)),
                        (Some(c), _) => Some((c, true)),
                        (None, e) => e.map(|e| (e, false)),
                    };
                    if let Some((at, closed)) = first {
                        out.reasoning.push_str(buf[..at].trim_end());
                        // A close tag goes; the tag that also ends the block stays: it opens the content.
                        let skip = if closed { self.syntax.close.len() } else { 0 };
                        buf = buf[at + skip..].to_owned();
                        self.state = State::Content { fresh: true };
                        continue;
                    }
                    // Hold back a possible start of a closing tag and the whitespace before it.
                    let partial = partial_suffix(&buf, &self.syntax.close).max(
                        self.syntax
                            .ended_by
                            .as_deref()
                            .map_or(0, |t| partial_suffix(&buf, t)),
                    );
                    let keep = buf[..buf.len() - partial].trim_end().len();
                    out.reasoning.push_str(&buf[..keep]);
                    self.held = buf[keep..].to_owned();
                    return out;
                }
                State::Content { fresh } => {
                    if fresh {
                        buf = buf.trim_start().to_owned();
                        if buf.is_empty() {
                            return out;
                        }
                        self.state = State::Content { fresh: false };
                    }
                    if !self.syntax.anywhere {
                        out.content.push_str(&buf);
                        return out;
                    }
                    // A later block opens (its text is reasoning), a stray close tag is dropped.
                    let (open, close) = (self.syntax.open.as_str(), self.syntax.close.as_str());
                    let tags = [(buf.find(open), open), (buf.find(close), close)];
                    if let Some((at, tag)) = tags
                        .into_iter()
                        .filter_map(|(at, tag)| at.map(|at| (at, tag)))
                        .min()
                    {
                        out.content.push_str(&buf[..at]);
                        buf = buf[at + tag.len()..].to_owned();
                        self.state = match tag == open {
                            true => State::Reasoning { fresh: true },
                            false => State::Content { fresh: false },
                        };
                        continue;
                    }
                    let partial = partial_suffix(&buf, open).max(partial_suffix(&buf, close));
                    out.content.push_str(&buf[..buf.len() - partial]);
                    self.held = buf[buf.len() - partial..].to_owned();
                    return out;
                }
            }
        }
    }

    /// Releases what is still held back: the output ended.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            // Whitespace only, or an open tag never completed: the model did not think.
            State::Start => Split {
                reasoning: String::new(),
                content: held,
            },
            // Trailing whitespace of reasoning is dropped; a close tag's beginning is reasoning text.
            State::Reasoning { .. } => Split {
                reasoning: held.trim_end().to_owned(),
                content: String::new(),
            },
            // Only where blocks may come anywhere: the start of a tag that never completed.
            State::Content { .. } => Split {
                reasoning: String::new(),
                content: held,
            },
        }
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `tag`.
pub(crate) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .filter(|&k| tag.is_char_boundary(k))
        .find(|&k| text.ends_with(&tag[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
