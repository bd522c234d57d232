//! Text ↔ token ids and chat prompts: a `tokenizers::Tokenizer` (from `tokenizer.json`, or built from GGUF
//! metadata by [`gguf`], tokenizing as llama.cpp does) together with the model's special tokens and its chat
//! template ([`template`]).
//!
//! Chat prompts are rendered by the template and tokenised without adding special tokens (the template
//! writes them), as transformers' `apply_chat_template` does; raw completion prompts get the tokenizer's
//! own special tokens (e.g. BOS).

pub mod gguf;
pub mod template;
pub mod time;

pub use template::{CHATML, ChatTemplate, TemplateError, TemplateInputs};

use crate::loader::Gguf;

/// The tokenizer could not be built or used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] gguf::GgufTokenizerError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("tokenization failed: {0}")]
    Encode(String),
    #[error("detokenization failed: {0}")]
    Decode(String),
}

/// A model's tokenizer, special tokens and chat template.
#[derive(Debug)]
pub struct ModelTokenizer {
    pub inner: tokenizers::Tokenizer,
    pub template: ChatTemplate,
    pub bos_token: String,
    pub eos_token: String,
    /// Ids that end a generation: EOS and any end-of-turn ids the model names.
    pub stop_ids: Vec<u32>,
}

impl ModelTokenizer {
    /// From the metadata of a GGUF file (`tokenizer.ggml.*`, `tokenizer.chat_template`).
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self, TokenizerError> {
        let t = gguf::tokenizer_from_gguf(g)?;
        let mut stop_ids: Vec<u32> = t.eos_token_id.into_iter().chain(t.eog_token_ids).collect();
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let template = ChatTemplate::new(t.chat_template.as_deref().unwrap_or(CHATML))?;
        Ok(Self {
            inner: t.tokenizer,
            template,
            bos_token: t.bos_token.unwrap_or_default(),
            eos_token: t.eos_token.unwrap_or_default(),
            stop_ids,
        })
    }

    /// Token ids of `text`; `add_special` adds what the tokenizer's post-processor adds (BOS, …).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode(text, add_special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// The text of `ids`, special tokens skipped or kept.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Renders the chat prompt (special tokens filled in from this tokenizer) and tokenises it.
    pub fn chat_prompt(&self, mut inputs: TemplateInputs) -> Result<(String, Vec<u32>), TokenizerError> {
        inputs.bos_token.clone_from(&self.bos_token);
        inputs.eos_token.clone_from(&self.eos_token);
        let text = self.template.render(&inputs)?;
        let ids = self.encode(&text, false)?;
        Ok((text, ids))
    }
}
