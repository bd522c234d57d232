//! The context a load grants (`kiln::engine::runtime::context`, issue 42): the model's own by default, the
//! `contextLength` a load asks for, refused past the model's or past what the device can hold, capped by
//! default where the KV cache would outgrow the device's room; a request past the grant is the 400
//! `context_length_exceeded`, and a shorter grant (rope tables rebuilt for it) gives the same tokens.

#![cfg(not(target_arch = "wasm32"))]

use burn::tensor::Device;
use kiln::api::completion_request;
use kiln::engine::runtime::context::{Bound, GPU_DEFAULT_KV, Room, grant};
use kiln::engine::runtime::load::GgufLoader;
use kiln::engine::{EngineError, LoadedModel};

const TINY: &[u8] = include_bytes!("fixtures/gguf/tiny-llama.gguf");

fn load(device: &Device, context: Option<usize>) -> Result<LoadedModel, EngineError> {
    let mut loader = GgufLoader::new(device, |_, _| {}).with_context(context);
    loader.push(TINY)?;
    loader.finish("tiny")
}

fn gpu() -> Device {
    pollster::block_on(kiln::engine::runtime::device::gpu())
        .expect("a wgpu adapter (install mesa-vulkan-drivers)")
        .device
}

/// The greedy completion of a fixed prompt, as token ids.
fn greedy(model: &LoadedModel, max_tokens: usize) -> Result<Vec<String>, kiln::api::ApiError> {
    let req = completion_request(
        serde_json::json!({
            "model": "tiny", "prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0,
            "logit_bias": {"0": -100, "1": -100, "2": -100}, "logprobs": 0,
        }),
        &model.spec(),
    )?;
    let response = pollster::block_on(model.complete(req)?.collect())?;
    Ok(response.choices[0]
        .logprobs
        .as_ref()
        .map(|l| l.tokens.clone())
        .unwrap_or_default())
}

#[test]
fn a_load_grants_the_model_context_or_the_one_asked_for() {
    for device in [Device::flex(), gpu()] {
        let full = load(&device, None).expect("loads");
        let g = full.context();
        // The tiny model's 256 positions fit every device's room.
        assert_eq!(
            (g.length, g.model_length, g.bound),
            (256, 256, Bound::Model),
            "{g:?}"
        );
        assert_eq!(full.spec().context_length, 256);
        assert!(g.kv_bytes_per_position > 0);

        let short = load(&device, Some(24)).expect("a shorter context");
        let s = short.context();
        assert_eq!(
            (s.length, s.model_length, s.bound),
            (24, 256, Bound::Option),
            "{s:?}"
        );
        assert_eq!(short.spec().context_length, 24);
        assert_eq!(short.decoder.config.max_position_embeddings, 24);
        // The same greedy tokens within the shorter context (its rope tables are rebuilt for 24 positions).
        // (The prompt is 12 tokens.)
        let within = greedy(&short, 12).expect("fits");
        assert_eq!(within.len(), 12);
        assert_eq!(within, greedy(&full, 12).expect("fits"));
        // Past it: the 400 of any request past the context.
        let e = greedy(&short, 40).expect_err("past the granted context");
        assert_eq!((e.status(), e.code), (400, "context_length_exceeded"), "{e:?}");
        assert!(e.message.contains("maximum context length is 24 tokens"), "{e:?}");

        // More than the model's own, or none at all: refused, naming the option.
        for (n, says) in [
            (257, "more than the model's context length of 256"),
            (0, "at least 1"),
        ] {
            match load(&device, Some(n)) {
                Err(
                    e @ EngineError::LoadOption {
                        option: "contextLength",
                        ..
                    },
                ) => {
                    assert!(e.to_string().contains(says), "{e}")
                }
                other => panic!("contextLength {n}: {:?}", other.map(|m| m.context())),
            }
        }
    }
}

#[test]
fn the_default_is_capped_where_the_kv_cache_outgrows_the_device() {
    let gpu = gpu();
    // A model whose positions take 1 MiB of KV cache each, its widest layer's keys 4 KiB a position.
    let room = Room {
        per_position: 1 << 20,
        widest: 4 << 10,
        weights: 1 << 30,
    };
    let g = grant(&room, &gpu, 131_072, None, 128 << 20).expect("a default grant");
    assert_eq!(g.length as u64, GPU_DEFAULT_KV / (1 << 20), "{g:?}");
    assert_eq!(g.bound, Bound::Memory);
    // Asked for explicitly, more than the default budget is granted, up to a layer's keys in one binding.
    let binding = kiln::kernels::max_binding_bytes(&gpu).expect("a wgpu device");
    let most = (binding / (4 << 10)) as usize;
    let asked = most.min(131_072);
    let g = grant(&room, &gpu, 131_072, Some(asked), 128 << 20).expect("within the binding");
    assert_eq!((g.length, g.bound), (asked, Bound::Option));
    if most < 131_072 {
        let e = grant(&room, &gpu, 131_072, Some(most + 1), 128 << 20)
            .expect_err("a layer's keys past one binding")
            .to_string();
        assert!(
            e.contains("storage buffer binding") && e.contains("contextLength"),
            "{e}"
        );
    }
    // The CPU backend natively has no address-space limit: the model's own.
    let g = grant(&room, &Device::flex(), 131_072, None, 128 << 20).unwrap();
    assert_eq!((g.length, g.bound), (131_072, Bound::Model));
}
