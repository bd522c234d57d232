//! A valid request prepared once into a plan: everything the generation loop and the response need, built
//! by a pure function of the model's format ([`ModelFormat`]) and the request, before any device work.
//!
//! - [`PromptPlan`]: one prompt: its token ids, what to generate ([`GenParams`]: choices, token budget,
//!   sampling, stop strings, logprobs), one grammar constraint per choice where the output is constrained,
//!   and, for completions `echo`, the prompt's text.
//! - [`ChatPlan`]: a chat request: its prompt (the messages rendered through the template, tools and
//!   reasoning switches applied) and one text processor per choice ([`ChoiceText`]: reasoning split, tool
//!   calls parsed).
//! - [`CompletionPlan`]: a completions request: one [`PromptPlan`] per prompt.
//!
//! Constructors keep the invariants: a prompt is never empty, a constrained prompt has exactly one
//! constraint per choice, a chat plan exactly one text processor per choice. What a plan leaves out is
//! what is not a function of the request: the seed drawn for an unseeded request, the response id and
//! time, and the device ([`crate::engine::loaded::LoadedModel`] adds those when the stream starts).

use super::chat_choice::ChoiceText;
use super::format::ModelFormat;
use super::images::{Image, PlannedImage};
use super::structured::{MakeConstraint, response_constraint};
use super::tool_use::tool_use;
use crate::api::request::{ReasoningEffort, ServiceTier};
use crate::api::unions::Prompt;
use crate::api::validate::Common;
use crate::api::{ApiError, ValidChat, ValidCompletion};
use crate::engine::runtime::generation::GenParams;
use crate::sampling::constrain::Constraint;
use crate::tokenizer::{TemplateInputs, TokenizerError};

/// What a response's chunks report besides their choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// The requested tier (chunks carry it only when one was requested).
    pub service_tier: Option<ServiceTier>,
    /// The tier full responses report.
    pub response_tier: ServiceTier,
    /// Send the usage chunk (always for a non-streaming request, which is the stream collected).
    pub include_usage: bool,
}

impl StreamOptions {
    fn of(common: &Common) -> Self {
        Self {
            service_tier: common.service_tier,
            response_tier: common.response_tier(),
            include_usage: common.include_usage || !common.stream,
        }
    }
}

/// One prompt to complete.
pub struct PromptPlan {
    ids: Vec<u32>,
    params: GenParams,
    /// One per choice, or none.
    constraints: Option<Vec<Constraint>>,
    echo: Option<String>,
    /// The images whose tiles' rows stand over runs of `ids`.
    images: Vec<PlannedImage>,
}

impl PromptPlan {
    /// `ids` (not empty: the field `param` is named otherwise) generated as `params` says.
    pub fn new(ids: Vec<u32>, params: GenParams, param: &str) -> Result<Self, ApiError> {
        if ids.is_empty() {
            return Err(ApiError::cannot_serve(
                Some(param),
                "invalid_prompt",
                format!("`{param}` is empty"),
            ));
        }
        Ok(Self {
            ids,
            params,
            constraints: None,
            echo: None,
            images: Vec::new(),
        })
    }

    /// The prompt's images, placed over its image tokens.
    pub fn with_images(mut self, images: Vec<PlannedImage>) -> Self {
        self.images = images;
        self
    }

    pub fn images(&self) -> &[PlannedImage] {
        &self.images
    }

    /// Constrains every choice, each with its own constraint from `make`.
    pub fn constrained(mut self, make: &MakeConstraint<'_>) -> Result<Self, ApiError> {
        let all = (0..self.params.n)
            .map(|_| make())
            .collect::<Result<Vec<_>, _>>()?;
        self.constraints = Some(all);
        Ok(self)
    }

    /// Completions `echo`: the response starts with `text`.
    pub fn echoing(mut self, text: String) -> Self {
        self.echo = Some(text);
        self
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn params(&self) -> &GenParams {
        &self.params
    }

    pub fn is_constrained(&self) -> bool {
        self.constraints.is_some()
    }

    pub fn echo(&self) -> Option<&str> {
        self.echo.as_deref()
    }

    /// The parts, for the generation loop: `(ids, params, constraints, echo)`.
    pub fn into_parts(self) -> (Vec<u32>, GenParams, Option<Vec<Constraint>>, Option<String>) {
        (self.ids, self.params, self.constraints, self.echo)
    }

    /// Its images, leaving the rest of the plan.
    pub fn take_images(&mut self) -> Vec<PlannedImage> {
        std::mem::take(&mut self.images)
    }
}

/// A chat request, planned.
pub struct ChatPlan {
    prompt: PromptPlan,
    /// One per choice.
    texts: Vec<ChoiceText>,
    /// The rendered prompt.
    text: String,
    pub stream: StreamOptions,
}

impl ChatPlan {
    /// `prompt` (rendered as `text`) with a text processor per choice from `make`.
    pub fn new(
        prompt: PromptPlan,
        text: String,
        stream: StreamOptions,
        make: impl Fn() -> ChoiceText,
    ) -> Self {
        let texts = (0..prompt.params.n).map(|_| make()).collect();
        Self {
            prompt,
            texts,
            text,
            stream,
        }
    }

    pub fn prompt(&self) -> &PromptPlan {
        &self.prompt
    }

    pub fn prompt_mut(&mut self) -> &mut PromptPlan {
        &mut self.prompt
    }

    /// The prompt as the template rendered it.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn choices(&self) -> usize {
        self.texts.len()
    }

    /// The parts, for the stream: the prompt and the per-choice text processors.
    pub fn into_parts(self) -> (PromptPlan, Vec<ChoiceText>) {
        (self.prompt, self.texts)
    }
}

/// A completions request, planned: its prompts in order, choice indices `prompt · n + i`.
pub struct CompletionPlan {
    pub prompts: Vec<PromptPlan>,
    pub stream: StreamOptions,
}

fn params(common: &Common, max_new: usize, logprobs: Option<usize>, prompt_logprobs: bool) -> GenParams {
    GenParams {
        n: common.n,
        max_new,
        sampling: common.sampling.clone(),
        stop: common.stop.clone(),
        logprobs,
        prompt_logprobs,
        keep_special: false,
    }
}

/// Plans a chat request: the messages rendered through the template (the generic tool format where the
/// template has no tool syntax), its images (`images`, one per `image_url` part in order, as the edge
/// decoded them) preprocessed and placed, the completion budget, and the constraints (`response_format`,
/// forced tool calls). Refused here, before any device work: what the model cannot serve.
pub fn chat(format: &ModelFormat<'_>, req: ValidChat, images: &[Image]) -> Result<ChatPlan, ApiError> {
    let (tok, chat) = (format.tokenizer, format.chat);
    if !chat.template {
        let message = TokenizerError::NoChatTemplate.to_string();
        return Err(ApiError::cannot_serve(
            Some("messages"),
            "no_chat_template",
            message,
        ));
    }
    let tools = tool_use(&req, chat)?;
    let mut extra = serde_json::Map::new();
    if let Some(effort) = req.reasoning_effort {
        extra.insert("enable_thinking".into(), (effort != ReasoningEffort::None).into());
    }
    let mut messages: Vec<_> = req.messages.iter().map(super::prompt::template_message).collect();
    if format.images.is_some() {
        for (m, out) in req.messages.iter().zip(&mut messages) {
            out["content"] = super::images::template_content(m);
        }
    }
    super::tool_use::mistral_ids(&mut messages, chat);
    let generic = tools.as_ref().filter(|t| t.generic);
    if let Some(t) = generic {
        messages = super::tool_prompt::messages(&messages, &t.template_tools, t.forced);
    }
    let inputs = TemplateInputs {
        messages,
        tools: tools
            .as_ref()
            .filter(|t| !t.generic)
            .map(|t| t.template_tools.clone()),
        add_generation_prompt: true,
        extra,
        ..TemplateInputs::default()
    };
    let rendered = match super::prompt::render(tok, inputs.clone()) {
        // A template that refuses a system role gets the generic tools text in the first user turn.
        Err(_) if generic.is_some() => super::prompt::render(
            tok,
            TemplateInputs {
                messages: super::tool_prompt::in_first_user(inputs.messages),
                ..inputs
            },
        ),
        other => other,
    };
    let invalid =
        |e: TokenizerError| ApiError::cannot_serve(Some("messages"), "invalid_prompt", e.to_string());
    let (mut text, mut ids) = rendered.map_err(invalid)?;
    let mut planned = Vec::new();
    if let Some(f) = format.images {
        // Placeholders and image tokens typed in a message's text are refused as transformers refuses them.
        let pixels = super::images::preprocess(f, &req.messages, images)?;
        text = super::images::expand(&text, f, &pixels)?;
        // As a processor's `apply_chat_template` tokenises: with the tokenizer's special tokens (LLaVA's
        // BOS) unless the template wrote the BOS itself.
        let bos = &tok.bos_token;
        let special = bos.is_empty() || !text.starts_with(bos.as_str());
        if !pixels.is_empty() || special {
            ids = tok.encode(&text, special).map_err(invalid)?;
        }
        planned = super::images::place(&ids, f, pixels)?;
    }
    let max_new = req
        .common
        .completion_budget(ids.len(), format.spec.context_length, "messages")?;
    let mut params = params(&req.common, max_new, req.logprobs, false);
    // Call markers that are special tokens (`[TOOL_CALLS]`, `<|python_tag|>`) must reach the parser.
    params.keep_special = tools.is_some();
    let mut prompt = PromptPlan::new(ids, params, "messages")?.with_images(planned);
    let syntax = chat.reasoning.as_ref();
    let forced = match &tools {
        Some(t) => {
            // With thinking turned off the prompt has closed the think block: the call comes straight away.
            let thinking = syntax.filter(|_| req.reasoning_effort != Some(ReasoningEffort::None));
            t.constraint(&chat.special_tokens, format.vocab()?, thinking, &text)?
        }
        None => None,
    };
    let make = match forced {
        Some(make) => Some(make),
        None => match &req.response_format {
            crate::api::request::ResponseFormat::Text => None,
            f => response_constraint(format.vocab()?, f),
        },
    };
    if let Some(make) = &make {
        prompt = prompt.constrained(make)?;
    }
    let stream = StreamOptions::of(&req.common);
    Ok(ChatPlan::new(prompt, text.clone(), stream, || {
        let choice = ChoiceText::new(syntax, &text);
        match &tools {
            Some(t) => choice.with_tools(t.parser(), !t.forced),
            None => choice,
        }
    }))
}

/// Plans a completions request: each prompt tokenised (or taken as the ids given), its budget checked.
pub fn completion(format: &ModelFormat<'_>, req: ValidCompletion) -> Result<CompletionPlan, ApiError> {
    let tok = format.tokenizer;
    let prompts: Vec<(Vec<u32>, String)> = match req.prompt {
        Prompt::Texts(texts) => texts
            .into_iter()
            .map(|t| {
                let ids = tok
                    .encode(&t, true)
                    .map_err(|e| ApiError::cannot_serve(Some("prompt"), "invalid_prompt", e.to_string()))?;
                Ok((ids, t))
            })
            .collect::<Result<_, ApiError>>()?,
        Prompt::Tokens(lists) => lists
            .into_iter()
            .map(|ids| {
                let text = tok.decode(&ids, false).unwrap_or_default();
                (ids, text)
            })
            .collect(),
    };
    let prompt_logprobs = req.echo && req.logprobs.is_some();
    let prompts = prompts
        .into_iter()
        .map(|(ids, text)| {
            let max_new = req
                .common
                .completion_budget(ids.len(), format.spec.context_length, "prompt")?;
            let plan = PromptPlan::new(
                ids,
                params(&req.common, max_new, req.logprobs, prompt_logprobs),
                "prompt",
            )?;
            Ok(if req.echo { plan.echoing(text) } else { plan })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(CompletionPlan {
        prompts,
        stream: StreamOptions::of(&req.common),
    })
}
