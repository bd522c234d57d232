//! The generation loop's device side: one prefill over the prompt (shared by all `n` choices), then one
//! decode step per token for all choices at once. Each step ends in one async read (the only kind the
//! browser allows): the whole row of logits ([`Readout::Full`]), or, on wgpu, the candidates the sampler
//! needs ([`Readout::Top`]: the bias and penalties applied and the largest logits selected on the device,
//! `kernels::gpu::select`), with the whole row read afterwards only if they do not decide
//! ([`Runner::read_last`]). Everything after that (sampling, stop rules, detokenisation) is plain Rust on
//! the host.

use burn::tensor::{Device, Tensor};
#[cfg(feature = "webgpu")]
use burn::tensor::{TensorData, Transaction};

use super::counters::note_read;
use crate::engine::EngineError;
use crate::kernels::caps::Caps;
#[cfg(feature = "webgpu")]
use crate::kernels::gpu::select;
use crate::model::{Chunk, Decoder, KvCache, SelectOnDevice};
pub use crate::sampling::argmax;
use crate::sampling::candidates::{Adjust, Candidates, MAX_K};

/// Candidates per row in [`Readout::Top`] (at most the vocabulary).
pub const TOP_K: usize = MAX_K;

/// What a step reads back.
#[derive(Debug, Clone, Copy)]
pub enum Readout<'a> {
    /// Every logit of every row.
    Full,
    /// Per row its candidates at `temperature` (0: greedy, the chunk sums are not read), after
    /// `adjust` (`(row, id, add, sub)`; see [`Adjust`]).
    Top { adjust: &'a [Adjust], temperature: f32 },
}

/// A step's read: rows of logits, or of candidates.
#[derive(Debug, Clone)]
pub enum Rows {
    Full(Vec<Vec<f32>>),
    Top(Vec<Candidates>),
}

/// A running generation: the decoder (a cheap clone of shared tensor handles) and its KV cache.
pub struct Runner {
    decoder: Decoder,
    cache: KvCache,
    /// The last step's adjusted logits `[b, V]` while its candidates were read instead of them.
    last: Option<Tensor<2>>,
}

fn device_error(e: impl std::fmt::Debug) -> EngineError {
    EngineError::Device(format!("{e:?}"))
}

/// A failed read of a tensor on `device`. A poisoned device (wgpu reported it lost: a driver reset, a GPU
/// process crash, `GPUDevice.destroy()`) is [`EngineError::DeviceLost`], and [`device::gpu_lost`] makes the
/// next load acquire a new one; any other failure is [`EngineError::Device`].
/// (`poisoned` and `reason` are burn's `ExecutionError::{is_device_poisoned, reason}`.)
fn read_error(device: &Device, poisoned: bool, reason: &str) -> EngineError {
    if !poisoned {
        return EngineError::Device(reason.to_string());
    }
    crate::engine::runtime::device::gpu_lost(device);
    EngineError::DeviceLost(lost_reason(reason).to_string())
}

/// wgpu's own words in a poisoned device's reason: the last line before the backtrace, e.g.
/// "Destroyed: Device was destroyed." out of "The device is poisoned\nCaused by:\n  Destroyed: Device was
/// destroyed.\nBacktrace:\nNo backtrace available".
fn lost_reason(reason: &str) -> &str {
    let before = reason.split("Backtrace:").next().unwrap_or(reason);
    before
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("no reason given")
}

/// `[r, V]` logits → `r` rows of `V`.
async fn read_rows(logits: Tensor<2>) -> Result<Vec<Vec<f32>>, EngineError> {
    let [r, v] = logits.dims();
    let device = logits.device();
    let data = logits
        .into_data_async()
        .await
        .map_err(|e| read_error(&device, e.is_device_poisoned(), e.reason()))?
        .try_into_vec::<f32>()
        .map_err(device_error)?;
    note_read(data.len() * 4);
    Ok((0..r).map(|i| data[i * v..(i + 1) * v].to_vec()).collect())
}

#[cfg(feature = "webgpu")]
fn floats(data: TensorData) -> Result<Vec<f32>, EngineError> {
    data.try_into_vec::<f32>().map_err(device_error)
}

/// The candidates of `logits: [r, V]` (adjusted in place first), in one read.
#[cfg(feature = "webgpu")]
async fn read_top(
    logits: &Tensor<2>,
    adjust: &[Adjust],
    t: f32,
    caps: Caps,
) -> Result<Vec<Candidates>, EngineError> {
    let [r, v] = logits.dims();
    select::adjust(logits, adjust);
    // Greedy needs only the best pair, without the sort or the sums.
    let (k, read) = match t > 0.0 {
        false => (
            1,
            Transaction::default().register(select::argmax(logits.clone(), caps.features)),
        ),
        true => {
            let found = select::top_k(logits.clone(), TOP_K.min(v), t);
            let read = Transaction::default().register(found.top).register(found.stats);
            (TOP_K.min(v), read)
        }
    };
    let mut data = read
        .execute_async()
        .await
        .map_err(|e| read_error(&logits.device(), e.is_device_poisoned(), e.reason()))?
        .into_iter();
    let top = floats(data.next().ok_or_else(|| device_error("no candidates read"))?)?;
    let stats = match data.next() {
        Some(d) => floats(d)?,
        None => Vec::new(),
    };
    note_read((top.len() + stats.len()) * 4);
    let per = stats.len() / r.max(1);
    Ok((0..r)
        .map(|i| Candidates {
            // Padding ids (past `V`) come back only for a row without a logit above the padding (NaN
            // throughout): left out, such a row has no candidates and reads its whole row instead.
            top: top[i * 2 * k..(i + 1) * 2 * k]
                .chunks_exact(2)
                .map(|p| (p[1] as u32, p[0]))
                .filter(|&(id, _)| (id as usize) < v)
                .collect(),
            chunks: stats[i * per..(i + 1) * per]
                .chunks_exact(2)
                .map(|p| (p[0], p[1]))
                .collect(),
            vocab: v,
        })
        .collect())
}

/// Without the WebGPU backend no decoder selects on the device (`Decoder::selects_on_device`).
#[cfg(not(feature = "webgpu"))]
async fn read_top(_: &Tensor<2>, _: &[Adjust], _: f32, _: Caps) -> Result<Vec<Candidates>, EngineError> {
    Err(device_error("candidates on the device need the WebGPU backend"))
}

impl Runner {
    /// Runs a prompt of token ids once and returns what `readout` asks of its last position, or the logits
    /// of every position when `all_positions` (for prompt logprobs; `readout` must be [`Readout::Full`]
    /// then). The cache holds up to `capacity` positions.
    pub async fn prefill(
        decoder: &Decoder,
        prompt: &[u32],
        capacity: usize,
        all_positions: bool,
        readout: Readout<'_>,
    ) -> Result<(Self, Rows), EngineError> {
        let cache = decoder.new_cache(1, capacity);
        Self::prefill_after(decoder, cache, &[Chunk::Ids(prompt)], all_positions, readout).await
    }

    /// Runs `rest`, the chunks of a prompt after the `cache.len` positions `cache` (one row) already holds
    /// (none, or a kept prefix: [`super::prefix_cache`]), as [`Runner::prefill`] runs a prompt: with
    /// `all_positions` the logits of `rest`'s positions come back. `rest` must take a position.
    pub async fn prefill_after(
        decoder: &Decoder,
        cache: KvCache,
        rest: &[Chunk<'_>],
        all_positions: bool,
        readout: Readout<'_>,
    ) -> Result<(Self, Rows), EngineError> {
        if rest.iter().all(Chunk::is_empty) {
            return Err(EngineError::Device(format!(
                "nothing of the prompt is left to run after the {} cached positions",
                cache.len
            )));
        }
        let mut runner = Self {
            decoder: decoder.clone(),
            cache,
            last: None,
        };
        let logits = decoder.prefill(rest, &mut runner.cache, all_positions)?;
        // A recurrent model's states at the prompt's end, to come back to (`model::layers::state`).
        runner.cache.snapshot();
        let rows = runner.read(logits, readout).await?;
        Ok((runner, rows))
    }

    /// The cache, leaving the runner (e.g. to keep it for later prompts).
    pub fn into_cache(self) -> KvCache {
        self.cache
    }

    async fn read(&mut self, logits: Tensor<3>, readout: Readout<'_>) -> Result<Rows, EngineError> {
        let [b, s, v] = logits.dims();
        let logits = logits.reshape([b * s, v]);
        self.last = None;
        match readout {
            Readout::Full => Ok(Rows::Full(read_rows(logits).await?)),
            Readout::Top { adjust, temperature } => {
                let top = read_top(&logits, adjust, temperature, self.decoder.caps()).await?;
                self.last = Some(logits);
                Ok(Rows::Top(top))
            }
        }
    }

    /// The whole rows of the last step that read [`Readout::Top`], adjusted (a second read).
    pub async fn read_last(&mut self) -> Result<Vec<Vec<f32>>, EngineError> {
        match self.last.take() {
            Some(logits) => read_rows(logits).await,
            None => Err(EngineError::Device("no step's logits are kept to read".into())),
        }
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

    /// Appends one token per row and returns what `readout` asks of each row's next logits.
    pub async fn step(&mut self, tokens: &[u32], readout: Readout<'_>) -> Result<Rows, EngineError> {
        let rows: Vec<Vec<u32>> = tokens.iter().map(|&t| vec![t]).collect();
        let logits = self.decoder.forward(&rows, &mut self.cache, false)?;
        self.read(logits, readout).await
    }
}

/// The next token of each greedy row (0 for a row without candidates, as `argmax` of an empty row).
pub fn greedy_ids(rows: Rows) -> Vec<u32> {
    match rows {
        Rows::Full(rows) => rows.iter().map(|r| argmax(r)).collect(),
        Rows::Top(rows) => rows
            .iter()
            .map(|c| c.top.first().map_or(0, |&(id, _)| id))
            .collect(),
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
    let readout = if decoder.selects_on_device() != SelectOnDevice::Never {
        Readout::Top {
            adjust: &[],
            temperature: 0.0,
        }
    } else {
        Readout::Full
    };
    let (mut runner, mut rows) = Runner::prefill(decoder, prompt, capacity, false, readout).await?;
    let mut out = Vec::new();
    while out.len() < max_new {
        let next = greedy_ids(rows).pop().unwrap_or(0);
        if stop_ids.contains(&next) {
            break;
        }
        out.push(next);
        if out.len() == max_new || runner.room() == 0 {
            break;
        }
        rows = runner.step(&[next], readout).await?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lost_reason_is_wgpus_line() {
        let reason = "The device is poisoned\nCaused by:\n  Destroyed: Device was destroyed.\nBacktrace:\nNo backtrace available";
        assert_eq!(super::lost_reason(reason), "Destroyed: Device was destroyed.");
        assert_eq!(super::lost_reason("Lost: gone"), "Lost: gone");
        assert_eq!(super::lost_reason(""), "no reason given");
    }
}
