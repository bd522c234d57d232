//! Where a wgpu decode step's time goes: `cargo run --example decode_profile -- MODEL.gguf [steps]`.
//!
//! Loads the model on wgpu, prefills 64 tokens, times `steps` greedy decode steps one by one (each
//! synchronised by reading its logits back; through the fused kernels where the model has them, the
//! generic path with `PROFILE_GENERIC=1`), then times kiln's GEMV alone on the decoder's matmul shapes
//! (random Q4_1 blocks) against burn's f32 matmul on the same shapes. Timings only.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    use std::time::Instant;

    use burn::tensor::{Distribution, Tensor};
    use kiln::engine::LoadedModel;
    use kiln::kernels::gpu;
    use kiln::loader::GgmlType;
    use pollster::block_on;

    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: decode_profile MODEL.gguf [steps]");
    let steps: usize = args.next().map_or(8, |s| s.parse().expect("steps"));
    let bytes = std::fs::read(&path).expect("read model");
    let dev = block_on(kiln::engine::runtime::device::gpu())
        .expect("wgpu")
        .device;
    let model = LoadedModel::from_gguf("p", &bytes, &dev).expect("load");
    let mut generic = model.decoder.clone();
    generic.set_fused(false);
    // PROFILE_GENERIC=1: the generic burn-op step instead of the fused kernels.
    let dec = match std::env::var_os("PROFILE_GENERIC") {
        Some(_) => &generic,
        None => &model.decoder,
    };
    let sync = |t: Tensor<3>| {
        // f16 activations (a device with shader-f16) are read as f32.
        let d = block_on(t.cast(burn::tensor::DType::F32).into_data_async()).expect("read");
        d.try_into_vec::<f32>().expect("f32")
    };
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if std::env::var_os("PROFILE_COMPILE").is_some() {
        compile_times(&dev, &dec.config);
        return;
    }
    let prompt: Vec<u32> = (0..64).map(|i| 100 + i * 7).collect();
    let mut cache = dec.new_cache(1, 512);
    let t0 = Instant::now();
    let logits = sync(dec.forward(&[prompt], &mut cache, false).expect("prefill"));
    eprintln!("prefill 64: {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    let mut next = argmax(&logits);
    let mut toks = vec![next];
    let mut times = Vec::new();
    let mut cpu0 = 0.0;
    for i in 0..steps {
        if i == 1 {
            cpu0 = cpu_ms();
        }
        let t0 = Instant::now();
        let logits = sync(dec.forward(&[vec![next]], &mut cache, false).expect("step"));
        next = argmax(&logits);
        toks.push(next);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        times.push(ms);
        eprintln!("step {i}: {ms:.1} ms");
    }
    let mut rest = times.get(1..).unwrap_or_default().to_vec();
    rest.sort_by(f64::total_cmp);
    if let Some(median) = rest.get(rest.len() / 2) {
        // CPU time (all threads, lavapipe's included): steadier than wall time on a shared machine.
        let cpu = (cpu_ms() - cpu0) / rest.len() as f64;
        eprintln!("median step after the first: {median:.1} ms; CPU time per step {cpu:.1} ms");
        let all: f64 = times.iter().sum();
        eprintln!(
            "all {} steps: {all:.0} ms ({:.2} tok/s)",
            times.len(),
            times.len() as f64 / all * 1e3
        );
    }
    eprintln!("tokens {toks:?}");
    if std::env::var_os("PROFILE_STEPS_ONLY").is_some() {
        return;
    }

    // The fused decode kernels alone, 50 launches then one sync.
    {
        use kiln::kernels::gpu::decode as fused;
        let c = &dec.config;
        let caps = dec.caps();
        let time = |f: &dyn Fn() -> Tensor<2>| {
            let _ = sync(f().unsqueeze());
            let t0 = Instant::now();
            let mut last = None;
            for _ in 0..50 {
                last = Some(f());
            }
            let _ = sync(last.expect("ran").unsqueeze());
            t0.elapsed().as_secs_f64() * 1e3 / 50.0
        };
        let g = Tensor::<2>::random([1, c.intermediate_size], Distribution::Uniform(-1.0, 1.0), &dev);
        let x = Tensor::<2>::random([1, c.hidden_size], Distribution::Uniform(-1.0, 1.0), &dev);
        let w = Tensor::<1>::random([c.hidden_size], Distribution::Uniform(-1.0, 1.0), &dev);
        let keys = Tensor::<4>::random(
            [1, c.num_kv_heads, 512, c.head_dim],
            Distribution::Uniform(-1.0, 1.0),
            &dev,
        );
        let q = Tensor::<2>::random(
            [1, c.num_heads * c.head_dim],
            Distribution::Uniform(-1.0, 1.0),
            &dev,
        );
        eprintln!(
            "silu_mul [1, f]: {:.3} ms",
            time(&|| fused::gated(g.clone(), g.clone(), fused::Gate::Silu, caps.features))
        );
        eprintln!(
            "rms_norm [1, h]: {:.3} ms",
            time(&|| fused::rms_norm(x.clone(), &w, 1e-5, caps.features))
        );
        eprintln!(
            "add_rms_norm [1, h]: {:.3} ms",
            time(&|| fused::add_rms_norm(x.clone(), x.clone(), None, &w, 1e-5, caps.features).1)
        );
        let kv = Tensor::<2>::random(
            [1, c.num_kv_heads * c.head_dim],
            Distribution::Uniform(-1.0, 1.0),
            &dev,
        );
        let table = Tensor::<2>::random([1024, c.head_dim / 2], Distribution::Uniform(-1.0, 1.0), &dev);
        let cache = std::cell::RefCell::new((keys.clone(), keys));
        let attend = |pos: usize| {
            let mut slots = cache.borrow_mut();
            let (k, v) = &mut *slots;
            let slot = fused::CacheSlot { keys: k, values: v };
            let how = fused::Attend::plain(c.head_dim, &table);
            fused::attention_append(q.clone(), kv.clone(), kv.clone(), how, pos, slot, caps)
        };
        eprintln!("attention_append pos=63: {:.3} ms", time(&|| attend(63)));
        eprintln!("attention_append pos=511: {:.3} ms", time(&|| attend(511)));
        eprintln!("burn add [1, h]: {:.3} ms", time(&|| x.clone() + x.clone()));
    }

    // GEMV alone on each shape, 20 launches then one sync.
    let c = &dec.config;
    let (h, f, kvd) = (c.hidden_size, c.intermediate_size, c.num_kv_heads * c.head_dim);
    let shapes = [
        ("q/o", h, h),
        ("k/v", kvd, h),
        ("gate/up", f, h),
        ("down", h, f),
        ("lm_head", c.vocab_size, h),
    ];
    for (name, n, k) in shapes {
        // SmolLM2's Q4_1 file: Q4_1 layers, a Q8_0 (tied) lm_head.
        let ty = if name == "lm_head" {
            GgmlType::Q8_0
        } else {
            GgmlType::Q4_1
        };
        let row = ty.row_bytes(k).expect("row");
        let mut raw = vec![0u8; row * n];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
        }
        // Sane scales: every block starts with d = 0.01 (and Q4_1's m = -0.01), f16 bits.
        let (bb, head): (usize, &[u8]) = match ty {
            GgmlType::Q8_0 => (34, &[0x1f, 0x21]),
            _ => (20, &[0x1f, 0x21, 0x1f, 0xa1]),
        };
        for blk in raw.chunks_mut(bb) {
            blk[..head.len()].copy_from_slice(head);
        }
        let w = gpu::upload(ty, &raw, n, k, &dev).expect("upload");
        let x = Tensor::<2>::random([1, k], Distribution::Uniform(-1.0, 1.0), &dev);
        let dense = Tensor::<2>::random([k, n], Distribution::Uniform(-1.0, 1.0), &dev);
        let reps = 20;
        let time = |f: &dyn Fn() -> Tensor<2>| {
            let _ = sync(f().unsqueeze());
            let t0 = Instant::now();
            let mut last = None;
            for _ in 0..reps {
                last = Some(f());
            }
            let _ = sync(last.expect("ran").unsqueeze());
            t0.elapsed().as_secs_f64() * 1e3 / reps as f64
        };
        let c0 = cpu_ms();
        let q = time(&|| gpu::matmul(x.clone(), &w));
        let qcpu = (cpu_ms() - c0) / (reps + 1) as f64;
        let d = time(&|| x.clone().matmul(dense.clone()));
        eprintln!(
            "{name} [{n} x {k}] {ty:?}: kiln gemv {q:.2} ms (CPU {qcpu:.2} ms), burn f32 matmul {d:.2} ms"
        );
    }
}

/// User + system CPU time of this process so far (`/proc/self/stat`, 100 ticks a second), in ms.
#[cfg(not(target_arch = "wasm32"))]
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<f64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of the whole line (utime, stime) are the 12th and 13th after the name.
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) * 10.0
}

/// The first launch of each decode kernel (pipeline compilation included) in a fresh process.
#[cfg(not(target_arch = "wasm32"))]
fn compile_times(dev: &burn::tensor::Device, c: &kiln::model::config::ModelConfig) {
    use std::time::Instant;

    use burn::tensor::{Distribution, Tensor};
    use kiln::kernels::gpu::{self, decode as fused};
    use kiln::loader::GgmlType;

    let caps = kiln::kernels::caps::Caps::of(dev);
    let first = |name: &str, f: &dyn Fn() -> Tensor<2>| {
        let t0 = Instant::now();
        let _ = pollster::block_on(f().into_data_async());
        eprintln!("first {name}: {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    };
    let r = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Uniform(-1.0, 1.0), dev);
    let (h, d) = (c.hidden_size, c.head_dim);
    let x = r([1, h]);
    let w = Tensor::<1>::random([h], Distribution::Uniform(-1.0, 1.0), dev);
    first("sync", &|| x.clone());
    first("rms_norm", &|| {
        fused::rms_norm(x.clone(), &w, 1e-5, caps.features)
    });
    first("add_rms_norm", &|| {
        fused::add_rms_norm(x.clone(), x.clone(), None, &w, 1e-5, caps.features).1
    });
    let keys = Tensor::<4>::random([1, c.num_kv_heads, 256, d], Distribution::Uniform(-1.0, 1.0), dev);
    let cache = std::cell::RefCell::new((keys.clone(), keys));
    let (q, kv, table) = (
        r([1, c.num_heads * d]),
        r([1, c.num_kv_heads * d]),
        r([512, d / 2]),
    );
    first("attention_append", &|| {
        let mut slots = cache.borrow_mut();
        let (k, v) = &mut *slots;
        let slot = fused::CacheSlot { keys: k, values: v };
        let how = fused::Attend::plain(d, &table);
        fused::attention_append(q.clone(), kv.clone(), kv.clone(), how, 64, slot, caps)
    });
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
        let row = ty.row_bytes(h).expect("row");
        let raw = vec![0u8; row * 256];
        let wt = gpu::upload(ty, &raw, 256, h, dev).expect("upload");
        first(&format!("gemv {ty:?}"), &|| gpu::matmul(x.clone(), &wt));
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}
