//! The decoder on burn's CPU backend against transformers' golden outputs (greedy tokens also on native
//! wgpu), and loading errors.
#![cfg(not(target_arch = "wasm32"))]

mod golden;

use burn::tensor::Device;
use golden::{cache_equals_recompute, fixtures, greedy_matches, logits_match, reused_prefix_greedy_matches};
use kiln::loader::{Checkpoint, LoadError};
use kiln::model::{Decoder, ModelConfig};

#[test]
fn logits_match_transformers() {
    for f in fixtures() {
        let diff = pollster::block_on(logits_match(&f, &Device::flex()));
        eprintln!("{}: max |logit - golden| = {diff:e}", f.name);
    }
}

#[test]
fn longrope_long_prompt_logits_match_transformers() {
    let mut checked = 0;
    for f in fixtures() {
        if let Some(diff) = pollster::block_on(golden::long_logits_match(&f, &Device::flex())) {
            eprintln!("{}: long prompt: max |logit - golden| = {diff:e}", f.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 2, "phi3 and phi4 carry long prompts");
}

#[test]
fn greedy_64_tokens_match_transformers() {
    for f in fixtures() {
        pollster::block_on(greedy_matches(&f, &Device::flex()));
    }
}

/// The same 64 greedy tokens on native wgpu with the device's optional kernel paths (`kernels::gpu::caps`:
/// on lavapipe f16 decode activations and KV cache, and subgroup sums), through the fused decode step
/// where the family has one: f16 rounding changes no greedy token of any golden model.
#[test]
fn greedy_64_tokens_match_transformers_on_wgpu_with_its_features() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    eprintln!("features: {:?}", gpu.info.features);
    for f in fixtures() {
        pollster::block_on(greedy_matches(&f, &gpu.device));
    }
}

#[test]
fn kv_cache_equals_recompute_for_32_steps() {
    for f in fixtures() {
        pollster::block_on(cache_equals_recompute(&f, &Device::flex(), 32));
    }
}

/// The 2026 families (logits, greedy tokens and long prompts in `families_2026.rs`): each cached step
/// equals a recompute, and greedy decoding after a kept prefix (a recurrent model's: its snapshot) equals
/// transformers'.
#[test]
fn the_2026_families_cache_and_reuse_prefixes() {
    for f in golden::fixtures_2026() {
        for device in [
            Device::flex(),
            pollster::block_on(kiln::engine::runtime::device::gpu())
                .expect("wgpu")
                .device,
        ] {
            pollster::block_on(golden::cache_equals_recompute(&f, &device, 16));
            pollster::block_on(golden::reused_prefix_greedy_matches(&f, &device, 16));
        }
    }
}

#[test]
fn greedy_after_a_reused_prefix_matches_transformers() {
    for f in fixtures() {
        pollster::block_on(reused_prefix_greedy_matches(&f, &Device::flex(), 64));
    }
}

fn load(config: &[u8], weights: &[u8]) -> Result<Decoder, String> {
    golden::load_result(config, weights, &Device::flex())
}

#[test]
fn loading_errors_name_what_is_wrong() {
    golden::loading_errors(&Device::flex());
}

/// Writes a safetensors file holding `tensors` (name → raw bytes, dtype, shape).
fn write_safetensors(tensors: &[(String, &[u8], String, Vec<usize>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, bytes, dtype, shape) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    out
}

/// The tensors of a fixture's checkpoint as (name, bytes, dtype, shape).
fn tensors_of(weights: &[u8]) -> Vec<(String, &[u8], String, Vec<usize>)> {
    let len = u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
    let parsed = kiln::loader::Safetensors::parse("model.safetensors", weights).unwrap();
    let data = &weights[8 + len..];
    parsed
        .tensors
        .iter()
        .map(|(name, t)| {
            (
                name.clone(),
                &data[t.start..t.end],
                t.dtype.clone(),
                t.shape.clone(),
            )
        })
        .collect()
}

#[test]
fn sharded_checkpoint_loads_like_the_single_file() {
    let f = &fixtures()[2];
    let tensors = tensors_of(f.weights);
    let (first, second) = tensors.split_at(tensors.len() / 2);
    let shards = [write_safetensors(first), write_safetensors(second)];
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let weight_map: serde_json::Map<_, _> = [(first, names[0]), (second, names[1])]
        .iter()
        .flat_map(|(part, file)| part.iter().map(move |t| (t.0.clone(), serde_json::json!(file))))
        .collect();
    let index = serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": weight_map})).unwrap();
    let given = || {
        names
            .iter()
            .zip(&shards)
            .map(|(n, b)| (n.to_string(), b.as_slice()))
            .collect::<Vec<_>>()
    };

    let config = ModelConfig::from_json(f.config).unwrap();
    let mut ckpt = Checkpoint::shards(Some(&index), given()).unwrap();
    let sharded = Decoder::load(config.clone(), &mut ckpt, &Device::flex()).unwrap();
    let (single, golden) = golden::load(f, &Device::flex());
    let run = |d: &Decoder| {
        let mut cache = d.new_cache(1, golden.prompt_ids.len());
        let t = d
            .forward(std::slice::from_ref(&golden.prompt_ids), &mut cache, false)
            .unwrap();
        pollster::block_on(t.into_data_async())
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap()
    };
    assert_eq!(run(&sharded), run(&single));

    // The index naming a shard that was not given.
    let e = Checkpoint::shards(Some(&index), given()[..1].to_vec())
        .err()
        .expect("missing shard");
    assert!(matches!(e, LoadError::Shard { .. }), "{e}");
    assert!(e.to_string().contains(names[1]), "{e}");
}

#[test]
fn batched_prefill_matches_single_rows() {
    let f = &fixtures()[1];
    let (decoder, golden) = golden::load(f, &Device::flex());
    let prompt = golden.prompt_ids.clone();
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let read = |t: burn::tensor::Tensor<3>| {
        pollster::block_on(t.into_data_async())
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap()
    };
    let one = |row: &Vec<u32>| {
        let mut cache = decoder.new_cache(1, row.len() + 1);
        let first = read(
            decoder
                .forward(std::slice::from_ref(row), &mut cache, false)
                .unwrap(),
        );
        (
            first,
            read(decoder.forward(&[vec![7]], &mut cache, false).unwrap()),
        )
    };
    let mut cache = decoder.new_cache(2, prompt.len() + 1);
    let both = read(
        decoder
            .forward(&[prompt.clone(), other.clone()], &mut cache, false)
            .unwrap(),
    );
    let step = read(decoder.forward(&[vec![7], vec![7]], &mut cache, false).unwrap());
    let close = |a: &[f32], b: &[f32]| golden::max_abs_diff(a, b) <= 1e-4;
    let v = decoder.config.vocab_size;
    let (p0, s0) = one(&prompt);
    let (p1, s1) = one(&other);
    assert!(
        close(&both[..v], &p0) && close(&both[v..], &p1),
        "prefill rows differ"
    );
    assert!(
        close(&step[..v], &s0) && close(&step[v..], &s1),
        "decode-step rows differ"
    );
    assert!(
        !close(&p0, &p1),
        "the two prompts must give different logits for this test to mean anything"
    );
}

#[test]
fn extra_tensor_is_an_error() {
    let f = &fixtures()[0];
    let mut tensors = tensors_of(f.weights);
    let stray = [0u8; 8];
    tensors.push((
        "model.layers.9.mlp.gate_proj.weight".into(),
        &stray,
        "F32".into(),
        vec![2],
    ));
    let e = load(f.config, &write_safetensors(&tensors)).unwrap_err();
    assert!(
        e.contains("`model.layers.9.mlp.gate_proj.weight` is not part of this model"),
        "{e}"
    );
}

/// A prompt of mixed chunks (ids and embedding rows of ids) gives exactly the logits and cache of the same
/// prompt as ids, on the CPU backend and on native wgpu (the generic prefill path; the fused step after).
#[test]
fn mixed_chunks_equal_ids_on_flex_and_wgpu() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for f in fixtures() {
        pollster::block_on(golden::mixed_chunks_equal_ids(&f, &Device::flex()));
        pollster::block_on(golden::mixed_chunks_equal_ids(&f, &gpu.device));
    }
}

/// A bidirectional span (positions 3..9) through every family: the CPU kernel's index ranges and the
/// generic path's additive mask (wgpu) agree within the golden tolerance, one prefill equals the span run
/// after a cached prefix, positions before the span keep their causal logits, and the span's positions
/// do not (the mask is applied: every golden model's logits move by more than 1e-2 there). Gemma 3's
/// (a span of 6 across sliding layers of window 5) is transformers' own image-token mask within the
/// golden tolerance, on both.
#[test]
fn a_bidirectional_span_is_the_same_mask_on_every_path() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for f in fixtures() {
        let v = ModelConfig::from_json(f.config).expect("config").vocab_size;
        let (flex, flex_two) = pollster::block_on(golden::bidirectional_logits(&f, &Device::flex()));
        let (wgpu, wgpu_two) = pollster::block_on(golden::bidirectional_logits(&f, &gpu.device));
        let causal = pollster::block_on(golden::causal_logits(&f, &Device::flex()));
        let d = golden::max_abs_diff;
        eprintln!(
            "{}: flex vs wgpu {:e}, one vs two prefills {:e} / {:e}, span vs causal {:e}",
            f.name,
            d(&flex, &wgpu),
            d(&flex, &flex_two),
            d(&wgpu, &wgpu_two),
            d(&flex[3 * v..9 * v], &causal[3 * v..9 * v])
        );
        assert!(
            d(&flex, &wgpu) <= golden::LOGITS_TOLERANCE,
            "{}: flex vs wgpu",
            f.name
        );
        assert!(d(&flex, &flex_two) <= 1e-4, "{}: flex, after a prefix", f.name);
        assert!(d(&wgpu, &wgpu_two) <= 1e-4, "{}: wgpu, after a prefix", f.name);
        golden::span_moves_only_its_positions(f.name, &flex, &causal, v);
        for (on, logits) in [("flex", &flex), ("wgpu", &wgpu)] {
            if let Some(diff) = golden::span_matches_transformers(&f, logits) {
                eprintln!(
                    "{}: a bidirectional span on {on} vs transformers {diff:e}",
                    f.name
                );
            }
        }
    }
}

/// Chunks the decoder cannot run are errors naming what is wrong, not panics.
#[test]
fn bad_chunks_are_refused() {
    use kiln::model::{Attend, Chunk, ForwardError};
    let f = &fixtures()[0];
    let (decoder, golden) = golden::load(f, &Device::flex());
    let h = decoder.config.hidden_size;
    let narrow = burn::tensor::Tensor::<2>::zeros([2, h + 1], &Device::flex());
    let mut cache = decoder.new_cache(1, 16);
    let e = decoder
        .prefill(
            &[
                Chunk::Ids(&golden.prompt_ids[..2]),
                Chunk::Rows {
                    rows: &narrow,
                    attend: Attend::Causal,
                },
            ],
            &mut cache,
            false,
        )
        .expect_err("rows of another width");
    assert_eq!(
        e,
        ForwardError::Rows {
            got: vec![2, h + 1],
            hidden: h
        }
    );
    assert!(e.to_string().contains(&format!("[n, {h}]")), "{e}");
    let rows = decoder.embeddings(&golden.prompt_ids[..4]).expect("rows");
    let e = decoder
        .prefill(
            &[Chunk::Rows {
                rows: &rows,
                attend: Attend::Bidirectional,
            }],
            &mut decoder.new_cache(1, 3),
            false,
        )
        .expect_err("past the cache");
    assert_eq!(
        e,
        ForwardError::CacheFull {
            capacity: 3,
            needed: 4
        }
    );
    assert_eq!(cache.len, 0, "a refused prefill appends nothing");
    let e = decoder
        .embeddings(&[u32::MAX])
        .expect_err("not in the vocabulary");
    assert!(matches!(e, ForwardError::Token { .. }), "{e}");
}

/// The vision parts of SmolVLM (SigLIP tower, pixel shuffle, projection), Gemma 3 (SigLIP tower,
/// pooling, soft-embedding norm, projection; bidirectional image rows) and LLaVA (CLIP tower read at its
/// second to last layer, two-layer MLP) and their language models with the image's rows in the prompt
/// against transformers, on the CPU backend and on native wgpu (`golden::vision`).
#[test]
fn vision_parts_match_transformers_on_flex_and_wgpu() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for f in golden::vision::fixtures() {
        for (on, device) in [("flex", Device::flex()), ("wgpu", gpu.device.clone())] {
            let [patches, hidden, features, logits] =
                pollster::block_on(golden::vision::matches_transformers(&f, &device));
            eprintln!(
                "{} on {on}: patches {patches:e}, encoder {hidden:e}, features {features:e}, logits {logits:e}",
                f.name
            );
        }
    }
}

/// SmolVLM, Gemma 3 and LLaVA from llama.cpp's two files (the language model's GGUF and an idefics3,
/// gemma3 or mlp mmproj) give the same features, logits (within each pair's tolerance) and greedy tokens
/// as transformers, on the CPU backend and on native wgpu.
#[test]
fn vlms_from_gguf_and_mmproj_match_transformers() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for (i, golden::vision::GgufPair { name, .. }) in golden::vision::GGUF_PAIRS.iter().enumerate() {
        for (on, device) in [("flex", Device::flex()), ("wgpu", gpu.device.clone())] {
            let [patches, hidden, features, logits] =
                pollster::block_on(golden::vision::gguf_pair_matches_transformers(i, &device));
            eprintln!(
                "{name} GGUF + mmproj on {on}: patches {patches:e}, encoder {hidden:e}, features {features:e}, logits {logits:e}"
            );
        }
    }
}
