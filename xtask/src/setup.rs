//! Installs what `cargo xtask test` and `cargo xtask demo` need, idempotently, on a Debian machine:
//!
//! - rustup: the `wasm32-unknown-unknown` target, `rustfmt` and `clippy`; a nightly toolchain with `rust-src`
//!   (the threaded wasm build rebuilds std with atomics);
//! - apt: `chromium`, `chromium-driver` (headless WebGPU through SwiftShader), `mesa-vulkan-drivers` (native
//!   wgpu on lavapipe), and `nodejs`/`npm` and `python3` where they are missing;
//! - cargo: `wasm-bindgen-cli` at exactly the version in `Cargo.lock`, and `wasm-pack` (which is then told to
//!   use these and `/usr/bin/chromedriver`, so it never downloads a binary);
//! - npm (`package-lock.json`): `playwright-core` (drives `/usr/bin/chromium`, never a downloaded browser) and
//!   `binaryen` (wasm-opt; Debian's binaryen 108 produces broken wasm, see `shared/notes/burn-wasm.md`).
//!
//! Each step first checks whether its tool is already there at the right version.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, run};

/// Debian's chromedriver, which matches Debian's chromium.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The toolchain of the package's threaded build (`-Z build-std` is nightly-only). Nightly 1.97
/// (2026-05-19) is the one these machines have and the one it is tested with.
pub const NIGHTLY: &str = "nightly";
/// The wasm-pack release the project is tested with.
const WASM_PACK_VERSION: &str = "0.15.1";
const APT_PACKAGES: [&str; 3] = ["chromium", "chromium-driver", "mesa-vulkan-drivers"];

/// Where the installed tools are: commands made here find them first on `PATH`.
pub struct Tools {
    path: OsString,
}

impl Tools {
    /// A command for `program` with cargo's bin dir and `node_modules/.bin` first on `PATH`.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("PATH", &self.path);
        cmd
    }
}

/// Installs whatever is missing and returns where the tools are.
pub fn ensure(root: &Path) -> Result<Tools, String> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?
        .join("bin");
    let mut dirs = vec![root.join("node_modules").join(".bin"), cargo_bin];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let tools = Tools {
        path: std::env::join_paths(dirs).map_err(|e| format!("PATH: {e}"))?,
    };

    rustup()?;
    apt()?;
    let bindgen = lockfile_version(root, "wasm-bindgen")?;
    cargo_tool(&tools, "wasm-bindgen", "wasm-bindgen-cli", &bindgen)?;
    cargo_tool(&tools, "wasm-pack", "wasm-pack", WASM_PACK_VERSION)?;
    npm(&tools, root)?;
    Ok(tools)
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn rustup() -> Result<(), String> {
    let targets = output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if !targets.lines().any(|t| t.trim() == "wasm32-unknown-unknown") {
        run(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))?;
    }
    let components =
        output(Command::new("rustup").args(["component", "list", "--installed"])).unwrap_or_default();
    for component in ["rustfmt", "clippy"] {
        if !components.lines().any(|c| c.starts_with(component)) {
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    // The package's threaded build (`pkg::build_threads`) rebuilds std with atomics: a nightly toolchain and
    // its standard library's sources.
    let nightly = ["--toolchain", NIGHTLY];
    if output(Command::new("rustup").args(["run", NIGHTLY, "rustc", "--version"])).is_none() {
        run(Command::new("rustup").args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]))?;
    }
    let components = output(
        Command::new("rustup")
            .args(["component", "list", "--installed"])
            .args(nightly),
    )
    .unwrap_or_default();
    if !components.lines().any(|c| c.starts_with("rust-src")) {
        run(Command::new("rustup")
            .args(["component", "add", "rust-src"])
            .args(nightly))?;
    }
    Ok(())
}

fn apt() -> Result<(), String> {
    let mut wanted = APT_PACKAGES.to_vec();
    if output(Command::new("node").arg("--version")).is_none() {
        wanted.extend(["nodejs", "npm"]);
    }
    // `cargo xtask fetch` runs xtask/fetch.py (standard library only).
    if output(Command::new("python3").arg("--version")).is_none() {
        wanted.push("python3");
    }
    apt_install(&wanted)
}

/// Installs the Debian packages of `packages` that are not installed (as root, else through `sudo`).
pub fn apt_install(packages: &[&str]) -> Result<(), String> {
    let installed = |pkg: &str| {
        output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
            .is_some_and(|s| s.contains("install ok installed"))
    };
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let root_user = output(Command::new("id").arg("-u")).is_some_and(|u| u.trim() == "0");
    let apt_get = |args: &[&str]| {
        let mut cmd = if root_user {
            Command::new("apt-get")
        } else {
            Command::new("sudo")
        };
        if !root_user {
            cmd.arg("apt-get");
        }
        cmd.env("DEBIAN_FRONTEND", "noninteractive").args(args);
        cmd
    };
    run(&mut apt_get(&["update", "-qq"]))?;
    run(apt_get(&["install", "-y", "-qq"]).args(&missing))
}

/// The version of package `name` recorded in `Cargo.lock`.
fn lockfile_version(root: &Path, name: &str) -> Result<String, String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{name}\"")
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    Err(format!("`{name}` is not in Cargo.lock"))
}

/// Installs crate `krate` (binary `bin`) at exactly `version` unless `bin --version` already says so.
fn cargo_tool(tools: &Tools, bin: &str, krate: &str, version: &str) -> Result<(), String> {
    let have = output(tools.command(bin).arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(version) {
        return Ok(());
    }
    eprintln!("xtask: installing {krate} {version} (found: {})", have.trim());
    // No `--locked`: wasm-bindgen-cli's own lockfile pins a registry dependency that no longer resolves
    // (measured, shared/notes/burn-wasm.md).
    run(cargo().args(["install", krate, "--version", &format!("={version}"), "--force"]))
}

fn npm(tools: &Tools, root: &Path) -> Result<(), String> {
    let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let lock = modified(root.join("package-lock.json"));
    let installed = modified(root.join("node_modules").join(".package-lock.json"));
    if installed.is_some() && installed >= lock {
        return Ok(());
    }
    run(tools
        .command("npm")
        .current_dir(root)
        .args(["ci", "--no-audit", "--no-fund"]))
}
