//! llama.cpp's layout of a vision-language model: the language model's GGUF and an `mmproj` GGUF
//! (`general.architecture` = `clip`) holding the vision tower (`v.*`) and the projector (`mm.*`), with
//! `clip.*` metadata. This module says what those keys and names mean: [`vision_config`] translates the
//! metadata into the mirror of a `vision_config` and resolves it as `config.json`'s is (checked against
//! the language model: its width, the image token in its vocabulary), and [`MmprojWeights`] shows the
//! file's tensors under the Hugging Face names of the family's [`Layout`]. llama.cpp's converter stores
//! SigLIP's and Idefics3's tensors unchanged (the convolution `[D, C, p, p]` as it is), so no value is
//! transformed on the way.
//!
//! Projector types: `idefics3` (SmolVLM). `gemma3` and `mlp` mmproj files are refused naming
//! `clip.projector_type` until their names are mapped.

use std::collections::BTreeSet;

use burn::tensor::Device;

use super::config::VisionFields;
use super::preprocess::{ImageProcessor, Normalize};
use super::{Layout, Vision, VisionConfig, assemble_in};
use crate::loader::gguf::{Gguf, GgufError};
use crate::loader::{LoadError, RawTensor, Weights};
use crate::model::config::{ConfigError, HfConfig, ModelConfig};
use crate::model::decoder::Decoder;
use crate::model::gguf::{Fixups, GgufWeights, config, prepare, tensor_bytes, untaken};
use crate::model::placed::Placing;

fn meta(key: &str, reason: impl Into<String>) -> LoadError {
    LoadError::Gguf(GgufError::Metadata {
        key: key.into(),
        reason: reason.into(),
    })
}

/// The Hugging Face model type an mmproj's `clip.projector_type` stands for, and the token its image
/// rows stand over in the language model's vocabulary.
fn projector_kind(g: &Gguf<'_>) -> Result<(&'static str, &'static str), LoadError> {
    let key = "clip.projector_type";
    match g.str(key)? {
        Some("idefics3") => Ok(("idefics3", "<image>")),
        Some(other) => Err(meta(
            key,
            format!("{other:?}: kiln reads idefics3 (SmolVLM) mmproj files"),
        )),
        None => Err(meta(key, "is missing")),
    }
}

/// The vision part of `text`'s model as the mmproj `g` describes it; `vocab` is the language model's
/// token table (`tokenizer.ggml.tokens`), where the image token is looked up.
pub fn vision_config(g: &Gguf<'_>, text: &ModelConfig, vocab: &[&str]) -> Result<VisionConfig, LoadError> {
    match g.str("general.architecture")? {
        Some("clip") => {}
        other => {
            return Err(meta(
                "general.architecture",
                format!("{other:?}: an mmproj file is `clip`"),
            ));
        }
    }
    if g.get("clip.has_vision_encoder").and_then(|v| v.as_bool()) != Some(true) {
        return Err(meta(
            "clip.has_vision_encoder",
            "the file holds no vision encoder",
        ));
    }
    let (model_type, image_token) = projector_kind(g)?;
    let width = g.usize("clip.vision.projection_dim")?;
    if width != text.hidden_size {
        return Err(meta(
            "clip.vision.projection_dim",
            format!(
                "the projector makes rows of {width}, the language model's hidden size is {}: the mmproj \
                 is not this model's",
                text.hidden_size
            ),
        ));
    }
    let image_token_id = vocab.iter().position(|t| *t == image_token).ok_or_else(|| {
        meta(
            "tokenizer.ggml.tokens",
            format!("the language model's vocabulary has no {image_token} token for the mmproj's images"),
        )
    })?;
    let fields = VisionFields {
        model_type: Some("clip_vision_model".into()),
        hidden_size: g.usize("clip.vision.embedding_length")?,
        intermediate_size: g.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers: g.usize("clip.vision.block_count")?,
        num_attention_heads: g.usize("clip.vision.attention.head_count")?,
        num_channels: None,
        image_size: g.usize("clip.vision.image_size")?,
        patch_size: g.usize("clip.vision.patch_size")?,
        layer_norm_eps: g
            .get("clip.vision.attention.layer_norm_epsilon")
            .and_then(|v| v.as_f64()),
        hidden_act: g
            .get("clip.use_gelu")
            .and_then(|v| v.as_bool())
            .filter(|gelu| !gelu)
            .map(|_| "quick_gelu".into()),
    };
    let top = HfConfig {
        model_type: Some(model_type.into()),
        scale_factor: g
            .get("clip.vision.projector.scale_factor")
            .and_then(|v| v.as_u64())
            .map(|s| s as usize),
        image_token_id: u32::try_from(image_token_id).ok(),
        ..HfConfig::default()
    };
    VisionConfig::resolve(&fields, &top, text).map_err(|e| match e {
        ConfigError::Invalid { field, reason } => meta(&format!("clip ({field})"), reason),
        e => LoadError::Config(e),
    })
}

/// The tower's tensors outside its layers: (Hugging Face name under the tower, mmproj name).
const TOWER: [(&str, &str); 5] = [
    ("embeddings.patch_embedding.weight", "v.patch_embd.weight"),
    ("embeddings.patch_embedding.bias", "v.patch_embd.bias"),
    ("embeddings.position_embedding.weight", "v.position_embd.weight"),
    ("post_layernorm.weight", "v.post_ln.weight"),
    ("post_layernorm.bias", "v.post_ln.bias"),
];

/// An encoder layer's modules: (Hugging Face module, llama.cpp's).
const LAYER: [(&str, &str); 8] = [
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.out_proj", "attn_out"),
    ("layer_norm1", "ln1"),
    ("layer_norm2", "ln2"),
    ("mlp.fc1", "ffn_up"),
    ("mlp.fc2", "ffn_down"),
];

/// The projector's tensors: (Hugging Face name under the projector's prefix, mmproj name).
const PROJECTOR: [(&str, &str); 1] = [("modality_projection.proj.weight", "mm.model.fc.weight")];

/// The mmproj name of the Hugging Face tensor `hf` under `layout` (llama.cpp's `v.*` / `mm.*`).
fn mmproj_name(hf: &str, layout: &Layout) -> Option<String> {
    if let Some(rest) = hf.strip_prefix(layout.projector) {
        return PROJECTOR
            .iter()
            .find(|(h, _)| *h == rest)
            .map(|(_, g)| (*g).into());
    }
    let rest = hf.strip_prefix(layout.tower)?.strip_prefix('.')?;
    if let Some((_, g)) = TOWER.iter().find(|(h, _)| *h == rest) {
        return Some((*g).into());
    }
    let rest = rest.strip_prefix("encoder.layers.")?;
    let (i, part) = rest.split_once('.')?;
    let (module, kind) = part.rsplit_once('.')?;
    let (_, ggml) = LAYER.iter().find(|(h, _)| *h == module)?;
    Some(format!("v.blk.{i}.{ggml}.{kind}"))
}

/// The Hugging Face name under `layout` of the mmproj tensor `g` (the inverse of [`mmproj_name`]).
pub(crate) fn hf_name(g: &str, layout: &Layout) -> Option<String> {
    if let Some((h, _)) = PROJECTOR.iter().find(|(_, m)| *m == g) {
        return Some(format!("{}{h}", layout.projector));
    }
    if let Some((h, _)) = TOWER.iter().find(|(_, m)| *m == g) {
        return Some(format!("{}.{h}", layout.tower));
    }
    let rest = g.strip_prefix("v.blk.")?;
    let (i, part) = rest.split_once('.')?;
    i.parse::<usize>().ok()?;
    let (module, kind) = part.rsplit_once('.')?;
    let (h, _) = LAYER.iter().find(|(_, m)| *m == module)?;
    Some(format!("{}.encoder.layers.{i}.{h}.{kind}", layout.tower))
}

/// The layout an mmproj's tensors are read under: the family's first, with the language model's
/// tensors under their own names.
pub(crate) fn layout(v: &VisionConfig) -> Result<Layout, LoadError> {
    let family = v.projector.family()?;
    Ok(Layout {
        text: "model.",
        lm_head: "lm_head.weight",
        ..family.layouts()[0]
    })
}

/// How the mmproj says images are prepared: its family's processor with the file's
/// `clip.vision.image_mean` / `image_std` and, for SmolVLM, `clip.vision.preproc_image_size` as the
/// longest edge an image is resized to before it is cut into tiles.
pub fn image_processor(g: &Gguf<'_>, v: &VisionConfig) -> Result<ImageProcessor, LoadError> {
    let triple = |key: &str| -> Result<Option<[f32; 3]>, LoadError> {
        let Some(value) = g.get(key) else {
            return Ok(None);
        };
        let number = |i| {
            value
                .as_array()
                .filter(|a| a.len() == 3)
                .and_then(|a| a.f64_at(i))
        };
        match (number(0), number(1), number(2)) {
            (Some(a), Some(b), Some(c)) => Ok(Some([a as f32, b as f32, c as f32])),
            _ => Err(meta(key, "is not three numbers")),
        }
    };
    let mut processor = ImageProcessor::default_for(v.projector, v.image_size);
    let normalize = Normalize {
        mean: triple("clip.vision.image_mean")?.unwrap_or(Normalize::STANDARD.mean),
        std: triple("clip.vision.image_std")?.unwrap_or(Normalize::STANDARD.std),
        ..Normalize::STANDARD
    };
    let key = "clip.vision.preproc_image_size";
    let longest = g.get(key).and_then(|value| value.as_u64());
    match &mut processor {
        ImageProcessor::Idefics3 {
            normalize: n,
            longest_edge,
            ..
        } => {
            *n = normalize;
            if let Some(edge) = longest {
                if edge < v.image_size as u64 || edge > 1 << 14 {
                    return Err(meta(
                        key,
                        format!("{edge} pixels: not from {} to 16384", v.image_size),
                    ));
                }
                *longest_edge = edge as usize;
            }
        }
        ImageProcessor::Gemma3 { normalize: n, .. } => *n = normalize,
    }
    Ok(processor)
}

/// The converter changes no vision tensor.
pub(crate) const UNCHANGED: Fixups = Fixups {
    permuted: None,
    norm_shift: 0.0,
};

/// An mmproj's tensors under the Hugging Face names of `layout`.
pub struct MmprojWeights<'g, 'a> {
    file: &'g Gguf<'a>,
    layout: Layout,
    taken: BTreeSet<String>,
}

impl<'g, 'a> MmprojWeights<'g, 'a> {
    pub(crate) fn new(file: &'g Gguf<'a>, layout: Layout) -> Self {
        Self {
            file,
            layout,
            taken: BTreeSet::new(),
        }
    }
}

impl Weights for MmprojWeights<'_, '_> {
    fn contains(&self, name: &str) -> bool {
        mmproj_name(name, &self.layout).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let g = mmproj_name(name, &self.layout).ok_or_else(|| LoadError::Missing(name.into()))?;
        let info = self
            .file
            .tensor(&g)
            .ok_or_else(|| LoadError::Missing(format!("{g} ({name})")))?;
        if info.shape() != expected {
            return Err(LoadError::Shape {
                name: format!("{g} ({name})"),
                expected: expected.to_vec(),
                actual: info.shape(),
            });
        }
        let raw = prepare(name, &g, info, self.file.data(info), UNCHANGED)?;
        self.taken.insert(g);
        Ok(raw)
    }

    fn leftover(&self) -> Option<String> {
        untaken(self.file, &self.taken)
    }

    fn total_bytes(&self) -> u64 {
        tensor_bytes(self.file)
    }
}

/// The two files as one checkpoint: a vision tensor's name is the mmproj's (held or not, so that a
/// missing one is named in its file), any other the language model's.
struct Pair<'p, 'g, 'a> {
    vision: MmprojWeights<'g, 'a>,
    lm: &'p mut dyn Weights,
}

impl Weights for Pair<'_, '_, '_> {
    fn contains(&self, name: &str) -> bool {
        self.vision.contains(name) || self.lm.contains(name)
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        match mmproj_name(name, &self.vision.layout) {
            Some(_) => self.vision.take(name, expected),
            None => self.lm.take(name, expected),
        }
    }

    fn leftover(&self) -> Option<String> {
        self.vision.leftover().or_else(|| self.lm.leftover())
    }

    fn total_bytes(&self) -> u64 {
        self.vision.total_bytes() + self.lm.total_bytes()
    }
}

/// Loads a vision-language model from llama.cpp's two files: the language model's GGUF `lm` and its
/// `mmproj`, each tensor placed on `device` as it is taken.
pub fn load(lm: &Gguf<'_>, mmproj: &Gguf<'_>, device: &Device) -> Result<(Decoder, Vision), LoadError> {
    let mut text = config(lm)?;
    let vocab = lm.strings("tokenizer.ggml.tokens")?.unwrap_or_default();
    let v = vision_config(mmproj, &text, &vocab)?;
    // The vision tensors under the family's first layout; the language model's under its own names.
    let layout = layout(&v)?;
    text.vision = Some(v);
    let mut lm_weights = GgufWeights::new(lm, &text)?;
    let mut both = Pair {
        vision: MmprojWeights::new(mmproj, layout),
        lm: &mut lm_weights,
    };
    assemble_in(text, &mut Placing::new(&mut both, device), device, layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tower_and_projector_names_map_to_llama_cpp() {
        let layout = Layout {
            tower: "model.vision_model",
            text: "model.",
            lm_head: "lm_head.weight",
            projector: "model.connector.",
        };
        let name = |hf: &str| mmproj_name(hf, &layout);
        let cases = [
            (
                "model.vision_model.embeddings.patch_embedding.weight",
                "v.patch_embd.weight",
            ),
            (
                "model.vision_model.embeddings.position_embedding.weight",
                "v.position_embd.weight",
            ),
            (
                "model.vision_model.encoder.layers.1.self_attn.out_proj.bias",
                "v.blk.1.attn_out.bias",
            ),
            (
                "model.vision_model.encoder.layers.0.layer_norm2.weight",
                "v.blk.0.ln2.weight",
            ),
            (
                "model.vision_model.encoder.layers.11.mlp.fc1.weight",
                "v.blk.11.ffn_up.weight",
            ),
            ("model.vision_model.post_layernorm.bias", "v.post_ln.bias"),
            (
                "model.connector.modality_projection.proj.weight",
                "mm.model.fc.weight",
            ),
        ];
        for (hf, g) in cases {
            assert_eq!(name(hf).as_deref(), Some(g), "{hf}");
        }
        for other in [
            "model.layers.0.self_attn.q_proj.weight",
            "model.vision_model.encoder.layers.0.self_attn.rotary.weight",
            "model.vision_modelx.post_layernorm.bias",
            "model.connector.other.weight",
        ] {
            assert_eq!(name(other), None, "{other}");
        }
    }
}
