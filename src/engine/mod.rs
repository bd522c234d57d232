//! The engine, in two rooms and the model that joins them:
//!
//! - [`runtime`]: the device side: where tensors live ([`runtime::device`]), loading, the self-check, the
//!   prompt as chunks, prefill and decode steps, the prefix cache, the generation loop, counters.
//! - [`protocol`]: the OpenAI side: a valid request planned into prompts and budgets, chat templates,
//!   detokenisation and stop strings, reasoning, tools, structured outputs, chunks and full responses.
//! - [`loaded`]: a loaded model (decoder + tokenizer + chat template) from bytes, serving both endpoints
//!   through the two.

pub mod loaded;
pub mod protocol;
pub mod runtime;

pub use loaded::{EncodedImages, HfFiles, LoadedModel};
pub use protocol::images::Image;

use crate::loader::LoadError;
use crate::model::ForwardError;
use crate::tokenizer::TokenizerError;

/// Loading or running a model failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("reading from the device failed: {0}")]
    Device(String),
    /// The GPU device is gone (wgpu's reason): every later step of this engine fails too.
    #[error("the GPU device was lost ({0}); this engine cannot run any more: load the model again")]
    DeviceLost(String),
    #[error("constrained decoding failed: {0}")]
    Constraint(String),
    #[error("`{option}`: {message}")]
    LoadOption { option: &'static str, message: String },
    #[error(
        "the model does not fit {device}: its weights (and a recurrent model's states) take {needed} MiB as {device} holds them, {why}, which leaves at most {limit} MiB for weights; {advice}"
    )]
    TooLarge {
        needed: u64,
        limit: u64,
        /// The device, as the message names it ("the CPU backend").
        device: &'static str,
        /// Where the limit comes from.
        why: &'static str,
        /// What to do instead.
        advice: &'static str,
    },
    /// The files given as one split model do not belong together (their split keys, tensor sets).
    #[error("the files given as one model do not belong together: {0}")]
    Shards(String),
}

impl EngineError {
    /// The protocol error a request that failed this way gets: 503 `device_lost` for a lost GPU device
    /// (the app can load the model again), else 500 `engine_error`.
    pub fn to_api(&self) -> crate::api::ApiError {
        match self {
            Self::DeviceLost(_) => crate::api::ApiError::device_lost(self.to_string()),
            _ => crate::api::ApiError::internal(self.to_string()),
        }
    }
}
