//! Choosing the next token on the host, over one step's f32 logits (`[V]`).
//!
//! The order of operations, per step and per choice:
//! 1. `logit_bias`: each listed token's bias is added to its logit (±100 effectively forces or bans it).
//! 2. Penalties, OpenAI's formula over the tokens this choice has generated so far (not the prompt):
//!    `logit[j] -= count[j] · frequency_penalty + (count[j] > 0) · presence_penalty`.
//! 3. With a response format or a forced tool call, the [`constrain::Constraint`]'s mask: every token the
//!    grammar does not allow next gets `-inf` (so no bias can bring one back).
//! 4. Log probabilities (reported by `logprobs`) are the log-softmax of these logits: the distribution
//!    after bias, penalties and the mask, before temperature and `top_p`. Masked tokens are never listed.
//! 5. `temperature == 0`: greedy, the largest logit (the lowest id on ties). Otherwise the logits are
//!    divided by the temperature, turned into probabilities, cut to the smallest set of most likely tokens
//!    whose probabilities add up to at least `top_p` (nucleus sampling; at least one token), and one is
//!    drawn with the choice's seeded [`Rng`].

pub mod candidates;
pub mod constrain;
pub mod rng;

use std::collections::HashMap;

use crate::api::validate::Sampling;
pub use rng::Rng;

/// One choice's sampler: the request's parameters, its random stream and its generated-token counts.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: Sampling,
    rng: Rng,
    counts: HashMap<u32, u32>,
    /// The candidates of a sampled step, `(id, weight)`: kept between steps so that a 262k vocabulary
    /// does not cost a 4 MiB allocation per token.
    scratch: Vec<(u32, f64)>,
}

/// A chosen token with its log probability and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub id: u32,
    /// Present when logprobs were asked for (computing them takes a pass over the whole vocabulary).
    pub logprob: Option<f32>,
    /// The `k` most likely tokens and their log probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// `log_softmax(logits)`.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let log_sum = sum.ln() as f32;
    logits.iter().map(|&x| x - max - log_sum).collect()
}

/// The `k` largest entries as `(index, value)`, largest first (lowest index first on ties).
pub fn top_k(values: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    let by_value = |a: &u32, b: &u32| values[*b as usize].total_cmp(&values[*a as usize]).then(a.cmp(b));
    if k < idx.len() {
        idx.select_nth_unstable_by(k, by_value);
        idx.truncate(k);
    }
    idx.sort_by(by_value);
    idx.into_iter().map(|i| (i, values[i as usize])).collect()
}

/// Index of the largest value (the first on ties).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, &v) in values.iter().enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0 as u32
}

impl Sampler {
    /// A sampler for choice `stream` of a request: seeded from `params.seed`, or from `entropy` when the
    /// request has none (one entropy value per request, so its choices still differ from each other).
    pub fn new(params: Sampling, stream: u64, entropy: u64) -> Self {
        let seed = params.seed.unwrap_or(entropy);
        Self {
            params,
            rng: Rng::new(seed, stream),
            counts: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Steps 1 and 2: bias and penalties, in place.
    pub fn adjust(&self, logits: &mut [f32]) {
        for &(id, bias) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        let (freq, pres) = (self.params.frequency_penalty, self.params.presence_penalty);
        if freq != 0.0 || pres != 0.0 {
            for (&id, &count) in &self.counts {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= count as f32 * freq + pres;
                }
            }
        }
    }

    /// Chooses the next token from raw logits (modified in place) and records it for the penalties; with
    /// `logprobs: Some(k)` its log probability and `k` alternatives are reported.
    pub fn sample(&mut self, logits: &mut [f32], logprobs: Option<usize>) -> Choice {
        self.adjust(logits);
        self.pick(logits, logprobs)
    }

    /// [`Sampler::sample`] under `constraint`'s mask; the chosen token is committed to it.
    pub fn sample_constrained(
        &mut self,
        logits: &mut [f32],
        logprobs: Option<usize>,
        constraint: &mut constrain::Constraint,
    ) -> Result<Choice, constrain::ConstraintError> {
        self.adjust(logits);
        constraint.mask(logits)?;
        let choice = self.pick(logits, logprobs);
        constraint.commit(choice.id)?;
        Ok(choice)
    }

    /// Steps 4 (only when `logprobs` asks) and 5 over adjusted (and masked) logits.
    fn pick(&mut self, logits: &[f32], logprobs: Option<usize>) -> Choice {
        let id = if self.params.temperature == 0.0 {
            argmax(logits)
        } else {
            self.draw(logits)
        };
        *self.counts.entry(id).or_insert(0) += 1;
        let Some(k) = logprobs else {
            return Choice {
                id,
                logprob: None,
                top: Vec::new(),
            };
        };
        let lp = log_softmax(logits);
        let mut top = if k > 0 { top_k(&lp, k) } else { Vec::new() };
        top.retain(|&(_, lp)| lp.is_finite());
        Choice {
            id,
            logprob: Some(lp[id as usize]),
            top,
        }
    }

    /// Step 5 for `temperature > 0`.
    fn draw(&mut self, logits: &[f32]) -> u32 {
        let t = self.params.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut probs = std::mem::take(&mut self.scratch);
        probs.clear();
        probs.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, f64::from((l - max) / t).exp()))
                .filter(|&(_, p)| p > 0.0),
        );
        let total: f64 = probs.iter().map(|&(_, p)| p).sum();
        let top_p = f64::from(self.params.top_p);
        if top_p < 1.0 {
            let keep = nucleus(&mut probs, total, top_p);
            probs.truncate(keep);
        }
        let kept: f64 = probs.iter().map(|&(_, p)| p).sum();
        let mut target = self.rng.next_f64() * kept;
        let mut id = probs.last().map_or(0, |&(id, _)| id);
        for &(i, p) in &probs {
            if target < p {
                id = i;
                break;
            }
            target -= p;
        }
        self.scratch = probs;
        id
    }
}

/// Sorts the head of `probs` (most likely first, the lower id on ties) far enough to hold the smallest
/// set whose share of `total` reaches `top_p`, and returns its length: the same set and order as sorting
/// every candidate, without sorting them all. The head grows ×4 from 64 candidates (a partial selection
/// each time) until its mass reaches `top_p`; only it is sorted. Should rounding leave the cumulative
/// share of the sorted head just short of `top_p`, everything is sorted, as without the shortcut.
fn nucleus(probs: &mut [(u32, f64)], total: f64, top_p: f64) -> usize {
    let order = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let cut = |probs: &[(u32, f64)]| {
        let mut cumulative = 0.0;
        probs.iter().position(|&(_, p)| {
            cumulative += p / total;
            cumulative >= top_p
        })
    };
    let len = probs.len();
    let mut k = len.min(64);
    while k < len {
        probs.select_nth_unstable_by(k - 1, order);
        let head: f64 = probs[..k].iter().map(|&(_, p)| p).sum();
        if head / total >= top_p {
            break;
        }
        k = (k * 4).min(len);
    }
    probs[..k].sort_by(order);
    if let Some(i) = cut(&probs[..k]) {
        return i + 1;
    }
    probs.sort_by(order);
    cut(probs).map_or(len, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Sampling {
        Sampling {
            seed: Some(1),
            ..Sampling::default()
        }
    }

    #[test]
    fn penalties_follow_openais_formula_exactly() {
        let mut s = Sampler::new(
            Sampling {
                presence_penalty: 0.5,
                frequency_penalty: 0.25,
                logit_bias: vec![(4, 2.0)],
                temperature: 0.0,
                ..params()
            },
            0,
            0,
        );
        s.counts = HashMap::from([(1, 1), (2, 3)]);
        let mut logits = vec![1.0, 1.0, 1.0, 1.0, 1.0];
        s.adjust(&mut logits);
        // token 1: 1 - (1·0.25 + 0.5); token 2: 1 - (3·0.25 + 0.5); token 4: 1 + 2.
        assert_eq!(logits, vec![1.0, 0.25, -0.25, 1.0, 3.0]);
    }

    #[test]
    fn greedy_bias_and_counts() {
        let mut s = Sampler::new(
            Sampling {
                temperature: 0.0,
                logit_bias: vec![(0, 100.0), (2, -100.0)],
                ..params()
            },
            0,
            0,
        );
        let c = s.sample(&mut [0.0, 5.0, 9.0], Some(2));
        assert_eq!(c.id, 0, "+100 forces token 0 over larger logits");
        assert!(c.logprob.is_some_and(|lp| lp > -1e-3));
        assert_eq!(c.top[0].0, 0);
        assert_eq!(c.top.len(), 2);
        assert!(c.top[0].1 >= c.top[1].1);
        assert_eq!(s.counts[&0], 1);
    }

    #[test]
    fn seeds_repeat_top_p_cuts_the_tail() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let run = |seed: u64, top_p: f32| {
            let mut s = Sampler::new(
                Sampling {
                    seed: Some(seed),
                    top_p,
                    ..params()
                },
                0,
                0,
            );
            (0..64)
                .map(|_| s.sample(&mut logits.clone(), None).id)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3, 1.0), run(3, 1.0));
        assert_ne!(run(3, 1.0), run(4, 1.0));
        // The 7 tokens with the largest logit (1.8) hold 29% of the mass: top_p 0.25 keeps only (6 of) them.
        assert!(run(5, 0.25).iter().all(|&id| id % 7 == 6));
        assert!(run(5, 1.0).iter().any(|&id| id % 7 != 6));
    }

    #[test]
    fn nucleus_matches_sorting_everything() {
        // Flat (the head must grow to most of the vocabulary), peaked, and tied distributions.
        let flat: Vec<f64> = (0..5000).map(|i| 1.0 + (i % 3) as f64 * 1e-3).collect();
        let peaked: Vec<f64> = (0..5000).map(|i| (-(i as f64) / 40.0).exp()).collect();
        let tied: Vec<f64> = (0..300).map(|i| if i % 2 == 0 { 2.0 } else { 1.0 }).collect();
        for weights in [flat, peaked, tied] {
            let probs: Vec<(u32, f64)> = weights
                .iter()
                .enumerate()
                .map(|(i, &p)| ((i * 7919 % 5003) as u32, p))
                .collect();
            let total: f64 = weights.iter().sum();
            for top_p in [0.01, 0.3, 0.9, 0.999, 0.999_999] {
                let mut sorted = probs.clone();
                sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                let mut cumulative = 0.0;
                let want = sorted
                    .iter()
                    .position(|&(_, p)| {
                        cumulative += p / total;
                        cumulative >= top_p
                    })
                    .map_or(sorted.len(), |i| i + 1);
                let mut ours = probs.clone();
                let keep = nucleus(&mut ours, total, top_p);
                assert_eq!(keep, want, "top_p {top_p}");
                assert_eq!(
                    ours[..keep],
                    sorted[..want],
                    "top_p {top_p}: the same tokens in the same order"
                );
            }
        }
    }

    #[test]
    fn logprobs_only_when_asked() {
        let mut s = Sampler::new(
            Sampling {
                temperature: 0.0,
                ..params()
            },
            0,
            0,
        );
        let c = s.sample(&mut [0.0, 5.0, 9.0], None);
        assert_eq!((c.id, c.logprob, c.top.len()), (2, None, 0));
        let c = s.sample(&mut [0.0, 5.0, 9.0], Some(0));
        assert!(c.logprob.is_some() && c.top.is_empty());
    }

    #[test]
    fn log_softmax_and_top_k() {
        let lp = log_softmax(&[0.0, 0.0f32.ln_1p(), 2.0]);
        let sum: f32 = lp.iter().map(|x| x.exp()).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert_eq!(top_k(&[1.0, 3.0, 3.0, 0.0], 2), vec![(1, 3.0), (2, 3.0)]);
    }
}
