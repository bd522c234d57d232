//! Builds the npm package into `pkg/`: `wasm-pack build --target web`, then the committed manifest
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

pub fn build(tools: &Tools, root: &Path, opt: Opt) -> Result<(), String> {
    let mut cmd = tools.command("wasm-pack");
    cmd.current_dir(root).args([
        "build",
        "--mode",
        "no-install",
        "--target",
        "web",
        "--release",
        "--out-dir",
        "pkg",
        "--out-name",
        "kiln",
    ]);
    if opt == Opt::Skip {
        cmd.arg("--no-opt");
    }
    run(&mut cmd)?;
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
