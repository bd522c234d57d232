//! One prompt's generation as a stream of per-choice deltas: `n` choices share one prefill, each has its own
//! sampler (seeded stream `i`), incremental detokenizer and stop-string matcher. Each call to
//! [`Generation::next`] runs one device step and returns what every live choice added.
//!
//! A choice ends with `stop` on an end-of-generation id (not part of the text) or a stop string (the text
//! ends before it), and with `length` when it reached its token budget or the context is full. A choice
//! that has ended leaves the batch: its KV cache row is dropped and later steps run only the live ones.

use std::sync::Arc;

use super::chunks::{Prompt, Slot};
use super::prefix_cache::PrefixCache;
use super::runner::{Readout, Rows, Runner};
use crate::api::response::FinishReason;
use crate::api::validate::Sampling;
use crate::engine::EngineError;
use crate::engine::protocol::detok::{Detokenizer, Matched, StopMatcher};
use crate::model::{Decoder, SelectOnDevice};
use crate::sampling::candidates::Adjust;
use crate::sampling::candidates::Candidates;
use crate::sampling::constrain::Constraint;
use crate::sampling::{Choice as Picked, Sampler, log_softmax, top_k};
use crate::tokenizer::ModelTokenizer;

/// What to generate for one prompt.
#[derive(Debug, Clone)]
pub struct GenParams {
    pub n: usize,
    /// Completion tokens per choice (already bounded by the context).
    pub max_new: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    /// `Some(k)`: report each token's logprob and the `k` most likely alternatives.
    pub logprobs: Option<usize>,
    /// Also score the prompt's own tokens (completions `echo` with `logprobs`).
    pub prompt_logprobs: bool,
    /// Decode special tokens into the text too (tool-call markers such as `[TOOL_CALLS]`).
    pub keep_special: bool,
}

/// A generated (or, for prompt logprobs, given) token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenOut {
    pub id: u32,
    /// `None` for the first prompt token, which has no context.
    pub logprob: Option<f32>,
    pub top: Vec<(u32, f32)>,
    /// Characters of the choice's text before this token.
    pub text_offset: usize,
}

/// What one choice added in one step.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceDelta {
    pub index: usize,
    pub text: String,
    /// Tokens sampled in this step (with logprobs requested).
    pub tokens: Vec<TokenOut>,
    pub finish: Option<FinishReason>,
}

struct Choice {
    sampler: Sampler,
    /// The response format's grammar, when there is one: it masks every step's logits.
    constraint: Option<Constraint>,
    detok: Detokenizer,
    stops: StopMatcher,
    generated: usize,
    last: u32,
    /// Tokens run through the cache after the prompt (each step's `last`).
    fed: Vec<u32>,
    done: bool,
    /// Characters of text decoded so far (released or held back).
    chars: usize,
}

/// Most bias and penalty entries a step adjusts on the device (beyond, it reads whole rows).
const MAX_ADJUST: usize = 4096;

/// A choice's next-token logits as the last step read them.
#[derive(Clone)]
enum Row {
    /// Raw logits: the sampler applies bias and penalties.
    Raw(Vec<f32>),
    /// Logits the device already applied them to.
    Adjusted(Vec<f32>),
    /// The device's candidates ([`Readout::Top`]).
    Top(Candidates),
}

/// A prompt being completed.
pub struct Generation {
    decoder: Decoder,
    tokenizer: Arc<ModelTokenizer>,
    prompt: Prompt,
    params: GenParams,
    runner: Option<Runner>,
    /// Each choice's next-token logits.
    rows: Vec<Row>,
    /// The choice each row of the runner's batch continues.
    batch: Vec<usize>,
    choices: Vec<Choice>,
    /// Prompt tokens scored at prefill (prompt logprobs).
    pub prompt_tokens_out: Vec<TokenOut>,
    /// Where the prefill looks for a kept prefix, and the run's state goes when it ends.
    prefixes: Option<PrefixCache>,
    /// Prompt tokens the prefill found cached.
    cached: usize,
    /// The kept sequence the cache was copied from (replaced by this run's state when kept).
    source: Option<u64>,
}

fn no_row() -> EngineError {
    EngineError::Device("a step returned fewer rows than the batch holds".into())
}

impl Generation {
    /// `prompt` completed as `params` says; `entropy` seeds the samplers of a request without `seed`.
    pub fn new(
        decoder: Decoder,
        tokenizer: Arc<ModelTokenizer>,
        prompt: impl Into<Prompt>,
        params: GenParams,
        entropy: u64,
    ) -> Self {
        let prompt = prompt.into();
        let choices = (0..params.n)
            .map(|i| Choice {
                sampler: Sampler::new(params.sampling.clone(), i as u64, entropy),
                constraint: None,
                detok: Detokenizer::new(params.keep_special),
                stops: StopMatcher::new(&params.stop),
                generated: 0,
                last: 0,
                fed: Vec::new(),
                done: false,
                chars: 0,
            })
            .collect();
        Self {
            decoder,
            tokenizer,
            prompt,
            params,
            runner: None,
            rows: Vec::new(),
            batch: Vec::new(),
            choices,
            prompt_tokens_out: Vec::new(),
            prefixes: None,
            cached: 0,
            source: None,
        }
    }

    /// Reuses a kept prefix of the prompt from `prefixes` (when one is there and the request does not
    /// score its prompt), and keeps this run's state there when it ends.
    pub fn reusing(mut self, prefixes: PrefixCache) -> Self {
        self.prefixes = Some(prefixes);
        self
    }

    /// Prompt tokens the prefill took from the prefix cache instead of running them (0 before it).
    pub fn cached_tokens(&self) -> usize {
        self.cached
    }

    /// Hands the run's KV state (its first row, which has run the prompt and that choice's tokens) to
    /// the prefix cache; once, when the run ends or is dropped.
    fn release(&mut self) {
        let (Some(prefixes), Some(mut runner)) = (&self.prefixes, self.runner.take()) else {
            return;
        };
        let Some(&first) = self.batch.first() else {
            return;
        };
        runner.keep_rows(&[0]);
        let mut slots = self.prompt.slots();
        slots.extend(self.choices[first].fed.iter().map(|&id| Slot::Token(id)));
        prefixes.put(slots, runner.into_cache(), self.source);
    }

    /// Constrains choice `i` of each to `constraints[i]` (one per choice, built for this request).
    pub fn constrained(mut self, constraints: Vec<Constraint>) -> Self {
        for (choice, c) in self.choices.iter_mut().zip(constraints) {
            choice.constraint = Some(c);
        }
        self
    }

    /// Completion tokens generated so far, over all choices (end-of-generation ids included).
    pub fn completion_tokens(&self) -> usize {
        self.choices.iter().map(|c| c.generated).sum()
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt.len()
    }

    /// Runs the prefill (first call) or one decode step; `None` once every choice has finished.
    pub async fn next(&mut self) -> Result<Option<Vec<ChoiceDelta>>, EngineError> {
        if self.choices.iter().all(|c| c.done) {
            self.release();
            return Ok(None);
        }
        self.drop_finished();
        let adjust = self.device_adjustments();
        let readout = match &adjust {
            Some(adjust) => Readout::Top {
                adjust,
                temperature: self.params.sampling.temperature,
            },
            None => Readout::Full,
        };
        match self.runner.is_some() {
            false => self.prefill(readout).await?,
            true => self.step(readout).await?,
        }
        let mut picks = self.pick_on_candidates().await?;
        let room = self.runner.as_ref().map_or(0, Runner::room);
        let mut deltas = Vec::new();
        for (index, picked) in picks.iter_mut().enumerate() {
            if self.choices[index].done {
                continue;
            }
            let picked = match picked.take() {
                Some(picked) => picked,
                None => self.sample(index)?,
            };
            deltas.push(self.emit(index, picked, room)?);
        }
        Ok(Some(deltas))
    }

    /// The first call's device work: the prompt after what the prefix cache holds of it, one row shared by
    /// every choice, then forked into `n`.
    async fn prefill(&mut self, readout: Readout<'_>) -> Result<(), EngineError> {
        let capacity = self.prompt.len() + self.params.max_new;
        let reuse = match (&self.prefixes, self.params.prompt_logprobs) {
            (Some(p), false) => p.take(&self.prompt.slots(), |kept| {
                self.decoder.same_positions(kept.capacity, capacity)
            }),
            _ => None,
        };
        let cache = match reuse {
            Some(mut r) => {
                r.cache.capacity = capacity;
                self.cached = r.cached;
                self.source = r.source;
                r.cache
            }
            None => self.decoder.new_cache(1, capacity),
        };
        let rest = self.prompt.chunks_from(cache.len).ok_or_else(|| {
            let cached = cache.len;
            EngineError::Device(format!(
                "a kept prefix of {cached} positions does not end between chunks"
            ))
        })?;
        let all = self.params.prompt_logprobs;
        let (mut runner, rows) = Runner::prefill_after(&self.decoder, cache, &rest, all, readout).await?;
        let last = match rows {
            Rows::Full(mut rows) => {
                let last = rows.pop().unwrap_or_default();
                if self.params.prompt_logprobs {
                    self.score_prompt(&rows);
                }
                Row::Raw(last)
            }
            Rows::Top(mut rows) => Row::Top(rows.pop().ok_or_else(no_row)?),
        };
        runner.fork(self.params.n);
        self.runner = Some(runner);
        self.rows = (0..self.params.n).map(|_| last.clone()).collect();
        self.batch = (0..self.params.n).collect();
        Ok(())
    }

    /// A later call's device work: each live choice's last token, one row each.
    async fn step(&mut self, readout: Readout<'_>) -> Result<(), EngineError> {
        let Some(runner) = &mut self.runner else {
            return Err(EngineError::Device("a decode step before the prefill".into()));
        };
        let tokens: Vec<u32> = self.batch.iter().map(|&i| self.choices[i].last).collect();
        for &i in &self.batch {
            let last = self.choices[i].last;
            self.choices[i].fed.push(last);
        }
        let rows: Vec<Row> = match runner.step(&tokens, readout).await? {
            Rows::Full(rows) => rows.into_iter().map(Row::Raw).collect(),
            Rows::Top(rows) => rows.into_iter().map(Row::Top).collect(),
        };
        for (&i, row) in self.batch.iter().zip(rows) {
            self.rows[i] = row;
        }
        Ok(())
    }

    /// Choice `index`'s next token from its row of logits (one its candidates did not decide).
    fn sample(&mut self, index: usize) -> Result<Picked, EngineError> {
        let (choice, k) = (&mut self.choices[index], self.params.logprobs);
        Ok(match (&mut self.rows[index], &mut choice.constraint) {
            (Row::Raw(logits), None) => choice.sampler.sample(logits, k),
            (Row::Raw(logits), Some(c)) => choice
                .sampler
                .sample_constrained(logits, k, c)
                .map_err(|e| EngineError::Constraint(e.to_string()))?,
            (Row::Adjusted(logits), _) => choice.sampler.sample_adjusted(logits, k),
            (Row::Top(_), _) => return Err(no_row()),
        })
    }

    /// Choice `index` takes `picked`: its text through the detokenizer and the stop strings, and its
    /// finish reason when it ends (an end-of-generation id, a stop string, its budget, or no `room` left).
    fn emit(&mut self, index: usize, picked: Picked, room: usize) -> Result<ChoiceDelta, EngineError> {
        let choice = &mut self.choices[index];
        choice.generated += 1;
        choice.last = picked.id;
        let mut delta = ChoiceDelta {
            index,
            text: String::new(),
            tokens: Vec::new(),
            finish: None,
        };
        if self.params.logprobs.is_some() {
            delta.tokens.push(TokenOut {
                id: picked.id,
                logprob: picked.logprob,
                top: picked.top,
                text_offset: choice.chars,
            });
        }
        let end_of_generation = self.tokenizer.stop_ids.contains(&picked.id);
        if !end_of_generation {
            let piece = choice.detok.push(&self.tokenizer, picked.id)?;
            choice.chars += piece.chars().count();
            match choice.stops.push(&piece) {
                Matched::Stop(text) => {
                    delta.text = text;
                    delta.finish = Some(FinishReason::Stop);
                }
                Matched::Release(text) => delta.text = text,
            }
        }
        let out_of_room = choice.generated >= self.params.max_new || room == 0;
        if delta.finish.is_none() && (end_of_generation || out_of_room) {
            // The choice ends: what the detokenizer still holds goes through the stop strings, then
            // whatever they held back is released.
            let tail = choice.detok.flush(&self.tokenizer)?;
            choice.chars += tail.chars().count();
            match choice.stops.push(&tail) {
                Matched::Stop(text) => {
                    delta.text.push_str(&text);
                    delta.finish = Some(FinishReason::Stop);
                }
                Matched::Release(text) => {
                    delta.text.push_str(&text);
                    delta.text.push_str(&choice.stops.flush());
                    delta.finish = Some(if end_of_generation {
                        FinishReason::Stop
                    } else {
                        FinishReason::Length
                    });
                }
            }
        }
        choice.done = delta.finish.is_some();
        Ok(delta)
    }

    /// Drops the rows of finished choices from the batch before a step.
    fn drop_finished(&mut self) {
        if let Some(runner) = &mut self.runner {
            let live: Vec<usize> = (0..self.batch.len())
                .filter(|&r| !self.choices[self.batch[r]].done)
                .collect();
            if live.len() < self.batch.len() {
                runner.keep_rows(&live);
                self.batch = live.iter().map(|&r| self.batch[r]).collect();
            }
        }
    }

    /// The bias and penalty changes of the next step, per row of the batch (the prefill's one row:
    /// choice 0's, which every choice shares before it has generated), when the step can read candidates
    /// instead of whole rows: on a wgpu device (greedy only on a software adapter: the decoder's
    /// `SelectOnDevice`), for samplers that candidates decide, without logprobs or grammars, with few
    /// enough entries.
    fn device_adjustments(&self) -> Option<Vec<Adjust>> {
        let p = &self.params;
        let allowed = match self.decoder.selects_on_device() {
            SelectOnDevice::Never => false,
            SelectOnDevice::Greedy => p.sampling.temperature == 0.0,
            SelectOnDevice::Always => true,
        } && p.logprobs.is_none()
            && !p.prompt_logprobs
            && self
                .choices
                .iter()
                .all(|c| c.constraint.is_none() && c.sampler.decides_from_candidates());
        if !allowed {
            return None;
        }
        let rows: Vec<usize> = match self.runner {
            None => vec![0],
            Some(_) => self.batch.clone(),
        };
        let mut out = Vec::new();
        for (row, &i) in rows.iter().enumerate() {
            for (id, add, sub) in self.choices[i].sampler.adjustments()? {
                out.push(Adjust {
                    row: row as u32,
                    id,
                    add,
                    sub,
                });
            }
        }
        (out.len() <= MAX_ADJUST * rows.len()).then_some(out)
    }

    /// Picks from the candidates of every live choice whose row has them; for choices they do not decide,
    /// reads the whole (adjusted) rows of the step instead.
    async fn pick_on_candidates(&mut self) -> Result<Vec<Option<Picked>>, EngineError> {
        let mut picks: Vec<Option<Picked>> = vec![None; self.choices.len()];
        let mut undecided = Vec::new();
        for (i, (choice, row)) in self.choices.iter_mut().zip(&self.rows).enumerate() {
            if let (false, Row::Top(c)) = (choice.done, row) {
                picks[i] = choice.sampler.pick_top(c);
                if picks[i].is_none() {
                    undecided.push(i);
                }
            }
        }
        if undecided.is_empty() {
            return Ok(picks);
        }
        let runner = self.runner.as_mut().ok_or_else(no_row)?;
        let full = runner.read_last().await?;
        for i in undecided {
            // The prefill's one row serves every choice; a step's rows follow the batch.
            let r = match full.len() {
                1 => 0,
                _ => self.batch.iter().position(|&b| b == i).ok_or_else(no_row)?,
            };
            self.rows[i] = Row::Adjusted(full.get(r).ok_or_else(no_row)?.clone());
        }
        Ok(picks)
    }

    /// Logprobs of prompt tokens 1.. from the prefill's per-position logits (token 0 has none). Only
    /// completions score their prompts, which are token ids (a prompt with media scores nothing).
    fn score_prompt(&mut self, rows: &[Vec<f32>]) {
        let k = self.params.logprobs.unwrap_or(0);
        let mut offset = 0;
        let ids = self.prompt.ids().unwrap_or_default();
        for (i, &id) in ids.iter().enumerate() {
            let (logprob, top) = match i.checked_sub(1).and_then(|p| rows.get(p)) {
                Some(row) => {
                    let lp = log_softmax(row);
                    (Some(lp[id as usize]), top_k(&lp, k))
                }
                None => (None, Vec::new()),
            };
            self.prompt_tokens_out.push(TokenOut {
                id,
                logprob,
                top,
                text_offset: offset,
            });
            offset += self.tokenizer.token_text(id).chars().count();
        }
    }
}

impl Drop for Generation {
    /// An aborted run keeps its state too: valid up to its last completed step.
    fn drop(&mut self) {
        self.release();
    }
}
