//! A chat request with an image, end to end, against transformers: the tiny random SmolVLM of
//! `tests/fixtures/golden/smolvlm/` with its tokenizer, chat template and a scaled-down image processor
//! (`make_golden_smolvlm_chat.py`: transformers' `Idefics3Processor` with its PIL backend, then
//! `generate`), and the tiny random Gemma 3 of `golden/gemma3_vision/` (`make_golden_gemma3_chat.py`:
//! `Gemma3Processor`, its soft tokens bidirectional by `token_type_ids`), and the tiny random LLaVA of
//! `golden/llava/` (`make_golden_llava.py`: `LlavaProcessor`, CLIP's shortest-edge resize and centre
//! crop, also for five odd images). An OpenAI request carries a PNG as a `data:` URL; decoded here as a browser would (RGBA),
//! it is preprocessed into transformers' tiles (every pixel value), the prompt expands to transformers'
//! ids (tile markers and image-token runs), and greedy generation gives transformers' completion; with
//! `detail: "low"` the single global image. A later turn that repeats the image reuses its KV state.
//! The same models as llama.cpp's two files (`tiny-smolvlm.gguf`, `tiny-gemma3-vision.gguf`,
//! `tiny-llava.gguf` and their mmproj files, streamed in pieces) answer the same.

#![cfg(not(target_arch = "wasm32"))]

use base64::Engine as _;
use burn::tensor::Device;
use kiln::api::chat_request;
use kiln::engine::protocol::plan;
use kiln::engine::runtime::load::GgufLoader;
use kiln::engine::{HfFiles, Image, LoadedModel};
use kiln::loader::GgmlType;
use kiln::model::vision::Projector;
use kiln::model::vision::preprocess::{ImageProcessor, Normalize};
use kiln::tokenizer::HfTokenizerFiles;
use pollster::block_on;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// A fixture model: its directory under `golden/`, its GGUF pair's name under `gguf/`, and its
/// processor's normalisation.
#[derive(Clone, Copy)]
struct Fixture {
    dir: &'static str,
    gguf: &'static str,
    normalize: Normalize,
}

const SMOLVLM: Fixture = Fixture {
    dir: "smolvlm",
    gguf: "tiny-smolvlm",
    normalize: Normalize::STANDARD,
};

const GEMMA3: Fixture = Fixture {
    dir: "gemma3_vision",
    gguf: "tiny-gemma3-vision",
    normalize: Normalize::STANDARD,
};

const LLAVA: Fixture = Fixture {
    dir: "llava",
    gguf: "tiny-llava",
    normalize: Normalize::CLIP,
};

const ALL: [Fixture; 3] = [SMOLVLM, GEMMA3, LLAVA];

impl Fixture {
    fn read(&self, name: &str) -> Vec<u8> {
        let dir = self.dir;
        std::fs::read(format!("{FIXTURES}/golden/{dir}/{name}"))
            .unwrap_or_else(|e| panic!("{dir}/{name}: {e}"))
    }

    fn golden(&self) -> Value {
        serde_json::from_slice(&self.read("chat.json")).expect("chat.json")
    }
}

fn read(name: &str) -> Vec<u8> {
    SMOLVLM.read(name)
}

fn load(device: &Device) -> LoadedModel {
    load_quantized(SMOLVLM, device, None)
}

fn load_quantized(f: Fixture, device: &Device, quantize: Option<GgmlType>) -> LoadedModel {
    let (config, weights) = (f.read("config.json"), f.read("model.safetensors"));
    let (tokenizer, tokenizer_config) = (f.read("tokenizer.json"), f.read("tokenizer_config.json"));
    let preprocessor = f.read("preprocessor_config.json");
    let files = HfFiles {
        config: &config,
        weights: vec![("model.safetensors".into(), &weights)],
        index: None,
        tokenizer: HfTokenizerFiles {
            tokenizer_json: &tokenizer,
            tokenizer_config: Some(&tokenizer_config),
            ..HfTokenizerFiles::default()
        },
        preprocessor: Some(&preprocessor),
    };
    LoadedModel::from_hf_quantized(f.gguf, files, device, quantize, &mut |_, _| {}).expect("loads")
}

/// The model from llama.cpp's GGUF and mmproj (`make_gguf_smolvlm.py`, `make_gguf_gemma3_vision.py`),
/// each streamed in pieces of 4 KiB, with the checkpoint's chat template (SmolVLM's GGUF carries a
/// ChatML one of its own).
fn load_gguf_pair(f: Fixture, device: &Device) -> LoadedModel {
    let gguf = format!("{FIXTURES}/gguf/{}", f.gguf);
    let lm = std::fs::read(format!("{gguf}.gguf")).expect("the LM GGUF");
    let mmproj = std::fs::read(format!("{gguf}-mmproj.gguf")).expect("the mmproj");
    let mut loader = GgufLoader::files(device, 1, |_, _| {}).with_mmproj();
    for (file, bytes) in [&lm, &mmproj].into_iter().enumerate() {
        for piece in bytes.chunks(4096) {
            loader.push_to(file, piece).expect("a piece");
        }
    }
    let config: Value = serde_json::from_slice(&f.read("tokenizer_config.json")).expect("json");
    let template = config["chat_template"].as_str().expect("a chat template");
    loader
        .finish(f.gguf)
        .expect("loads")
        .with_chat_template(template)
        .expect("the template")
}

/// The image of every `image_url` part, decoded from its `data:` URL as a browser decodes it (RGBA).
fn images(request: &Value) -> Vec<Image> {
    let mut out = Vec::new();
    for m in request["messages"].as_array().expect("messages") {
        for part in m["content"].as_array().into_iter().flatten() {
            let Some(url) = part["image_url"]["url"].as_str() else {
                continue;
            };
            let b64 = url.split_once("base64,").expect("a base64 data URL").1;
            out.push(decode_png(
                &base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .expect("base64"),
            ));
        }
    }
    out
}

/// An 8-bit PNG as a browser decodes it: RGBA, grey replicated, opaque where it has no alpha.
fn decode_png(png: &[u8]) -> Image {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let (w, h) = (info.width as usize, info.height as usize);
    let px = &buf[..info.buffer_size()];
    let rgba = match info.color_type {
        png::ColorType::Rgba => px.to_vec(),
        png::ColorType::Rgb => px.chunks(3).flat_map(|c| [c[0], c[1], c[2], 255]).collect(),
        png::ColorType::Grayscale => px.iter().flat_map(|&g| [g, g, g, 255]).collect(),
        png::ColorType::GrayscaleAlpha => px.chunks(2).flat_map(|c| [c[0], c[0], c[0], c[1]]).collect(),
        other => panic!("the fixture's PNG is {other:?}"),
    };
    Image {
        width: w,
        height: h,
        rgba,
    }
}

/// The 8-bit level a pixel value of channel `c` was made from under `n`.
fn level(n: &Normalize, c: usize, v: f32) -> u8 {
    ((v * n.std[c] + n.mean[c]) * 255.0).round() as u8
}

/// The tile's 8-bit levels, channel-major, under `n`.
fn levels(n: &Normalize, tile: &[f32]) -> Vec<u8> {
    let plane = tile.len() / 3;
    tile.iter()
        .enumerate()
        .map(|(i, &v)| level(n, i / plane, v))
        .collect()
}

/// The tiles' 8-bit values before rescaling and normalising, as the fixture stores them.
fn tile_bytes(golden: &Value) -> Vec<u8> {
    let b64 = golden["base64"].as_str().expect("base64");
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// One case of the fixture (`""` or `"_low"`): the plan's ids and tiles, and the completion.
fn check_case(f: Fixture, m: &LoadedModel, golden: &Value, case: &str) {
    let request = &golden[format!("request{case}")];
    let imgs = images(request);
    let req = chat_request(request.clone(), &m.spec()).expect("valid");
    let p = plan::chat(&m.format(), req.clone(), &imgs).expect("planned");
    assert_eq!(
        p.prompt().ids(),
        ids(&golden[format!("prompt_ids{case}")]),
        "{case}: prompt ids"
    );
    let [image] = p.prompt().images() else {
        panic!("{case}: one image");
    };
    let want = tile_bytes(&golden[format!("pixel_values_u8{case}")]);
    let n = &f.normalize;
    let side = image.pixels.side;
    let got: Vec<u8> = image
        .pixels
        .pixels()
        .chunks(3 * side * side)
        .flat_map(|t| levels(n, t))
        .collect();
    assert_eq!(got, want, "{case}: the tiles' pixel values");
    assert_eq!(
        (image.pixels.rows, image.pixels.cols),
        (
            golden[format!("rows{case}")].as_u64().unwrap() as usize,
            golden[format!("cols{case}")].as_u64().unwrap() as usize
        )
    );
    let out = block_on(m.chat_with_images(req, &imgs).expect("served").collect()).expect("generated");
    let text = out.choices[0].message.content.clone().unwrap_or_default();
    assert_eq!(
        text,
        golden[format!("completion_text{case}")]["skip_special_tokens_true"]
            .as_str()
            .unwrap(),
        "{case}: the greedy completion"
    );
    let usage = out.usage;
    assert_eq!(
        usage.prompt_tokens as usize,
        p.prompt().ids().len(),
        "{case}: prompt tokens"
    );
    assert_eq!(usage.completion_tokens, 8);
}

/// The cases of fixture `f`: SmolVLM's tiled image and its `detail: "low"` form; Gemma 3's one image
/// (it has no tiles, so `low` is the same).
fn cases(f: Fixture) -> &'static [&'static str] {
    match f.dir {
        "smolvlm" => &["", "_low"],
        _ => &[""],
    }
}

#[test]
fn an_image_chat_matches_transformers_on_flex_and_wgpu() {
    let gpu = block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for f in ALL {
        let golden = f.golden();
        for device in [Device::flex(), gpu.device.clone()] {
            let m = load_quantized(f, &device, None);
            assert!(m.spec().images && m.vision().is_some());
            for case in cases(f) {
                check_case(f, &m, &golden, case);
            }
        }
    }
}

#[test]
fn the_gguf_pair_streamed_matches_transformers() {
    let gpu = block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for f in ALL {
        let golden = f.golden();
        for device in [Device::flex(), gpu.device.clone()] {
            let m = load_gguf_pair(f, &device);
            assert!(m.spec().images && m.vision().is_some());
            for case in cases(f) {
                check_case(f, &m, &golden, case);
            }
        }
    }
}

/// LLaVA's processor (CLIP's: the shortest edge to 32 with BICUBIC, the centre 32², RGBA onto white,
/// grey replicated) gives transformers' pixel values for five odd images (`golden.json`'s `preprocess`),
/// every 8-bit level equal.
#[test]
fn llava_preprocessing_matches_transformers() {
    let golden: Value = serde_json::from_slice(&LLAVA.read("golden.json")).expect("golden.json");
    let config: Value = serde_json::from_slice(&LLAVA.read("config.json")).expect("config.json");
    let text = kiln::model::ModelConfig::from_json(&LLAVA.read("config.json")).expect("config");
    let v = text.vision.expect("a vision part");
    assert!(
        matches!(
            v.projector,
            Projector::Mlp {
                layer: 2,
                keep_class: false,
                bias: true
            }
        ),
        "{config}"
    );
    let processor =
        ImageProcessor::from_json(&LLAVA.read("preprocessor_config.json"), v.projector).expect("parses");
    let cases = golden["preprocess"].as_array().expect("cases");
    assert_eq!(cases.len(), 5);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(case["png_base64"].as_str().unwrap())
            .expect("base64");
        let image = decode_png(&png);
        let p = processor.preprocess(image.width, image.height, &image.rgba, false);
        assert_eq!((p.tiles.len(), p.side), (1, 32), "{name}");
        let want = base64::engine::general_purpose::STANDARD
            .decode(case["pixel_values_u8"].as_str().expect("base64"))
            .expect("base64");
        assert_eq!(
            levels(&Normalize::CLIP, &p.tiles[0]),
            want,
            "{name}: every 8-bit level"
        );
    }
}

/// `quantize` applies to the language model only: the vision part encodes an image exactly as the
/// checkpoint's own weights do, while the language model's matrices are quantized.
#[test]
fn quantize_leaves_the_vision_part_as_it_is() {
    let golden: Value = serde_json::from_slice(&read("chat.json")).expect("chat.json");
    let device = Device::flex();
    let (plain, q8) = (
        load(&device),
        load_quantized(SMOLVLM, &device, Some(GgmlType::Q8_0)),
    );
    assert!(q8.memory().weight_bytes < plain.memory().weight_bytes);
    let imgs = images(&golden["request"]);
    let req = chat_request(golden["request"].clone(), &plain.spec()).expect("valid");
    let p = plan::chat(&plain.format(), req, &imgs).expect("planned");
    let [image] = p.prompt().images() else {
        panic!("one image");
    };
    let (tiles, side) = (image.pixels.tiles.len(), image.pixels.side);
    let encode = |m: &LoadedModel| {
        let pixels = burn::tensor::Tensor::<4>::from_data(
            burn::tensor::TensorData::new(image.pixels.pixels(), [tiles, 3, side, side]),
            &device,
        );
        let rows = m.vision().expect("vision").encode(pixels).expect("encoded");
        rows.into_data().try_to_vec::<f32>().expect("f32")
    };
    assert_eq!(encode(&plain), encode(&q8));
}

/// Images whose tokens leave no room in the context are a 400 `context_length_exceeded`: eight copies
/// of the fixture's image take more than the model's 256 positions.
#[test]
fn images_beyond_the_context_are_refused() {
    let golden: Value = serde_json::from_slice(&read("chat.json")).expect("chat.json");
    let m = load(&Device::flex());
    let mut request = golden["request"].clone();
    let content = request["messages"][0]["content"].as_array_mut().expect("parts");
    let image = content
        .iter()
        .find(|p| p["type"] == "image_url")
        .expect("an image part")
        .clone();
    content.extend(std::iter::repeat_n(image, 7));
    let imgs = images(&request);
    assert_eq!(imgs.len(), 8);
    let req = chat_request(request, &m.spec()).expect("valid");
    let e = m.chat_with_images(req, &imgs).err().expect("refused");
    let body = serde_json::to_value(e.body()).unwrap();
    assert_eq!(e.status(), 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert_eq!(body["error"]["param"], "messages", "{body}");
}

/// A second turn about the same image finds the first turn's KV state: its prompt tokens up to the
/// answer, image rows included, come from the prefix cache.
#[test]
fn a_repeated_image_reuses_its_kv_state() {
    let golden: Value = serde_json::from_slice(&read("chat.json")).expect("chat.json");
    let m = load(&Device::flex());
    let first = golden["request"].clone();
    let imgs = images(&first);
    let req = chat_request(first.clone(), &m.spec()).expect("valid");
    let out = block_on(m.chat_with_images(req, &imgs).expect("served").collect()).expect("generated");
    let answer = out.choices[0].message.content.clone().unwrap_or_default();
    let mut second = first.clone();
    let messages = second["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": "And the colours?"}));
    let req = chat_request(second, &m.spec()).expect("valid");
    let out = block_on(m.chat_with_images(req, &imgs).expect("served").collect()).expect("generated");
    let usage = out.usage;
    let cached = usage.prompt_tokens_details.cached_tokens.unwrap_or(0) as usize;
    let first_prompt = golden["prompt_ids"].as_array().unwrap().len();
    assert!(
        cached >= first_prompt,
        "{cached} cached of {} prompt tokens; the first turn's prompt is {first_prompt}",
        usage.prompt_tokens
    );
}

/// What the engine refuses of images: an image part whose image was not decoded, and an image sent to
/// a text-only model.
#[test]
fn undecoded_images_are_refused_by_part() {
    let golden: Value = serde_json::from_slice(&read("chat.json")).expect("chat.json");
    let m = load(&Device::flex());
    let req = chat_request(golden["request"].clone(), &m.spec()).expect("valid");
    let e = m.chat_with_images(req, &[]).err().expect("refused");
    let body = serde_json::to_value(e.body()).unwrap();
    assert_eq!(
        body["error"]["param"], "messages[0].content[0].image_url",
        "{body}"
    );
}
