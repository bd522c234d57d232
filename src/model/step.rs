//! One decode step (one new position per sequence) on wgpu through the fused kernels of
//! `kernels::gpu::decode`, for the pre-norm Llama layer and Gemma's sandwich layer alike. Per layer:
//!
//! | launches | Llama (`llama::Layer`)            | Gemma 2/3 (`gemma::Layer`)                      |
//! |----------|-----------------------------------|-------------------------------------------------|
//! | 1        | q, k, v projections (one launch)  | the same                                        |
//! | 1 (2)    | q/k norm (Qwen3), rope, attention | q/k norm (Gemma 3), the layer's rope, attention |
//! | 1        | output projection                 | the same                                        |
//! | 1        | `x + o`, RMSNorm                  | `x + rmsnorm(o)·post_attn`, RMSNorm             |
//! | 1        | gate, up projections (one launch) | the same                                        |
//! | 1        | `silu(gate) · up`                 | `gelu_tanh(gate) · up`                          |
//! | 1        | down projection                   | the same                                        |
//! | 1        | `x + mlp`, the next RMSNorm       | `x + rmsnorm(mlp)·post_ffw`, the next RMSNorm   |
//!
//! "Attention" is one [`fused::attention_append`]: rope, the cache append and attention over the cache; for
//! Gemma with the layer's window (local layers) and Gemma 2's logit softcap. On a GPU a span of 512 cached
//! positions or more is split over the sequence, and a second launch merges the splits (nine per layer).
//!
//! The projections that read the same input share a launch (`kernels::gpu::matmul_many`: each matrix
//! its own buffer, format and output, the outputs bit for bit those of one launch each); a weight held
//! in several buffers (one over the device's binding limit) takes a launch of its own.
//!
//! Eight in all (more where a projection has a bias), where the generic path launches some sixty (more
//! for Gemma's four norms and GELU). Per step besides: the embedding rows (and Gemma's `√h` scale), the
//! first RMSNorm, the `lm_head` and any final softcap. (A GEMV computing gate, up and their product in
//! one launch measured no faster per step on lavapipe and cost ~270 ms more pipeline compilation on the
//! first step.)
//!
//! What the kernels implement ([`Decoder::fusable`]): layers with their own keys and values (no shared
//! cache), separate q/k/v and gate/up projections, whole-head
//! rope from one table per layer (or none), any score scale, window and softcap, SiLU or GELU-tanh. Fused
//! projections (Phi-3), partial rotary and LongRoPE take the generic path.
//!
//! Activations are `[b, features]` throughout.

use burn::tensor::Tensor;

use super::config::{Act, CacheKind};
use super::decoder::Decoder;
use super::layers::kv_cache::KvCache;
use super::layers::linear::{Linear, Matrix};
use crate::kernels::caps::Caps;
use crate::kernels::gpu::decode::{self as fused, Attend, CacheSlot, Gate};

/// `x: [r, in]` through `l` → `[r, out]`; a weight in kiln's GPU blocks by `caps`.
fn apply(l: &Linear, x: Tensor<2>, caps: Caps) -> Tensor<2> {
    let [y] = apply_many([l], x, caps);
    y
}

/// `x: [r, in]` through each of `ls` → `[r, out_i]`, by `caps`: one GEMV launch for all where their
/// weights are kiln's GPU blocks (`kernels::gpu::matmul_many`), biases added after; else each through its
/// [`Linear`].
fn apply_many<const N: usize>(ls: [&Linear; N], x: Tensor<2>, caps: Caps) -> [Tensor<2>; N] {
    let ws: Option<Vec<_>> = ls
        .iter()
        .map(|l| match &l.weight {
            Matrix::Quant(q) => q.gpu().map(|w| w.with_caps(caps)),
            Matrix::Dense(_) => None,
        })
        .collect();
    let Some(ws) = ws else {
        let [r, n] = x.dims();
        return ls.map(|l| {
            let [out, _] = l.weight.dims();
            l.forward(x.clone().reshape([r, 1, n])).reshape([r, out])
        });
    };
    let ws: Vec<_> = ws.iter().collect();
    let ys = crate::kernels::gpu::matmul_many(x, &ws);
    let mut ys = ls.iter().zip(ys).map(|(l, y)| match &l.bias {
        Some(bias) => y + bias.clone().unsqueeze::<2>(),
        None => y,
    });
    std::array::from_fn(|_| ys.next().expect("one output per projection"))
}

impl Decoder {
    /// Whether every layer has the shape the fused kernels implement.
    pub(super) fn fusable(&self) -> bool {
        let c = &self.config;
        let whole_head = |r: usize| {
            self.ropes
                .get(r)
                .is_some_and(|t| t.plain_tables() && t.rope.rotary_dim == c.head_dim)
        };
        c.head_dim.is_multiple_of(2)
            && c.layers
                .iter()
                .all(|l| l.rope.is_none_or(whole_head) && l.cache == CacheKind::Kv)
            && self.blocks.iter().all(|b| b.step_parts().is_some())
    }

    /// Runs one token per sequence (`tokens`: `b` rows of one id, already validated) after what `cache`
    /// holds, appending to it; logits `[b, 1, V]`. Only for a [`Decoder::fusable`] decoder.
    pub(super) fn step(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Tensor<3> {
        let c = &self.config;
        let b = tokens.len();
        let h = c.hidden_size;
        let eps = c.rms_norm_eps as f32;
        let pos = cache.len;
        let caps = self.caps();
        let f = caps.features;
        let layers: Vec<_> = self.blocks.iter().filter_map(|b| b.step_parts()).collect();
        let mut x = self.embed(tokens).reshape([b, h]);
        let mut hn = fused::rms_norm(
            x.clone(),
            layers.first().map_or(&self.norm, |l| l.pre_attn),
            eps,
            f,
        );
        for (i, layer) in layers.iter().enumerate() {
            let [wq, wk, wv, gate, up] = layer.proj;
            let [q, k, v] = apply_many([wq, wk, wv], hn, caps);
            let kind = c.layers[i];
            let how = Attend {
                rope: kind.rope.map(|r| &self.ropes[r].cos_sin),
                qk_norm: layer.attn.qk_norm.as_ref().map(|w| (w, eps)),
                scale: c.attn_scale as f32,
                window: kind.window,
                softcap: c.attn_softcap.map(|cap| cap as f32),
            };
            let (keys, values) = cache.slots(i, 1);
            let attn = fused::attention_append(q, k, v, how, pos, CacheSlot { keys, values }, caps);
            let (post_attn, post_ffw) = layer.post.unzip();
            let o = apply(&layer.attn.o, attn, caps);
            let (x1, hn1) = fused::add_rms_norm(x, o, post_attn, layer.pre_mlp, eps, f);
            let [g, u] = apply_many([gate, up], hn1, caps);
            let gate = match c.act {
                Act::Silu => Gate::Silu,
                Act::GeluTanh => Gate::GeluTanh,
            };
            let mlp = apply(layer.down, fused::gated(g, u, gate, f), caps);
            let next = layers.get(i + 1).map_or(&self.norm, |l| l.pre_attn);
            (x, hn) = fused::add_rms_norm(x1, mlp, post_ffw, next, eps, f);
        }
        cache.advance(1);
        let logits = self.cap_logits(self.lm_head.matmul_by(hn, caps));
        logits.reshape([b, 1, c.vocab_size])
    }
}
