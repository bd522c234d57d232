//! Request bodies → request types, with errors that name the field path (`messages[2].content`) the way
//! OpenAI does.
//!
//! Two inputs: a `serde_json::Value` ([`parse_chat`]), and any serde deserializer ([`parse_chat_from`]), which
//! is how the JS facade reads a request object straight through `serde_wasm_bindgen`, with no JSON value in
//! between. Either way the deserializer is wrapped in [`StructsAsMaps`] (so unknown fields are refused even
//! by a deserializer that reads only declared fields) and in [`serde_path_to_error`] (which tracks where in
//! the document deserialisation failed).

use serde::de::{Deserialize, Deserializer};
use serde_json::Value;

use super::error::ApiError;
use super::request::{ChatCompletionRequest, CompletionRequest};
use super::strict::StructsAsMaps;

/// Parses a `POST /v1/chat/completions` body.
pub fn parse_chat(body: Value) -> Result<ChatCompletionRequest, ApiError> {
    object(&body)?;
    parse_chat_from(body)
}

/// Parses a `POST /v1/completions` body.
pub fn parse_completion(body: Value) -> Result<CompletionRequest, ApiError> {
    object(&body)?;
    parse_completion_from(body)
}

/// Parses a chat body from a deserializer; the caller has checked that the body is an object
/// ([`not_an_object`] otherwise).
pub fn parse_chat_from<'de, D: Deserializer<'de>>(body: D) -> Result<ChatCompletionRequest, ApiError> {
    parse(body)
}

/// Parses a completions body from a deserializer; the caller has checked that the body is an object.
pub fn parse_completion_from<'de, D: Deserializer<'de>>(body: D) -> Result<CompletionRequest, ApiError> {
    parse(body)
}

/// The error for a body that is not an object (an array, a string, `null`, nothing).
pub fn not_an_object() -> ApiError {
    ApiError::invalid_type(None, "the request body must be a JSON object")
}

fn object(body: &Value) -> Result<(), ApiError> {
    if body.is_object() {
        Ok(())
    } else {
        Err(not_an_object())
    }
}

fn parse<'de, D: Deserializer<'de>, T: Deserialize<'de>>(body: D) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(StructsAsMaps(body)).map_err(|e| {
        let path = e.path().to_string();
        let path = (path != ".").then_some(path);
        let message = e.into_inner().to_string();
        // `serde_wasm_bindgen`'s errors are JS `Error`s, and display as `Error: <serde's message>`.
        let message = match message.strip_prefix("Error: ") {
            Some(rest) => rest.to_owned(),
            None => message,
        };
        to_api_error(path, message)
    })
}

/// Maps serde's messages (`missing field `x``, `unknown field `x`, expected ...`) to OpenAI error codes,
/// appending the field to the path where serde names it only in the message.
fn to_api_error(path: Option<String>, message: String) -> ApiError {
    let join = |field: &str| match &path {
        Some(p) => format!("{p}.{field}"),
        None => field.to_owned(),
    };
    let quoted = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned)
    };
    if let Some(field) = quoted("missing field `") {
        return ApiError::missing(&join(&field));
    }
    if let Some(field) = quoted("unknown field `") {
        // serde_path_to_error's path already ends at the unknown key.
        return ApiError::unknown(path.as_deref().unwrap_or(&field));
    }
    let param = path.clone();
    let message = match &path {
        Some(p) => format!("`{p}`: {message}"),
        None => message,
    };
    ApiError::invalid_type(param.as_deref(), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field_path() {
        let e = parse_chat(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "robot"}]}),
        )
        .unwrap_err();
        assert_eq!(
            (e.status(), e.param.as_deref(), e.code),
            (422, Some("messages[1].role"), "invalid_type")
        );

        let e = parse_chat(json!({"messages": []})).unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("model"), "missing_required_parameter")
        );

        let e = parse_chat(json!({"model": "m", "messages": [], "temprature": 1})).unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("temprature"), "unknown_parameter")
        );

        let e =
            parse_chat(json!({"model": "m", "messages": [{"role": "user", "content": "x", "colour": 1}]}))
                .unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("messages[0].colour"), "unknown_parameter")
        );

        let e = parse_completion(json!(["not", "an", "object"])).unwrap_err();
        assert_eq!((e.param, e.code), (None, "invalid_type"));
    }
}
