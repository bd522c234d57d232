//! Vision-language models' vision parts against transformers, on tiny random models:
//! - SmolVLM, `Idefics3ForConditionalGeneration` (`tests/fixtures/golden/smolvlm/`, made by
//!   `make_golden_smolvlm.py`): a SigLIP tower of 2 layers over a 64² image of 16² patches, a pixel
//!   shuffle of 2 (4 rows, causal), a 2-layer Llama;
//! - Gemma 3, `Gemma3ForConditionalGeneration` (`tests/fixtures/golden/gemma3_vision/`, made by
//!   `make_golden_gemma3_vision.py`): a SigLIP tower over a 64² image of 8² patches, pooled 2 × 2 to 16
//!   rows that attend bidirectionally (`token_type_ids`) across a sliding layer of window 8, a 2-layer
//!   Gemma 3 with tied embeddings;
//! - LLaVA, `LlavaForConditionalGeneration` (`tests/fixtures/golden/llava/`, made by
//!   `make_golden_llava.py`): a CLIP tower of 3 layers (class token, `pre_layrnorm`, quick GELU) over a
//!   32² image of 8² patches, read after its second layer without the class token's row, a two-layer
//!   MLP projector (16 rows, causal), a 2-layer Llama.
//!
//! Checked: the patch embeddings, the encoder's features (its last hidden state; LLaVA's selected
//! hidden state) and the projector's rows within
//! [`FEATURE_TOLERANCE`]; the logits of a prompt whose image tokens are those rows within the golden
//! tolerance; and the greedy continuation. Shared by the native tests (`model_golden.rs`) and the
//! browser's (`browser.rs`).

use burn::tensor::{Device, Tensor, TensorData};
use kiln::loader::Checkpoint;
use kiln::loader::gguf::Gguf;
use kiln::model::{Chunk, Decoder, ModelConfig, Vision};
use serde::Deserialize;

use super::{LOGITS_TOLERANCE, argmax, max_abs_diff, read};

/// Encoder and projector outputs (magnitudes about 1, f32 throughout) against transformers': the
/// fixture's 6-digit rounding and f32 summation orders.
pub const FEATURE_TOLERANCE: f32 = 1e-4;

/// A tiny model's files.
pub struct VisionFixture {
    pub name: &'static str,
    config: &'static [u8],
    weights: &'static [u8],
    golden: &'static str,
}

macro_rules! vision_fixture {
    ($name:literal) => {
        VisionFixture {
            name: $name,
            config: include_bytes!(concat!("../fixtures/golden/", $name, "/config.json")),
            weights: include_bytes!(concat!("../fixtures/golden/", $name, "/model.safetensors")),
            golden: include_str!(concat!("../fixtures/golden/", $name, "/golden.json")),
        }
    };
}

pub fn fixtures() -> [VisionFixture; 3] {
    [
        vision_fixture!("smolvlm"),
        vision_fixture!("gemma3_vision"),
        vision_fixture!("llava"),
    ]
}

#[derive(Deserialize)]
pub struct VisionGolden {
    /// `[3, 64, 64]` flattened.
    pub pixel_values: Vec<f32>,
    /// `[n][D]` each.
    pub patch_embeddings: Vec<Vec<f32>>,
    pub vision_hidden: Vec<Vec<f32>>,
    /// LLaVA: the hidden state its projector reads (`vision_hidden` less the class token's row).
    #[serde(default)]
    pub selected_features: Option<Vec<Vec<f32>>>,
    /// `[T][h]`.
    pub image_features: Vec<Vec<f32>>,
    pub prompt_ids: Vec<u32>,
    /// `[prompt_len][V]`.
    pub logits: Vec<Vec<f32>>,
    pub greedy_ids: Vec<u32>,
    pub image_token_id: u32,
}

/// The model's two parts on `device`, and what transformers computed.
pub fn load(f: &VisionFixture, device: &Device) -> (Decoder, Vision, VisionGolden) {
    let config = ModelConfig::from_json(f.config).expect("config");
    let mut ckpt = Checkpoint::single(f.weights).expect("safetensors");
    let (decoder, vision) =
        kiln::model::vision::load(config, &mut ckpt, device).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    (
        decoder,
        vision,
        serde_json::from_str(f.golden).expect("golden.json"),
    )
}

/// Every check of the module docs on `device`; the largest differences `[patches, hidden, features,
/// logits]`.
pub async fn matches_transformers(f: &VisionFixture, device: &Device) -> [f32; 4] {
    let (decoder, vision, golden) = load(f, device);
    let tolerance = [FEATURE_TOLERANCE, LOGITS_TOLERANCE];
    check(f.name, &decoder, &vision, &golden, device, tolerance).await
}

/// A fixture as llama.cpp's converters write it: the language model's GGUF and the mmproj.
pub struct GgufPair {
    pub name: &'static str,
    lm: &'static [u8],
    mmproj: &'static [u8],
    /// Its index in [`fixtures`].
    fixture: usize,
    /// The largest differences from transformers allowed in the features and in the logits.
    tolerance: [f32; 2],
}

/// SmolVLM's (`make_gguf_smolvlm.py`, f32), Gemma 3's (`make_gguf_gemma3_vision.py`: f32 but the
/// projection, which the converter stores in f16 whatever it is asked: its rounding moved the features by
/// 2.1e-3 and the logits by 2.6e-3 on flex and wgpu, within 5e-3; the greedy tokens stay equal) and LLaVA's (`make_gguf_llava.py`: three
/// f16 tensors, whose fixture values are f16-exact).
pub const GGUF_PAIRS: [GgufPair; 3] = [
    GgufPair {
        name: "smolvlm",
        lm: include_bytes!("../fixtures/gguf/tiny-smolvlm.gguf"),
        mmproj: include_bytes!("../fixtures/gguf/tiny-smolvlm-mmproj.gguf"),
        fixture: 0,
        tolerance: [FEATURE_TOLERANCE, LOGITS_TOLERANCE],
    },
    GgufPair {
        name: "gemma3_vision",
        lm: include_bytes!("../fixtures/gguf/tiny-gemma3-vision.gguf"),
        mmproj: include_bytes!("../fixtures/gguf/tiny-gemma3-vision-mmproj.gguf"),
        fixture: 1,
        tolerance: [5e-3, 5e-3],
    },
    GgufPair {
        name: "llava",
        lm: include_bytes!("../fixtures/gguf/tiny-llava.gguf"),
        mmproj: include_bytes!("../fixtures/gguf/tiny-llava-mmproj.gguf"),
        fixture: 2,
        tolerance: [FEATURE_TOLERANCE, LOGITS_TOLERANCE],
    },
];

/// Pair `i` of [`GGUF_PAIRS`], loaded from its two files, against its fixture's golden: every check of
/// [`matches_transformers`] within the pair's tolerances.
pub async fn gguf_pair_matches_transformers(i: usize, device: &Device) -> [f32; 4] {
    let p = &GGUF_PAIRS[i];
    let lm = Gguf::parse(p.lm).expect("the LM GGUF");
    let mmproj = Gguf::parse(p.mmproj).expect("the mmproj");
    let (decoder, vision) = kiln::model::vision::gguf::load(&lm, &mmproj, device).expect("loads");
    let golden = serde_json::from_str(fixtures()[p.fixture].golden).expect("golden.json");
    let name = format!("{} (GGUF + mmproj)", p.name);
    check(&name, &decoder, &vision, &golden, device, p.tolerance).await
}

/// The checks of the module docs of one loaded model against `golden`.
async fn check(
    name: &str,
    decoder: &Decoder,
    vision: &Vision,
    golden: &VisionGolden,
    device: &Device,
    [feature_tolerance, logits_tolerance]: [f32; 2],
) -> [f32; 4] {
    let c = &vision.config;
    let side = c.image_size;
    let pixels = Tensor::<4>::from_data(
        TensorData::new(golden.pixel_values.clone(), [1, c.num_channels, side, side]),
        device,
    );
    let diff = |got: Vec<f32>, want: &[Vec<f32>], what: &str| {
        let want = want.concat();
        assert_eq!(got.len(), want.len(), "{name}: {what}: size");
        let d = max_abs_diff(&got, &want);
        assert!(
            d <= feature_tolerance,
            "{name}: {what}: max |kiln - transformers| = {d}"
        );
        d
    };
    let patches = diff(
        read(vision.encoder().embed(pixels.clone())).await,
        &golden.patch_embeddings,
        "patch embeddings",
    );
    let hidden = diff(
        read(vision.features(pixels.clone())).await,
        golden.selected_features.as_ref().unwrap_or(&golden.vision_hidden),
        "the encoder's features",
    );
    let rows = vision.encode(pixels).expect("encodes");
    let features = diff(read(rows.clone()).await, &golden.image_features, "image features");
    // The prompt: its `<image>` tokens, one run of them, replaced by the rows.
    let p = &golden.prompt_ids;
    let at: Vec<usize> = (0..p.len()).filter(|&i| p[i] == golden.image_token_id).collect();
    let tokens = c.tokens_per_image();
    assert_eq!((at.len(), c.image_token_id), (tokens, golden.image_token_id));
    let (start, end) = (at[0], at[0] + tokens);
    let rows = rows.squeeze_dim::<2>(0);
    let chunks = [
        Chunk::Ids(&p[..start]),
        Chunk::Rows {
            rows: &rows,
            attend: vision.attend(),
        },
        Chunk::Ids(&p[end..]),
    ];
    let n = golden.greedy_ids.len();
    let mut cache = decoder.new_cache(1, p.len() + n);
    let logits = read(decoder.prefill(&chunks, &mut cache, true).expect("prefill")).await;
    let want = golden.logits.concat();
    let logits_diff = max_abs_diff(&logits, &want);
    assert!(
        logits_diff <= logits_tolerance,
        "{name}: logits with the image: max |kiln - transformers| = {logits_diff}"
    );
    let vocab = decoder.config.vocab_size;
    let mut next = argmax(&logits[logits.len() - vocab..]);
    let mut greedy = vec![next];
    while greedy.len() < n {
        let step = decoder
            .forward(&[vec![next]], &mut cache, false)
            .expect("decode step");
        next = argmax(&read(step).await);
        greedy.push(next);
    }
    assert_eq!(
        greedy, golden.greedy_ids,
        "{name}: greedy continuation after the image"
    );
    [patches, hidden, features, logits_diff]
}
