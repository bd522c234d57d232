//! Builds the npm package into `pkg/`: `wasm-pack build --target web` twice, the single-threaded build
//! (WebGPU + CPU) into `pkg/` and the threaded CPU build into `pkg/threads/` (see [`build_threads`]); then
//! the committed manifest
//! `pkg.json` is merged over the `package.json` wasm-pack generated (its keys win; the version comes from
//! `Cargo.toml`). `ts/api.d.ts` (the OpenAI wire types) is copied in beside the generated declarations, and
//! `js/index.js` + `js/index.d.ts` (the `Engine` API over the wasm module) as the entry point, with the
//! other modules of `js/`. Then `xtask/vendor.mjs` bundles openai-node for the demo (`target/vendor/`).

use std::path::Path;

use serde_json::Value;

use crate::run;
use crate::setup::Tools;

/// Whether wasm-opt runs on the package.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    /// No wasm-opt: what the e2e test needs, minutes faster.
    Skip,
    /// wasm-opt with the flags in `[package.metadata.wasm-pack.profile.release]`.
    Release,
}

/// `RUSTFLAGS` of the threaded build: simd128 as the default build (`.cargo/config.toml`), wasm threads
/// (atomics, bulk memory), and the link arguments wasm-bindgen's thread support needs, which nightly rustc
/// no longer passes by itself for `+atomics` (measured: without them the memory is neither imported nor
/// shared). The maximum is 4 GiB, wasm32's whole address space (a shared memory must declare one).
const THREADS_RUSTFLAGS: &str = "-C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals \
    -C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
    -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
    -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base";

/// Files of a wasm-pack output that make a build: the glue, the module, its types, and the JS snippets (the
/// threaded build's worker helper).
const BUILD_FILES: [&str; 4] = ["kiln.js", "kiln_bg.wasm", "kiln.d.ts", "snippets"];

pub fn build(tools: &Tools, root: &Path, opt: Opt) -> Result<(), String> {
    build_single(tools, root, opt)?;
    build_threads(tools, root, opt)?;
    finish(root)
}

/// The threaded build into `pkg/threads/`: the CPU backend only (`--no-default-features`: wgpu's WebGPU
/// objects are not `Send` with atomics), its products on rayon's pool (`--features threads`), std rebuilt
/// with atomics by nightly cargo (`-Z build-std`). wasm-pack writes a whole package into
/// `target/pkg-threads/`; the build's files are copied from there.
pub fn build_threads(tools: &Tools, root: &Path, opt: Opt) -> Result<(), String> {
    let out = root.join("target").join("pkg-threads");
    let mut cmd = wasm_pack_build(tools, root, &out, opt);
    cmd.env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env("RUSTUP_TOOLCHAIN", crate::setup::NIGHTLY)
        .env(
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
            THREADS_RUSTFLAGS.split_whitespace().collect::<Vec<_>>().join(" "),
        );
    cmd.args([
        "--",
        "--no-default-features",
        "--features",
        "threads",
        "-Z",
        "build-std=panic_abort,std",
    ]);
    run(&mut cmd)?;
    let dest = root.join("pkg").join("threads");
    let _ = std::fs::remove_dir_all(&dest);
    for file in BUILD_FILES {
        copy_tree(&out.join(file), &dest.join(file))?;
    }
    Ok(())
}

/// Copies a file, or a directory with everything in it.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{} → {}: {e}", from.display(), to.display());
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(err)?;
        for entry in std::fs::read_dir(from).map_err(err)? {
            let entry = entry.map_err(err)?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        std::fs::copy(from, to).map(|_| ()).map_err(err)
    }
}

/// The single-threaded build (WebGPU and the CPU backend) into `pkg/`, where wasm-pack also writes the
/// package's `package.json` and README.
fn build_single(tools: &Tools, root: &Path, opt: Opt) -> Result<(), String> {
    run(&mut wasm_pack_build(tools, root, Path::new("pkg"), opt))
}

/// `wasm-pack build` of the crate for `--target web` in the release profile into `out` (named `kiln`), with
/// wasm-opt unless `opt` skips it; cargo arguments may follow (after `--`).
fn wasm_pack_build(tools: &Tools, root: &Path, out: &Path, opt: Opt) -> std::process::Command {
    let mut cmd = tools.command("wasm-pack");
    cmd.current_dir(root)
        .args([
            "build",
            "--mode",
            "no-install",
            "--target",
            "web",
            "--release",
            "--out-dir",
        ])
        .arg(out)
        .args(["--out-name", "kiln"]);
    if opt == Opt::Skip {
        cmd.arg("--no-opt");
    }
    cmd
}

/// The package's own files beside the builds: the JS API, the types, the merged manifest; then the demo's
/// bundled openai-node.
fn finish(root: &Path) -> Result<(), String> {
    // The OpenAI wire types, hand-written and checked by tsc; `kiln.d.ts` re-exports them. The `Engine` API
    // (`js/index.js` and its types) is the package's entry point.
    for (dir, file) in [
        ("ts", "api.d.ts"),
        ("js", "index.js"),
        ("js", "index.d.ts"),
        ("js", "worker.js"),
        ("js", "worker.d.ts"),
        ("js", "http.js"),
        ("js", "sw-client.js"),
        ("js", "service-worker.js"),
        ("js", "service-worker.d.ts"),
    ] {
        let from = root.join(dir).join(file);
        std::fs::copy(&from, root.join("pkg").join(file)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    merge_manifest(&root.join("pkg.json"), &root.join("pkg").join("package.json"))?;
    // The demo's openai-node panel imports the real client, bundled for the browser (not part of the package).
    run(std::process::Command::new("node")
        .current_dir(root)
        .arg("xtask/vendor.mjs"))
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Overlays the top-level keys of `manifest` on `generated`, in place.
fn merge_manifest(manifest: &Path, generated: &Path) -> Result<(), String> {
    let Value::Object(ours) = read_json(manifest)? else {
        return Err(format!("{} is not a JSON object", manifest.display()));
    };
    let mut merged = read_json(generated)?;
    let Some(target) = merged.as_object_mut() else {
        return Err(format!("{} is not a JSON object", generated.display()));
    };
    target.extend(ours);
    let text = serde_json::to_string_pretty(&merged).map_err(|e| e.to_string())? + "\n";
    std::fs::write(generated, text).map_err(|e| format!("{}: {e}", generated.display()))
}
