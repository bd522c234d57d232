//! Generation deltas → OpenAI stream chunks, and the full responses as those streams collected (one code
//! path: a non-streaming request runs the same stream with usage on and folds its chunks).
//!
//! Chat streams: each choice's first chunk carries `role: "assistant"` and `content: ""`; content chunks
//! follow; the choice's last chunk has an empty delta and its `finish_reason`; with
//! `stream_options.include_usage`, every chunk has `usage: null` and a final chunk with no choices carries
//! the usage. Completion streams: `text_completion` chunks with each choice's text pieces, the last with its
//! `finish_reason`; `echo` puts the prompt first. All chunks of a stream share `id`, `created`, `model` and
//! `system_fingerprint`. For templates with think blocks, a chat delta's text inside the block is sent as
//! `reasoning_content` (and `reasoning`) instead of `content` (see [`super::chat_choice`]).

use std::collections::{BTreeMap, VecDeque};

use std::sync::Arc;

use super::chat_choice::ChoiceText;
use super::plan::{ChatPlan, CompletionPlan, PromptPlan, StreamOptions};
use crate::api::ApiError;
use crate::api::request::ServiceTier;
use crate::api::response::*;
use crate::engine::runtime::generation::{ChoiceDelta, Generation, TokenOut};
use crate::sampling::Rng;
use crate::tokenizer::ModelTokenizer;
use crate::tokenizer::time::now_secs;

/// Stops a stream between device steps, also while it is being collected (an abort from JavaScript).
#[derive(Debug, Clone, Default)]
pub struct Cancel(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Cancel {
    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What every chunk of a stream shares.
#[derive(Debug, Clone)]
pub struct StreamHeader {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    /// The requested tier (chunks carry it only when one was requested).
    pub service_tier: Option<ServiceTier>,
    /// The tier full responses report.
    pub response_tier: ServiceTier,
    pub include_usage: bool,
}

impl StreamHeader {
    /// A new response of `model`: a fresh id (`prefix` + random), the time now, and `options`.
    pub fn new(prefix: &str, model: &str, options: StreamOptions) -> Self {
        let entropy = (u128::from(Rng::entropy_seed()) << 64) | u128::from(Rng::entropy_seed());
        Self {
            id: response_id(prefix, entropy),
            created: now_secs().max(0) as u64,
            model: model.to_owned(),
            system_fingerprint: fingerprint(),
            service_tier: options.service_tier,
            response_tier: options.response_tier,
            include_usage: options.include_usage,
        }
    }
}

/// `system_fingerprint`: the engine and its version.
pub fn fingerprint() -> String {
    format!("fp_kiln_{}", env!("CARGO_PKG_VERSION").replace('.', "_"))
}

/// `usage` of a stream: `cached` of the prompt tokens came from the prefix cache, `reasoning` of the
/// completion tokens were spent thinking.
fn usage(prompt: usize, cached: usize, completion: usize, reasoning: u32) -> Usage {
    Usage::new(prompt as u32, completion as u32, cached as u32, reasoning)
}

fn chat_token(tok: &ModelTokenizer, t: &TokenOut) -> TokenLogprob {
    TokenLogprob {
        token: tok.token_text(t.id),
        logprob: t.logprob.unwrap_or(0.0),
        bytes: Some(tok.token_bytes(t.id)),
        top_logprobs: t
            .top
            .iter()
            .map(|&(id, logprob)| TopLogprob {
                token: tok.token_text(id),
                logprob,
                bytes: Some(tok.token_bytes(id)),
            })
            .collect(),
    }
}

/// A chat completion as a stream of chunks.
pub struct ChatStream {
    header: StreamHeader,
    generation: Generation,
    tokenizer: Arc<ModelTokenizer>,
    logprobs: bool,
    started: Vec<bool>,
    /// Each choice's text → `reasoning_content` / `content`.
    texts: Vec<ChoiceText>,
    queue: VecDeque<ChatCompletionChunk>,
    finished: bool,
    cancel: Cancel,
}

impl ChatStream {
    /// `plan` as a stream with `header`; `start` makes the generation of its prompt (nothing runs on the
    /// device until the stream is pulled).
    pub fn new(
        plan: ChatPlan,
        header: StreamHeader,
        tokenizer: Arc<ModelTokenizer>,
        start: impl FnOnce(PromptPlan) -> Generation,
    ) -> Self {
        let (prompt, texts) = plan.into_parts();
        let logprobs = prompt.params().logprobs.is_some();
        Self {
            header,
            generation: start(prompt),
            tokenizer,
            logprobs,
            started: vec![false; texts.len()],
            texts,
            queue: VecDeque::new(),
            finished: false,
            cancel: Cancel::default(),
        }
    }

    /// A handle that stops this stream at its next step.
    pub fn cancel_handle(&self) -> Cancel {
        self.cancel.clone()
    }

    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> ChatCompletionChunk {
        let h = &self.header;
        ChatCompletionChunk {
            id: h.id.clone(),
            object: ChatChunkObject::ChatCompletionChunk,
            created: h.created,
            model: h.model.clone(),
            choices,
            usage: h.include_usage.then_some(usage),
            service_tier: h.service_tier,
            system_fingerprint: h.system_fingerprint.clone(),
        }
    }

    fn push_delta(&mut self, d: ChoiceDelta) -> Result<(), ApiError> {
        let index = d.index as u32;
        let logprobs = self.logprobs.then(|| ChatLogprobs {
            content: Some(d.tokens.iter().map(|t| chat_token(&self.tokenizer, t)).collect()),
            refusal: None,
        });
        let first = !std::mem::replace(&mut self.started[d.index], true);
        let length = d.finish == Some(FinishReason::Length);
        let out = self.texts[d.index].step(&d.text, 1, d.finish.is_some(), length)?;
        let calls = !out.tool_calls.is_empty();
        if first || !out.reasoning.is_empty() || !out.content.is_empty() || calls || !d.tokens.is_empty() {
            let reasoning = (!out.reasoning.is_empty()).then_some(out.reasoning);
            let delta = Delta {
                role: first.then_some(AssistantRole::Assistant),
                content: (first || !out.content.is_empty() || (reasoning.is_none() && !calls))
                    .then_some(out.content),
                reasoning_content: reasoning.clone(),
                reasoning,
                tool_calls: calls.then_some(out.tool_calls),
            };
            let choice = ChunkChoice {
                index,
                delta,
                finish_reason: None,
                logprobs,
            };
            self.queue.push_back(self.chunk(vec![choice], None));
        }
        if let Some(reason) = d.finish {
            let reason = match reason {
                FinishReason::Stop if self.texts[d.index].calls() > 0 => FinishReason::ToolCalls,
                other => other,
            };
            let choice = ChunkChoice {
                index,
                delta: Delta::default(),
                finish_reason: Some(reason),
                logprobs: None,
            };
            self.queue.push_back(self.chunk(vec![choice], None));
        }
        Ok(())
    }

    /// The next chunk; `None` when the stream is over. A device error ends the stream with that error.
    pub async fn next(&mut self) -> Option<Result<ChatCompletionChunk, ApiError>> {
        loop {
            if !self.finished && self.cancel.is_set() {
                self.finished = true;
                return Some(Err(ApiError::aborted()));
            }
            if let Some(c) = self.queue.pop_front() {
                return Some(Ok(c));
            }
            if self.finished {
                return None;
            }
            match self.generation.next().await {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e.to_api()));
                }
                Ok(Some(deltas)) => {
                    if let Err(e) = deltas.into_iter().try_for_each(|d| self.push_delta(d)) {
                        self.finished = true;
                        return Some(Err(e));
                    }
                }
                Ok(None) => {
                    self.finished = true;
                    if self.header.include_usage {
                        let reasoning = self.texts.iter().map(|t| t.reasoning_tokens).sum();
                        let u = usage(
                            self.generation.prompt_len(),
                            self.generation.cached_tokens(),
                            self.generation.completion_tokens(),
                            reasoning,
                        );
                        self.queue.push_back(self.chunk(Vec::new(), Some(u)));
                    }
                }
            }
        }
    }

    /// Runs the stream to its end and folds it into a `chat.completion` (the stream must include usage).
    pub async fn collect(mut self) -> Result<ChatCompletion, ApiError> {
        let mut choices: BTreeMap<u32, ChatChoice> = BTreeMap::new();
        let mut total = None;
        let header = self.header.clone();
        while let Some(chunk) = self.next().await {
            let chunk = chunk?;
            if let Some(Some(u)) = chunk.usage {
                total = Some(u);
            }
            for c in chunk.choices {
                let entry = choices.entry(c.index).or_insert_with(|| ChatChoice {
                    index: c.index,
                    message: AssistantMessage::default(),
                    finish_reason: FinishReason::Stop,
                    logprobs: None,
                });
                if let Some(text) = c.delta.content {
                    entry.message.content.get_or_insert_default().push_str(&text);
                }
                for call in c.delta.tool_calls.into_iter().flatten() {
                    let calls = entry.message.tool_calls.get_or_insert_default();
                    let function = call.function.unwrap_or_default();
                    match call.id {
                        Some(id) => calls.push(ResponseToolCall {
                            id,
                            kind: call.kind.unwrap_or_default(),
                            function: ResponseFunctionCall {
                                name: function.name.unwrap_or_default(),
                                arguments: function.arguments.unwrap_or_default(),
                            },
                        }),
                        None => {
                            if let Some(last) = calls.get_mut(call.index as usize) {
                                last.function
                                    .arguments
                                    .push_str(&function.arguments.unwrap_or_default());
                            }
                        }
                    }
                }
                if let Some(text) = c.delta.reasoning_content {
                    entry
                        .message
                        .reasoning_content
                        .get_or_insert_default()
                        .push_str(&text);
                    entry.message.reasoning.get_or_insert_default().push_str(&text);
                }
                if let Some(lp) = c.logprobs {
                    let all = entry.logprobs.get_or_insert_with(|| ChatLogprobs {
                        content: Some(Vec::new()),
                        refusal: None,
                    });
                    all.content
                        .get_or_insert_default()
                        .extend(lp.content.unwrap_or_default());
                }
                if let Some(reason) = c.finish_reason {
                    entry.finish_reason = reason;
                }
            }
        }
        Ok(ChatCompletion {
            id: header.id,
            object: ChatCompletionObject::ChatCompletion,
            created: header.created,
            model: header.model,
            choices: choices
                .into_values()
                .map(|mut c| {
                    // A reply that is only tool calls has `content: null`, as OpenAI's.
                    if c.message.tool_calls.is_some() && c.message.content.as_deref() == Some("") {
                        c.message.content = None;
                    }
                    c
                })
                .collect(),
            usage: total.ok_or_else(|| ApiError::internal("the stream ended without usage"))?,
            service_tier: header.response_tier,
            system_fingerprint: header.system_fingerprint,
        })
    }
}

/// One prompt of a completions request: its generation and what `echo` puts first.
struct PromptRun {
    generation: Generation,
    /// The prompt's text when `echo`.
    echo: Option<String>,
    /// Choice indices start here (`prompt_index · n`).
    first_index: usize,
}

/// A completions request (one or more prompts, `n` choices each) as a stream of chunks.
pub struct CompletionStream {
    header: StreamHeader,
    runs: VecDeque<PromptRun>,
    tokenizer: Arc<ModelTokenizer>,
    logprobs: bool,
    queue: VecDeque<Completion>,
    prompt_tokens: usize,
    /// Of those, the tokens the prefix cache held.
    cached_tokens: usize,
    completion_tokens: usize,
    started: bool,
    finished: bool,
    cancel: Cancel,
}

impl CompletionStream {
    /// `plan` as a stream with `header`; `start` makes each prompt's generation (they run one after
    /// another as the stream is pulled).
    pub fn new(
        plan: CompletionPlan,
        header: StreamHeader,
        tokenizer: Arc<ModelTokenizer>,
        mut start: impl FnMut(PromptPlan) -> Generation,
    ) -> Self {
        let logprobs = plan
            .prompts
            .first()
            .is_some_and(|p| p.params().logprobs.is_some());
        let runs = plan
            .prompts
            .into_iter()
            .enumerate()
            .map(|(i, prompt)| {
                let first_index = i * prompt.params().n;
                let echo = prompt.echo().map(str::to_owned);
                PromptRun {
                    generation: start(prompt),
                    echo,
                    first_index,
                }
            })
            .collect();
        Self {
            header,
            runs,
            tokenizer,
            logprobs,
            queue: VecDeque::new(),
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            started: false,
            finished: false,
            cancel: Cancel::default(),
        }
    }

    /// A handle that stops this stream at its next step.
    pub fn cancel_handle(&self) -> Cancel {
        self.cancel.clone()
    }

    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> Completion {
        let h = &self.header;
        Completion {
            id: h.id.clone(),
            object: TextCompletionObject::TextCompletion,
            created: h.created,
            model: h.model.clone(),
            choices,
            usage,
            service_tier: h.service_tier,
            system_fingerprint: h.system_fingerprint.clone(),
        }
    }

    fn logprobs_of(&self, tokens: &[TokenOut], offset: usize) -> CompletionLogprobs {
        let mut lp = CompletionLogprobs::default();
        for t in tokens {
            lp.tokens.push(self.tokenizer.token_text(t.id));
            lp.token_logprobs.push(t.logprob);
            // The alternatives and, as OpenAI does, the chosen token (up to `logprobs + 1` entries), most
            // likely first.
            lp.top_logprobs.push(t.logprob.map(|chosen| {
                let alternatives = t.top.iter().map(|&(id, l)| (self.tokenizer.token_text(id), l));
                TopLogprobs::ranked(alternatives.chain([(self.tokenizer.token_text(t.id), chosen)]))
            }));
            lp.text_offset.push((offset + t.text_offset) as u32);
        }
        lp
    }

    /// The next chunk; `None` when the stream is over.
    pub async fn next(&mut self) -> Option<Result<Completion, ApiError>> {
        loop {
            if !self.finished && self.cancel.is_set() {
                self.finished = true;
                return Some(Err(ApiError::aborted()));
            }
            if let Some(c) = self.queue.pop_front() {
                return Some(Ok(c));
            }
            if self.finished {
                return None;
            }
            let Some(run) = self.runs.front_mut() else {
                self.finished = true;
                if self.header.include_usage {
                    let u = usage(self.prompt_tokens, self.cached_tokens, self.completion_tokens, 0);
                    self.queue.push_back(self.chunk(Vec::new(), Some(u)));
                }
                continue;
            };
            let step = run.generation.next().await;
            let (first, echo) = (run.first_index, run.echo.clone());
            match step {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e.to_api()));
                }
                Ok(None) => {
                    let done = self.runs.pop_front();
                    if let Some(r) = done {
                        self.prompt_tokens += r.generation.prompt_len();
                        self.cached_tokens += r.generation.cached_tokens();
                        self.completion_tokens += r.generation.completion_tokens();
                    }
                    self.started = false;
                }
                Ok(Some(deltas)) => {
                    let echo_chars = echo.as_ref().map_or(0, |e| e.chars().count());
                    let prompt_tokens = std::mem::take(&mut run.generation.prompt_tokens_out);
                    let first_step = !std::mem::replace(&mut self.started, true);
                    for d in deltas {
                        let mut text = String::new();
                        let mut lp = CompletionLogprobs::default();
                        if first_step && let Some(e) = &echo {
                            text.push_str(e);
                            lp = self.logprobs_of(&prompt_tokens, 0);
                        }
                        text.push_str(&d.text);
                        lp.append(self.logprobs_of(&d.tokens, echo_chars));
                        let choice = CompletionChoice {
                            index: (first + d.index) as u32,
                            text,
                            finish_reason: d.finish,
                            logprobs: self.logprobs.then_some(lp),
                        };
                        self.queue.push_back(self.chunk(vec![choice], None));
                    }
                }
            }
        }
    }

    /// Runs the stream to its end and folds it into a `text_completion` (the stream must include usage).
    pub async fn collect(mut self) -> Result<Completion, ApiError> {
        let mut choices: BTreeMap<u32, CompletionChoice> = BTreeMap::new();
        let mut total = None;
        let header = self.header.clone();
        while let Some(chunk) = self.next().await {
            let chunk = chunk?;
            if chunk.usage.is_some() {
                total = chunk.usage;
            }
            for c in chunk.choices {
                let entry = choices.entry(c.index).or_insert_with(|| CompletionChoice {
                    index: c.index,
                    text: String::new(),
                    finish_reason: None,
                    logprobs: None,
                });
                entry.text.push_str(&c.text);
                if let Some(lp) = c.logprobs {
                    entry.logprobs.get_or_insert_default().append(lp);
                }
                if c.finish_reason.is_some() {
                    entry.finish_reason = c.finish_reason;
                }
            }
        }
        Ok(Completion {
            id: header.id,
            object: TextCompletionObject::TextCompletion,
            created: header.created,
            model: header.model,
            choices: choices.into_values().collect(),
            usage: Some(total.ok_or_else(|| ApiError::internal("the stream ended without usage"))?),
            service_tier: Some(header.response_tier),
            system_fingerprint: header.system_fingerprint,
        })
    }
}
