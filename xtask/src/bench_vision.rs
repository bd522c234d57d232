//! `cargo xtask bench --vision`: the image encode of issue 40, kiln beside llama.cpp (wllama) in the same
//! headless Chromium, on random-weight GGUF pairs of real shapes (no real vision checkpoint is fetchable
//! here): SmolVLM-256M-Instruct's (SigLIP-B/16 at 512, 64 rows per tile) and Gemma 3 4B's vision tower
//! (SigLIP so400m/14 at 896, 256 rows), as `tests/fixtures/make_vision_bench_files.py` writes them.
//!
//! Steps: the tools and the data cache as `bench` has them; the Python packages gguf-py needs (Debian's
//! numpy, yaml, tqdm, requests) where missing; gguf-py itself from the llama-cpp-python sdist of the data
//! cache (`llama.cpp/gguf-py`); the bench files into `$KILN_CACHE/vision-bench/` unless they are there
//! (about 1.6 GB, a minute or two); the package (unless `--no-build`); then `bench/vision.mjs`, which
//! prints the tables and writes `target/bench/vision.json`. Arguments after `--` go to `bench/vision.mjs`
//! (`--runs`, `--models smolvlm,gemma3`, `--configs …`, see its header).
//!
//! What it measures: per model and configuration (kiln's CPU backend at 1 and 2 threads, kiln on WebGPU,
//! wllama's CPU path at 1 and 2 threads), the encode time per tile and the time to the first token of a
//! one-image chat; and, on an image that neither engine resizes (see `bench/vision.mjs`), the prompt token
//! counts and the log-probabilities of the first generated position in both. Timings only: nothing asserts on them.

use std::path::Path;
use std::process::Command;

use crate::{data, pkg, run, setup};

pub const USAGE: &str = "  bench --vision   image encode per tile + one-image chat TTFT, kiln (CPU 1/2 threads, WebGPU) vs wllama (CPU 1/2 threads),
          on random-weight SmolVLM-256M and Gemma 3 4B vision files (written into the data cache); the logits of both
          on the same pixels; tables + target/bench/vision.json   [--no-build] [--no-opt] [-- bench/vision.mjs options]";

/// The files `make_vision_bench_files.py` writes (it writes them all, or the pairs named by `--only`).
const FILES: [&str; 4] = [
    "smolvlm-256m-bench.gguf",
    "smolvlm-256m-bench-mmproj-f16.gguf",
    "gemma3-4b-vision-bench.gguf",
    "gemma3-4b-vision-bench-mmproj-f16.gguf",
];

/// What gguf-py imports beyond the standard library, as Debian packages.
const PYTHON_PACKAGES: [&str; 4] = [
    "python3-numpy",
    "python3-yaml",
    "python3-tqdm",
    "python3-requests",
];

pub fn bench_vision(args: &[String]) -> Result<(), String> {
    let (ours, theirs) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let (mut build, mut opt) = (true, pkg::Opt::Release);
    for a in ours {
        match a.as_str() {
            "--vision" => {}
            "--no-build" => build = false,
            "--no-opt" => opt = pkg::Opt::Skip,
            other => return Err(format!("unexpected argument `{other}`\n{USAGE}")),
        }
    }
    let root = crate::root();
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    let dir = cache.join("vision-bench");
    if FILES.iter().any(|f| !dir.join(f).is_file()) {
        write_files(&root, &cache, &dir)?;
    }
    if build {
        eprintln!("\n==> bench --vision: the package");
        pkg::build(&tools, &root, opt)?;
    }
    eprintln!("\n==> bench --vision: headless Chromium");
    run(Command::new("node")
        .current_dir(&root)
        .arg("bench/vision.mjs")
        .arg("--dir")
        .arg(&dir)
        .arg("--out")
        .arg(root.join("target").join("bench").join("vision.json"))
        .args(theirs))
}

/// Installs (apt) the Python packages gguf-py needs, where missing.
pub fn python_packages() -> Result<(), String> {
    setup::apt_install(&PYTHON_PACKAGES)
}

/// A Python that imports gguf-py from the data cache's llama.cpp sources (`tests/fixtures/make_*_bench_files.py`
/// write with it): Debian's interpreter with the packages gguf-py needs installed where missing, run from
/// `root`.
pub fn gguf_python(root: &Path, cache: &Path) -> Result<Command, String> {
    python_packages()?;
    let gguf_py = cache.join("llama.cpp").join("gguf-py");
    if !gguf_py.join("gguf").join("__init__.py").is_file() {
        return Err(format!(
            "{}: gguf-py missing from the data cache",
            gguf_py.display()
        ));
    }
    // Debian's interpreter, where apt installed the packages (a `python3` earlier on the PATH, pyenv's say,
    // does not see them).
    let python = match Path::new("/usr/bin/python3").is_file() {
        true => "/usr/bin/python3",
        false => "python3",
    };
    let mut cmd = Command::new(python);
    cmd.current_dir(root).env("PYTHONPATH", &gguf_py);
    Ok(cmd)
}

/// Writes the bench files into `dir` with gguf-py from the data cache's llama.cpp sources.
fn write_files(root: &Path, cache: &Path, dir: &Path) -> Result<(), String> {
    let mut python = gguf_python(root, cache)?;
    eprintln!(
        "\n==> bench --vision: writing the random-weight files into {}",
        dir.display()
    );
    run(python.arg("tests/fixtures/make_vision_bench_files.py").arg(dir))
}
