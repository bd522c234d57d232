//! JSON → request types, with errors that name the field path (`messages[2].content`) the way OpenAI does.
//!
//! Both entry points take a `serde_json::Value`, which is what the JS facade produces from a request object
//! (not `serde_wasm_bindgen`'s deserializer directly: its structs see only their declared fields, so unknown
//! fields would go unrefused);
//! [`serde_path_to_error`] tracks where in the document deserialisation failed.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use super::request::{ChatCompletionRequest, CompletionRequest};

/// Parses a `POST /v1/chat/completions` body.
pub fn parse_chat(body: Value) -> Result<ChatCompletionRequest, ApiError> {
    parse(body)
}

/// Parses a `POST /v1/completions` body.
pub fn parse_completion(body: Value) -> Result<CompletionRequest, ApiError> {
    parse(body)
}

fn parse<T: DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    if !body.is_object() {
        return Err(ApiError::invalid_type(
            None,
            "the request body must be a JSON object",
        ));
    }
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let path = (path != ".").then_some(path);
        let message = e.into_inner().to_string();
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
