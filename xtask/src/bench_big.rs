//! `cargo xtask bench --big`: 7–8B models in a tab (issue 42). Llama 3.2 1B, Llama 3.2 3B and Llama 3.1 8B in
//! llama.cpp's Q4_K_M mix (0.81, 2.02 and 4.92 GB; the 8B file has tensors past 4 GiB), random weights of
//! the real shapes as `tests/fixtures/make_llama_shape_files.py` writes them (no checkpoint is fetchable
//! here), loaded in headless Chromium by kiln on WebGPU (SwiftShader here) and on its CPU backend, and by
//! wllama (llama.cpp in wasm) beside it.
//!
//! Steps: the tools and the data cache as `bench` has them; the files of the models asked for into
//! `$KILN_CACHE/big-shapes/` (or `--dir`) unless they are there (gguf-py from the data cache's llama.cpp
//! sources, Llama 3's vocabulary from its `models/`; about 7.7 GB, a minute or two); the package (unless
//! `--no-build` or `--pkg`); then `bench/big.mjs`, which prints the tables, writes `target/bench/big.json`
//! and exits non-zero when a kiln WebGPU load fails or its wasm memory grows past the largest tensor + 64
//! MiB. Every other argument (`--models 1b,3b,8b`, `--configs kiln-webgpu,kiln-cpu,wllama-cpu`,
//! `--timeout S`, `--dir DIR`, `--out OUT.json`, `--pkg DIR`, `--context N`; after a `--` or not) goes to
//! `bench/big.mjs` (see its header).
//!
//! What it measures, per file and configuration, each in a fresh browser: `Engine.inspect` (its time and
//! verdict), the load's time, the bytes downloaded, the wasm memory before and after (its peak), the
//! engine's weight and device bytes and granted context, one greedy token's time; wllama's load, worker
//! memory and token, or its error. Timings only: nothing asserts on them.
//!
//! Beside it, `node bench/big-cache.mjs [--pkg DIR]` checks the 8B file through the Cache API (a load with
//! `cache: true`, the cached bytes, then inspect and a second load from the cache alone; see its header).

use std::process::Command;

use crate::{data, pkg, run, setup};

pub const USAGE: &str = "  bench --big        7–8B models in a tab: Llama 3.2 1B / 3.2 3B / 3.1 8B Q4_K_M shapes (random weights, files
          written into the data cache's big-shapes/) in Chromium: kiln Engine.inspect and load on WebGPU and CPU
          (time, bytes downloaded, wasm memory before/after vs the largest tensor + 64 MiB, device bytes,
          context, one token) and wllama's load; table + target/bench/big.json; fails if a kiln WebGPU load
          fails or outgrows the bound
          [--no-build] [--no-opt] [--models 1b,3b,8b] [--configs kiln-webgpu,kiln-cpu,wllama-cpu]
          [--timeout S (3600 a page)] [--dir DIR] [--out OUT.json] [--pkg DIR (no build)] [--context N]";

/// The models and their files, as `make_llama_shape_files.py` names them (`--only` takes the keys).
const MODELS: [(&str, &str); 3] = [
    ("1b", "llama-3.2-1b-instruct-random-q4_k_m.gguf"),
    ("3b", "llama-3.2-3b-instruct-random-q4_k_m.gguf"),
    ("8b", "llama-3.1-8b-instruct-random-q4_k_m.gguf"),
];

/// What `bench/big.mjs` runs without `--models`.
const DEFAULT_MODELS: &str = "1b,3b,8b";

/// `bench/big.mjs`'s options that take a value (the rest of the arguments pass through as they are).
const VALUED: [&str; 7] = [
    "--models",
    "--configs",
    "--timeout",
    "--dir",
    "--out",
    "--pkg",
    "--context",
];

pub fn bench_big(args: &[String]) -> Result<(), String> {
    let (mut build, mut opt) = (true, pkg::Opt::Release);
    let mut theirs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--big" | "--" => {}
            "--no-build" => build = false,
            "--no-opt" => opt = pkg::Opt::Skip,
            _ if VALUED.contains(&a) => {
                let value = args
                    .get(i + 1)
                    .ok_or_else(|| format!("`{a}` takes a value\n{USAGE}"))?;
                theirs.extend([a.to_owned(), value.clone()]);
                i += 1;
            }
            other => return Err(format!("unexpected argument `{other}`\n{USAGE}")),
        }
        i += 1;
    }
    let value = |name: &str| {
        theirs
            .iter()
            .position(|a| a == name)
            .and_then(|i| theirs.get(i + 1))
            .cloned()
    };
    let wanted = value("--models").unwrap_or_else(|| DEFAULT_MODELS.to_owned());
    for w in wanted.split(',').filter(|w| !w.is_empty()) {
        if !MODELS.iter().any(|(key, _)| *key == w) {
            return Err(format!("unknown model `{w}` (known: 1b, 3b, 8b)\n{USAGE}"));
        }
    }
    let root = crate::root();
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    let dir = value("--dir").map_or_else(|| cache.join("big-shapes"), Into::into);
    crate::bench_families::write_missing(
        &root,
        &cache,
        "tests/fixtures/make_llama_shape_files.py",
        &dir,
        &MODELS,
        &wanted,
    )?;
    // A package of one's own (`--pkg`) is used as it is.
    if build && value("--pkg").is_none() {
        eprintln!("\n==> bench --big: the package");
        pkg::build(&tools, &root, opt)?;
    }
    eprintln!("\n==> bench --big: headless Chromium");
    let mut node = Command::new("node");
    node.current_dir(&root).arg("bench/big.mjs");
    if value("--dir").is_none() {
        node.arg("--dir").arg(&dir);
    }
    if value("--out").is_none() {
        node.arg("--out")
            .arg(root.join("target").join("bench").join("big.json"));
    }
    run(node.args(&theirs))
}
