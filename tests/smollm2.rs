//! SmolLM2-135M-Instruct (the default model, GGUF Q4_1) natively on the CPU backend: a real question gets the
//! right answer. Needs the data cache (`cargo xtask fetch`; `cargo xtask test` does it).
#![cfg(not(target_arch = "wasm32"))]

mod real;

use std::path::PathBuf;

use burn::tensor::Device;

/// `$KILN_CACHE`, else `<repo>/.cache/kiln`.
fn cache() -> PathBuf {
    std::env::var_os("KILN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(".cache")
                .join("kiln")
        })
}

#[test]
fn smollm2_answers_the_capital_of_france() {
    let path = cache().join(real::SMOLLM2);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}. The default model is fetched by `cargo xtask fetch` (and `cargo xtask test`).",
            path.display()
        )
    });
    let answer = pollster::block_on(real::capital_of_france(&bytes, &Device::flex()));
    eprintln!("SmolLM2 (flex): {answer:?}");
}
