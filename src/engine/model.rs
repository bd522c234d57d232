//! A loaded model: the decoder on its device, the tokenizer with its chat template, and the two endpoints.
//! Requests are validated against the model before any device work; a valid request becomes a stream of
//! chunks, and a non-streaming request is that stream collected. Bytes in: fetching and caching happen at
//! the edge.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use burn::tensor::Device;

use super::EngineError;
use super::chat_choice::ChoiceText;
use super::generation::{GenParams, Generation};
use super::prefix_cache::{DEFAULT_BUDGET, PrefixCache};
use super::reasoning::reasoning_syntax;
use super::respond::{Cancel, ChatStream, CompletionStream, PromptRun, StreamHeader, fingerprint};
use super::tool_use::tool_use;
use crate::api::request::{ReasoningEffort, ResponseFormat};
use crate::api::response::response_id;
use crate::api::unions::Prompt;
use crate::api::validate::Common;
use crate::api::{ApiError, ModelSpec, ValidChat, ValidCompletion};
use crate::loader::{Checkpoint, GgmlType, Quantizing, Reporting};
use crate::model::{Decoder, ModelConfig};
use crate::sampling::Rng;
use crate::sampling::constrain::Vocab;
use crate::tokenizer::time::now_secs;
use crate::tokenizer::{HfTokenizerFiles, ModelTokenizer, TemplateInputs, TokenizerError};

/// The files of a Hugging Face model repository, as bytes.
#[derive(Debug, Clone)]
pub struct HfFiles<'a> {
    pub config: &'a [u8],
    /// `(file name, bytes)` of each safetensors file.
    pub weights: Vec<(String, &'a [u8])>,
    /// `model.safetensors.index.json` of a sharded checkpoint.
    pub index: Option<&'a [u8]>,
    pub tokenizer: HfTokenizerFiles<'a>,
}

/// Bytes a loaded model takes (see [`Model::memory`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReport {
    pub weight_bytes: u64,
    /// Bytes the prefix cache's kept KV states take (part of `device_bytes_in_use` on wgpu).
    pub prefix_cache_bytes: u64,
    pub device_bytes_in_use: Option<u64>,
    pub device_bytes_reserved: Option<u64>,
}

/// A model ready to generate.
#[derive(Debug)]
pub struct Model {
    /// The id requests name in `model`.
    pub id: String,
    pub decoder: Decoder,
    pub tokenizer: Arc<ModelTokenizer>,
    /// The token table for constrained decoding, built on the first request that needs it.
    vocab: OnceLock<Result<Vocab, String>>,
    /// KV states of recent sequences, for prompts that start with one.
    prefixes: PrefixCache,
}

impl Model {
    /// Loads a single-file GGUF model: config, weights (dequantised to f32 on `device`), tokenizer and chat
    /// template all come from the file.
    pub fn from_gguf(id: &str, bytes: &[u8], device: &Device) -> Result<Self, EngineError> {
        Self::from_gguf_reporting(id, bytes, device, &mut |_, _| {})
    }

    /// [`Model::from_gguf`], reporting `(loaded, total)` bytes of weights handed to the device as it goes.
    pub fn from_gguf_reporting(
        id: &str,
        bytes: &[u8],
        device: &Device,
        on_upload: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, EngineError> {
        super::load::from_gguf(id, bytes, device, on_upload)
    }

    /// A model from its parts.
    pub(crate) fn new(id: &str, decoder: Decoder, tokenizer: ModelTokenizer) -> Self {
        Self {
            id: id.to_owned(),
            decoder,
            tokenizer: Arc::new(tokenizer),
            vocab: OnceLock::new(),
            prefixes: PrefixCache::new(DEFAULT_BUDGET),
        }
    }

    /// Loads a Hugging Face model: `config.json`, safetensors weights (one file, or shards with their
    /// `model.safetensors.index.json`), and the tokenizer files.
    pub fn from_hf(id: &str, files: HfFiles<'_>, device: &Device) -> Result<Self, EngineError> {
        Self::from_hf_reporting(id, files, device, &mut |_, _| {})
    }

    /// [`Model::from_hf`], reporting `(loaded, total)` bytes of weights handed to the device as it goes.
    pub fn from_hf_reporting(
        id: &str,
        files: HfFiles<'_>,
        device: &Device,
        on_upload: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, EngineError> {
        Self::from_hf_quantized(id, files, device, None, on_upload)
    }

    /// [`Model::from_hf_reporting`], with every float weight matrix quantized to `quantize` as it loads
    /// (kiln's quantizers; see [`crate::loader::quantize`]); `None` keeps the checkpoint's types.
    pub fn from_hf_quantized(
        id: &str,
        files: HfFiles<'_>,
        device: &Device,
        quantize: Option<GgmlType>,
        on_upload: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, EngineError> {
        let config = ModelConfig::from_json(files.config).map_err(crate::loader::LoadError::from)?;
        let tokenizer = ModelTokenizer::from_hf(HfTokenizerFiles {
            config: Some(files.config),
            ..files.tokenizer
        })?;
        let mut weights = match (files.index, files.weights.as_slice()) {
            (None, [(_, bytes)]) => Checkpoint::single(bytes)?,
            (index, _) => Checkpoint::shards(index, files.weights.clone())?,
        };
        let mut reporting = Reporting::new(&mut weights, on_upload);
        let decoder = match quantize {
            None => Decoder::load(config, &mut reporting, device)?,
            Some(ty) => Decoder::load(config, &mut Quantizing::new(&mut reporting, ty), device)?,
        };
        reporting.finish();
        Ok(Self::new(id, decoder, tokenizer))
    }

    /// The token table for constrained decoding (built once).
    fn vocab(&self) -> Result<&Vocab, ApiError> {
        self.vocab
            .get_or_init(|| {
                super::structured::vocab(&self.tokenizer, self.decoder.config.vocab_size)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| ApiError::cannot_serve(Some("response_format"), "unsupported_model", e.clone()))
    }

    /// Where the model's bytes are: its weights as held on the device (quantized blocks stay packed), and
    /// what the device's allocator holds now (weights, KV caches, activations; `None` where the backend
    /// does not report it, e.g. the CPU backend, whose memory is the wasm memory itself).
    pub fn memory(&self) -> MemoryReport {
        let pool = self.decoder.device().memory_pool_usage();
        MemoryReport {
            weight_bytes: self.decoder.device_bytes() as u64,
            prefix_cache_bytes: self.prefixes.bytes() as u64,
            device_bytes_in_use: pool.as_ref().map(|p| p.bytes_in_use),
            device_bytes_reserved: pool.map(|p| p.bytes_reserved),
        }
    }

    /// The `chatTemplate` load option: serves chat requests with `source` (a Jinja chat template, compiled
    /// now) instead of the model's own template, or gives one to a model that has none.
    pub fn with_chat_template(mut self, source: &str) -> Result<Self, EngineError> {
        // Only a model no stream holds yet (as after a load) has its tokenizer to itself.
        let t = Arc::get_mut(&mut self.tokenizer).ok_or_else(|| {
            TokenizerError::Files("the chat template is set at load, before any request".into())
        })?;
        t.set_chat_template(source)?;
        Ok(self)
    }

    /// The `prefixCacheBytes` load option: keeps the KV states of recent sequences in up to `budget` bytes
    /// (default [`DEFAULT_BUDGET`]) for prompts that start with one; 0 keeps none. A budget too small for
    /// one block of positions (256, the cache's growth step) is refused, naming the option.
    pub fn with_prefix_cache(mut self, budget: usize) -> Result<Self, EngineError> {
        let block = crate::model::layers::kv_cache::BLOCK;
        let least = self.decoder.new_cache(1, block).bytes_per_position() * block;
        if budget != 0 && budget < least {
            return Err(EngineError::LoadOption {
                option: "prefixCacheBytes",
                message: format!(
                    "{budget} bytes cannot hold one sequence: this model's KV cache grows by {block} positions, \
                     {least} bytes; give at least that, or 0 to keep no prefixes"
                ),
            });
        }
        self.prefixes = PrefixCache::new(budget);
        Ok(self)
    }

    /// The kept KV states (see [`super::prefix_cache`]).
    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefixes
    }

    /// What requests are validated against.
    pub fn spec(&self) -> ModelSpec {
        ModelSpec {
            id: self.id.clone(),
            context_length: self.decoder.config.max_position_embeddings,
            vocab_size: self.decoder.config.vocab_size,
            images: false,
            video: false,
        }
    }

    fn header(&self, prefix: &str, common: &Common) -> StreamHeader {
        let entropy = (u128::from(Rng::entropy_seed()) << 64) | u128::from(Rng::entropy_seed());
        StreamHeader {
            id: response_id(prefix, entropy),
            created: now_secs().max(0) as u64,
            model: self.id.clone(),
            system_fingerprint: fingerprint(),
            service_tier: common.service_tier,
            response_tier: common.response_tier(),
            // A non-streaming response is the stream collected, which needs the usage chunk.
            include_usage: common.include_usage || !common.stream,
        }
    }

    fn params(common: &Common, max_new: usize, logprobs: Option<usize>, prompt_logprobs: bool) -> GenParams {
        GenParams {
            n: common.n,
            max_new,
            sampling: common.sampling.clone(),
            stop: common.stop.clone(),
            logprobs,
            prompt_logprobs,
            entropy: Rng::entropy_seed(),
            keep_special: false,
        }
    }

    /// A validated chat request as a stream of `chat.completion.chunk`s (collect it for the full
    /// response). Refused here, before any device work: what kiln cannot honour yet.
    pub fn chat(&self, req: ValidChat) -> Result<ChatStream, ApiError> {
        if self.tokenizer.template.is_none() {
            let message = TokenizerError::NoChatTemplate.to_string();
            return Err(ApiError::cannot_serve(
                Some("messages"),
                "no_chat_template",
                message,
            ));
        }
        let tools = tool_use(&req, &self.tokenizer)?;
        let mut constraints = match req.response_format {
            ResponseFormat::Text => None,
            ref format => super::structured::response_constraints(self.vocab()?, format, req.common.n)?,
        };
        let mut extra = serde_json::Map::new();
        if let Some(effort) = req.reasoning_effort {
            extra.insert("enable_thinking".into(), (effort != ReasoningEffort::None).into());
        }
        let mut messages: Vec<_> = req.messages.iter().map(super::prompt::template_message).collect();
        super::tool_use::mistral_ids(&mut messages, &self.tokenizer);
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
        let rendered = match super::prompt::render(&self.tokenizer, inputs.clone()) {
            // A template that refuses a system role gets the generic tools text in the first user turn.
            Err(_) if generic.is_some() => super::prompt::render(
                &self.tokenizer,
                TemplateInputs {
                    messages: super::tool_prompt::in_first_user(inputs.messages),
                    ..inputs
                },
            ),
            other => other,
        };
        let (prompt, ids) = rendered
            .map_err(|e| ApiError::cannot_serve(Some("messages"), "invalid_prompt", e.to_string()))?;
        let spec = self.spec();
        let max_new = req
            .common
            .completion_budget(ids.len(), spec.context_length, "messages")?;
        let mut params = Self::params(&req.common, max_new, req.logprobs, false);
        let n = params.n;
        let syntax = self.tokenizer.template_source().and_then(reasoning_syntax);
        if let Some(t) = &tools {
            // Call markers that are special tokens (`[TOOL_CALLS]`, `<|python_tag|>`) must reach the parser.
            params.keep_special = true;
            // With thinking turned off the prompt has closed the think block: the call comes straight away.
            let thinking = match req.reasoning_effort {
                Some(ReasoningEffort::None) => None,
                _ => syntax.as_ref(),
            };
            if let Some(c) = t.constraints(&self.tokenizer, self.vocab()?, thinking, &prompt, n)? {
                constraints = Some(c);
            }
        }
        Ok(ChatStream {
            header: self.header("chatcmpl-", &req.common),
            generation: {
                let g = Generation::new(self.decoder.clone(), self.tokenizer.clone(), ids, params)
                    .reusing(self.prefixes.clone());
                match constraints {
                    None => g,
                    Some(c) => g.constrained(c),
                }
            },
            tokenizer: self.tokenizer.clone(),
            logprobs: req.logprobs.is_some(),
            started: vec![false; n],
            texts: (0..n)
                .map(|_| {
                    let text = ChoiceText::new(syntax.as_ref(), &prompt);
                    match &tools {
                        Some(t) => text.with_tools(t.parser(), !t.forced),
                        None => text,
                    }
                })
                .collect(),
            queue: VecDeque::new(),
            finished: false,
            cancel: Cancel::default(),
        })
    }

    /// A validated completions request as a stream of `text_completion` chunks (collect it for the full
    /// response). Prompts run one after another, `n` choices each (indices `prompt · n + i`).
    pub fn complete(&self, req: ValidCompletion) -> Result<CompletionStream, ApiError> {
        let spec = self.spec();
        let prompts: Vec<(Vec<u32>, String)> = match &req.prompt {
            Prompt::Texts(texts) => texts
                .iter()
                .map(|t| {
                    let ids = self.tokenizer.encode(t, true).map_err(|e| {
                        ApiError::cannot_serve(Some("prompt"), "invalid_prompt", e.to_string())
                    })?;
                    Ok((ids, t.clone()))
                })
                .collect::<Result<_, ApiError>>()?,
            Prompt::Tokens(lists) => lists
                .iter()
                .map(|ids| {
                    let text = self.tokenizer.decode(ids, false).unwrap_or_default();
                    (ids.clone(), text)
                })
                .collect(),
        };
        let mut runs = VecDeque::new();
        for (i, (ids, text)) in prompts.into_iter().enumerate() {
            if ids.is_empty() {
                return Err(ApiError::cannot_serve(
                    Some("prompt"),
                    "invalid_prompt",
                    "`prompt` is empty",
                ));
            }
            let max_new = req
                .common
                .completion_budget(ids.len(), spec.context_length, "prompt")?;
            let params = Self::params(
                &req.common,
                max_new,
                req.logprobs,
                req.echo && req.logprobs.is_some(),
            );
            runs.push_back(PromptRun {
                generation: Generation::new(self.decoder.clone(), self.tokenizer.clone(), ids, params)
                    .reusing(self.prefixes.clone()),
                echo: req.echo.then_some(text),
                first_index: i * req.common.n,
            });
        }
        Ok(CompletionStream {
            header: self.header("cmpl-", &req.common),
            runs,
            tokenizer: self.tokenizer.clone(),
            logprobs: req.logprobs.is_some(),
            queue: VecDeque::new(),
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            started: false,
            finished: false,
            cancel: Cancel::default(),
        })
    }
}
