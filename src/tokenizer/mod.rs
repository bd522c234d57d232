//! Text ↔ token ids and chat prompts: a `tokenizers::Tokenizer` (from `tokenizer.json`, or built from GGUF
//! metadata by [`gguf`], tokenizing as llama.cpp does) together with the model's special tokens and its chat
//! template ([`template`]).
//!
//! Chat prompts are rendered by the template and tokenised without adding special tokens (the template
//! writes them), as transformers' `apply_chat_template` does; raw completion prompts get the tokenizer's
//! own special tokens (e.g. BOS).

pub mod gguf;
pub mod hf;
mod pyfmt;
pub mod template;
pub mod time;

pub use hf::HfTokenizerFiles;
pub use template::{ChatTemplate, TemplateError, TemplateInputs};

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
    #[error("{0}")]
    Files(String),
    #[error(
        "this model has no chat template (its files carry none, as a base model's often do): load it with the \
         `chatTemplate` option (a Jinja chat template), or send completions requests"
    )]
    NoChatTemplate,
}

/// How vocabulary strings map to bytes (for logprobs' `bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenBytes {
    /// GPT-2 byte-level BPE: every character stands for one byte (`bytes_to_unicode`).
    ByteLevel,
    /// SentencePiece (and Gemma 4's BPE): `▁` is a space, `<0xNN>` is byte NN, the rest is UTF-8.
    SentencePiece,
}

/// GPT-2's `bytes_to_unicode` inverted: character → byte.
fn byte_level_char(c: char) -> Option<u8> {
    let c = c as u32;
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    if c < 256 && printable(c) {
        return Some(c as u8);
    }
    // The other bytes map, in order, to 256, 257, ...
    let n = c.checked_sub(256)?;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(n as usize)
        .map(|b| b as u8)
}

/// A model's tokenizer, special tokens and chat template.
#[derive(Debug)]
pub struct ModelTokenizer {
    pub inner: tokenizers::Tokenizer,
    pub token_bytes: TokenBytes,
    /// The chat template: the model's own, or the one given at load; `None` when neither exists (chat
    /// requests are then refused, completions still served).
    pub template: Option<ChatTemplate>,
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
        let template = t.chat_template.as_deref().map(ChatTemplate::new).transpose()?;
        let token_bytes = match g.str("tokenizer.ggml.model").ok().flatten() {
            Some("llama" | "gemma4") => TokenBytes::SentencePiece,
            _ => TokenBytes::ByteLevel,
        };
        Ok(Self {
            inner: t.tokenizer,
            token_bytes,
            template,
            bos_token: t.bos_token.unwrap_or_default(),
            eos_token: t.eos_token.unwrap_or_default(),
            stop_ids,
        })
    }

    /// The template's Jinja source, when there is one.
    pub fn template_source(&self) -> Option<&str> {
        self.template.as_ref().map(|t| t.source.as_str())
    }

    /// Replaces the chat template (the `chatTemplate` load option) with `source`, compiled now.
    pub fn set_chat_template(&mut self, source: &str) -> Result<(), TokenizerError> {
        self.template = Some(ChatTemplate::new(source)?);
        Ok(())
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

    /// The bytes token `id` stands for (special tokens: their text), as logprobs report them.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(piece) = self.inner.id_to_token(id) else {
            return Vec::new();
        };
        // The added vocabulary by reference: `Tokenizer::get_added_tokens_decoder` clones the whole map.
        let special = self
            .inner
            .get_added_vocabulary()
            .get_added_tokens_decoder()
            .get(&id)
            .is_some_and(|t| t.special);
        if special {
            return piece.into_bytes();
        }
        match self.token_bytes {
            TokenBytes::ByteLevel => piece
                .chars()
                .flat_map(|c| byte_level_char(c).map_or_else(|| c.to_string().into_bytes(), |b| vec![b]))
                .collect(),
            TokenBytes::SentencePiece => {
                let hex = piece.strip_prefix("<0x").and_then(|h| h.strip_suffix('>'));
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) if piece.len() == 6 => vec![b],
                    _ => piece.replace('\u{2581}', " ").into_bytes(),
                }
            }
        }
    }

    /// A token as logprobs show it: its bytes as text (an incomplete UTF-8 sequence becomes U+FFFD).
    pub fn token_text(&self, id: u32) -> String {
        String::from_utf8_lossy(&self.token_bytes(id)).into_owned()
    }

    /// Renders the chat prompt (special tokens filled in from this tokenizer) and tokenises it.
    pub fn chat_prompt(&self, mut inputs: TemplateInputs) -> Result<(String, Vec<u32>), TokenizerError> {
        inputs.bos_token.clone_from(&self.bos_token);
        inputs.eos_token.clone_from(&self.eos_token);
        let template = self.template.as_ref().ok_or(TokenizerError::NoChatTemplate)?;
        let text = template.render(&inputs)?;
        let ids = self.encode(&text, false)?;
        Ok((text, ids))
    }
}

#[cfg(test)]
mod tests {
    use super::byte_level_char;

    #[test]
    fn byte_level_characters_invert_gpt2s_table() {
        assert_eq!(byte_level_char('A'), Some(b'A'));
        assert_eq!(byte_level_char('\u{120}'), Some(b' '), "Ġ is the space");
        assert_eq!(byte_level_char('\u{10A}'), Some(b'\n'), "Ċ is the newline");
        assert_eq!(byte_level_char('\u{100}'), Some(0));
        assert_eq!(byte_level_char('\u{4E00}'), None);
    }
}
