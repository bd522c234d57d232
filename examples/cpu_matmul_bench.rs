//! Timings of the quantized CPU matmul (`kiln::kernels::cpu::matmul`) on SmolLM2-135M's shapes against
//! burn-flex's f32 matmul over the dequantised weights (`Tensor::matmul` on `Device::flex()`, the f32
//! path the quantized kernels replace), natively and in WebAssembly.
//!
//! - Natively: `cargo run --release --example cpu_matmul_bench [-- m1,m2,… [TYPE,TYPE,…]]`.
//! - wasm32 (simd128, as the browser package): `node bench/wasm_matmul.mjs [m1,m2,… [TYPE,…]]` builds this
//!   example for `wasm32-unknown-unknown` (release profile, the package's), binds it with `wasm-bindgen
//!   --target nodejs` and calls [`run`] under V8, the engine of Chromium.
//!
//! Defaults: m = 1, 64, 256; Q4_1, Q8_0, Q4_K, Q6_K. Shapes `(k, n)`: (576, 576), (576, 192), (576, 1536),
//! (1536, 576) and the lm_head (576, 49152); the K-quants need `k % 256 == 0`, so they get (1536, 576)
//! only, plus (512, 576) and (512, 1536) as stand-ins for the k = 576 shapes. Each figure is the median of
//! 7 runs of at least 40 ms (the machine may be shared); the table shows µs per product and GFLOP/s
//! (2·m·n·k).
//!
//! Timings only: nothing here asserts on them.

use burn::tensor::{Device, Tensor, TensorData};
use kiln::kernels::cpu;
use kiln::loader::GgmlType;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t0 = std::time::Instant::now();
    table(&args, &|| t0.elapsed().as_secs_f64(), &mut |line| {
        println!("{line}")
    });
}

/// The table for `args` (space-separated as on the command line), one line per row.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn run(args: &str) -> String {
    let args: Vec<String> = args.split_whitespace().map(String::from).collect();
    let t0 = instant::Instant::now();
    let mut out = String::new();
    table(&args, &|| t0.elapsed().as_secs_f64(), &mut |line| {
        out.push_str(line);
        out.push('\n');
    });
    out
}

#[cfg(target_arch = "wasm32")]
fn main() {}

/// Times every shape × m × type of `args`; `now` is seconds since some origin.
fn table(args: &[String], now: &dyn Fn() -> f64, out: &mut dyn FnMut(&str)) {
    let ms: Vec<usize> = args
        .first()
        .map(|s| s.split(',').filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 64, 256]);
    let all = [
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
    let types: Vec<GgmlType> = match args.get(1) {
        Some(s) => s
            .split(',')
            .filter_map(|t| {
                all.iter()
                    .copied()
                    .find(|ty| format!("{ty:?}").eq_ignore_ascii_case(t))
            })
            .collect(),
        None => vec![GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K],
    };
    let shapes = [
        (576, 576),
        (576, 192),
        (576, 1536),
        (1536, 576),
        (512, 576),
        (512, 1536),
        (576, 49152),
    ];

    // splitmix64, values in [-1, 1).
    let mut state = 7u64;
    let mut unit = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    };
    // The median of 7 runs of at least 40 ms each, in seconds per call.
    let time = |f: &mut dyn FnMut() -> f32| {
        let mut runs = Vec::new();
        for _ in 0..7 {
            let (mut iters, t0) = (0u32, now());
            while iters < 2 || now() - t0 < 0.04 {
                std::hint::black_box(f());
                iters += 1;
            }
            runs.push((now() - t0) / f64::from(iters));
        }
        runs.sort_by(f64::total_cmp);
        runs[3]
    };
    let device = Device::flex();
    out(&format!(
        "{:>6} {:>6} {:>4} {:>7} {:>10} {:>8}",
        "k", "n", "m", "type", "µs", "GFLOP/s"
    ));
    for &(k, n) in &shapes {
        for &m in &ms {
            let flop = 2.0 * (m * n * k) as f64;
            let x: Vec<f32> = (0..m * k).map(|_| unit()).collect();
            let wf: Vec<f32> = (0..n * k).map(|_| 0.05 * (unit() + unit() + unit())).collect();
            // The f32 path: W as burn's Linear holds it, [k, n].
            let wt: Vec<f32> = (0..k * n).map(|i| wf[(i % n) * k + i / n]).collect();
            let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
            let wtt = Tensor::<2>::from_data(TensorData::new(wt, [k, n]), &device);
            let t = time(&mut || {
                let y = xt.clone().matmul(wtt.clone()).into_data();
                y.as_slice::<f32>().map(|s| s[0]).unwrap_or(0.0)
            });
            out(&format!(
                "{k:>6} {n:>6} {m:>4} {:>7} {:>10.1} {:>8.2}",
                "flex",
                t * 1e6,
                flop / t / 1e9
            ));
            for &ty in &types {
                if !k.is_multiple_of(ty.block_elems()) {
                    continue;
                }
                let Some(w) = ty.quantize(&wf) else { continue };
                let t = time(&mut || cpu::matmul(ty, &w, n, k, &x, m)[0]);
                let name = format!("{ty:?}");
                out(&format!(
                    "{k:>6} {n:>6} {m:>4} {name:>7} {:>10.1} {:>8.2}",
                    t * 1e6,
                    flop / t / 1e9
                ));
            }
        }
    }
}
