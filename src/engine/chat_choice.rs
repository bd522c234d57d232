//! What a chat choice's generated text becomes in the response: for models whose chat template has think
//! blocks (Qwen3, QwQ, DeepSeek-R1: `<think>…</think>`), the text inside goes to `reasoning_content` (and
//! `reasoning`, its other common name) and the rest to `content`, in full responses and in deltas alike;
//! the completion tokens spent while thinking are counted for `usage.completion_tokens_details`.

use super::reasoning::{ReasoningSplitter, ReasoningSyntax, Split, prompt_ends_in_think};

/// One choice's text post-processing, fed with each step's released text.
#[derive(Debug)]
pub struct ChoiceText {
    splitter: Option<ReasoningSplitter>,
    /// Completion tokens generated while inside a think block.
    pub reasoning_tokens: u32,
}

impl ChoiceText {
    /// For a prompt rendered from a template with `syntax` (when it has think blocks): a prompt that
    /// already opens a think block (QwQ, DeepSeek-R1) starts the choice inside it.
    pub fn new(syntax: Option<&ReasoningSyntax>, prompt: &str) -> Self {
        Self {
            splitter: syntax.map(|s| ReasoningSplitter::new(s.clone(), prompt_ends_in_think(prompt, s))),
            reasoning_tokens: 0,
        }
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
