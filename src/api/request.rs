//! The request bodies of `POST /v1/chat/completions` and `POST /v1/completions`, as the spec gives them
//! (`shared/spec/*.md`), plus the OpenAI fields the seed leaves out (`seed`, `parallel_tool_calls`, ...).
//!
//! Every field is deserialised; nothing is silently dropped: a field that neither the seed nor OpenAI's
//! API has is refused (`deny_unknown_fields` → 422 `unknown_parameter`), and OpenAI fields kiln does not
//! implement are parsed as raw JSON so that [`super::validate`] can refuse them by name when they are set.
//! Integers are read as `i64` and floats as `f64` so that range errors get a message naming the bound
//! rather than a type error.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::unions::{Content, ContentPart, FunctionType, MediaUrl, Prompt, Stop, ToolChoice};

/// `service_tier`: accepted, and echoed in responses (there is one tier on a local device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceTier {
    Auto,
    Default,
    OverLimit,
    Flex,
    NoLimit,
}

/// `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

/// `stream_options`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and empty `choices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// Query parameters of both endpoints, passed beside the body (`create(request, options)` in JS).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallOptions {
    /// Accepted; no local meaning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ai_project_id: Option<String>,
}

/// Declares a request body with the fields both endpoints share, written once (serde's `flatten` cannot
/// be used: it does not combine with `deny_unknown_fields`), and its [`Shared`] view, which
/// `validate::common` resolves.
macro_rules! request {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($own:tt)* }
    ) => {
        $(#[$meta])*
        pub struct $name {
            pub model: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub stream: Option<bool>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub stream_options: Option<StreamOptions>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub max_tokens: Option<i64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub temperature: Option<f64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub top_p: Option<f64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub n: Option<i64>,
            /// The seed gives `string[]` (chat); OpenAI also accepts a single string, and so does kiln.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub stop: Option<Stop>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub presence_penalty: Option<f64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub frequency_penalty: Option<f64>,
            /// Token id (as a decimal string) → bias in `[-100, 100]`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub logit_bias: Option<BTreeMap<String, f64>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub user: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub extra_body: Option<serde_json::Map<String, Value>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub service_tier: Option<ServiceTier>,
            /// OpenAI: seeds the sampler, so the same request gives the same text.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub seed: Option<i64>,
            $($own)*
        }

        impl $name {
            /// The fields both endpoints share.
            pub fn shared(&self) -> Shared<'_> {
                Shared {
                    model: &self.model,
                    stream: self.stream,
                    stream_options: &self.stream_options,
                    max_tokens: self.max_tokens,
                    temperature: self.temperature,
                    top_p: self.top_p,
                    n: self.n,
                    stop: &self.stop,
                    presence_penalty: self.presence_penalty,
                    frequency_penalty: self.frequency_penalty,
                    logit_bias: &self.logit_bias,
                    service_tier: self.service_tier,
                    seed: self.seed,
                }
            }
        }
    };
}

/// The fields of a request body that both endpoints share and resolve alike (`validate::common`);
/// `user` and `extra_body` are accepted and have no local meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shared<'a> {
    pub model: &'a str,
    pub stream: Option<bool>,
    pub stream_options: &'a Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub n: Option<i64>,
    pub stop: &'a Option<Stop>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logit_bias: &'a Option<BTreeMap<String, f64>>,
    pub service_tier: Option<ServiceTier>,
    pub seed: Option<i64>,
}

request! {
/// `POST /v1/completions` body: the fields both endpoints share (`request!`), and its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    /// Number of top alternatives per token, `0..=5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    /// OpenAI; refused when set (see `validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_of: Option<Value>,
    /// OpenAI; refused when set (see `validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<Value>,
}
}

request! {
/// `POST /v1/chat/completions` body: the fields both endpoints share (`request!`), and its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatCompletionRequest {
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// OpenAI: whether several tool calls may come in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// OpenAI; accepted, no local meaning (like `store`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// OpenAI; only `["text"]` can be served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
    /// OpenAI fields kiln does not implement, parsed only to be refused by name when set (see `validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search_options: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<Value>,
}
}

/// A chat message. The role decides which fields may be set (see `validate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// OpenAI responses carry `refusal` on assistant messages; accepted so that a reply can be appended to
    /// the history as it came. kiln never refuses, so in practice it is `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// Message roles of the seed. OpenAI also has `developer` and `function`; the seed does not, and wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call in an assistant message (input) or in a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: FunctionType,
    pub function: FunctionCall,
}

/// The function and its JSON-encoded arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// An entry of `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    #[serde(rename = "type", default)]
    pub kind: FunctionType,
    pub function: FunctionDefinition,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Non-OpenAI hint of the seed; accepted and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_loading: Option<bool>,
}

/// `response_format`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// `response_format.json_schema`. `name` and `schema` are required (checked in `validate` so that the
/// error names the field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaFormat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}
