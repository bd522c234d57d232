//! Errors of the protocol layer, and their OpenAI wire shape `{"error": {"message", "type", "param", "code"}}`.
//!
//! Inside kiln an error is an [`ApiError`] (thiserror); at the edge [`ApiError::body`] gives the wire form
//! and [`ApiError::status`] the HTTP-equivalent status the spec uses: 422 for a request that does not
//! validate, 404 for an unknown model, 400 for a valid request this engine cannot serve.

use serde::{Deserialize, Serialize};

/// The HTTP-equivalent status of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// 400: well-formed, but this engine or model cannot serve it (context too long, images to a text model).
    BadRequest = 400,
    /// 404: the `model` is not the loaded one.
    NotFound = 404,
    /// 422: the request does not validate (missing field, wrong type, value out of range).
    Unprocessable = 422,
    /// 500: the engine failed while serving a valid request (a device error).
    Internal = 500,
    /// 503: the engine cannot serve any request now (its GPU device was lost); loading the model again
    /// does.
    Unavailable = 503,
}

/// A protocol error: what went wrong, about which field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: Status,
    /// Human-readable; names the field in backticks.
    pub message: String,
    /// The field path, e.g. `messages[2].content[0].image_url`; `None` for the request as a whole.
    pub param: Option<String>,
    /// Machine-readable reason, e.g. `invalid_value`, `model_not_found`, `context_length_exceeded`.
    pub code: &'static str,
}

/// The wire form of an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// The `error` object of [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

impl ApiError {
    fn new(status: Status, code: &'static str, param: Option<&str>, message: String) -> Self {
        Self {
            status,
            message,
            param: param.map(str::to_owned),
            code,
        }
    }

    /// 422 `invalid_value`: `param` has a value outside what the spec allows.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::new(
            Status::Unprocessable,
            "invalid_value",
            Some(param),
            message.into(),
        )
    }

    /// 422 `missing_required_parameter`.
    pub fn missing(param: &str) -> Self {
        Self::new(
            Status::Unprocessable,
            "missing_required_parameter",
            Some(param),
            format!("`{param}` is required"),
        )
    }

    /// 422 `invalid_type`: the JSON did not have the shape the spec gives (from deserialisation).
    pub fn invalid_type(param: Option<&str>, message: impl Into<String>) -> Self {
        Self::new(Status::Unprocessable, "invalid_type", param, message.into())
    }

    /// 422 `unknown_parameter`: a field that neither the spec nor OpenAI's API has.
    pub fn unknown(param: &str) -> Self {
        Self::new(
            Status::Unprocessable,
            "unknown_parameter",
            Some(param),
            format!("`{param}` is not a parameter of this endpoint"),
        )
    }

    /// 400 `unsupported_parameter`: an OpenAI parameter kiln does not implement, refused rather than ignored.
    pub fn unsupported(param: &str, why: &str) -> Self {
        Self::new(
            Status::BadRequest,
            "unsupported_parameter",
            Some(param),
            format!("`{param}` is not supported by kiln: {why}"),
        )
    }

    /// 400 with a specific code: the request is valid but cannot be served by this model.
    pub fn cannot_serve(param: Option<&str>, code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Status::BadRequest, code, param, message.into())
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(requested: &str, loaded: &str) -> Self {
        Self::new(
            Status::NotFound,
            "model_not_found",
            Some("model"),
            format!("The model `{requested}` does not exist; this engine serves `{loaded}`"),
        )
    }

    /// 500 `engine_error`: generation failed on the device.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Status::Internal, "engine_error", None, message.into())
    }

    /// 503 `device_lost`: the GPU device the engine ran on is gone; a new load gets a new one.
    pub fn device_lost(message: impl Into<String>) -> Self {
        Self::new(Status::Unavailable, "device_lost", None, message.into())
    }

    /// 400 `request_aborted`: the caller aborted the request (JavaScript's AbortSignal).
    pub fn aborted() -> Self {
        Self::new(
            Status::BadRequest,
            "request_aborted",
            None,
            "the request was aborted".into(),
        )
    }

    /// The HTTP-equivalent status code.
    pub fn status(&self) -> u16 {
        self.status as u16
    }

    /// OpenAI's error `type` for this status.
    pub fn kind(&self) -> &'static str {
        // OpenAI reports every client error, 404 included, as `invalid_request_error`.
        match self.status {
            Status::Internal | Status::Unavailable => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The wire form.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorObject {
                message: self.message.clone(),
                kind: self.kind().to_owned(),
                param: self.param.clone(),
                code: Some(self.code.to_owned()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape_is_openai_s() {
        let e = ApiError::invalid("temperature", "`temperature` must be in [0, 2], got 3");
        let json = serde_json::to_value(e.body()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {
                "message": "`temperature` must be in [0, 2], got 3",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "invalid_value"
            }})
        );
        assert_eq!(e.status(), 422);
        assert_eq!(ApiError::model_not_found("x", "y").status(), 404);
    }
}
