//! `cargo xtask gpu-bench`: builds the GPU benchmark that travels, a self-contained folder
//! `target/gpu-bench/` (under 60 MiB) to copy to any Linux machine with a Vulkan GPU, no network needed:
//!
//! - `kiln-gpu-bench`: `examples/gpu_bench.rs` built in release and stripped (random-weight models of
//!   SmolLM2-135M's and Llama-3.2-1B's shapes in quantized formats, made on the spot; prefill and decode
//!   tok/s, dispatches and bytes read back per decode step, the fraction of the bandwidth bound);
//! - `run.sh [GB/s] [flags…]`: runs it with the adapter's memory bandwidth and writes `results.json`;
//! - `README.txt`: what it needs and prints.
//!
//! `--run [GB/s]` also runs it here afterwards (lavapipe on a machine without a GPU).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder's limit (the binary is most of it).
const MAX_BYTES: u64 = 60 * 1024 * 1024;

const RUN_SH: &str = r#"#!/bin/sh
# kiln's GPU benchmark: ./run.sh [BANDWIDTH_GB_S] [more flags of kiln-gpu-bench]
# The bandwidth is the adapter's memory bandwidth in GB/s (e.g. 3350 for an H100 SXM, 4800 for an H200);
# without it the bound column stays empty. Results: results.json beside this script.
set -e
cd "$(dirname "$0")"
bw="${1:-0}"
[ $# -gt 0 ] && shift
exec ./kiln-gpu-bench --bandwidth "$bw" --out results.json "$@"
"#;

const README: &str = "kiln GPU benchmark (built by `cargo xtask gpu-bench`)

Needs: Linux x86-64 with glibc, a Vulkan driver for the GPU (libvulkan.so.1 and the vendor's ICD;
`vulkaninfo --summary` lists the adapters). No network, no model files: the weights are random, quantized
on the spot.

Run:   ./run.sh 3350                       (the GPU's memory bandwidth in GB/s)
       ./run.sh 3350 --formats q4_0 --shapes llama-3.2-1b --tokens 128

Prints, per shape (smollm2-135m, llama-3.2-1b) and format (q4_0, q4_k by default): the weights' size,
prefill tok/s (a 128-token prompt), decode tok/s (64 greedy steps, each ending in its read back), wgpu
dispatches and bytes read back per decode step, and the fraction of the bandwidth bound
(weight bytes x decode tok/s / bandwidth). Writes everything, per-kernel dispatch counts included, to
results.json. The adapter line says which optional paths run (`features`: f16 decode activations and KV
cache where the GPU has shader-f16, subgroup reductions where it has subgroups); to measure without them:
       KILN_F16=0 ./run.sh 3350      KILN_SUBGROUPS=0 ./run.sh 3350
";

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

pub fn gpu_bench(args: &[String]) -> Result<(), String> {
    let root = crate::root();
    let run_here = args.first().is_some_and(|a| a == "--run");
    let bandwidth = args.get(1).cloned();
    crate::run(Command::new("cargo").current_dir(&root).args([
        "build",
        "--release",
        "--package",
        "kiln",
        "--example",
        "gpu_bench",
    ]))?;
    let built = target_dir(&root)
        .join("release")
        .join("examples")
        .join("gpu_bench");
    let out = root.join("target").join("gpu-bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let bin = out.join("kiln-gpu-bench");
    std::fs::copy(&built, &bin).map_err(|e| format!("{} → {}: {e}", built.display(), bin.display()))?;
    // Debug info is most of the binary; without `strip` the size check below says so.
    if let Err(e) = crate::run(Command::new("strip").arg(&bin)) {
        eprintln!("xtask: not stripped ({e})");
    }
    let script = out.join("run.sh");
    std::fs::write(&script, RUN_SH).map_err(|e| format!("{}: {e}", script.display()))?;
    std::fs::write(out.join("README.txt"), README).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in [&bin, &script] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        }
    }
    let size: u64 = std::fs::read_dir(&out)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "xtask: {} ({:.1} MiB): copy it to a machine with a Vulkan GPU and run ./run.sh <GB/s>",
        out.display(),
        size as f64 / 1048576.0
    );
    if size > MAX_BYTES {
        return Err(format!(
            "{} is {size} bytes, over the 60 MiB limit",
            out.display()
        ));
    }
    if run_here {
        let mut cmd = Command::new(&script);
        cmd.arg(bandwidth.unwrap_or_else(|| "0".into()));
        crate::run(&mut cmd)?;
    }
    Ok(())
}
