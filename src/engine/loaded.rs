//! A loaded model: the decoder on its device, the tokenizer with its chat template, and the two endpoints.
//! Requests are validated against the model before any device work; a valid request becomes a stream of
//! chunks, and a non-streaming request is that stream collected. Bytes in: fetching and caching happen at
//! the edge.

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};

use super::EngineError;
use super::protocol::format::{ChatFormat, LazyVocab, ModelFormat};
use super::protocol::images::{Image, ImageFormat, PlannedImage};
use super::protocol::plan::PromptPlan;
use super::protocol::respond::{ChatStream, CompletionStream, StreamHeader};
use super::runtime::chunks::{Media, Prompt};
use super::runtime::context::{self, Bound, Grant, Room};
use super::runtime::generation::Generation;
use super::runtime::prefix_cache::{DEFAULT_BUDGET, PrefixCache};
use crate::api::{ApiError, ModelSpec, ValidChat, ValidCompletion};
use crate::loader::{Checkpoint, GgmlType, Quantizing, Reporting, Weights};
use crate::model::vision::preprocess::ImageProcessor;
use crate::model::{Decoder, ModelConfig, Vision};
use crate::sampling::Rng;
use crate::tokenizer::{HfTokenizerFiles, ModelTokenizer, TokenizerError};

/// The files of a Hugging Face model repository, as bytes.
#[derive(Debug, Clone)]
pub struct HfFiles<'a> {
    pub config: &'a [u8],
    /// `(file name, bytes)` of each safetensors file.
    pub weights: Vec<(String, &'a [u8])>,
    /// `model.safetensors.index.json` of a sharded checkpoint.
    pub index: Option<&'a [u8]>,
    pub tokenizer: HfTokenizerFiles<'a>,
    /// `preprocessor_config.json` of a vision-language model (its family's defaults without it).
    pub preprocessor: Option<&'a [u8]>,
}

/// Bytes a loaded model takes (see [`LoadedModel::memory`]).
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
pub struct LoadedModel {
    /// The id requests name in `model`.
    pub id: String,
    pub decoder: Decoder,
    pub tokenizer: Arc<ModelTokenizer>,
    /// What requests are validated against.
    spec: ModelSpec,
    /// The context the load granted (`spec.context_length` is its length).
    context: Grant,
    /// The chat template's syntax (tools, reasoning), found at load.
    chat_format: ChatFormat,
    /// The token table for constrained decoding, built on the first request that needs it.
    vocab: LazyVocab,
    /// KV states of recent sequences, for prompts that start with one.
    prefixes: PrefixCache,
    /// A vision-language model's vision part, and how its requests' images are prepared.
    vision: Option<(Vision, ImageFormat)>,
}

impl LoadedModel {
    /// Loads a single-file GGUF model: config, weights (dequantised to f32 on `device`), tokenizer and chat
    /// template all come from the file.
    pub fn from_gguf(id: &str, bytes: &[u8], device: &Device) -> Result<Self, EngineError> {
        Self::from_gguf_reporting(id, bytes, device, &mut |_, _| {})
    }

    /// [`LoadedModel::from_gguf`], reporting `(loaded, total)` bytes of weights handed to the device as it goes.
    pub fn from_gguf_reporting(
        id: &str,
        bytes: &[u8],
        device: &Device,
        on_upload: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, EngineError> {
        super::runtime::load::from_gguf(id, bytes, device, on_upload)
    }

    /// A model from its parts.
    pub(crate) fn new(id: &str, decoder: Decoder, tokenizer: ModelTokenizer) -> Self {
        let spec = ModelSpec {
            id: id.to_owned(),
            context_length: decoder.config.max_position_embeddings,
            vocab_size: decoder.config.vocab_size,
            images: false,
            video: false,
        };
        let context = Grant {
            length: spec.context_length,
            model_length: spec.context_length,
            kv_bytes_per_position: Room::of_decoder(&decoder).per_position,
            bound: Bound::Model,
        };
        Self {
            id: id.to_owned(),
            decoder,
            spec,
            context,
            chat_format: ChatFormat::of(&tokenizer),
            tokenizer: Arc::new(tokenizer),
            vocab: LazyVocab::default(),
            prefixes: PrefixCache::new(DEFAULT_BUDGET),
            vision: None,
        }
    }

    /// The model serving the context [`context::grant`] grants it on its device: `requested` by the load
    /// (`contextLength`), of the model's own `model_length` (when the loader already narrowed the config
    /// to a first estimate; else the decoder's). The rope tables are rebuilt for a shorter context.
    pub(crate) fn with_context(
        mut self,
        requested: Option<usize>,
        model_length: Option<usize>,
    ) -> Result<Self, EngineError> {
        // What the config holds now: the model's own, or the loader's first estimate of the grant (its rope
        // tables are built for it; `Engine.inspect` reports the same estimate).
        let first = self.decoder.config.max_position_embeddings;
        let model_length = model_length.unwrap_or(first);
        let room = Room::of_decoder(&self.decoder);
        let mut grant = context::grant(
            &room,
            self.decoder.device(),
            model_length,
            requested,
            self.prefixes.budget() as u64,
        )?;
        grant.length = grant.length.min(first);
        self.decoder.grant_context(grant.length);
        self.spec.context_length = grant.length;
        self.context = grant;
        Ok(self)
    }

    /// The context the load granted: its length, the model's own, a position's KV bytes, what bounds it.
    pub fn context(&self) -> Grant {
        self.context
    }

    /// The model with its vision part: chat requests take `image_url` parts, prepared by `processor`
    /// (whose tiles must be the encoder's `image_size`: a load error naming both otherwise).
    pub(crate) fn with_vision(
        mut self,
        vision: Vision,
        processor: ImageProcessor,
    ) -> Result<Self, EngineError> {
        let c = &vision.config;
        if processor.side() != c.image_size {
            return Err(preprocessor_error(format!(
                "its images are {} pixels wide, the vision encoder's image_size is {}",
                processor.side(),
                c.image_size
            )));
        }
        let format = ImageFormat {
            processor,
            image_token: c.image_token_id,
            tokens_per_tile: c.tokens_per_image(),
        };
        self.spec.images = true;
        self.vision = Some((vision, format));
        Ok(self)
    }

    /// Loads a Hugging Face model: `config.json`, safetensors weights (one file, or shards with their
    /// `model.safetensors.index.json`), and the tokenizer files.
    pub fn from_hf(id: &str, files: HfFiles<'_>, device: &Device) -> Result<Self, EngineError> {
        Self::from_hf_reporting(id, files, device, &mut |_, _| {})
    }

    /// [`LoadedModel::from_hf`], reporting `(loaded, total)` bytes of weights handed to the device as it goes.
    pub fn from_hf_reporting(
        id: &str,
        files: HfFiles<'_>,
        device: &Device,
        on_upload: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, EngineError> {
        Self::from_hf_quantized(id, files, device, None, on_upload)
    }

    /// [`LoadedModel::from_hf_reporting`], with every float weight matrix quantized to `quantize` as it loads
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
        }
        .skipping(config.text_only.map_or(&[][..], |t| t.towers));
        let mut reporting = Reporting::new(&mut weights, on_upload);
        let mut quantizing;
        let ckpt: &mut dyn Weights = match quantize {
            None => &mut reporting,
            Some(ty) => {
                // The language model's matrices only: a vision part keeps its checkpoint's types.
                let vision = match &config.vision {
                    Some(v) => v
                        .projector
                        .family()
                        .map_err(crate::loader::LoadError::from)?
                        .layouts(),
                    None => &[],
                };
                let kept = vision
                    .iter()
                    .flat_map(|l| [format!("{}.", l.tower), l.projector.to_owned()]);
                quantizing = Quantizing::new(&mut reporting, ty).keeping(kept);
                &mut quantizing
            }
        };
        let Some(v) = config.vision.clone() else {
            let decoder = Decoder::load(config, ckpt, device)?;
            reporting.finish();
            return Ok(Self::new(id, decoder, tokenizer));
        };
        let processor = match files.preprocessor {
            Some(json) => {
                ImageProcessor::from_json(json, v.projector).map_err(|e| preprocessor_error(e.to_string()))?
            }
            None => ImageProcessor::default_for(v.projector, v.image_size),
        };
        let (decoder, vision) = crate::model::vision::load(config, ckpt, device)?;
        reporting.finish();
        Self::new(id, decoder, tokenizer).with_vision(vision, processor)
    }

    /// Where the model's bytes are: its weights as held on the device (quantized blocks stay packed), and
    /// what the device's allocator holds now (weights, KV caches, activations; `None` where the backend
    /// does not report it, e.g. the CPU backend, whose memory is the wasm memory itself).
    pub fn memory(&self) -> MemoryReport {
        let pool = self.decoder.device().memory_pool_usage();
        MemoryReport {
            weight_bytes: self.decoder.device_bytes(),
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
        self.chat_format = ChatFormat::of(t);
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

    /// The kept KV states (see [`super::runtime::prefix_cache`]).
    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefixes
    }

    /// What requests are validated against.
    pub fn spec(&self) -> ModelSpec {
        self.spec.clone()
    }

    /// The chat template's syntax, as found at load.
    pub fn chat_format(&self) -> &ChatFormat {
        &self.chat_format
    }

    /// What requests are planned against ([`super::protocol::plan`]).
    pub fn format(&self) -> ModelFormat<'_> {
        ModelFormat {
            spec: &self.spec,
            tokenizer: &self.tokenizer,
            chat: &self.chat_format,
            vocab: &self.vocab,
            images: self.vision.as_ref().map(|(_, f)| f),
        }
    }

    /// The vision part of a vision-language model.
    pub fn vision(&self) -> Option<&Vision> {
        self.vision.as_ref().map(|(v, _)| v)
    }

    /// `ids` with each image's tiles encoded and their rows placed over the tiles' runs of image tokens
    /// (each tile a media chunk keyed by its pixel values, for the prefix cache), and what was encoded.
    fn place_images(
        &self,
        ids: &[u32],
        images: Vec<PlannedImage>,
    ) -> Result<(Prompt, EncodedImages), ApiError> {
        let (vision, format) = self
            .vision
            .as_ref()
            .ok_or_else(|| ApiError::internal("images planned for a model without a vision part"))?;
        let c = &vision.config;
        let settings = format!("{:?} {}", format.processor, format.tokens_per_tile);
        let mut encoded = EncodedImages {
            images: images.len(),
            tokens: 0,
            last: None,
        };
        let mut media = Vec::new();
        for image in images {
            let p = &image.pixels;
            let pixels = Tensor::<4>::from_data(
                TensorData::new(p.pixels(), [p.tiles.len(), c.num_channels, p.side, p.side]),
                self.decoder.device(),
            );
            let rows = vision
                .encode(pixels)
                .map_err(|e| ApiError::internal(format!("encoding an image: {e}")))?;
            for (k, (&at, tile)) in image.at.iter().zip(&p.tiles).enumerate() {
                let bytes: Vec<u8> = tile.iter().flat_map(|v| v.to_le_bytes()).collect();
                let rows = rows.clone().narrow(0, k, 1).squeeze_dim::<2>(0);
                encoded.tokens += rows.dims()[0];
                encoded.last = Some(rows.clone().narrow(0, 0, 1).reshape([-1]).narrow(0, 0, 1));
                let key = Media::key_of(&bytes, &settings);
                media.push((
                    at,
                    Media {
                        key,
                        rows,
                        attend: vision.attend(),
                    },
                ));
            }
        }
        let prompt = Prompt::placed(ids.to_vec(), media)
            .ok_or_else(|| ApiError::internal("image rows placed outside the prompt"))?;
        Ok((prompt, encoded))
    }

    /// The generation of a planned prompt on this model's device, reusing kept prefixes; `placed`: its
    /// ids with their images' rows ([`LoadedModel::place_images`]), where it has images.
    fn start(&self, prompt: PromptPlan, placed: Option<Prompt>) -> Generation {
        let (ids, params, constraints, _) = prompt.into_parts();
        let g = Generation::new(
            self.decoder.clone(),
            self.tokenizer.clone(),
            placed.unwrap_or_else(|| Prompt::from(ids)),
            params,
            Rng::entropy_seed(),
        )
        .reusing(self.prefixes.clone());
        match constraints {
            None => g,
            Some(c) => g.constrained(c),
        }
    }

    /// A validated chat request as a stream of `chat.completion.chunk`s (collect it for the full
    /// response). Refused here, before any device work: what the model cannot serve ([`super::protocol::plan::chat`]).
    pub fn chat(&self, req: ValidChat) -> Result<ChatStream, ApiError> {
        self.chat_with_images(req, &[])
    }

    /// [`LoadedModel::chat`] of a request whose `image_url` parts the edge decoded into `images`, one per
    /// part in order. The images are preprocessed and encoded before the stream starts.
    pub fn chat_with_images(&self, req: ValidChat, images: &[Image]) -> Result<ChatStream, ApiError> {
        self.chat_encoding(req, images).map(|(stream, _)| stream)
    }

    /// [`LoadedModel::chat_with_images`], with what its images became (`None` without images).
    pub fn chat_encoding(
        &self,
        req: ValidChat,
        images: &[Image],
    ) -> Result<(ChatStream, Option<EncodedImages>), ApiError> {
        let mut plan = super::protocol::plan::chat(&self.format(), req, images)?;
        let planned = plan.prompt_mut().take_images();
        let (placed, encoded) = match planned.is_empty() {
            true => (None, None),
            false => {
                let (prompt, encoded) = self.place_images(plan.prompt().ids(), planned)?;
                (Some(prompt), Some(encoded))
            }
        };
        let header = StreamHeader::new("chatcmpl-", &self.id, plan.stream);
        let stream = ChatStream::new(plan, header, self.tokenizer.clone(), |p| self.start(p, placed));
        Ok((stream, encoded))
    }

    /// A validated completions request as a stream of `text_completion` chunks (collect it for the full
    /// response). Prompts run one after another, `n` choices each (indices `prompt · n + i`).
    pub fn complete(&self, req: ValidCompletion) -> Result<CompletionStream, ApiError> {
        let plan = super::protocol::plan::completion(&self.format(), req)?;
        let header = StreamHeader::new("cmpl-", &self.id, plan.stream);
        Ok(CompletionStream::new(plan, header, self.tokenizer.clone(), |p| {
            self.start(p, None)
        }))
    }
}

/// A request's images as the encoder made them: how many, and how many prompt positions their rows take.
#[derive(Debug)]
pub struct EncodedImages {
    pub images: usize,
    pub tokens: usize,
    /// One value of the last tile's rows: once it can be read, the device has encoded every image.
    last: Option<Tensor<1>>,
}

impl EncodedImages {
    /// Resolves when the device has finished encoding the images (an asynchronous read of one value:
    /// the device works in order, so the encoder's rows are then there).
    pub async fn ready(&mut self) -> Result<(), ApiError> {
        if let Some(last) = self.last.take() {
            last.into_data_async()
                .await
                .map_err(|e| ApiError::internal(format!("reading the encoded image: {e:?}")))?;
        }
        Ok(())
    }
}

/// A `preprocessor_config.json` that does not fit the model.
fn preprocessor_error(reason: String) -> EngineError {
    crate::loader::LoadError::from(crate::model::ConfigError::Invalid {
        field: "preprocessor_config.json",
        reason,
    })
    .into()
}
