//! `cargo xtask bench --families`: the decoder families of 2026 (Qwen3.5's Gated DeltaNet hybrid, Gemma 4's
//! per-layer embeddings and shared KV, LFM2's short convolutions) at their real sizes, kiln beside llama.cpp
//! (wllama) in the same headless Chromium, on random-weight GGUF files of real shapes (no checkpoint is
//! fetchable here): Qwen3.5-0.8B, LFM2-350M, the dense Qwen3-0.6B for the memory comparison, and Gemma-4-E2B
//! (text) with its vocabulary cut to 98,304 and at its real size (which neither engine loads in Chromium here:
//! its rows record why), as `tests/fixtures/make_family_bench_files.py` writes them.
//!
//! Steps: the tools and the data cache as `bench` has them; the Python packages gguf-py needs (Debian's
//! numpy, yaml, tqdm, requests) where missing; gguf-py itself from the llama-cpp-python sdist of the data
//! cache (`llama.cpp/gguf-py`, whose `models/` holds the vocabularies the files copy); the files of the
//! models asked for into `$KILN_CACHE/family-bench/` unless they are there (about 6 GB in all, Gemma 4's
//! 2.96 + 1.87 GB of it; minutes); the package (unless `--no-build`); then `bench/families.mjs`, which prints the
//! table and writes `target/bench/families.json`. Arguments after `--` go to `bench/families.mjs` (`--models`,
//! `--configs`, `--runs`, …, see its header; `--models` also picks the files written here).
//!
//! Natively, before the browser (unless `--no-native`): kiln on wgpu (Vulkan: lavapipe here, a CPU
//! emulation like SwiftShader) through `examples/bench.rs` on the same files, one warm-up and one run of a
//! 128-token prompt and 16 tokens, for the dispatches a decode step launches (and per layer) beside its
//! time; `target/bench/families-native.json`.
//!
//! What it measures, per model: prefill tok/s (a 128-token prompt of token ids) and decode tok/s (32 greedy
//! tokens, end-of-generation ids biased away) for kiln's CPU backend at 1 and 2 threads and llama.cpp's CPU
//! path (wllama) at 1 and 2 threads, paired; one short kiln WebGPU run (SwiftShader here: a correctness
//! device, not a speed one); and kiln's cache bytes per 1,000 positions of context and its fixed recurrent
//! state, measured from the prefix cache's kept states, against the dense model. Timings only: nothing
//! asserts on them.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::bench::{read_json, write_json};
use crate::{cargo, data, pkg, run, setup};

pub const USAGE: &str = "  bench --families   2026 families at real sizes (Qwen3.5-0.8B, Gemma-4-E2B, LFM2-350M; dense Qwen3-0.6B):
          prefill/decode tok/s, kiln (CPU 1/2 threads, WebGPU) vs wllama (CPU 1/2 threads), and kiln's KV/state bytes per
          1k tokens; random-weight files written into the data cache; table + target/bench/families.json
          natively first: kiln on wgpu (lavapipe), dispatches per decode step; target/bench/families-native.json
          [--no-build] [--no-opt] [--no-native] [--native-only] [-- bench/families.mjs options]";

/// The models and their files, as `make_family_bench_files.py` names them (`--only` takes the keys).
const MODELS: [(&str, &str); 5] = [
    ("qwen35", "qwen35-0.8b-bench.gguf"),
    ("lfm2", "lfm2-350m-bench.gguf"),
    ("qwen3", "qwen3-0.6b-bench.gguf"),
    ("gemma4-98k", "gemma4-e2b-vocab98k-bench.gguf"),
    ("gemma4", "gemma4-e2b-bench.gguf"),
];

/// What `bench/families.mjs` runs without `--models`.
const DEFAULT_MODELS: &str = "qwen35,lfm2,qwen3,gemma4-98k,gemma4";

pub fn bench_families(args: &[String]) -> Result<(), String> {
    let (ours, theirs) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let (mut build, mut opt) = (true, pkg::Opt::Release);
    let (mut native_too, mut browser) = (true, true);
    for a in ours {
        match a.as_str() {
            "--families" => {}
            "--no-build" => build = false,
            "--no-opt" => opt = pkg::Opt::Skip,
            "--no-native" => native_too = false,
            "--native-only" => browser = false,
            other => return Err(format!("unexpected argument `{other}`\n{USAGE}")),
        }
    }
    // The models bench/families.mjs will run: its `--models`, else its default.
    let wanted = theirs
        .iter()
        .position(|a| a == "--models")
        .and_then(|i| theirs.get(i + 1))
        .map_or(DEFAULT_MODELS, String::as_str);
    let root = crate::root();
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    let dir = cache.join("family-bench");
    write_missing(
        &root,
        &cache,
        "tests/fixtures/make_family_bench_files.py",
        &dir,
        &MODELS,
        wanted,
    )?;
    if native_too {
        let models: Vec<(&str, &str)> = MODELS
            .iter()
            .copied()
            .filter(|(key, _)| wanted.split(',').any(|w| w == *key))
            .collect();
        native(&root, &dir, &models)?;
    }
    if !browser {
        return Ok(());
    }
    if build {
        eprintln!("\n==> bench --families: the package");
        pkg::build(&tools, &root, opt)?;
    }
    eprintln!("\n==> bench --families: headless Chromium");
    run(Command::new("node")
        .current_dir(&root)
        .arg("bench/families.mjs")
        .arg("--dir")
        .arg(&dir)
        .arg("--out")
        .arg(root.join("target").join("bench").join("families.json"))
        .args(theirs))
}

/// Writes into `dir`, with `script` (a `tests/fixtures/make_*_files.py` that takes `DIR --vocab-dir V --only
/// KEYS`) and gguf-py from the data cache's llama.cpp sources, the files of the `wanted` models (keys,
/// comma-separated) of `models` (key, file name) that are not there yet.
pub fn write_missing(
    root: &Path,
    cache: &Path,
    script: &str,
    dir: &Path,
    models: &[(&str, &str)],
    wanted: &str,
) -> Result<(), String> {
    let missing: Vec<&str> = models
        .iter()
        .filter(|(key, file)| wanted.split(',').any(|w| w == *key) && !dir.join(file).is_file())
        .map(|(key, _)| *key)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut python = crate::bench_vision::gguf_python(root, cache)?;
    eprintln!(
        "\n==> {script}: writing the random-weight files of {} into {}",
        missing.join(", "),
        dir.display()
    );
    run(python
        .arg(script)
        .arg(dir)
        .arg("--vocab-dir")
        .arg(cache.join("llama.cpp").join("models"))
        .arg("--only")
        .arg(missing.join(",")))
}

/// kiln natively on wgpu for each of `models` (key, file in `dir`): `examples/bench.rs`, one warm-up and one
/// run of a 128-token prompt of `bench/text.txt` and 16 greedy tokens; prints prefill and decode tok/s and
/// the dispatches per decode step (and per layer), and writes `target/bench/families-native.json`.
fn native(root: &Path, dir: &Path, models: &[(&str, &str)]) -> Result<(), String> {
    let out = root.join("target").join("bench").join("families-native");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let example = || {
        let mut cmd = cargo();
        cmd.current_dir(root)
            .args(["run", "--quiet", "--package", "kiln", "--example", "bench", "--"]);
        cmd
    };
    let mut report = serde_json::Map::new();
    let mut rows = Vec::new();
    for (key, file) in models {
        eprintln!("\n==> bench --families: kiln native wgpu, {key}");
        let model = dir.join(file);
        let prompts = out.join(format!("{key}-prompts.json"));
        let result = out.join(format!("{key}.json"));
        let _ = std::fs::remove_file(&result);
        let status = run(example()
            .arg("--model")
            .arg(&model)
            .arg("--tokenize")
            .arg(root.join("bench").join("text.txt"))
            .args(["--sizes", "128", "--out"])
            .arg(&prompts))
        .and_then(|()| {
            run(example()
                .arg("--model")
                .arg(&model)
                .args(["--device", "wgpu", "--prompts"])
                .arg(&prompts)
                .args(["--tokens", "16", "--runs", "1", "--warmup", "1", "--out"])
                .arg(&result))
        });
        let value = status
            .and_then(|()| read_json(&result))
            .unwrap_or_else(|e| json!({ "error": e }));
        rows.push(row(key, &value));
        report.insert((*key).to_owned(), value);
    }
    let path = root.join("target").join("bench").join("families-native.json");
    write_json(&path, &Value::Object(report))?;
    eprintln!(
        "\nkiln native wgpu (lavapipe: a CPU emulation of Vulkan), 128-token prompt + 16 tokens, one run after one warm-up:"
    );
    eprintln!(
        "model      | layers | prefill tok/s | decode tok/s | dispatches / decode step | per layer | top kernels per step"
    );
    for r in rows {
        eprintln!("{r}");
    }
    eprintln!("(written to {})", path.display());
    Ok(())
}

/// One table row of a native result.
fn row(key: &str, v: &Value) -> String {
    if let Some(e) = v.get("error") {
        return format!(
            "{key:<10} | error: {}",
            e.as_str().unwrap_or("?").lines().next().unwrap_or("")
        );
    }
    let run = &v["prompts"]["128"]["runs"][0];
    let num = |x: &Value| x.as_f64().unwrap_or(f64::NAN);
    let (prompt, ttft) = (num(&run["prompt_tokens"]), num(&run["ttft_ms"]));
    let (steps, decode_ms) = (num(&run["decode_steps"]), num(&run["decode_ms"]));
    let dispatches = num(&run["decode_counts"]["dispatches"]) / steps;
    let layers = v["layers"].as_f64().unwrap_or(f64::NAN);
    let mut kernels: Vec<(String, f64)> = run["decode_counts"]["by_kernel"]
        .as_object()
        .map(|m| m.iter().map(|(k, n)| (k.clone(), num(n) / steps)).collect())
        .unwrap_or_default();
    kernels.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> = kernels
        .iter()
        .take(4)
        .map(|(k, n)| format!("{} {n:.0}", k.rsplit("::").next().unwrap_or(k)))
        .collect();
    format!(
        "{key:<10} | {layers:>6} | {:>13.1} | {:>12.2} | {dispatches:>24.0} | {:>9.1} | {}",
        prompt / ttft * 1e3,
        steps / decode_ms * 1e3,
        dispatches / layers,
        top.join(", ")
    )
}
