//! The CPU matmul kernels (`kiln::kernels::cpu`) against the reference: `GgmlType::dequantize` of the
//! weights, then an f64 product.
//!
//! Weights are random bytes with finite random f16 scales (every bit pattern of the quantized fields is a
//! valid block, so random bytes reach more cases than a quantizer's output), activations random with rows
//! of different magnitudes and an all-zero row; shapes are odd on purpose (n not a multiple of 4, m not a
//! multiple of the 4-row blocking, k of 1, 2 and 3 blocks).
//!
//! Tolerances, per output `y = Σ_k w_k·x_k`:
//! - Against the exact product: below `panel::ROWS_FROM` rows the kernels quantize each activation block
//!   to 16 bits (from there on they take x as it is, and the activation term is 0) rounding to
//!   nearest, so `|x_k − x̂_k| ≤ amax(block of k) / 65534` (+ `2ε·|x_k|` from the f32 scaling, inside the
//!   rounding term below), hence `|y − ŷ| ≤ Σ_k |w_k|·amax_k/65534`; plus f32 rounding, bounded by
//!   `(nb + 8)·ε·Σ_k (|w_k|·|x_k| + |ŵ_k|·|x_k|)` with `nb` the blocks per row (block terms rounded a few
//!   times each, summed in f32) and `ŵ` the same magnitude bound, taken twice for the reference's own f32
//!   dequantization (`d·sc·q − dmin·m` cancels).
//! - Against "dequantize W, quantize x with the kernel's own quantizer, dot in f64" (`act::Q16Rows` /
//!   `act::Q16KRows`): the same integers, so only the f32 rounding term; not bit-exact, because the kernel
//!   sums in f32 in its own order.
//! - Relative to `Σ_k |w_k·x_k|`: below 1e-4 for every quantized type (the 8-bit activations of llama.cpp
//!   have a bound of about 1e-2 here), below 1e-5 for F32/F16/BF16 (no activation quantization: the f32
//!   term alone).

use kiln::kernels::cpu::{self, act};
use kiln::loader::GgmlType;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Byte offsets of the f16 scale fields in a block of `ty` (every element for F16).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// `blocks` random blocks of `ty` with finite values.
fn random_weights(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut w: Vec<u8> = (0..blocks * bb).map(|_| rng.next() as u8).collect();
    for b in w.chunks_exact_mut(bb) {
        match ty {
            GgmlType::F32 => b.copy_from_slice(&rng.unit().to_le_bytes()),
            GgmlType::BF16 => b.copy_from_slice(&half::bf16::from_f32(rng.unit()).to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&half::f16::from_f32(rng.unit()).to_le_bytes()),
            _ => {
                for &o in f16_fields(ty) {
                    // Scales of either sign, magnitudes 1e-3…1 (a few near the f16 subnormal range).
                    let v = rng.unit() * 10f32.powf(-3.0 * rng.unit().abs());
                    b[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
        }
    }
    w
}

/// `m × k` activations: rows scaled by 10^(−2…2), the second row all zero.
fn random_x(m: usize, k: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::with_capacity(m * k);
    for r in 0..m {
        let scale = if r == 1 { 0.0 } else { 10f32.powf(2.0 * rng.unit()) };
        x.extend((0..k).map(|_| scale * rng.unit()));
    }
    x
}

/// Whether `ty` is a K-quant (256-element activation blocks) rather than a 32-element format.
fn is_k(ty: GgmlType) -> bool {
    ty.block_elems() == 256
}

/// Weights as a model has them: `GgmlType::quantize` of random values (a bell-ish sum of uniforms).
fn quantized_weights(ty: GgmlType, n: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    let wf: Vec<f32> = (0..n * k)
        .map(|_| 0.05 * (rng.unit() + rng.unit() + rng.unit()))
        .collect();
    ty.quantize(&wf).expect("whole blocks")
}

fn check(ty: GgmlType, m: usize, n: usize, blocks: usize, rng: &mut Rng) {
    let w = random_weights(ty, n * blocks, rng);
    check_weights(ty, m, n, blocks, &w, rng);
}

fn check_weights(ty: GgmlType, m: usize, n: usize, blocks: usize, w: &[u8], rng: &mut Rng) {
    let x = random_x(m, ty.block_elems() * blocks, rng);
    check_x(ty, m, n, blocks, w, &x);
}

fn check_x(ty: GgmlType, m: usize, n: usize, blocks: usize, w: &[u8], x: &[f32]) {
    let (be, k) = (ty.block_elems(), ty.block_elems() * blocks);
    let got = cpu::matmul(ty, w, n, k, x, m);
    assert_eq!(got.len(), m * n);
    let wd = ty.dequantize(w);
    assert!(wd.iter().all(|v| v.is_finite()));
    let float = be == 1;
    // From `ROWS_FROM` rows on (prefill) the quantized formats multiply x itself (dequantised panels and
    // gemm); below it, its 16-bit blocks.
    let exact_x = float || m >= cpu::panel::ROWS_FROM;
    let xq = if exact_x {
        x.to_vec()
    } else if is_k(ty) {
        act::Q16KRows::quantize(x, m, k).dequantize()
    } else {
        act::Q16Rows::quantize(x, m, k).dequantize()
    };
    let qb = if is_k(ty) { 256 } else { 32 };
    let nb = if float { k / 8 + 1 } else { blocks };
    let eps = f64::from(f32::EPSILON);
    for r in 0..m {
        let (xr, xqr) = (&x[r * k..(r + 1) * k], &xq[r * k..(r + 1) * k]);
        for c in 0..n {
            let wr = &wd[c * k..(c + 1) * k];
            let (mut exact, mut quant, mut mag, mut act_err) = (0f64, 0f64, 0f64, 0f64);
            for i in 0..k {
                let (wv, xv) = (f64::from(wr[i]), f64::from(xr[i]));
                exact += wv * xv;
                quant += wv * f64::from(xqr[i]);
                mag += wv.abs() * xv.abs();
                if !exact_x {
                    let blk = &xr[i / qb * qb..(i / qb + 1) * qb];
                    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                    act_err += wv.abs() * f64::from(amax) / 65534.0;
                }
            }
            let y = f64::from(got[r * n + c]);
            let round = (nb as f64 + 8.0) * eps * 2.0 * (mag + act_err) + 1e-30;
            let what = format!("{ty:?} m={m} n={n} k={k}: y[{r}, {c}] = {y}");
            assert!(
                (y - quant).abs() <= round,
                "{what}, dequantize·Q16 reference {quant}, bound {round}"
            );
            let bound = act_err * 1.0001 + round;
            assert!((y - exact).abs() <= bound, "{what}, exact {exact}, bound {bound}");
            let rel = if float { 1e-5 } else { 1e-4 };
            assert!(
                (y - exact).abs() <= rel * mag + 1e-30,
                "{what}, exact {exact}, Σ|w·x| {mag}"
            );
        }
    }
}

fn check_type(ty: GgmlType, seed: u64) {
    assert!(cpu::supports(ty), "{ty:?}");
    let mut rng = Rng(seed);
    let blocks: &[usize] = if ty.block_elems() == 1 {
        &[1, 2, 3, 8, 37, 67]
    } else {
        &[1, 2, 3]
    };
    for &m in &[1, 2, 3, 5, 8] {
        for &n in &[1, 7, 33] {
            for &b in blocks {
                check(ty, m, n, b, &mut rng);
            }
        }
    }
}

#[test]
fn q4_1() {
    check_type(GgmlType::Q4_1, 1);
}

#[test]
fn q8_0() {
    check_type(GgmlType::Q8_0, 2);
}

#[test]
fn q4_0() {
    check_type(GgmlType::Q4_0, 3);
}

#[test]
fn q5_0() {
    check_type(GgmlType::Q5_0, 4);
}

#[test]
fn q4_k() {
    check_type(GgmlType::Q4_K, 5);
}

#[test]
fn q6_k() {
    check_type(GgmlType::Q6_K, 6);
}

/// More activation rows than one block of the prefill panels takes at this width (64 at k = 4096: an
/// encoder's 1024 patches per tile are several), so the blocks' results land in the right rows.
#[test]
fn rows_past_one_block() {
    let mut rng = Rng(41);
    for ty in [GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_K] {
        check(ty, 150, 50, 4096 / ty.block_elems(), &mut rng);
    }
}

#[test]
fn f16() {
    check_type(GgmlType::F16, 7);
}

#[test]
fn f32() {
    check_type(GgmlType::F32, 8);
}

#[test]
fn bf16() {
    check_type(GgmlType::BF16, 9);
}

#[test]
fn q5_1() {
    check_type(GgmlType::Q5_1, 10);
}

#[test]
fn q5_k() {
    check_type(GgmlType::Q5_K, 11);
}

#[test]
fn q3_k() {
    check_type(GgmlType::Q3_K, 12);
}

#[test]
fn q2_k() {
    check_type(GgmlType::Q2_K, 13);
}

#[test]
fn iq4_nl() {
    check_type(GgmlType::IQ4_NL, 14);
}

#[test]
fn iq4_xs() {
    check_type(GgmlType::IQ4_XS, 15);
}

/// Every type once more with weights from its quantizer (realistic scales and minimums), m ∈ {1, 5}.
#[test]
fn quantizer_weights() {
    let mut rng = Rng(42);
    let types = [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::F32,
        GgmlType::BF16,
        GgmlType::Q5_1,
        GgmlType::Q5_K,
        GgmlType::Q3_K,
        GgmlType::Q2_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];
    for ty in types {
        let blocks = if ty.block_elems() == 1 {
            100
        } else {
            2048 / ty.block_elems()
        };
        for (m, n) in [(1, 7), (5, 9)] {
            let w = quantized_weights(ty, n, blocks * ty.block_elems(), &mut rng);
            check_weights(ty, m, n, blocks, &w, &mut rng);
        }
    }
}

/// Blocks of one repeated byte (f16 scales ±1), against activations of one magnitude (quantized to
/// ±32767): the largest integers every format has (`Q8_0` −128, `Q6_K` −32 with scale −128, `IQ4_XS`
/// −127 with scale −32, `Q4_K` 15 with scale and minimum 63, ...), all products of one sign, so every
/// integer sum is at its bound; an i32 overflow anywhere would show.
#[test]
fn extreme_blocks() {
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ];
    for ty in types {
        let (bb, blocks) = (ty.block_bytes(), 512 / ty.block_elems());
        for fill in [0x00u8, 0x55, 0x7f, 0x80, 0xaa, 0xff] {
            for one in [1.0f32, -1.0] {
                let mut w = vec![fill; 3 * blocks * bb];
                for b in w.chunks_exact_mut(bb) {
                    if ty == GgmlType::Q6_K && fill == 0 {
                        // `q = −32` everywhere (zero bits) with every scale −128.
                        b[192..208].fill(0x80);
                    }
                    for &o in f16_fields(ty) {
                        b[o..o + 2].copy_from_slice(&half::f16::from_f32(one).to_le_bytes());
                    }
                }
                for m in [1, 5] {
                    let x: Vec<f32> = (0..m * blocks * ty.block_elems())
                        .map(|i| if (i / 512) % 2 == 0 { -3.0 } else { 0.5 })
                        .collect();
                    check_x(ty, m, 3, blocks, &w, &x);
                }
            }
        }
    }
}

/// An empty product and the f32 baseline kernel.
#[test]
fn edges_and_baseline() {
    assert!(cpu::matmul(GgmlType::Q4_1, &[], 0, 32, &[0.0; 64], 2).is_empty());
    assert_eq!(
        cpu::matmul(GgmlType::Q4_0, &[0; 36], 2, 32, &[], 0),
        Vec::<f32>::new()
    );
    let mut rng = Rng(99);
    let (n, k, m) = (9, 45, 6);
    let w: Vec<f32> = (0..n * k).map(|_| rng.unit()).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
    let y = cpu::float::matmul_f32(&w, n, k, &x, m);
    for r in 0..m {
        for c in 0..n {
            let e: f64 = (0..k)
                .map(|i| f64::from(w[c * k + i]) * f64::from(x[r * k + i]))
                .sum();
            assert!((f64::from(y[r * n + c]) - e).abs() < 1e-5, "{r} {c}");
        }
    }
}

/// Throughput on SmolLM2-135M's shapes (not a timed test; run it in release):
/// `cargo test --release --test kernels_cpu -- --ignored --nocapture bench`.
/// Prints GFLOP/s (2·m·n·k per product) and the weights' bytes read per second, against the f32 kernel
/// on already-widened weights (`float::matmul_f32`, the same loop style).
#[test]
#[ignore]
fn bench_smollm2_shapes() {
    use std::time::Instant;
    let shapes = [(576, 1536), (1536, 576), (576, 576), (576, 49152)];
    let types = [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];
    let mut rng = Rng(7);
    // The best of three runs of at least 0.1 s each (the machine may be shared).
    let time = |f: &mut dyn FnMut() -> f32| {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let (mut iters, t0) = (0u32, Instant::now());
            while iters < 2 || t0.elapsed().as_secs_f64() < 0.1 {
                std::hint::black_box(f());
                iters += 1;
            }
            best = best.min(t0.elapsed().as_secs_f64() / f64::from(iters));
        }
        best
    };
    println!(
        "{:>6} {:>6} {:>4} {:>7} {:>9} {:>8} {:>8}",
        "k", "n", "m", "type", "µs", "GFLOP/s", "GB/s(W)"
    );
    for &(k, n) in &shapes {
        for &m in &[1usize, 64] {
            let x = random_x(m, k, &mut rng);
            let flop = 2.0 * (m * n * k) as f64;
            let wf: Vec<f32> = (0..n * k).map(|_| rng.unit() * 0.1).collect();
            let t = time(&mut || cpu::float::matmul_f32(&wf, n, k, &x, m)[0]);
            let gb = (n * k * 4) as f64 / t / 1e9;
            println!(
                "{k:>6} {n:>6} {m:>4} {:>7} {:>9.1} {:>8.2} {gb:>8.2}",
                "f32",
                t * 1e6,
                flop / t / 1e9
            );
            for &ty in &types {
                if !cpu::supports(ty) {
                    continue;
                }
                let w = random_weights(ty, n * k / ty.block_elems(), &mut rng);
                let t = time(&mut || cpu::matmul(ty, &w, n, k, &x, m)[0]);
                let gb = w.len() as f64 / t / 1e9;
                let name = format!("{ty:?}");
                println!(
                    "{k:>6} {n:>6} {m:>4} {name:>7} {:>9.1} {:>8.2} {gb:>8.2}",
                    t * 1e6,
                    flop / t / 1e9
                );
            }
        }
    }
}

/// The default model's shapes (k = 576 = 18 blocks of 32, 1536 = 6 super-blocks): long rows exercise the
/// kernels' multi-block paths that 1–3 blocks do not.
#[test]
fn model_shapes() {
    let mut rng = Rng(77);
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
        for &m in &[1, 2, 4, 9] {
            check(ty, m, 5, 18, &mut rng);
            check(ty, m, 3, 48, &mut rng);
        }
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K] {
        for &m in &[1, 2, 4, 9] {
            check(ty, m, 5, 6, &mut rng);
        }
    }
}

/// A decode step's products of one input in one team run (a layer's q, k, v and its gate, up: weights of
/// different heights and, in mixed GGUF files, different types) give each product's one-thread result bit
/// for bit, on 2 to 4 threads, and again when the helpers stay on between runs.
#[test]
fn many_products_of_one_input_equal_one_thread() {
    let mut rng = Rng(11);
    let k = 2 * 256;
    let shapes = [
        (GgmlType::Q4_1, 576),
        (GgmlType::Q8_0, 192),
        (GgmlType::Q4_K, 197),
        (GgmlType::Q6_K, 1536),
        (GgmlType::F16, 7),
    ];
    let weights: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, n)| quantized_weights(ty, n, k, &mut rng))
        .collect();
    let parts: Vec<cpu::split::Part<'_>> = shapes
        .iter()
        .zip(&weights)
        .map(|(&(ty, n), w)| cpu::split::Part { ty, w, n })
        .collect();
    let x = random_x(1, k, &mut rng);
    let one: Vec<Vec<f32>> = parts
        .iter()
        .map(|p| cpu::matmul(p.ty, p.w, p.n, k, &x, 1))
        .collect();
    assert_eq!(
        cpu::matmul_many(&parts, k, &x, 1),
        one,
        "matmul_many on the build's own threads"
    );
    for threads in 2..=4 {
        for _ in 0..3 {
            let many = cpu::split::matmul_many_split(&parts, k, &x, threads);
            for ((p, a), b) in parts.iter().zip(&one).zip(&many) {
                let same = a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{:?} n={} in one run on {threads} threads differs from one thread",
                    p.ty, p.n
                );
            }
        }
    }
}

/// The threaded build's split products (`cpu::split`: ranges of weight rows on the calling thread and the
/// team's helpers, real threads here) equal the one-thread kernels bit for bit: each output is computed by
/// the same kernel on the same rows, whichever thread runs its range. Decode (m = 1, written in place) and
/// prefill (m ≥ 4, the panel path, blocks copied into their columns), 2–4 threads, ragged last ranges.
#[test]
fn split_products_equal_one_thread() {
    let mut rng = Rng(7);
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::F16,
    ] {
        let k = 2 * 256;
        for (m, n) in [(1, 576), (1, 197), (2, 100), (5, 333), (64, 150)] {
            let w = quantized_weights(ty, n, k, &mut rng);
            let x = random_x(m, k, &mut rng);
            let one = cpu::matmul(ty, &w, n, k, &x, m);
            for threads in 2..=4 {
                // Many products in a row, as a decode step runs them: the helpers stay on between them.
                for _ in 0..3 {
                    let split = cpu::split::matmul_split(ty, &w, n, k, &x, m, threads);
                    let same = one.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{ty:?} m={m} n={n} on {threads} threads differs from one thread"
                    );
                }
            }
        }
    }
}
