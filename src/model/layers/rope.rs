//! Rotary position embeddings: the settings ([`Rope`]: default, linear, Llama 3, LongRoPE/`su`, partial
//! rotary, GGUF per-frequency factors) and their device tables ([`RopeTable`]), applied rotate-half style
//! (Hugging Face order; llama.cpp's interleaved-pair files are un-permuted at load) to the first
//! `rotary_dim` features of each head.
//!
//! Shapes: `x: [b, n, s, d]` (`n` heads, `s` positions, `d` head dim); tables `[max_pos, rotary_dim / 2]`.

use burn::tensor::{Device, Tensor, TensorData};

use crate::model::config::{ConfigError, HfConfig, RopeFields, invalid};

/// Llama 3.1/3.2's frequency-dependent rope scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
}

/// Phi-3's LongRoPE (`longrope`, formerly `su`): per-frequency divisors for short and long contexts, and a
/// factor on cos and sin.
#[derive(Debug, Clone, PartialEq)]
pub struct LongRope {
    /// `[rotary_dim / 2]` each.
    pub short_factor: Vec<f64>,
    pub long_factor: Vec<f64>,
    /// The pretraining context: contexts longer than this take the long factors.
    pub original_max_position_embeddings: usize,
    pub attention_factor: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (all frequencies divided by it).
    Linear(f64),
    Llama3(Llama3Scaling),
    LongRope(LongRope),
}

/// One rope: base, scaling, how many features of a head rotate.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub scaling: RopeScaling,
    /// Features of each head that rotate (the first ones); the rest pass through. Even, at most head_dim.
    pub rotary_dim: usize,
    /// Per-frequency divisors, `[rotary_dim / 2]`: GGUF's `rope_freqs.weight`, which llama.cpp's converter
    /// writes for Llama 3 scaling instead of the config fields.
    pub factors: Option<Vec<f64>>,
}

impl Rope {
    /// A plain rope over whole heads.
    pub fn plain(theta: f64, head_dim: usize) -> Self {
        Self {
            theta,
            scaling: RopeScaling::None,
            rotary_dim: head_dim,
            factors: None,
        }
    }

    /// The rope of the layers of `layer_type`, from the mirror's rope fields (`theta` when they name none).
    pub(crate) fn resolve(
        c: &HfConfig,
        layer_type: &str,
        head_dim: usize,
        theta: f64,
    ) -> Result<Self, ConfigError> {
        let f = c.rope_fields(layer_type)?.unwrap_or_default();
        Self::from_fields(&f, c, head_dim, theta)
    }

    pub(crate) fn from_fields(
        f: &RopeFields,
        c: &HfConfig,
        head_dim: usize,
        theta: f64,
    ) -> Result<Self, ConfigError> {
        let theta = f.rope_theta.unwrap_or(theta);
        let partial = f.partial_rotary_factor.or(c.partial_rotary_factor).unwrap_or(1.0);
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(invalid(
                "partial_rotary_factor",
                format!("{partial} is not in (0, 1]"),
            ));
        }
        let rotary_dim = (head_dim as f64 * partial) as usize;
        let original = f
            .original_max_position_embeddings
            .or(c.original_max_position_embeddings);
        let scaling = match f.rope_type.as_deref() {
            None | Some("default") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear(
                f.factor
                    .ok_or_else(|| invalid("rope_scaling", "linear scaling needs `factor`"))?,
            ),
            Some("llama3") => RopeScaling::Llama3(Llama3Scaling {
                factor: f.factor.unwrap_or(8.0),
                low_freq_factor: f.low_freq_factor.unwrap_or(1.0),
                high_freq_factor: f.high_freq_factor.unwrap_or(4.0),
                original_max_position_embeddings: f.original_max_position_embeddings.unwrap_or(8192),
            }),
            Some("longrope" | "su") => {
                let missing = |which| invalid("rope_scaling", format!("longrope needs `{which}`"));
                let original = original.ok_or_else(|| missing("original_max_position_embeddings"))?;
                let max = c.max_position_embeddings.unwrap_or(original);
                let factor = f.factor.unwrap_or(max as f64 / original as f64);
                let attention_factor = f.attention_factor.unwrap_or(if factor <= 1.0 {
                    1.0
                } else {
                    (1.0 + factor.ln() / (original as f64).ln()).sqrt()
                });
                RopeScaling::LongRope(LongRope {
                    short_factor: f.short_factor.clone().ok_or_else(|| missing("short_factor"))?,
                    long_factor: f.long_factor.clone().ok_or_else(|| missing("long_factor"))?,
                    original_max_position_embeddings: original,
                    attention_factor,
                })
            }
            Some(other) => {
                return Err(invalid(
                    "rope_scaling",
                    format!("rope type {other:?} is not supported (default, linear, llama3, longrope)"),
                ));
            }
        };
        Ok(Self {
            theta,
            scaling,
            rotary_dim,
            factors: None,
        })
    }

    /// Checks the sizes against the head dim.
    pub(crate) fn check(&self, head_dim: usize) -> Result<(), ConfigError> {
        if self.rotary_dim == 0 || !self.rotary_dim.is_multiple_of(2) || self.rotary_dim > head_dim {
            return Err(invalid(
                "partial_rotary_factor",
                format!(
                    "{} rotary features of head_dim {head_dim}: rope needs an even count",
                    self.rotary_dim
                ),
            ));
        }
        let half = self.rotary_dim / 2;
        if let RopeScaling::LongRope(l) = &self.scaling {
            for (name, f) in [("short_factor", &l.short_factor), ("long_factor", &l.long_factor)] {
                if f.len() != half {
                    return Err(invalid(
                        "rope_scaling",
                        format!("`{name}` has {} entries; rotary_dim / 2 = {half}", f.len()),
                    ));
                }
            }
        }
        if let Some(f) = &self.factors
            && f.len() != half
        {
            return Err(invalid(
                "rope_freqs",
                format!("{} factors; rotary_dim / 2 = {half}", f.len()),
            ));
        }
        Ok(())
    }

    /// Whether a cache of `capacity` positions takes LongRoPE's long factors (as llama.cpp decides by its
    /// context size; transformers by the sequence length, which is the same for a cache filled in one
    /// forward).
    pub fn long(&self, capacity: usize) -> bool {
        matches!(&self.scaling, RopeScaling::LongRope(l) if capacity > l.original_max_position_embeddings)
    }

    /// Inverse frequencies, `[rotary_dim / 2]`, with the scaling applied (`long`: LongRoPE's long factors).
    pub fn inv_freq(&self, long: bool) -> Vec<f64> {
        let dim = self.rotary_dim;
        (0..dim / 2)
            .map(|i| {
                let f = 1.0 / self.theta.powf(2.0 * i as f64 / dim as f64);
                if let Some(factor) = self.factors.as_ref().and_then(|r| r.get(i)) {
                    return f / factor;
                }
                match &self.scaling {
                    RopeScaling::None => f,
                    RopeScaling::Linear(factor) => f / factor,
                    RopeScaling::LongRope(l) => f / if long { l.long_factor[i] } else { l.short_factor[i] },
                    RopeScaling::Llama3(s) => {
                        let old = s.original_max_position_embeddings as f64;
                        let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / s.factor
                        } else {
                            let smooth = (old / wavelen - s.low_freq_factor)
                                / (s.high_freq_factor - s.low_freq_factor);
                            (1.0 - smooth) * f / s.factor + smooth * f
                        }
                    }
                }
            })
            .collect()
    }

    /// The factor on cos and sin (LongRoPE's attention factor, else 1).
    pub fn attention_factor(&self) -> f64 {
        match &self.scaling {
            RopeScaling::LongRope(l) => l.attention_factor,
            _ => 1.0,
        }
    }
}

/// A rope's cos and sin for every position, on the device: one `[2·max_pos, rotary_dim / 2]` tensor, cos of
/// each position then sin (the fused decode kernel binds it once), with the long table of a LongRoPE beside.
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub rope: Rope,
    /// `[2·max_pos, rotary_dim / 2]`.
    pub cos_sin: Tensor<2>,
    long: Option<Tensor<2>>,
    max: usize,
}

fn table(rope: &Rope, long: bool, max: usize, device: &Device) -> Tensor<2> {
    let inv_freq = rope.inv_freq(long);
    let scale = rope.attention_factor() as f32;
    let half = inv_freq.len();
    let mut values = vec![0.0f32; 2 * max * half];
    let (cos, sin) = values.split_at_mut(max * half);
    for pos in 0..max {
        for (i, f) in inv_freq.iter().enumerate() {
            // f32 like transformers: the angle is formed in single precision.
            let angle = pos as f32 * *f as f32;
            cos[pos * half + i] = angle.cos() * scale;
            sin[pos * half + i] = angle.sin() * scale;
        }
    }
    Tensor::from_data(TensorData::new(values, [2 * max, half]), device)
}

impl RopeTable {
    pub fn new(rope: &Rope, max: usize, device: &Device) -> Self {
        let long = matches!(rope.scaling, RopeScaling::LongRope(_)).then(|| table(rope, true, max, device));
        Self {
            rope: rope.clone(),
            cos_sin: table(rope, false, max, device),
            long,
            max,
        }
    }

    /// cos and sin of positions `pos..pos + s`, `[1, 1, s, rotary_dim / 2]` each, for a cache of
    /// `capacity` positions.
    pub fn at(&self, pos: usize, s: usize, capacity: usize) -> (Tensor<4>, Tensor<4>) {
        let t = match (&self.long, self.rope.long(capacity)) {
            (Some(long), true) => long,
            _ => &self.cos_sin,
        };
        (
            t.clone().narrow(0, pos, s).unsqueeze::<4>(),
            t.clone().narrow(0, self.max + pos, s).unsqueeze::<4>(),
        )
    }

    /// Whether caches of `a` and of `b` positions rotate by the same table (keys cached under one serve
    /// the other): always, except across a LongRoPE's switch from its short to its long factors.
    pub fn same_table(&self, a: usize, b: usize) -> bool {
        self.long.is_none() || self.rope.long(a) == self.rope.long(b)
    }

    /// Whether the fused decode kernels can take this rope (one table).
    pub fn plain_tables(&self) -> bool {
        self.long.is_none()
    }
}

/// Rotate-half rope of the first `2 · cos.dims()[3]` features of each head: `x: [b, n, s, d]`, `cos`/`sin:
/// [1, 1, s, r / 2]`.
/// On the CPU backend one pass ([`kernels::rope`]), elsewhere burn's ops.
pub fn apply(x: Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>) -> Tensor<4> {
    if let Some(y) = crate::kernels::rope(&x, cos, sin) {
        return y;
    }
    let d = x.dims()[3];
    let half = cos.dims()[3];
    let rotate = |x: Tensor<4>| {
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.narrow(3, half, half);
        Tensor::cat(
            vec![
                x1.clone() * cos.clone() - x2.clone() * sin.clone(),
                x2 * cos.clone() + x1 * sin.clone(),
            ],
            3,
        )
    };
    if 2 * half == d {
        return rotate(x);
    }
    let pass = x.clone().narrow(3, 2 * half, d - 2 * half);
    Tensor::cat(vec![rotate(x.narrow(3, 0, 2 * half)), pass], 3)
}
