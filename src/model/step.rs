//! One decode step (one new position per sequence) on wgpu through the fused kernels of
//! `kernels::gpu::decode`, for every pre-norm layer whose mixer they implement. Per layer:
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
//! Where a layer's rope turns only part of each head, or its q projection carries an output gate
//! (Qwen3.5's attention layers), [`fused::prepare_qk`] normalises and turns q and k first and
//! [`fused::gate_heads`] gates the output: two launches more.
//!
//! The other mixers replace the first three rows (the MLP's five launches are the same):
//!
//! | launches | LFM2's conv block (`lfm2::Layer`)      | Qwen3.5's Gated DeltaNet (`qwen35::Layer`)        |
//! |----------|----------------------------------------|---------------------------------------------------|
//! | 1 (2)    | `in_proj` (`B`, `C`, `x`)               | qkv, z projections; b, a projections               |
//! | 1        | `C · conv(B · x)`, the state advanced   | `silu(conv(qkv))`, the state advanced              |
//! | 1        | —                                      | the delta rule, decay and `beta` in it             |
//! | 1        | —                                      | `rmsnorm(o)·w · silu(z)` per head                  |
//! | 1        | `out_proj`                             | `out_proj`                                         |
//!
//! The projections that read the same input share a launch (`kernels::gpu::matmul_many`: each matrix
//! its own buffer, format and output, the outputs bit for bit those of one launch each); a weight held
//! in several buffers (one over the device's binding limit) takes a launch of its own.
//!
//! Gemma 4's layers (`gemma4::Layer`) take Gemma 3's rows, with v normalised per head before the cache
//! (one launch: [`fused::rms_norm`] with ones), each layer's own head size, and a layer that shares an
//! earlier layer's keys and values projecting only q and attending through [`fused::attention_shared`]
//! (it reads position `pos` from the cache its source wrote in this step). After the MLP, the per-layer
//! input's block: `x + rmsnorm(mlp)·post_ffw` (one launch), its gate's GEMV, `gelu_tanh(gate) · input`,
//! its projection, and `(x + rmsnorm(proj)·post_norm) · layer_scalar` with the next layer's norm
//! ([`fused::add_rms_norm_scaled`]): thirteen launches a layer (twelve sharing). The per-layer inputs of
//! the step's tokens are computed once per step (`model::per_layer`).
//!
//! Eight in all for attention (more where a projection has a bias), where the generic path launches
//! some sixty (more for Gemma's four norms and GELU; measured per layer: 85 for Qwen3.5's and 54 for
//! LFM2's at real shapes, 117 for Gemma 4's tiny fixture; `examples/bench.rs` counts them, `--fused off`
//! for the generic path). Per step besides: the
//! embedding rows (and Gemma's `√h` scale), the
//! first RMSNorm, the `lm_head` and any final softcap. (A GEMV computing gate, up and their product in
//! one launch measured no faster per step on lavapipe and cost ~270 ms more pipeline compilation on the
//! first step.)
//!
//! What the kernels implement ([`Decoder::fusable`]): attention layers with separate q/k/v projections
//! (or a sharing layer's q), LFM2's conv blocks and Qwen3.5's DeltaNets, each with separate gate/up
//! projections; rope from one table per layer (or none), any score scale, window and softcap, SiLU or
//! GELU-tanh. Fused projections (Phi-3) and LongRoPE take the generic path.
//!
//! Recurrent states are replaced, as the generic path replaces them: the kernels write the next state
//! beside their output, and a snapshot of the old one stays valid.
//!
//! Activations are `[b, features]` throughout.

use burn::tensor::Tensor;

use super::arch::{DeltaStep, StepMixer};
use super::config::Act;
use super::decoder::Decoder;
use super::layers::attention::Attention;
use super::layers::conv::ShortConv;
use super::layers::kv_cache::KvCache;
use super::layers::linear::{Linear, Matrix};
use super::layers::state::State;
use crate::kernels::caps::{Caps, Features};
use crate::kernels::gpu::decode::{self as fused, Attend, CacheSlot, ConvIn, Gate, QkPrep};
use crate::kernels::gpu::delta::{Heads, delta_step};

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
        let plain = |r: usize| self.ropes.get(r).is_some_and(|t| t.plain_tables());
        (0..c.num_layers).all(|i| c.attn_dims(i).1.is_multiple_of(2))
            && c.layers.iter().all(|l| l.rope.is_none_or(plain))
            && self.blocks.iter().all(|b| b.step_parts().is_some())
    }

    /// Runs one token per sequence (`tokens`: `b` rows of one id, already validated) after what `cache`
    /// holds, appending to it; logits `[b, 1, V]`. Only for a [`Decoder::fusable`] decoder.
    pub(super) fn step(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Tensor<3> {
        let c = &self.config;
        let b = tokens.len();
        let h = c.hidden_size;
        let eps = c.rms_norm_eps as f32;
        let caps = self.caps();
        let f = caps.features;
        let layers: Vec<_> = self.blocks.iter().filter_map(|b| b.step_parts()).collect();
        let embedded = self.embed(tokens); // [b, 1, h]
        // Gemma 4's per-layer inputs of this position, `[b, 1, L, n]`.
        let inputs = self
            .per_layer
            .as_ref()
            .map(|p| p.inputs(tokens, embedded.clone(), c.rms_norm_eps, &self.device));
        let mut x = embedded.reshape([b, h]);
        let mut hn = fused::rms_norm(
            x.clone(),
            layers.first().map_or(&self.norm, |l| l.pre_attn),
            eps,
            f,
        );
        let gate = match c.act {
            Act::Silu => Gate::Silu,
            Act::GeluTanh => Gate::GeluTanh,
        };
        for (i, layer) in layers.iter().enumerate() {
            let mixed = match &layer.mixer {
                StepMixer::Attention { attn, qkv, v_norm } => {
                    let [wq, wk, wv] = *qkv;
                    let [q, k, v] = apply_many([wq, wk, wv], hn, caps);
                    let v = match v_norm {
                        Some(ones) => self.norm_heads(v, ones),
                        None => v,
                    };
                    self.step_attention(i, attn, q, Some((k, v)), cache)
                }
                StepMixer::Shared { attn, q } => {
                    let q = apply(q, hn, caps);
                    self.step_attention(i, attn, q, None, cache)
                }
                StepMixer::Conv(conv) => step_conv(conv, hn, i, cache, caps),
                StepMixer::Delta(net) => step_delta(net, hn, i, cache, (caps, eps, c.delta_tiled)),
            };
            let (post_attn, post_ffw) = layer.post.unzip();
            let (x1, hn1) = fused::add_rms_norm(x, mixed, post_attn, layer.pre_mlp, eps, f);
            let [g, u] = apply_many(layer.gate_up, hn1, caps);
            let mut mlp = apply(layer.down, fused::gated(g, u, gate, f), caps);
            let (mut x1, mut post) = (x1, post_ffw);
            if let (Some((wg, wp, norm)), Some(inputs)) = (layer.per_layer, &inputs) {
                // x += rmsnorm(mlp)·post_ffw, then the per-layer input's block adds to that sum.
                (x1, _) = fused::add_rms_norm(x1, mlp, post, norm, eps, f);
                let [_, _, _, n] = inputs.dims();
                let input = inputs.clone().narrow(2, i, 1).reshape([b, n]);
                let gated = fused::gated(apply(wg, x1.clone(), caps), input, Gate::GeluTanh, f);
                (mlp, post) = (apply(wp, gated, caps), Some(norm));
            }
            let next = layers.get(i + 1).map_or(&self.norm, |l| l.pre_attn);
            (x, hn) = fused::add_rms_norm_scaled(x1, mlp, post, layer.scalar, next, eps, f);
        }
        cache.advance(1);
        let logits = self.cap_logits(self.lm_head.matmul_by(hn, caps));
        logits.reshape([b, 1, c.vocab_size])
    }

    /// Each head of `v: [b, K·d]` RMS-normalised without a weight (`ones: [d]`), in f32 for the cache.
    fn norm_heads(&self, v: Tensor<2>, ones: &Tensor<1>) -> Tensor<2> {
        let [b, n] = v.dims();
        let [d] = ones.dims();
        let f32s = Features {
            f16: false,
            ..self.caps().features
        };
        let eps = self.config.rms_norm_eps as f32;
        fused::rms_norm(v.reshape([b * n / d, d]), ones, eps, f32s).reshape([b, n])
    }

    /// Attention layer `i` from its projections `q: [b, H·d]` and, for a layer with keys of its own, `(k,
    /// v)`: `[b, K·d]` each (a sharing layer reads the keys and values its source wrote in this step) →
    /// the output projection's `[b, h]`, the new key and value written into `cache` at its length.
    fn step_attention(
        &self,
        i: usize,
        attn: &Attention,
        q: Tensor<2>,
        kv: Option<(Tensor<2>, Tensor<2>)>,
        cache: &mut KvCache,
    ) -> Tensor<2> {
        let c = &self.config;
        let (caps, eps, pos) = (self.caps(), c.rms_norm_eps as f32, cache.len);
        let d = c.attn_dims(i).1;
        let kind = c.layers[i];
        let table = kind.rope.map(|r| &self.ropes[r]);
        let mut how = Attend {
            rope: table.map(|t| &t.cos_sin),
            qk_norm: attn.qk_norm.as_ref().map(|w| (w, eps)),
            scale: c.attn_scale as f32,
            window: kind.window,
            softcap: c.attn_softcap.map(|cap| cap as f32),
        };
        let Some((k, v)) = kv else {
            let (keys, values) = cache.shared_slots(i);
            let slot = CacheSlot { keys, values };
            let out = fused::attention_shared(q, how, pos, slot, caps);
            return apply(&attn.o, out, caps);
        };
        let partial = table.is_some_and(|t| t.rope.rotary_dim != d);
        let gated = c.attn_output_gate;
        let (keys, values) = cache.slots(i, 1);
        let slot = CacheSlot { keys, values };
        let out = match partial || gated {
            false => fused::attention_append(q, k, v, how, pos, slot, caps),
            true => {
                let prep = QkPrep {
                    norms: how.qk_norm,
                    rope: how.rope.map(|t| (t, pos)),
                    gated,
                };
                let (qp, kp) = fused::prepare_qk(q.clone(), k, d, prep, caps.features);
                (how.rope, how.qk_norm) = (None, None);
                let out = fused::attention_append(qp, kp, v, how, pos, slot, caps);
                match gated {
                    true => fused::gate_heads(out, q, d),
                    false => out,
                }
            }
        };
        apply(&attn.o, out, caps)
    }
}

/// LFM2's conv block `i` on its normalised input `hn: [b, h]` → `out_proj`'s `[b, h]`, the layer's
/// state in `cache` advanced.
fn step_conv(conv: &ShortConv, hn: Tensor<2>, i: usize, cache: &mut KvCache, caps: Caps) -> Tensor<2> {
    let bcx = apply(&conv.in_proj, hn, caps);
    let State::Conv(state) = cache.take_state(i) else {
        unreachable!("a conv block's layer keeps a conv state")
    };
    // The filters are held `[w, C]` (a transposed view of the checkpoint's `[C, w]`): back to `[C, w]`.
    let filters = (&conv.weight.clone().transpose(), conv.bias.as_ref());
    let act = crate::kernels::gpu::caps::act_dtype(caps.features);
    let (y, next) = fused::conv_step(bcx, state, filters, ConvIn::Gated, act);
    cache.put_state(i, State::Conv(next));
    apply(&conv.out_proj, y, caps)
}

/// Qwen3.5's Gated DeltaNet `i` on its normalised input `hn: [b, h]` → `out_proj`'s `[b, h]`, the
/// layer's convolution and delta-rule states in `cache` advanced. `how`: the caps, the norm's epsilon,
/// and whether value heads tile the key heads.
fn step_delta(
    net: &DeltaStep<'_>,
    hn: Tensor<2>,
    i: usize,
    cache: &mut KvCache,
    (caps, eps, tiled): (Caps, f32, bool),
) -> Tensor<2> {
    let [hk, hv, dk, dv] = net.heads;
    // Two launches of two: a grouped GEMV takes at most three weights (WebGPU's eight bindings).
    let [wqkv, wz, wb, wa] = net.proj;
    let [qkv, z] = apply_many([wqkv, wz], hn.clone(), caps);
    let [b_raw, a] = apply_many([wb, wa], hn, caps);
    let State::Delta { conv, s } = cache.take_state(i) else {
        unreachable!("a DeltaNet layer keeps a delta-rule state")
    };
    let filters = (&net.conv.clone().transpose(), None);
    let (mixed, conv) = fused::conv_step(qkv, conv, filters, ConvIn::Silu, burn::tensor::DType::F32);
    let heads = Heads { hk, hv, dk, dv };
    let (o, s) = delta_step(mixed, (a, b_raw), net.gates, s, heads, tiled);
    cache.put_state(i, State::Delta { conv, s });
    let y = fused::gated_rms_norm(o, z, net.norm, eps, caps.features);
    apply(net.out, y, caps)
}
