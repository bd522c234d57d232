//! llama.cpp's layout of a vision-language model: the language model's GGUF and an `mmproj` GGUF
//! (`general.architecture` = `clip`) holding the vision tower (`v.*`) and the projector (`mm.*`), with
//! `clip.*` metadata. This module says what those keys and names mean: [`vision_config`] translates the
//! metadata into the mirror of a `vision_config` and resolves it as `config.json`'s is (checked against
//! the language model: its width, the image token in its vocabulary), and [`MmprojWeights`] shows the
//! file's tensors under the Hugging Face names of the family's [`Layout`]. llama.cpp's converter stores
//! SigLIP's and Idefics3's tensors unchanged (the convolution `[D, C, p, p]` as it is), so no value is
//! transformed on the way.
//!
//! Projector types: `idefics3` (SmolVLM) and `gemma3` (Gemma 3: the converter adds Gemma's `1 +` to the
//! soft-embedding norm, undone here, and its `scale_factor` is the pooling window). Others are refused
//! naming `clip.projector_type`.

use std::collections::BTreeSet;

use burn::tensor::Device;

use super::config::VisionFields;
use super::preprocess::{ImageProcessor, Normalize};
use super::{Layout, Projector, Vision, VisionConfig, assemble_in};
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

/// What an mmproj's `clip.projector_type` means.
struct Kind {
    /// `clip.projector_type`.
    name: &'static str,
    /// The Hugging Face model type it stands for.
    model_type: &'static str,
    /// The token its image rows stand over in the language model's vocabulary.
    image_token: &'static str,
    /// The projector's tensors: (Hugging Face name under the projector's prefix, mmproj name).
    projector: &'static [(&'static str, &'static str)],
    /// What the converter added to the projector's norm weights (`*norm.weight`).
    norm_shift: f32,
    /// The mmproj's matrices the family takes as dense operands ([`crate::model::placed::dense_matrix`]).
    dense: &'static [&'static str],
}

const KINDS: [Kind; 3] = [
    Kind {
        name: "idefics3",
        model_type: "idefics3",
        image_token: "<image>",
        projector: &[("modality_projection.proj.weight", "mm.model.fc.weight")],
        norm_shift: 0.0,
        dense: &[],
    },
    Kind {
        name: "gemma3",
        model_type: "gemma3",
        image_token: "<image_soft_token>",
        // The projection as Hugging Face keeps it, `[D, h]`; the norm with the `1 +` of Gemma's RMSNorm added.
        projector: &[
            ("mm_input_projection_weight", "mm.input_projection.weight"),
            ("mm_soft_emb_norm.weight", "mm.soft_emb_norm.weight"),
        ],
        norm_shift: 1.0,
        dense: &["mm.input_projection.weight"],
    },
    Kind {
        name: "mlp",
        model_type: "llava",
        image_token: "<image>",
        projector: &[
            ("linear_1.weight", "mm.0.weight"),
            ("linear_1.bias", "mm.0.bias"),
            ("linear_2.weight", "mm.2.weight"),
            ("linear_2.bias", "mm.2.bias"),
        ],
        norm_shift: 0.0,
        dense: &[],
    },
];

/// The kind of mmproj `g` is.
fn projector_kind(g: &Gguf<'_>) -> Result<&'static Kind, LoadError> {
    let key = "clip.projector_type";
    match g.str(key)? {
        Some(name) => KINDS.iter().find(|k| k.name == name).ok_or_else(|| {
            meta(
                key,
                format!(
                    "{name:?}: kiln reads idefics3 (SmolVLM), gemma3 (Gemma 3) and mlp (LLaVA) mmproj files"
                ),
            )
        }),
        None => Err(meta(key, "is missing")),
    }
}

/// The kind of mmproj a vision part is read from.
fn kind_of(v: &VisionConfig) -> &'static Kind {
    match v.projector {
        Projector::PixelShuffle { .. } => &KINDS[0],
        Projector::AvgPool { .. } => &KINDS[1],
        Projector::Mlp { .. } => &KINDS[2],
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
    let kind = projector_kind(g)?;
    // LLaVA's `projection_dim` is CLIP's own (unused); its projector's width is its last matrix's.
    let (width, key) = match kind.name {
        "mlp" => (g.tensor("mm.2.weight").map_or(0, |t| t.shape()[0]), "mm.2.weight"),
        _ => (
            g.usize("clip.vision.projection_dim")?,
            "clip.vision.projection_dim",
        ),
    };
    if width != text.hidden_size {
        return Err(meta(
            key,
            format!(
                "the projector makes rows of {width}, the language model's hidden size is {}: the mmproj \
                 is not this model's",
                text.hidden_size
            ),
        ));
    }
    let image_token = kind.image_token;
    let image_token_id = vocab.iter().position(|t| *t == image_token).ok_or_else(|| {
        meta(
            "tokenizer.ggml.tokens",
            format!("the language model's vocabulary has no {image_token} token for the mmproj's images"),
        )
    })?;
    // CLIP's embeddings (a class token, a LayerNorm before the layers) or SigLIP's.
    let tower = match g.tensor("v.class_embd") {
        Some(_) => "clip_vision_model",
        None => "siglip_vision_model",
    };
    let fields = VisionFields {
        model_type: Some(tower.into()),
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
    let scale_factor = g
        .get("clip.vision.projector.scale_factor")
        .and_then(|v| v.as_u64())
        .map(|s| s as usize);
    let mut top = HfConfig {
        model_type: Some(kind.model_type.into()),
        image_token_id: u32::try_from(image_token_id).ok(),
        ..HfConfig::default()
    };
    match kind.name {
        // Gemma 3's factor is the pooling window (4 where the key is absent, as llama.cpp reads it).
        "gemma3" => {
            let window = scale_factor.unwrap_or(4);
            let side = fields.image_size / fields.patch_size.max(1);
            if window == 0 || !side.is_multiple_of(window) {
                return Err(meta(
                    "clip.vision.projector.scale_factor",
                    format!("{window} does not divide the {side} patches of a side"),
                ));
            }
            top.mm_tokens_per_image = Some((side / window) * (side / window));
        }
        // The converter keeps the layers up to the one the projector reads (the last one stored), or
        // names it.
        "mlp" => {
            let key = "clip.vision.feature_layer";
            let layer = match g.get(key).map(|v| v.as_array()) {
                None => -1,
                Some(Some(a)) if a.len() == 1 => a.f64_at(0).map_or(-1, |k| k as i64),
                Some(_) => {
                    return Err(meta(
                        key,
                        "kiln takes one feature layer (LLaVA-NeXT's lists are not implemented)",
                    ));
                }
            };
            top.vision_feature_layer = Some(layer.into());
        }
        _ => top.scale_factor = scale_factor,
    }
    VisionConfig::resolve(&fields, &top, text).map_err(|e| match e {
        ConfigError::Invalid { field, reason } => meta(&format!("clip ({field})"), reason),
        e => LoadError::Config(e),
    })
}

/// The tower's tensors outside its layers: (Hugging Face name under the tower, mmproj name).
const TOWER: [(&str, &str); 8] = [
    ("embeddings.class_embedding", "v.class_embd"),
    ("embeddings.patch_embedding.weight", "v.patch_embd.weight"),
    ("embeddings.patch_embedding.bias", "v.patch_embd.bias"),
    ("embeddings.position_embedding.weight", "v.position_embd.weight"),
    ("post_layernorm.weight", "v.post_ln.weight"),
    ("post_layernorm.bias", "v.post_ln.bias"),
    ("pre_layrnorm.weight", "v.pre_ln.weight"),
    ("pre_layrnorm.bias", "v.pre_ln.bias"),
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

/// How an mmproj's tensors are named: the checkpoint layout they are read under, and the projector's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    pub layout: Layout,
    projector: &'static [(&'static str, &'static str)],
    /// The converter's changes to undo.
    pub fixups: Fixups,
    /// The mmproj tensors to place dense (a file streamed in pieces places each as it arrives).
    pub dense: &'static [&'static str],
    /// llama.cpp's older LLaVA converter names `fc1` `ffn_down` and `fc2` `ffn_up`.
    swapped_ffn: bool,
}

impl Names {
    /// llama.cpp's name of a layer's Hugging Face module.
    fn ggml(&self, module: &str) -> Option<&'static str> {
        let (_, g) = LAYER.iter().find(|(h, _)| *h == module)?;
        Some(self.swap(g))
    }

    /// The Hugging Face module of llama.cpp's name of a layer's module.
    fn hf(&self, module: &str) -> Option<&'static str> {
        let module = self.swap(module);
        LAYER.iter().find(|(_, g)| *g == module).map(|(h, _)| *h)
    }

    fn swap<'s>(&self, module: &'s str) -> &'s str {
        match (self.swapped_ffn, module) {
            (true, "ffn_up") => "ffn_down",
            (true, "ffn_down") => "ffn_up",
            _ => module,
        }
    }
}

/// The names of `v`'s mmproj tensors in file `g`: the vision tensors under the family's first layout,
/// the language model's under its own names. An `ffn_down` whose rows are the tower's width holds
/// `fc1` (as llama.cpp's `clip.cpp` checks too).
pub(crate) fn names(v: &VisionConfig, g: &Gguf<'_>) -> Result<Names, LoadError> {
    let swapped_ffn = g
        .tensor("v.blk.0.ffn_down.weight")
        .is_some_and(|t| t.dims.first() == Some(&v.hidden_size) && v.intermediate_size != v.hidden_size);
    let family = v.projector.family()?;
    let kind = kind_of(v);
    Ok(Names {
        layout: Layout {
            text: "model.",
            lm_head: "lm_head.weight",
            ..family.layouts()[0]
        },
        projector: kind.projector,
        fixups: Fixups {
            permuted: None,
            norm_shift: kind.norm_shift,
            arch: None,
        },
        dense: kind.dense,
        swapped_ffn,
    })
}

/// The mmproj name of the Hugging Face tensor `hf` (llama.cpp's `v.*` / `mm.*`).
fn mmproj_name(hf: &str, names: &Names) -> Option<String> {
    let layout = &names.layout;
    if let Some(rest) = hf.strip_prefix(layout.projector) {
        return names
            .projector
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
    let ggml = names.ggml(module)?;
    Some(format!("v.blk.{i}.{ggml}.{kind}"))
}

/// `e` with a vision tensor's Hugging Face name given with its mmproj name (a missing tensor, a wrong
/// shape), as a load of the two files reports it.
pub(crate) fn in_mmproj(e: LoadError, names: &Names) -> LoadError {
    let named = |hf: String| match mmproj_name(&hf, names) {
        Some(g) => format!("{g} ({hf})"),
        None => hf,
    };
    match e {
        LoadError::Missing(hf) => LoadError::Missing(named(hf)),
        LoadError::Shape {
            name,
            expected,
            actual,
        } => LoadError::Shape {
            name: named(name),
            expected,
            actual,
        },
        e => e,
    }
}

/// The Hugging Face name of the mmproj tensor `g` (the inverse of [`mmproj_name`]).
pub(crate) fn hf_name(g: &str, names: &Names) -> Option<String> {
    let layout = &names.layout;
    if let Some((h, _)) = names.projector.iter().find(|(_, m)| *m == g) {
        return Some(format!("{}{h}", layout.projector));
    }
    if let Some((h, _)) = TOWER.iter().find(|(_, m)| *m == g) {
        return Some(format!("{}.{h}", layout.tower));
    }
    let rest = g.strip_prefix("v.blk.")?;
    let (i, part) = rest.split_once('.')?;
    i.parse::<usize>().ok()?;
    let (module, kind) = part.rsplit_once('.')?;
    let h = names.hf(module)?;
    Some(format!("{}.encoder.layers.{i}.{h}.{kind}", layout.tower))
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
        ImageProcessor::Gemma3 { normalize: n, .. } | ImageProcessor::Clip { normalize: n, .. } => {
            *n = normalize
        }
    }
    Ok(processor)
}

/// An mmproj's tensors under their Hugging Face names.
pub struct MmprojWeights<'g, 'a> {
    file: &'g Gguf<'a>,
    names: Names,
    taken: BTreeSet<String>,
}

impl<'g, 'a> MmprojWeights<'g, 'a> {
    pub(crate) fn new(file: &'g Gguf<'a>, names: Names) -> Self {
        Self {
            file,
            names,
            taken: BTreeSet::new(),
        }
    }
}

impl Weights for MmprojWeights<'_, '_> {
    fn contains(&self, name: &str) -> bool {
        mmproj_name(name, &self.names).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let g = mmproj_name(name, &self.names).ok_or_else(|| LoadError::Missing(name.into()))?;
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
        let raw = prepare(name, &g, info, self.file.data(info), self.names.fixups)?;
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
        match mmproj_name(name, &self.vision.names) {
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
    let names = names(&v, mmproj)?;
    text.vision = Some(v);
    let mut lm_weights = GgufWeights::new(lm, &text)?;
    let mut both = Pair {
        vision: MmprojWeights::new(mmproj, names),
        lm: &mut lm_weights,
    };
    assemble_in(text, &mut Placing::new(&mut both, device), device, names.layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tower_and_projector_names_map_to_llama_cpp() {
        let names = Names {
            layout: Layout {
                tower: "model.vision_model",
                text: "model.",
                lm_head: "lm_head.weight",
                projector: "model.connector.",
            },
            projector: KINDS[0].projector,
            fixups: Fixups {
                permuted: None,
                norm_shift: 0.0,
                arch: None,
            },
            dense: &[],
            swapped_ffn: false,
        };
        let name = |hf: &str| mmproj_name(hf, &names);
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
            assert_eq!(hf_name(g, &names).as_deref(), Some(hf), "{g}");
        }
        for other in [
            "v.blk.x.attn_q.weight",
            "v.blk.0.attn_qq.weight",
            "mm.other.weight",
            "blk.0.attn_q.weight",
        ] {
            assert_eq!(hf_name(other, &names), None, "{other}");
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
