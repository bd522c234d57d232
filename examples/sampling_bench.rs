//! Host time per token of kiln's sampler (`kiln::sampling::Sampler`) over one step's logits, for a
//! vocabulary of Gemma 3's size (262,144) and SmolLM2's (49,152): greedy without logprobs, greedy with 5
//! logprobs, and `temperature 0.7, top_p 0.9`.
//!
//! `cargo run --release --example sampling_bench [-- V,V,…]`. The logits are a fixed pseudo-random
//! spread like a model's (a few large, a long tail), copied into the step's buffer on every call as
//! the engine hands the sampler a fresh row. Each figure is the median of 7 runs of at least 50 ms, in µs
//! per token. Timings only: nothing here asserts on them.

use std::time::Instant;

use kiln::api::validate::Sampling;
use kiln::sampling::Sampler;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_else(|| vec![262_144, 49_152]);
    let params = |temperature: f32, top_p: f32| Sampling {
        temperature,
        top_p,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        logit_bias: Vec::new(),
        seed: Some(7),
    };
    let cases: [(&str, Sampling, Option<usize>); 3] = [
        ("greedy", params(0.0, 1.0), None),
        ("greedy, 5 logprobs", params(0.0, 1.0), Some(5)),
        ("t 0.7, top_p 0.9", params(0.7, 0.9), None),
    ];
    println!("{:>8} {:<20} {:>10}", "V", "case", "µs/token");
    for &v in &sizes {
        // splitmix64 → a logit spread: most near 0, a few up to ~20.
        let mut state = 11u64;
        let logits: Vec<f32> = (0..v)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                let u = ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32;
                -8.0 * (1.0 - u).ln() - 4.0
            })
            .collect();
        for (name, p, logprobs) in &cases {
            let mut sampler = Sampler::new(p.clone(), 0, 0);
            let mut row = logits.clone();
            let mut runs = Vec::new();
            for _ in 0..7 {
                let (mut iters, t0) = (0u32, Instant::now());
                while iters < 3 || t0.elapsed().as_secs_f64() < 0.05 {
                    row.copy_from_slice(&logits);
                    std::hint::black_box(sampler.sample(&mut row, *logprobs));
                    iters += 1;
                }
                runs.push(t0.elapsed().as_secs_f64() / f64::from(iters));
            }
            runs.sort_by(f64::total_cmp);
            println!("{v:>8} {name:<20} {:>10.1}", runs[3] * 1e6);
        }
    }
}
