//! A Hugging Face model directory (config.json + safetensors + tokenizer.json + tokenizer_config.json)
//! through the engine: the golden tiny Llama of `tests/fixtures/golden/` with a tokenizer of the same
//! vocabulary size, its greedy continuation through the full sampling path at temperature 0 equal to
//! transformers', and the end-of-generation ids gathered from every file that names them.
#![cfg(not(target_arch = "wasm32"))]

use burn::tensor::Device;
use kiln::api::validate::Sampling;
use kiln::engine::runtime::generation::{GenParams, Generation};
use kiln::engine::{HfFiles, LoadedModel};
use kiln::loader::Gguf;
use kiln::tokenizer::HfTokenizerFiles;
use kiln::tokenizer::gguf::tokenizer_from_gguf;
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
}

/// A real `tokenizer.json` of 512 tokens, committed beside the golden tiny Llama (the browser tests load
/// the directory by URL): the tiny GGUF fixture's tokenizer, serialised (checked below).
fn tokenizer_json() -> String {
    include_str!("fixtures/golden/llama/tokenizer.json").to_owned()
}

/// The committed `tokenizer.json` is the GGUF fixture's tokenizer serialised by the `tokenizers` crate.
/// `KILN_BLESS=1` rewrites it.
#[test]
fn committed_tokenizer_json_is_the_gguf_fixtures() {
    let g = Gguf::parse(include_bytes!("fixtures/gguf/tiny-llama.gguf")).unwrap();
    let json = tokenizer_from_gguf(&g)
        .unwrap()
        .tokenizer
        .to_string(true)
        .unwrap()
        + "\n";
    if std::env::var_os("KILN_BLESS").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/golden/llama/tokenizer.json"
        );
        std::fs::write(path, &json).unwrap();
    }
    assert_eq!(json, tokenizer_json(), "run with KILN_BLESS=1 to rewrite it");
}

#[test]
fn hf_files_load_and_greedy_equals_transformers() {
    let json = tokenizer_json();
    let tokenizer_config = include_bytes!("fixtures/golden/llama/tokenizer_config.json");
    let generation_config = br#"{"eos_token_id": [2, 0]}"#;
    let files = HfFiles {
        preprocessor: None,
        config: include_bytes!("fixtures/golden/llama/config.json"),
        weights: vec![(
            "model.safetensors".into(),
            include_bytes!("fixtures/golden/llama/model.safetensors").as_slice(),
        )],
        index: None,
        tokenizer: HfTokenizerFiles {
            tokenizer_json: json.as_bytes(),
            tokenizer_config: Some(tokenizer_config),
            generation_config: Some(generation_config),
            ..Default::default()
        },
    };
    let m = LoadedModel::from_hf("tiny", files.clone(), &Device::flex()).expect("loads");
    assert_eq!(
        m.tokenizer.stop_ids,
        [0, 2],
        "generation_config, config.json and eos_token"
    );
    assert_eq!(
        (m.tokenizer.bos_token.as_str(), m.tokenizer.eos_token.as_str()),
        ("<|im_start|>", "<|im_end|>")
    );
    let golden: Golden = serde_json::from_str(include_str!("fixtures/golden/llama/golden.json")).unwrap();

    // Without generation_config only config.json's EOS (2) ends a choice; the golden run never emits it.
    let m = LoadedModel::from_hf(
        "tiny",
        HfFiles {
            tokenizer: HfTokenizerFiles {
                generation_config: None,
                ..files.tokenizer
            },
            ..files
        },
        &Device::flex(),
    )
    .unwrap();
    assert_eq!(m.tokenizer.stop_ids, [2]);
    let params = GenParams {
        n: 1,
        max_new: golden.greedy_ids.len(),
        sampling: Sampling {
            temperature: 0.0,
            top_p: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        },
        stop: Vec::new(),
        logprobs: Some(0),
        prompt_logprobs: false,
        keep_special: false,
    };
    let mut generation = Generation::new(
        m.decoder.clone(),
        m.tokenizer.clone(),
        golden.prompt_ids.clone(),
        params,
        0,
    );
    let mut ids = Vec::new();
    while let Some(deltas) = pollster::block_on(generation.next()).expect("step") {
        ids.extend(deltas.iter().flat_map(|d| d.tokens.iter().map(|t| t.id)));
    }
    assert_eq!(ids, golden.greedy_ids);
    let (prompt, _) = m
        .tokenizer
        .chat_prompt(kiln::tokenizer::TemplateInputs {
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(prompt, "<user>hi", "the template of tokenizer_config.json");
}

/// A multimodal checkpoint (a `vision_config`) is refused naming that field, before any tensor is read.
#[test]
fn a_multimodal_checkpoint_is_refused_by_name() {
    let config = br#"{"architectures": ["Idefics3ForConditionalGeneration"], "image_token_id": 31,
        "text_config": {"model_type": "llama", "vocab_size": 32, "hidden_size": 64, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 4},
        "vision_config": {"model_type": "idefics3_vision", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 64, "patch_size": 16}}"#;
    let config = kiln::model::ModelConfig::from_json(config).expect("the config resolves");
    let e = kiln::model::Decoder::assemble(config, &mut kiln::model::Staged::new(), &Device::flex())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("vision_config") && e.contains("idefics3_vision"),
        "{e}"
    );
}
