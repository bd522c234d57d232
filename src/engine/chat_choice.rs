//! What a chat choice's generated text becomes in the response: for models whose chat template has think
//! blocks (Qwen3, QwQ, DeepSeek-R1: `<think>…</think>`), the text inside goes to `reasoning_content` (and
//! `reasoning`, its other common name) and the rest to `content`, in full responses and in deltas alike;
//! the completion tokens spent while thinking are counted for `usage.completion_tokens_details`. With
//! `tools`, the answer part then goes through the model family's [`ToolCallParser`]: its calls become
//! `tool_calls` deltas the way OpenAI streams them (the first of a call with `index`, `id`, `type` and the
//! name, then `arguments` fragments), the rest stays `content`.

use super::reasoning::{ReasoningSplitter, ReasoningSyntax, Split, prompt_ends_in_think};
use super::tools::{ToolCallParser, ToolEvent};
use crate::api::ApiError;
use crate::api::response::{FunctionDelta, ToolCallDelta};
use crate::api::unions::FunctionType;
use crate::sampling::Rng;

/// What one step of a choice adds to its message.
#[derive(Debug, Default)]
pub struct ChoiceOut {
    pub reasoning: String,
    pub content: String,
    pub tool_calls: Vec<ToolCallDelta>,
}

/// `call_` and 24 letters and digits, as OpenAI's ids look.
pub fn call_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = Rng::new(Rng::entropy_seed(), 0);
    let tail: String = (0..24)
        .map(|_| ALPHABET[(rng.next_f64() * ALPHABET.len() as f64) as usize % ALPHABET.len()] as char)
        .collect();
    format!("call_{tail}")
}

/// One choice's text post-processing, fed with each step's released text.
#[derive(Debug)]
pub struct ChoiceText {
    splitter: Option<ReasoningSplitter>,
    tools: Option<ToolCallParser>,
    /// Completion tokens generated while inside a think block.
    pub reasoning_tokens: u32,
}

impl ChoiceText {
    /// For a prompt rendered from a template with `syntax` (when it has think blocks): a prompt that
    /// already opens a think block (QwQ, DeepSeek-R1) starts the choice inside it.
    pub fn new(syntax: Option<&ReasoningSyntax>, prompt: &str) -> Self {
        Self {
            splitter: syntax.map(|s| ReasoningSplitter::new(s.clone(), prompt_ends_in_think(prompt, s))),
            tools: None,
            reasoning_tokens: 0,
        }
    }

    /// Also parses the answer for tool calls.
    pub fn with_tools(mut self, parser: ToolCallParser) -> Self {
        self.tools = Some(parser);
        self
    }

    /// How many tool calls the choice has made (its finish reason is `tool_calls` when any).
    pub fn calls(&self) -> usize {
        self.tools.as_ref().map_or(0, ToolCallParser::calls)
    }

    /// One step's text through [`ChoiceText::push`] and the tool-call parser. A call the model botched
    /// (unknown function, arguments that are not an object, a broken wrapper) ends the stream with an
    /// error naming what was wrong; a call cut off by `max_tokens` stands as far as it got.
    pub fn step(&mut self, text: &str, tokens: u32, last: bool, length: bool) -> Result<ChoiceOut, ApiError> {
        let split = self.push(text, tokens, last);
        let Some(parser) = &mut self.tools else {
            return Ok(ChoiceOut {
                reasoning: split.reasoning,
                content: split.content,
                tool_calls: Vec::new(),
            });
        };
        let mut events = parser.push(&split.content);
        if last {
            match parser.finish() {
                Ok(more) => events.extend(more),
                Err(super::tools::ToolParseError::Truncated) if length => {}
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        let mut out = ChoiceOut {
            reasoning: split.reasoning,
            ..ChoiceOut::default()
        };
        for event in events {
            match event {
                ToolEvent::Content(text) => out.content.push_str(&text),
                ToolEvent::Start { index, name } => out.tool_calls.push(ToolCallDelta {
                    index: index as u32,
                    id: Some(call_id()),
                    kind: Some(FunctionType::Function),
                    function: Some(FunctionDelta {
                        name: Some(name),
                        arguments: Some(String::new()),
                    }),
                }),
                ToolEvent::Arguments { index, fragment } => match out.tool_calls.last_mut() {
                    // Fragments of the same call within one step are merged into one delta.
                    Some(d) if d.index == index as u32 => {
                        if let Some(f) = &mut d.function {
                            f.arguments.get_or_insert_default().push_str(&fragment);
                        }
                    }
                    _ => out.tool_calls.push(ToolCallDelta {
                        index: index as u32,
                        id: None,
                        kind: None,
                        function: Some(FunctionDelta {
                            name: None,
                            arguments: Some(fragment),
                        }),
                    }),
                },
            }
        }
        Ok(out)
    }

    /// One step's text (`tokens` generated in it); `last` releases whatever the splitter still holds.
    pub fn push(&mut self, text: &str, tokens: u32, last: bool) -> Split {
        let Some(splitter) = &mut self.splitter else {
            return Split {
                reasoning: String::new(),
                content: text.to_owned(),
            };
        };
        let was_inside = splitter.in_reasoning();
        let mut split = splitter.push(text);
        // A token counts as reasoning when it was generated inside the block or it adds to the reasoning
        // (the open tag's token, and the one that closes the block).
        if was_inside || splitter.in_reasoning() || !split.reasoning.is_empty() {
            self.reasoning_tokens += tokens;
        }
        if last {
            let tail = splitter.finish();
            split.reasoning.push_str(&tail.reasoning);
            split.content.push_str(&tail.content);
        }
        split
    }
}
