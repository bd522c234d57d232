//! Derives a Q4_K_M GGUF from another GGUF with kiln's own quantisers (`kiln::loader::derive::q4_k_m`):
//!
//! ```text
//! cargo run --example derive_q4km -- IN.gguf OUT.gguf
//! ```
//!
//! Prints the tensor type histogram, the output size and the time to stderr. OUT is written to a temporary
//! file next to it and renamed into place, so it is either absent or complete.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use kiln::loader::Gguf;
use kiln::loader::derive::q4_k_m;

fn run(input: PathBuf, output: PathBuf) -> Result<(), String> {
    let start = Instant::now();
    let bytes = std::fs::read(&input).map_err(|e| format!("{}: {e}", input.display()))?;
    let file = Gguf::parse(&bytes).map_err(|e| format!("{}: {e}", input.display()))?;
    let derived = q4_k_m(&file).map_err(|e| format!("{}: {e}", input.display()))?;
    let out = Gguf::parse(&derived).map_err(|e| format!("the derived file does not parse: {e}"))?;
    let mut hist: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (_, t) in &out.tensors {
        let e = hist.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.size() as usize;
    }
    let tmp = output.with_extension("gguf.tmp");
    std::fs::write(&tmp, &derived).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &output).map_err(|e| format!("{} -> {}: {e}", tmp.display(), output.display()))?;
    eprintln!("{} -> {}", input.display(), output.display());
    for (ty, (n, b)) in &hist {
        eprintln!(
            "  {ty:>6}: {n:4} tensors, {:10.3} MiB",
            *b as f64 / (1 << 20) as f64
        );
    }
    eprintln!(
        "  {} tensors, {} -> {} bytes, {:.1} s",
        out.tensors.len(),
        bytes.len(),
        derived.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: cargo run --example derive_q4km -- IN.gguf OUT.gguf");
        return ExitCode::from(2);
    };
    match run(input.into(), output.into()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("derive_q4km: {e}");
            ExitCode::FAILURE
        }
    }
}
