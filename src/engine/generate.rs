//! The generation loop's device side: one prefill over the prompt (shared by all `n` choices), then one
//! decode step per token for all choices at once. Logits leave the device once per step, through an async
//! read (the only kind the browser allows); everything after that (sampling, stop rules, detokenisation)
//! is plain Rust on the host.

use burn::tensor::Tensor;

use super::EngineError;
use crate::model::{Decoder, KvCache};
pub use crate::sampling::argmax;

/// A running generation: the decoder (a cheap clone of shared tensor handles) and its KV cache.
pub struct Runner {
    decoder: Decoder,
    cache: KvCache,
}

/// `[b, s, V]` logits → `b · s` rows of `V`.
async fn read_rows(logits: Tensor<3>) -> Result<Vec<Vec<f32>>, EngineError> {
    let [b, s, v] = logits.dims();
    let data = logits
        .into_data_async()
        .await
        .map_err(|e| EngineError::Device(format!("{e:?}")))?
        .try_into_vec::<f32>()
        .map_err(|e| EngineError::Device(format!("{e:?}")))?;
    Ok((0..b * s).map(|i| data[i * v..(i + 1) * v].to_vec()).collect())
}

impl Runner {
    /// Runs the prompt once and returns the logits of its last position, or of every position when
    /// `all_positions` (for prompt logprobs). The cache holds up to `capacity` positions.
    pub async fn prefill(
        decoder: &Decoder,
        prompt: &[u32],
        capacity: usize,
        all_positions: bool,
    ) -> Result<(Self, Vec<Vec<f32>>), EngineError> {
        let mut cache = decoder.new_cache(1, capacity);
        let logits = decoder.forward(&[prompt.to_vec()], &mut cache, all_positions)?;
        let rows = read_rows(logits).await?;
        Ok((
            Self {
                decoder: decoder.clone(),
                cache,
            },
            rows,
        ))
    }

    /// Continues `n` sequences from the prefilled one.
    pub fn fork(&mut self, n: usize) {
        if n > 1 {
            self.cache.repeat_rows(n);
        }
    }

    /// Keeps only rows `rows` of the batch (the others have finished).
    pub fn keep_rows(&mut self, rows: &[usize]) {
        self.cache.keep_rows(rows);
    }

    /// Positions the cache holds.
    pub fn len(&self) -> usize {
        self.cache.len
    }

    /// Whether nothing was run yet.
    pub fn is_empty(&self) -> bool {
        self.cache.len == 0
    }

    /// Positions left in the cache.
    pub fn room(&self) -> usize {
        self.cache.capacity - self.cache.len
    }

    /// Appends one token per row and returns each row's next logits.
    pub async fn step(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, EngineError> {
        let rows: Vec<Vec<u32>> = tokens.iter().map(|&t| vec![t]).collect();
        let logits = self.decoder.forward(&rows, &mut self.cache, false)?;
        read_rows(logits).await
    }
}

/// Greedy decoding of up to `max_new` tokens after `prompt`, stopping after any of `stop_ids`
/// (which is then not returned).
pub async fn greedy(
    decoder: &Decoder,
    prompt: &[u32],
    max_new: usize,
    stop_ids: &[u32],
) -> Result<Vec<u32>, EngineError> {
    let capacity = (prompt.len() + max_new).min(decoder.config.max_position_embeddings);
    let (mut runner, mut rows) = Runner::prefill(decoder, prompt, capacity, false).await?;
    let mut out = Vec::new();
    while out.len() < max_new {
        let next = argmax(&rows.pop().unwrap_or_default());
        if stop_ids.contains(&next) {
            break;
        }
        out.push(next);
        if out.len() == max_new || runner.room() == 0 {
            break;
        }
        rows = runner.step(&[next]).await?;
    }
    Ok(out)
}
