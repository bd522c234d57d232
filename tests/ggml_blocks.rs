//! kiln's GGML block formats against gguf-py's numpy (de)quantisers, plus round-trip bounds, scale checks
//! and id/length handling.
//!
//! The fixture `tests/fixtures/ggml/blocks.bin` comes from `tests/fixtures/make_ggml_blocks.py` (its
//! docstring has the layout and the gguf-py/numpy versions). Tolerances:
//! - dequantisation: **bit-exact** f32 for every type. gguf-py evaluates each element with the same
//!   IEEE f32 operations in the same order as llama.cpp's `dequantize_row_*` (f16 → f32 is exact; products
//!   like `(d·sc)·q − dmin·m` are single rounded f32 operations; numpy does not fuse), and kiln does the
//!   same.
//! - quantisation: **byte-exact** against gguf-py where it has a quantiser (F32, F16, BF16, Q4_0, Q4_1,
//!   Q5_0, Q5_1, Q8_0), and byte-exact for every quantised type (K-quants, IQ4_NL, IQ4_XS and Q8_K
//!   included) against llama.cpp's own `quantize_row_*_ref`, compiled from `ggml-quants.c` by the script
//!   (`tests/fixtures/ggml/llama_ref.bin`; gcc `-O2 -ffp-contract=off`, i.e. without FMA contraction).
//! - round trips: every quantiser's relative RMS error on N(0, 1) data is held under a per-type bound set
//!   10–20% above what it reaches (see `RT_BOUNDS`), a regression guard independent of the fixtures.

use kiln::loader::quant::{BlockError, GgmlType};

const FIXTURE: &[u8] = include_bytes!("fixtures/ggml/blocks.bin");
/// llama.cpp's own `quantize_row_*_ref` outputs (the script's `--llama-cpp` option).
const LLAMA_REF: &[u8] = include_bytes!("fixtures/ggml/llama_ref.bin");

/// One fixture record.
struct Record<'a> {
    name: &'a str,
    id: u32,
    kind: u32,
    input: &'a [u8],
    output: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn records() -> Vec<Record<'static>> {
    parse(FIXTURE)
}

fn parse(b: &'static [u8]) -> Vec<Record<'static>> {
    assert_eq!(&b[0..4], b"KGGB", "fixture magic");
    assert_eq!(u32_at(b, 4), 1, "fixture version");
    let count = u32_at(b, 8) as usize;
    let mut at = 12;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let name = std::str::from_utf8(&b[at..at + 8])
            .unwrap()
            .trim_end_matches('\0');
        let (id, kind) = (u32_at(b, at + 8), u32_at(b, at + 12));
        let (n_in, n_out) = (u32_at(b, at + 16) as usize, u32_at(b, at + 20) as usize);
        at += 24;
        let input = &b[at..at + n_in];
        let output = &b[at + n_in..at + n_in + n_out];
        at += n_in + n_out;
        out.push(Record {
            name,
            id,
            kind,
            input,
            output,
        });
    }
    assert_eq!(at, b.len(), "trailing fixture bytes");
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The types kiln reads (every type but the activation-only `Q8_K`).
fn weight_types() -> impl Iterator<Item = GgmlType> {
    GgmlType::ALL.into_iter().filter(|&t| t != GgmlType::Q8_K)
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    let recs = records();
    for ty in weight_types() {
        let rec = recs
            .iter()
            .find(|r| r.kind == 0 && r.id == ty.id())
            .unwrap_or_else(|| panic!("no dequantisation fixture for {ty:?}"));
        assert_eq!(GgmlType::from_id(rec.id), Some(ty));
        assert_eq!(rec.name, ty.name());
        let want = f32s(rec.output);
        assert_eq!(ty.check(rec.input), Ok(()), "{ty:?}");
        let got = ty.dequantize(rec.input);
        assert_eq!(got.len(), want.len(), "{ty:?} element count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{ty:?} element {i} (block {}): kiln {g:e}, gguf-py {w:e}",
                i / ty.block_elems()
            );
        }
        let mut into = vec![f32::NAN; want.len()];
        ty.dequantize_into(rec.input, &mut into).unwrap();
        assert_eq!(
            into.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn quantize_matches_gguf_py_byte_for_byte() {
    let mut seen = Vec::new();
    for rec in records().iter().filter(|r| r.kind == 1) {
        let ty = GgmlType::from_id(rec.id).unwrap();
        let x = f32s(rec.input);
        let got = ty
            .quantize(&x)
            .unwrap_or_else(|| panic!("{ty:?} has no quantiser"));
        assert_eq!(got.len(), rec.output.len(), "{ty:?} byte count");
        for (b, (g, w)) in got
            .chunks(ty.block_bytes())
            .zip(rec.output.chunks(ty.block_bytes()))
            .enumerate()
        {
            assert_eq!(g, w, "{ty:?} block {b}");
        }
        seen.push(ty);
    }
    use GgmlType::*;
    for ty in [F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0] {
        assert!(seen.contains(&ty), "no quantisation fixture for {ty:?}");
    }
}

#[test]
fn quantize_matches_llama_cpp_reference_byte_for_byte() {
    let recs = parse(LLAMA_REF);
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_quantized()) {
        let rec = recs
            .iter()
            .find(|r| r.kind == 2 && r.id == ty.id())
            .unwrap_or_else(|| panic!("no llama.cpp reference for {ty:?}"));
        assert_eq!(rec.name, ty.name());
        let x = f32s(rec.input);
        let got = ty.quantize(&x).unwrap();
        assert_eq!(got.len(), rec.output.len(), "{ty:?} byte count");
        for (b, (g, w)) in got
            .chunks(ty.block_bytes())
            .zip(rec.output.chunks(ty.block_bytes()))
            .enumerate()
        {
            assert_eq!(g, w, "{ty:?} block {b}");
        }
        // llama.cpp's blocks have finite scales.
        assert_eq!(ty.check(rec.output), Ok(()));
    }
}

/// splitmix64, for reproducible test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (1.0 - self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Relative RMS error bounds of `dequantize(quantize(x))` on N(0, 1) data (16384 values), per type, about
/// 10–20% above the measured value (in the comment; the quantisers are deterministic, so these only move
/// if the code does). F16/BF16 are near the ideal `2^-11/√3` / `2^-8/√3` of round-to-nearest.
const RT_BOUNDS: &[(GgmlType, f64)] = &[
    (GgmlType::F32, 0.0),
    (GgmlType::F16, 2.5e-4),   // 2.1e-4
    (GgmlType::BF16, 2.0e-3),  // 1.66e-3
    (GgmlType::Q8_0, 0.0062),  // 0.00533
    (GgmlType::Q8_K, 0.0080),  // 0.00699
    (GgmlType::Q6_K, 0.020),   // 0.0176
    (GgmlType::Q5_0, 0.049),   // 0.0425
    (GgmlType::Q5_1, 0.043),   // 0.0375
    (GgmlType::Q5_K, 0.041),   // 0.0360
    (GgmlType::Q4_0, 0.098),   // 0.0854
    (GgmlType::Q4_1, 0.089),   // 0.0777
    (GgmlType::Q4_K, 0.081),   // 0.0708
    (GgmlType::IQ4_NL, 0.090), // 0.0782
    (GgmlType::IQ4_XS, 0.088), // 0.0765
    (GgmlType::Q3_K, 0.173),   // 0.1506
    (GgmlType::Q2_K, 0.34),    // 0.2950
];

fn rel_rms(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).map(|(a, b)| f64::from(a - b).powi(2)).sum();
    let sig: f64 = x.iter().map(|a| f64::from(*a).powi(2)).sum();
    (err / sig).sqrt()
}

#[test]
fn quantize_round_trips_within_bounds() {
    let mut rng = Rng(0x6b69_6c6e);
    let x: Vec<f32> = (0..16384).map(|_| rng.normal()).collect();
    for ty in GgmlType::ALL {
        let &(_, bound) = RT_BOUNDS.iter().find(|(t, _)| *t == ty).unwrap();
        let q = ty
            .quantize(&x)
            .unwrap_or_else(|| panic!("{ty:?} has no quantiser"));
        assert_eq!(q.len(), ty.row_bytes(x.len()).unwrap());
        assert_eq!(ty.check(&q), Ok(()), "{ty:?}");
        let y = ty.dequantize(&q);
        let err = rel_rms(&x, &y);
        eprintln!("{ty:?}: relative RMS error {err:.5} (bound {bound})");
        assert!(err <= bound, "{ty:?}: relative RMS error {err} > {bound}");
        // Scaled data quantises to the scaled blocks' worth of error (no absolute thresholds inside).
        let small: Vec<f32> = x.iter().map(|v| v * 1e-3).collect();
        let ys = ty.dequantize(&ty.quantize(&small).unwrap());
        assert!(
            rel_rms(&small, &ys) <= bound * 1.05 + 1e-3,
            "{ty:?} at scale 1e-3"
        );
        // All-zero input gives all-zero output.
        let zeros = vec![0.0f32; 2 * ty.block_elems().max(256)];
        assert!(
            ty.dequantize(&ty.quantize(&zeros).unwrap())
                .iter()
                .all(|&v| v == 0.0),
            "{ty:?} zeros"
        );
    }
}

#[test]
fn q8_k_block_sums_are_the_sums_of_the_quants() {
    let mut rng = Rng(7);
    let x: Vec<f32> = (0..512).map(|_| rng.normal() * 3.0).collect();
    let q = GgmlType::Q8_K.quantize(&x).unwrap();
    assert_eq!(q.len(), 2 * 292);
    for b in q.chunks_exact(292) {
        let qs = &b[4..260];
        for j in 0..16 {
            let sum: i32 = qs[16 * j..16 * j + 16].iter().map(|&v| i32::from(v as i8)).sum();
            let bsum = i16::from_le_bytes([b[260 + 2 * j], b[261 + 2 * j]]);
            assert_eq!(i32::from(bsum), sum);
        }
        // The element of largest magnitude maps to ±127.
        assert!(qs.iter().any(|&v| (v as i8).unsigned_abs() == 127));
    }
}

/// Byte offsets and names of the scale fields of each type (`ggml-common.h`).
fn scale_fields(ty: GgmlType) -> &'static [(usize, &'static str)] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[(0, "d")],
        Q4_1 | Q5_1 => &[(0, "d"), (2, "m")],
        Q4_K | Q5_K => &[(0, "d"), (2, "dmin")],
        Q2_K => &[(80, "d"), (82, "dmin")],
        Q3_K => &[(108, "d")],
        Q6_K => &[(208, "d")],
        Q8_K => &[(0, "d")],
        F32 | F16 | BF16 => &[],
    }
}

#[test]
fn check_names_the_block_and_scale_that_are_not_finite() {
    let mut rng = Rng(11);
    let x: Vec<f32> = (0..768).map(|_| rng.normal()).collect();
    for ty in GgmlType::ALL {
        let good = ty.quantize(&x).unwrap();
        assert_eq!(ty.check(&good), Ok(()));
        let nblocks = good.len() / ty.block_bytes();
        for &(off, field) in scale_fields(ty) {
            let bad_values: &[&[u8]] = if ty == GgmlType::Q8_K {
                &[&[0, 0, 0xc0, 0x7f], &[0, 0, 0x80, 0xff]]
            } else {
                &[&[0x00, 0x7e], &[0x00, 0x7c], &[0x00, 0xfc]]
            };
            for bad in bad_values {
                let block = nblocks - 1;
                let mut b = good.clone();
                let at = block * ty.block_bytes() + off;
                b[at..at + bad.len()].copy_from_slice(bad);
                assert_eq!(
                    ty.check(&b),
                    Err(BlockError::NonFiniteScale { ty, block, field }),
                    "{ty:?} {field}"
                );
                let msg = ty.check(&b).unwrap_err().to_string();
                assert!(
                    msg.contains(field) && msg.contains(&format!("block {block}")),
                    "{msg}"
                );
            }
        }
        // Wrong lengths.
        if ty.block_bytes() > 1 {
            let err = ty.check(&good[..good.len() - 1]).unwrap_err();
            assert_eq!(
                err,
                BlockError::Length {
                    ty,
                    len: good.len() - 1,
                    block_bytes: ty.block_bytes()
                }
            );
            assert!(
                ty.dequantize_into(&good[..good.len() - 1], &mut vec![0.0; x.len()])
                    .is_err()
            );
        }
        assert!(matches!(
            ty.dequantize_into(&good, &mut vec![0.0; x.len() + 1]),
            Err(BlockError::OutputLength { .. })
        ));
        assert_eq!(
            ty.quantize(&x[..x.len() - 1]),
            if ty.block_elems() == 1 {
                ty.quantize(&x[..x.len() - 1])
            } else {
                None
            }
        );
        assert_eq!(
            ty.row_bytes(ty.block_elems() + 1),
            if ty.block_elems() == 1 {
                Some(2 * ty.block_bytes())
            } else {
                None
            }
        );
        assert_eq!(ty.check(&[]), Ok(()));
        assert_eq!(ty.dequantize(&[]), Vec::<f32>::new());
    }
}

#[test]
fn arbitrary_bytes_and_values_never_panic() {
    let mut rng = Rng(99);
    for ty in GgmlType::ALL {
        for _ in 0..64 {
            let bytes = rng.bytes(4 * ty.block_bytes());
            let _ = ty.check(&bytes);
            let y = ty.dequantize(&bytes);
            assert_eq!(y.len(), 4 * ty.block_elems());
        }
        let n = ty.block_elems().max(256);
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -f32::MAX,
            1e-40,
            0.0,
            -0.0,
        ];
        for s in specials {
            let mut x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            x[n / 3] = s;
            let q = ty.quantize(&x).unwrap();
            let _ = ty.dequantize(&q);
            let _ = ty.quantize(&vec![s; n]).unwrap();
        }
    }
}

#[test]
fn ids_are_ggmls_and_unknown_ids_are_none() {
    use GgmlType::*;
    let known = [
        (0, F32),
        (1, F16),
        (2, Q4_0),
        (3, Q4_1),
        (6, Q5_0),
        (7, Q5_1),
        (8, Q8_0),
        (10, Q2_K),
        (11, Q3_K),
        (12, Q4_K),
        (13, Q5_K),
        (14, Q6_K),
        (20, IQ4_NL),
        (23, IQ4_XS),
        (30, BF16),
    ];
    for id in (0..200).chain([u32::MAX, 1 << 31]) {
        let want = known.iter().find(|(i, _)| *i == id).map(|&(_, t)| t);
        assert_eq!(GgmlType::from_id(id), want, "id {id}");
    }
    assert_eq!(Q8_K.id(), 15);
    for (id, ty) in known {
        assert_eq!(ty.id(), id);
        assert!(GgmlType::SUPPORTED.contains(ty.name()), "{ty:?}");
        assert_eq!(ty.is_quantized(), !matches!(ty, F32 | F16 | BF16));
    }
    assert_eq!(Q4_K.name(), "Q4_K");
    assert_eq!(
        (Q4_K.block_elems(), Q4_K.block_bytes(), Q4_K.row_bytes(4096)),
        (256, 144, Some(2304))
    );
    assert_eq!(Q8_K.block_bytes(), 292);
}
