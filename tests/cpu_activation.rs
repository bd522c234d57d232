//! The CPU backend's element-wise kernels (`kiln::kernels::cpu::activation`) against f64 references, and
//! their tensor-level entry points (`kiln::kernels::{silu_mul, softmax_last}`) against burn's own ops.
//!
//! Tolerances: `exp` within 2 ulp of the exact value where the result is a normal f32 (and 0 below);
//! SiLU·up and softmax within 1e-6 relative of f64 (a few ulp: the `exp`, one division, a sum of at most
//! a few thousand positive terms), plus for softmax the f32 rounding of `x − max` itself.

use burn::tensor::{Device, Tensor, TensorData};
use kiln::kernels::{self, cpu::activation};

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
}
