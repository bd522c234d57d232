//! Weights split across several storage buffers (`kernels::gpu`'s answer to WebGPU's
//! `maxStorageBufferBindingSize`): [`gpu::upload_with_limit`] forces a small tensor into 3+ parts of whole
//! rows, and the matmul (GEMV at m = 1, tiled at m = 40) and the embedding rows must equal those of the
//! same tensor in one buffer, bit for bit (every output is one row's dot product in the same order), and
//! the host reference within the usual tolerance (`1e-4 · Σ|x||w|`).
//!
//! One test also uploads a tensor 1.2 times the device's own limit through plain [`gpu::upload`].
//!
//! Shapes: weights `[n, k]` with odd `n` and a last part shorter than the others; part sizes are chosen so
//! that a part's bytes are not a whole number of words (the padding of each part is exercised).

use burn::tensor::{Int, Tensor, TensorData};
use kiln::kernels::gpu;
use kiln::loader::GgmlType;

use super::{FORMATS, Rng, device, host_dequantize, random_blocks, read};

/// `(type id, n, k)`: a 32-element format, a 2/3-bit K-quant and a codebook format.
const CASES: &[(u32, usize, usize)] = &[(8, 65, 64), (11, 37, 256), (23, 29, 512), (20, 41, 96)];

/// The bytes per row of format `id` at `k` elements.
fn row_bytes(id: u32, k: usize) -> usize {
    let &(_, be, bb, _) = FORMATS.iter().find(|f| f.0 == id).expect("a test format");
    k / be * bb
}

/// A binding limit that holds `rows` rows of `row_bytes` (rounded up to a word) but not one more.
fn limit_for(rows: usize, row_bytes: usize) -> u64 {
    ((rows * row_bytes).next_multiple_of(4) + 2) as u64
}

fn ty(id: u32) -> GgmlType {
    GgmlType::from_id(id).expect("a named type")
}

#[test]
fn split_matmul_equals_one_buffer() {
    let device = device();
    for &(id, n, k) in CASES {
        let mut rng = Rng(0xA5A5_0000 ^ u64::from(id));
        let bytes = random_blocks(&mut rng, id, n * k);
        let w_host = host_dequantize(id, &bytes);
        let rb = row_bytes(id, k);
        let per_part = n / 3;
        let whole = gpu::upload(ty(id), &bytes, n, k, &device).expect("upload");
        let split = gpu::upload_with_limit(ty(id), &bytes, n, k, &device, limit_for(per_part, rb))
            .expect("split upload");
        assert_eq!(whole.parts(), 1, "type {id}: a small tensor fits one buffer");
        assert_eq!(
            split.parts(),
            n.div_ceil(per_part),
            "type {id}: parts of {per_part} rows"
        );
        assert!(split.parts() >= 3);
        assert!(
            split.device_bytes() < bytes.len() + 4 * split.parts(),
            "no widening"
        );
        for m in [1, 5, 40] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
            let xt = || Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
            let y_whole = read(gpu::matmul(xt(), &whole));
            let y_split = read(gpu::matmul(xt(), &split));
            assert_eq!(y_split.len(), m * n);
            for (o, (a, b)) in y_split.iter().zip(&y_whole).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "type {id} m={m}: y[{}, {}] split {a}, one buffer {b}",
                    o / n,
                    o % n
                );
            }
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
                    let got = f64::from(y_split[i * n + j]);
                    assert!(
                        (got - dot).abs() <= 1e-4 * mag + 1e-30,
                        "type {id} m={m} y[{i},{j}] = {got} vs {dot}"
                    );
                }
            }
        }
    }
}

#[test]
fn split_embedding_rows_are_exact() {
    let device = device();
    for &(id, n, k) in CASES {
        let mut rng = Rng(0x5A5A_0000 ^ u64::from(id));
        let bytes = random_blocks(&mut rng, id, n * k);
        let table = host_dequantize(id, &bytes);
        let split = gpu::upload_with_limit(ty(id), &bytes, n, k, &device, limit_for(n / 4, row_bytes(id, k)))
            .expect("split upload");
        assert!(split.parts() >= 4, "type {id}: {} parts", split.parts());
        let last = n as i32 - 1;
        // Rows of every part, part edges, repeats, and ids outside the table.
        let per = (n / 4) as i32;
        let ids: Vec<i32> = vec![
            last,
            0,
            per - 1,
            per,
            2 * per + 1,
            -1,
            per,
            n as i32,
            last - 1,
            1,
            n as i32 + 7,
        ];
        let ids_t = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), &device);
        let rows = read(gpu::embedding(&split, ids_t));
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
}

#[test]
fn a_row_over_the_limit_is_an_error() {
    let device = device();
    let mut rng = Rng(5);
    let bytes = random_blocks(&mut rng, 8, 4 * 64);
    let err = gpu::upload_with_limit(GgmlType::Q8_0, &bytes, 4, 64, &device, 67).expect_err("68-byte rows");
    assert!(matches!(err, gpu::GpuKernelError::RowTooLarge { .. }), "{err}");
    let one_per_part =
        gpu::upload_with_limit(GgmlType::Q8_0, &bytes, 4, 64, &device, 68).expect("one row per part");
    assert_eq!(one_per_part.parts(), 4);
}

#[test]
fn the_device_reports_its_binding_limit() {
    let device = device();
    let limit = kiln::kernels::max_binding_bytes(&device).expect("a wgpu device has a binding limit");
    // WebGPU guarantees 128 MiB (the default `maxStorageBufferBindingSize`).
    assert!(limit >= 1 << 27, "binding limit {limit}");
    eprintln!("storage binding limit: {limit} bytes");
    let (cpu, _) = kiln::engine::runtime::device::cpu();
    assert_eq!(kiln::kernels::max_binding_bytes(&cpu), None);
}

/// A tensor past the device's own limit (lavapipe's is 128 MiB): a Q8_0 table 1.2 times the limit (k = 640,
/// a large vocabulary's embedding) goes up in parts by [`gpu::upload`] alone; the tied
/// lm_head GEMV and the embedding rows of both sides of the part boundary match the host.
#[test]
fn a_tensor_over_the_device_limit_is_split() {
    let device = device();
    let limit = kiln::kernels::max_binding_bytes(&device).expect("a binding limit");
    let (k, rb) = (640, row_bytes(8, 640));
    let n = (limit as usize / rb) * 6 / 5;
    if n * rb > 1 << 30 {
        eprintln!("binding limit {limit}: a tensor past it is too large for this test");
        return;
    }
    let mut rng = Rng(17);
    let bytes = random_blocks(&mut rng, 8, n * k);
    let w = gpu::upload(GgmlType::Q8_0, &bytes, n, k, &device).expect("upload");
    assert_eq!(w.parts(), 2, "{} bytes under a {limit}-byte limit", bytes.len());
    let row = |r: usize| GgmlType::Q8_0.dequantize(&bytes[r * rb..(r + 1) * rb]);
    let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
    let y = read(gpu::matmul(
        Tensor::<2>::from_data(TensorData::new(x.clone(), [1, k]), &device),
        &w,
    ));
    assert_eq!(y.len(), n);
    for (j, &got) in y.iter().enumerate() {
        let wr = row(j);
        let dot: f64 = wr
            .iter()
            .zip(&x)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let mag: f64 = wr
            .iter()
            .zip(&x)
            .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
            .sum();
        assert!(
            (f64::from(got) - dot).abs() <= 1e-4 * mag + 1e-30,
            "row {j}: {got} vs {dot}"
        );
    }
    let edge = limit as usize / rb;
    let ids: Vec<i32> = [0, edge - 1, edge, n - 1].iter().map(|&i| i as i32).collect();
    let ids_t = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), &device);
    let rows = read(gpu::embedding(&w, ids_t));
    for (r, &i) in ids.iter().enumerate() {
        assert_eq!(rows[r * k..(r + 1) * k], row(i as usize)[..], "row {i}");
    }
}
