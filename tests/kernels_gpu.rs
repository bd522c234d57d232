//! kiln's quantized GPU kernels (`kernels::gpu`) on native wgpu (Vulkan; lavapipe on CI) against the host.
//!
//! For each format: random blocks with finite scales, uploaded as they are, then `matmul` for odd shapes
//! (m ∈ {1, 3, 8, 9, 33}: the GEMV path up to 8, in both layouts at 1 and 3 (whole rows per thread, a row's
//! blocks shared by a workgroup); above 8 the GEMV 8 rows at a time and the tiled path; n ∈ {1, 7, 65};
//! k = 1–3 blocks)
//! against the host reference (dequantise, then an f64 matmul), and `embedding` rows against the
//! dequantised rows, bit for bit.
//!
//! Tolerance of the matmul: `|y − y_ref| ≤ 1e-4 · Σ_k |x||w|` per output. The weights are the same f32
//! values on both sides (the kernels dequantise with the host's formulas), so only the f32 summation
//! order differs: its error is below `k · 2⁻²⁴ · Σ|x||w|`, about `4.6e-5 · Σ|x||w|` for the largest
//! `k = 768` here, and far less for the tree and tile sums.
//!
//! Split weights (a tensor over the storage binding limit, in several buffers) are in `kernels_gpu/split.rs`,
//! the fused decode-step kernels (RMSNorm, rope with the cache append, attention, SiLU·up) in
//! `kernels_gpu/decode.rs`, the sampling kernels (bias and penalties, top-k selection) in
//! `kernels_gpu/select.rs`, the device's optional paths (f16 activations, subgroup reductions) in
//! `kernels_gpu/features.rs`, several GEMVs in one launch in `kernels_gpu/multi.rs`.
//!
//! The host reference is `GgmlType::dequantize` wherever `GgmlType` names the format; for the formats it
//! does not name yet, this file's `host_dequantize`, a transcription of llama.cpp's `dequantize_row_*`.
#![cfg(not(target_arch = "wasm32"))]

use burn::tensor::{Device, Int, Tensor, TensorData};
use half::{bf16, f16};
use kiln::kernels::gpu::{self, GemvLayout, GpuWeight};
use kiln::loader::GgmlType;

#[path = "kernels_gpu/split.rs"]
mod split;

#[path = "kernels_gpu/decode.rs"]
mod decode;

#[path = "kernels_gpu/select.rs"]
mod select;

#[path = "kernels_gpu/features.rs"]
mod features;

#[path = "kernels_gpu/multi.rs"]
mod multi;

#[path = "kernels_gpu/encoder_attention.rs"]
mod encoder_attention;

mod quant_kernels;

fn device() -> Device {
    match pollster::block_on(kiln::engine::runtime::device::gpu()) {
        Ok(gpu) => gpu.device,
        Err(e) => panic!(
            "no wgpu adapter ({e}); install a Vulkan driver: `apt-get install mesa-vulkan-drivers` \
             (lavapipe; `cargo xtask setup` does it), then check `ls /usr/share/vulkan/icd.d/`"
        ),
    }
}

/// The kernel feature sets the tests run: the plain f32 kernels, and the device's own optional paths
/// (the device's `kernels::caps::Caps`; on lavapipe f16 and subgroups of 8) where it has any.
fn feature_sets() -> Vec<gpu::Features> {
    let own = gpu::Caps::of(&device()).features;
    let mut sets = vec![gpu::Features::BASE];
    if own != gpu::Features::BASE {
        sets.push(own);
    }
    sets
}

/// xorshift64*: reproducible test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }
    /// A finite f16 scale: mostly normal, sometimes subnormal or zero (the decoder's edge cases).
    fn scale(&mut self) -> [u8; 2] {
        let v = match self.next() % 16 {
            0 => f16::from_bits((self.next() % 0x400) as u16 | ((self.next() % 2) << 15) as u16),
            1 => f16::ZERO,
            _ => f16::from_f32(self.unit() * 0.1),
        };
        v.to_le_bytes()
    }
}

/// `(id, block elements, block bytes, offsets of the f16 scales in a block)`.
const FORMATS: &[(u32, usize, usize, &[usize])] = &[
    (3, 32, 20, &[0, 2]),     // Q4_1
    (8, 32, 34, &[0]),        // Q8_0
    (2, 32, 18, &[0]),        // Q4_0
    (6, 32, 22, &[0]),        // Q5_0
    (12, 256, 144, &[0, 2]),  // Q4_K
    (14, 256, 210, &[208]),   // Q6_K
    (7, 32, 24, &[0, 2]),     // Q5_1
    (13, 256, 176, &[0, 2]),  // Q5_K
    (1, 1, 2, &[0]),          // F16
    (30, 1, 2, &[]),          // BF16
    (0, 1, 4, &[]),           // F32
    (10, 256, 84, &[80, 82]), // Q2_K
    (11, 256, 110, &[108]),   // Q3_K
    (20, 32, 18, &[0]),       // IQ4_NL
    (23, 256, 136, &[0]),     // IQ4_XS
];

/// `elems` elements' worth of random blocks of format `id`.
fn random_blocks(rng: &mut Rng, id: u32, elems: usize) -> Vec<u8> {
    let &(_, be, bb, scales) = FORMATS.iter().find(|f| f.0 == id).expect("a test format");
    let mut out = Vec::with_capacity(elems / be * bb);
    for _ in 0..elems / be {
        let mut block: Vec<u8> = match id {
            0 => (rng.unit() * 2.0).to_le_bytes().to_vec(),
            30 => bf16::from_f32(rng.unit()).to_le_bytes().to_vec(),
            _ => (0..bb).map(|_| rng.byte()).collect(),
        };
        for &o in scales {
            block[o..o + 2].copy_from_slice(&rng.scale());
        }
        out.extend_from_slice(&block);
    }
    out
}

fn h(b: &[u8], o: usize) -> f32 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f32()
}

/// llama.cpp's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f32::from(d), f32::from(m))
}

/// The host reference: the loader's where it names the format, else llama.cpp's loops transcribed.
fn host_dequantize(id: u32, bytes: &[u8]) -> Vec<f32> {
    match GgmlType::from_id(id) {
        Some(ty) => ty.dequantize(bytes),
        None => llama_dequantize(id, bytes),
    }
}

/// llama.cpp's `dequantize_row_*` for Q5_0, Q5_1, Q4_K, Q5_K and Q6_K, transcribed.
fn llama_dequantize(id: u32, bytes: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    match id {
        6 | 7 => {
            let (bb, qh_at) = if id == 6 { (22, 2) } else { (24, 4) };
            for b in bytes.chunks_exact(bb) {
                let d = h(b, 0);
                let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
                let qs = &b[qh_at + 4..];
                let mut lo = [0.0; 16];
                let mut hi = [0.0; 16];
                for j in 0..16 {
                    let xh0 = ((qh >> j) << 4) & 0x10;
                    let xh1 = (qh >> (j + 12)) & 0x10;
                    let x0 = (u32::from(qs[j] & 0xF) | xh0) as i32;
                    let x1 = (u32::from(qs[j] >> 4) | xh1) as i32;
                    if id == 6 {
                        lo[j] = (x0 - 16) as f32 * d;
                        hi[j] = (x1 - 16) as f32 * d;
                    } else {
                        let m = h(b, 2);
                        lo[j] = x0 as f32 * d + m;
                        hi[j] = x1 as f32 * d + m;
                    }
                }
                y.extend_from_slice(&lo);
                y.extend_from_slice(&hi);
            }
        }
        12 | 13 => {
            let bb = if id == 12 { 144 } else { 176 };
            for b in bytes.chunks_exact(bb) {
                let (d, min) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let qh = &b[16..48];
                let mut q = if id == 12 { &b[16..] } else { &b[48..] };
                let (mut u1, mut u2) = (1u8, 2u8);
                for is in (0..8).step_by(2) {
                    let (sc, m) = scale_min_k4(is, scales);
                    let (d1, m1) = (d * sc, min * m);
                    let (sc, m) = scale_min_k4(is + 1, scales);
                    let (d2, m2) = (d * sc, min * m);
                    let high = |l: usize, u: u8| if id == 13 && qh[l] & u != 0 { 16.0 } else { 0.0 };
                    for (l, &b) in q[..32].iter().enumerate() {
                        y.push(d1 * (f32::from(b & 0xF) + high(l, u1)) - m1);
                    }
                    for (l, &b) in q[..32].iter().enumerate() {
                        y.push(d2 * (f32::from(b >> 4) + high(l, u2)) - m2);
                    }
                    q = &q[32..];
                    u1 <<= 2;
                    u2 <<= 2;
                }
            }
        }
        14 => {
            for b in bytes.chunks_exact(210) {
                let d = h(b, 208);
                let mut out = [0.0f32; 256];
                for n in 0..2 {
                    let (ql, qh, sc) = (&b[n * 64..], &b[128 + n * 32..], &b[192 + n * 8..]);
                    let y = &mut out[n * 128..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                        let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                        let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                        let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                        let s = |i: usize| f32::from(sc[i] as i8);
                        y[l] = d * s(is) * q1 as f32;
                        y[l + 32] = d * s(is + 2) * q2 as f32;
                        y[l + 64] = d * s(is + 4) * q3 as f32;
                        y[l + 96] = d * s(is + 6) * q4 as f32;
                    }
                }
                y.extend_from_slice(&out);
            }
        }
        _ => panic!("no host reference for GGML type {id}"),
    }
    y
}

fn read(t: Tensor<2>) -> Vec<f32> {
    let t = t.cast(burn::tensor::DType::F32);
    pollster::block_on(t.into_data_async())
        .expect("read back")
        .try_to_vec::<f32>()
        .expect("f32 data")
}

fn upload(id: u32, bytes: &[u8], n: usize, k: usize, device: &Device) -> GpuWeight {
    match GgmlType::from_id(id) {
        Some(ty) => {
            assert!(gpu::supports(ty), "{ty:?} is supported");
            gpu::upload(ty, bytes, n, k, device).expect("upload")
        }
        None => gpu::upload_ggml(id, bytes, n, k, device).expect("upload"),
    }
}

/// The `m` of each matmul case and its layout: up to 8 the GEMV in that layout (the split one at `m` = 1
/// and 3 only, and at one `k`: its `m = 8` variant is the same code unrolled further, and every variant
/// is a shader compile per format on lavapipe); above 8, the row layout runs the GEMV 8 rows of `x` at a
/// time (software adapters) and the split layout the tiled kernel (GPUs).
const CASES: [(usize, GemvLayout); 9] = [
    (1, GemvLayout::Rows),
    (1, GemvLayout::Split),
    (3, GemvLayout::Rows),
    (3, GemvLayout::Split),
    (8, GemvLayout::Rows),
    (9, GemvLayout::Rows),
    (9, GemvLayout::Split),
    (33, GemvLayout::Rows),
    (33, GemvLayout::Split),
];

/// Every shape of the matrix for format `id`; returns the largest error / tolerance ratio seen.
fn check_matmul(id: u32) -> f64 {
    let device = device();
    let &(_, be, _, _) = FORMATS.iter().find(|f| f.0 == id).expect("a test format");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(id));
    let ks: Vec<usize> = if be == 1 {
        vec![1, 37, 96]
    } else {
        vec![be, 2 * be, 3 * be]
    };
    let mut worst = 0.0f64;
    for &k in &ks {
        for n in [1, 7, 65] {
            let bytes = random_blocks(&mut rng, id, n * k);
            let w_host = host_dequantize(id, &bytes);
            assert_eq!(w_host.len(), n * k);
            assert!(w_host.iter().all(|v| v.is_finite()));
            let w = upload(id, &bytes, n, k, &device);
            assert!(w.device_bytes() < bytes.len() + 4, "no widening on the device");
            for (m, layout) in CASES {
                // The split layout at the largest k only (two lanes per row group there; one lane, at one
                // block per row, is the vocabulary-sized test's): each variant is a lavapipe compile.
                if layout == GemvLayout::Split && m <= 8 && Some(&k) != ks.last() {
                    continue;
                }
                let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
                let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
                let y = read(gpu::matmul(xt, &w.with_caps(w.caps().with_gemv(layout))));
                assert_eq!(y.len(), m * n);
                for i in 0..m {
                    for j in 0..n {
                        let (mut dot, mut mag) = (0.0f64, 0.0f64);
                        for e in 0..k {
                            let (a, b) = (f64::from(x[i * k + e]), f64::from(w_host[j * k + e]));
                            dot += a * b;
                            mag += (a * b).abs();
                        }
                        let err = (f64::from(y[i * n + j]) - dot).abs();
                        let tol = 1e-4 * mag + 1e-30;
                        assert!(
                            err <= tol,
                            "type {id} m={m} n={n} k={k} {layout:?} y[{i},{j}] = {} vs {dot} (tolerance {tol})",
                            y[i * n + j]
                        );
                        worst = worst.max(err / tol);
                    }
                }
            }
        }
    }
    worst
}

/// Rows of the table for format `id`, in an order with repeats, bit for bit; an id past the table is 0.
fn check_embedding(id: u32) {
    let device = device();
    let &(_, be, _, _) = FORMATS.iter().find(|f| f.0 == id).expect("a test format");
    let mut rng = Rng(0x51_7CC1_B727_220A ^ u64::from(id));
    let (n, k) = (13, if be == 1 { 37 } else { 2 * be });
    let bytes = random_blocks(&mut rng, id, n * k);
    let table = host_dequantize(id, &bytes);
    let w = upload(id, &bytes, n, k, &device);
    let ids: Vec<i32> = vec![3, 0, 12, 3, 7, 13, -1];
    let ids_t = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), &device);
    let rows = read(gpu::embedding(&w, ids_t));
    assert_eq!(rows.len(), ids.len() * k);
    for (r, &i) in ids.iter().enumerate() {
        let got = &rows[r * k..(r + 1) * k];
        if (0..n as i32).contains(&i) {
            let want = &table[i as usize * k..(i as usize + 1) * k];
            for (e, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "type {id} row {i} element {e}: {g} vs {w}"
                );
            }
        } else {
            assert!(
                got.iter().all(|&v| v == 0.0),
                "type {id}: id {i} outside the table gives zeros"
            );
        }
    }
}

macro_rules! format_tests {
    ($($name:ident: $id:expr,)*) => {$(
        mod $name {
            #[test]
            fn matmul_matches_the_host() {
                let worst = super::check_matmul($id);
                eprintln!("type {}: worst error {worst:.3} of the tolerance", $id);
            }
            #[test]
            fn embedding_rows_are_exact() {
                super::check_embedding($id);
            }
        }
    )*};
}

format_tests! {
    q4_1: 3,
    q8_0: 8,
    q4_0: 2,
    q5_0: 6,
    q4_k: 12,
    q6_k: 14,
    q5_1: 7,
    q5_k: 13,
    float16: 1,
    bfloat16: 30,
    float32: 0,
    q2_k: 10,
    q3_k: 11,
    iq4_nl: 20,
    iq4_xs: 23,
}

/// Every weight type the loader reads has a GPU kernel (none is widened to f32 on the device).
#[test]
fn every_weight_type_is_read() {
    for ty in GgmlType::ALL {
        if ty == GgmlType::Q8_K {
            continue; // an activation format, never a weight in a file kiln reads
        }
        assert!(gpu::supports(ty), "{ty:?} has a GPU kernel");
        assert!(
            FORMATS.iter().any(|f| f.0 == ty.id()),
            "{ty:?} is among this file's test formats"
        );
    }
}

/// The cases the browser test runs on WebGPU (`quant_kernels`), here on native wgpu through `QuantWeight`.
#[test]
fn shared_cases_pass_on_native_wgpu() {
    let device = device();
    for ty in quant_kernels::TYPES {
        let worst = pollster::block_on(quant_kernels::check(ty, &device));
        eprintln!("{ty:?}: worst relative error {worst:e}");
    }
}

/// The transcription above and the loader agree where both read a format (a check of the reference).
#[test]
fn transcribed_reference_matches_the_loader() {
    let mut rng = Rng(11);
    for id in [6, 7, 12, 13, 14] {
        let Some(ty) = GgmlType::from_id(id) else { continue };
        let bytes = random_blocks(&mut rng, id, 512);
        let (a, b) = (ty.dequantize(&bytes), llama_dequantize(id, &bytes));
        assert_eq!(a.len(), b.len(), "{ty:?}");
        for (e, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                x.to_bits(),
                y.to_bits(),
                "{ty:?} element {e}: loader {x}, llama.cpp {y}"
            );
        }
    }
}

/// A model-sized row (k = 4096, 16 Q4_K super-blocks) through both paths, from the loader's quantizer.
#[test]
fn model_sized_rows_match_the_host() {
    let device = device();
    let (n, k) = (300, 4096);
    let mut rng = Rng(3);
    let dense: Vec<f32> = (0..n * k).map(|_| rng.unit()).collect();
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0] {
        let Some(bytes) = ty.quantize(&dense) else {
            continue;
        };
        let w_host = ty.dequantize(&bytes);
        let w = gpu::upload(ty, &bytes, n, k, &device).expect("upload");
        for (m, layout) in [
            (1, GemvLayout::Rows),
            (1, GemvLayout::Split),
            (9, GemvLayout::Rows),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
            let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
            let y = read(gpu::matmul(xt, &w.with_caps(w.caps().with_gemv(layout))));
            for i in 0..m {
                for j in 0..n {
                    let (xr, wr) = (&x[i * k..(i + 1) * k], &w_host[j * k..(j + 1) * k]);
                    let dot: f64 = xr
                        .iter()
                        .zip(wr)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    let mag: f64 = xr
                        .iter()
                        .zip(wr)
                        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                        .sum();
                    let got = f64::from(y[i * n + j]);
                    assert!(
                        (got - dot).abs() <= 1e-4 * mag,
                        "{ty:?} m={m} {layout:?} y[{i},{j}] = {got} vs {dot}"
                    );
                }
            }
        }
    }
}

/// More rows than one grid dimension holds (65 535 workgroups): the GEMV grid goes 2-D (the row layout;
/// the split one takes 256 one-block rows per workgroup, its last one ragged).
#[test]
fn gemv_covers_a_vocabulary_sized_matrix() {
    let device = device();
    let (n, k) = (70_001, 32);
    let mut rng = Rng(7);
    let bytes = random_blocks(&mut rng, 8, n * k);
    let w_host = host_dequantize(8, &bytes);
    let w = upload(8, &bytes, n, k, &device);
    let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
    for layout in [GemvLayout::Rows, GemvLayout::Split] {
        let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [1, k]), &device);
        let y = read(gpu::matmul(xt, &w.with_caps(w.caps().with_gemv(layout))));
        assert_eq!(y.len(), n);
        check_rows(&y, &w_host, &x, k, layout);
    }
}

fn check_rows(y: &[f32], w_host: &[f32], x: &[f32], k: usize, layout: GemvLayout) {
    for (j, &got) in y.iter().enumerate() {
        let row = &w_host[j * k..(j + 1) * k];
        let dot: f64 = row
            .iter()
            .zip(x)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let mag: f64 = row
            .iter()
            .zip(x)
            .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
            .sum();
        assert!(
            (f64::from(got) - dot).abs() <= 1e-4 * mag + 1e-30,
            "{layout:?} row {j}: {got} vs {dot}"
        );
    }
}

#[test]
fn bad_inputs_are_errors() {
    let device = device();
    assert!(!gpu::supports_ggml(15), "Q8_K is not a weight format");
    assert!(!gpu::supports_ggml(16), "IQ2_XXS is not read");
    let err = gpu::upload(GgmlType::Q8_0, &[0; 34], 1, 33, &device).expect_err("k not whole blocks");
    assert!(matches!(err, gpu::GpuKernelError::BadRowLength { .. }), "{err}");
    let err = gpu::upload(GgmlType::Q8_0, &[0; 33], 1, 32, &device).expect_err("short bytes");
    assert!(matches!(err, gpu::GpuKernelError::BadByteCount { .. }), "{err}");
    let (cpu, _) = kiln::engine::runtime::device::cpu();
    let err = gpu::upload(GgmlType::Q8_0, &[0; 34], 1, 32, &cpu).expect_err("the CPU device");
    assert!(matches!(err, gpu::GpuKernelError::NotCube(_)), "{err}");
}
