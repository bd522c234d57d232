//! What a chat choice's generated text becomes in the response: for models whose chat template has think
//! blocks (Qwen3, QwQ, DeepSeek-R1: `<think>…</think>`; Gemma 4: `<|channel>thought…<channel|>`), the text
//! inside goes to `reasoning_content` (and `reasoning`, its other common name) and the rest to `content`,
//! in full responses and in deltas alike; the completion tokens spent while thinking are counted for
//! `usage.completion_tokens_details`. With
//! `tools`, the answer part then goes through the model family's [`ToolCallParser`]: its calls become
//! `tool_calls` deltas the way OpenAI streams them (the first of a call with `index`, `id`, `type` and the
//! name, then `arguments` fragments), the rest stays `content`.
//!
//! Under `tool_choice: "auto"` nothing constrains the model, and a small one botches calls (an unknown
//! function, arguments that are not an object, a broken wrapper). As llama.cpp does, such an answer comes
//! back as plain content: from the first call on, the choice's deltas are held until its output is parsed
//! whole; then they go out as they are, or, when the calls are malformed, the held text is the content and
//! the choice has made no call. Forced calls (`required`, a named function) are grammar-constrained, and a
//! malformed one stays an error.

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
    /// `tool_choice: "auto"`: malformed calls fall back to content (see the module docs).
    lenient: bool,
    /// Lenient: the deltas held since the first call started (`None` before it).
    held: Option<Vec<ToolEvent>>,
    /// Lenient: the content released before the first call.
    released: String,
    /// Lenient: the calls were malformed and came back as content.
    fell_back: bool,
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
            lenient: false,
            held: None,
            released: String::new(),
            fell_back: false,
            reasoning_tokens: 0,
        }
    }

    /// Also parses the answer for tool calls; `lenient` (`tool_choice: "auto"`): malformed calls come back
    /// as content instead of an error.
    pub fn with_tools(mut self, parser: ToolCallParser, lenient: bool) -> Self {
        self.tools = Some(parser);
        self.lenient = lenient;
        self
    }

    /// How many tool calls the choice has made (its finish reason is `tool_calls` when any).
    pub fn calls(&self) -> usize {
        match self.fell_back {
            true => 0,
            false => self.tools.as_ref().map_or(0, ToolCallParser::calls),
        }
    }

    /// Lenient parsing of one step's events: content streams until the first call starts; from then on
    /// everything is held until `last`, and released as it is, or as the raw text when `failed`.
    fn hold(&mut self, events: Vec<ToolEvent>, last: bool, failed: bool) -> Vec<ToolEvent> {
        let mut out = Vec::new();
        for event in events {
            match (&mut self.held, event) {
                (None, ToolEvent::Content(text)) => {
                    self.released.push_str(&text);
                    out.push(ToolEvent::Content(text));
                }
                (None, event) => self.held = Some(vec![event]),
                (Some(held), event) => held.push(event),
            }
        }
        if last && let Some(held) = self.held.take() {
            if failed {
                self.fell_back = true;
                let text = self.tools.as_ref().map_or("", ToolCallParser::text);
                let rest = text.strip_prefix(self.released.as_str()).unwrap_or(text);
                out.push(ToolEvent::Content(rest.to_owned()));
            } else {
                out.extend(held);
            }
        } else if last && failed {
            // Malformed without a call started (a broken opener): the text not yet released.
            let text = self.tools.as_ref().map_or("", ToolCallParser::text);
            if let Some(rest) = text.strip_prefix(self.released.as_str()) {
                out.push(ToolEvent::Content(rest.to_owned()));
            }
            self.fell_back = true;
        }
        out
    }

    /// One step's text through [`ChoiceText::push`] and the tool-call parser. A call the model botched
    /// (unknown function, arguments that are not an object, a broken wrapper) is plain content under
    /// `auto` and otherwise ends the stream with an error naming what was wrong; a call cut off by
    /// `max_tokens` stands as far as it got.
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
        let mut failed = false;
        if last {
            match parser.finish() {
                Ok(more) => {
                    // A forced choice cut by `max_tokens` after a call: its grammar allows no free text
                    // there, only the next call, so what the parser still held is that call's cut-off
                    // opener (`<tool_call`), not content.
                    let cut_opener = length && !self.lenient && parser.calls() > 0;
                    events.extend(
                        more.into_iter()
                            .filter(|e| !(cut_opener && matches!(e, ToolEvent::Content(_)))),
                    );
                }
                Err(super::tools::ToolParseError::Truncated) if length => {}
                Err(_) if self.lenient => failed = true,
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        if self.lenient {
            events = self.hold(events, last, failed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::protocol::tools::ToolFormat;

    fn text(lenient: bool) -> ChoiceText {
        let parser = ToolCallParser::new(ToolFormat::Hermes, vec!["get_weather".into()]);
        ChoiceText::new(None, "").with_tools(parser, lenient)
    }

    /// Feeds `pieces` as steps (the last one ends the choice): the content and the calls' deltas.
    fn run(t: &mut ChoiceText, pieces: &[&str]) -> Result<(Vec<String>, Vec<ToolCallDelta>), ApiError> {
        let (mut content, mut calls) = (Vec::new(), Vec::new());
        for (i, p) in pieces.iter().enumerate() {
            let out = t.step(p, 1, i + 1 == pieces.len(), false)?;
            content.push(out.content);
            calls.extend(out.tool_calls);
        }
        Ok((content, calls))
    }

    #[test]
    fn under_auto_a_malformed_call_comes_back_as_content() {
        let pieces = [
            "Let me see. ",
            "<tool_call>",
            "{\"name\": \"get_time\", ",
            "\"arguments\": {}}",
            "</tool_call>",
        ];
        let mut strict = text(false);
        assert!(
            run(&mut strict, &pieces).is_err(),
            "forced calls: an unknown function is an error"
        );
        let mut auto = text(true);
        let (content, calls) = run(&mut auto, &pieces).expect("no error under auto");
        assert!(calls.is_empty());
        assert_eq!(auto.calls(), 0, "the finish reason is not tool_calls");
        assert_eq!(
            content[0], "Let me see.",
            "content before the call streams as it comes"
        );
        assert!(
            content[1..4].iter().all(String::is_empty),
            "held until the output is whole"
        );
        assert_eq!(content.concat(), pieces.concat(), "all of the text, as content");
        // Arguments that are not an object, and a wrapper left open at the end.
        for bad in [
            vec!["<tool_call>{\"name\": \"get_weather\", \"arguments\": 3}</tool_call>"],
            vec!["<tool_call>{\"name\": \"get_weather\"", " oops"],
        ] {
            let mut auto = text(true);
            let (content, calls) = run(&mut auto, &bad).expect("no error under auto");
            assert!(calls.is_empty() && auto.calls() == 0);
            assert_eq!(content.concat(), bad.concat());
        }
    }

    #[test]
    fn a_forced_choice_cut_inside_the_next_opener_keeps_its_calls_and_no_content() {
        let call =
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n";
        let mut forced = text(false);
        let first = forced.step(call, 1, false, false).expect("a call");
        let cut = forced
            .step("<tool_call", 1, true, true)
            .expect("cut by max_tokens");
        assert_eq!((first.content.as_str(), cut.content.as_str()), ("", ""));
        assert_eq!(forced.calls(), 1);
        // Not cut by the budget, the same tail is not silently dropped: it is a malformed end.
        let mut ended = text(false);
        ended.step(call, 1, false, false).expect("a call");
        let tail = ended.step("<tool_call", 1, true, false);
        assert!(
            tail.map_or(true, |o| o.content == "<tool_call"),
            "kept or refused, never dropped"
        );
    }

    #[test]
    fn under_auto_a_good_call_is_held_then_released_whole() {
        let pieces = [
            "<tool_call>{\"name\": \"get_weather\", ",
            "\"arguments\": {\"city\": \"Oslo\"}}",
            "</tool_call>",
        ];
        let mut auto = text(true);
        let (content, calls) = run(&mut auto, &pieces).expect("parsed");
        assert_eq!(content.concat(), "");
        assert_eq!(auto.calls(), 1);
        let name = calls
            .first()
            .and_then(|d| d.function.as_ref())
            .and_then(|f| f.name.clone());
        assert_eq!(name.as_deref(), Some("get_weather"));
        let args: String = calls
            .iter()
            .filter_map(|d| d.function.as_ref().and_then(|f| f.arguments.clone()))
            .collect();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&args).unwrap()["city"],
            "Oslo"
        );
    }
}
