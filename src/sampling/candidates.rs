//! Choosing the next token from a step's candidates, the few numbers a GPU step reads back instead of its
//! whole row of `V` logits (`kernels::gpu::select` computes them on the device).
//!
//! The device applies steps 1–2 (bias and penalties, as [`Sampler::adjustments`] lists them), then keeps
//! each row's `k` largest logits and, per chunk of the row, its max and softmax mass at the temperature.
//! From those, [`Sampler::pick_top`] takes step 5 exactly as [`Sampler::sample`] would:
//! - greedy: the first candidate (the largest logit, the lower id on ties, as `argmax`);
//! - `top_p < 1`: when the nucleus lies inside the candidates, every one of its tokens more likely than
//!   any token left out, it is drawn from with the same weights, order and random number as on the host;
//!   the only difference is the total mass, summed in f32 per chunk on the device (f64 on the host; the
//!   kernel tests allow 1e-5 relative), so a nucleus cut or a draw within about that of a token boundary
//!   may differ from the host's.
//!
//! It returns `None` (and changes nothing, the random stream included) when the candidates cannot decide:
//! `top_p = 1` (the whole distribution, in id order), or a nucleus wider than the candidates. The caller
//! then reads the whole (adjusted) row and takes [`Sampler::sample_adjusted`]. Requests with logprobs or a
//! grammar never come here.

use super::{Choice, Sampler};

/// The most candidates a row has (`kernels::gpu::select` keeps at most a sixteenth of its 1024-logit
/// chunks, so each of its levels shrinks the input).
pub const MAX_K: usize = 64;

/// One logit's change before selection: `logits[row, id] = (logits[row, id] + add) − sub` (the host
/// sampler's `logit_bias`, then its penalties, in that order and with the same rounding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adjust {
    pub row: u32,
    pub id: u32,
    pub add: f32,
    pub sub: f32,
}

/// A step's candidates for one row (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidates {
    /// The `k` largest adjusted logits `(id, logit)`, largest first, the lower id first on ties.
    pub top: Vec<(u32, f32)>,
    /// Per chunk of the row, `(max, Σ exp((l − max) / t))` at the sampler's temperature.
    pub chunks: Vec<(f32, f32)>,
    /// The row's length.
    pub vocab: usize,
}

impl Candidates {
    /// What the device computes, from a whole row on the host (the reference of the kernel's tests):
    /// the `k` largest, and chunks of `chunk` logits.
    pub fn from_row(logits: &[f32], k: usize, t: f32, chunk: usize) -> Self {
        let inv_t = if t > 0.0 { 1.0 / t } else { 0.0 };
        let chunks = logits
            .chunks(chunk.max(1))
            .map(|c| {
                let m = c.iter().copied().fold(f32::MIN, f32::max);
                (m, c.iter().map(|&l| ((l - m) * inv_t).exp()).sum())
            })
            .collect();
        Self {
            top: super::top_k(logits, k),
            chunks,
            vocab: logits.len(),
        }
    }

    /// `Σ exp((l − max) / t)` over the row, `max` the largest logit.
    fn mass(&self, max: f32, t: f32) -> f64 {
        self.chunks
            .iter()
            .map(|&(m, s)| f64::from(s) * f64::from((m - max) / t).exp())
            .sum()
    }
}

impl Sampler {
    /// Whether [`Sampler::pick_top`] can decide this sampler's steps (greedy, or a nucleus).
    pub fn decides_from_candidates(&self) -> bool {
        self.params.temperature == 0.0 || self.params.top_p < 1.0
    }

    /// Steps 1–2 as changes `(id, add, sub)`, sorted by id: `logit = (logit + add) − sub` is what
    /// [`Sampler::adjust`] does to that id, with the same rounding. `None` if the bias names an id twice
    /// (its two additions would round differently as one).
    pub fn adjustments(&self) -> Option<Vec<(u32, f32, f32)>> {
        let mut out: Vec<(u32, f32, f32)> = self
            .params
            .logit_bias
            .iter()
            .map(|&(id, b)| (id, b, 0.0))
            .collect();
        out.sort_by_key(|e| e.0);
        if out.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let (freq, pres) = (self.params.frequency_penalty, self.params.presence_penalty);
        if freq != 0.0 || pres != 0.0 {
            for (&id, &count) in &self.counts {
                let sub = count as f32 * freq + pres;
                match out.binary_search_by_key(&id, |e| e.0) {
                    Ok(i) => out[i].2 = sub,
                    Err(i) => out.insert(i, (id, 0.0, sub)),
                }
            }
        }
        Some(out)
    }

    /// Step 5 from candidates (see the module docs); `None` when they do not decide it.
    pub fn pick_top(&mut self, c: &Candidates) -> Option<Choice> {
        let &(best, max) = c.top.first()?;
        let t = self.params.temperature;
        let id = if t == 0.0 {
            best
        } else {
            let top_p = f64::from(self.params.top_p);
            if top_p >= 1.0 {
                return None;
            }
            let mut probs: Vec<(u32, f64)> = c
                .top
                .iter()
                .map(|&(i, l)| (i, f64::from((l - max) / t).exp()))
                .filter(|&(_, p)| p > 0.0)
                .collect();
            probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let total = c.mass(max, t);
            let mut cumulative = 0.0;
            let keep = probs.iter().position(|&(_, p)| {
                cumulative += p / total;
                cumulative >= top_p
            })? + 1;
            // Every kept token must be more likely than every token left out (those are at most as
            // likely as the last candidate), or the host's order could differ.
            let least = probs.last().map_or(0.0, |&(_, p)| p);
            if c.top.len() < c.vocab && probs[keep - 1].1 <= least {
                return None;
            }
            probs.truncate(keep);
            let kept: f64 = probs.iter().map(|&(_, p)| p).sum();
            let mut target = self.rng.next_f64() * kept;
            let mut id = probs.last().map_or(best, |&(id, _)| id);
            for &(i, p) in &probs {
                if target < p {
                    id = i;
                    break;
                }
                target -= p;
            }
            id
        };
        *self.counts.entry(id).or_insert(0) += 1;
        Some(Choice {
            id,
            logprob: None,
            top: Vec::new(),
        })
    }

    /// Steps 4–5 over logits that steps 1–2 were already applied to (on the device).
    pub fn sample_adjusted(&mut self, logits: &[f32], logprobs: Option<usize>) -> Choice {
        self.pick(logits, logprobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::validate::Sampling;
    use crate::sampling::Rng;

    fn sampler(temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(
            Sampling {
                temperature,
                top_p,
                presence_penalty: 0.4,
                frequency_penalty: 0.3,
                logit_bias: vec![(3, 2.5), (40, -100.0)],
                seed: Some(seed),
            },
            0,
            0,
        )
    }

    /// A peaked random row of `v` logits, as a language model's: a few dozen large, the rest near 0.
    fn row(v: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed, 0);
        (0..v).map(|_| 30.0 * (rng.next_f64() as f32).powi(400)).collect()
    }

    #[test]
    fn candidates_pick_what_the_whole_row_picks() {
        // A hot temperature flattens the row: its nucleus often outgrows the candidates.
        let mut undecided = 0;
        for (t, top_p) in [(0.0, 1.0), (0.7, 0.9), (1.0, 0.5), (1.3, 0.95), (2.5, 0.95)] {
            let (mut host, mut dev) = (sampler(t, top_p, 9), sampler(t, top_p, 9));
            let mut decided = 0;
            for step in 0..200 {
                let logits = row(3000, step);
                let mut adjusted = logits.clone();
                host.adjust(&mut adjusted);
                // The device's view: the adjustments applied, then candidates of the adjusted row.
                let mut on_device = logits.clone();
                for (id, add, sub) in dev.adjustments().unwrap() {
                    let l = &mut on_device[id as usize];
                    *l = (*l + add) - sub;
                }
                assert_eq!(on_device, adjusted, "adjustments as adjust, bit for bit");
                let c = Candidates::from_row(&on_device, 64, t, 1024);
                let want = host.pick(&adjusted, None).id;
                let got = match dev.pick_top(&c) {
                    Some(choice) => {
                        decided += 1;
                        choice.id
                    }
                    None => dev.sample_adjusted(&on_device, None).id,
                };
                assert_eq!(got, want, "t {t}, top_p {top_p}, step {step}");
            }
            assert!(decided > 0, "t {t}, top_p {top_p}: none decided on candidates");
            undecided += 200 - decided;
        }
        assert!(undecided > 0, "the whole-row fallback was never taken");
    }

    #[test]
    fn candidates_decline_without_touching_the_stream() {
        // top_p 1 needs every token; a flat row's nucleus is wider than 8 candidates.
        let flat = vec![0.5f32; 500];
        for (t, top_p) in [(1.0, 1.0), (1.0, 0.9)] {
            let mut s = sampler(t, top_p, 4);
            let before = (s.rng.clone(), s.counts.clone());
            assert_eq!(s.pick_top(&Candidates::from_row(&flat, 8, t, 128)), None);
            assert_eq!((s.rng.clone(), s.counts.clone()), before);
        }
        // Equal logits beyond the candidates: the nucleus would depend on ids left out.
        let mut tied = vec![0.0f32; 100];
        tied[7] = 5.0;
        let mut s = sampler(1.0, 0.999, 4);
        assert_eq!(s.pick_top(&Candidates::from_row(&tied, 4, 1.0, 128)), None);
    }

    #[test]
    fn duplicate_bias_ids_are_not_merged() {
        let mut s = sampler(0.0, 1.0, 1);
        s.params.logit_bias = vec![(2, 1.0), (2, 0.1)];
        assert_eq!(s.adjustments(), None);
    }
}
