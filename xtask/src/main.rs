//! kiln's developer commands, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! - `test`: installs what is missing (see [`setup`]), then fmt, the native tests (every workspace crate
//!   compiled through clippy-driver, so clippy's lints fail the build: see [`CLIPPY_WRAPPER`]),
//!   tsc over the TypeScript declarations, the wasm tests in headless Chromium on WebGPU, then the built
//!   package: its types as a consumer sees them, and the end-to-end tests (the demo page, the `Engine` API,
//!   a lost WebGPU device, the npm package, and Gemma 3 270M against llama.cpp (wllama) in the same
//!   browser).
//! - `demo`: builds the npm package into `pkg/` and serves `www/` + `pkg/` on http://127.0.0.1:8080.
//! - `bench`: kiln in headless Chromium (WebGPU and CPU) and natively (wgpu and CPU) beside wllama on the
//!   default model; prints a table and writes `target/bench/bench.json` (see [`bench`]); `--vision`,
//!   `--families` and `--big` run the image, the 2026-families and the 7–8B benchmarks instead (see
//!   [`bench_vision`], [`bench_families`], [`bench_big`]).
//! - `gpu-bench`: builds the GPU benchmark that travels into `target/gpu-bench/` (see [`gpu_bench`]).
//! - `fetch`: only the data download (the default model, llama.cpp's tokenizer vectors and Gemma 3 270M,
//!   see [`data`]).
//! - `setup`: only the installation step.

mod bench;
mod bench_big;
mod bench_chat;
mod bench_families;
mod bench_vision;
mod data;
mod gpu_bench;
mod pkg;
mod serve;
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "usage: cargo xtask <test|demo|bench|gpu-bench|fetch|setup>
  test    install what is missing, then fmt, clippy, native tests, browser tests, e2e tests (demo, Engine,
          package, Gemma 3 vs llama.cpp; KILN_GEMMA3_WEBGPU=all compares every prompt on WebGPU too)
  demo    build the wasm package into pkg/ and serve the demo on http://127.0.0.1:8080 (--port N)
  gpu-bench  build target/gpu-bench/ (release binary + run.sh, under 60 MiB) for any machine with a
          Vulkan GPU; --run [GB/s] also runs it here
  fetch   only download the test/demo data into the cache ($KILN_CACHE, default .cache/kiln)
  setup   only install what is missing";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("demo") => demo(&args[1..]),
        Some("bench") if args.iter().any(|a| a == "--vision") => bench_vision::bench_vision(&args[1..]),
        Some("bench") if args.iter().any(|a| a == "--families") => bench_families::bench_families(&args[1..]),
        Some("bench") if args.iter().any(|a| a == "--big") => bench_big::bench_big(&args[1..]),
        Some("bench") => bench::bench(&args[1..]),
        Some("gpu-bench") => gpu_bench::gpu_bench(&args[1..]),
        Some("setup") => setup::ensure(&root()).map(|_| ()),
        Some("fetch") => data::fetch(&root()).map(|cache| eprintln!("xtask: data in {}", cache.display())),
        _ => {
            eprintln!(
                "{USAGE}\n{}\n{}\n{}\n{}",
                bench::USAGE,
                bench_vision::USAGE,
                bench_families::USAGE,
                bench_big::USAGE
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs `cmd`, echoing it; an error names the command and its exit status.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("+ {}", show(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start `{}`: {e}", show(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", show(cmd)))
    }
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The port `cargo xtask test` serves on when it is free.
const TEST_PORT: u16 = 18_080;

/// `cargo clippy`'s own mechanism, on the builds the tests need anyway: with this wrapper every workspace
/// crate cargo compiles goes through `clippy-driver`, which lints it (`CLIPPY_ARGS`: `-D warnings`) and
/// then compiles it as rustc would. Linting the native test build and the wasm32 builds this way replaces
/// `cargo clippy --all-targets` natively and for wasm32, each of which checked every dependency once more
/// in check mode (minutes on a fresh clone). The threaded wasm build is left to rustc (nightly's clippy may
/// know lints stable's does not).
const CLIPPY_WRAPPER: [(&str, &str); 2] = [
    ("RUSTC_WORKSPACE_WRAPPER", "clippy-driver"),
    ("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"),
];

/// No incremental compilation in `cargo xtask test`: a clean build (CI's) gains nothing from it, and its
/// caches took 1.1 GB of the 7.6 GB target directory of a fresh clone's run (measured 2026-12-07, after a CI
/// machine ran out of disk while building).
const NO_INCREMENTAL: (&str, &str) = ("CARGO_INCREMENTAL", "0");

fn test() -> Result<(), String> {
    let root = root();
    // SAFETY: set before any other thread of this process exists (the server starts below); every cargo
    // this process runs from here on inherits them.
    for (key, value) in CLIPPY_WRAPPER.into_iter().chain([NO_INCREMENTAL]) {
        unsafe { std::env::set_var(key, value) };
    }
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    // numpy & co. for gguf-py: tests/big_models.rs pipes random-weight files of real shapes from
    // tests/fixtures/make_llama_shape_files.py into the loader.
    bench_vision::python_packages()?;
    // Serves the cache to the browser tests (and the demo page to its e2e test). A fixed port keeps the
    // URL compiled into the wasm tests stable, so they are not rebuilt on every run.
    let server = serve::start(&root, &cache, TEST_PORT).or_else(|_| serve::start(&root, &cache, 0))?;
    let data_url = format!("http://{}/models/", server.addr);
    let mut stages: Vec<(&str, Result<(), String>, f64)> = Vec::new();
    let mut stage = |name: &'static str, f: &mut dyn FnMut() -> Result<(), String>| {
        eprintln!("\n==> {name}");
        let start = Instant::now();
        let result = f();
        stages.push((name, result, start.elapsed().as_secs_f64()));
    };
    stage("cargo fmt --check", &mut || {
        run(cargo().current_dir(&root).args(["fmt", "--all", "--check"]))
    });
    stage(
        "TypeScript declarations (tsc, against the openai package)",
        &mut || run(tools.command("tsc").current_dir(&root).args(["-p", "tests/ts"])),
    );
    stage(
        "native tests (built through clippy-driver: clippy's lints, -D warnings)",
        &mut || {
            run(cargo()
                .current_dir(&root)
                .env("KILN_CACHE", &cache)
                .args(["test", "--workspace"]))
        },
    );
    stage(
        "browser tests (wasm-pack, headless Chromium, WebGPU; wasm32 build linted by clippy-driver)",
        &mut || {
            run(tools
                .command("wasm-pack")
                .current_dir(&root)
                .env("WASM_BINDGEN_TEST_TIMEOUT", "900")
                .env("KILN_DATA_URL", &data_url)
                .args([
                    "test",
                    "--mode",
                    "no-install",
                    "--headless",
                    "--chrome",
                    "--chromedriver",
                ])
                .arg(setup::CHROMEDRIVER)
                .args(["--release", "--", "--", "--nocapture"]))
        },
    );
    stage(
        "package: consumer types (tsc); e2e in Chromium (playwright-core): demo, Engine/WorkerEngine, OpenAI clients on engine.fetch + Service Worker, a lost WebGPU device, threaded build = single-threaded, npm pack + Vite, Gemma 3 = llama.cpp, images in chat",
        &mut || {
            pkg::build(&tools, &root, pkg::Opt::Skip)?;
            run(tools
                .command("tsc")
                .current_dir(&root)
                .args(["-p", "tests/ts/consumer"]))?;
            let artifacts = root.join("target").join("e2e");
            std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
            run(Command::new("node")
                .current_dir(&root)
                .env("KILN_DEMO_URL", format!("http://{}/", server.addr))
                .env("KILN_ARTIFACTS", &artifacts)
                .env("KILN_CACHE", &cache)
                .args([
                    "--test",
                    "--test-concurrency=1",
                    "tests/e2e/demo.test.mjs",
                    "tests/e2e/engine.test.mjs",
                    "tests/e2e/http.test.mjs",
                    "tests/e2e/device_lost.test.mjs",
                    "tests/e2e/threads.test.mjs",
                    "tests/e2e/package.test.mjs",
                    "tests/e2e/gemma3.test.mjs",
                    "tests/e2e/vision.test.mjs",
                    "tests/e2e/demo_vision.test.mjs",
                ]))
        },
    );

    eprintln!("\nxtask test summary:");
    let mut failed = 0;
    for (name, result, secs) in &stages {
        match result {
            Ok(()) => eprintln!("  ok    {secs:7.1}s  {name}"),
            Err(e) => {
                failed += 1;
                eprintln!("  FAIL  {secs:7.1}s  {name}: {e}");
            }
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} stage(s) failed"))
    }
}

fn demo(args: &[String]) -> Result<(), String> {
    let port = match args {
        [] => 8080,
        [flag, n] if flag == "--port" => n.parse().map_err(|_| format!("bad port `{n}`"))?,
        _ => return Err(format!("unexpected arguments {args:?}\n{USAGE}")),
    };
    let root = root();
    let tools = setup::ensure(&root)?;
    let cache = data::fetch(&root)?;
    pkg::build(&tools, &root, pkg::Opt::Release)?;
    let server = serve::start(&root, &cache, port)?;
    println!("\nkiln demo: http://{}/  (Ctrl-C to stop)", server.addr);
    server.wait();
    Ok(())
}
