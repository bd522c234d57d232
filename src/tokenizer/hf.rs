//! A Hugging Face tokenizer directory as kiln uses it: `tokenizer.json` (the `tokenizers` crate reads it),
//! `tokenizer_config.json` (the chat template, unless a `chat_template.jinja` is given, and the BOS/EOS
//! strings), and the end-of-generation ids from `config.json` / `generation_config.json`.

use serde_json::Value;

use super::{ChatTemplate, ModelTokenizer, TokenBytes, TokenizerError};

/// Files of a Hugging Face model repository, as bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct HfTokenizerFiles<'a> {
    pub tokenizer_json: &'a [u8],
    pub tokenizer_config: Option<&'a [u8]>,
    /// `chat_template.jinja`, which newer repositories ship instead of a `chat_template` key.
    pub chat_template: Option<&'a str>,
    pub config: Option<&'a [u8]>,
    pub generation_config: Option<&'a [u8]>,
}

fn json(file: &str, bytes: &[u8]) -> Result<Value, TokenizerError> {
    serde_json::from_slice(bytes).map_err(|e| TokenizerError::Files(format!("`{file}` does not parse: {e}")))
}

/// A special token in `tokenizer_config.json`: a string or an `AddedToken` object with `content`.
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// `eos_token_id` as an int or a list of ints.
fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .into_iter()
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect(),
        _ => Vec::new(),
    }
}

/// The chat template of `tokenizer_config.json`: a string, or a list of named templates (`default` wins).
fn config_template(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => {
            let named = |name: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
                    .and_then(|t| t.get("template")?.as_str())
            };
            named("default")
                .or_else(|| list.first().and_then(|t| t.get("template")?.as_str()))
                .map(str::to_owned)
        }
        _ => None,
    }
}

impl ModelTokenizer {
    /// From Hugging Face files. End-of-generation ids: `eos_token_id` of `generation_config.json` and
    /// `config.json`, and the id of `tokenizer_config.json`'s `eos_token`.
    pub fn from_hf(files: HfTokenizerFiles<'_>) -> Result<Self, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_bytes(files.tokenizer_json)
            .map_err(|e| TokenizerError::Files(format!("`tokenizer.json` does not load: {e}")))?;
        let raw = json("tokenizer.json", files.tokenizer_json)?;
        let decoders = raw["decoder"]["decoders"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![raw["decoder"].clone()]);
        let byte_level = decoders.iter().any(|d| d["type"] == "ByteLevel");
        let config = match files.tokenizer_config {
            Some(b) => json("tokenizer_config.json", b)?,
            None => Value::Null,
        };
        let template = files
            .chat_template
            .map(str::to_owned)
            .or_else(|| config_template(&config));
        let bos_token = token_string(config.get("bos_token")).unwrap_or_default();
        let eos_token = token_string(config.get("eos_token")).unwrap_or_default();
        let mut stop_ids = Vec::new();
        for (name, file) in [
            ("generation_config.json", files.generation_config),
            ("config.json", files.config),
        ] {
            if let Some(bytes) = file {
                stop_ids.extend(ids(json(name, bytes)?.get("eos_token_id")));
            }
        }
        stop_ids.extend(inner.token_to_id(&eos_token));
        stop_ids.sort_unstable();
        stop_ids.dedup();
        Ok(Self {
            inner,
            token_bytes: if byte_level {
                TokenBytes::ByteLevel
            } else {
                TokenBytes::SentencePiece
            },
            template: template.as_deref().map(ChatTemplate::new).transpose()?,
            bos_token,
            eos_token,
            stop_ids,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_fields_in_their_several_shapes() {
        let c: Value = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"}], "eos_token": {"content": "</s>", "lstrip": false}});
        assert_eq!(config_template(&c).as_deref(), Some("D"));
        assert_eq!(token_string(c.get("eos_token")).as_deref(), Some("</s>"));
        assert_eq!(ids(Some(&serde_json::json!([1, 2]))), [1, 2]);
        assert_eq!(ids(Some(&serde_json::json!(7))), [7]);
    }
}
