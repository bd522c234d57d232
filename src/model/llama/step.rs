//! One decode step (one new position per sequence) on wgpu through the fused kernels of
//! [`crate::kernels::gpu::decode`]: per layer RMSNorm (fused with the residual add), the q/k/v
//! projections, rope with the cache append, attention over the cache, the output projection, and the MLP
//! with `silu(gate) · up` in one kernel. About a dozen dispatches per layer; the generic path
//! ([`Decoder::forward`] for prefill and on the CPU backend) launches some sixty.
//!
//! Shapes: `b` sequences, `h` hidden size, `H` / `K` query / key-value heads, `d` head dim, `V` vocabulary;
//! activations are `[b, features]` throughout.

use burn::tensor::Tensor;

use super::super::kv_cache::KvCache;
use super::super::linear::Linear;
use super::Decoder;
use crate::kernels::gpu::decode::{self as fused, CacheSlot};

/// `x: [r, in]` through `l` → `[r, out]`.
fn apply(l: &Linear, x: Tensor<2>) -> Tensor<2> {
    let [r, n] = x.dims();
    let [out, _] = l.weight.dims();
    l.forward(x.reshape([r, 1, n])).reshape([r, out])
}

impl Decoder {
    /// Runs one token per sequence (`tokens`: `b` rows of one id, already validated) after what `cache`
    /// holds, appending to it; logits `[b, 1, V]`.
    pub(super) fn step(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Tensor<3> {
        let c = &self.config;
        let b = tokens.len();
        let (h, d, heads, kv) = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads);
        let eps = c.rms_norm_eps as f32;
        let (pos, t) = (cache.len, cache.len + 1);
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
            let q = fused::rope_append(q, k, v, (&self.cos, &self.sin), pos, CacheSlot { keys, values });
            let (keys, values) = cache.slots(i, 1);
            let attn = fused::attention(q, keys, values, t);
            let (x1, hn1) = fused::add_rms_norm(x, apply(&layer.o, attn), &layer.post_attention_norm, eps);
            let gate = apply(&layer.gate, hn1.clone());
            let up = apply(&layer.up, hn1);
            let mlp = apply(&layer.down, fused::silu_mul(gate, up));
            let next = self.layers.get(i + 1).map_or(&self.norm, |l| &l.input_norm);
            (x, hn) = fused::add_rms_norm(x1, mlp, next, eps);
        }
        cache.advance(1);
        self.lm_head.matmul(hn).reshape([b, 1, c.vocab_size])
    }
}
