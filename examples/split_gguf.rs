//! Splits a GGUF model into `N` files in llama.cpp's `gguf-split` layout (`kiln::loader::split::split`),
//! written beside it as `<stem>-00001-of-0000N.gguf`, …:
//!
//! ```text
//! cargo run --example split_gguf -- IN.gguf N
//! ```
//!
//! `tests/fixtures/gguf/tiny-llama-0000{1,2}-of-00002.gguf` are this of `tiny-llama.gguf` with N = 2
//! (`tests/stream_load.rs` checks that they still are).

use std::path::PathBuf;
use std::process::ExitCode;

use kiln::loader::Gguf;
use kiln::loader::split::split;

fn run(input: PathBuf, n: usize) -> Result<(), String> {
    let bytes = std::fs::read(&input).map_err(|e| format!("{}: {e}", input.display()))?;
    let file = Gguf::parse(&bytes).map_err(|e| format!("{}: {e}", input.display()))?;
    let files = split(&file, n).map_err(|e| e.to_string())?;
    let stem = input.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    for (i, f) in files.iter().enumerate() {
        let out = input.with_file_name(format!("{stem}-{:05}-of-{n:05}.gguf", i + 1));
        std::fs::write(&out, f).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("{}: {} bytes", out.display(), f.len());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(input), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<usize>())) else {
        eprintln!("usage: cargo run --example split_gguf -- IN.gguf N");
        return ExitCode::FAILURE;
    };
    if n == 0 {
        eprintln!("N must be at least 1");
        return ExitCode::FAILURE;
    }
    match run(PathBuf::from(input), n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
