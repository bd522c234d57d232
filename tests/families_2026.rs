//! The 2026 families — LFM2 (short convolutions), Qwen3.5 (Gated DeltaNet) and Gemma 4 (per-layer
//! embeddings, shared keys and values, two head sizes) — against transformers' golden outputs (`tests/fixtures/make_golden_2026.py`): from safetensors and from GGUF
//! written as llama.cpp's converter writes it, on burn's CPU backend and on native wgpu. Each: the prompt's
//! logits at every position, 64 (GGUF: 32) greedy tokens, a 152-token prompt (longer than a chunk of the
//! delta rule: `kernels::delta::CHUNK`, and than transformers' 64) in one forward and then 16 greedy
//! tokens, and the same prompt run token by token giving the same logits as run at once.
//!
//! Tolerances: [`LOGITS_TOLERANCE`] (1e-3) against transformers from safetensors; from GGUF the
//! quantised files' 1e-3 on wgpu and 2e-3 on the CPU backend (as `tests/gguf_files.rs`, whose 16-bit
//! activation blocks explain the CPU's); token by token against one forward 1e-4. On wgpu the steps take
//! the fused decode kernels in f32 ([`f32_kernels`]); their f16 activations are checked against the
//! generic path in `tests/quantized_model.rs`.
#![cfg(not(target_arch = "wasm32"))]

use burn::tensor::{Device, Tensor};
use kiln::kernels::caps::{Caps, Features};
use kiln::loader::Checkpoint;
use kiln::model::{Decoder, KvCache, ModelConfig};
use serde::Deserialize;

/// Logits must match transformers' within this max-abs difference (as `tests/golden`).
const LOGITS_TOLERANCE: f32 = 1e-3;

struct Fixture {
    name: &'static str,
    config: &'static [u8],
    weights: &'static [u8],
    golden: &'static str,
}

fn load(f: &Fixture, device: &Device) -> Decoder {
    let config = ModelConfig::from_json(f.config).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let mut ckpt = Checkpoint::single(f.weights).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    Decoder::load(config, &mut ckpt, device).unwrap_or_else(|e| panic!("{}: {e}", f.name))
}

/// `decoder` with its own kernels (the fused decode step, where it takes it) in f32 and without
/// subgroups, its caches f32: the step is then within 1e-4 of a whole forward, as the generic path is.
fn f32_kernels(mut decoder: Decoder) -> Decoder {
    let caps = Caps::of(decoder.device()).with_features(Features::BASE);
    decoder.set_caps(caps);
    decoder
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn fixtures() -> [(Fixture, &'static [u8], &'static str); 3] {
    macro_rules! both {
        ($name:literal, $gguf:literal) => {
            (
                Fixture {
                    name: $name,
                    config: include_bytes!(concat!("fixtures/golden/", $name, "/config.json")),
                    weights: include_bytes!(concat!("fixtures/golden/", $name, "/model.safetensors")),
                    golden: include_str!(concat!("fixtures/golden/", $name, "/golden.json")),
                },
                &include_bytes!(concat!("fixtures/gguf/tiny-", $gguf, ".gguf"))[..],
                include_str!(concat!("fixtures/gguf/tiny-", $gguf, ".golden.json")),
            )
        };
    }
    [
        both!("lfm2", "lfm2"),
        both!("qwen3_5", "qwen35"),
        both!("gemma4", "gemma4"),
    ]
}

#[derive(Deserialize)]
struct Golden {
    prompt_ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy_ids: Vec<u32>,
    long_prompt_ids: Vec<u32>,
    /// The long prompt's last 8 positions.
    long_logits: Vec<Vec<f32>>,
    long_greedy_ids: Vec<u32>,
}

fn read(t: Tensor<3>) -> Vec<f32> {
    pollster::block_on(t.into_data_async())
        .expect("read back")
        .try_to_vec::<f32>()
        .expect("f32")
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn greedy(decoder: &Decoder, cache: &mut KvCache, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut logits = decoder
        .forward(&[prompt.to_vec()], cache, false)
        .expect("prefill");
    let mut out = Vec::new();
    for _ in 0..n {
        let next = argmax(&read(logits));
        out.push(next);
        logits = decoder.forward(&[vec![next]], cache, false).expect("step");
    }
    out
}

fn gpu() -> Device {
    pollster::block_on(kiln::engine::runtime::device::gpu())
        .expect("a wgpu adapter")
        .device
}

/// Everything the golden file holds, on `decoder`.
fn check(name: &str, decoder: &Decoder, g: &Golden, (tolerance, stepped_tolerance): (f32, f32)) {
    let mut cache = decoder.new_cache(1, g.prompt_ids.len() + g.greedy_ids.len());
    let logits = decoder
        .forward(std::slice::from_ref(&g.prompt_ids), &mut cache, true)
        .expect("forward");
    let diff = max_abs_diff(&read(logits), &g.logits.concat());
    eprintln!("{name}: prompt logits max |Δ| = {diff:e}");
    assert!(diff <= tolerance, "{name}: prompt logits differ by {diff}");
    let mut cache = decoder.new_cache(1, g.prompt_ids.len() + g.greedy_ids.len());
    let out = greedy(decoder, &mut cache, &g.prompt_ids, g.greedy_ids.len());
    assert_eq!(out, g.greedy_ids, "{name}: greedy continuation");
    let n = g.long_prompt_ids.len();
    let mut cache = decoder.new_cache(1, n + g.long_greedy_ids.len());
    let logits = decoder
        .forward(std::slice::from_ref(&g.long_prompt_ids), &mut cache, true)
        .expect("long forward");
    let last = g.long_logits.len();
    let at_once = read(logits.narrow(1, n - last, last));
    let diff = max_abs_diff(&at_once, &g.long_logits.concat());
    eprintln!("{name}: long prompt ({n} positions) max |Δ| = {diff:e}");
    assert!(diff <= tolerance, "{name}: long-prompt logits differ by {diff}");
    let mut cache = decoder.new_cache(1, n + g.long_greedy_ids.len());
    let out = greedy(decoder, &mut cache, &g.long_prompt_ids, g.long_greedy_ids.len());
    assert_eq!(out, g.long_greedy_ids, "{name}: greedy after the long prompt");
    // Token by token: the recurrent form position after position.
    let mut cache = decoder.new_cache(1, n);
    let mut stepped = Vec::new();
    for (i, &id) in g.long_prompt_ids.iter().enumerate() {
        let logits = decoder.forward(&[vec![id]], &mut cache, false).expect("step");
        if i >= n - last {
            stepped.extend(read(logits));
        }
    }
    let diff = max_abs_diff(&stepped, &at_once);
    eprintln!("{name}: token by token against one forward max |Δ| = {diff:e}");
    assert!(
        diff <= stepped_tolerance,
        "{name}: token-by-token logits differ by {diff}"
    );
}

#[test]
fn safetensors_match_transformers_on_flex_and_wgpu() {
    for (f, _, _) in fixtures() {
        let g: Golden = serde_json::from_str(f.golden).expect("golden");
        for (device, label) in [(Device::flex(), "flex"), (gpu(), "wgpu")] {
            let decoder = f32_kernels(load(&f, &device));
            check(
                &format!("{} ({label})", f.name),
                &decoder,
                &g,
                (LOGITS_TOLERANCE, 1e-4),
            );
        }
    }
}

#[test]
fn ggufs_match_their_dequantised_references_on_flex_and_wgpu() {
    for (f, bytes, golden) in fixtures() {
        let g: Golden = serde_json::from_str(golden).expect("golden");
        for (device, label, tolerances) in [
            (Device::flex(), "flex", (2e-3, 5e-3)),
            (gpu(), "wgpu", (1e-3, 1e-3)),
        ] {
            let decoder = kiln::engine::LoadedModel::from_gguf("fixture", bytes, &device)
                .unwrap_or_else(|e| panic!("{}: {e}", f.name))
                .decoder;
            let decoder = f32_kernels(decoder);
            check(&format!("{} gguf ({label})", f.name), &decoder, &g, tolerances);
        }
    }
}

/// Gemma 4's per-layer embedding table stays in host memory beside a GPU: none of its bytes on the device,
/// its rows dequantised on the host and uploaded (equal to the stored values); on the CPU backend it is
/// the device's; any other matrix goes to the GPU. (The golden checks above run the whole model so on wgpu.)
#[test]
fn the_per_layer_table_stays_in_host_memory_beside_a_gpu() {
    use kiln::loader::{GgmlType, RawTensor};
    use kiln::model::layers::linear::Matrix;
    use kiln::model::placed::{HOST_TABLES, Placed};
    let (n, k) = (5, 64);
    let values: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let raw = RawTensor {
        ty: GgmlType::F16,
        shape: vec![n, k],
        bytes: bytes.clone().into(),
    };
    let quant = |p: Placed| match p {
        Placed::Matrix(Matrix::Quant(q)) => q,
        _ => panic!("an f16 matrix is kept in its blocks"),
    };
    let gpu = gpu();
    let table = quant(Placed::new(HOST_TABLES[0], &raw, &gpu).unwrap());
    assert_eq!((table.device_bytes(), table.bytes()), (0, bytes.len()));
    assert!(table.gpu().is_none());
    let rows = table.rows(&[3, 0, 3], &gpu);
    assert!(matches!(
        rows.device().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    ));
    let got = rows.into_data().try_to_vec::<f32>().unwrap();
    for (i, row) in [3, 0, 3].into_iter().enumerate() {
        for j in 0..k {
            let stored = half::f16::from_f32(values[row * k + j]).to_f32();
            assert_eq!(got[i * k + j], stored, "row {row}, element {j}");
        }
    }
    let other = quant(Placed::new("model.layers.0.mlp.up_proj.weight", &raw, &gpu).unwrap());
    assert!(other.gpu().is_some() && other.device_bytes() > 0);
    let on_cpu = quant(Placed::new(HOST_TABLES[0], &raw, &Device::flex()).unwrap());
    assert_eq!(on_cpu.device_bytes(), bytes.len());
}

/// GGUF metadata that contradicts the tensors it describes is a load error naming the key.
#[test]
fn metadata_contradicting_the_tensors_is_named() {
    use kiln::loader::{Array, Gguf, Value, gguf_write};
    let rewrite = |file: &[u8], key: &str, value: Value| {
        let g = Gguf::parse(file).unwrap();
        let mut meta = g.metadata.clone();
        meta.insert(key.into(), value);
        gguf_write::write(&meta, &gguf_write::tensors_of(&g)).unwrap()
    };
    let error = |bytes: &[u8]| match kiln::model::gguf::config(&Gguf::parse(bytes).unwrap()) {
        Ok(_) => "loaded".to_owned(),
        Err(e) => e.to_string(),
    };
    let files = fixtures();
    let (lfm2, qwen, gemma) = (files[0].1, files[1].1, files[2].1);
    for bytes in [lfm2, qwen, gemma] {
        assert_eq!(error(bytes), "loaded");
    }
    let cases = [
        (
            lfm2,
            "lfm2.attention.head_count_kv",
            Value::Array(Array::U32(vec![2; 4])),
        ),
        (lfm2, "lfm2.shortconv.l_cache", Value::U32(4)),
        (
            qwen,
            "qwen35.attention.recurrent_layers",
            Value::Array(Array::Bool(vec![true; 6])),
        ),
        (qwen, "qwen35.ssm.time_step_rank", Value::U32(2)),
        (qwen, "qwen35.ssm.conv_kernel", Value::U32(3)),
        (qwen, "qwen35.ssm.state_size", Value::U32(8)),
        (
            gemma,
            "gemma4.attention.sliding_window_pattern",
            Value::Array(Array::Bool(vec![true; 8])),
        ),
        (gemma, "gemma4.attention.shared_kv_layers", Value::U32(2)),
    ];
    for (bytes, key, value) in cases {
        let e = error(&rewrite(bytes, key, value));
        eprintln!("{key}: {e}");
        let named = match key {
            "qwen35.ssm.state_size" => "qwen35.ssm.inner_size",
            k => k,
        };
        assert!(e.contains(named), "{key}: {e}");
    }
}

/// `n > 1`: a prefill's states forked into rows (copies), each row decoding its own tokens, equals each
/// sequence run alone; dropping a row keeps the others'.
#[test]
fn forked_rows_decode_as_single_sequences() {
    for (f, _, golden) in fixtures() {
        let g: Golden = serde_json::from_str(golden).expect("golden");
        let decoder = load(&f, &Device::flex());
        let prompt = &g.prompt_ids;
        let tails = [[7u32, 9, 11], [300, 2, 5]];
        let mut forked = decoder.new_cache(1, prompt.len() + 4);
        decoder
            .forward(std::slice::from_ref(prompt), &mut forked, false)
            .expect("prefill");
        forked.repeat_rows(2);
        let mut both = Vec::new();
        for (&a, &b) in tails[0].iter().zip(&tails[1]) {
            let ids = vec![vec![a], vec![b]];
            both = read(decoder.forward(&ids, &mut forked, false).expect("forked step"));
        }
        let v = decoder.config.vocab_size;
        for (row, tail) in tails.iter().enumerate() {
            let mut alone = decoder.new_cache(1, prompt.len() + 4);
            let mut seq = prompt.clone();
            seq.extend_from_slice(tail);
            let want = read(decoder.forward(&[seq], &mut alone, false).expect("alone"));
            let diff = max_abs_diff(&both[row * v..(row + 1) * v], &want);
            assert!(diff <= 1e-4, "{}: row {row} differs by {diff}", f.name);
        }
        forked.keep_rows(&[1]);
        let next = read(
            decoder
                .forward(&[vec![42]], &mut forked, false)
                .expect("kept row"),
        );
        let mut alone = decoder.new_cache(1, prompt.len() + 4);
        let mut seq = prompt.clone();
        seq.extend_from_slice(&tails[1]);
        seq.push(42);
        let want = read(decoder.forward(&[seq], &mut alone, false).expect("alone"));
        assert!(max_abs_diff(&next, &want) <= 1e-4, "{}: the kept row", f.name);
    }
}

/// Multi-token-prediction parts that kiln does not run are skipped, not refused: a Qwen3.5 GGUF with
/// `nextn_predict_layers` blocks after the decoder's (as llama.cpp's converter writes them by default) and
/// a checkpoint with `mtp.*` tensors load and give the same logits as without them.
#[test]
fn multi_token_prediction_parts_are_skipped() {
    use kiln::loader::{Gguf, Value, gguf_write};
    let files = fixtures();
    let (qwen, bytes, golden) = (&files[1].0, files[1].1, files[1].2);
    let g: Golden = serde_json::from_str(golden).expect("golden");
    // One more block: a copy of the last layer's tensors under the next index.
    let file = Gguf::parse(bytes).unwrap();
    let mut meta = file.metadata.clone();
    let blocks = match meta.get("qwen35.block_count") {
        Some(Value::U32(n)) => *n,
        other => panic!("block_count {other:?}"),
    };
    meta.insert("qwen35.block_count".into(), Value::U32(blocks + 1));
    meta.insert("qwen35.nextn_predict_layers".into(), Value::U32(1));
    let mut tensors = gguf_write::tensors_of(&file);
    let last = format!("blk.{}.", blocks - 1);
    let copies: Vec<(String, gguf_write::TensorOut<'_>)> = tensors
        .iter()
        .filter(|t| t.name.starts_with(&last))
        .map(|t| (t.name.replacen(&last, &format!("blk.{blocks}."), 1), *t))
        .collect();
    tensors.extend(
        copies
            .iter()
            .map(|(name, t)| gguf_write::TensorOut { name, ..*t }),
    );
    let with_mtp = gguf_write::write(&meta, &tensors).unwrap();
    let decoder = kiln::engine::LoadedModel::from_gguf("tiny", &with_mtp, &Device::flex())
        .expect("a file with a multi-token-prediction block loads")
        .decoder;
    assert_eq!(decoder.config.num_layers, blocks as usize);
    let logits = prompt_logits(&decoder, &g);
    assert!(max_abs_diff(&logits, &g.logits.concat()) <= 2e-3);
    // A checkpoint's `mtp.*` tensors.
    let mut st = safetensors_of(qwen.weights);
    st.push((
        "mtp.fc.weight".to_owned(),
        vec![0u8; 4 * 8],
        "F32".to_owned(),
        vec![2, 4],
    ));
    let weights = write_safetensors(&st);
    let config = ModelConfig::from_json(qwen.config).unwrap();
    let mut ckpt = Checkpoint::single(&weights).unwrap();
    Decoder::load(config, &mut ckpt, &Device::flex()).expect("mtp.* is skipped");
}

/// Qwen3.5's and Gemma 4's checkpoints are multimodal (`…ForConditionalGeneration`: the language model
/// under `model.language_model.`, the towers beside it): kiln loads the language model alone and reads
/// the towers past, with the same logits as the text-only checkpoint; Gemma 4's sharing layers' own keys
/// and values, which Google's checkpoints hold, are read past too, from safetensors and from GGUF. Without
/// the towers skipped, one is named as extra.
#[test]
fn multimodal_checkpoints_load_as_their_language_models() {
    use kiln::loader::{Gguf, gguf_write};
    let files = fixtures();
    for (f, top, model_type, tower) in [
        (
            &files[1].0,
            "Qwen3_5ForConditionalGeneration",
            "qwen3_5",
            "model.visual.blocks.0.attn.qkv.weight",
        ),
        (
            &files[2].0,
            "Gemma4ForConditionalGeneration",
            "gemma4",
            "model.vision_tower.encoder.layers.0.mlp.fc1.weight",
        ),
    ] {
        let g: Golden = serde_json::from_str(f.golden).expect("golden");
        let mut text: serde_json::Value = serde_json::from_slice(f.config).unwrap();
        text.as_object_mut().unwrap().remove("architectures");
        let config = serde_json::json!({
            "architectures": [top], "model_type": model_type, "text_config": text,
            "vision_config": {"model_type": format!("{model_type}_vision"), "hidden_size": 8},
            "image_token_id": 3,
        });
        let config = ModelConfig::from_json(&serde_json::to_vec(&config).unwrap())
            .unwrap_or_else(|e| panic!("{top}: {e}"));
        let towers = config.text_only.expect("read as its language model").towers;
        assert!(config.vision.is_none());
        let mut st: Vec<_> = safetensors_of(f.weights)
            .into_iter()
            .map(|(name, bytes, dtype, shape)| {
                let name = match name.strip_prefix("model.") {
                    Some(rest) => format!("model.language_model.{rest}"),
                    None => name,
                };
                (name, bytes, dtype, shape)
            })
            .collect();
        st.push((tower.to_owned(), vec![0u8; 4 * 8], "F32".to_owned(), vec![2, 4]));
        if model_type == "gemma4" {
            // the first sharing layer's own keys and values, as Google's checkpoints hold them
            let shared = (0..config.num_layers)
                .find(|&i| matches!(config.layers[i].cache, kiln::model::CacheKind::SharedKv { .. }))
                .expect("a sharing layer");
            let (kv, d) = config.attn_dims(shared);
            let h = config.hidden_size;
            let p = format!("model.language_model.layers.{shared}.self_attn");
            for (part, shape) in [
                ("k_proj", vec![kv * d, h]),
                ("v_proj", vec![kv * d, h]),
                ("k_norm", vec![d]),
            ] {
                let n: usize = shape.iter().product();
                st.push((
                    format!("{p}.{part}.weight"),
                    vec![0u8; 4 * n],
                    "F32".to_owned(),
                    shape,
                ));
            }
        }
        let weights = write_safetensors(&st);
        let unskipped = Decoder::load(
            config.clone(),
            &mut Checkpoint::single(&weights).unwrap(),
            &Device::flex(),
        )
        .expect_err("a tower left over");
        assert!(unskipped.to_string().contains(tower), "{top}: {unskipped}");
        let mut ckpt = Checkpoint::single(&weights).unwrap().skipping(towers);
        let decoder =
            Decoder::load(config, &mut ckpt, &Device::flex()).unwrap_or_else(|e| panic!("{top}: {e}"));
        let logits = prompt_logits(&decoder, &g);
        let diff = max_abs_diff(&logits, &g.logits.concat());
        assert!(diff <= LOGITS_TOLERANCE, "{top}: {diff}");
    }
    // Gemma 4's GGUF with a sharing layer's `attn_k` / `attn_v` / `attn_k_norm`, as llama.cpp's converter
    // writes them from Google's checkpoint.
    let (bytes, golden) = (files[2].1, files[2].2);
    let g: Golden = serde_json::from_str(golden).expect("golden");
    let file = Gguf::parse(bytes).unwrap();
    let mut tensors = gguf_write::tensors_of(&file);
    let layers = match file.metadata.get("gemma4.block_count") {
        Some(kiln::loader::Value::U32(n)) => *n as usize,
        other => panic!("block_count {other:?}"),
    };
    let shared = match file.metadata.get("gemma4.attention.shared_kv_layers") {
        Some(kiln::loader::Value::U32(n)) => layers - *n as usize,
        other => panic!("shared_kv_layers {other:?}"),
    };
    let copies: Vec<(String, gguf_write::TensorOut<'_>)> = tensors
        .iter()
        .filter(|t| t.name.starts_with("blk.0.attn_k") || t.name.starts_with("blk.0.attn_v"))
        .map(|t| (t.name.replacen("blk.0.", &format!("blk.{shared}."), 1), *t))
        .collect();
    assert!(
        copies.len() >= 2,
        "{:?}",
        copies.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    tensors.extend(
        copies
            .iter()
            .map(|(name, t)| gguf_write::TensorOut { name, ..*t }),
    );
    let with_kv = gguf_write::write(&file.metadata, &tensors).unwrap();
    let decoder = kiln::engine::LoadedModel::from_gguf("tiny", &with_kv, &Device::flex())
        .expect("a sharing layer's own keys and values are read past")
        .decoder;
    let logits = prompt_logits(&decoder, &g);
    assert!(max_abs_diff(&logits, &g.logits.concat()) <= 2e-3);
}

/// The logits of `g`'s prompt, run at once on `decoder`: `[s · V]`.
fn prompt_logits(decoder: &Decoder, g: &Golden) -> Vec<f32> {
    let mut cache = decoder.new_cache(1, g.prompt_ids.len());
    read(
        decoder
            .forward(std::slice::from_ref(&g.prompt_ids), &mut cache, true)
            .unwrap(),
    )
}

/// The tensors of a safetensors file: name, bytes, dtype, shape.
fn safetensors_of(bytes: &[u8]) -> Vec<(String, Vec<u8>, String, Vec<usize>)> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let off = &v["data_offsets"];
            let (a, b) = (
                off[0].as_u64().unwrap() as usize,
                off[1].as_u64().unwrap() as usize,
            );
            let shape = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            (
                k,
                data[a..b].to_vec(),
                v["dtype"].as_str().unwrap().to_owned(),
                shape,
            )
        })
        .collect()
}

/// A safetensors file of `tensors`.
fn write_safetensors(tensors: &[(String, Vec<u8>, String, Vec<usize>)]) -> Vec<u8> {
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
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}
