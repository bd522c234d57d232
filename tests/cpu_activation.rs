//! The CPU backend's element-wise kernels (`kiln::kernels::cpu::activation`) against f64 references, and
//! their tensor-level entry points (`kiln::kernels::{silu_mul, softmax_last}`) against burn's own ops;
//! likewise the row kernels (`kiln::kernels::cpu::rows`: RMSNorm, rope) and `kiln::kernels::{rms_norm,
//! rope, layer_norm}`, the vision encoders' GELUs and LayerNorm against f64, and the pieces the thread
//! team splits them into against one thread.
//!
//! Tolerances: `exp` within 2 ulp of the exact value where the result is a normal f32 (and 0 below);
//! SiLU·up and softmax within 1e-6 relative of f64 (a few ulp: the `exp`, one division, a sum of at most
//! a few thousand positive terms), plus for softmax the f32 rounding of `x − max` itself; RMSNorm within
//! 1e-6 relative of f64 (a sum of squares in another order than burn's, a root, a division); the GELUs
//! and LayerNorm as their tests say; the rope and every split bit for bit (the same f32 operations in the
//! same order).

use burn::tensor::{Device, Tensor, TensorData};
use kiln::kernels::cpu::attention::Heads;
use kiln::kernels::{self, cpu::activation, cpu::rows};

/// The distance between `got` and `want` in units of the f32 spacing at `want`.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    let spacing = f64::from(f32::from_bits(w.to_bits() + 1) - w);
    (f64::from(got) - want).abs() / spacing
}

#[test]
fn exp_within_two_ulp_over_the_normal_range() {
    let mut worst = 0f64;
    // Every 1/4096 from −87.33 to 88.37, plus the exact integers and halves.
    let mut x = -87.33f32;
    while x <= 88.37 {
        let e = ulps(activation::exp(x), f64::from(x).exp());
        assert!(
            e <= 2.0,
            "exp({x}) = {} against {}: {e} ulp",
            activation::exp(x),
            f64::from(x).exp()
        );
        worst = worst.max(e);
        x += 1.0 / 4096.0;
    }
    for i in -174..=176 {
        let x = i as f32 / 2.0;
        assert!(ulps(activation::exp(x), f64::from(x).exp()) <= 2.0, "exp({x})");
    }
    assert_eq!(activation::exp(0.0), 1.0);
    assert!(worst > 0.0, "the sweep compared something");
}

#[test]
fn exp_ends() {
    assert_eq!(activation::exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(activation::exp(-1000.0), 0.0);
    assert_eq!(activation::exp(-87.5), 0.0);
    let top = activation::exp(88.37);
    assert!(top.is_finite() && ulps(top, f64::from(88.37f32).exp()) <= 2.0);
    assert!(activation::exp(1000.0).is_finite(), "saturates, never inf");
}

#[test]
fn silu_mul_against_f64() {
    let n = 4099;
    let gate: Vec<f32> = (0..n).map(|i| (i as f32 - 2049.0) / 64.0).collect();
    let up: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    let mut out = vec![f32::NAN; n];
    activation::silu_mul(&gate, &up, &mut out);
    for i in 0..n {
        let (g, u) = (f64::from(gate[i]), f64::from(up[i]));
        let want = g / (1.0 + (-g).exp()) * u;
        let err = (f64::from(out[i]) - want).abs();
        assert!(
            err <= 1e-6 * want.abs() + 1e-30,
            "silu({g})·{u} = {} against {want}",
            out[i]
        );
    }
}

#[test]
fn softmax_rows_against_f64() {
    // Rows of 1, 7, 8, 9 and 1000 columns, with masked (−∞) entries as a causal mask leaves them.
    for cols in [1usize, 7, 8, 9, 1000] {
        let rows = 3;
        let mut x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 613) as f32 - 306.0) / 20.0)
            .collect();
        for r in 0..rows {
            for c in (r + 1)..cols {
                if c % 3 == 0 {
                    x[r * cols + c] = f32::NEG_INFINITY;
                }
            }
        }
        let input = x.clone();
        activation::softmax_rows(&mut x, cols);
        for r in 0..rows {
            let row = &input[r * cols..(r + 1) * cols];
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            for c in 0..cols {
                let gap = f64::from(row[c]) - max;
                let want = gap.exp() / sum;
                let got = f64::from(x[r * cols + c]);
                // f32's own rounding of `x − max` (half an ulp of the gap) moves e^gap by that much.
                let tol = match want {
                    0.0 => 0.0,
                    _ => want * (1e-6 + gap.abs() * f64::from(f32::EPSILON)),
                };
                assert!(
                    (got - want).abs() <= tol + 1e-30,
                    "cols {cols}: softmax[{r}, {c}] = {got} against {want}"
                );
            }
        }
    }
}

#[test]
fn tensor_entry_points_match_burn_on_flex() {
    let device = Device::flex();
    let values = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed) * 2_654_435_761) % 1000) as f32 / 125.0 - 4.0)
            .collect()
    };
    let shape = [2, 3, 37];
    let n = shape.iter().product();
    let t = |v: Vec<f32>| Tensor::<3>::from_data(TensorData::new(v, shape), &device);
    let (g, u) = (values(n, 1), values(n, 2));
    let ours = kernels::silu_mul(t(g.clone()), t(u.clone()))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let burns = (burn::tensor::activation::silu(t(g)) * t(u))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let scores = values(n, 3);
    let ours_sm = kernels::softmax_last(t(scores.clone()))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let burns_sm = burn::tensor::activation::softmax(t(scores), 2)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    for (what, a, b) in [("silu_mul", ours, burns), ("softmax_last", ours_sm, burns_sm)] {
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-6 * y.abs().max(1e-3),
                "{what}[{i}]: {x} against burn's {y}"
            );
        }
    }
}

/// The vision encoders' GELUs against f64: `x / (1 + e^(k·x·(1 + c·x²)))`, the tanh form's value
/// (`0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` is the same function) and quick GELU's `x·σ(1.702·x)`.
/// Tolerance: the `exp` (2 ulp) and the division, plus the f32 roundings of its argument `a` (five
/// operations), which the result carries as a relative error of up to `2·|a|` ulps: `(2·|a| + 4) · 2⁻²³`
/// relative.
#[test]
fn gelus_against_f64() {
    let n = 4099;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 2049.0) / 128.0).collect();
    type Unary = fn(&[f32], &mut [f32]);
    let cases: [(&str, Unary, f64, f64); 2] = [
        (
            "gelu_tanh",
            activation::gelu_tanh,
            -2.0 * (2.0 / std::f64::consts::PI).sqrt(),
            0.044_715,
        ),
        ("quick_gelu", activation::quick_gelu, -1.702, 0.0),
    ];
    for (what, f, k, c) in cases {
        let mut out = vec![f32::NAN; n];
        f(&x, &mut out);
        let mut pieces = vec![f32::NAN; n];
        activation::unary(f, &x, &mut pieces);
        for i in 0..n {
            let v = f64::from(x[i]);
            let a = k * v * (1.0 + c * v * v);
            let want = v / (1.0 + a.exp());
            let err = (f64::from(out[i]) - want).abs();
            assert!(
                err <= (2.0 * a.abs() + 4.0) * f64::from(f32::EPSILON) * want.abs() + 1e-30,
                "{what}({v}) = {} against {want}",
                out[i]
            );
            assert_eq!(out[i].to_bits(), pieces[i].to_bits(), "{what}: `unary` at {i}");
        }
    }
    let device = Device::flex();
    let t = Tensor::<2>::from_data(TensorData::new(x[..4096].to_vec(), [64, 64]), &device);
    let ours = kernels::gelu_tanh(t.clone())
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let erf = burn::tensor::activation::gelu(t)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    // The tanh approximation stays within 1e-3 of the exact (erf) GELU everywhere.
    for (i, (a, b)) in ours.iter().zip(&erf).enumerate() {
        assert!((a - b).abs() <= 1e-3, "gelu_tanh[{i}] = {a}, the exact GELU {b}");
    }
}

/// LayerNorm against f64, the rows of `rms_norm_against_f64` with a bias. Tolerance: 1e-5 of the output's
/// scale (`|w|·|normalised| + |b|`, plus 1): the row's mean and variance summed in f32 in eight lanes.
#[test]
fn layer_norm_against_f64() {
    for cols in [1usize, 7, 8, 9, 64, 768, 1152] {
        let rows = 5;
        let mut x = wave(rows * cols, cols);
        // A row off zero (its mean subtracted), and a constant one (zero variance: `eps` alone).
        x[..cols].iter_mut().for_each(|v| *v = *v * 0.5 + 3.0);
        x[cols..2 * cols].fill(0.5);
        let (w, b) = (wave(cols, 7), wave(cols, 8));
        let eps = 1e-6f32;
        let mut out = vec![f32::NAN; x.len()];
        rows::layer_norm(&x, &w, &b, eps, &mut out);
        for r in 0..rows {
            let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mean = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            for c in 0..cols {
                let norm = (row[c] - mean) * inv;
                let want = norm * f64::from(w[c]) + f64::from(b[c]);
                let got = f64::from(out[r * cols + c]);
                let scale = norm.abs() * f64::from(w[c]).abs() + f64::from(b[c]).abs() + 1.0;
                assert!(
                    (got - want).abs() <= 1e-5 * scale,
                    "cols {cols}: layer_norm[{r}, {c}] = {got} against {want}"
                );
            }
        }
    }
    // The tensor entry point, as burn's ops compute it.
    let device = Device::flex();
    let (rows_n, cols) = (6, 40);
    let x = Tensor::<2>::from_data(TensorData::new(wave(rows_n * cols, 3), [rows_n, cols]), &device);
    let w = Tensor::<1>::from_data(TensorData::new(wave(cols, 4), [cols]), &device);
    let b = Tensor::<1>::from_data(TensorData::new(wave(cols, 5), [cols]), &device);
    let ours = kernels::layer_norm(&x, &w, &b, 1e-5)
        .expect("flex")
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let centred = x.clone() - x.mean_dim(1);
    let inv = (centred.clone() * centred.clone())
        .mean_dim(1)
        .add_scalar(1e-5)
        .sqrt()
        .recip();
    let burns = (centred * inv * w.unsqueeze::<2>() + b.unsqueeze::<2>())
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    for (i, (a, b)) in ours.iter().zip(&burns).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "layer_norm[{i}]: {a} against burn's {b}"
        );
    }
}

/// `gated` (cut into pieces across the thread team in the `threads` build, `cargo test --features threads`)
/// gives every element its one-pass value, bit for bit, the tail past the last whole piece included.
#[test]
fn gated_pieces_match_one_pass_bit_for_bit() {
    let n = (1 << 15) + (1 << 13) + 3;
    let gate: Vec<f32> = (0..n).map(|i| ((i * 37 % 1001) as f32 - 500.0) / 50.0).collect();
    let up: Vec<f32> = (0..n).map(|i| ((i * 13 % 97) as f32 - 48.0) / 10.0).collect();
    type Gated = fn(&[f32], &[f32], &mut [f32]);
    let kernels: [(&str, Gated); 2] = [
        ("silu_mul", activation::silu_mul),
        ("gelu_tanh_mul", activation::gelu_tanh_mul),
    ];
    for (what, f) in kernels {
        let mut one = vec![0.0; n];
        f(&gate, &up, &mut one);
        let mut pieces = vec![f32::NAN; n];
        activation::gated(f, &gate, &up, &mut pieces);
        let differ = one
            .iter()
            .zip(&pieces)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "{what}: first element that differs");
    }
    type Unary = fn(&[f32], &mut [f32]);
    let unary: [(&str, Unary); 2] = [
        ("gelu_tanh", activation::gelu_tanh),
        ("quick_gelu", activation::quick_gelu),
    ];
    for (what, f) in unary {
        let mut one = vec![0.0; n];
        f(&gate, &mut one);
        let mut pieces = vec![f32::NAN; n];
        activation::unary(f, &gate, &mut pieces);
        let differ = one
            .iter()
            .zip(&pieces)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "{what}: first element that differs");
    }
}

fn wave(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 2_654_435_761) % 1000) as f32 / 125.0 - 4.0)
        .collect()
}

#[test]
fn rms_norm_against_f64() {
    for cols in [1usize, 7, 8, 9, 64, 576, 1000] {
        let rows = 5;
        let mut x = wave(rows * cols, cols);
        // A row of tiny values, where `eps` dominates, and one of zeros.
        x[..cols].iter_mut().for_each(|v| *v *= 1e-4);
        x[cols..2 * cols].fill(0.0);
        let w = wave(cols, 7);
        let eps = 1e-6f32;
        let mut out = vec![f32::NAN; x.len()];
        rows::rms_norm(&x, &w, eps, &mut out);
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + f64::from(eps)).sqrt();
            for c in 0..cols {
                let want = f64::from(row[c]) * inv * f64::from(w[c]);
                let got = f64::from(out[r * cols + c]);
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs() + 1e-30,
                    "cols {cols}: rms_norm[{r}, {c}] = {got} against {want}"
                );
            }
        }
    }
}

/// The rope of a strided `[b, n, s, d]` view (heads interleaved as the projections leave them) with a
/// partial rotary dimension: every output exactly the f32 formula's (the generic path's rounding).
#[test]
fn rope_is_the_formula_bit_for_bit() {
    let (b, n, s, d, half) = (2, 3, 5, 10, 3);
    // Stored as [b, s, n, d], viewed as [b, n, s, d].
    let data = wave(b * s * n * d, 11);
    let view = Heads {
        data: &data,
        offset: 0,
        batch: s * n * d,
        head: d,
        row: n * d,
    };
    let (cos, sin) = (wave(s * half, 3), wave(s * half, 5));
    let mut out = vec![f32::NAN; b * n * s * d];
    rows::rope(view, (b, n, s, d), &cos, &sin, &mut out);
    for i in 0..b {
        for j in 0..n {
            for r in 0..s {
                let x = &data[i * s * n * d + r * n * d + j * d..][..d];
                let o = &out[((i * n + j) * s + r) * d..][..d];
                let (c, sn) = (&cos[r * half..], &sin[r * half..]);
                for (e, got) in o.iter().enumerate() {
                    let want = match e {
                        e if e < half => x[e] * c[e] - x[e + half] * sn[e],
                        e if e < 2 * half => x[e] * c[e - half] + x[e - half] * sn[e - half],
                        e => x[e],
                    };
                    assert_eq!(got.to_bits(), want.to_bits(), "rope[{i}, {j}, {r}, {e}]");
                }
            }
        }
    }
}

/// The layers' `rms_norm` and `rope::apply` on flex (the kernels above) against burn's ops, on views as
/// the attention hands them over (heads swapped out of `[b, s, n, d]`).
#[test]
fn rows_entry_points_match_burn_on_flex() {
    let device = Device::flex();
    let (b, s, n, d, half) = (2, 7, 3, 16, 8);
    let x = Tensor::<4>::from_data(TensorData::new(wave(b * s * n * d, 1), [b, s, n, d]), &device)
        .swap_dims(1, 2);
    let w = Tensor::<1>::from_data(TensorData::new(wave(2 * d, 2), [2 * d]), &device).narrow(0, d, d);
    let ours = kernels::rms_norm(&x, &w, 1e-5)
        .expect("flex")
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let inv = x
        .clone()
        .powi_scalar(2)
        .mean_dim(3)
        .add_scalar(1e-5)
        .sqrt()
        .recip();
    let burns = (x.clone() * inv * w.unsqueeze::<4>())
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    for (i, (a, b)) in ours.iter().zip(&burns).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
            "rms_norm[{i}]: {a} against burn's {b}"
        );
    }
    // Positions 2.. of a table of 10: narrowed views, as `RopeTable::at` hands them over.
    let table = Tensor::<2>::from_data(TensorData::new(wave(10 * half, 4), [10, half]), &device);
    let cos = table.clone().narrow(0, 2, s).unsqueeze::<4>();
    let sin = table.mul_scalar(0.5).narrow(0, 2, s).unsqueeze::<4>();
    let ours = kernels::rope(&x, &cos, &sin)
        .expect("flex")
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let (x1, x2) = (x.clone().narrow(3, 0, half), x.narrow(3, half, half));
    let burns = Tensor::cat(
        vec![
            x1.clone() * cos.clone() - x2.clone() * sin.clone(),
            x2 * cos + x1 * sin,
        ],
        3,
    )
    .into_data()
    .try_to_vec::<f32>()
    .unwrap();
    let differ = ours
        .iter()
        .zip(&burns)
        .position(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(differ, None, "rope: first element that differs from burn's");
}

/// The row kernels cut into pieces across the thread team (2 and 3 threads) give every row its one-thread
/// value, bit for bit, the rows past the last whole piece included.
#[test]
fn row_pieces_match_one_thread_bit_for_bit() {
    let cols = 576;
    let rows_n = 2 * rows::PIECE / cols + 5;
    let x = wave(rows_n * cols, 9);
    let w = wave(cols, 10);
    let mut one = vec![0.0; x.len()];
    rows::rms_norm_on(1, &x, &w, 1e-6, &mut one);
    let mut ln_one = vec![0.0; x.len()];
    rows::layer_norm_on(1, &x, &w, &wave(cols, 11), 1e-6, &mut ln_one);
    let (b, n, s, d) = (1, 9, 2 * rows::PIECE / (9 * 64) + 3, 64);
    let view = Heads {
        data: &x[..b * n * s * d],
        offset: 0,
        batch: n * s * d,
        head: s * d,
        row: d,
    };
    let (cos, sin) = (wave(s * 32, 12), wave(s * 32, 13));
    let mut rope_one = vec![0.0; b * n * s * d];
    rows::rope_on(1, view, (b, n, s, d), &cos, &sin, &mut rope_one);
    for threads in [2, 3] {
        let mut split = vec![f32::NAN; x.len()];
        rows::rms_norm_on(threads, &x, &w, 1e-6, &mut split);
        let differ = one
            .iter()
            .zip(&split)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "rms_norm on {threads} threads");
        let mut split = vec![f32::NAN; x.len()];
        rows::layer_norm_on(threads, &x, &w, &wave(cols, 11), 1e-6, &mut split);
        let differ = ln_one
            .iter()
            .zip(&split)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "layer_norm on {threads} threads");
        let mut split = vec![f32::NAN; rope_one.len()];
        rows::rope_on(threads, view, (b, n, s, d), &cos, &sin, &mut split);
        let differ = rope_one
            .iter()
            .zip(&split)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "rope on {threads} threads");
    }
}
