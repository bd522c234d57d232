//! The engine's chat protocol: what OpenAI's two endpoints mean for a model, from a valid request to the
//! chunks of its response.
//!
//! - [`format`]: what the tokenizer and template mean for every request (tool and reasoning syntax),
//!   found once at load.
//! - [`plan`]: a valid request prepared into a plan (token ids, budget, sampling, stops, constraints,
//!   per-choice text processors) by a pure function of the model's format and the request.
//! - [`prompt`]: chat messages as templates see them, rendered into prompt token ids.
//! - [`images`]: a chat request's images: preprocessed, their placeholders expanded, their tiles placed.
//! - [`detok`]: the incremental detokenizer and stop-string matching.
//! - [`respond`]: deltas → OpenAI chunks, and full responses as the streams collected.
//! - [`chat_choice`]: a chat choice's text split into `reasoning_content` and `content` ([`reasoning`]).
//! - [`tools`]: tool-call formats of model families: detection, incremental parsing, call grammars.
//! - [`tool_prompt`]: the generic tool format, for templates without tool-call syntax.
//! - [`tool_use`]: a chat request's `tools` and `tool_choice`: rendering, parsers, forcing grammars.
//! - [`structured`]: `response_format` → per-choice grammar constraints (llguidance).

pub mod chat_choice;
pub mod detok;
pub mod format;
pub mod images;
pub mod plan;
pub mod prompt;
pub mod reasoning;
pub mod respond;
pub mod structured;
pub mod tool_prompt;
pub mod tool_use;
pub mod tools;
