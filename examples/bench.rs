//! kiln natively, for `cargo xtask bench` (which runs it; see `xtask/src/bench.rs`).
//!
//! Two modes:
//!
//! - `bench --model M.gguf --tokenize TEXT --sizes 64,512 --out prompts.json`: the prompts of the benchmark,
//!   the first N token ids of TEXT under the model's own tokenizer (no special tokens added), with the ids
//!   that end a generation (EOS, end-of-turn), which the benchmark biases away so every run decodes the full
//!   count. The browser harness (`bench/`) feeds the same ids to kiln and wllama.
//! - `bench --model M.gguf --device flex|wgpu --prompts prompts.json --tokens 128 --runs 5 --warmup 1 --out
//!   result.json [--fused off] [--select off|greedy|on]`: loads the model (timed; on wgpu the fused decode
//!   step can be turned off and the device-side selection of the sampler's candidates chosen, to measure
//!   without them), then for each prompt runs `warmup` + `runs` greedy streamed
//!   completions of `tokens` tokens and records each measured run's time to first token, completion tokens
//!   and the time from the first to the last chunk, and what the prefill and the decode steps cost the
//!   device (`engine::runtime::counters`: dispatches per kernel, reads and bytes read back). Medians are taken by
//!   the caller.
//!
//! Timings only: nothing here asserts on them.

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::time::Instant;

    use kiln::api::completion_request;
    use kiln::engine::LoadedModel;
    use kiln::engine::runtime::{counters, device};
    use kiln::loader::Gguf;
    use kiln::model::SelectOnDevice;
    use kiln::tokenizer::ModelTokenizer;
    use pollster::block_on;
    use serde_json::{Value, json};

    type Result<T> = std::result::Result<T, String>;

    struct Args {
        model: String,
        device: String,
        tokenize: Option<String>,
        sizes: Vec<usize>,
        prompts: Option<String>,
        tokens: usize,
        runs: usize,
        warmup: usize,
        out: Option<String>,
        /// The fused decode step and device-side selection (both on by default; off to measure without).
        fused: bool,
        select: Option<SelectOnDevice>,
    }

    fn parse() -> Result<Args> {
        let mut a = Args {
            model: String::new(),
            device: "flex".into(),
            tokenize: None,
            sizes: vec![64, 512],
            prompts: None,
            tokens: 128,
            runs: 5,
            warmup: 1,
            out: None,
            fused: true,
            select: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or(format!("{flag} needs a value"));
            let num = |v: String| v.parse::<usize>().map_err(|_| format!("bad number `{v}`"));
            match flag.as_str() {
                "--model" => a.model = value()?,
                "--device" => a.device = value()?,
                "--tokenize" => a.tokenize = Some(value()?),
                "--sizes" => {
                    a.sizes = value()?
                        .split(',')
                        .map(|s| num(s.trim().to_string()))
                        .collect::<Result<_>>()?
                }
                "--prompts" => a.prompts = Some(value()?),
                "--tokens" => a.tokens = num(value()?)?,
                "--runs" => a.runs = num(value()?)?,
                "--warmup" => a.warmup = num(value()?)?,
                "--out" => a.out = Some(value()?),
                "--fused" => a.fused = value()? != "off",
                "--select" => {
                    a.select = Some(match value()?.as_str() {
                        "off" => SelectOnDevice::Never,
                        "greedy" => SelectOnDevice::Greedy,
                        "on" => SelectOnDevice::Always,
                        other => return Err(format!("--select {other}: off, greedy or on")),
                    })
                }
                _ => return Err(format!("unknown flag `{flag}`")),
            }
        }
        if a.model.is_empty() {
            return Err("--model is required".into());
        }
        Ok(a)
    }

    fn read(path: &str) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| format!("{path}: {e}"))
    }

    fn write(out: &Option<String>, value: &Value) -> Result<()> {
        let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())? + "\n";
        match out {
            Some(path) => std::fs::write(path, text).map_err(|e| format!("{path}: {e}")),
            None => {
                print!("{text}");
                Ok(())
            }
        }
    }

    /// The prompts: the first `size` token ids of the text, for each size, and the ids that end a generation.
    fn tokenize(a: &Args, text_path: &str) -> Result<()> {
        let bytes = read(&a.model)?;
        let text = String::from_utf8(read(text_path)?).map_err(|e| format!("{text_path}: {e}"))?;
        let file = Gguf::parse(&bytes).map_err(|e| e.to_string())?;
        let tok = ModelTokenizer::from_gguf(&file).map_err(|e| e.to_string())?;
        let ids = tok.encode(&text, false).map_err(|e| e.to_string())?;
        let mut stop: Vec<u32> = tok.stop_ids.clone();
        // ChatML's markers too, where the vocabulary has them: a completion of plain text must not end a turn.
        for special in [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|eot_id|>",
            "<|end_of_text|>",
        ] {
            if let Some(id) = tok.inner.token_to_id(special) {
                stop.push(id);
            }
        }
        stop.sort_unstable();
        stop.dedup();
        let (mut prompts, mut texts) = (serde_json::Map::new(), serde_json::Map::new());
        for &n in &a.sizes {
            if ids.len() < n {
                return Err(format!("{text_path} has {} tokens, fewer than {n}", ids.len()));
            }
            prompts.insert(n.to_string(), json!(&ids[..n]));
            // For engines that take text only: the same tokens as text (it tokenizes back to them).
            let text = tok.decode(&ids[..n], false).map_err(|e| e.to_string())?;
            texts.insert(n.to_string(), json!(text));
        }
        eprintln!(
            "bench: {} tokens in {text_path}; prompts of {:?}; end ids {stop:?}",
            ids.len(),
            a.sizes
        );
        write(
            &a.out,
            &json!({ "prompts": prompts, "texts": texts, "stop_ids": stop }),
        )
    }

    /// Peak resident set size of this process (`VmHWM`), in bytes.
    fn peak_rss() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    fn bench(a: &Args, prompts_path: &str) -> Result<()> {
        let spec: Value = serde_json::from_slice(&read(prompts_path)?).map_err(|e| e.to_string())?;
        let bias: serde_json::Map<String, Value> = spec["stop_ids"]
            .as_array()
            .ok_or("prompts file without stop_ids")?
            .iter()
            .map(|id| (id.to_string(), json!(-100)))
            .collect();
        let prompts = spec["prompts"]
            .as_object()
            .ok_or("prompts file without prompts")?;

        let started = Instant::now();
        let bytes = read(&a.model)?;
        let (dev, info) = match a.device.as_str() {
            "flex" | "cpu" => device::cpu(),
            "wgpu" | "gpu" => {
                let gpu = block_on(device::gpu()).map_err(|e| e.to_string())?;
                (gpu.device, gpu.info)
            }
            other => return Err(format!("unknown device `{other}` (flex or wgpu)")),
        };
        // Every run prefills its prompt cold: the same prompt runs several times, and the prefix cache
        // would serve the later runs (the chat workload of `cargo xtask bench` measures reuse).
        let mut model = LoadedModel::from_gguf("bench", &bytes, &dev)
            .and_then(|m| m.with_prefix_cache(0))
            .map_err(|e| e.to_string())?;
        model.decoder.set_fused(a.fused);
        if let Some(select) = a.select {
            model.decoder.set_select_on_device(select);
        }
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        drop(bytes);
        eprintln!(
            "bench: kiln native {} loaded in {load_ms:.0} ms ({info:?})",
            a.device
        );

        // Dispatches and reads, counted over every run (see `engine::runtime::counters`).
        let watch = counters::watch();
        let mut results = serde_json::Map::new();
        for (size, ids) in prompts {
            let mut runs = Vec::new();
            for i in 0..a.warmup + a.runs {
                let warm = i < a.warmup;
                let body = json!({
                    "model": "bench", "prompt": ids, "max_tokens": a.tokens, "temperature": 0,
                    "logit_bias": bias, "stream": true, "stream_options": { "include_usage": true },
                });
                let req = completion_request(body, &model.spec()).map_err(|e| format!("{e:?}"))?;
                let t0 = Instant::now();
                let mut stream = model.complete(req).map_err(|e| format!("{e:?}"))?;
                let (mut first, mut last, mut usage) = (None, None, None);
                let (start, mut at_first, mut at_last) = (watch.counts(), None, None);
                let mut text = String::new();
                while let Some(chunk) = block_on(stream.next()) {
                    let chunk = chunk.map_err(|e| format!("{e:?}"))?;
                    let now = t0.elapsed().as_secs_f64() * 1e3;
                    if !chunk.choices.is_empty() {
                        first.get_or_insert(now);
                        last = Some(now);
                        at_first.get_or_insert_with(|| watch.counts());
                        at_last = Some(watch.counts());
                        text.extend(chunk.choices.iter().map(|c| c.text.as_str()));
                    }
                    if let Some(u) = chunk.usage {
                        usage = Some(u);
                    }
                }
                let (first, last) = (first.ok_or("no chunk")?, last.unwrap_or_default());
                let usage = usage.ok_or("no usage chunk")?;
                let (at_first, at_last) = (at_first.ok_or("no chunk")?, at_last.ok_or("no chunk")?);
                // The decode steps are those between the first chunk and the last (one token each).
                let run = json!({
                    "ttft_ms": first, "total_ms": last, "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens, "decode_ms": last - first,
                    "prefill_counts": at_first.since(&start),
                    "decode_counts": at_last.since(&at_first),
                    "decode_steps": usage.completion_tokens.saturating_sub(1),
                });
                eprintln!(
                    "bench: kiln native {} prompt {size} {} {}: ttft {first:.0} ms, {} tokens in {last:.0} ms",
                    a.device,
                    if warm { "warm-up" } else { "run" },
                    if warm { i + 1 } else { i + 1 - a.warmup },
                    usage.completion_tokens
                );
                if !warm {
                    runs.push(run);
                }
                if i + 1 == a.warmup + a.runs {
                    results.insert(size.clone(), json!({ "runs": runs.clone(), "text": text }));
                }
            }
        }
        write(
            &a.out,
            &json!({
                "device": info, "load_ms": load_ms, "peak_rss_bytes": peak_rss(), "prompts": results,
                "model_memory": model.memory(), "layers": model.decoder.config.num_layers,
            }),
        )
    }

    pub fn main() -> Result<()> {
        let a = parse()?;
        match (&a.tokenize, &a.prompts) {
            (Some(text), _) => tokenize(&a, text),
            (None, Some(prompts)) => bench(&a, prompts),
            (None, None) => Err("give --tokenize TEXT or --prompts FILE".into()),
        }
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(not(target_arch = "wasm32"))]
    if let Err(e) = native::main() {
        eprintln!("bench: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
