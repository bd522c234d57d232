//! Response bodies: `chat.completion`, `chat.completion.chunk` and `text_completion` (also the object of
//! completions stream chunks, as in OpenAI's API), usage, and both logprobs shapes.
//!
//! Fields follow the seed; where OpenAI's schema requires more (`refusal` on messages, `logprobs` on every
//! choice), those are emitted too, as `null`, so that clients written against either parse the same bytes.

use serde::{Deserialize, Serialize};

use super::request::{FunctionType, ServiceTier};

/// Why a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// EOS / end of turn, or a stop sequence.
    Stop,
    /// `max_tokens`, `max_completion_tokens` or the context length.
    Length,
    /// The model called tools (chat only).
    ToolCalls,
    /// Never produced by kiln; part of the wire enum.
    ContentFilter,
}

/// Token counts of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens_details: CompletionTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV entries were reused rather than computed.
    pub cached_tokens: Option<u32>,
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Completion tokens spent inside thinking blocks.
    pub reasoning_tokens: Option<u32>,
}

impl Usage {
    pub fn new(
        prompt_tokens: u32,
        completion_tokens: u32,
        cached_tokens: u32,
        reasoning_tokens: u32,
    ) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: Some(cached_tokens),
            },
            completion_tokens_details: CompletionTokensDetails {
                reasoning_tokens: Some(reasoning_tokens),
            },
        }
    }
}

/// `object` of a chat completion: always `"chat.completion"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ChatCompletionObject {
    #[default]
    #[serde(rename = "chat.completion")]
    ChatCompletion,
}

/// `object` of a chat stream chunk: always `"chat.completion.chunk"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ChatChunkObject {
    #[default]
    #[serde(rename = "chat.completion.chunk")]
    ChatCompletionChunk,
}

/// `object` of a completion and of its stream chunks: always `"text_completion"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TextCompletionObject {
    #[default]
    #[serde(rename = "text_completion")]
    TextCompletion,
}

/// The role of generated messages: always `"assistant"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AssistantRole {
    #[default]
    Assistant,
}

/// `POST /v1/chat/completions` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// `chatcmpl-…`.
    pub id: String,
    pub object: ChatCompletionObject,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    /// The request's `service_tier`, or `default` (the seed makes the field required).
    pub service_tier: ServiceTier,
    pub system_fingerprint: String,
}

/// One choice of a [`ChatCompletion`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: FinishReason,
    pub logprobs: Option<ChatLogprobs>,
}

/// The generated message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub role: AssistantRole,
    pub content: Option<String>,
    /// OpenAI's schema requires the key; kiln never refuses, so it is always `null`.
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ResponseToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseToolCall {
    /// `call_…`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: FunctionType,
    pub function: ResponseFunctionCall,
}

/// The function name and its arguments as a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFunctionCall {
    pub name: String,
    pub arguments: String,
}

/// Chat logprobs of a choice.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Option<Vec<TokenLogprob>>,
    /// OpenAI's schema requires the key; always `null`.
    pub refusal: Option<Vec<TokenLogprob>>,
}

/// One generated token with its log probability and the top alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative at a token position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
}

/// A `chat.completion.chunk` of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    /// The same for every chunk of a stream.
    pub id: String,
    pub object: ChatChunkObject,
    pub created: u64,
    pub model: String,
    /// Empty in the final usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// Only with `stream_options.include_usage`: `null` on every chunk but the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<ServiceTier>,
    pub system_fingerprint: String,
}

/// One choice's part of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<FinishReason>,
    pub logprobs: Option<ChatLogprobs>,
}

/// What a chunk adds to a choice's message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Delta {
    /// Only on a choice's first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<AssistantRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// A streamed piece of a tool call: `index`, `id` and name first, then argument fragments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FunctionType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDelta>,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FunctionDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// `POST /v1/completions` response, and each chunk of its stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// `cmpl-…`.
    pub id: String,
    pub object: TextCompletionObject,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    /// Always on a full response; on stream chunks only the last, with `include_usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Always on a full response (the request's tier, or `default`; the seed makes it required); on
    /// stream chunks only when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<ServiceTier>,
    pub system_fingerprint: String,
}

/// One choice of a [`Completion`]: `index` is `prompt_index * n + sample_index`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    /// `None` on stream chunks before the last of the choice.
    pub finish_reason: Option<FinishReason>,
    pub logprobs: Option<CompletionLogprobs>,
}

/// Completions logprobs: parallel arrays over the returned tokens.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// `None` for the first prompt token under `echo` (it has no context to be predicted from).
    pub token_logprobs: Vec<Option<f32>>,
    /// Token → logprob of the top alternatives at each position, most likely first (`None` where
    /// `token_logprobs` is).
    pub top_logprobs: Vec<Option<TopLogprobs>>,
    /// Character offset of each token in the choice's text.
    pub text_offset: Vec<u32>,
}

/// A completions position's alternatives: a JSON object from token text to logprob whose keys run from
/// the most to the least likely, as OpenAI's do (serialized in this order; parsed keeping the order).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopLogprobs(pub Vec<(String, f32)>);

impl TopLogprobs {
    /// `entries` sorted from the most to the least likely (a stable sort: ties keep their order), the
    /// first of equal texts kept (two ids can decode to the same text; an object holds one).
    pub fn ranked(entries: impl IntoIterator<Item = (String, f32)>) -> Self {
        let mut out: Vec<(String, f32)> = Vec::new();
        for (text, lp) in entries {
            if !out.iter().any(|(t, _)| *t == text) {
                out.push((text, lp));
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        Self(out)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The logprob of `text`, if listed.
    pub fn get(&self, text: &str) -> Option<f32> {
        self.0.iter().find(|(t, _)| t == text).map(|&(_, lp)| lp)
    }
}

impl Serialize for TopLogprobs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (text, lp) in &self.0 {
            map.serialize_entry(text, lp)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopLogprobs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = TopLogprobs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of token → logprob")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TopLogprobs, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, f32>()? {
                    out.push(entry);
                }
                Ok(TopLogprobs(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

impl CompletionLogprobs {
    /// Appends `other`'s positions after this one's.
    pub fn append(&mut self, mut other: Self) {
        self.tokens.append(&mut other.tokens);
        self.token_logprobs.append(&mut other.token_logprobs);
        self.top_logprobs.append(&mut other.top_logprobs);
        self.text_offset.append(&mut other.text_offset);
    }
}

/// A response id: `prefix` followed by 24 hex digits of `entropy` (from the caller's random source).
pub fn response_id(prefix: &str, entropy: u128) -> String {
    format!("{prefix}{:024x}", entropy & ((1u128 << 96) - 1))
}
