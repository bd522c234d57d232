//! The generation loop's device side: one prefill over the prompt, then one decode step per token. Logits
//! leave the device once per step, through an async read (the only kind the browser allows), and everything
//! after that (sampling, stop rules, detokenisation) is plain Rust on the host.

use burn::tensor::Tensor;

use super::EngineError;
use crate::model::{Decoder, KvCache};

/// A running generation of `rows` sequences over one shared prompt.
pub struct Runner<'m> {
    decoder: &'m Decoder,
    cache: KvCache,
}

/// `[b, 1, V]` logits → one `Vec` of `V` per row.
async fn read_rows(logits: Tensor<3>) -> Result<Vec<Vec<f32>>, EngineError> {
    let [b, _, v] = logits.dims();
    let data = logits
        .into_data_async()
        .await
        .map_err(|e| EngineError::Device(format!("{e:?}")))?
        .try_into_vec::<f32>()
        .map_err(|e| EngineError::Device(format!("{e:?}")))?;
    Ok((0..b).map(|i| data[i * v..(i + 1) * v].to_vec()).collect())
}

impl<'m> Runner<'m> {
    /// Runs the prompt (once, whatever the number of rows) and returns the logits of its last position.
    /// The cache holds up to `capacity` positions.
    pub async fn prefill(
        decoder: &'m Decoder,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<(Self, Vec<f32>), EngineError> {
        let mut cache = decoder.new_cache(1, capacity);
        let logits = decoder.forward(&[prompt.to_vec()], &mut cache, false)?;
        let mut rows = read_rows(logits).await?;
        let last = rows.pop().unwrap_or_default();
        Ok((Self { decoder, cache }, last))
    }

    /// Positions the cache holds.
    pub fn len(&self) -> usize {
        self.cache.len
    }

    /// Whether nothing was run yet.
    pub fn is_empty(&self) -> bool {
        self.cache.len == 0
    }

    /// Appends one token per row and returns each row's next logits.
    pub async fn step(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, EngineError> {
        let rows: Vec<Vec<u32>> = tokens.iter().map(|&t| vec![t]).collect();
        let logits = self.decoder.forward(&rows, &mut self.cache, false)?;
        read_rows(logits).await
    }
}

/// Index of the largest logit (the first on ties, like `torch.argmax`).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0 as u32
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
    let (mut runner, mut logits) = Runner::prefill(decoder, prompt, capacity).await?;
    let mut out = Vec::new();
    while out.len() < max_new && runner.len() < capacity {
        let next = argmax(&logits);
        if stop_ids.contains(&next) {
            break;
        }
        out.push(next);
        if runner.len() == capacity {
            break;
        }
        logits = runner.step(&[next]).await?.pop().unwrap_or_default();
    }
    Ok(out)
}
