//! Short causal convolutions: depthwise (one filter of `w` taps per channel) over positions, each output
//! position seeing itself and the `w − 1` before it, the positions before the forward's first coming from
//! the layer's state ([`causal_conv`]). LFM2's conv block ([`ShortConv`]) gates the convolution's input
//! and output; Qwen3.5's Gated DeltaNet convolves its q, k and v before the delta rule.
//!
//! Shapes: `b` sequences, `s` new positions, `C` channels, `w` taps, `h` hidden size.

use burn::tensor::Tensor;

use super::kv_cache::KvCache;
use super::linear::Linear;
use super::state::State;
use crate::loader::LoadError;
use crate::model::placed::Tensors;

/// `x: [b, s, C]` after `state: [b, w − 1, C]` (the inputs before it) through the filters `weight: [w,
/// C]` (tap `w − 1` on the newest position) and `bias: [C]`: `y[t] = Σ_j weight[j] · full[t + j]` with
/// `full` the state then `x`. Returns `y: [b, s, C]` and the next state, `full`'s last `w − 1` positions.
pub fn causal_conv(
    x: Tensor<3>,
    state: Tensor<3>,
    weight: &Tensor<2>,
    bias: Option<&Tensor<1>>,
) -> (Tensor<3>, Tensor<3>) {
    let [_, s, _] = x.dims();
    let [w, _] = weight.dims();
    let full = Tensor::cat(vec![state, x], 1); // [b, w − 1 + s, C]
    let tap = |j: usize| full.clone().narrow(1, j, s) * weight.clone().narrow(0, j, 1).unsqueeze::<3>();
    let mut y = tap(0);
    for j in 1..w {
        y = y + tap(j);
    }
    if let Some(bias) = bias {
        y = y + bias.clone().unsqueeze::<3>();
    }
    let next = full.narrow(1, s, w - 1);
    (y, next)
}

/// A depthwise convolution's filters from a checkpoint's `[C, 1, w]` tensor `name`, as [`causal_conv`]
/// takes them: `[w, C]`.
pub fn filters(
    ckpt: &mut dyn Tensors,
    name: &str,
    channels: usize,
    width: usize,
) -> Result<Tensor<2>, LoadError> {
    let flat = ckpt.flat(name, &[channels, 1, width])?;
    Ok(flat.reshape([channels, width]).transpose())
}

/// LFM2's short-convolution block: `in_proj` gives `B`, `C` and `x` (`[b, s, h]` each, in that order),
/// the convolution runs over `B · x`, and `out_proj` takes `C · conv`.
#[derive(Debug, Clone)]
pub struct ShortConv {
    /// `[3h, h]`.
    pub in_proj: Linear,
    /// `[h, h]`.
    pub out_proj: Linear,
    /// `[w, h]`.
    pub weight: Tensor<2>,
    /// `[h]`, when the checkpoint has conv biases.
    pub bias: Option<Tensor<1>>,
}

impl ShortConv {
    /// `x: [b, s, h]` (normalised) of layer `layer` → `[b, s, h]`, advancing the layer's state in `cache`.
    pub fn forward(&self, x: Tensor<3>, layer: usize, cache: &mut KvCache) -> Tensor<3> {
        let [_, _, h] = x.dims();
        let bcx = self.in_proj.forward(x);
        let (b, c, x) = (
            bcx.clone().narrow(2, 0, h),
            bcx.clone().narrow(2, h, h),
            bcx.narrow(2, 2 * h, h),
        );
        let State::Conv(state) = cache.take_state(layer) else {
            unreachable!("a conv block's layer keeps a conv state")
        };
        let (y, next) = causal_conv(b * x, state, &self.weight, self.bias.as_ref());
        cache.put_state(layer, State::Conv(next));
        self.out_proj.forward(c * y)
    }

    /// The projections' weights.
    pub fn linears(&self) -> Vec<&Linear> {
        vec![&self.in_proj, &self.out_proj]
    }
}
