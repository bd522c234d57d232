//! The union-typed request fields, normalised while deserialising so that later code sees one form.
//!
//! | field | wire forms | normalised to |
//! |---|---|---|
//! | `prompt` | string, string[], integer[], integer[][] | [`Prompt::Texts`] or [`Prompt::Tokens`] |
//! | `stop` | string, string[] | `Vec<String>` ([`Stop`]) |
//! | message `content` | string, content part[] | [`Content`] |
//! | `tool_choice` | `"none"`, `"auto"`, `"required"`, `{type: "function", function: {name}}` | [`ToolChoice`] |
//!
//! Each serialises back to the canonical wire form (a stop string becomes a one-element array).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `prompt`: one or more prompts, as text or as token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// `"text"` or `["text", ...]`.
    Texts(Vec<String>),
    /// `[1, 2, 3]` (one prompt) or `[[1, 2], [3]]`.
    Tokens(Vec<Vec<u32>>),
}

/// One element of a `prompt` array, before the array is classified.
enum PromptItem {
    Text(String),
    Token(u32),
    Tokens(Vec<u32>),
}

impl<'de> Deserialize<'de> for PromptItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PromptItem;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a token id or an array of token ids")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PromptItem, E> {
                Ok(PromptItem::Text(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PromptItem, E> {
                token(v).map(PromptItem::Token)
            }
            // JS numbers arrive as `i64` (serde_wasm_bindgen), JSON's non-negative ones as `u64`.
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PromptItem, E> {
                let v = u64::try_from(v)
                    .map_err(|_| E::custom(format_args!("token ids are non-negative, got {v}")))?;
                token(v).map(PromptItem::Token)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptItem, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<TokenId>()? {
                    ids.push(id.0);
                }
                Ok(PromptItem::Tokens(ids))
            }
        }
        d.deserialize_any(V)
    }
}

/// A token id: a JSON integer in `0..=u32::MAX`.
struct TokenId(u32);

fn token<E: de::Error>(v: u64) -> Result<u32, E> {
    u32::try_from(v).map_err(|_| E::custom(format_args!("token id {v} is out of range")))
}

impl<'de> Deserialize<'de> for TokenId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        u64::try_from(v)
            .map_err(|_| de::Error::custom(format_args!("token ids are non-negative, got {v}")))
            .and_then(token)
            .map(TokenId)
    }
}

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Prompt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, an array of strings, an array of token ids or an array of such arrays")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Prompt, E> {
                Ok(Prompt::Texts(vec![v.to_owned()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<PromptItem>()? {
                    items.push(item);
                }
                classify(items).ok_or_else(|| {
                    de::Error::custom(
                        "a `prompt` array must hold only strings, only token ids, or only arrays of token ids",
                    )
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// All strings, all ids or all id arrays; `None` when mixed. An empty array is an empty list of texts.
fn classify(items: Vec<PromptItem>) -> Option<Prompt> {
    /// `Some` when `pick` accepts every item.
    fn all<T>(items: Vec<PromptItem>, pick: fn(PromptItem) -> Option<T>) -> Option<Vec<T>> {
        items.into_iter().map(pick).collect()
    }
    match items.first() {
        None => Some(Prompt::Texts(Vec::new())),
        Some(PromptItem::Text(_)) => all(items, |i| {
            if let PromptItem::Text(t) = i {
                Some(t)
            } else {
                None
            }
        })
        .map(Prompt::Texts),
        Some(PromptItem::Token(_)) => all(items, |i| {
            if let PromptItem::Token(t) = i {
                Some(t)
            } else {
                None
            }
        })
        .map(|ids| Prompt::Tokens(vec![ids])),
        Some(PromptItem::Tokens(_)) => all(items, |i| {
            if let PromptItem::Tokens(t) = i {
                Some(t)
            } else {
                None
            }
        })
        .map(Prompt::Tokens),
    }
}

impl Serialize for Prompt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Prompt::Texts(texts) => texts.serialize(s),
            Prompt::Tokens(ids) => ids.serialize(s),
        }
    }
}

/// `stop`: a string or an array of strings, normalised to an array.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(transparent)]
pub struct Stop(pub Vec<String>);

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stop;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Stop, E> {
                Ok(Stop(vec![v.to_owned()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stop, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(Stop(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Message `content`: a string, or an array of typed parts.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of an array `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: MediaUrl },
    VideoUrl { video_url: MediaUrl },
}

/// `image_url` / `video_url` of a content part: a URL or a `data:` URI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaUrl {
    pub url: String,
    /// OpenAI's `detail` hint for images (`auto`, `low`, `high`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<ContentPart>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(t) => t.serialize(s),
            Content::Parts(p) => p.serialize(s),
        }
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    /// `{"type": "function", "function": {"name": ...}}`: call exactly this function.
    Function(String),
}

impl ToolChoice {
    /// The function a named choice forces, if any.
    pub fn function_name(&self) -> Option<&str> {
        match self {
            ToolChoice::Function(name) => Some(name),
            _ => None,
        }
    }
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NamedToolChoice {
    #[serde(rename = "type", default = "function_type")]
    kind: FunctionType,
    function: NamedFunction,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NamedFunction {
    name: String,
}

/// The only tool type there is: `"function"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionType {
    #[default]
    Function,
}

fn function_type() -> FunctionType {
    FunctionType::Function
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolChoice;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolChoice, E> {
                match v {
                    "none" => Ok(ToolChoice::None),
                    "auto" => Ok(ToolChoice::Auto),
                    "required" => Ok(ToolChoice::Required),
                    other => Err(E::unknown_variant(other, &["none", "auto", "required"])),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolChoice, A::Error> {
                let named = NamedToolChoice::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ToolChoice::Function(named.function.name))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolChoice::None => s.serialize_str("none"),
            ToolChoice::Auto => s.serialize_str("auto"),
            ToolChoice::Required => s.serialize_str("required"),
            ToolChoice::Function(name) => NamedToolChoice {
                kind: FunctionType::Function,
                function: NamedFunction { name: name.clone() },
            }
            .serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error, SeqDeserializer};

    /// A deserializer that hands integers over as `i64` (serde_wasm_bindgen does, for every JS number)
    /// reads token prompts as JSON's `u64` do; negative ids stay refused.
    #[test]
    fn token_prompts_from_signed_integers() {
        let ids = |v: Vec<i64>| Prompt::deserialize(SeqDeserializer::<_, Error>::new(v.into_iter()));
        assert_eq!(ids(vec![1, 2, 3]).unwrap(), Prompt::Tokens(vec![vec![1, 2, 3]]));
        let e = ids(vec![1, -2]).unwrap_err().to_string();
        assert!(e.contains("non-negative"), "{e}");
    }
}
