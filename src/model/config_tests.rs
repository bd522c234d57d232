//! Config resolution: the rope forms of transformers 4 and 5, per-family features, windows and their bad
//! values.

use super::*;
use crate::model::layers::rope::RopeScaling;
use crate::model::vision::config::{Projector, VisionAct};

const BASE: &str = r#""vocab_size": 32, "hidden_size": 64, "intermediate_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 4"#;

fn parse(extra: &str) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_json(format!("{{{BASE}, {extra}}}").as_bytes())
}

fn with_layers(n: usize, extra: &str) -> Result<ModelConfig, ConfigError> {
    let base = BASE.replace(
        r#""num_hidden_layers": 1"#,
        &format!(r#""num_hidden_layers": {n}"#),
    );
    ModelConfig::from_json(format!("{{{base}, {extra}}}").as_bytes())
}

#[test]
fn transformers_4_and_5_rope_forms_resolve_alike() {
    let v4 = parse(
        r#""architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
        "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
    )
    .unwrap();
    let v5 = parse(
        r#""architectures": ["LlamaForCausalLM"], "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
        "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
    )
    .unwrap();
    assert_eq!(v4, v5);
    assert_eq!(v4.ropes[0].theta, 500000.0);
    assert!(matches!(v4.ropes[0].scaling, RopeScaling::Llama3(s) if s.factor == 32.0));
    let e = parse(r#""model_type": "llama", "rope_scaling": {"type": "yarn", "factor": 2.0}"#).unwrap_err();
    assert!(e.to_string().contains("yarn"), "{e}");
}

#[test]
fn defaults_and_architecture_features() {
    let q2 = parse(r#""architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 2"#).unwrap();
    assert_eq!(
        (q2.arch, q2.head_dim, q2.num_kv_heads, q2.qkv_bias, q2.qk_norm),
        (Arch::Qwen2, 16, 2, true, false)
    );
    assert_eq!((q2.ropes[0].theta, q2.tie_word_embeddings), (10_000.0, false));
    let q3 = parse(r#""model_type": "qwen3", "head_dim": 32"#).unwrap();
    assert_eq!(
        (q3.arch, q3.head_dim, q3.qk_norm, q3.num_kv_heads),
        (Arch::Qwen3, 32, true, 4)
    );
    let m = parse(
        r#""architectures": ["MistralForCausalLM"], "attention_bias": true, "sliding_window": 1024,
        "max_position_embeddings": 32768"#,
    )
    .unwrap();
    assert!(m.qkv_bias && m.arch == Arch::Mistral);
    assert_eq!(
        m.max_position_embeddings, 32768,
        "a window no longer bounds the context"
    );
    assert_eq!(m.layers[0].window, Some(1024));
    let q = parse(r#""model_type": "qwen2", "sliding_window": 1024, "use_sliding_window": false"#).unwrap();
    assert!(!q.has_window(), "a disabled window is none");
    let e = parse(r#""model_type": "llama", "num_key_value_heads": 3"#).unwrap_err();
    assert!(e.to_string().contains("num_key_value_heads"), "{e}");
}

#[test]
fn llama3_scaling_keeps_high_divides_low_and_smooths_between() {
    let c = parse(
        r#""model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}"#,
    )
    .unwrap();
    let mut plain = c.ropes[0].clone();
    plain.scaling = RopeScaling::None;
    let ratios: Vec<f64> = plain
        .inv_freq(false)
        .iter()
        .zip(c.ropes[0].inv_freq(false))
        .map(|(p, s)| p / s)
        .collect();
    assert!((ratios[0] - 1.0).abs() < 1e-12, "{ratios:?}");
    assert!(ratios[1] > 1.0 && ratios[1] < 8.0, "{ratios:?}");
    assert!(ratios[2..].iter().all(|r| (r - 8.0).abs() < 1e-9), "{ratios:?}");
}

#[test]
fn gemma3_interleaves_local_and_global_layers() {
    let c = with_layers(
        7,
        r#""model_type": "gemma3_text", "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 512,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "max_position_embeddings": 32768"#,
    )
    .unwrap();
    assert_eq!(c.arch, Arch::Gemma3);
    let windows: Vec<_> = c.layers.iter().map(|l| l.window).collect();
    assert_eq!(
        windows,
        [
            Some(512),
            Some(512),
            Some(512),
            Some(512),
            Some(512),
            None,
            Some(512)
        ]
    );
    let ropes: Vec<_> = c.layers.iter().map(|l| l.rope).collect();
    assert_eq!(
        ropes,
        [Some(1), Some(1), Some(1), Some(1), Some(1), Some(0), Some(1)]
    );
    assert_eq!((c.ropes[0].theta, c.ropes[1].theta), (1e6, 1e4));
    assert!((c.attn_scale - 1.0 / 24f64.sqrt()).abs() < 1e-12);
    assert_eq!(
        (c.act, c.qk_norm, c.tie_word_embeddings),
        (Act::GeluTanh, true, true)
    );
    assert_eq!(c.embed_scale, Some(8.0));
    assert_eq!(
        c.max_position_embeddings, 32768,
        "the window does not cap the context"
    );
    // transformers 5's per-layer-type rope parameters resolve alike.
    let v5 = with_layers(
        7,
        r#""model_type": "gemma3_text", "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 512,
        "max_position_embeddings": 32768, "rope_parameters": {"full_attention": {"rope_type": "default",
        "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}"#,
    )
    .unwrap();
    assert_eq!(v5, c);
}

#[test]
fn gemma2_caps_and_phi3_longrope_and_smollm3_nope() {
    let g = with_layers(
        4,
        r#""model_type": "gemma2", "head_dim": 16, "sliding_window": 8"#,
    )
    .unwrap();
    assert_eq!((g.attn_softcap, g.final_softcap), (Some(50.0), Some(30.0)));
    let windows: Vec<_> = g.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    let p = parse(
        r#""model_type": "phi3", "partial_rotary_factor": 0.75, "max_position_embeddings": 512,
        "original_max_position_embeddings": 128, "rope_scaling": {"type": "longrope",
        "short_factor": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5], "long_factor": [2.0, 2.0, 2.0, 4.0, 4.0, 4.0]}"#,
    )
    .unwrap();
    let rope = &p.ropes[0];
    assert_eq!((rope.rotary_dim, p.fused_qkv, p.fused_gate_up), (12, true, true));
    let expected = (1.0 + 4f64.ln() / 128f64.ln()).sqrt();
    assert!((rope.attention_factor() - expected).abs() < 1e-12);
    assert!(!rope.long(128) && rope.long(129));
    let (short, long) = (rope.inv_freq(false), rope.inv_freq(true));
    assert!((short[1] * 1.5 - long[1] * 2.0).abs() < 1e-12);
    let e = parse(
        r#""model_type": "phi3", "original_max_position_embeddings": 128, "rope_scaling": {"type": "longrope",
        "short_factor": [1.0], "long_factor": [1.0]}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("short_factor"), "{e}");
    let e = parse(r#""model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1.0]}"#)
        .unwrap_err();
    assert!(e.to_string().contains("original_max_position_embeddings"), "{e}");
    let s = with_layers(8, r#""model_type": "smollm3""#).unwrap();
    let ropes: Vec<_> = s.layers.iter().map(|l| l.rope.is_some()).collect();
    assert_eq!(ropes, [true, true, true, false, true, true, true, false]);
    let s = with_layers(2, r#""model_type": "smollm3", "no_rope_layers": [0, 1]"#).unwrap();
    assert_eq!((s.layers[0].rope, s.layers[1].rope), (None, Some(0)));
    let e = with_layers(2, r#""model_type": "smollm3", "no_rope_layers": [1]"#).unwrap_err();
    assert!(e.to_string().contains("no_rope_layers"), "{e}");
}

#[test]
fn bad_values_name_their_field_and_unknown_families_list_the_known() {
    let e = with_layers(
        2,
        r#""model_type": "gemma2", "head_dim": 16, "sliding_window": 0"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("sliding_window"), "{e}");
    let e = with_layers(
        2,
        r#""model_type": "gemma3_text", "layer_types": ["full_attention"]"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("layer_types"), "{e}");
    let e = parse(r#""model_type": "gemma3_text", "hidden_activation": "relu""#).unwrap_err();
    assert!(e.to_string().contains("hidden_activation"), "{e}");
    let e = parse(r#""model_type": "gpt_neox""#).unwrap_err();
    for family in [
        "LlamaForCausalLM",
        "Gemma3ForCausalLM",
        "Phi3ForCausalLM",
        "SmolLM3ForCausalLM",
    ] {
        assert!(e.to_string().contains(family), "{e}");
    }
}

/// A multimodal config (Gemma 3 4B's layout: the language model under `text_config`, the SigLIP tower
/// under `vision_config`) resolves its language model exactly as the same fields given flat, and its
/// vision encoder with SigLIP's defaults.
#[test]
fn nested_text_and_vision_configs_resolve() {
    let text = r#""model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024, "query_pre_attn_scalar": 256,
        "rope_theta": 1000000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "max_position_embeddings": 131072"#;
    let vision = r#"{"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
        "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 896, "patch_size": 14}"#;
    let nested = format!(
        r#"{{"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "mm_tokens_per_image": 256, "text_config": {{{text}}}, "vision_config": {vision}}}"#
    );
    let nested = ModelConfig::from_json(nested.as_bytes()).unwrap();
    let flat = ModelConfig::from_json(format!("{{{text}}}").as_bytes()).unwrap();
    assert_eq!(nested.arch, Arch::Gemma3);
    let v = nested.vision.clone().unwrap();
    assert_eq!(
        (
            v.hidden_size,
            v.num_layers,
            v.num_heads,
            v.num_channels,
            v.patches_per_side()
        ),
        (1152, 27, 16, 3, 64)
    );
    assert_eq!(
        (v.layer_norm_eps, v.model_type.as_deref()),
        (1e-6, Some("siglip_vision_model"))
    );
    assert_eq!(
        ModelConfig {
            vision: None,
            ..nested
        },
        flat
    );
    assert!(flat.vision.is_none());

    // Idefics3 (SmolVLM): a Llama language model; `tie_word_embeddings` said at the top level.
    let smolvlm = format!(
        r#"{{"architectures": ["Idefics3ForConditionalGeneration"], "tie_word_embeddings": true,
        "image_token_id": 30, "text_config": {{"model_type": "llama", {BASE}}},
        "vision_config": {{"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "image_size": 512, "patch_size": 16}}}}"#
    );
    let s = ModelConfig::from_json(smolvlm.as_bytes()).unwrap();
    assert_eq!(
        (s.arch, s.tie_word_embeddings, s.hidden_size),
        (Arch::Llama, true, 64)
    );
    let sv = s.vision.unwrap();
    assert_eq!(sv.patches_per_side(), 32);
    assert_eq!(
        (sv.projector, sv.tokens_per_image(), sv.image_token_id),
        (Projector::PixelShuffle { scale_factor: 2 }, 256, 30)
    );
    assert_eq!(
        (v.projector, v.tokens_per_image(), v.image_token_id),
        (
            Projector::AvgPool {
                tokens_per_image: 256
            },
            256,
            262_144
        ),
        "Gemma 3's defaults"
    );
    let bad = smolvlm.replace(r#""image_token_id": 30"#, r#""image_token_id": 32"#);
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(
        e.to_string().contains("image_token_id") && e.to_string().contains("32"),
        "{e}"
    );
    let bad = smolvlm.replace(
        r#""patch_size": 16"#,
        r#""patch_size": 16, "hidden_act": "gelu_new""#,
    );
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("vision_config.hidden_act"), "{e}");
    let bad = smolvlm.replace(
        r#""tie_word_embeddings": true,"#,
        r#""tie_word_embeddings": true, "scale_factor": 3,"#,
    );
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("scale_factor"), "{e}");

    // Errors name the nested field.
    let bad = smolvlm.replace(r#""patch_size": 16"#, r#""patch_size": 15"#);
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("vision_config.patch_size"), "{e}");
    let bad = smolvlm.replace(r#""num_attention_heads": 12"#, r#""num_attention_heads": 0"#);
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("vision_config.num_attention_heads"), "{e}");
    let bad = smolvlm.replace(r#""model_type": "llama", "#, "");
    let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
    assert!(
        e.to_string().contains("Idefics3ForConditionalGeneration") && e.to_string().contains("text_config"),
        "{e}"
    );
}

/// LLaVA's top-level fields: the feature layer counted from the end of the `layers + 1` hidden states,
/// the class row dropped (`default`) or kept (`full`); lists of layers, other strategies and activations
/// are errors naming the field.
#[test]
fn llava_projector_fields_resolve() {
    let llava = include_str!("../../tests/fixtures/golden/llava/config.json");
    let v = ModelConfig::from_json(llava.as_bytes()).unwrap().vision.unwrap();
    assert_eq!(
        (v.projector, v.clip, v.act, v.tokens_per_image(), v.image_token_id),
        (
            Projector::Mlp {
                layer: 2,
                keep_class: false,
                bias: true
            },
            true,
            VisionAct::QuickGelu,
            16,
            500
        )
    );
    let full = llava
        .replace(
            r#""vision_feature_select_strategy": "default""#,
            r#""vision_feature_select_strategy": "full""#,
        )
        .replace(r#""vision_feature_layer": -2"#, r#""vision_feature_layer": 0"#);
    let v = ModelConfig::from_json(full.as_bytes()).unwrap().vision.unwrap();
    assert_eq!(
        (v.projector, v.tokens_per_image()),
        (
            Projector::Mlp {
                layer: 0,
                keep_class: true,
                bias: true
            },
            17
        )
    );
    for (from, to, field) in [
        (
            r#""vision_feature_layer": -2"#,
            r#""vision_feature_layer": [-2, -5]"#,
            "vision_feature_layer",
        ),
        (
            r#""vision_feature_layer": -2"#,
            r#""vision_feature_layer": -5"#,
            "vision_feature_layer",
        ),
        (
            r#""vision_feature_layer": -2"#,
            r#""vision_feature_layer": 4"#,
            "vision_feature_layer",
        ),
        (
            r#""vision_feature_select_strategy": "default""#,
            r#""vision_feature_select_strategy": "cls""#,
            "vision_feature_select_strategy",
        ),
        (
            r#""projector_hidden_act": "gelu""#,
            r#""projector_hidden_act": "relu""#,
            "projector_hidden_act",
        ),
    ] {
        let bad = llava.replace(from, to);
        assert_ne!(bad, llava, "{to}");
        let e = ModelConfig::from_json(bad.as_bytes()).unwrap_err();
        assert!(e.to_string().contains(field), "{to}: {e}");
    }
}
