//! What a loaded model's tokenizer and chat template mean for every request, worked out once at load
//! (and again when the `chatTemplate` option replaces the template), never per request:
//! - [`ChatFormat`]: whether there is a template, its tool-call syntax (or the generic format), its think
//!   tags, and the special tokens call grammars may name;
//! - [`Vocab`] for constrained decoding, built on the first request that needs it ([`LazyVocab`]);
//! - [`ModelFormat`]: all of it together with the model's limits, the one input besides the request that a
//!   [`super::plan`] is built from.

use std::sync::OnceLock;

use super::reasoning::{ReasoningSyntax, reasoning_syntax};
use super::tools::{ToolFormat, tool_format};
use crate::api::{ApiError, ModelSpec};
use crate::sampling::constrain::Vocab;
use crate::tokenizer::ModelTokenizer;

/// The chat template's syntax, as detected in its source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChatFormat {
    /// The model has a chat template (chat requests need one).
    pub template: bool,
    /// The template's tool-call syntax; `None`: it has none, and tools use the generic format
    /// ([`super::tool_prompt`]).
    pub tools: Option<ToolFormat>,
    /// The template's think tags, for models that reason.
    pub reasoning: Option<ReasoningSyntax>,
    /// `(content, id)` of the special tokens, which call grammars match as tokens, not text
    /// (`[TOOL_CALLS]`, `<tool_call>` where it is one).
    pub special_tokens: Vec<(String, u32)>,
}

impl ChatFormat {
    /// Scans `tok`'s chat template and added tokens.
    pub fn of(tok: &ModelTokenizer) -> Self {
        let source = tok.template_source();
        let mut special_tokens: Vec<(String, u32)> = tok
            .inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| (t.content, id))
            .collect();
        // The decoder is a hash map: a stable order keeps grammars (and plans) the same run to run.
        special_tokens.sort_by_key(|&(_, id)| id);
        Self {
            template: tok.template.is_some(),
            tools: source.and_then(tool_format),
            reasoning: source.and_then(reasoning_syntax),
            special_tokens,
        }
    }

    /// Mistral's templates refuse tool-call ids other than 9 letters and digits
    /// ([`super::tool_use::mistral_ids`]).
    pub fn short_call_ids(&self) -> bool {
        matches!(self.tools, Some(ToolFormat::Mistral | ToolFormat::MistralArgs))
    }
}

/// The token table for constrained decoding, built once, on first use (it walks the whole vocabulary).
#[derive(Debug, Default)]
pub struct LazyVocab(OnceLock<Result<Vocab, String>>);

impl LazyVocab {
    /// The table of `tok` for a model whose logits have `model_vocab` entries.
    pub fn get(&self, tok: &ModelTokenizer, model_vocab: usize) -> Result<&Vocab, ApiError> {
        self.0
            .get_or_init(|| super::structured::vocab(tok, model_vocab).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ApiError::cannot_serve(Some("response_format"), "unsupported_model", e.clone()))
    }
}

/// Everything about a loaded model that planning a request reads: its limits, tokenizer, chat format and
/// (lazily) its constrained-decoding vocabulary. No device: a plan is text and token ids.
#[derive(Debug, Clone, Copy)]
pub struct ModelFormat<'a> {
    pub spec: &'a ModelSpec,
    pub tokenizer: &'a ModelTokenizer,
    pub chat: &'a ChatFormat,
    pub vocab: &'a LazyVocab,
    /// How the model takes images; `None` for a text model.
    pub images: Option<&'a super::images::ImageFormat>,
}

impl ModelFormat<'_> {
    /// The constrained-decoding vocabulary (built on the first call).
    pub fn vocab(&self) -> Result<&Vocab, ApiError> {
        self.vocab.get(self.tokenizer, self.spec.vocab_size)
    }
}
