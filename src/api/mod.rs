//! The OpenAI protocol layer: wire types for `POST /v1/chat/completions` and `POST /v1/completions`
//! (`shared/spec/`), their validation, responses, stream chunks and errors. Pure Rust; it knows nothing
//! of models, devices or wasm.
//!
//! Flow: JSON → [`parse_chat`] / [`parse_completion`] (a JS object: their `_from` forms, over any
//! deserializer; shape errors, with field paths) → [`validate_chat`] / [`validate_completion`] against a
//! [`ModelSpec`] (values, 404 model, 400 cannot serve) → [`ValidChat`] / [`ValidCompletion`] for the engine.
//! Errors leave as [`ErrorBody`].

mod chat;
pub mod error;
mod parse;
pub mod request;
pub mod response;
mod strict;
pub mod unions;
pub mod validate;

pub use chat::validate_chat;
pub use error::{ApiError, ErrorBody, Status};
pub use parse::{not_an_object, parse_chat, parse_chat_from, parse_completion, parse_completion_from};
pub use request::{CallOptions, ChatCompletionRequest, CompletionRequest};
pub use validate::{ModelSpec, ValidChat, ValidCompletion, validate_completion};

use serde_json::Value;

/// Parses and validates a chat request body in one step.
pub fn chat_request(body: Value, spec: &ModelSpec) -> Result<ValidChat, ApiError> {
    validate_chat(parse_chat(body)?, spec)
}

/// Parses and validates a completions request body in one step.
pub fn completion_request(body: Value, spec: &ModelSpec) -> Result<ValidCompletion, ApiError> {
    validate_completion(parse_completion(body)?, spec)
}
