//! `cargo xtask bench`: SmolLM2-135M-Instruct as GGUF Q4_1 (the default model) and as the Q4_K_M mix that
//! `cargo xtask fetch` derives from it (K-quants: Q4_K/Q6_K, with Q5_0/Q8_0 where rows are not whole
//! 256-element super-blocks), each through the same workload on
//!
//! - kiln in headless Chromium on WebGPU (SwiftShader) and on its CPU backend (`device: 'cpu'`);
//! - wllama (`@wllama/wllama`, llama.cpp in wasm; its WebGPU path where it runs, else its CPU path), same
//!   file, same browser, same token ids;
//! - kiln natively, on wgpu (Vulkan: lavapipe on a machine without a GPU) and on the CPU backend (`flex`),
//!   through `examples/bench.rs`.
//!
//! `--models gemma3` adds Gemma 3 270M (base) as llama.cpp's own Q4_K_M file (`data::GEMMA3`, 253 MB, a
//! 262,144-token vocabulary); it is not in the default list, which keeps the default run's length.
//!
//! The workload: prompts of exactly N token ids (the start of `bench/text.txt`, Lewis Carroll's *Alice's
//! Adventures in Wonderland*, public domain, under the model's tokenizer), `--tokens` greedy tokens with the
//! end-of-generation ids biased to -100 so every run decodes them all, streamed; `--warmup` runs, then
//! `--runs` measured ones whose medians are reported: time to first token (the first streamed chunk),
//! prefill tok/s (prompt tokens / TTFT), decode tok/s (tokens after the first / time after the first chunk).
//! Cold load is timed once per configuration (a fresh browser context; a fresh process natively). Peak memory
//! is the wasm memory's size after the runs (it never shrinks) in the browser, peak RSS natively. Package
//! sizes are raw and brotli (node's zlib). Beside memory: the weights' bytes as kiln holds them on its device
//! (quantized blocks packed), and on a GPU the bytes its allocator holds after the runs (weights, KV cache,
//! activations).
//!
//! Prints a table and writes everything (every run, every median) to `target/bench/bench.json`. Nothing
//! asserts on timings.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::{cargo, data, pkg, run, setup};

pub const USAGE: &str = "  bench   kiln (browser WebGPU + CPU, native wgpu + flex) vs wllama on SmolLM2 Q4_1 and Q4_K_M (Gemma 3 on request); tables + target/bench/bench.json
          --runs N (5) --warmup N (1) --tokens N (128) --prompts 64,512   --models q4_1,q4_k_m (default) [,gemma3]
          gemma3: Gemma 3 270M Q4_K_M, the real llama.cpp file (253 MB); not in the default list, e.g.
            --models gemma3 --only kiln-cpu,wllama --wllama cpu   (the browser CPU paths, peak wasm memory)
          --only kiln-webgpu,kiln-cpu,wllama,native-wgpu,native-flex,kiln-chat   --wllama auto|webgpu|cpu   --threads N (1)
          kiln-chat: a 10-turn chat (~60-token user turns, 64-token answers) in Chromium on the CPU backend,
            each turn's TTFT with and without the prefix cache (SmolLM2 Q4_1 only)
          --no-opt (package without wasm-opt)   --no-build (use pkg/ as it is)   --release (native in release)";

/// The models by `--models` name: the default model, the Q4_K_M file `fetch` derives from it, and Gemma 3
/// 270M as llama.cpp's own Q4_K_M file.
const MODELS: [(&str, &str); 3] = [
    ("q4_1", data::SMOLLM2),
    ("q4_k_m", data::SMOLLM2_Q4KM),
    ("gemma3", data::GEMMA3),
];
/// `--models` when it is not given: Gemma 3 (2.6x the bytes, 262k vocabulary) is asked for by name, so the
/// default run keeps its length.
const DEFAULT_MODELS: [&str; 2] = ["q4_1", "q4_k_m"];
const ALL: [&str; 5] = ["kiln-webgpu", "kiln-cpu", "wllama", "native-wgpu", "native-flex"];
/// The multi-turn chat workload (`bench_chat`), beside the table's columns.
const CHAT: &str = "kiln-chat";

struct Opts {
    runs: usize,
    warmup: usize,
    tokens: usize,
    prompts: Vec<usize>,
    models: Vec<String>,
    only: Vec<String>,
    wllama: String,
    threads: usize,
    opt: pkg::Opt,
    build: bool,
    release: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        runs: 5,
        warmup: 1,
        tokens: 128,
        prompts: vec![64, 512],
        models: DEFAULT_MODELS.iter().map(|m| m.to_string()).collect(),
        only: ALL.iter().chain(&[CHAT]).map(|s| s.to_string()).collect(),
        wllama: "auto".into(),
        threads: 1,
        opt: pkg::Opt::Release,
        build: true,
        release: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: &str| v.trim().parse::<usize>().map_err(|_| format!("bad number `{v}`"));
        match flag.as_str() {
            "--runs" => o.runs = num(value()?)?,
            "--warmup" => o.warmup = num(value()?)?,
            "--tokens" => o.tokens = num(value()?)?,
            "--prompts" => o.prompts = value()?.split(',').map(num).collect::<Result<_, _>>()?,
            "--only" => o.only = value()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--models" => o.models = value()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--wllama" => o.wllama = value()?.clone(),
            "--threads" => o.threads = num(value()?)?,
            "--no-opt" => o.opt = pkg::Opt::Skip,
            "--no-build" => o.build = false,
            "--release" => o.release = true,
            _ => return Err(format!("unexpected argument `{flag}`\n{USAGE}")),
        }
    }
    if let Some(bad) = o.only.iter().find(|c| !ALL.contains(&c.as_str()) && *c != CHAT) {
        return Err(format!(
            "unknown configuration `{bad}` (one of {}, {CHAT})",
            ALL.join(", ")
        ));
    }
    if let Some(bad) = o.models.iter().find(|m| !MODELS.iter().any(|(n, _)| n == m)) {
        return Err(format!("unknown model `{bad}` (q4_1, q4_k_m or gemma3)"));
    }
    if !["auto", "webgpu", "cpu"].contains(&o.wllama.as_str()) {
        return Err(format!("--wllama {}: auto, webgpu or cpu", o.wllama));
    }
    if o.runs == 0 || o.tokens < 2 || o.prompts.is_empty() {
        return Err("need --runs >= 1, --tokens >= 2 and at least one prompt size".into());
    }
    Ok(o)
}

pub fn bench(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let root = crate::root();
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    let out = root.join("target").join("bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if o.build && o.only.iter().any(|c| !c.starts_with("native")) {
        eprintln!("\n==> bench: the package");
        pkg::build(&tools, &root, o.opt)?;
    }
    let mut reports = Vec::new();
    for (name, file) in MODELS.iter().filter(|(n, _)| o.models.iter().any(|m| m == n)) {
        eprintln!("\n==> bench: model {name} ({file})");
        let (report, table) = bench_model(&o, &root, &cache, &out, file)?;
        reports.push(json!({ "name": name, "report": report }));
        println!("\n{name}: {file}\n{table}");
    }
    let path = out.join("bench.json");
    write_json(&path, &json!({ "models": reports }))?;
    println!("written: {}", path.display());
    Ok(())
}

/// The whole workload on one model file (`file`, relative to the cache): the report and its table.
fn bench_model(
    o: &Opts,
    root: &Path,
    cache: &Path,
    out: &Path,
    file: &str,
) -> Result<(Value, String), String> {
    let model = cache.join(file);
    let wants = |c: &str| o.only.iter().any(|x| x == c);

    // The prompts, under the model's own tokenizer (kiln's, natively).
    eprintln!(
        "\n==> bench: the prompts ({:?} tokens of bench/text.txt)",
        o.prompts
    );
    let prompts = out.join("prompts.json");
    let sizes = o
        .prompts
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    run(example(o, root)
        .arg("--model")
        .arg(&model)
        .arg("--tokenize")
        .arg(root.join("bench").join("text.txt"))
        .args(["--sizes", &sizes, "--out"])
        .arg(&prompts))?;

    let mut results = serde_json::Map::new();
    for (config, device) in [("native-wgpu", "wgpu"), ("native-flex", "flex")] {
        if !wants(config) {
            continue;
        }
        eprintln!("\n==> bench: kiln native {device}");
        let file = out.join(format!("{config}.json"));
        let _ = std::fs::remove_file(&file);
        let status = run(example(o, root)
            .arg("--model")
            .arg(&model)
            .args(["--device", device, "--prompts"])
            .arg(&prompts)
            .args(["--tokens", &o.tokens.to_string()])
            .args(["--runs", &o.runs.to_string()])
            .args(["--warmup", &o.warmup.to_string(), "--out"])
            .arg(&file));
        let value = status
            .and_then(|()| read_json(&file))
            .unwrap_or_else(|e| json!({ "error": e }));
        results.insert(config.into(), value);
    }

    let browser: Vec<&str> = ["kiln-webgpu", "kiln-cpu", "wllama", CHAT]
        .into_iter()
        .filter(|c| wants(c) && (*c != CHAT || file == data::SMOLLM2))
        .collect();
    let mut environment = json!({});
    let mut packages = json!({});
    if !browser.is_empty() {
        eprintln!("\n==> bench: headless Chromium ({})", browser.join(", "));
        let config = out.join("browser-config.json");
        let browser_out = out.join("browser.json");
        let _ = std::fs::remove_file(&browser_out);
        let spec = json!({
            "root": root, "cache": cache, "model": file, "prompts": prompts, "tokens": o.tokens,
            "runs": o.runs, "warmup": o.warmup, "configs": browser, "wllama": o.wllama, "threads": o.threads,
            "chat_turns": crate::bench_chat::TURNS, "chat_tokens": crate::bench_chat::TOKENS,
        });
        write_json(&config, &spec)?;
        let status = run(Command::new("node")
            .current_dir(root)
            .arg("bench/bench.mjs")
            .arg(&config)
            .arg(&browser_out));
        match status.and_then(|()| read_json(&browser_out)) {
            Ok(mut v) => {
                if let Some(Value::Object(r)) = v.get_mut("results").map(Value::take) {
                    results.extend(r);
                }
                packages = v["packages"].take();
                environment = json!({ "chromium": v["chromium"], "wllama": v["wllama_version"] });
            }
            Err(e) => {
                for c in &browser {
                    results.insert(c.to_string(), json!({ "error": e }));
                }
            }
        }
    }

    let chat = results.remove(CHAT);
    let columns: Vec<Value> = ALL
        .iter()
        .filter(|c| wants(c))
        .map(|c| column(c, results.remove(*c).unwrap_or(Value::Null), &packages))
        .collect();
    let report = json!({
        "model": file,
        "workload": { "prompt_tokens": o.prompts, "max_tokens": o.tokens, "greedy": true, "eos_ignored": true,
                      "warmup": o.warmup, "runs": o.runs, "statistic": "median" },
        "environment": environment,
        "packages": packages,
        "columns": columns,
        "chat": chat,
    });
    let mut table = table(&report, &o.prompts);
    if let Some(chat) = &chat {
        table += &crate::bench_chat::table(chat);
    }
    Ok((report, table))
}

/// `cargo run --example bench --` in the dev profile (or release), from the workspace root.
fn example(o: &Opts, root: &Path) -> Command {
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args(["run", "--quiet", "--package", "kiln", "--example", "bench"]);
    if o.release {
        cmd.arg("--release");
    }
    cmd.arg("--");
    cmd
}

pub fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())? + "\n";
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// One column of the report: the raw result of a configuration with the medians of its runs.
fn column(key: &str, mut raw: Value, packages: &Value) -> Value {
    let backend = raw["device"]["backend"].as_str().unwrap_or("?").to_string();
    let name = match key {
        "kiln-webgpu" => "kiln WebGPU (browser)".to_string(),
        "kiln-cpu" => "kiln CPU (browser)".to_string(),
        "wllama" => format!("wllama {backend} (browser)"),
        "native-wgpu" => "kiln native wgpu".to_string(),
        _ => "kiln native flex".to_string(),
    };
    if raw.is_null() {
        raw = json!({ "error": "not run" });
    }
    if let Some(Value::Object(prompts)) = raw.get_mut("prompts") {
        for p in prompts.values_mut() {
            let runs = p["runs"].as_array().cloned().unwrap_or_default();
            let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            let ttft = median(runs.iter().map(|r| f(r, "ttft_ms")).collect());
            let prefill = median(
                runs.iter()
                    .map(|r| f(r, "prompt_tokens") / (f(r, "ttft_ms") / 1e3))
                    .collect(),
            );
            let decode = median(
                runs.iter()
                    .map(|r| (f(r, "completion_tokens") - 1.0) / (f(r, "decode_ms") / 1e3))
                    .collect(),
            );
            let tokens = median(runs.iter().map(|r| f(r, "completion_tokens")).collect());
            // kiln's device counters (`engine::runtime::counters`), per decode step.
            let per_step = |k: &str| {
                median(
                    runs.iter()
                        .filter(|r| r["decode_counts"].is_object())
                        .map(|r| r["decode_counts"][k].as_f64().unwrap_or(f64::NAN) / f(r, "decode_steps"))
                        .collect(),
                )
            };
            p["median"] = json!({ "ttft_ms": ttft, "prefill_tok_s": prefill, "decode_tok_s": decode,
                                  "completion_tokens": tokens,
                                  "dispatches_per_step": per_step("dispatches"),
                                  "read_bytes_per_step": per_step("read_bytes") });
            if let Some(last) = runs
                .last()
                .filter(|r| r["decode_counts"]["by_kernel"].is_object())
            {
                let steps = f(last, "decode_steps");
                let kernels: serde_json::Map<String, Value> = last["decode_counts"]["by_kernel"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, n)| (k.clone(), json!(n.as_f64().unwrap_or(0.0) / steps)))
                    .collect();
                p["dispatches_per_step_by_kernel"] = Value::Object(kernels);
            }
        }
    }
    let (memory, memory_kind) = if key.starts_with("native") {
        (raw["peak_rss_bytes"].clone(), "peak RSS of the process")
    } else {
        (raw["wasm_memory_bytes"].clone(), "wasm memory after the runs")
    };
    let package = match key {
        "kiln-webgpu" | "kiln-cpu" => packages["kiln"].clone(),
        "wllama" => packages["wllama"].clone(),
        _ => Value::Null,
    };
    json!({ "key": key, "name": name, "memory_bytes": memory, "memory_kind": memory_kind,
            "package": package, "result": raw })
}

fn table(report: &Value, prompts: &[usize]) -> String {
    let cols = report["columns"].as_array().cloned().unwrap_or_default();
    let num = |v: &Value, digits: usize| v.as_f64().map_or("-".to_string(), |x| format!("{x:.digits$}"));
    let mib = |v: &Value| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{:.1}", x / 1048576.0))
    };
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let cell = |c: &Value, f: &dyn Fn(&Value) -> String| {
        if c["result"]["error"].is_string() {
            "error".to_string()
        } else {
            f(c)
        }
    };
    rows.push((
        "cold load (ms)".into(),
        cols.iter()
            .map(|c| cell(c, &|c| num(&c["result"]["load_ms"], 0)))
            .collect(),
    ));
    for p in prompts {
        let m = |c: &Value, k: &str, d: usize| num(&c["result"]["prompts"][p.to_string()]["median"][k], d);
        rows.push((
            format!("TTFT, {p}-token prompt (ms)"),
            cols.iter().map(|c| cell(c, &|c| m(c, "ttft_ms", 0))).collect(),
        ));
        rows.push((
            format!("prefill, {p}-token prompt (tok/s)"),
            cols.iter()
                .map(|c| cell(c, &|c| m(c, "prefill_tok_s", 1)))
                .collect(),
        ));
        rows.push((
            format!("decode, {p}-token prompt (tok/s)"),
            cols.iter()
                .map(|c| cell(c, &|c| m(c, "decode_tok_s", 2)))
                .collect(),
        ));
        rows.push((
            format!("dispatches per decode step, {p}-token prompt"),
            cols.iter()
                .map(|c| cell(c, &|c| m(c, "dispatches_per_step", 1)))
                .collect(),
        ));
        rows.push((
            format!("bytes read back per decode step, {p}-token prompt"),
            cols.iter()
                .map(|c| cell(c, &|c| m(c, "read_bytes_per_step", 0)))
                .collect(),
        ));
    }
    rows.push((
        "peak memory (MiB; wasm / native RSS)".into(),
        cols.iter()
            .map(|c| cell(c, &|c| mib(&c["memory_bytes"])))
            .collect(),
    ));
    rows.push((
        "weights on the device (MiB)".into(),
        cols.iter()
            .map(|c| cell(c, &|c| mib(&c["result"]["model_memory"]["weightBytes"])))
            .collect(),
    ));
    rows.push((
        "device buffers in use (MiB)".into(),
        cols.iter()
            .map(|c| cell(c, &|c| mib(&c["result"]["model_memory"]["deviceBytesInUse"])))
            .collect(),
    ));
    rows.push((
        "package raw (MiB)".into(),
        cols.iter().map(|c| mib(&c["package"]["raw"])).collect(),
    ));
    rows.push((
        "package brotli (MiB)".into(),
        cols.iter().map(|c| mib(&c["package"]["brotli"])).collect(),
    ));
    let headers: Vec<String> = cols
        .iter()
        .map(|c| c["name"].as_str().unwrap_or("?").to_string())
        .collect();
    let first = rows
        .iter()
        .map(|r| r.0.len())
        .max()
        .unwrap_or(0)
        .max("metric".len());
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| rows.iter().map(|r| r.1[i].len()).max().unwrap_or(0).max(h.len()))
        .collect();
    let mut s = format!("{:first$}", "metric");
    for (h, w) in headers.iter().zip(&widths) {
        s += &format!(" | {h:>w$}");
    }
    s += "\n";
    s += &"-".repeat(s.len() - 1);
    s += "\n";
    for (label, cells) in &rows {
        s += &format!("{label:first$}");
        for (v, w) in cells.iter().zip(&widths) {
            s += &format!(" | {v:>w$}");
        }
        s += "\n";
    }
    for c in &cols {
        if let Some(e) = c["result"]["error"].as_str() {
            s += &format!("{}: error: {e}\n", c["name"].as_str().unwrap_or("?"));
        }
        if let Some(e) = c["result"]["webgpu_error"].as_str() {
            s += &format!(
                "{}: its WebGPU path failed: {e}\n",
                c["name"].as_str().unwrap_or("?")
            );
        }
    }
    s
}
