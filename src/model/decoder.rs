//! The decoder of every supported family: embeddings, one [`Layer`] per layer in its family's shape (see
//! `model::arch`), the final norm and the `lm_head`, parameterised by a resolved [`ModelConfig`]. Weight
//! matrices stay in the checkpoint's quantized blocks where the device has a kernel for them ([`Matrix`]);
//! the KV cache grows as positions are appended ([`KvCache`]). A batch of token ids runs through
//! [`Decoder::forward`] (decode steps; the fused wgpu step for one position), a prompt of chunks — ids and
//! embedding rows, causal or bidirectional ([`super::input`]) — through [`Decoder::prefill`].
//!
//! Shapes: `b` batch, `s` new positions, `t` cached + new positions, `h` hidden size, `V` vocabulary.

#[cfg(feature = "webgpu")]
use burn::backend::DispatchDevice;
use burn::tensor::{Device, Tensor};

use std::sync::Arc;

use super::arch::Layer;
use super::config::ModelConfig;
use super::input::{self, Chunk};
use super::layers::attention::Positions;
use super::layers::kv_cache::KvCache;
use super::layers::linear::Matrix;
use super::layers::norm::rms_norm;
use super::layers::rope::RopeTable;
use super::per_layer::PerLayer;
use super::placed::{Placing, Tensors};
use super::text_part::TextPart;
use crate::kernels::caps::Caps;
use crate::kernels::mask::{Mask, SpanError};
use crate::loader::{LoadError, Weights};

/// The decoder's weights on a device.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub config: ModelConfig,
    pub(super) device: Device,
    /// `[V, h]`.
    pub(super) embed: Matrix,
    pub(super) blocks: Vec<Arc<dyn Layer>>,
    /// `[h]`, as the family multiplies (Gemma's `1 + w` applied).
    pub(super) norm: Tensor<1>,
    /// `[V, h]`: the embedding table itself when tied.
    pub(super) lm_head: Matrix,
    /// Whether `lm_head` shares the embedding table's storage.
    tied: bool,
    /// Whether single-position steps take the fused wgpu kernels ([`Decoder::step`]): on a wgpu device, for
    /// the layer shapes they implement, unless turned off ([`Decoder::set_fused`]).
    fused: bool,
    /// Which steps on wgpu read back the sampler's candidates instead of whole rows of logits, when the
    /// request allows ([`Decoder::set_select_on_device`]).
    select: SelectOnDevice,
    /// The device's capabilities, handed to the fused step's kernels and the device-side argmax
    /// ([`Decoder::set_caps`]).
    caps: Caps,
    /// One per rope of the config.
    pub(super) ropes: Vec<RopeTable>,
    /// Per-layer embeddings, for a family that has them (`model::per_layer`).
    pub(super) per_layer: Option<PerLayer>,
}

/// Which decode steps on wgpu select the sampler's candidates on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectOnDevice {
    /// Every step reads whole rows of logits.
    Never,
    /// Greedy steps read their argmax (one launch, 8 bytes); sampled steps whole rows.
    Greedy,
    /// Nucleus steps also read the 64 largest logits (a sort on the device).
    Always,
}

impl SelectOnDevice {
    /// The default for a device of `caps`: `Always` on GPUs; `Greedy` on software adapters, where
    /// the sort costs more than the row it saves (measured: 25–32 ms per step on lavapipe, about 0.4 s on
    /// SwiftShader, against a 49 152-logit read that costs next to nothing there).
    pub fn for_caps(caps: Caps) -> Self {
        match caps.software {
            true => Self::Greedy,
            false => Self::Always,
        }
    }
}

/// The decoder could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForwardError {
    #[error("the KV cache holds {capacity} positions; {needed} are needed")]
    CacheFull { capacity: usize, needed: usize },
    #[error("position {0} is beyond the model's `max_position_embeddings`")]
    Position(usize),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    Token { id: u32, vocab: usize },
    #[error("a batch needs rows of equal, non-zero length")]
    Ragged,
    #[error("a prompt chunk of embedding rows is {got:?}; the model takes [n, {hidden}] with n > 0")]
    Rows { got: Vec<usize>, hidden: usize },
    #[error("a prompt chunk of embedding rows is on another device than the model")]
    RowsDevice,
    #[error(transparent)]
    Span(#[from] SpanError),
    #[error(
        "this model's layers take per-layer embeddings of token ids; a prompt chunk of embedding rows has none"
    )]
    PerLayerRows,
}

impl Decoder {
    /// Builds the decoder from a checkpoint (safetensors or GGUF) seen under Hugging Face tensor names,
    /// placing each tensor as it is taken.
    pub fn load(config: ModelConfig, ckpt: &mut dyn Weights, device: &Device) -> Result<Self, LoadError> {
        Self::assemble(config, &mut Placing::new(ckpt, device), device)
    }

    /// Builds the decoder from tensors on `device` (placed as taken, or as a streamed file arrived).
    pub fn assemble(config: ModelConfig, ckpt: &mut dyn Tensors, device: &Device) -> Result<Self, LoadError> {
        // A multimodal checkpoint: refused by name rather than as a missing or unexpected tensor (its
        // language model is assembled with its vision part, by `model::vision::assemble`).
        if let Some(v) = &config.vision {
            return Err(crate::model::ConfigError::Invalid {
                field: "vision_config",
                reason: format!(
                    "this is a multimodal checkpoint ({} vision encoder): its language model is loaded \
                     with its vision part (`model::vision`), which kiln's engine does not take yet",
                    v.model_type.as_deref().unwrap_or("a")
                ),
            }
            .into());
        }
        // A multimodal checkpoint whose towers kiln does not run: its language model, by its names.
        if let Some(t) = config.text_only {
            let text = ModelConfig {
                text_only: None,
                ..config
            };
            return Self::assemble(text, &mut TextPart::new(ckpt, t.text, "lm_head.weight"), device);
        }
        let c = &config;
        let (h, v) = (c.hidden_size, c.vocab_size);
        let embed = ckpt.matrix("model.embed_tokens.weight", [v, h])?;
        let blocks = (0..c.num_layers)
            .map(|i| c.arch.family().load_layer(c, i, ckpt))
            .collect::<Result<Vec<_>, _>>()?;
        let family = c.arch.family();
        let norm = family.final_norm(ckpt.vector(family.final_norm_names().0, h)?);
        let per_layer = PerLayer::load(c, ckpt)?;
        // Tied embeddings reuse `embed_tokens`; a checkpoint that still carries `lm_head` is honoured.
        let tied = c.tie_word_embeddings && !ckpt.contains("lm_head.weight");
        let lm_head = match tied {
            false => ckpt.matrix("lm_head.weight", [v, h])?,
            true => embed.clone(),
        };
        if let Some(extra) = ckpt.leftover() {
            return Err(LoadError::Extra(extra));
        }
        let ropes = c
            .ropes
            .iter()
            .map(|r| RopeTable::new(r, c.max_position_embeddings, device))
            .collect();
        let mut decoder = Self {
            config,
            device: device.clone(),
            embed,
            blocks,
            norm,
            lm_head,
            tied,
            fused: false,
            select: SelectOnDevice::for_caps(Caps::of(device)),
            caps: Caps::of(device),
            ropes,
            per_layer,
        };
        decoder.set_fused(true);
        Ok(decoder)
    }

    /// Whether single-position steps on wgpu take the fused decode kernels (the default there, for the
    /// layer shapes they implement) or the generic path (what prefill and the CPU backend run); `true` has
    /// no effect off wgpu or for other shapes.
    pub fn set_fused(&mut self, on: bool) {
        #[cfg(feature = "webgpu")]
        {
            self.fused = on && matches!(self.device.as_dispatch(), DispatchDevice::Cube(_)) && self.fusable();
        }
        // Without the WebGPU backend there is no wgpu device to fuse on.
        #[cfg(not(feature = "webgpu"))]
        {
            let _ = on;
            self.fused = false;
        }
    }

    /// Whether single-position steps take the fused decode kernels ([`Decoder::set_fused`]).
    pub fn is_fused(&self) -> bool {
        self.fused
    }

    /// The device capabilities the decoder's own kernels run by: the device's ([`Caps::of`]) unless
    /// [`Decoder::set_caps`] chose others.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Runs the fused step (its norms, attention, gated activation and GEMVs), the device-side argmax
    /// and the KV caches made from now on by `caps`, capabilities the device has (tests and benchmarks
    /// compare the kernels' paths on one load). The generic path's products keep their weights' caps.
    pub fn set_caps(&mut self, caps: Caps) {
        self.caps = caps;
    }

    /// Which steps on wgpu select the sampler's candidates on the device (`engine::runtime::runner::Readout`)
    /// instead of reading every logit back; no effect off wgpu.
    pub fn set_select_on_device(&mut self, select: SelectOnDevice) {
        self.select = select;
    }

    /// Which steps may read back candidates ([`Decoder::set_select_on_device`]; `Never` off wgpu).
    pub fn selects_on_device(&self) -> SelectOnDevice {
        match self.device.as_dispatch() {
            #[cfg(feature = "webgpu")]
            DispatchDevice::Cube(_) => self.select,
            _ => SelectOnDevice::Never,
        }
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Serves at most `positions` positions (a load's granted context, at most the model's own): the
    /// position check and the rope tables, which are rebuilt for that many.
    pub fn grant_context(&mut self, positions: usize) {
        if positions == self.config.max_position_embeddings {
            return;
        }
        self.config.max_position_embeddings = positions;
        self.ropes = self
            .config
            .ropes
            .iter()
            .map(|r| RopeTable::new(r, positions, &self.device))
            .collect();
    }

    /// Bytes the weights take on the device (a tied `lm_head` counted once). `u64`: a model's weights on a
    /// GPU may pass wasm32's 4 GiB (each tensor's bytes fit a `usize`; their sum need not).
    pub fn device_bytes(&self) -> u64 {
        let head = match self.tied {
            true => 0,
            false => self.lm_head.device_bytes() as u64,
        };
        let per_layer = self.per_layer.as_ref().map_or(0, |p| p.device_bytes() as u64);
        let linears: u64 = self
            .blocks
            .iter()
            .flat_map(|b| b.linears())
            .map(|l| l.weight.device_bytes() as u64)
            .sum();
        self.embed.device_bytes() as u64 + head + per_layer + linears
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions (allocated as it fills), each
    /// layer's of the kind its family chose.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> KvCache {
        let c = &self.config;
        let kinds: Vec<_> = c.layers.iter().map(|l| l.cache).collect();
        let dims: Vec<_> = (0..c.num_layers).map(|i| c.attn_dims(i)).collect();
        KvCache::with_layer_dims(&kinds, &dims, batch, capacity, &self.device, self.cache_dtype())
    }

    /// What the KV cache holds: f16 where the fused wgpu step runs in f16 ([`Decoder::caps`]), f32
    /// otherwise (the generic path and the CPU backend read f32).
    pub fn cache_dtype(&self) -> burn::tensor::DType {
        match self.fused && self.caps.features.f16 {
            true => burn::tensor::DType::F16,
            false => burn::tensor::DType::F32,
        }
    }

    /// Whether keys cached in a cache of `a` positions are valid in one of `b` positions (the rope
    /// tables agree; see [`RopeTable::same_table`]), so that a kept prefix can serve a new request.
    pub fn same_positions(&self, a: usize, b: usize) -> bool {
        self.ropes.iter().all(|t| t.same_table(a, b))
    }

    /// Runs `tokens` (`b` rows of `s` ids) after what `cache` holds, appending to it. Returns logits
    /// `[b, s, V]` when `all_positions`, else `[b, 1, V]` for the last position.
    pub fn forward(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        all_positions: bool,
    ) -> Result<Tensor<3>, ForwardError> {
        let (b, s) = (tokens.len(), tokens.first().map_or(0, Vec::len));
        if s == 0 || b != cache.batch() || tokens.iter().any(|row| row.len() != s) {
            return Err(ForwardError::Ragged);
        }
        self.check_ids(tokens.iter().flatten())?;
        self.check_room(cache, s)?;
        if let Some(n) = cache.snapshot_within(s) {
            let (first, rest) = tokens[0].split_at(n);
            return self.in_two(
                cache,
                all_positions,
                |d, c, all| Ok(d.run_ids(&[first.to_vec()], c, all)),
                |d, c, all| d.forward(&[rest.to_vec()], c, all),
            );
        }
        #[cfg(feature = "webgpu")]
        if s == 1 && self.fused {
            return Ok(self.step(tokens, cache));
        }
        Ok(self.run_ids(tokens, cache, all_positions))
    }

    /// [`Decoder::run`] of the embedding rows of `tokens` (and their per-layer inputs, where the family
    /// has them).
    fn run_ids(&self, tokens: &[Vec<u32>], cache: &mut KvCache, all: bool) -> Tensor<3> {
        let x = self.embed(tokens);
        let per_layer = self
            .per_layer
            .as_ref()
            .map(|p| p.inputs(tokens, x.clone(), self.config.rms_norm_eps, &self.device));
        self.run_with(x, Vec::new(), cache, all, per_layer)
    }

    /// Runs a prompt of `chunks` (one sequence: `cache` of batch 1) after what `cache` holds, appending
    /// to it: ids embedded as [`Decoder::forward`] embeds them, embedding rows placed as they are, each
    /// bidirectional chunk's rows seeing each other in every layer (a later row within a sliding
    /// layer's window of it: `kernels::mask`). Logits as [`Decoder::forward`]'s
    /// (`b` = 1). A prompt of ids only is [`Decoder::forward`] of them, to the bit.
    pub fn prefill(
        &self,
        chunks: &[Chunk<'_>],
        cache: &mut KvCache,
        all_positions: bool,
    ) -> Result<Tensor<3>, ForwardError> {
        if let Some(ids) = input::all_ids(chunks) {
            return self.forward(&[ids], cache, all_positions);
        }
        let h = self.config.hidden_size;
        let s: usize = chunks.iter().map(Chunk::len).sum();
        if s == 0 || cache.batch() != 1 {
            return Err(ForwardError::Ragged);
        }
        for c in chunks {
            match c {
                Chunk::Ids(ids) => self.check_ids(ids.iter())?,
                Chunk::Rows { rows, .. } => {
                    let [n, width] = rows.dims();
                    if n == 0 || width != h {
                        return Err(ForwardError::Rows {
                            got: vec![n, width],
                            hidden: h,
                        });
                    }
                    if rows.device() != self.device {
                        return Err(ForwardError::RowsDevice);
                    }
                }
            }
        }
        self.check_room(cache, s)?;
        if self.per_layer.is_some() {
            // Per-layer embeddings are a token's: rows standing for media have none.
            return Err(ForwardError::PerLayerRows);
        }
        if let Some((first, rest)) = cache.snapshot_within(s).and_then(|n| input::split(chunks, n)) {
            return self.in_two(
                cache,
                all_positions,
                |d, c, all| d.prefill(&first, c, all),
                |d, c, all| d.prefill(&rest, c, all),
            );
        }
        let spans = input::spans(chunks, cache.len);
        Mask::check(cache.len, s, &spans)?;
        let parts: Vec<Tensor<3>> = chunks
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| match c {
                Chunk::Ids(ids) => self.embed(&[ids.to_vec()]),
                Chunk::Rows { rows, .. } => (*rows).clone().unsqueeze::<3>(),
            })
            .collect();
        Ok(self.run(Tensor::cat(parts, 1), spans, cache, all_positions))
    }

    /// Runs a forward in two parts, `first` then `rest`, keeping the recurrent states between them as a
    /// snapshot ([`KvCache::snapshot_within`]): logits as one forward returns them (both parts' positions
    /// when `all`).
    fn in_two(
        &self,
        cache: &mut KvCache,
        all: bool,
        first: impl FnOnce(&Self, &mut KvCache, bool) -> Result<Tensor<3>, ForwardError>,
        rest: impl FnOnce(&Self, &mut KvCache, bool) -> Result<Tensor<3>, ForwardError>,
    ) -> Result<Tensor<3>, ForwardError> {
        let head = first(self, cache, all)?;
        cache.snapshot();
        let tail = rest(self, cache, all)?;
        Ok(match all {
            true => Tensor::cat(vec![head, tail], 1),
            false => tail,
        })
    }

    /// The embedding rows `[n, h]` of `ids` as a forward feeds them to the first layer (scaled where the
    /// family scales them): a chunk of these rows runs exactly as the ids do.
    pub fn embeddings(&self, ids: &[u32]) -> Result<Tensor<2>, ForwardError> {
        self.check_ids(ids.iter())?;
        Ok(self.embed(&[ids.to_vec()]).squeeze_dim::<2>(0))
    }

    /// `tokens: [b][s]` → their embedding rows `[b, s, h]`, scaled as the family scales them.
    pub(super) fn embed(&self, tokens: &[Vec<u32>]) -> Tensor<3> {
        let x = self.embed.rows(tokens, &self.device);
        match self.config.embed_scale {
            Some(scale) => x.mul_scalar(scale as f32),
            None => x,
        }
    }

    fn check_ids<'a>(&self, mut ids: impl Iterator<Item = &'a u32>) -> Result<(), ForwardError> {
        let vocab = self.config.vocab_size;
        match ids.find(|&&id| id as usize >= vocab) {
            Some(&id) => Err(ForwardError::Token { id, vocab }),
            None => Ok(()),
        }
    }

    /// Whether `s` more positions fit the cache and the model's positions.
    fn check_room(&self, cache: &KvCache, s: usize) -> Result<(), ForwardError> {
        let t = cache.len + s;
        if t > cache.capacity {
            return Err(ForwardError::CacheFull {
                capacity: cache.capacity,
                needed: t,
            });
        }
        if t > self.config.max_position_embeddings {
            return Err(ForwardError::Position(t - 1));
        }
        Ok(())
    }

    /// The layers over `x: [b, s, h]` (checked to fit `cache`) with `spans` attending bidirectionally,
    /// then the final norm and the `lm_head`: logits as [`Decoder::forward`] returns them.
    fn run(
        &self,
        x: Tensor<3>,
        spans: Vec<std::ops::Range<usize>>,
        cache: &mut KvCache,
        all: bool,
    ) -> Tensor<3> {
        self.run_with(x, spans, cache, all, None)
    }

    /// [`Decoder::run`] with every layer's own input (`[b, s, L, n]`, `model::per_layer`).
    fn run_with(
        &self,
        mut x: Tensor<3>,
        spans: Vec<std::ops::Range<usize>>,
        cache: &mut KvCache,
        all: bool,
        per_layer: Option<Tensor<4>>,
    ) -> Tensor<3> {
        let c = &self.config;
        let [b, s, _] = x.dims();
        let mut at = Positions::new(
            c,
            &self.ropes,
            (cache.len, s),
            cache.capacity,
            spans,
            &self.device,
        );
        at.per_layer = per_layer;
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.forward(x, c, i, cache, &at);
        }
        cache.advance(s);
        let x = if all { x } else { x.narrow(1, s - 1, 1) };
        let x = rms_norm(x, self.norm.clone(), c.rms_norm_eps);
        let n = x.dims()[1];
        let logits = self.lm_head.matmul(x.reshape([b * n, c.hidden_size]));
        self.cap_logits(logits).reshape([b, n, c.vocab_size])
    }

    /// The final logit softcapping of the config, if any: `cap · tanh(logits / cap)`.
    pub(super) fn cap_logits(&self, logits: Tensor<2>) -> Tensor<2> {
        match self.config.final_softcap {
            Some(cap) => crate::kernels::softcap(logits, cap),
            None => logits,
        }
    }
}
