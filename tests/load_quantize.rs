//! Load-time quantisation of a Hugging Face checkpoint (`LoadedModel::from_hf_quantized`, the `quantize` load
//! option): the golden tiny Llama (f32 safetensors, tied embeddings) quantized as it loads keeps its
//! matrices in GGML blocks (its weights take the quantized bytes), computes what the dequantised
//! quantized weights compute (the CPU kernels' stated tolerance), and moves the logits from the f32
//! model's by about what the type's precision implies. Row lengths that are not whole blocks fall back as
//! llama-quantize does; a NaN weight is an error naming the tensor.

use std::borrow::Cow;

use burn::tensor::Device;
use kiln::engine::{HfFiles, LoadedModel};
use kiln::loader::{Checkpoint, GgmlType, LoadError, Quantizing, RawTensor, Weights, quantize_type};
use kiln::model::{Decoder, ModelConfig};
use kiln::tokenizer::HfTokenizerFiles;

const CONFIG: &[u8] = include_bytes!("fixtures/golden/llama/config.json");
const WEIGHTS: &[u8] = include_bytes!("fixtures/golden/llama/model.safetensors");
const TOKENIZER: &str = include_str!("fixtures/golden/llama/tokenizer.json");
const GOLDEN: &str = include_str!("fixtures/golden/llama/golden.json");

/// As in `tests/gguf_files.rs`: the CPU kernels' 16-bit activations against an f32 matmul.
const CPU_TOLERANCE: f32 = 2e-3;

#[derive(serde::Deserialize)]
struct Golden {
    prompt_ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn files() -> HfFiles<'static> {
    HfFiles {
        preprocessor: None,
        config: CONFIG,
        weights: vec![("model.safetensors".into(), WEIGHTS)],
        index: None,
        tokenizer: HfTokenizerFiles {
            tokenizer_json: TOKENIZER.as_bytes(),
            ..Default::default()
        },
    }
}

fn logits(decoder: &Decoder, ids: &[u32]) -> Vec<f32> {
    let mut cache = decoder.new_cache(1, ids.len());
    decoder
        .forward(&[ids.to_vec()], &mut cache, true)
        .expect("forward")
        .into_data()
        .try_into_vec::<f32>()
        .expect("f32")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The quantized tensors widened back to f32: what the kernels must compute.
struct Dequantised<'w>(Quantizing<'w>);

impl Weights for Dequantised<'_> {
    fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }
    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let raw = self.0.take(name, expected)?;
        let values = raw.to_f32();
        Ok(RawTensor {
            ty: GgmlType::F32,
            shape: raw.shape,
            bytes: Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        })
    }
    fn leftover(&self) -> Option<String> {
        self.0.leftover()
    }
    fn total_bytes(&self) -> u64 {
        self.0.total_bytes()
    }
}

#[test]
fn quantized_as_it_loads_matches_the_dequantised_weights() {
    let device = Device::flex();
    let golden: Golden = serde_json::from_str(GOLDEN).unwrap();
    let f32_model = LoadedModel::from_hf("tiny", files(), &device).expect("f32 load");
    let f32_logits = logits(&f32_model.decoder, &golden.prompt_ids);
    assert!(
        max_diff(&f32_logits, &golden.logits.concat()) < 1e-3,
        "the f32 model is transformers'"
    );
    let dense_bytes = f32_model.decoder.device_bytes();
    // Rows here are 64 or 128 elements: the K-quants fall back (Q4_K → Q5_0, Q6_K → Q8_0).
    // (type, bytes per 32 weights of the type actually used)
    let mut moves = std::collections::BTreeMap::new();
    for (name, bytes_per_32) in [
        ("q8_0", 34),
        ("q4_0", 18),
        ("q5_1", 24),
        ("q4_k", 22),
        ("q6_k", 34),
        ("iq4_nl", 18),
    ] {
        let ty = quantize_type(name).unwrap();
        let model = LoadedModel::from_hf_quantized("tiny", files(), &device, Some(ty), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = logits(&model.decoder, &golden.prompt_ids);
        // What the quantized weights compute, through f32 matmuls.
        let config = ModelConfig::from_json(CONFIG).unwrap();
        let mut ckpt = Checkpoint::single(WEIGHTS).unwrap();
        let reference =
            Decoder::load(config, &mut Dequantised(Quantizing::new(&mut ckpt, ty)), &device).unwrap();
        let want = logits(&reference, &golden.prompt_ids);
        let kernel_diff = max_diff(&got, &want);
        let moved = max_diff(&got, &f32_logits);
        eprintln!("{name}: kernels vs dequantised {kernel_diff:e}, logits moved {moved:e} from f32");
        assert!(
            kernel_diff <= CPU_TOLERANCE,
            "{name}: kernels differ by {kernel_diff}"
        );
        assert!(
            moved > 1e-4,
            "{name}: the weights were quantized (logits moved {moved})"
        );
        moves.insert(name, moved);
        // Matrices held in blocks: 2 layers × (q,k,v,o: 4 × 64×64 ... ) — compare to the dense bytes by
        // the type's ratio, norms aside.
        let held = model.decoder.device_bytes();
        let ratio = held as f64 / dense_bytes as f64;
        let expected = bytes_per_32 as f64 / 128.0;
        assert!(
            (ratio - expected).abs() < 0.02,
            "{name}: weights take {held} bytes, {ratio:.3} of f32 (expected about {expected:.3})"
        );
    }
    // More bits move the logits less: 8-bit < 5-bit < 4-bit, and Q6_K falls back to exactly Q8_0 here.
    assert!(
        moves["q8_0"] < moves["q5_1"] && moves["q5_1"] < moves["q4_0"],
        "{moves:?}"
    );
    assert_eq!(moves["q6_k"], moves["q8_0"], "Q6_K on 64-element rows is Q8_0");
}

/// A checkpoint of one 2 × 32 matrix.
struct One(Vec<f32>);

impl Weights for One {
    fn contains(&self, name: &str) -> bool {
        name == "w.weight"
    }
    fn take(&mut self, _: &str, _: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        Ok(RawTensor {
            ty: GgmlType::F32,
            shape: vec![2, 32],
            bytes: Cow::Owned(self.0.iter().flat_map(|v| v.to_le_bytes()).collect()),
        })
    }
    fn leftover(&self) -> Option<String> {
        None
    }
    fn total_bytes(&self) -> u64 {
        256
    }
}

#[test]
fn a_nan_weight_is_an_error_naming_the_tensor() {
    let mut values = vec![0.5; 64];
    values[40] = f32::NAN;
    let mut one = One(values);
    let mut q = Quantizing::new(&mut one, GgmlType::Q8_0);
    let e = q.take("w.weight", &[2, 32]).unwrap_err().to_string();
    assert!(e.contains("w.weight") && e.contains("NaN"), "{e}");
}

#[test]
fn rows_that_are_not_whole_blocks_fall_back() {
    let mut one = One((0..64).map(|i| i as f32 / 64.0).collect());
    // 32-element rows: no K-quant block fits, so Q4_K falls back to Q5_0, Q6_K to Q8_0.
    for (ty, want) in [
        (GgmlType::Q4_K, GgmlType::Q5_0),
        (GgmlType::Q6_K, GgmlType::Q8_0),
        (GgmlType::Q8_0, GgmlType::Q8_0),
    ] {
        let mut q = Quantizing::new(&mut one, ty);
        let raw = q.take("w.weight", &[2, 32]).unwrap();
        assert_eq!(raw.ty, want, "{ty:?}");
        assert_eq!(raw.bytes.len(), 2 * want.row_bytes(32).unwrap());
    }
}
