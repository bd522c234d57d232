//! The Llama-family decoder (Llama 2/3, Mistral, SmolLM2, Qwen2, Qwen3), parameterised by a resolved
//! [`ModelConfig`]. Weight matrices stay in the checkpoint's quantized blocks where the device has a kernel
//! for them ([`Matrix`]); the KV cache grows as positions are appended ([`KvCache`]).
//!
//! Shapes: `b` batch, `s` new positions, `t` cached + new positions, `h` hidden size, `H` / `K` query /
//! key-value heads, `d` head dim, `V` vocabulary.

use burn::backend::DispatchDevice;
use burn::tensor::{Device, Tensor, TensorData};

use super::config::ModelConfig;
use super::kv_cache::KvCache;
use super::linear::{Linear, Matrix};
use super::norm::rms_norm;
use super::placed::{Placing, Tensors};
use crate::kernels;
use crate::kernels::gpu::decode::{self as fused, CacheSlot};
use crate::loader::{LoadError, Weights, layer_shapes};

#[derive(Debug, Clone)]
struct Layer {
    input_norm: Tensor<1>,
    post_attention_norm: Tensor<1>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Tensor<1>>,
    k_norm: Option<Tensor<1>>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The decoder's weights on a device.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub config: ModelConfig,
    device: Device,
    /// `[V, h]`.
    embed: Matrix,
    layers: Vec<Layer>,
    norm: Tensor<1>,
    /// `[V, h]`: the embedding table itself when tied.
    lm_head: Matrix,
    /// Whether `lm_head` shares the embedding table's storage.
    tied: bool,
    /// Whether single-position steps take the fused wgpu kernels ([`Decoder::step`]): on a wgpu device, unless
    /// turned off ([`Decoder::set_fused`]).
    fused: bool,
    /// `[max_pos, d / 2]` each.
    cos: Tensor<2>,
    sin: Tensor<2>,
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
}

fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

impl Decoder {
    /// Builds the decoder from a checkpoint (safetensors or GGUF) seen under Hugging Face tensor names,
    /// placing each tensor as it is taken.
    pub fn load(config: ModelConfig, ckpt: &mut dyn Weights, device: &Device) -> Result<Self, LoadError> {
        Self::assemble(config, &mut Placing::new(ckpt, device), device)
    }

    /// Builds the decoder from tensors on `device` (placed as taken, or as a streamed file arrived).
    pub fn assemble(config: ModelConfig, ckpt: &mut dyn Tensors, device: &Device) -> Result<Self, LoadError> {
        let c = &config;
        let (h, v) = (c.hidden_size, c.vocab_size);
        let take1 = |ckpt: &mut dyn Tensors, name: &str, n: usize| ckpt.vector(name, n);
        let matrix = |ckpt: &mut dyn Tensors, name: &str, shape: &[usize]| -> Result<Matrix, LoadError> {
            let shape: [usize; 2] = shape.try_into().map_err(|_| LoadError::Shape {
                name: name.into(),
                expected: vec![],
                actual: shape.to_vec(),
            })?;
            ckpt.matrix(name, shape)
        };
        let linear = |ckpt: &mut dyn Tensors,
                      prefix: &str,
                      shape: &[usize],
                      bias: bool|
         -> Result<Linear, LoadError> {
            let weight = matrix(ckpt, &format!("{prefix}.weight"), shape)?;
            let bias = match bias {
                true => Some(take1(ckpt, &format!("{prefix}.bias"), shape[0])?),
                false => None,
            };
            Ok(Linear { weight, bias })
        };
        let embed = matrix(ckpt, "model.embed_tokens.weight", &[v, h])?;
        let shapes = layer_shapes(c);
        let shape = |suffix: &str| {
            shapes
                .iter()
                .find(|(n, _)| *n == suffix)
                .map(|(_, s)| s.clone())
                .unwrap_or_default()
        };
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let p = format!("model.layers.{i}");
            let proj = |ckpt: &mut dyn Tensors, name: &str, bias: bool| {
                linear(
                    ckpt,
                    &format!("{p}.{name}"),
                    &shape(&format!("{name}.weight")),
                    bias,
                )
            };
            layers.push(Layer {
                input_norm: take1(ckpt, &format!("{p}.input_layernorm.weight"), h)?,
                post_attention_norm: take1(ckpt, &format!("{p}.post_attention_layernorm.weight"), h)?,
                q: proj(ckpt, "self_attn.q_proj", c.qkv_bias)?,
                k: proj(ckpt, "self_attn.k_proj", c.qkv_bias)?,
                v: proj(ckpt, "self_attn.v_proj", c.qkv_bias)?,
                o: proj(ckpt, "self_attn.o_proj", false)?,
                q_norm: match c.qk_norm {
                    true => Some(take1(ckpt, &format!("{p}.self_attn.q_norm.weight"), c.head_dim)?),
                    false => None,
                },
                k_norm: match c.qk_norm {
                    true => Some(take1(ckpt, &format!("{p}.self_attn.k_norm.weight"), c.head_dim)?),
                    false => None,
                },
                gate: proj(ckpt, "mlp.gate_proj", false)?,
                up: proj(ckpt, "mlp.up_proj", false)?,
                down: proj(ckpt, "mlp.down_proj", false)?,
            });
        }
        let norm = take1(ckpt, "model.norm.weight", h)?;
        // Tied embeddings reuse `embed_tokens`; a checkpoint that still carries `lm_head` is honoured.
        let tied = c.tie_word_embeddings && !ckpt.contains("lm_head.weight");
        let lm_head = match tied {
            false => matrix(ckpt, "lm_head.weight", &[v, h])?,
            true => embed.clone(),
        };
        if let Some(extra) = ckpt.leftover() {
            return Err(LoadError::Extra(extra));
        }
        let half = c.head_dim / 2;
        let inv_freq = c.inv_freq();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for pos in 0..c.max_position_embeddings {
            for f in &inv_freq {
                // f32 like transformers: the angle is formed in single precision.
                let angle = pos as f32 * *f as f32;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let max = c.max_position_embeddings;
        Ok(Self {
            cos: tensor(cos, [max, half], device),
            sin: tensor(sin, [max, half], device),
            config,
            device: device.clone(),
            embed,
            layers,
            norm,
            lm_head,
            tied,
            fused: matches!(device.as_dispatch(), DispatchDevice::Cube(_)),
        })
    }

    /// Whether single-position steps on wgpu take the fused decode kernels (the default there) or the
    /// generic path (what prefill and the CPU backend run); `true` has no effect off wgpu.
    pub fn set_fused(&mut self, on: bool) {
        self.fused = on && matches!(self.device.as_dispatch(), DispatchDevice::Cube(_));
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes the weights take on the device (a tied `lm_head` counted once).
    pub fn device_bytes(&self) -> usize {
        let linears = self
            .layers
            .iter()
            .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]);
        let head = if self.tied { 0 } else { self.lm_head.device_bytes() };
        self.embed.device_bytes() + head + linears.map(|l| l.weight.device_bytes()).sum::<usize>()
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions (allocated as it fills).
    pub fn new_cache(&self, batch: usize, capacity: usize) -> KvCache {
        let c = &self.config;
        KvCache::new(
            c.num_layers,
            batch,
            c.num_kv_heads,
            c.head_dim,
            capacity,
            &self.device,
        )
    }

    /// Runs `tokens` (`b` rows of `s` ids) after what `cache` holds, appending to it. Returns logits
    /// `[b, s, V]` when `all_positions`, else `[b, 1, V]` for the last position.
    pub fn forward(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        all_positions: bool,
    ) -> Result<Tensor<3>, ForwardError> {
        let c = &self.config;
        let (b, s) = (tokens.len(), tokens.first().map_or(0, Vec::len));
        if s == 0 || b != cache.batch() || tokens.iter().any(|row| row.len() != s) {
            return Err(ForwardError::Ragged);
        }
        if let Some(&id) = tokens.iter().flatten().find(|&&id| id as usize >= c.vocab_size) {
            return Err(ForwardError::Token {
                id,
                vocab: c.vocab_size,
            });
        }
        let (pos, t) = (cache.len, cache.len + s);
        if t > cache.capacity {
            return Err(ForwardError::CacheFull {
                capacity: cache.capacity,
                needed: t,
            });
        }
        if t > c.max_position_embeddings {
            return Err(ForwardError::Position(t - 1));
        }
        if s == 1 && self.fused {
            return Ok(self.step(tokens, cache));
        }
        let mut x = self.embed.rows(tokens, &self.device); // [b, s, h]
        let cos = self.cos.clone().narrow(0, pos, s).unsqueeze::<4>(); // [1, 1, s, d/2]
        let sin = self.sin.clone().narrow(0, pos, s).unsqueeze::<4>();
        // Additive causal mask [1, 1, s, t]: query i (absolute pos + i) sees keys 0..=pos + i.
        let mask = (s > 1).then(|| {
            let m: Vec<f32> = (0..s)
                .flat_map(|i| (0..t).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
                .collect();
            tensor(m, [s, t], &self.device).unsqueeze::<4>()
        });
        for (index, layer) in self.layers.iter().enumerate() {
            let residual = x.clone();
            let hn = rms_norm(x, layer.input_norm.clone(), c.rms_norm_eps);
            let heads = |y: Tensor<3>, n: usize| y.reshape([b, s, n, c.head_dim]).swap_dims(1, 2); // [b, n, s, d]
            let mut q = heads(layer.q.forward(hn.clone()), c.num_heads);
            let mut k = heads(layer.k.forward(hn.clone()), c.num_kv_heads);
            let v = heads(layer.v.forward(hn), c.num_kv_heads);
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                q = rms_norm(q, qn.clone(), c.rms_norm_eps);
                k = rms_norm(k, kn.clone(), c.rms_norm_eps);
            }
            let q = rope(q, &cos, &sin);
            let k = rope(k, &cos, &sin);
            let (kv, d) = (c.num_kv_heads, c.head_dim);
            let (keys, values) = cache.append(index, k, v); // [b, K, t, d]
            let group = c.num_heads / kv;
            let expand = |cached: &Tensor<4>| {
                cached
                    .clone()
                    .reshape([b, kv, 1, t, d])
                    .expand([b, kv, group, t, d])
                    .reshape([b, c.num_heads, t, d])
            };
            let scores = q
                .matmul(expand(&keys).swap_dims(2, 3))
                .div_scalar((d as f64).sqrt()); // [b, H, s, t]
            let scores = match &mask {
                Some(m) => scores + m.clone(),
                None => scores,
            };
            let attn = kernels::softmax_last(scores).matmul(expand(&values)); // [b, H, s, d]
            let attn = attn.swap_dims(1, 2).reshape([b, s, c.num_heads * d]);
            x = residual + layer.o.forward(attn);
            let residual = x.clone();
            let hn = rms_norm(x, layer.post_attention_norm.clone(), c.rms_norm_eps);
            let mlp = layer.down.forward(kernels::silu_mul(
                layer.gate.forward(hn.clone()),
                layer.up.forward(hn),
            ));
            x = residual + mlp;
        }
        cache.advance(s);
        let x = if all_positions { x } else { x.narrow(1, s - 1, 1) };
        let x = rms_norm(x, self.norm.clone(), c.rms_norm_eps);
        let n = x.dims()[1];
        Ok(self
            .lm_head
            .matmul(x.reshape([b * n, c.hidden_size]))
            .reshape([b, n, c.vocab_size]))
    }
}

/// Rotate-half rope: `x: [b, n, s, d]`, `cos`/`sin: [1, 1, s, d/2]`.
fn rope(x: Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>) -> Tensor<4> {
    let half = x.dims()[3] / 2;
    let x1 = x.clone().narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    Tensor::cat(
        vec![
            x1.clone() * cos.clone() - x2.clone() * sin.clone(),
            x2 * cos.clone() + x1 * sin.clone(),
        ],
        3,
    )
}

// One decode step (one new position per sequence) on wgpu through the fused kernels of
// `kernels::gpu::decode`: per layer RMSNorm (fused with the residual add), the q/k/v projections, rope
// with the cache append and attention over the cache in one kernel, the output projection, and the MLP
// with `silu(gate) · up` in one kernel: eleven dispatches per layer (the last, the residual add with the
// next RMSNorm) where the generic path launches some sixty. (A GEMV computing gate, up and their product in one launch measured no faster per step on
// lavapipe and cost ~270 ms more pipeline compilation on the first step.)
// Activations are `[b, features]` throughout.

/// `x: [r, in]` through `l` → `[r, out]`.
fn apply(l: &Linear, x: Tensor<2>) -> Tensor<2> {
    let [r, n] = x.dims();
    let [out, _] = l.weight.dims();
    l.forward(x.reshape([r, 1, n])).reshape([r, out])
}

impl Decoder {
    /// Runs one token per sequence (`tokens`: `b` rows of one id, already validated) after what `cache`
    /// holds, appending to it; logits `[b, 1, V]`.
    fn step(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Tensor<3> {
        let c = &self.config;
        let b = tokens.len();
        let (h, d, heads, kv) = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads);
        let eps = c.rms_norm_eps as f32;
        let pos = cache.len;
        let mut x = self.embed.rows(tokens, &self.device).reshape([b, h]);
        let mut hn = match self.layers.first() {
            Some(first) => fused::rms_norm(x.clone(), &first.input_norm, eps),
            None => fused::rms_norm(x.clone(), &self.norm, eps),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let mut q = apply(&layer.q, hn.clone());
            let mut k = apply(&layer.k, hn.clone());
            let v = apply(&layer.v, hn);
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                q = fused::rms_norm(q.reshape([b * heads, d]), qn, eps).reshape([b, heads * d]);
                k = fused::rms_norm(k.reshape([b * kv, d]), kn, eps).reshape([b, kv * d]);
            }
            let (keys, values) = cache.slots(i, 1);
            let slot = CacheSlot { keys, values };
            let attn = fused::attention_append(q, k, v, (&self.cos, &self.sin), pos, slot);
            let (x1, hn1) = fused::add_rms_norm(x, apply(&layer.o, attn), &layer.post_attention_norm, eps);
            let act = fused::silu_mul(apply(&layer.gate, hn1.clone()), apply(&layer.up, hn1));
            let mlp = apply(&layer.down, act);
            let next = self.layers.get(i + 1).map_or(&self.norm, |l| &l.input_norm);
            (x, hn) = fused::add_rms_norm(x1, mlp, next, eps);
        }
        cache.advance(1);
        self.lm_head.matmul(hn).reshape([b, 1, c.vocab_size])
    }
}
