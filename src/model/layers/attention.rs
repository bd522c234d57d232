//! Self-attention over the KV cache: q/k/v projections (separate or one fused `qkv_proj`; a q projection
//! that also gives an output gate per head, Qwen3.5's), optional per-head
//! q/k RMSNorm, rope (or none), grouped-query attention without copying K/V per query head, scores scaled by
//! the config's factor, optional logit softcapping, the mask (causal, sliding window, bidirectional spans:
//! [`crate::kernels::mask`]), the output projection.
//!
//! Shapes: `b` batch, `s` new positions, `t` cached + new positions, `h` hidden size, `H` / `K` query /
//! key-value heads, `d` head dim.

use std::collections::BTreeMap;
use std::ops::Range;

use burn::backend::DispatchDevice;
use burn::tensor::{Device, Tensor, TensorData};

use super::kv_cache::KvCache;
use super::linear::Linear;
use super::norm::rms_norm;
use super::rope::{self, RopeTable};
use crate::kernels;
use crate::kernels::mask::Mask;
use crate::model::config::ModelConfig;

/// The q, k and v projections.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one per layer, never moved in a loop")]
pub enum Qkv {
    Split {
        q: Linear,
        k: Linear,
        v: Linear,
    },
    /// One `[(H + 2K)·d, h]` projection, rows q then k then v (Phi-3's `qkv_proj`).
    Fused(Linear),
    /// Queries only: the layer attends to an earlier layer's keys and values (Gemma 4's shared layers,
    /// whose cache kind is `SharedKv`).
    Shared(Linear),
}

/// One layer's attention weights.
#[derive(Debug, Clone)]
pub struct Attention {
    pub qkv: Qkv,
    pub o: Linear,
    /// `[2d]`: the q then the k RMSNorm weights, when the family normalises q and k per head before rope
    /// (one tensor, as the fused decode kernel binds them).
    pub qk_norm: Option<Tensor<1>>,
}

/// What every layer of one forward shares: the new positions, their rope rows per table, the bidirectional
/// spans, and the masks per window.
pub struct Positions {
    /// The first new position.
    pub pos: usize,
    /// New positions.
    pub s: usize,
    /// `(cos, sin)` `[1, 1, s, r / 2]` per rope table.
    ropes: Vec<(Tensor<4>, Tensor<4>)>,
    /// Runs of positions whose rows attend to each other (absolute positions, checked by [`Mask::check`]).
    spans: Vec<Range<usize>>,
    /// Additive `[1, 1, s, t]` masks by window (`None`: causal only) for burn's ops ([`Mask::additive`]);
    /// absent for one new position, which sees every cached key (a window narrows the keys instead), and
    /// on the CPU backend, whose kernel reads [`Positions::mask`] as index ranges.
    masks: BTreeMap<Option<usize>, Tensor<4>>,
    /// Every layer's own input at these positions, `[b, s, L, n]`, for a model with per-layer embeddings
    /// (`model::per_layer`).
    pub per_layer: Option<Tensor<4>>,
}

impl Positions {
    /// Positions `pos..pos + s` of a cache of `capacity` positions, under `config`'s layers, with
    /// `spans` attending bidirectionally (valid for this forward: [`Mask::check`]).
    pub fn new(
        config: &ModelConfig,
        tables: &[RopeTable],
        (pos, s): (usize, usize),
        capacity: usize,
        spans: Vec<Range<usize>>,
        device: &Device,
    ) -> Self {
        let ropes = tables.iter().map(|t| t.at(pos, s, capacity)).collect();
        let mut at = Self {
            pos,
            s,
            ropes,
            spans,
            masks: BTreeMap::new(),
            per_layer: None,
        };
        // The CPU backend's attention applies the masks as index ranges (`kernels::attention`).
        let generic = !matches!(device.as_dispatch(), DispatchDevice::Flex(_));
        if s > 1 && generic {
            for window in config.layers.iter().map(|l| l.window) {
                if !at.masks.contains_key(&window) {
                    let m = TensorData::new(at.mask(window).additive(), [s, pos + s]);
                    let m = Tensor::<2>::from_data(m, device).unsqueeze::<4>();
                    at.masks.insert(window, m);
                }
            }
        }
        at
    }

    /// The keys each new position sees in a layer of `window`.
    pub fn mask(&self, window: Option<usize>) -> Mask<'_> {
        Mask {
            pos: self.pos,
            s: self.s,
            window,
            spans: &self.spans,
        }
    }
}

impl Attention {
    /// `x: [b, s, h]` (normalised) of layer `layer` → the output projection's `[b, s, h]`, appending k and v
    /// to `cache`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        c: &ModelConfig,
        layer: usize,
        cache: &mut KvCache,
        at: &Positions,
    ) -> Tensor<3> {
        let [b, s, _] = x.dims();
        let heads = c.num_heads;
        let (kv, d) = c.attn_dims(layer);
        let (q, k, v) = match &self.qkv {
            Qkv::Split { q, k, v } => {
                let [q, k, v] = Linear::forward_many([q, k, v], x);
                (q, k, v)
            }
            Qkv::Shared(q) => {
                // Nothing is appended: the cache hands back the source layer's keys and values.
                let none = || Tensor::<3>::zeros([b, s, kv * d], &x.device());
                (q.forward(x.clone()), none(), none())
            }
            Qkv::Fused(l) => {
                let y = l.forward(x);
                (
                    y.clone().narrow(2, 0, heads * d),
                    y.clone().narrow(2, heads * d, kv * d),
                    y.narrow(2, (heads + kv) * d, kv * d),
                )
            }
        };
        // Qwen3.5's gated attention: each head's q rows are followed by its gate's.
        let (q, gate) = match c.attn_output_gate {
            true => {
                let y = q.reshape([b, s, heads, 2 * d]);
                let half = |at: usize| y.clone().narrow(3, at, d).reshape([b, s, heads * d]);
                (half(0), Some(half(d)))
            }
            false => (q, None),
        };
        // The output projection of the heads' outputs `[b, s, H·d]`, after the gate's sigmoid.
        let out = |attn: Tensor<3>| match &gate {
            Some(g) => self
                .o
                .forward(attn * burn::tensor::activation::sigmoid(g.clone())),
            None => self.o.forward(attn),
        };
        let split = |y: Tensor<3>, n: usize| y.reshape([b, s, n, d]).swap_dims(1, 2); // [b, n, s, d]
        let (mut q, mut k, mut v) = (split(q, heads), split(k, kv), split(v, kv));
        if let Some(w) = &self.qk_norm {
            q = rms_norm(q, w.clone().narrow(0, 0, d), c.rms_norm_eps);
            if w.dims()[0] == 2 * d {
                k = rms_norm(k, w.clone().narrow(0, d, d), c.rms_norm_eps);
            }
        }
        if c.v_norm {
            let ones = Tensor::ones([d], &v.device());
            v = rms_norm(v, ones, c.rms_norm_eps);
        }
        let kind = c.layers[layer];
        if let Some(r) = kind.rope {
            let (cos, sin) = &at.ropes[r];
            q = rope::apply(q, cos, sin);
            k = rope::apply(k, cos, sin);
        }
        let (mut keys, mut values) = cache.append(layer, k, v); // [b, K, t, d]
        let mask = at.mask(kind.window);
        if let Some(attn) = kernels::attention(&q, &keys, &values, c.attn_scale, c.attn_softcap, mask) {
            return out(attn);
        }
        let mut t = at.pos + s;
        let seen = mask.keys(0);
        if s == 1 && seen.len() < t {
            // One query's keys are one range (the last w positions under a window): narrowed, not masked.
            keys = keys.narrow(2, seen.start, seen.len());
            values = values.narrow(2, seen.start, seen.len());
            t = seen.len();
        }
        let group = heads / kv;
        let expand = |cached: Tensor<4>| {
            cached
                .reshape([b, kv, 1, t, d])
                .expand([b, kv, group, t, d])
                .reshape([b, heads, t, d])
        };
        let mut scores = q.matmul(expand(keys).swap_dims(2, 3)).mul_scalar(c.attn_scale); // [b, H, s, t]
        if let Some(cap) = c.attn_softcap {
            scores = kernels::softcap(scores, cap);
        }
        if let Some(m) = at.masks.get(&kind.window) {
            scores = scores + m.clone();
        }
        let attn = kernels::softmax_last(scores).matmul(expand(values)); // [b, H, s, d]
        out(attn.swap_dims(1, 2).reshape([b, s, heads * d]))
    }

    /// The projections' weights.
    pub fn linears(&self) -> Vec<&Linear> {
        match &self.qkv {
            Qkv::Split { q, k, v } => vec![q, k, v, &self.o],
            Qkv::Fused(l) => vec![l, &self.o],
            Qkv::Shared(q) => vec![q, &self.o],
        }
    }
}
