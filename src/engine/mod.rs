//! The engine: where tensors live, loading, and generation.
//!
//! - [`device`]: the one place that chooses devices (WebGPU / native wgpu, or the CPU backend).
//! - [`check`]: a numerical self-check that runs the decoder's kernels on a device and compares with the host.
//! - [`load`]: a GGUF file loaded as its bytes arrive: header checks, then each tensor to the device.
//! - [`loaded`]: a loaded model (decoder + tokenizer + chat template) from bytes, serving both endpoints.
//! - [`format`]: what the tokenizer and template mean for every request (tool and reasoning syntax),
//!   found once at load.
//! - [`plan`]: a valid request prepared into a plan (token ids, budget, sampling, stops, constraints,
//!   per-choice text processors) by a pure function of the model's format and the request.
//! - [`prompt`]: chat messages as templates see them, rendered into prompt token ids.
//! - [`chunks`]: a prompt as chunks of token ids and media rows, with per-position content keys.
//! - [`runner`]: prefill and decode steps on the device; logits read back once per step.
//! - [`prefix_cache`]: KV states of recent sequences, reused by prompts that start with one (matched by
//!   content, media included).
//! - [`generation`]: one prompt's `n` choices: sampling, detokenisation, stop rules, finish reasons.
//! - [`detok`]: the incremental detokenizer and stop-string matching.
//! - [`respond`]: deltas → OpenAI chunks, and full responses as the streams collected.
//! - [`chat_choice`]: a chat choice's text split into `reasoning_content` and `content` ([`reasoning`]).
//! - [`tools`]: tool-call formats of model families: detection, incremental parsing, call grammars.
//! - [`tool_prompt`]: the generic tool format, for templates without tool-call syntax.
//! - [`tool_use`]: a chat request's `tools` and `tool_choice`: rendering, parsers, forcing grammars.
//! - [`structured`]: `response_format` → per-choice grammar constraints (llguidance).

pub mod chat_choice;
pub mod check;
pub mod chunks;
pub mod counters;
pub mod detok;
pub mod device;
pub mod format;
pub mod generation;
pub mod load;
pub mod loaded;
pub mod plan;
pub mod prefix_cache;
pub mod prompt;
pub mod reasoning;
pub mod respond;
pub mod runner;
pub mod structured;
pub mod tool_prompt;
pub mod tool_use;
pub mod tools;

pub use loaded::{HfFiles, LoadedModel};

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
        "the model does not fit: its weights take {needed} MiB on this device, which holds at most {limit} MiB of weights"
    )]
    TooLarge { needed: u64, limit: u64 },
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
