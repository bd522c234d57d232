//! Parse, don't validate: [`validate_chat`] and [`validate_completion`] turn a parsed request into a
//! [`ValidChat`] / [`ValidCompletion`] whose fields are resolved (defaults applied, ranges checked, unions
//! normalised), or into the first [`ApiError`] in field order.
//!
//! Bounds (from the spec unless said otherwise):
//! - `temperature` in [0, 2] (default 1); `top_p` in (0, 1] (default 1);
//! - `presence_penalty`, `frequency_penalty` in [-2, 2] (default 0);
//! - `logit_bias`: keys are token ids of the loaded vocabulary, values in [-100, 100];
//! - `n` in 1..=[`MAX_N`] (kiln's bound: every sequence holds a KV cache on the device);
//! - `stop`: at most [`MAX_STOP`] non-empty strings;
//! - `max_tokens`, `max_completion_tokens` ≥ 1, and prompt + completion within the context
//!   ([`Common::completion_budget`], checked once the prompt is tokenised);
//! - completions `logprobs` in 0..=[`MAX_COMPLETION_LOGPROBS`] (OpenAI's bound);
//! - chat `top_logprobs` in 0..=[`MAX_TOP_LOGPROBS`], and only with `logprobs: true`.

use super::error::ApiError;
use super::request::*;

/// Largest `n` (choices per prompt).
pub const MAX_N: usize = 16;
/// Largest number of stop sequences.
pub const MAX_STOP: usize = 4;
/// Largest completions `logprobs`.
pub const MAX_COMPLETION_LOGPROBS: usize = 5;
/// Largest chat `top_logprobs`.
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Chat `max_tokens` when neither it nor `max_completion_tokens` is given (the seed's default), further
/// capped by what the context leaves.
pub const DEFAULT_CHAT_MAX_TOKENS: usize = 8192;
/// Completions `max_tokens` default (OpenAI's; the seed is silent).
pub const DEFAULT_COMPLETION_MAX_TOKENS: usize = 16;

/// What validation needs to know of the loaded model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// The id requests must name in `model`.
    pub id: String,
    /// Context length in tokens (prompt + completion).
    pub context_length: usize,
    /// Vocabulary size: token ids are `0..vocab_size`.
    pub vocab_size: usize,
    /// Whether `image_url` parts can be served.
    pub images: bool,
    /// Whether `video_url` parts can be served.
    pub video: bool,
}

/// Sampling parameters, resolved. [`Sampling::default`] is what a request that sets none of them gets
/// (OpenAI's defaults), so a literal names only what it sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// `(token id, bias)`, sorted by id.
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: Option<u64>,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

/// What both endpoints share, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    pub model: String,
    /// Choices per prompt.
    pub n: usize,
    /// The requested completion bound (the smaller of `max_tokens` and `max_completion_tokens`), if any.
    pub max_tokens: Option<usize>,
    /// Used when `max_tokens` is `None`.
    pub default_max_tokens: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub stop: Vec<String>,
    pub sampling: Sampling,
    /// As requested; responses report [`Common::response_tier`].
    pub service_tier: Option<ServiceTier>,
}

/// A chat request that validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidChat {
    pub common: Common,
    pub messages: Vec<Message>,
    /// `Some(k)`: return logprobs with the `k` top alternatives.
    pub logprobs: Option<usize>,
    pub tools: Vec<FunctionDefinition>,
    /// `auto` when tools are given and `tool_choice` is not, else `none`.
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    pub response_format: ResponseFormat,
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// A completions request that validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidCompletion {
    pub common: Common,
    /// One or more prompts (token prompts already checked against the vocabulary and context).
    pub prompt: Prompt,
    pub echo: bool,
    /// `Some(k)`: return logprobs with the `k` top alternatives.
    pub logprobs: Option<usize>,
}

impl Common {
    /// The tier a response reports: the requested one, with `auto` (and no request) resolved to `default`,
    /// the tier a local device always serves at.
    pub fn response_tier(&self) -> ServiceTier {
        match self.service_tier {
            None | Some(ServiceTier::Auto) => ServiceTier::Default,
            Some(tier) => tier,
        }
    }

    /// The number of tokens to generate for a prompt of `prompt_tokens` (the field `prompt_param`): the
    /// requested bound, or the endpoint's default capped by the context. 400 `context_length_exceeded`
    /// when they do not fit.
    pub fn completion_budget(
        &self,
        prompt_tokens: usize,
        context_length: usize,
        prompt_param: &str,
    ) -> Result<usize, ApiError> {
        let left = context_length.saturating_sub(prompt_tokens);
        let exceeded = |requested: usize| {
            let asked = match self.max_tokens {
                Some(_) => format!("`max_tokens` asks for {requested} more"),
                None => "no room is left for a completion".to_owned(),
            };
            ApiError::cannot_serve(
                Some(prompt_param),
                "context_length_exceeded",
                format!(
                    "This model's maximum context length is {context_length} tokens; `{prompt_param}` has \
                     {prompt_tokens} tokens and {asked}"
                ),
            )
        };
        match self.max_tokens {
            Some(requested) if requested > left => Err(exceeded(requested)),
            Some(requested) => Ok(requested),
            None if left == 0 => Err(exceeded(0)),
            None => Ok(self.default_max_tokens.min(left)),
        }
    }
}

fn range(
    param: &str,
    value: Option<f64>,
    lo: f64,
    hi: f64,
    lo_open: bool,
    default: f64,
) -> Result<f32, ApiError> {
    let Some(v) = value else { return Ok(default as f32) };
    let above_lo = if lo_open { v > lo } else { v >= lo };
    if above_lo && v <= hi {
        Ok(v as f32)
    } else {
        let open = if lo_open { "(" } else { "[" };
        Err(ApiError::invalid(
            param,
            format!("`{param}` must be in {open}{lo}, {hi}], got {v}"),
        ))
    }
}

pub(super) fn positive(param: &str, value: Option<i64>) -> Result<Option<usize>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if v >= 1 => Ok(Some(usize::try_from(v).unwrap_or(usize::MAX))),
        Some(v) => Err(ApiError::invalid(
            param,
            format!("`{param}` must be at least 1, got {v}"),
        )),
    }
}

fn bounded(param: &str, value: i64, max: usize) -> Result<usize, ApiError> {
    usize::try_from(value)
        .ok()
        .filter(|&v| v <= max)
        .ok_or_else(|| ApiError::invalid(param, format!("`{param}` must be in 0..={max}, got {value}")))
}

/// `^[a-zA-Z0-9_-]{1,64}$`, OpenAI's rule for function and schema names.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn check_name(param: &str, name: &str) -> Result<(), ApiError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            param,
            format!("`{param}` must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name:?}"),
        ))
    }
}

/// Resolves the fields both endpoints share (`s`), with the completion bound the endpoint resolved from its
/// own fields (`max_tokens`; chat's smaller of `max_tokens` and `max_completion_tokens`) and its default.
pub(super) fn common(
    s: Shared<'_>,
    max_tokens: Option<usize>,
    default_max_tokens: usize,
    spec: &ModelSpec,
) -> Result<Common, ApiError> {
    if s.model != spec.id {
        return Err(ApiError::model_not_found(s.model, &spec.id));
    }
    let n = match s.n {
        None => 1,
        Some(v) if (1..=MAX_N as i64).contains(&v) => v as usize,
        Some(v) => {
            return Err(ApiError::invalid(
                "n",
                format!("`n` must be in 1..={MAX_N}, got {v}"),
            ));
        }
    };
    let stream = s.stream.unwrap_or(false);
    if s.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "`stream_options` is only allowed with `stream: true`",
        ));
    }
    let stop = s.stop.as_ref().map(|s| s.0.clone()).unwrap_or_default();
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("`stop` takes at most {MAX_STOP} sequences, got {}", stop.len()),
        ));
    }
    if let Some(i) = stop.iter().position(String::is_empty) {
        return Err(ApiError::invalid(
            &format!("stop[{i}]"),
            format!("`stop[{i}]` must not be empty"),
        ));
    }
    if s.service_tier == Some(ServiceTier::OverLimit) {
        // The seed: "OverLimit ... cannot be set by user in the request, but is used in a response".
        return Err(ApiError::invalid(
            "service_tier",
            "`service_tier` \"over-limit\" can only appear in responses",
        ));
    }
    let mut logit_bias = Vec::new();
    for (key, &bias) in s.logit_bias.iter().flatten() {
        let id = key
            .parse::<u32>()
            .ok()
            .filter(|&id| (id as usize) < spec.vocab_size)
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!(
                        "`logit_bias` key {key:?} is not a token id of this model (0..{})",
                        spec.vocab_size
                    ),
                )
            })?;
        if !(-100.0..=100.0).contains(&bias) {
            return Err(ApiError::invalid(
                "logit_bias",
                format!("`logit_bias` value for token {id} must be in [-100, 100], got {bias}"),
            ));
        }
        logit_bias.push((id, bias as f32));
    }
    logit_bias.sort_by_key(|&(id, _)| id);
    Ok(Common {
        model: s.model.to_owned(),
        n,
        max_tokens,
        default_max_tokens,
        stream,
        include_usage: stream
            && s.stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
        stop,
        sampling: Sampling {
            temperature: range("temperature", s.temperature, 0.0, 2.0, false, 1.0)?,
            top_p: range("top_p", s.top_p, 0.0, 1.0, true, 1.0)?,
            presence_penalty: range("presence_penalty", s.presence_penalty, -2.0, 2.0, false, 0.0)?,
            frequency_penalty: range("frequency_penalty", s.frequency_penalty, -2.0, 2.0, false, 0.0)?,
            logit_bias,
            // Any 64-bit integer is a seed; negative ones map to distinct u64 values.
            seed: s.seed.map(|v| v as u64),
        },
        service_tier: s.service_tier,
    })
}

/// Validates a completions request against the loaded model.
pub fn validate_completion(req: CompletionRequest, spec: &ModelSpec) -> Result<ValidCompletion, ApiError> {
    let max_tokens = positive("max_tokens", req.max_tokens)?;
    let common = common(req.shared(), max_tokens, DEFAULT_COMPLETION_MAX_TOKENS, spec)?;
    if req
        .best_of
        .as_ref()
        .is_some_and(|v| !v.is_null() && v != &serde_json::json!(1))
    {
        return Err(ApiError::unsupported(
            "best_of",
            "server-side best-of sampling is not implemented",
        ));
    }
    if req
        .suffix
        .as_ref()
        .is_some_and(|v| !v.is_null() && v != &serde_json::json!(""))
    {
        return Err(ApiError::unsupported(
            "suffix",
            "fill-in-the-middle is not implemented",
        ));
    }
    let logprobs = req
        .logprobs
        .map(|v| bounded("logprobs", v, MAX_COMPLETION_LOGPROBS))
        .transpose()?;
    match &req.prompt {
        Prompt::Texts(texts) if texts.is_empty() => {
            return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
        }
        Prompt::Texts(_) => {}
        Prompt::Tokens(prompts) => {
            for (i, ids) in prompts.iter().enumerate() {
                let param = format!("prompt[{i}]");
                if ids.is_empty() {
                    return Err(ApiError::invalid(&param, format!("`{param}` must not be empty")));
                }
                if let Some(id) = ids.iter().find(|&&id| id as usize >= spec.vocab_size) {
                    return Err(ApiError::invalid(
                        &param,
                        format!(
                            "`{param}` holds token id {id}, outside this model's vocabulary (0..{})",
                            spec.vocab_size
                        ),
                    ));
                }
                common.completion_budget(ids.len(), spec.context_length, &param)?;
            }
        }
    }
    Ok(ValidCompletion {
        common,
        prompt: req.prompt,
        echo: req.echo.unwrap_or(false),
        logprobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(max_tokens: Option<usize>, default_max_tokens: usize) -> Common {
        Common {
            model: "m".into(),
            n: 1,
            max_tokens,
            default_max_tokens,
            stream: false,
            include_usage: false,
            stop: Vec::new(),
            sampling: Sampling::default(),
            service_tier: None,
        }
    }

    #[test]
    fn completion_budget_fits_the_context() {
        // Requested bounds are honoured exactly when they fit, refused when they do not.
        assert_eq!(common(Some(10), 16).completion_budget(54, 64, "messages"), Ok(10));
        let e = common(Some(11), 16)
            .completion_budget(54, 64, "messages")
            .unwrap_err();
        assert_eq!(
            (e.status(), e.param.as_deref(), e.code),
            (400, Some("messages"), "context_length_exceeded")
        );
        assert!(
            e.message.contains("64") && e.message.contains("54") && e.message.contains("11"),
            "{}",
            e.message
        );
        // Without a bound: the default, capped by what the context leaves.
        assert_eq!(
            common(None, DEFAULT_CHAT_MAX_TOKENS).completion_budget(60, 64, "messages"),
            Ok(4)
        );
        assert_eq!(common(None, 16).completion_budget(3, 64, "prompt"), Ok(16));
        // A prompt that fills the context leaves no room at all.
        assert!(common(None, 16).completion_budget(64, 64, "prompt").is_err());
        assert!(
            common(None, 16)
                .completion_budget(usize::MAX, 64, "prompt")
                .is_err()
        );
    }
}
