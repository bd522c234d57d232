//! A greedy completion from a GGUF file, natively: `cargo run --example complete -- MODEL.gguf
//! [--device flex|wgpu] [--tokens N] PROMPT...`. Prints the prompt's token ids, the completion's text and the
//! load and generation times: a quick look at a real model beside another engine's output (llama.cpp's,
//! say). Timings only; nothing here asserts.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> Result<(), String> {
    use std::time::Instant;

    use kiln::api::completion_request;
    use kiln::engine::LoadedModel;
    use kiln::engine::runtime::device;
    use kiln::loader::Gguf;
    use kiln::tokenizer::ModelTokenizer;
    use pollster::block_on;
    use serde_json::json;

    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take = |flag: &str| {
        let at = args.iter().position(|a| a == flag)?;
        let v = args.get(at + 1).cloned();
        args.drain(at..(at + 2).min(args.len()));
        v
    };
    let dev = take("--device").unwrap_or_else(|| "flex".into());
    let tokens: usize = take("--tokens")
        .map_or(Ok(32), |t| t.parse())
        .map_err(|e| format!("--tokens: {e}"))?;
    let [model_path, prompt @ ..] = args.as_slice() else {
        return Err("usage: complete MODEL.gguf [--device flex|wgpu] [--tokens N] PROMPT...".into());
    };
    let prompt = prompt.join(" ");
    let bytes = std::fs::read(model_path).map_err(|e| format!("{model_path}: {e}"))?;
    let started = Instant::now();
    let (device, _) = match dev.as_str() {
        "wgpu" => {
            let gpu = block_on(device::gpu()).map_err(|e| e.to_string())?;
            (gpu.device, gpu.info)
        }
        _ => device::cpu(),
    };
    let tok = ModelTokenizer::from_gguf(&Gguf::parse(&bytes).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let ids = tok.encode(&prompt, true).map_err(|e| e.to_string())?;
    let model = LoadedModel::from_gguf("m", &bytes, &device).map_err(|e| e.to_string())?;
    eprintln!(
        "loaded in {:.0} ms; prompt ids {ids:?}",
        started.elapsed().as_secs_f64() * 1e3
    );
    let body = json!({"model": "m", "prompt": prompt, "max_tokens": tokens, "temperature": 0});
    let req = completion_request(body, &model.spec()).map_err(|e| format!("{e:?}"))?;
    let t0 = Instant::now();
    let mut stream = model.complete(req).map_err(|e| format!("{e:?}"))?;
    let mut text = String::new();
    while let Some(chunk) = block_on(stream.next()) {
        let chunk = chunk.map_err(|e| format!("{e:?}"))?;
        text.extend(chunk.choices.iter().map(|c| c.text.as_str()));
    }
    eprintln!("generated in {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    println!("{text}");
    Ok(())
}

#[cfg(target_arch = "wasm32")]
fn main() {}
