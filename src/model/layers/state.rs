//! The fixed-size state of a recurrent layer ([`State`]), and the snapshots of every recurrent layer's
//! state at chosen positions ([`Snapshots`]) that let a kept sequence be resumed part way.
//!
//! A recurrent layer (LFM2's short convolution, Qwen3.5's Gated DeltaNet) folds every position it has
//! seen into a state of fixed size: it cannot forget the last positions as an attention layer forgets its
//! last keys. So a cache with recurrent layers goes back to an earlier position only where it kept a
//! snapshot of every recurrent state there (the end of each prefill, and every [`SNAPSHOT_EVERY`]
//! positions within a long one); the positions after it run again.
//!
//! States are replaced, never written in place: a step makes new tensors from the old ones. A snapshot
//! (or a copy for another run) is a second handle to the same tensors, which no later step can change.
//!
//! Shapes: `b` sequences, `C` channels of the convolution, `w` its width, `H` heads of the delta rule,
//! `dk` / `dv` its key and value dims.

use burn::tensor::{Device, Tensor};

use crate::model::config::CacheKind;

/// Within a prefill longer than this, a snapshot is kept every this many positions (besides the one at
/// its end), so that a later prompt sharing only part of a long prompt resumes near where they part.
pub const SNAPSHOT_EVERY: usize = 1024;

/// Snapshots a cache keeps at most (the latest); each holds every recurrent layer's state (Qwen3.5-0.8B:
/// 18 DeltaNet layers of 16 heads of 128 × 128, 19 MB), and the prefix cache's budget counts them.
pub const MAX_SNAPSHOTS: usize = 4;

/// One recurrent layer's state.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one per layer, moved once per forward")]
pub enum State {
    /// A short convolution's last `w − 1` inputs, `[b, w − 1, C]`.
    Conv(Tensor<3>),
    /// A gated delta rule's convolution inputs `[b, w − 1, C]` and its matrices `S`, `[b, H, dk, dv]`.
    Delta { conv: Tensor<3>, s: Tensor<4> },
}

impl State {
    /// The state of a layer of `kind` before any position: zeros. `None` for an attention layer.
    pub fn zeros(kind: CacheKind, batch: usize, device: &Device) -> Option<Self> {
        match kind {
            CacheKind::Conv { channels, width } => Some(Self::Conv(Tensor::zeros(
                [batch, width.saturating_sub(1), channels],
                device,
            ))),
            CacheKind::Delta {
                channels,
                width,
                heads,
                key_dim,
                value_dim,
            } => Some(Self::Delta {
                conv: Tensor::zeros([batch, width.saturating_sub(1), channels], device),
                s: Tensor::zeros([batch, heads, key_dim, value_dim], device),
            }),
            CacheKind::Kv | CacheKind::SharedKv { .. } => None,
        }
    }

    /// Bytes a state of `kind` for `batch` sequences takes (f32); 0 for an attention layer.
    pub fn bytes_of(kind: CacheKind, batch: usize) -> usize {
        let elems = match kind {
            CacheKind::Conv { channels, width } => channels * width.saturating_sub(1),
            CacheKind::Delta {
                channels,
                width,
                heads,
                key_dim,
                value_dim,
            } => channels * width.saturating_sub(1) + heads * key_dim * value_dim,
            CacheKind::Kv | CacheKind::SharedKv { .. } => 0,
        };
        4 * batch * elems
    }

    /// The state with `f` applied to every tensor along its first (row) dimension.
    pub fn map_rows(self, f: &impl Fn(Tensor<4>) -> Tensor<4>) -> Self {
        let rows3 = |t: Tensor<3>| {
            let [b, c, w] = t.dims();
            let out = f(t.reshape([b, c, w, 1]));
            let [b, ..] = out.dims();
            out.reshape([b, c, w])
        };
        match self {
            Self::Conv(c) => Self::Conv(rows3(c)),
            Self::Delta { conv, s } => Self::Delta {
                conv: rows3(conv),
                s: f(s),
            },
        }
    }
}

/// One snapshot: every layer's state (`None` for attention layers) after `len` positions.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub len: usize,
    pub states: Vec<Option<State>>,
}

/// The snapshots of one sequence's recurrent states, by position (one row: they are taken while the
/// cache holds one sequence, a prompt's prefill, and stay valid for every row forked from it).
#[derive(Debug, Clone, Default)]
pub struct Snapshots {
    taken: Vec<Snapshot>,
}

impl Snapshots {
    /// Keeps `states` as the snapshot at `len` (replacing one there), dropping the earliest beyond
    /// [`MAX_SNAPSHOTS`].
    pub fn keep(&mut self, len: usize, states: Vec<Option<State>>) {
        self.taken.retain(|s| s.len != len);
        self.taken.push(Snapshot { len, states });
        self.taken.sort_by_key(|s| s.len);
        if self.taken.len() > MAX_SNAPSHOTS {
            self.taken.remove(0);
        }
    }

    /// The latest snapshot at or before `len`.
    pub fn at_or_before(&self, len: usize) -> Option<&Snapshot> {
        self.taken.iter().rev().find(|s| s.len <= len)
    }

    /// Forgets snapshots after `len`.
    pub fn forget_after(&mut self, len: usize) {
        self.taken.retain(|s| s.len <= len);
    }

    /// The snapshots at or before `len`.
    pub fn up_to(&self, len: usize) -> Self {
        Self {
            taken: self.taken.iter().filter(|s| s.len <= len).cloned().collect(),
        }
    }

    /// How many are kept.
    pub fn count(&self) -> usize {
        self.taken.len()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Device, Tensor, TensorData};

    use super::*;
    use crate::model::layers::kv_cache::KvCache;

    /// A cache of one attention layer and one conv layer whose state holds the last position's number.
    fn cache(device: &Device) -> KvCache {
        let kinds = [
            CacheKind::Kv,
            CacheKind::Conv {
                channels: 1,
                width: 2,
            },
        ];
        KvCache::with_kinds(&kinds, 1, 1, 1, 4096, device, DType::F32)
    }

    /// Appends positions `from..to`, the conv state ending at `to`.
    fn run(c: &mut KvCache, from: usize, to: usize, device: &Device) {
        assert_eq!(c.len, from);
        let s = to - from;
        let keys: Vec<f32> = (from..to).map(|p| p as f32).collect();
        let k = Tensor::<4>::from_data(TensorData::new(keys, [1, 1, s, 1]), device);
        c.append(0, k.clone(), k);
        let _ = c.take_state(1);
        let state = Tensor::<3>::from_data(TensorData::new(vec![to as f32], [1, 1, 1]), device);
        c.put_state(1, State::Conv(state));
        c.advance(s);
    }

    fn state_of(c: &mut KvCache) -> f32 {
        let State::Conv(t) = c.take_state(1) else {
            unreachable!()
        };
        let v = pollster::block_on(t.clone().into_data_async())
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap()[0];
        c.put_state(1, State::Conv(t));
        v
    }

    #[test]
    fn a_recurrent_cache_goes_back_only_to_its_snapshots() {
        let device = Device::flex();
        let mut c = cache(&device);
        assert!(c.is_recurrent());
        assert_eq!(c.snapshot_within(SNAPSHOT_EVERY + 10), Some(SNAPSHOT_EVERY));
        assert_eq!(
            c.snapshot_within(SNAPSHOT_EVERY),
            None,
            "a forward ending on the boundary is its end"
        );
        run(&mut c, 0, 10, &device);
        c.snapshot();
        run(&mut c, 10, 15, &device);
        assert_eq!(
            (
                c.restorable(20),
                c.restorable(15),
                c.restorable(12),
                c.restorable(9)
            ),
            (15, 15, 10, 0)
        );
        let copy = c.copy_prefix(12);
        assert_eq!(copy.len, 10, "copied back to the snapshot");
        let mut copy = copy;
        assert_eq!(state_of(&mut copy), 10.0);
        assert_eq!(state_of(&mut c), 15.0, "the source keeps its own state");
        c.truncate(14);
        assert_eq!((c.len, state_of(&mut c)), (10, 10.0));
        c.truncate(5);
        assert_eq!(c.len, 0, "before every snapshot: from the start");
        let State::Conv(zeros) = c.take_state(1) else {
            unreachable!()
        };
        assert_eq!(zeros.dims(), [1, 1, 1]);
        // Without recurrent layers a cache goes back anywhere.
        let mut plain = KvCache::new(1, 1, 1, 1, 64, &device);
        assert!(!plain.is_recurrent());
        let k = Tensor::<4>::zeros([1, 1, 8, 1], &device);
        plain.append(0, k.clone(), k);
        plain.advance(8);
        assert_eq!((plain.restorable(5), plain.snapshot_within(4000)), (5, None));
        plain.truncate(5);
        assert_eq!(plain.len, 5);
    }

    #[test]
    fn snapshots_keep_the_latest_few() {
        let device = Device::flex();
        let mut c = cache(&device);
        for i in 0..MAX_SNAPSHOTS + 3 {
            run(&mut c, i, i + 1, &device);
            c.snapshot();
        }
        assert_eq!(c.restorable(2), 0, "the earliest were dropped");
        assert_eq!(c.restorable(MAX_SNAPSHOTS + 1), MAX_SNAPSHOTS + 1);
        assert!(c.device_bytes() >= (MAX_SNAPSHOTS + 1) * State::bytes_of(c.kinds()[1], 1));
    }
}
