//! The GPU benchmark that travels (`cargo xtask gpu-bench` packs it into a folder with `run.sh`): on any
//! machine with a Vulkan adapter and no network, random-weight models of SmolLM2-135M's and
//! Llama-3.2-1B's shapes, quantized with kiln's own quantizers, run on wgpu as the engine runs them (the
//! fused decode step where the layer has it, the sampler's candidates selected on the device) and print
//! prefill and decode tok/s, dispatches and bytes read back per decode step, and the fraction of the
//! memory-bandwidth bound.
//!
//! `kiln-gpu-bench [--shapes smollm2-135m,llama-3.2-1b] [--formats q4_0,q4_k] [--prompt 128] [--tokens 64]
//! [--bandwidth GB/s] [--gemv rows|split|auto] [--out results.json]` (`--gemv`: the decode GEMV's layout,
//! by default the one chosen for the adapter; the fused decode step's, `Decoder::set_caps`: prefill keeps
//! the adapter's)
//!
//! The bound: a decode step reads every weight once (the tied embedding as the `lm_head`), so at most
//! `bandwidth / weight bytes` steps a second; the fraction is `weight bytes × decode tok/s / bandwidth`
//! (the KV cache, a few MB at these lengths, is left out). The bandwidth is the adapter's, as its vendor
//! states it (an H100 SXM: 3350 GB/s; a laptop's shared memory: 50–120 GB/s).
//!
//! Each configuration runs once unmeasured (shader compilation), then measured: the prefill of `prompt`
//! ids (its logits' candidates read back), then `tokens` greedy steps, each ending in its read. Timings
//! only: nothing here asserts on them.

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::borrow::Cow;
    use std::time::Instant;

    use kiln::engine::runtime::counters;
    use kiln::engine::runtime::runner::{Readout, Runner, greedy_ids};
    use kiln::kernels::caps::{Caps, GemvLayout};
    use kiln::loader::quantize::{Quantizing, quantize_type};
    use kiln::loader::{GgmlType, LoadError, RawTensor, Weights};
    use kiln::model::{Decoder, ModelConfig};
    use pollster::block_on;
    use serde_json::{Value, json};

    type Result<T> = std::result::Result<T, String>;

    /// `config.json` of each shape (weights random; positions capped at 4096, which the runs stay within).
    fn config(shape: &str) -> Result<Value> {
        Ok(match shape {
            "smollm2-135m" => json!({
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
                "max_position_embeddings": 4096, "tie_word_embeddings": true, "hidden_act": "silu",
            }),
            "llama-3.2-1b" => json!({
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                "max_position_embeddings": 4096, "tie_word_embeddings": true, "hidden_act": "silu",
                "head_dim": 64,
            }),
            other => return Err(format!("unknown shape `{other}` (smollm2-135m, llama-3.2-1b)")),
        })
    }

    /// Every tensor the decoder asks for, as random f32 (norms near 1, matrices uniform in ±0.05).
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    impl Weights for Random {
        fn contains(&self, name: &str) -> bool {
            name != "lm_head.weight"
        }
        fn take(&mut self, _name: &str, expected: &[usize]) -> std::result::Result<RawTensor<'_>, LoadError> {
            let n: usize = expected.iter().product();
            let vector = expected.len() == 1;
            let bytes: Vec<u8> = (0..n)
                .flat_map(|_| {
                    let u = self.next();
                    let v = if vector {
                        1.0 + 0.1 * (u - 0.5)
                    } else {
                        0.1 * (u - 0.5)
                    };
                    v.to_le_bytes()
                })
                .collect();
            Ok(RawTensor {
                ty: GgmlType::F32,
                shape: expected.to_vec(),
                bytes: Cow::Owned(bytes),
            })
        }
        fn leftover(&self) -> Option<String> {
            None
        }
        fn total_bytes(&self) -> u64 {
            0
        }
    }

    struct Args {
        shapes: Vec<String>,
        formats: Vec<String>,
        prompt: usize,
        tokens: usize,
        bandwidth: Option<f64>,
        out: Option<String>,
        gemv: Option<GemvLayout>,
    }

    fn parse() -> Result<Args> {
        let mut a = Args {
            shapes: vec!["smollm2-135m".into(), "llama-3.2-1b".into()],
            formats: vec!["q4_0".into(), "q4_k".into()],
            prompt: 128,
            tokens: 64,
            bandwidth: None,
            out: None,
            gemv: None,
        };
        let list = |v: String| v.split(',').map(|s| s.trim().to_string()).collect::<Vec<_>>();
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or(format!("{flag} needs a value"));
            let num = |v: String| v.parse::<usize>().map_err(|_| format!("bad number `{v}`"));
            match flag.as_str() {
                "--shapes" => a.shapes = list(value()?),
                "--formats" => a.formats = list(value()?),
                "--prompt" => a.prompt = num(value()?)?,
                "--tokens" => a.tokens = num(value()?)?.max(2),
                "--bandwidth" => {
                    let v = value()?;
                    let gb: f64 = v.parse().map_err(|_| format!("bad bandwidth `{v}` (GB/s)"))?;
                    a.bandwidth = (gb > 0.0).then_some(gb);
                }
                "--out" => a.out = Some(value()?),
                "--gemv" => {
                    a.gemv = match value()?.as_str() {
                        "rows" => Some(GemvLayout::Rows),
                        "split" => Some(GemvLayout::Split),
                        "auto" => None,
                        other => return Err(format!("--gemv {other}: rows, split or auto")),
                    }
                }
                "-h" | "--help" => return Err("usage: see the header of examples/gpu_bench.rs".into()),
                _ => return Err(format!("unknown flag `{flag}`")),
            }
        }
        Ok(a)
    }

    /// One measured generation: (prefill s, decode s, decode counts).
    fn run(d: &Decoder, prompt: usize, tokens: usize) -> Result<(f64, f64, counters::Counts)> {
        let ids: Vec<u32> = (0..prompt)
            .map(|i| (i * 7919 % d.config.vocab_size) as u32)
            .collect();
        let top = Readout::Top {
            adjust: &[],
            temperature: 0.0,
        };
        let err = |e: kiln::engine::EngineError| e.to_string();
        let watch = counters::watch();
        let t0 = Instant::now();
        let (mut runner, rows) =
            block_on(Runner::prefill(d, &ids, prompt + tokens, false, top)).map_err(err)?;
        let prefill = t0.elapsed().as_secs_f64();
        let mut next = greedy_ids(rows)[0];
        let before = watch.counts();
        let t1 = Instant::now();
        for _ in 1..tokens {
            next = greedy_ids(block_on(runner.step(&[next], top)).map_err(err)?)[0];
        }
        Ok((prefill, t1.elapsed().as_secs_f64(), watch.counts().since(&before)))
    }

    pub fn main() -> Result<()> {
        let a = parse()?;
        let gpu = block_on(kiln::engine::runtime::device::gpu()).map_err(|e| {
            format!("no wgpu adapter ({e}): this benchmark needs a Vulkan driver (`vulkaninfo --summary`)")
        })?;
        let own = Caps::of(&gpu.device);
        let caps = a.gemv.map_or(own, |layout| own.with_gemv(layout));
        eprintln!("gpu-bench: adapter {:?}, decode GEMV {:?}", gpu.info, caps.gemv);
        let mut results = Vec::new();
        println!(
            "{:<14} {:<6} {:>9} {:>13} {:>12} {:>14} {:>12} {:>10}",
            "shape",
            "format",
            "weights",
            "prefill tok/s",
            "decode tok/s",
            "dispatches/tok",
            "bytes/tok",
            "bound"
        );
        for shape in &a.shapes {
            let json = serde_json::to_vec(&config(shape)?).map_err(|e| e.to_string())?;
            for format in &a.formats {
                let ty = quantize_type(format)?;
                let t0 = Instant::now();
                let cfg = ModelConfig::from_json(&json).map_err(|e| e.to_string())?;
                let mut random = Random(0x9E37_79B9_7F4A_7C15);
                let mut weights = Quantizing::new(&mut random, ty);
                let mut d = Decoder::load(cfg, &mut weights, &gpu.device).map_err(|e| e.to_string())?;
                d.set_caps(caps);
                let load_s = t0.elapsed().as_secs_f64();
                let bytes = d.device_bytes() as f64;
                eprintln!(
                    "gpu-bench: {shape} {format}: {:.1} MiB of weights, made and loaded in {load_s:.1} s",
                    bytes / 1048576.0
                );
                run(&d, 16, 4)?;
                let (prefill, decode, counts) = run(&d, a.prompt, a.tokens)?;
                let steps = (a.tokens - 1) as f64;
                let (prefill_tps, decode_tps) = (a.prompt as f64 / prefill, steps / decode);
                let bound = a.bandwidth.map(|gb| bytes * decode_tps / (gb * 1e9));
                println!(
                    "{shape:<14} {format:<6} {:>6.1} MiB {prefill_tps:>13.1} {decode_tps:>12.2} {:>14.1} {:>12.0} {:>10}",
                    bytes / 1048576.0,
                    counts.dispatches as f64 / steps,
                    counts.read_bytes as f64 / steps,
                    bound.map_or("-".to_string(), |f| format!("{:.1}%", f * 100.0)),
                );
                let per_kernel: serde_json::Map<String, Value> = counts
                    .by_kernel
                    .iter()
                    .map(|(k, &n)| (k.clone(), json!(n as f64 / steps)))
                    .collect();
                results.push(json!({
                    "shape": shape, "format": format, "weight_bytes": bytes, "load_s": load_s,
                    "prompt_tokens": a.prompt, "decode_steps": steps, "prefill_tok_s": prefill_tps,
                    "decode_tok_s": decode_tps, "dispatches_per_step": counts.dispatches as f64 / steps,
                    "read_bytes_per_step": counts.read_bytes as f64 / steps,
                    "dispatches_per_step_by_kernel": per_kernel, "bandwidth_gb_s": a.bandwidth,
                    "fraction_of_bandwidth_bound": bound, "fused": d.is_fused(), "gemv": caps.gemv,
                }));
            }
        }
        if let Some(path) = &a.out {
            let report = json!({ "adapter": gpu.info, "results": results });
            let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
            std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
            eprintln!("gpu-bench: wrote {path}");
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(not(target_arch = "wasm32"))]
    if let Err(e) = native::main() {
        eprintln!("gpu-bench: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
