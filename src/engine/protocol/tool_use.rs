//! Tool calling for a chat request: `tools` rendered through the model's own chat template, the model
//! family's call syntax recognised in the template ([`super::tools::tool_format`]: Hermes/Qwen
//! `<tool_call>`, Llama 3 JSON, Mistral `[TOOL_CALLS]`, Qwen3.5's XML, Gemma 4's `<|tool_call>`), its output
//! parsed back into `tool_calls`, and
//! `tool_choice` honoured. A template without tool-call syntax gets the generic format
//! ([`super::tool_prompt`]: the tools described in the system turn, Hermes syntax as plain text).
//! - `none`: the tools are not shown to the model and nothing is parsed;
//! - `auto`: the model answers or calls; its calls are parsed;
//! - `required`: a grammar forces one call (several with `parallel_tool_calls`, except for Llama 3, whose
//!   template takes one call per message) of one of the tools, its arguments valid against the tool's
//!   `parameters` schema;
//! - a named function: the grammar forces exactly one call of that function.
//!
//! A non-text `response_format` together with tools the model may call is refused (400): the two
//! grammars cannot both hold on the same output.

use serde_json::{Value, json};

use super::format::ChatFormat;
use super::reasoning::{ReasoningSyntax, prompt_ends_in_think};
use super::structured::MakeConstraint;
use super::tools::{GrammarOptions, ToolCallParser, ToolFormat, call_grammar};
use crate::api::request::ResponseFormat;
use crate::api::unions::ToolChoice;
use crate::api::{ApiError, ValidChat};
use crate::sampling::constrain::{Constraint, Vocab};

/// What a request with tools needs from here on.
#[derive(Debug, Clone)]
pub struct ToolUse {
    pub format: ToolFormat,
    /// The tools as chat templates take them (`{"type": "function", "function": {...}}`).
    pub template_tools: Vec<Value>,
    /// The functions calls may name (all of `tools`, or the one `tool_choice` names).
    pub names: Vec<String>,
    /// `(name, parameters schema)` of those functions.
    pub schemas: Vec<(String, Value)>,
    pub forced: bool,
    pub parallel: bool,
    /// The template has no tool syntax: the tools go into the messages ([`super::tool_prompt`]).
    pub generic: bool,
}

/// `None` when the request has no tools or `tool_choice: "none"`.
pub fn tool_use(req: &ValidChat, format: &ChatFormat) -> Result<Option<ToolUse>, ApiError> {
    if req.tools.is_empty() || req.tool_choice == ToolChoice::None {
        return Ok(None);
    }
    let known = format.tools;
    let format = known.unwrap_or(ToolFormat::Hermes);
    if req.response_format != ResponseFormat::Text {
        return Err(ApiError::unsupported(
            "response_format",
            "a JSON `response_format` cannot be combined with `tools` the model may call; use a tool's \
             `parameters` schema for structured arguments, or `tool_choice: \"none\"`",
        ));
    }
    let template_tools = req
        .tools
        .iter()
        .map(|f| json!({"type": "function", "function": f}))
        .collect();
    let chosen: Vec<_> = match &req.tool_choice {
        ToolChoice::Function(name) => req.tools.iter().filter(|f| &f.name == name).collect(),
        _ => req.tools.iter().collect(),
    };
    Ok(Some(ToolUse {
        format,
        template_tools,
        names: chosen.iter().map(|f| f.name.clone()).collect(),
        schemas: chosen
            .iter()
            .map(|f| {
                let params = f.parameters.clone().map_or(Value::Null, Value::Object);
                (f.name.clone(), params)
            })
            .collect(),
        forced: matches!(req.tool_choice, ToolChoice::Required | ToolChoice::Function(_)),
        parallel: req.parallel_tool_calls
            && req.tool_choice == ToolChoice::Required
            && format != ToolFormat::Llama3Json,
        generic: known.is_none(),
    }))
}

impl ToolUse {
    /// The parser of one choice's output.
    pub fn parser(&self) -> ToolCallParser {
        ToolCallParser::new(self.format, self.names.clone()).with_schemas(self.schemas.clone())
    }

    /// For `required` or a named function: what forces the call(s), given the rendered prompt (a thinking
    /// model may first think, or must close a think block the prompt opened) and the special tokens the
    /// grammar matches as tokens.
    pub fn constraint<'a>(
        &self,
        special_tokens: &[(String, u32)],
        vocab: &'a Vocab,
        syntax: Option<&ReasoningSyntax>,
        prompt: &str,
    ) -> Result<Option<MakeConstraint<'a>>, ApiError> {
        if !self.forced {
            return Ok(None);
        }
        let options = GrammarOptions {
            required: true,
            parallel: self.parallel,
            special_tokens,
            reasoning: syntax.map(|s| (s, prompt_ends_in_think(prompt, s))),
        };
        let grammar = call_grammar(self.format, &self.schemas, &options)
            .map_err(|e| ApiError::invalid("tools", format!("`tools`: {e}")))?;
        Ok(Some(Box::new(move || {
            Constraint::lark(vocab, &grammar).map_err(|e| super::structured::schema_error("tools", e))
        })))
    }
}

/// Mistral's templates (Nemo, Small 3.x, Devstral) refuse tool-call ids that are not exactly 9 letters and
/// digits, and OpenAI's are `call_` + 24. For those templates each id in the history (`tool_calls[].id`
/// and `tool_call_id`) is replaced by 9 characters derived from it (FNV-1a, base 62), the same for a call
/// and its result.
pub fn mistral_ids(messages: &mut [Value], format: &ChatFormat) {
    if !format.short_call_ids() {
        return;
    }
    let short = |id: &str| {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut h = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (0..9)
            .map(|_| {
                let c = ALPHABET[(h % 62) as usize] as char;
                h /= 62;
                c
            })
            .collect::<String>()
    };
    for m in messages {
        if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
            m["tool_call_id"] = short(id).into();
        }
        for call in m
            .get_mut("tool_calls")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                call["id"] = short(id).into();
            }
        }
    }
}
