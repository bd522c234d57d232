//! In headless Chromium: the device self-check and the golden decoder tests, on WebGPU and on burn's CPU
//! backend compiled to wasm32, and the default model (SmolLM2 GGUF, fetched over HTTP from the data cache
//! that `cargo xtask test` serves at `KILN_DATA_URL`) answering a question on WebGPU.
//! Run by `wasm-pack test --headless --chrome` (see `cargo xtask test`).
#![cfg(target_arch = "wasm32")]

use kiln::engine::runtime::check::check_device;
use kiln::engine::runtime::device::{self, DeviceKind};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn webgpu_matches_the_host() {
    let gpu = device::gpu()
        .await
        .expect("a WebGPU adapter (chromium --enable-unsafe-webgpu)");
    console_log!("WebGPU adapter: {:?}", gpu.info);
    assert_eq!(gpu.info.kind, DeviceKind::Gpu);
    assert_eq!(gpu.info.backend, "BrowserWebGpu");
    let report = check_device(&gpu.device).await.expect("check runs");
    console_log!("WebGPU check: {report:?}");
    assert!(report.passed, "{report:?}");
}

#[wasm_bindgen_test]
async fn cpu_backend_in_wasm_matches_the_host() {
    let (device, _) = device::cpu();
    let report = check_device(&device).await.expect("check runs");
    console_log!("CPU (flex, wasm32) check: {report:?}");
    assert!(report.passed, "{report:?}");
}

mod golden;

/// The sampling kernels on WebGPU (`kernels::gpu::select`; natively in `tests/kernels_gpu/select.rs`):
/// top-k of odd row lengths (one to three levels, ties among the values) equal to the host's, bit for bit,
/// after a bias applied on the device.
#[wasm_bindgen_test]
async fn selection_kernels_match_the_host_on_webgpu() {
    use burn::tensor::{Tensor, TensorData};
    use kiln::kernels::gpu::select::{self, Adjust};
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    for (b, v, k) in [(1, 1000, 64), (2, 4097, 17), (1, 49_159, 64)] {
        let mut host: Vec<f32> = (0..b * v)
            .map(|i| ((i * 7919 % 257) as f32 / 16.0).round())
            .collect();
        let x = Tensor::<2>::from_data(TensorData::new(host.clone(), [b, v]), &gpu.device);
        let bias = Adjust {
            row: 0,
            id: (v - 1) as u32,
            add: 100.0,
            sub: 0.5,
        };
        select::adjust(&x, &[bias]);
        host[v - 1] = (host[v - 1] + 100.0) - 0.5;
        let top = select::top_k(x, k, 1.0)
            .top
            .into_data_async()
            .await
            .expect("read");
        let top = top.try_into_vec::<f32>().expect("f32");
        for r in 0..b {
            let got: Vec<(u32, f32)> = top[r * 2 * k..(r + 1) * 2 * k]
                .chunks_exact(2)
                .map(|p| (p[1] as u32, p[0]))
                .collect();
            assert_eq!(
                got,
                kiln::sampling::top_k(&host[r * v..(r + 1) * v], k),
                "b {b}, v {v}, row {r}"
            );
        }
    }
}

#[wasm_bindgen_test]
async fn golden_models_on_webgpu() {
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    golden::loading_errors(&gpu.device);
    for (i, f) in golden::fixtures().iter().enumerate() {
        let diff = golden::logits_match(f, &gpu.device).await;
        console_log!("WebGPU {}: max |logit - golden| = {diff:e}", f.name);
        golden::greedy_matches(f, &gpu.device).await;
        // 8 tokens after the reused prefix: the golden greedy run above already covers 64 decode steps.
        golden::reused_prefix_greedy_matches(f, &gpu.device, 8).await;
        if let Some(diff) = golden::long_logits_match(f, &gpu.device).await {
            console_log!("WebGPU {}: long prompt: max |logit - golden| = {diff:e}", f.name);
        }
        // The recompute check (32 full forwards) on the first three; SwiftShader is slow, and the greedy
        // run already crosses each family's windows on the cached path.
        if i < 3 {
            golden::cache_equals_recompute(f, &gpu.device, 32).await;
        }
    }
}

/// The 2026 families (LFM2's convolutions, Qwen3.5's delta rule in its chunked and recurrent forms,
/// Gemma 4's per-layer embeddings and shared keys and values) on WebGPU and on the CPU backend in wasm32:
/// the prompt's logits, 64 greedy tokens, the 152-token prompt's last logits, greedy decoding after a
/// kept prefix.
#[wasm_bindgen_test]
async fn golden_2026_families_on_webgpu_and_cpu() {
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    let (cpu, _) = device::cpu();
    for f in golden::fixtures_2026() {
        for (on, device) in [("WebGPU", &gpu.device), ("CPU", &cpu)] {
            let diff = golden::logits_match(&f, device).await;
            let long = golden::long_logits_match(&f, device)
                .await
                .expect("a long prompt");
            console_log!(
                "{} on {on}: max |logit - golden| {diff:e}, long prompt {long:e}",
                f.name
            );
            golden::greedy_matches(&f, device).await;
            golden::reused_prefix_greedy_matches(&f, device, 8).await;
        }
    }
}

#[wasm_bindgen_test]
async fn golden_models_on_cpu_in_wasm() {
    let (device, _) = device::cpu();
    for f in golden::fixtures() {
        golden::logits_match(&f, &device).await;
        golden::greedy_matches(&f, &device).await;
        golden::long_logits_match(&f, &device).await;
    }
}

/// The vision parts of SmolVLM, Gemma 3 and LLaVA and their language models with the image's rows
/// against transformers, in Chromium on WebGPU and on the CPU backend in wasm32 (`golden::vision`);
/// each also from llama.cpp's GGUF and mmproj.
#[wasm_bindgen_test]
async fn vision_parts_on_webgpu_and_cpu() {
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    let (cpu, _) = device::cpu();
    for f in golden::vision::fixtures() {
        for (on, device) in [("WebGPU", &gpu.device), ("CPU", &cpu)] {
            let [patches, hidden, features, logits] = golden::vision::matches_transformers(&f, device).await;
            console_log!(
                "{} on {on}: patches {patches:e}, encoder {hidden:e}, features {features:e}, logits {logits:e}",
                f.name
            );
        }
    }
    for (i, golden::vision::GgufPair { name, .. }) in golden::vision::GGUF_PAIRS.iter().enumerate() {
        for (on, device) in [("WebGPU", &gpu.device), ("CPU", &cpu)] {
            let [_, _, features, logits] = golden::vision::gguf_pair_matches_transformers(i, device).await;
            console_log!("{name} GGUF + mmproj on {on}: features {features:e}, logits {logits:e}");
        }
    }
}

/// Prompt chunks in Chromium on WebGPU and on the CPU backend in wasm32: ids mixed with embedding rows
/// equal the same prompt as ids bit for bit, and a bidirectional span gives the same logits on both
/// devices within the golden tolerance (Llama; Gemma 3, whose window of 5 the span crosses: there also
/// transformers' own image-token mask's logits).
#[wasm_bindgen_test]
async fn prompt_chunks_on_webgpu_and_cpu() {
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    let (cpu, _) = device::cpu();
    for f in golden::fixtures()
        .iter()
        .filter(|f| ["llama", "gemma3"].contains(&f.name))
    {
        golden::mixed_chunks_equal_ids(f, &gpu.device).await;
        golden::mixed_chunks_equal_ids(f, &cpu).await;
        let (on_gpu, _) = golden::bidirectional_logits(f, &gpu.device).await;
        let (on_cpu, _) = golden::bidirectional_logits(f, &cpu).await;
        let diff = golden::max_abs_diff(&on_gpu, &on_cpu);
        console_log!("{}: a bidirectional span, WebGPU vs CPU: {diff:e}", f.name);
        assert!(
            diff <= golden::LOGITS_TOLERANCE,
            "{}: WebGPU vs CPU {diff}",
            f.name
        );
        let causal = golden::causal_logits(f, &gpu.device).await;
        golden::span_moves_only_its_positions(f.name, &on_gpu, &causal, causal.len() / 12);
        for (on, logits) in [("WebGPU", &on_gpu), ("CPU", &on_cpu)] {
            if let Some(diff) = golden::span_matches_transformers(f, logits) {
                console_log!(
                    "{}: a bidirectional span on {on} vs transformers {diff:e}",
                    f.name
                );
            }
        }
    }
}

mod real;

mod quant_kernels;

/// kiln's quantized matmul (GEMV and tiled) and embedding gather per GGML type on WebGPU (SwiftShader: no
/// `shader-f16`, no subgroups) and on the CPU backend in wasm32, against the reference dequantisation. 16-bit
/// float weights stay 16-bit on the GPU only (the CPU backend widens them and runs burn's f32 gemm).
#[wasm_bindgen_test]
async fn quantized_kernels_match_the_reference() {
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    let (cpu, _) = device::cpu();
    for ty in quant_kernels::TYPES {
        let on_gpu = quant_kernels::check(ty, &gpu.device).await;
        console_log!("{ty:?}: worst relative error on WebGPU {on_gpu:e}");
        if ty.is_quantized() {
            let on_cpu = quant_kernels::check(ty, &cpu).await;
            console_log!("{ty:?}: worst relative error on the CPU backend {on_cpu:e}");
        }
    }
}

/// Lets the page run its event loop (a timer task, not a microtask) before going on.
async fn yield_to_the_page() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .expect("a window")
            .set_timeout_with_callback(&resolve)
            .expect("setTimeout");
    });
    JsFuture::from(promise).await.expect("a timer");
}

/// The bytes at `url`, fetched by the browser.
async fn fetch_bytes(url: &str) -> Vec<u8> {
    let window = web_sys::window().expect("a window");
    let response: web_sys::Response = JsFuture::from(window.fetch_with_str(url))
        .await
        .unwrap_or_else(|e| panic!("fetch {url}: {e:?}"))
        .dyn_into()
        .expect("a Response");
    assert!(response.ok(), "{url}: HTTP {}", response.status());
    let buffer = JsFuture::from(response.array_buffer().expect("array_buffer"))
        .await
        .expect("body");
    js_sys::Uint8Array::new(&buffer).to_vec()
}

#[wasm_bindgen_test]
async fn smollm2_answers_on_webgpu() {
    // Read at compile time (wasm has no environment); a plain `cargo test` build without it still compiles.
    let Some(base) = option_env!("KILN_DATA_URL") else {
        panic!("KILN_DATA_URL (the served data cache) is set by `cargo xtask test`, which runs this test");
    };
    let bytes = fetch_bytes(&format!("{base}{}", real::SMOLLM2)).await;
    let gpu = device::gpu().await.expect("a WebGPU adapter");
    let start = js_sys::Date::now();
    // Loaded piece by piece, as the JS API streams a file, giving the page its event loop between pieces: one
    // synchronous load of the whole file can keep the renderer busy past chromedriver's 30 s limit.
    let mut loader = kiln::engine::runtime::load::GgufLoader::new(&gpu.device, |_, _| {});
    for piece in bytes.chunks(4 << 20) {
        loader.push(piece).expect("SmolLM2's bytes");
        yield_to_the_page().await;
    }
    // Each phase is logged as it ends: when chromedriver loses the renderer, the log shows how far it got.
    let since = |t: f64| (js_sys::Date::now() - t) / 1000.0;
    console_log!("SmolLM2 on WebGPU: bytes pushed in {:.1} s", since(start));
    let finish = js_sys::Date::now();
    let model = loader.finish("smollm2-135m").expect("SmolLM2 loads");
    console_log!("SmolLM2 on WebGPU: assembled in {:.1} s", since(finish));
    yield_to_the_page().await;
    let answer = real::answers_paris(model).await;
    console_log!(
        "SmolLM2 on WebGPU: {answer:?} ({:.1} s to load and answer)",
        (js_sys::Date::now() - start) / 1000.0
    );
}

/// A request object as JavaScript would pass it.
fn js(value: serde_json::Value) -> wasm_bindgen::JsValue {
    js_sys::JSON::parse(&value.to_string()).expect("JSON")
}

/// A JS value back as JSON.
fn json(value: &wasm_bindgen::JsValue) -> serde_json::Value {
    serde_json::from_str(&String::from(js_sys::JSON::stringify(value).expect("stringify"))).expect("JSON")
}

/// Requests from JS objects: shape errors name the field path, an unknown field is refused (not dropped, as
/// `serde_wasm_bindgen`'s struct reader would), a body that is not an object is refused, and `undefined`
/// reads as absent.
#[wasm_bindgen_test]
async fn js_requests_refuse_unknown_fields_and_name_field_paths() {
    use kiln::wasm::KilnModel;
    let tiny = include_bytes!("fixtures/gguf/tiny-llama.gguf").to_vec();
    let m = KilnModel::from_gguf("tiny".into(), tiny, Some("cpu".into()), None)
        .await
        .unwrap_or_else(|e| panic!("{}", json(&e)));
    let refused = |body: wasm_bindgen::JsValue, what: &str| {
        json(
            &m.chat_stream(body, None)
                .err()
                .unwrap_or_else(|| panic!("{what} was accepted")),
        )
    };
    let hi = serde_json::json!({"role": "user", "content": "hi"});
    let cases = [
        (
            serde_json::json!({"model": "tiny", "messages": [hi, {"role": "robot"}]}),
            ("messages[1].role", "invalid_type"),
        ),
        (
            serde_json::json!({"model": "tiny", "messages": [hi], "temprature": 1}),
            ("temprature", "unknown_parameter"),
        ),
        (
            serde_json::json!({"model": "tiny", "messages": [{"role": "user", "content": "x", "colour": 1}]}),
            ("messages[0].colour", "unknown_parameter"),
        ),
        (
            serde_json::json!({"messages": [hi]}),
            ("model", "missing_required_parameter"),
        ),
        (
            serde_json::json!({"model": "tiny", "messages": [hi], "max_tokens": 1.5}),
            ("max_tokens", "invalid_type"),
        ),
    ];
    for (body, (param, code)) in cases {
        let e = refused(js(body.clone()), &body.to_string());
        assert_eq!(
            (
                e["status"].clone(),
                e["error"]["param"].clone(),
                e["error"]["code"].clone()
            ),
            (422.into(), param.into(), code.into()),
            "{body}: {e}"
        );
        // serde's own words, naming the field, not a JS `Error: ` rendering.
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("`{param}`")) || message.contains(param),
            "{e}"
        );
        assert!(!message.contains("Error: "), "{e}");
    }
    for body in [
        js_sys::Array::new().into(),
        wasm_bindgen::JsValue::NULL,
        "hi".into(),
    ] {
        let e = refused(body, "a body that is not an object");
        assert_eq!(
            (e["status"].clone(), e["error"]["param"].clone()),
            (422.into(), serde_json::Value::Null),
            "{e}"
        );
    }
    // `undefined` (what `{temperature: opts.temperature}` gives when unset) is an absent field.
    let body = js(serde_json::json!({
        "model": "tiny", "messages": [hi], "max_tokens": 3, "logit_bias": {"0": -100, "1": -100, "2": -100},
    }));
    js_sys::Reflect::set(&body, &"temperature".into(), &wasm_bindgen::JsValue::UNDEFINED).unwrap();
    let full = json(
        &JsFuture::from(m.chat_stream(body, None).unwrap().collect())
            .await
            .unwrap(),
    );
    assert_eq!(full["usage"]["completion_tokens"], 3, "{full}");
}

/// The facade the `Engine` wrapper drives: load from bytes, stream, collect, errors as OpenAI objects, on
/// WebGPU and on the CPU backend (same greedy text).
#[wasm_bindgen_test]
async fn js_facade_streams_collects_and_refuses() {
    use kiln::wasm::KilnModel;
    let tiny = include_bytes!("fixtures/gguf/tiny-llama.gguf").to_vec();
    let body = serde_json::json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 12, "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100},
    });
    let mut texts = Vec::new();
    for device in ["webgpu", "cpu"] {
        let m = KilnModel::from_gguf("tiny".into(), tiny.clone(), Some(device.into()), None)
            .await
            .unwrap_or_else(|e| panic!("{device}: {}", json(&e)));
        assert_eq!(
            json(&m.device().unwrap())["kind"],
            if device == "cpu" { "cpu" } else { "gpu" }
        );
        let full = JsFuture::from(m.chat_stream(js(body.clone()), None).unwrap().collect())
            .await
            .unwrap();
        let full = json(&full);
        assert_eq!(full["object"], "chat.completion");
        assert_eq!(full["usage"]["completion_tokens"], 12);
        let mut streamed = body.clone();
        streamed["stream"] = serde_json::json!(true);
        let stream = m.chat_stream(js(streamed), None).unwrap();
        let mut text = String::new();
        loop {
            let chunk = JsFuture::from(stream.next()).await.unwrap();
            if chunk.is_undefined() {
                break;
            }
            let chunk = json(&chunk);
            assert_eq!(chunk["object"], "chat.completion.chunk");
            text.push_str(
                chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap_or_default(),
            );
        }
        assert_eq!(serde_json::json!(text), full["choices"][0]["message"]["content"]);
        texts.push(text);
        // Invalid requests are refused before any device work, in OpenAI's error shape.
        let e = m
            .chat_stream(
                js(serde_json::json!({"model": "tiny", "messages": [], "temperature": 9})),
                None,
            )
            .err()
            .unwrap();
        let e = json(&e);
        assert_eq!(e["status"], 422, "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        let e = json(
            &m.completion_stream(js(serde_json::json!({"model": "other", "prompt": "x"})))
                .err()
                .unwrap(),
        );
        assert_eq!(
            (e["status"].clone(), e["error"]["code"].clone()),
            (404.into(), "model_not_found".into())
        );
    }
    console_log!("facade greedy text on WebGPU and CPU: {texts:?}");
    assert_eq!(
        texts[0], texts[1],
        "the CPU fallback gives the same greedy text as WebGPU"
    );
}
