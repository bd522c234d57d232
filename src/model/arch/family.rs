//! The seam between a family and the rest of kiln: a family is one type implementing [`Family`] (its
//! config from `config.json` and from GGUF metadata, its tensor names written once, how it builds each
//! layer), and each of its layers is a [`Layer`] (its forward over a layer's cache, the projections it
//! holds, and whether the fused wgpu decode step can run it). The decoder, the loader's checks and the
//! GGUF reader ask these traits; nothing outside a family's file matches on which family it is.
//!
//! Shapes: `b` batch, `s` new positions, `h` hidden size.

use std::fmt::Debug;
use std::sync::Arc;

use burn::tensor::Tensor;

use crate::loader::{LoadError, RawTensor};
use crate::model::config::{ConfigError, HfConfig, ModelConfig};
use crate::model::gguf::Meta;
use crate::model::layers::attention::{Attention, Positions};
use crate::model::layers::conv::ShortConv;
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::placed::Tensors;

/// Hugging Face → llama.cpp names of the model-wide tensors (every family's; the final norm's is
/// [`Family::final_norm_names`]).
const GLOBAL: [(&str, &str); 2] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("lm_head.weight", "output.weight"),
];

/// The final norm's Hugging Face and llama.cpp names in most families.
pub(crate) const FINAL_NORM: (&str, &str) = ("model.norm.weight", "output_norm.weight");

/// What one model family decides. Implemented once per family file (`model::arch::<family>`), registered
/// in `model::arch`'s table under its `config.json` and GGUF names.
pub(crate) trait Family: Sync {
    /// Resolves the mirror of a `config.json` (or of translated GGUF metadata): defaults applied, features
    /// decided, every layer's kind (window, rope, cache) set.
    fn resolve(&self, c: &HfConfig) -> Result<ModelConfig, ConfigError>;

    /// Adds the family's own GGUF keys (`<arch>.*`, read through `m`) to the mirror `hf`, which already
    /// holds the keys every family shares.
    fn gguf_config(&self, m: &Meta<'_, '_>, hf: &mut HfConfig) -> Result<(), LoadError> {
        let _ = (m, hf);
        Ok(())
    }

    /// The layer tensors' Hugging Face ↔ llama.cpp names (the part between `layers.{i}.` and `.weight`).
    fn layer_names(&self) -> &'static [(&'static str, &'static str)];

    /// The layer's norm tensors, by name after `model.layers.{i}.`.
    fn norms(&self) -> &'static [&'static str];

    /// Whether llama.cpp's converter permuted q/k rows for its interleaved rope (Llama-style files;
    /// NeoX-rope families keep Hugging Face order).
    fn gguf_permuted(&self) -> bool {
        false
    }

    /// What llama.cpp's converter added to every `*norm.weight` (Gemma stores `1 + w`), which loading
    /// subtracts so that both formats hold Hugging Face's values.
    fn gguf_norm_shift(&self) -> f32 {
        0.0
    }

    /// Whether GGUF tensor `g` carries [`Family::gguf_norm_shift`]: every `*norm.weight` unless the
    /// family says otherwise.
    fn gguf_shifted(&self, g: &str) -> bool {
        g.ends_with("norm.weight")
    }

    /// Takes layer `i`'s tensors from `ckpt`.
    fn load_layer(
        &self,
        c: &ModelConfig,
        i: usize,
        ckpt: &mut dyn Tensors,
    ) -> Result<Arc<dyn Layer>, LoadError>;

    /// The final norm's weight `[h]` as the family multiplies it (Gemma: `1 + w`).
    fn final_norm(&self, w: Tensor<1>) -> Tensor<1> {
        w
    }

    /// The final norm's Hugging Face and llama.cpp tensor names (LFM2: `model.embedding_norm`).
    fn final_norm_names(&self) -> (&'static str, &'static str) {
        FINAL_NORM
    }

    /// The shape a GGUF file stores Hugging Face tensor `hf` of `shape` in (the same, but where the
    /// converter squeezed or reshaped it: a depthwise convolution's `[C, 1, w]` is `[C, w]`). Loading
    /// gives the tensor its Hugging Face shape back (the same elements in the same order).
    fn gguf_shape(&self, hf: &str, shape: &[usize]) -> Vec<usize> {
        let _ = hf;
        shape.to_vec()
    }

    /// Tensor `hf` of a GGUF file (q/k rows un-permuted and norm shifts undone already) as its Hugging
    /// Face checkpoint holds it: its shape back (see [`Family::gguf_shape`]) and what else the
    /// converter changed undone. Most families change nothing more.
    fn gguf_fix<'b>(&self, hf: &str, raw: RawTensor<'b>) -> Result<RawTensor<'b>, LoadError> {
        let _ = hf;
        Ok(raw)
    }

    /// Whether GGUF tensor `g` of a file of `c` is one kiln does not run and skips (Qwen3.5's
    /// multi-token-prediction blocks after the decoder's layers).
    fn gguf_ignored(&self, c: &ModelConfig, g: &str) -> bool {
        let _ = (c, g);
        false
    }

    /// The tensors of layer `i`, by name after `model.layers.{i}.`, with the shapes `c` implies: the
    /// attention and MLP projections every family here has, and the family's norms.
    fn layer_shapes(&self, c: &ModelConfig, i: usize) -> Vec<(&'static str, Vec<usize>)> {
        let _ = i;
        let mut shapes = attention_mlp_shapes(c);
        let h = c.hidden_size;
        shapes.extend(self.norms().iter().map(|n| (*n, vec![h])));
        shapes
    }

    /// Every tensor a checkpoint of `c` holds, by Hugging Face name, with the shape the config implies
    /// (`lm_head.weight` too, which tied checkpoints may leave out).
    fn checkpoint_shapes(&self, c: &ModelConfig) -> Vec<(String, Vec<usize>)> {
        let (h, v) = (c.hidden_size, c.vocab_size);
        let mut all = crate::model::per_layer::PerLayer::shapes(c);
        all.extend([
            ("model.embed_tokens.weight".to_owned(), vec![v, h]),
            (self.final_norm_names().0.to_owned(), vec![h]),
            ("lm_head.weight".to_owned(), vec![v, h]),
        ]);
        for i in 0..c.num_layers {
            all.extend(
                self.layer_shapes(c, i)
                    .into_iter()
                    .map(|(name, shape)| (format!("model.layers.{i}.{name}"), shape)),
            );
        }
        all
    }

    /// The llama.cpp name of a Hugging Face tensor name.
    fn gguf_name(&self, hf: &str) -> Option<String> {
        gguf_name_of(self, hf)
    }

    /// The Hugging Face name of a llama.cpp tensor name (the inverse of [`Family::gguf_name`]).
    fn hf_name_of(&self, g: &str) -> Option<String> {
        hf_name_from(self, g)
    }
}

/// [`Family::gguf_name`] by the family's [`Family::layer_names`] and final norm (a family that names more
/// overrides it and calls this for the rest).
pub(crate) fn gguf_name_of<F: Family + ?Sized>(f: &F, hf: &str) -> Option<String> {
    let norm = f.final_norm_names();
    let mut global = GLOBAL
        .iter()
        .chain(&crate::model::per_layer::NAMES)
        .chain([&norm]);
    if let Some((_, g)) = global.find(|(h, _)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (part, kind) = rest.rsplit_once('.')?;
    let (_, g) = f.layer_names().iter().find(|(h, _)| *h == part)?;
    Some(format!("blk.{layer}.{g}.{kind}"))
}

/// [`Family::hf_name_of`] by the family's [`Family::layer_names`] and final norm.
pub(crate) fn hf_name_from<F: Family + ?Sized>(f: &F, g: &str) -> Option<String> {
    let norm = f.final_norm_names();
    let mut global = GLOBAL
        .iter()
        .chain(&crate::model::per_layer::NAMES)
        .chain([&norm]);
    if let Some((hf, _)) = global.find(|(_, n)| *n == g) {
        return Some(hf.to_string());
    }
    let rest = g.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let (hf, _) = f.layer_names().iter().find(|(_, n)| *n == part)?;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// One decoder layer's weights, in its family's shape.
pub(crate) trait Layer: Debug + Send + Sync {
    /// Layer `i` of `c` on `x: [b, s, h]` → `[b, s, h]`, reading and appending to its part of `cache`.
    fn forward(
        &self,
        x: Tensor<3>,
        c: &ModelConfig,
        i: usize,
        cache: &mut KvCache,
        at: &Positions,
    ) -> Tensor<3>;

    /// Every projection the layer holds.
    fn linears(&self) -> Vec<&Linear>;

    /// The layer as the fused wgpu decode step runs it (`model::step`), if it has that shape.
    #[cfg_attr(
        not(feature = "webgpu"),
        allow(dead_code, reason = "only the fused wgpu step reads it")
    )]
    fn step_parts(&self) -> Option<StepParts<'_>> {
        None
    }
}

/// A pre-norm layer (a mixer, then a gated MLP) as the fused decode step sees it; norms `[h]`.
#[cfg_attr(
    not(feature = "webgpu"),
    allow(dead_code, reason = "only the fused wgpu step reads it")
)]
pub(crate) struct StepParts<'a> {
    pub mixer: StepMixer<'a>,
    /// `(gate, up)`: separate projections.
    pub gate_up: [&'a Linear; 2],
    pub down: &'a Linear,
    /// Before the mixer (Llama's `input_layernorm`, Gemma's `pre_attn`, LFM2's `operator_norm`) and
    /// before the MLP.
    pub pre_attn: &'a Tensor<1>,
    pub pre_mlp: &'a Tensor<1>,
    /// Norms of the mixer's and MLP's outputs, `(post_attn, post_ffw)` (Gemma's sandwich).
    pub post: Option<(&'a Tensor<1>, &'a Tensor<1>)>,
    /// After the MLP, Gemma 4's per-layer input: `x += rmsnorm(proj(gelu_tanh(gate(x)) · input))·norm`,
    /// as `(gate, proj, norm)`.
    pub per_layer: Option<(&'a Linear, &'a Linear, &'a Tensor<1>)>,
    /// The layer's output times this `[1]` (Gemma 4's `layer_scalar`); needs the sandwich norms.
    pub scalar: Option<&'a Tensor<1>>,
}

/// What mixes positions in a layer the fused step runs.
#[cfg_attr(
    not(feature = "webgpu"),
    allow(dead_code, reason = "only the fused wgpu step reads it")
)]
pub(crate) enum StepMixer<'a> {
    /// Attention over the layer's own keys and values, with separate `(q, k, v)` projections; `v_norm`
    /// the ones `[d]` of a layer that RMS-normalises v per head without a weight (Gemma 4).
    Attention {
        attn: &'a Attention,
        qkv: [&'a Linear; 3],
        v_norm: Option<&'a Tensor<1>>,
    },
    /// Attention over an earlier layer's keys and values (the cache kind `SharedKv`): queries only.
    Shared { attn: &'a Attention, q: &'a Linear },
    /// LFM2's short-convolution block.
    Conv(&'a ShortConv),
    /// Qwen3.5's Gated DeltaNet.
    Delta(DeltaStep<'a>),
}

/// A Gated DeltaNet's weights as the fused step reads them.
#[cfg_attr(
    not(feature = "webgpu"),
    allow(dead_code, reason = "only the fused wgpu step reads it")
)]
pub(crate) struct DeltaStep<'a> {
    /// `(qkv, z, b, a)`: the convolved q/k/v channels, the output gate, `beta`'s and the decay's inputs.
    pub proj: [&'a Linear; 4],
    /// The convolution's filters, `[w, C]`.
    pub conv: &'a Tensor<2>,
    /// `[2·Hv]`: `−exp(A_log)`, then `dt_bias`.
    pub gates: &'a Tensor<1>,
    /// The output norm, `[dv]`.
    pub norm: &'a Tensor<1>,
    pub out: &'a Linear,
    /// `(Hk, Hv, dk, dv)`.
    pub heads: [usize; 4],
}

/// The attention and MLP projections' shapes of a layer of `c`, by name after `model.layers.{i}.` (fused
/// `qkv_proj` / `gate_up_proj` where the config says so; biases and q/k norms where it has them).
pub(crate) fn attention_mlp_shapes(c: &ModelConfig) -> Vec<(&'static str, Vec<usize>)> {
    let (h, hd, i) = (c.hidden_size, c.head_dim, c.intermediate_size);
    let (q, kv) = (c.num_heads * hd, c.num_kv_heads * hd);
    let mut shapes = vec![
        ("self_attn.o_proj.weight", vec![h, q]),
        ("mlp.down_proj.weight", vec![h, i]),
    ];
    match c.fused_qkv {
        true => shapes.push(("self_attn.qkv_proj.weight", vec![q + 2 * kv, h])),
        false => shapes.extend([
            ("self_attn.q_proj.weight", vec![q, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
        ]),
    }
    match c.fused_gate_up {
        true => shapes.push(("mlp.gate_up_proj.weight", vec![2 * i, h])),
        false => shapes.extend([
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
        ]),
    }
    if c.qkv_bias {
        shapes.extend([
            ("self_attn.q_proj.bias", vec![q]),
            ("self_attn.k_proj.bias", vec![kv]),
            ("self_attn.v_proj.bias", vec![kv]),
        ]);
    }
    if c.qk_norm {
        shapes.extend([
            ("self_attn.q_norm.weight", vec![hd]),
            ("self_attn.k_norm.weight", vec![hd]),
        ]);
    }
    shapes
}
