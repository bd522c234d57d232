//! One decode step (one new position per sequence) on wgpu through the fused kernels of
//! `kernels::gpu::decode`: per layer RMSNorm (fused with the residual add), the q/k/v projections, rope with
//! the cache append and attention over the cache in one kernel, the output projection, and the MLP with
//! `silu(gate) · up` in one kernel: eleven dispatches per layer (the last, the residual add with the next
//! RMSNorm) where the generic path launches some sixty. (A GEMV computing gate, up and their product in one
//! launch measured no faster per step on lavapipe and cost ~270 ms more pipeline compilation on the first
//! step.) The kernels implement the pre-norm Llama layer with separate projections, whole-head rope from one
//! table, full attention scaled by `1/√d` and SiLU; other shapes take the generic path.
//!
//! Activations are `[b, features]` throughout.

use burn::tensor::Tensor;

use super::arch::Block;
use super::arch::llama::Layer;
use super::config::Act;
use super::decoder::Decoder;
use super::layers::attention::Qkv;
use super::layers::kv_cache::KvCache;
use super::layers::linear::Linear;
use super::layers::mlp::GateUp;
use crate::kernels::gpu::decode::{self as fused, CacheSlot};

/// `x: [r, in]` through `l` → `[r, out]`.
fn apply(l: &Linear, x: Tensor<2>) -> Tensor<2> {
    let [r, n] = x.dims();
    let [out, _] = l.weight.dims();
    l.forward(x.reshape([r, 1, n])).reshape([r, out])
}

/// The projections of a layer the fused kernels implement: `(q, k, v, gate, up)`.
fn parts(block: &Block) -> Option<(&Layer, [&Linear; 5])> {
    let Block::Llama(layer) = block else {
        return None;
    };
    match (&layer.attn.qkv, &layer.mlp.gate_up) {
        (Qkv::Split { q, k, v }, GateUp::Split { gate, up }) => Some((layer, [q, k, v, gate, up])),
        _ => None,
    }
}

impl Decoder {
    /// Whether every layer has the shape the fused kernels implement.
    pub(super) fn fusable(&self) -> bool {
        let c = &self.config;
        let plain_rope = self.ropes.len() == 1
            && self.ropes[0].plain_tables()
            && self.ropes[0].rope.rotary_dim == c.head_dim;
        let scale = (c.attn_scale * (c.head_dim as f64).sqrt() - 1.0).abs() < 1e-12;
        plain_rope
            && scale
            && c.act == Act::Silu
            && c.attn_softcap.is_none()
            && c.final_softcap.is_none()
            && c.embed_scale.is_none()
            && c.layers.iter().all(|l| l.window.is_none() && l.rope == Some(0))
            && self.blocks.iter().all(|b| parts(b).is_some())
    }

    /// Runs one token per sequence (`tokens`: `b` rows of one id, already validated) after what `cache`
    /// holds, appending to it; logits `[b, 1, V]`. Only for a [`Decoder::fusable`] decoder.
    pub(super) fn step(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Tensor<3> {
        let c = &self.config;
        let b = tokens.len();
        let (h, d, heads, kv) = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads);
        let eps = c.rms_norm_eps as f32;
        let pos = cache.len;
        let layers: Vec<_> = self.blocks.iter().filter_map(parts).collect();
        let table = &self.ropes[0];
        let mut x = self.embed.rows(tokens, &self.device).reshape([b, h]);
        let mut hn = match layers.first() {
            Some((first, _)) => fused::rms_norm(x.clone(), &first.attn_norm, eps),
            None => fused::rms_norm(x.clone(), &self.norm, eps),
        };
        for (i, (layer, [wq, wk, wv, gate, up])) in layers.iter().enumerate() {
            let mut q = apply(wq, hn.clone());
            let mut k = apply(wk, hn.clone());
            let v = apply(wv, hn);
            if let (Some(qn), Some(kn)) = (&layer.attn.q_norm, &layer.attn.k_norm) {
                q = fused::rms_norm(q.reshape([b * heads, d]), qn, eps).reshape([b, heads * d]);
                k = fused::rms_norm(k.reshape([b * kv, d]), kn, eps).reshape([b, kv * d]);
            }
            let (keys, values) = cache.slots(i, 1);
            let slot = CacheSlot { keys, values };
            let attn = fused::attention_append(q, k, v, (&table.cos, &table.sin), pos, slot);
            let (x1, hn1) = fused::add_rms_norm(x, apply(&layer.attn.o, attn), &layer.mlp_norm, eps);
            let act = fused::silu_mul(apply(gate, hn1.clone()), apply(up, hn1));
            let mlp = apply(&layer.mlp.down, act);
            let next = layers.get(i + 1).map_or(&self.norm, |(l, _)| &l.attn_norm);
            (x, hn) = fused::add_rms_norm(x1, mlp, next, eps);
        }
        cache.advance(1);
        self.lm_head.matmul(hn).reshape([b, 1, c.vocab_size])
    }
}
