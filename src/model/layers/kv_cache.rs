//! The KV cache: per layer what its [`CacheKind`] keeps — its own keys and values, `[b, K, allocated, d]` each (`b` sequences, `K` key-value
//! heads, `d` head dim; f32, or f16 for the fused wgpu step on a device with `shader-f16`), grown in blocks of [`BLOCK`] positions as positions are appended (never allocated
//! for the worst case: wasm memory never shrinks, so a preallocated 8192-position cache would stay
//! resident for good), up to a `capacity` that bounds a request.
//!
//! Appending writes into the layer's tensor in place: the tensor is moved out of the cache while it is
//! written (burn's `slice_assign` mutates a tensor whose buffer it holds alone, and copies one that is
//! shared), so a decode step costs its new positions, not a copy of the cache.
//!
//! A layer that shares an earlier layer's keys and values ([`CacheKind::SharedKv`]) holds nothing: it
//! attends to what that layer appended in the same forward. A recurrent layer ([`CacheKind::Conv`],
//! [`CacheKind::Delta`]) holds a fixed-size [`State`] instead, and the cache keeps [`Snapshots`] of those
//! states so that it can go back to an earlier position (`model::layers::state`). Growth, forks
//! ([`KvCache::repeat_rows`], [`KvCache::keep_rows`]), copies for the prefix cache and byte counts go
//! layer by layer through the kind.

use burn::tensor::{DType, Device, Tensor};

use super::state::{SNAPSHOT_EVERY, Snapshots, State};
use crate::model::config::CacheKind;

/// Positions added per growth step.
pub const BLOCK: usize = 256;

/// What one layer holds.
// One per layer, moved only while it is written: the size of the tensors' handles costs nothing here.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Held {
    /// `(keys, values)`, `None` until the first append (and while the layer is written).
    Own(Option<(Tensor<4>, Tensor<4>)>),
    /// Layer `from`'s.
    Shared(usize),
    /// A recurrent layer's state, `None` until the layer first runs (zeros) and while it runs.
    State(Option<State>),
}

/// Keys and values of every layer for up to `capacity` positions.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Held>,
    /// Each layer's kind.
    kinds: Vec<CacheKind>,
    /// The recurrent layers' states at earlier positions.
    snapshots: Snapshots,
    /// Positions filled so far.
    pub len: usize,
    /// The most positions this cache will hold.
    pub capacity: usize,
    /// Positions the tensors have room for.
    allocated: usize,
    batch: usize,
    /// Per layer `(key-value heads, head dim)` of what it holds.
    dims: Vec<(usize, usize)>,
    /// F32, or F16 where the fused wgpu step runs in f16 (`kernels::gpu::caps`).
    dtype: DType,
    device: Device,
}

impl KvCache {
    /// An empty f32 cache for `batch` sequences of up to `capacity` positions over `layers` layers;
    /// nothing is allocated yet.
    pub fn new(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
    ) -> Self {
        Self::with_dtype(layers, batch, kv_heads, head_dim, capacity, device, DType::F32)
    }

    /// [`KvCache::new`] holding its keys and values as `dtype` (F32 or F16). Appends are converted to
    /// it; what [`KvCache::append`] returns is f32.
    pub fn with_dtype(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
        dtype: DType,
    ) -> Self {
        let kinds = vec![CacheKind::Kv; layers];
        Self::with_kinds(&kinds, batch, kv_heads, head_dim, capacity, device, dtype)
    }

    /// [`KvCache::with_dtype`] with each layer's [`CacheKind`] (a shared layer's `from` is an earlier
    /// layer that holds its own, as `ModelConfig` checks).
    pub fn with_kinds(
        kinds: &[CacheKind],
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
        dtype: DType,
    ) -> Self {
        let dims = vec![(kv_heads, head_dim); kinds.len()];
        Self::with_layer_dims(kinds, &dims, batch, capacity, device, dtype)
    }

    /// [`KvCache::with_kinds`] with each layer's own `(key-value heads, head dim)` (Gemma 4's full-attention
    /// layers have larger heads than its sliding ones).
    pub fn with_layer_dims(
        kinds: &[CacheKind],
        dims: &[(usize, usize)],
        batch: usize,
        capacity: usize,
        device: &Device,
        dtype: DType,
    ) -> Self {
        Self {
            layers: kinds
                .iter()
                .map(|k| match *k {
                    CacheKind::Kv => Held::Own(None),
                    CacheKind::SharedKv { from } => Held::Shared(from),
                    CacheKind::Conv { .. } | CacheKind::Delta { .. } => Held::State(None),
                })
                .collect(),
            kinds: kinds.to_vec(),
            snapshots: Snapshots::default(),
            len: 0,
            capacity,
            allocated: 0,
            batch,
            dims: dims.to_vec(),
            dtype,
            device: device.clone(),
        }
    }

    /// What the cache holds its keys and values as.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of one element (4, or 2 for f16).
    fn elem_bytes(&self) -> usize {
        self.dtype.size()
    }

    /// Sequences (rows) the cache holds.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Positions the tensors have room for (a multiple of [`BLOCK`], at most `capacity`).
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    /// Each layer's kind.
    pub fn kinds(&self) -> Vec<CacheKind> {
        self.kinds.clone()
    }

    /// Whether some layer keeps a recurrent state (and so goes back only to its snapshots).
    pub fn is_recurrent(&self) -> bool {
        self.kinds.iter().any(|k| k.is_recurrent())
    }

    /// Bytes the cache's tensors take on the device: keys and values, recurrent states and their
    /// snapshots (each counted whole).
    pub fn device_bytes(&self) -> usize {
        self.bytes_per_position() * self.allocated
            + self.state_bytes() * self.batch
            + self.state_bytes() * self.snapshots.count()
    }

    /// Bytes the recurrent states of one sequence take, whatever its length.
    pub fn state_bytes(&self) -> usize {
        self.kinds.iter().map(|&k| State::bytes_of(k, 1)).sum()
    }

    /// Layer `layer`'s recurrent state, taken out for the layer to run (zeros before its first
    /// position); the layer puts the next one back ([`KvCache::put_state`]).
    ///
    /// # Panics
    /// When `layer` is not recurrent (a family's layer asks for its own kind's state).
    pub fn take_state(&mut self, layer: usize) -> State {
        let Held::State(held) = &mut self.layers[layer] else {
            panic!("layer {layer} keeps keys and values, not a recurrent state")
        };
        held.take()
            .or_else(|| State::zeros(self.kinds[layer], self.batch, &self.device))
            .expect("a recurrent layer's kind has a state")
    }

    /// Sets layer `layer`'s recurrent state after the positions being appended.
    pub fn put_state(&mut self, layer: usize, state: State) {
        self.layers[layer] = Held::State(Some(state));
    }

    /// Keeps the recurrent states at [`KvCache::len`] as a snapshot to come back to (a one-row cache
    /// with recurrent layers; nothing otherwise).
    pub fn snapshot(&mut self) {
        if !self.is_recurrent() || self.batch != 1 || self.len == 0 {
            return;
        }
        let states = self.states();
        self.snapshots.keep(self.len, states);
    }

    /// Where a forward of `s` positions from [`KvCache::len`] should stop to take a snapshot (every
    /// [`SNAPSHOT_EVERY`] positions of a one-row recurrent cache): the positions to run first, or `None`.
    pub fn snapshot_within(&self, s: usize) -> Option<usize> {
        if !self.is_recurrent() || self.batch != 1 {
            return None;
        }
        let next = (self.len / SNAPSHOT_EVERY + 1) * SNAPSHOT_EVERY;
        (next < self.len + s).then(|| next - self.len)
    }

    /// The position [`KvCache::truncate`] to `len` goes back to: `len` itself (at most
    /// [`KvCache::len`]) without recurrent layers; with them [`KvCache::len`] if `len` reaches it, else
    /// the latest snapshot at or before `len` (0 when none is).
    pub fn restorable(&self, len: usize) -> usize {
        match (self.is_recurrent(), len >= self.len) {
            (_, true) => self.len,
            (false, false) => len,
            (true, false) => self.snapshots.at_or_before(len).map_or(0, |s| s.len),
        }
    }

    /// Every layer's current state (`None` for attention layers).
    fn states(&self) -> Vec<Option<State>> {
        self.layers
            .iter()
            .map(|h| match h {
                Held::State(s) => s.clone(),
                _ => None,
            })
            .collect()
    }

    /// Sets every recurrent layer's state to `states` (`None`: zeros when next run).
    fn restore(&mut self, states: Vec<Option<State>>) {
        for (held, state) in self.layers.iter_mut().zip(states) {
            if let Held::State(s) = held {
                *s = state;
            }
        }
    }

    /// Makes room for `t` positions, growing by whole blocks (capped at `capacity`). Existing positions
    /// are copied once into the larger tensors.
    fn reserve(&mut self, t: usize) {
        if t <= self.allocated {
            return;
        }
        let target = t.div_ceil(BLOCK).saturating_mul(BLOCK).min(self.capacity.max(t));
        let extra = target - self.allocated;
        let b = self.batch;
        for (layer, &(k, d)) in self.layers.iter_mut().zip(&self.dims) {
            let zeros = || Tensor::<4>::zeros([b, k, extra, d], (&self.device, self.dtype));
            if let Held::Own(held) = layer {
                *held = Some(match held.take() {
                    None => (zeros(), zeros()),
                    Some((keys, values)) => (
                        Tensor::cat(vec![keys, zeros()], 2),
                        Tensor::cat(vec![values, zeros()], 2),
                    ),
                });
            }
        }
        self.allocated = target;
    }

    /// Writes `k`, `v` (`[b, K, s, d]`) of `layer` at positions `len..len + s` and returns the layer's
    /// keys and values for positions `0..len + s`, each `[b, K, len + s, d]` (f32: from an f16 cache the
    /// earlier positions as held, the new ones as given). The caller advances
    /// [`KvCache::len`] once every layer has been appended ([`KvCache::advance`]). A layer that shares
    /// layer `from`'s keys and values writes nothing: it gets `from`'s for `0..len + s`, which `from`
    /// appended earlier in the same forward (as held: f16-rounded in an f16 cache).
    pub fn append(&mut self, layer: usize, k: Tensor<4>, v: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        let [b, kv, s, d] = k.dims();
        let (pos, t) = (self.len, self.len + s);
        self.reserve(t);
        if let Held::Shared(from) = self.layers[layer] {
            let Held::Own(Some((keys, values))) = &self.layers[from] else {
                unreachable!("a shared layer's source holds its own, allocated by reserve")
            };
            let read = |x: &Tensor<4>| x.clone().narrow(2, 0, t).cast(DType::F32);
            return (read(keys), read(values));
        }
        let Held::Own(Some((keys, values))) = std::mem::replace(&mut self.layers[layer], Held::Own(None))
        else {
            unreachable!("reserve allocated every layer")
        };
        match self.dtype {
            DType::F32 => {
                let keys = keys.slice_assign([0..b, 0..kv, pos..t, 0..d], k);
                let values = values.slice_assign([0..b, 0..kv, pos..t, 0..d], v);
                let out = (keys.clone().narrow(2, 0, t), values.clone().narrow(2, 0, t));
                self.layers[layer] = Held::Own(Some((keys, values)));
                out
            }
            // An f16 cache: the new positions are attended to as computed (f32), the cached ones as
            // held, as the fused decode step does; a prefill from an empty cache is then f32 throughout.
            _ => {
                let earlier = |t: &Tensor<4>| t.clone().narrow(2, 0, pos).cast(DType::F32);
                let out = match pos {
                    0 => (k.clone(), v.clone()),
                    _ => (
                        Tensor::cat(vec![earlier(&keys), k.clone()], 2),
                        Tensor::cat(vec![earlier(&values), v.clone()], 2),
                    ),
                };
                let keys = keys.slice_assign([0..b, 0..kv, pos..t, 0..d], k.cast(self.dtype));
                let values = values.slice_assign([0..b, 0..kv, pos..t, 0..d], v.cast(self.dtype));
                self.layers[layer] = Held::Own(Some((keys, values)));
                out
            }
        }
    }

    /// Makes room for `s` more positions and returns layer `layer`'s keys and values, `[b, K, allocated,
    /// d]` each, for a kernel that writes positions `len..len + s` into them itself (the fused wgpu decode
    /// step; see [`crate::kernels::gpu::decode`]). The caller advances [`KvCache::len`] afterwards.
    /// Only for layers with their own keys and values (the fused step runs no shared layer).
    pub fn slots(&mut self, layer: usize, s: usize) -> (&mut Tensor<4>, &mut Tensor<4>) {
        self.reserve(self.len + s);
        match &mut self.layers[layer] {
            Held::Own(Some((keys, values))) => (keys, values),
            Held::Own(None) => unreachable!("reserve allocated every layer"),
            Held::Shared(_) | Held::State(_) => {
                unreachable!("the fused step runs only layers with their own cache")
            }
        }
    }

    /// The keys and values that layer `layer` shares with the earlier layer that owns them, `[b, K,
    /// allocated, d]` each, for the fused step's attention of a sharing layer (which reads them as the
    /// owner wrote them in the same step). Call after the owner's [`KvCache::slots`] of this step.
    pub fn shared_slots(&mut self, layer: usize) -> (&mut Tensor<4>, &mut Tensor<4>) {
        let Held::Shared(from) = self.layers[layer] else {
            panic!("layer {layer} keeps keys and values of its own, or a recurrent state")
        };
        match &mut self.layers[from] {
            Held::Own(Some((keys, values))) => (keys, values),
            _ => unreachable!("a shared layer's source holds its own, allocated by reserve"),
        }
    }

    /// Records `s` appended positions (after every layer's [`KvCache::append`]).
    pub fn advance(&mut self, s: usize) {
        self.len += s;
    }

    /// Forgets positions from `len` on (they stay allocated, and the next append overwrites them). With
    /// recurrent layers it goes back to [`KvCache::restorable`]`(len)`, which may be earlier: read
    /// [`KvCache::len`] after.
    pub fn truncate(&mut self, len: usize) {
        let to = self.restorable(len);
        if to < self.len && self.is_recurrent() {
            let states = match self.snapshots.at_or_before(to) {
                Some(s) => s.states.clone(),
                None => vec![None; self.layers.len()],
            };
            self.restore(states);
            self.snapshots.forget_after(to);
        }
        self.len = to;
    }

    /// Bytes one cached position takes over every layer and row (keys and values; a shared layer's are
    /// its source's).
    pub fn bytes_per_position(&self) -> usize {
        let per_row: usize = self
            .layers
            .iter()
            .zip(&self.dims)
            .filter(|(h, _)| matches!(h, Held::Own(_)))
            .map(|(_, (k, d))| k * d)
            .sum();
        self.elem_bytes() * 2 * self.batch * per_row
    }

    /// A cache of its own (new tensors: writing into one never touches the other) holding row 0's
    /// positions `0..`[`KvCache::restorable`]`(len)`, room for them rounded up to a [`BLOCK`], and this
    /// cache's capacity; recurrent states as they were there, and the snapshots up to there.
    pub fn copy_prefix(&self, len: usize) -> KvCache {
        let len = self.restorable(len);
        let mut out = KvCache::with_layer_dims(
            &self.kinds(),
            &self.dims,
            1,
            self.capacity,
            &self.device,
            self.dtype,
        );
        if len == 0 {
            return out;
        }
        if self.is_recurrent() {
            let states = match len == self.len {
                true => self.states(),
                false => self
                    .snapshots
                    .at_or_before(len)
                    .map(|s| s.states.clone())
                    .unwrap_or_default(),
            };
            let first = |s: State| s.map_rows(&|t: Tensor<4>| t.narrow(0, 0, 1));
            out.restore(states.into_iter().map(|s| s.map(first)).collect());
            out.snapshots = self.snapshots.up_to(len);
        }
        out.reserve(len);
        for ((mine, theirs), &(k, d)) in out.layers.iter_mut().zip(&self.layers).zip(&self.dims) {
            if let (Held::Own(mine), Held::Own(Some((src_k, src_v)))) = (mine, theirs)
                && let Some((keys, values)) = mine.take()
            {
                let part = |t: &Tensor<4>| t.clone().narrow(0, 0, 1).narrow(2, 0, len);
                *mine = Some((
                    keys.slice_assign([0..1, 0..k, 0..len, 0..d], part(src_k)),
                    values.slice_assign([0..1, 0..k, 0..len, 0..d], part(src_v)),
                ));
            }
        }
        out.len = len;
        out
    }

    /// Repeats the (single) cached row `n` times, so that `n` sequences continue from one shared prefill.
    pub fn repeat_rows(&mut self, n: usize) {
        self.map_rows(n, |t| t.repeat_dim(0, n));
    }

    /// Keeps only rows `rows` (in that order), e.g. when some of `n` choices have finished and should
    /// stop costing compute.
    pub fn keep_rows(&mut self, rows: &[usize]) {
        if rows.len() == self.batch && rows.iter().enumerate().all(|(i, &r)| i == r) {
            return;
        }
        let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let ids = Tensor::<1, burn::tensor::Int>::from_data(
            burn::tensor::TensorData::new(ids, [rows.len()]),
            &self.device,
        );
        self.map_rows(rows.len(), |t| t.select(0, ids.clone()));
    }

    fn map_rows(&mut self, batch: usize, f: impl Fn(Tensor<4>) -> Tensor<4>) {
        for layer in &mut self.layers {
            match layer {
                Held::Own(held) => *held = held.take().map(|(k, v)| (f(k), f(v))),
                Held::State(held) => *held = held.take().map(|s| s.map_rows(&f)),
                Held::Shared(_) => {}
            }
        }
        self.batch = batch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    fn read(t: Tensor<4>) -> Vec<f32> {
        let data = pollster::block_on(t.into_data_async()).expect("read back");
        data.try_to_vec::<f32>().expect("f32 data")
    }

    #[test]
    fn grows_by_blocks_and_keeps_what_was_appended() {
        let device = Device::flex();
        let (b, k, d) = (2, 1, 2);
        let mut cache = KvCache::new(1, b, k, d, 600, &device);
        assert_eq!(
            cache.allocated(),
            0,
            "nothing is allocated before the first append"
        );
        // Position p of row r holds (r * 1000 + p) in both features; values are the negation.
        let at = |p: usize, s: usize| {
            let v: Vec<f32> = (0..b)
                .flat_map(|r| (p..p + s).flat_map(move |q| [(r * 1000 + q) as f32; 2]))
                .collect();
            Tensor::<4>::from_data(TensorData::new(v, [b, k, s, d]), &device)
        };
        let (keys, _) = cache.append(0, at(0, 10), at(0, 10).neg());
        cache.advance(10);
        assert_eq!(keys.dims(), [b, k, 10, d]);
        assert_eq!(cache.allocated(), BLOCK);
        for p in 10..300 {
            let (keys, values) = cache.append(0, at(p, 1), at(p, 1).neg());
            cache.advance(1);
            assert_eq!(keys.dims(), [b, k, p + 1, d]);
            if p == 299 {
                let (keys, values) = (read(keys), read(values));
                for r in 0..b {
                    for q in [0, 9, 10, 255, 256, 299] {
                        let expected = (r * 1000 + q) as f32;
                        assert_eq!(keys[(r * 300 + q) * d], expected, "row {r} position {q}");
                        assert_eq!(values[(r * 300 + q) * d + 1], -expected);
                    }
                }
            }
        }
        assert_eq!(
            cache.allocated(),
            2 * BLOCK,
            "grown by one more block at position 256"
        );
        assert_eq!(cache.device_bytes(), 4 * 2 * b * k * 2 * BLOCK * d);
        // The cap: never more than the capacity.
        let mut small = KvCache::new(1, 1, 1, 1, 20, &device);
        let one = Tensor::<4>::zeros([1, 1, 5, 1], &device);
        small.append(0, one.clone(), one);
        assert_eq!(small.allocated(), 20);
    }

    #[test]
    fn finished_rows_leave_the_batch() {
        let device = Device::flex();
        let mut cache = KvCache::new(2, 3, 1, 1, 8, &device);
        let rows = Tensor::<4>::from_data(TensorData::new(vec![0.0f32, 1.0, 2.0], [3, 1, 1, 1]), &device);
        for layer in 0..2 {
            cache.append(layer, rows.clone(), rows.clone());
        }
        cache.advance(1);
        cache.keep_rows(&[2, 0]);
        assert_eq!(cache.batch(), 2);
        let next = Tensor::<4>::from_data(TensorData::new(vec![5.0f32, 6.0], [2, 1, 1, 1]), &device);
        let (keys, _) = cache.append(1, next.clone(), next);
        assert_eq!(read(keys), [2.0, 5.0, 0.0, 6.0]);
    }

    /// A layer sharing an earlier layer's cache reads what that layer appended, holds no bytes of its
    /// own, and keeps its kind through copies and forks.
    #[test]
    fn a_shared_layer_reads_its_source() {
        let device = Device::flex();
        let kinds = [CacheKind::Kv, CacheKind::Kv, CacheKind::SharedKv { from: 0 }];
        let mut cache = KvCache::with_kinds(&kinds, 2, 1, 1, 8, &device, DType::F32);
        let rows = |v: [f32; 2]| Tensor::<4>::from_data(TensorData::new(v.to_vec(), [2, 1, 1, 1]), &device);
        cache.append(0, rows([1.0, 2.0]), rows([-1.0, -2.0]));
        cache.append(1, rows([3.0, 4.0]), rows([-3.0, -4.0]));
        let (keys, values) = cache.append(2, rows([9.0, 9.0]), rows([9.0, 9.0]));
        assert_eq!((read(keys), read(values)), (vec![1.0, 2.0], vec![-1.0, -2.0]));
        cache.advance(1);
        assert_eq!(
            cache.device_bytes(),
            4 * 2 * 2 * 2 * 8,
            "two layers of their own, 2 rows, 8 positions"
        );
        assert_eq!(cache.bytes_per_position(), 4 * 2 * 2 * 2);
        cache.append(0, rows([5.0, 6.0]), rows([0.0, 0.0]));
        let (keys, _) = cache.append(2, rows([9.0, 9.0]), rows([9.0, 9.0]));
        assert_eq!(read(keys), [1.0, 5.0, 2.0, 6.0]);
        cache.advance(1);
        let copy = cache.copy_prefix(2);
        assert_eq!(copy.kinds(), kinds);
        assert_eq!((copy.batch(), copy.len), (1, 2));
        cache.keep_rows(&[1]);
        let mut copy = copy;
        for c in [&mut cache, &mut copy] {
            let one = Tensor::<4>::zeros([1, 1, 1, 1], &device);
            c.append(0, one.clone(), one.clone());
            let (keys, _) = c.append(2, one.clone(), one);
            assert_eq!(keys.dims(), [1, 1, 3, 1]);
            c.advance(1);
        }
        assert_eq!(
            read(
                cache
                    .append(
                        2,
                        Tensor::zeros([1, 1, 0, 1], &device),
                        Tensor::zeros([1, 1, 0, 1], &device)
                    )
                    .0
            ),
            [2.0, 6.0, 0.0]
        );
    }
}

/// Not a test: the cost of one decode step's cache writes at SmolLM2-135M's shape (30 layers, 3 KV heads of
/// 64, 1000 cached positions), written in place against the copy that `keys.clone().slice_assign(..)` made
/// before. `cargo test --lib kv_cache::timing -- --ignored --nocapture` (dev profile; flex and wgpu).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod timing {
    use super::*;
    use std::time::Instant;

    fn run(device: &Device, name: &str) {
        let (layers, k, d, len) = (30, 3, 64, 1000);
        let step = || Tensor::<4>::ones([1, k, 1, d], device);
        let sync = |t: Tensor<4>| {
            let _ = pollster::block_on(t.narrow(2, 0, 1).into_data_async());
        };
        // In place, through the cache.
        let mut cache = KvCache::new(layers, 1, k, d, 2048, device);
        for layer in 0..layers {
            cache.append(
                layer,
                Tensor::zeros([1, k, len, d], device),
                Tensor::zeros([1, k, len, d], device),
            );
        }
        cache.advance(len);
        let steps = 20;
        let start = Instant::now();
        for _ in 0..steps {
            let mut last = None;
            for layer in 0..layers {
                last = Some(cache.append(layer, step(), step()).0);
            }
            cache.advance(1);
            sync(last.expect("layers"));
        }
        let in_place = start.elapsed().as_secs_f64() / steps as f64 * 1e3;
        // The old way: a clone shares the buffer, so `slice_assign` copies the whole tensor.
        let mut keys: Vec<Tensor<4>> = (0..2 * layers)
            .map(|_| Tensor::zeros([1, k, 2048, d], device))
            .collect();
        let start = Instant::now();
        for s in 0..steps {
            let pos = len + s;
            for t in &mut keys {
                *t = t.clone().slice_assign([0..1, 0..k, pos..pos + 1, 0..d], step());
            }
            sync(keys[0].clone());
        }
        let copied = start.elapsed().as_secs_f64() / steps as f64 * 1e3;
        eprintln!("{name}: cache writes per decode step: in place {in_place:.2} ms, copying {copied:.2} ms");
    }

    #[test]
    #[ignore]
    fn timing() {
        run(&Device::flex(), "flex");
        if let Ok(gpu) = pollster::block_on(crate::engine::runtime::device::gpu()) {
            run(&gpu.device, "wgpu");
        }
    }
}
