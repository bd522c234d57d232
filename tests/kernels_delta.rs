//! The gated delta rule (`kiln::kernels::delta`, `kiln::kernels::cpu::delta`) and the causal convolution
//! (`kiln::model::layers::conv`) against plain f64 references written from transformers' definitions
//! (`torch_recurrent_gated_delta_rule`, `causal_conv1d_fn`): the CPU backend's recurrent kernel, burn's ops
//! (one step, and the chunked form for several positions, also across chunk boundaries and with a state
//! carried in) on the CPU backend and on wgpu, kiln's wgpu kernel, and the CPU kernel's thread counts bit
//! for bit.
//!
//! Tolerances: 2e-5 absolute against f64 for the CPU kernel (sums of at most a few hundred f32 products of
//! unit vectors); 1e-4 for burn's chunked form (another order: a triangular solve, decays as exponentials
//! of cumulative sums) on the CPU and 2e-4 on wgpu (its `exp`).

use burn::tensor::{Device, Tensor, TensorData};
use kiln::kernels::cpu::delta::{Dims, gated_delta_on};
use kiln::kernels::delta::{gated_delta, gated_delta_ops};

/// Deterministic values in (−1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

struct Case {
    d: Dims,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

fn case(b: usize, s: usize, hk: usize, hv: usize, dk: usize, dv: usize, seed: u64) -> Case {
    let n = b * s * hv;
    Case {
        d: Dims {
            b,
            s,
            key_heads: hk,
            value_heads: hv,
            dk,
            dv,
            tiled: seed % 2 == 1,
        },
        q: values(b * s * hk * dk, seed),
        k: values(b * s * hk * dk, seed + 1),
        v: values(b * s * hv * dv, seed + 2),
        // Log decays in (−1, 0), betas in (0, 1), as -exp(A)·softplus(..) and sigmoid(..) give.
        g: values(n, seed + 3).iter().map(|x| -(x + 1.0) / 2.0).collect(),
        beta: values(n, seed + 4).iter().map(|x| (x + 1.0) / 2.0).collect(),
        state: values(b * hv * dk * dv, seed + 5)
            .iter()
            .map(|x| x * 0.5)
            .collect(),
    }
}

/// transformers' recurrent form in f64: outputs and the final state.
fn reference(c: &Case) -> (Vec<f64>, Vec<f64>) {
    let Dims {
        b,
        s,
        key_heads: hk,
        value_heads: hv,
        dk,
        dv,
        tiled,
    } = c.d;
    let mut state: Vec<f64> = c.state.iter().map(|&x| f64::from(x)).collect();
    let mut out = vec![0.0; b * s * hv * dv];
    let unit = |x: &[f32], scale: f64| {
        let n = (x.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>() + 1e-6).sqrt();
        x.iter().map(|&a| f64::from(a) / n * scale).collect::<Vec<_>>()
    };
    for row in 0..b {
        for j in 0..hv {
            let kh = if tiled { j % hk } else { j / (hv / hk) };
            let st = &mut state[(row * hv + j) * dk * dv..][..dk * dv];
            for t in 0..s {
                let at = (row * s + t) * hk + kh;
                let q = unit(&c.q[at * dk..][..dk], 1.0 / (dk as f64).sqrt());
                let k = unit(&c.k[at * dk..][..dk], 1.0);
                let at = (row * s + t) * hv + j;
                let (decay, beta) = (f64::from(c.g[at]).exp(), f64::from(c.beta[at]));
                st.iter_mut().for_each(|x| *x *= decay);
                let delta: Vec<f64> = (0..dv)
                    .map(|y| {
                        let mem: f64 = (0..dk).map(|x| st[x * dv + y] * k[x]).sum();
                        (f64::from(c.v[at * dv + y]) - mem) * beta
                    })
                    .collect();
                for x in 0..dk {
                    for y in 0..dv {
                        st[x * dv + y] += k[x] * delta[y];
                    }
                }
                for y in 0..dv {
                    out[at * dv + y] = (0..dk).map(|x| st[x * dv + y] * q[x]).sum();
                }
            }
        }
    }
    (out, state)
}

fn worst(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max)
}

fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    pollster::block_on(t.into_data_async())
        .expect("read back")
        .try_to_vec::<f32>()
        .expect("f32")
}

/// The tensor-level entry points' signature.
type Entry =
    fn((Tensor<4>, Tensor<4>, Tensor<4>), (Tensor<3>, Tensor<3>), Tensor<4>, bool) -> (Tensor<4>, Tensor<4>);

/// Runs `c` through `f` (the tensor-level entry points) on `device`.
fn through(c: &Case, device: &Device, f: Entry) -> (Vec<f32>, Vec<f32>) {
    let Dims {
        b,
        s,
        key_heads: hk,
        value_heads: hv,
        dk,
        dv,
        tiled,
    } = c.d;
    let t4 =
        |v: &[f32], shape: [usize; 4]| Tensor::<4>::from_data(TensorData::new(v.to_vec(), shape), device);
    let t3 = |v: &[f32]| Tensor::<3>::from_data(TensorData::new(v.to_vec(), [b, s, hv]), device);
    let (out, state) = f(
        (
            t4(&c.q, [b, s, hk, dk]),
            t4(&c.k, [b, s, hk, dk]),
            t4(&c.v, [b, s, hv, dv]),
        ),
        (t3(&c.g), t3(&c.beta)),
        t4(&c.state, [b, hv, dk, dv]),
        tiled,
    );
    (read(out), read(state))
}

/// `(b, s, Hk, Hv, dk, dv)`; the seeds make odd cases tiled.
const CASES: [(usize, usize, usize, usize, usize, usize); 5] = [
    (1, 1, 2, 4, 16, 8),
    (2, 5, 1, 2, 8, 8),
    (1, 40, 2, 4, 16, 16),
    (1, 33, 4, 4, 32, 8),
    (1, 37, 2, 6, 8, 8),
];

#[test]
fn the_cpu_kernel_matches_the_recurrence_and_splits_bit_for_bit() {
    for (i, &(b, s, hk, hv, dk, dv)) in CASES.iter().enumerate() {
        let c = case(b, s, hk, hv, dk, dv, 11 * i as u64);
        let (want_out, want_state) = reference(&c);
        let mut one = c.state.clone();
        let out = gated_delta_on(1, c.d, (&c.q, &c.k, &c.v), (&c.g, &c.beta), &mut one);
        assert!(
            worst(&out, &want_out) < 2e-5,
            "case {i}: outputs {}",
            worst(&out, &want_out)
        );
        assert!(worst(&one, &want_state) < 2e-5, "case {i}: state");
        let mut two = c.state.clone();
        let split = gated_delta_on(3, c.d, (&c.q, &c.k, &c.v), (&c.g, &c.beta), &mut two);
        assert_eq!((split, two), (out, one), "case {i}: threads change nothing");
    }
}

#[test]
fn burn_ops_match_the_recurrence_on_the_cpu_backend() {
    let device = Device::flex();
    for (i, &(b, s, hk, hv, dk, dv)) in CASES.iter().enumerate() {
        let c = case(b, s, hk, hv, dk, dv, 100 + i as u64);
        let (want_out, want_state) = reference(&c);
        let (out, state) = through(&c, &device, gated_delta_ops);
        assert!(
            worst(&out, &want_out) < 1e-4,
            "case {i}: {}",
            worst(&out, &want_out)
        );
        assert!(
            worst(&state, &want_state) < 1e-4,
            "case {i}: state {}",
            worst(&state, &want_state)
        );
        let (out, _) = through(&c, &device, gated_delta);
        assert!(worst(&out, &want_out) < 2e-5, "case {i}: the CPU path");
    }
}

/// On wgpu both paths: kiln's kernel (what `gated_delta` runs there) and burn's ops (chunked and one step).
#[test]
fn the_kernel_and_burn_ops_match_the_recurrence_on_wgpu() {
    let gpu = pollster::block_on(kiln::engine::runtime::device::gpu()).expect("a wgpu adapter");
    for (i, &(b, s, hk, hv, dk, dv)) in CASES.iter().enumerate() {
        let c = case(b, s, hk, hv, dk, dv, 200 + i as u64);
        let (want_out, want_state) = reference(&c);
        for (name, f) in [
            ("kernel", gated_delta as Entry),
            ("burn ops", gated_delta_ops as Entry),
        ] {
            let (out, state) = through(&c, &gpu.device, f);
            let (o, st) = (worst(&out, &want_out), worst(&state, &want_state));
            eprintln!("case {i} {name}: outputs {o:e}, state {st:e}");
            assert!(o < 2e-4 && st < 2e-4, "case {i} {name}: outputs {o}, state {st}");
        }
    }
}

#[test]
fn the_causal_convolution_matches_its_definition() {
    use kiln::model::layers::conv::causal_conv;
    let device = Device::flex();
    let (b, s, c, w) = (2, 7, 5, 4);
    let x = values(b * s * c, 1);
    let state = values(b * (w - 1) * c, 2);
    let weight = values(w * c, 3);
    let t3 =
        |v: &[f32], shape: [usize; 3]| Tensor::<3>::from_data(TensorData::new(v.to_vec(), shape), &device);
    let wt = Tensor::<2>::from_data(TensorData::new(weight.clone(), [w, c]), &device);
    let (y, next) = causal_conv(t3(&x, [b, s, c]), t3(&state, [b, w - 1, c]), &wt, None);
    let (y, next) = (read(y), read(next));
    for row in 0..b {
        // The state's positions, then x's.
        let at = |p: usize, ch: usize| match p < w - 1 {
            true => state[(row * (w - 1) + p) * c + ch],
            false => x[(row * s + p - (w - 1)) * c + ch],
        };
        for t in 0..s {
            for ch in 0..c {
                let want: f32 = (0..w).map(|j| weight[j * c + ch] * at(t + j, ch)).sum();
                assert!(
                    (y[(row * s + t) * c + ch] - want).abs() < 1e-6,
                    "row {row} t {t} ch {ch}"
                );
            }
        }
        for p in 0..w - 1 {
            for ch in 0..c {
                assert_eq!(
                    next[(row * (w - 1) + p) * c + ch],
                    at(s + p, ch),
                    "the state keeps the last inputs"
                );
            }
        }
    }
}
