//! The ViT encoder of SigLIP- and CLIP-style vision towers (SmolVLM's, Gemma 3's; LLaVA's): a patch
//! embedding (the convolution of stride `p` as a matrix over flattened patches) plus a learned position
//! embedding, pre-norm layers of non-causal multi-head attention and an MLP (GELU-tanh for SigLIP,
//! quick GELU for CLIP; every projection with a bias), and a final LayerNorm. CLIP adds a class token
//! before the patches and a LayerNorm before the layers, and its patch embedding has no bias. Tensor
//! names are transformers' under the tower's prefix (`{prefix}.embeddings.patch_embedding`,
//! `{prefix}.encoder.layers.{i}.self_attn.q_proj`, …).
//!
//! Shapes: `b` images, `C` channels, `S` the image side, `p` the patch side, `g = S / p` patches per side,
//! `n = g²` patches, `t` rows (`n`, or `n + 1` with CLIP's class token first), `D` hidden size, `H` heads
//! of `d = D / H`.

use burn::tensor::{Device, Tensor};

use super::config::{Projector, VisionAct, VisionConfig};
use crate::kernels;
use crate::kernels::mask::Mask;
use crate::loader::LoadError;
use crate::model::layers::linear::{Linear, Matrix};
use crate::model::layers::norm::layer_norm;
use crate::model::placed::{Tensors, dense};

/// A LayerNorm's `(weight, bias)`, `[D]` each.
#[derive(Debug, Clone)]
struct Norm(Tensor<1>, Tensor<1>);

impl Norm {
    fn take(ckpt: &mut dyn Tensors, prefix: &str, n: usize) -> Result<Self, LoadError> {
        Ok(Self(
            ckpt.vector(&format!("{prefix}.weight"), n)?,
            ckpt.vector(&format!("{prefix}.bias"), n)?,
        ))
    }

    fn forward(&self, x: Tensor<3>, eps: f64) -> Tensor<3> {
        layer_norm(x, &self.0, &self.1, eps)
    }
}

/// One encoder layer: `x + attn(ln1(x))`, then `x + fc2(act(fc1(ln2(x))))`.
#[derive(Debug, Clone)]
struct EncoderLayer {
    ln1: Norm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln2: Norm,
    fc1: Linear,
    fc2: Linear,
}

/// The encoder's weights on a device.
#[derive(Debug, Clone)]
pub struct Encoder {
    config: VisionConfig,
    /// `[D, C·p·p]`: the convolution's kernel, each patch flattened channel, row, column.
    patch: Linear,
    /// CLIP's class token `[1, 1, D]`.
    class: Option<Tensor<3>>,
    /// `[1, t, D]`.
    positions: Tensor<3>,
    /// CLIP's LayerNorm before the layers.
    pre: Option<Norm>,
    layers: Vec<EncoderLayer>,
    /// The final LayerNorm (none where the projector reads an inner hidden state: LLaVA).
    post: Option<Norm>,
}

impl Encoder {
    /// Takes the tower's tensors under `prefix` (`model.vision_model`) from `ckpt`.
    pub fn take(
        ckpt: &mut dyn Tensors,
        prefix: &str,
        c: &VisionConfig,
        device: &Device,
    ) -> Result<Self, LoadError> {
        let (dm, f, ch, p) = (c.hidden_size, c.intermediate_size, c.num_channels, c.patch_size);
        let t = c.patches_per_side().pow(2) + usize::from(c.clip);
        let kernel = dense::<4>(
            ckpt,
            &format!("{prefix}.embeddings.patch_embedding.weight"),
            [dm, ch, p, p],
        )?;
        let patch = Linear {
            weight: Matrix::Dense(Box::new(kernel.reshape([dm, ch * p * p]))),
            bias: match c.clip {
                true => None,
                false => Some(ckpt.vector(&format!("{prefix}.embeddings.patch_embedding.bias"), dm)?),
            },
        };
        let (class, pre) = match c.clip {
            true => (
                Some(
                    ckpt.vector(&format!("{prefix}.embeddings.class_embedding"), dm)?
                        .reshape([1, 1, dm]),
                ),
                Some(Norm::take(ckpt, &format!("{prefix}.pre_layrnorm"), dm)?),
            ),
            false => (None, None),
        };
        let table = ckpt.matrix(&format!("{prefix}.embeddings.position_embedding.weight"), [t, dm])?;
        // A full image's position ids are 0..t (transformers buckets a partial one's).
        let positions = table.rows(&[(0..t as u32).collect()], device);
        let layers = (0..c.num_layers)
            .map(|i| {
                let l = format!("{prefix}.encoder.layers.{i}");
                let attn = |name: &str, ckpt: &mut dyn Tensors| {
                    Linear::take(ckpt, &format!("{l}.self_attn.{name}"), [dm, dm], true)
                };
                Ok(EncoderLayer {
                    ln1: Norm::take(ckpt, &format!("{l}.layer_norm1"), dm)?,
                    q: attn("q_proj", ckpt)?,
                    k: attn("k_proj", ckpt)?,
                    v: attn("v_proj", ckpt)?,
                    o: attn("out_proj", ckpt)?,
                    ln2: Norm::take(ckpt, &format!("{l}.layer_norm2"), dm)?,
                    fc1: Linear::take(ckpt, &format!("{l}.mlp.fc1"), [f, dm], true)?,
                    fc2: Linear::take(ckpt, &format!("{l}.mlp.fc2"), [dm, f], true)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        let post_name = format!("{prefix}.post_layernorm");
        let post = match c.projector {
            // LLaVA reads an inner hidden state: a checkpoint's final norm (transformers keeps one) is unused.
            Projector::Mlp { .. } => {
                if ckpt.contains(&format!("{post_name}.weight")) {
                    Norm::take(ckpt, &post_name, dm)?;
                }
                None
            }
            _ => Some(Norm::take(ckpt, &post_name, dm)?),
        };
        Ok(Self {
            config: c.clone(),
            patch,
            class,
            positions,
            pre,
            layers,
            post,
        })
    }

    /// `pixels: [b, C, S, S]` → the flattened patches `[b, n, C·p·p]`, row-major over the patch grid.
    pub fn patches(&self, pixels: Tensor<4>) -> Tensor<3> {
        let c = &self.config;
        let [b, ch, _, _] = pixels.dims();
        let (g, p) = (c.patches_per_side(), c.patch_size);
        pixels
            .reshape([b, ch, g, p, g, p])
            .permute([0, 2, 4, 1, 3, 5])
            .reshape([b, g * g, ch * p * p])
    }

    /// `pixels: [b, C, S, S]` → the patch embeddings (after CLIP's class token) with their positions
    /// added, `[b, t, D]`.
    pub fn embed(&self, pixels: Tensor<4>) -> Tensor<3> {
        let x = self.patch.forward(self.patches(pixels));
        let x = match &self.class {
            Some(class) => {
                let [b, _, dm] = x.dims();
                Tensor::cat(vec![class.clone().expand([b, 1, dm]), x], 1)
            }
            None => x,
        };
        x + self.positions.clone()
    }

    /// `pixels: [b, C, S, S]` → the hidden state after the first `layers` layers (0: the embeddings,
    /// after CLIP's LayerNorm; transformers' `hidden_states[layers]`), `[b, t, D]`.
    pub fn hidden(&self, pixels: Tensor<4>, layers: usize) -> Tensor<3> {
        let eps = self.config.layer_norm_eps;
        let mut x = self.embed(pixels);
        if let Some(pre) = &self.pre {
            x = pre.forward(x, eps);
        }
        for l in self.layers.iter().take(layers) {
            let h = l.ln1.forward(x.clone(), eps);
            x = x + l.o.forward(self.attention(&l.q, &l.k, &l.v, h));
            let h = l.fc1.forward(l.ln2.forward(x.clone(), eps));
            let h = match self.config.act {
                VisionAct::GeluTanh => kernels::gelu_tanh(h),
                VisionAct::QuickGelu => kernels::quick_gelu(h),
            };
            x = x + l.fc2.forward(h);
        }
        x
    }

    /// `pixels: [b, C, S, S]` (already checked to be that shape) → the last hidden state, after the final
    /// LayerNorm where the tower has one, `[b, t, D]`.
    pub fn forward(&self, pixels: Tensor<4>) -> Tensor<3> {
        let x = self.hidden(pixels, self.layers.len());
        match &self.post {
            Some(post) => post.forward(x, self.config.layer_norm_eps),
            None => x,
        }
    }

    /// Non-causal multi-head attention of `x: [b, n, D]` → `[b, n, D]` (before the output projection):
    /// every patch sees every patch, scores scaled by `d^-½`. On the CPU backend kiln's attention kernel
    /// with the whole sequence as one bidirectional span; on wgpu kiln's encoder attention kernel
    /// (`kernels::gpu::encoder_attention`: online softmax over tiles of keys, no score matrix; heads up to
    /// 128 wide); elsewhere burn's ops, a block of queries at a time so that no scores tensor exceeds
    /// [`SCORES_BYTES`] (Gemma 3's 4096 patches × 16 heads would take 1 GiB at once, past what a WebGPU
    /// buffer may hold).
    fn attention(&self, q: &Linear, k: &Linear, v: &Linear, x: Tensor<3>) -> Tensor<3> {
        let [b, n, dm] = x.dims();
        let heads = self.config.num_heads;
        let d = dm / heads;
        let split = |t: Tensor<3>| t.reshape([b, n, heads, d]).swap_dims(1, 2); // [b, H, n, d]
        let [q, k, v] = Linear::forward_many([q, k, v], x).map(split);
        let scale = (d as f64).powf(-0.5);
        let all = 0..n;
        let whole = std::slice::from_ref(&all);
        let mask = Mask {
            pos: 0,
            s: n,
            window: None,
            spans: whole,
        };
        if let Some(y) = kernels::attention(&q, &k, &v, scale, None, mask) {
            return y;
        }
        #[cfg(feature = "webgpu")]
        if matches!(q.device().as_dispatch(), burn::backend::DispatchDevice::Cube(_))
            && d <= kernels::gpu::encoder_attention::MAX_HEAD_DIM
        {
            return kernels::gpu::encoder_attention::encoder_attention(q, k, v, scale as f32)
                .swap_dims(1, 2)
                .reshape([b, n, dm]);
        }
        blocked_attention(q, k, v, scale, query_block(b, heads, n))
            .swap_dims(1, 2)
            .reshape([b, n, dm])
    }
}

/// The most bytes of attention scores burn's path holds at once.
pub const SCORES_BYTES: usize = 64 << 20;

/// Queries per block of burn's attention path: `[b, H, rows, n]` f32 scores within [`SCORES_BYTES`].
fn query_block(b: usize, heads: usize, n: usize) -> usize {
    (SCORES_BYTES / (4 * b * heads * n).max(1)).clamp(1, n.max(1))
}

/// `softmax(q · kᵀ · scale) · v` of `q, k, v: [b, H, n, d]` by burn's ops, `block` queries at a time:
/// `[b, H, n, d]`.
fn blocked_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, scale: f64, block: usize) -> Tensor<4> {
    let n = q.dims()[2];
    let kt = k.swap_dims(2, 3);
    let mut out = Vec::with_capacity(n.div_ceil(block));
    for start in (0..n).step_by(block.max(1)) {
        let rows = block.min(n - start);
        let scores = q
            .clone()
            .narrow(2, start, rows)
            .matmul(kt.clone())
            .mul_scalar(scale); // [b, H, rows, n]
        out.push(kernels::softmax_last(scores).matmul(v.clone())); // [b, H, rows, d]
    }
    Tensor::cat(out, 2)
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;

    use super::*;

    /// Blocks of queries give the attention of all of them at once; the block keeps scores within the
    /// bound (Gemma 3 4B's tower: 4096 patches, 16 heads → 256 queries a block).
    #[test]
    fn blocked_attention_is_the_whole() {
        let device = Device::flex();
        let [q, k, v] =
            [0, 1, 2].map(|_| Tensor::<4>::random([2, 3, 10, 4], Distribution::Normal(0.0, 1.0), &device));
        let values = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().expect("f32");
        let whole = values(blocked_attention(q.clone(), k.clone(), v.clone(), 0.5, 10));
        for block in [1, 3, 7] {
            let got = values(blocked_attention(q.clone(), k.clone(), v.clone(), 0.5, block));
            let diff = got
                .iter()
                .zip(&whole)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(diff <= 1e-6, "block {block}: {diff}");
        }
        assert_eq!(query_block(1, 16, 4096), 256);
        assert_eq!(query_block(1, 12, 1024), 1024);
    }
}
