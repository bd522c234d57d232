//! Prefix reuse across requests: the KV state of recently run sequences, kept within a byte budget and
//! evicted least recently used. A chat app sends the whole conversation every turn; a prompt that starts
//! with a kept sequence's positions takes that sequence's state and prefills only the rest, and
//! `usage.prompt_tokens_details.cached_tokens` reports how many positions it did not run. Positions are
//! matched by content ([`Slot`]: a token's id, a media row's chunk key and place), and a kept prefix ends
//! before a media chunk, never inside one.
//!
//! A kept state is never shared by two runs: when the prompt continues a kept sequence (it holds all of
//! its tokens), the run takes that state (no copy) and hands it back, longer, when it ends; when the prompt
//! leaves a kept sequence part way, the run gets a copy of the shared part and the kept sequence stays (a
//! regenerated answer, a second conversation with the same system prompt). The fused wgpu decode step
//! writes the cache's buffers in place, which is why a buffer is never held twice.
//!
//! A model with recurrent layers (`model::layers::state`) goes back only to a position where its states
//! were kept (the end of a prefill, or every `SNAPSHOT_EVERY` positions in a long one): a hit restores the
//! latest such position at or before the match and the prompt runs from there, which is what
//! `cached_tokens` then counts.
//!
//! A run hands its state back when it ends, finished or aborted ([`super::generation::Generation`]); the
//! state is valid up to its last completed step. Keys are kept only for caches whose rope tables agree
//! with the new request's (a LongRoPE model switches tables with the cache's size).

use std::sync::{Arc, Mutex, MutexGuard};

use super::chunks::{Slot, cut_at};
use crate::model::KvCache;

/// The default budget of kept states: 128 MiB, which holds about 2,800 positions of SmolLM2-135M (30 layers,
/// 3 KV heads of 64: 46 KiB a position) or 2,000 of Llama-3.2-1B, and fits beside a small model on a phone.
pub const DEFAULT_BUDGET: usize = 128 << 20;

/// Kept states of one model, shared by its requests (a cheap handle).
#[derive(Debug, Clone)]
pub struct PrefixCache {
    store: Arc<Mutex<Store>>,
}

#[derive(Debug)]
struct Store {
    /// Most bytes the kept states' tensors take (their allocated positions).
    budget: usize,
    /// Ticks once per use: the least recently used entry has the smallest `used`.
    clock: u64,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    /// What the cache holds, one slot per position.
    slots: Vec<Slot>,
    /// One row (`batch` 1) holding `tokens.len()` positions.
    cache: KvCache,
    used: u64,
    /// Set once, when kept: which entry a later [`Reuse::source`] names.
    id: u64,
}

/// A kept state taken for a new prompt: the cache holds the prompt's first `cached` positions.
#[derive(Debug)]
pub struct Reuse {
    pub cache: KvCache,
    pub cached: usize,
    /// The kept sequence it was copied from (`None`: taken out), which the run's own state replaces when
    /// it is kept ([`PrefixCache::put`]): a prompt that leaves a sequence part way (a regenerated answer,
    /// a turn the next prompt re-tokenised) continues it.
    pub source: Option<u64>,
}

fn common_prefix(a: &[Slot], b: &[Slot]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// An empty cache that keeps states of up to `budget` bytes in all (0: keeps nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            store: Arc::new(Mutex::new(Store {
                budget,
                clock: 0,
                entries: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while the lock was held leaves at worst a stale entry, never a broken invariant.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.lock().budget
    }

    /// Bytes the kept states take now.
    pub fn bytes(&self) -> usize {
        self.lock().entries.iter().map(|e| e.cache.device_bytes()).sum()
    }

    /// Sequences kept now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every kept state.
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    /// The kept state sharing the longest usable prefix with `prompt`, among those `fits` accepts, cut to
    /// that prefix: at most `prompt.len() − 1` positions, so that the prompt's last position still runs and
    /// gives the next token's logits, and ending before any media chunk it would cut ([`cut_at`]). Taken
    /// out of the cache when the prompt continues it, else copied (see the module docs). `None` when no
    /// kept state shares a usable position with the prompt.
    pub fn take(&self, prompt: &[Slot], fits: impl Fn(&KvCache) -> bool) -> Option<Reuse> {
        let limit = prompt.len().checked_sub(1)?;
        let mut store = self.lock();
        let (i, cached, shared) = store
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| fits(&e.cache))
            .map(|(i, e)| {
                let shared = common_prefix(&e.slots, prompt);
                // A recurrent state goes back only to a snapshot (one never inside a media chunk).
                (i, e.cache.restorable(cut_at(prompt, shared.min(limit))), shared)
            })
            .max_by_key(|&(i, cached, _)| (cached, std::cmp::Reverse(i)))?;
        if cached == 0 {
            return None;
        }
        store.clock += 1;
        let clock = store.clock;
        let (cache, source) = if shared == store.entries[i].slots.len() {
            let mut cache = store.entries.swap_remove(i).cache;
            cache.truncate(cached);
            (cache, None)
        } else {
            let entry = &mut store.entries[i];
            entry.used = clock;
            (entry.cache.copy_prefix(cached), Some(entry.id))
        };
        Some(Reuse {
            cache,
            cached,
            source,
        })
    }

    /// Keeps `cache` (one row) as the state of `slots` (cut to the positions it holds, and before a media
    /// chunk it would cut), dropping the kept sequences it supersedes (`source`, the one its prefix was
    /// copied from, and those sharing at least half their positions with it), then evicts least recently
    /// used states until the budget holds.
    pub fn put(&self, mut slots: Vec<Slot>, mut cache: KvCache, source: Option<u64>) {
        if cache.batch() != 1 {
            return;
        }
        slots.truncate(cut_at(&slots, cache.len.min(slots.len())));
        cache.truncate(slots.len());
        slots.truncate(cache.len);
        if slots.is_empty() {
            return;
        }
        let mut store = self.lock();
        store.clock += 1;
        let used = store.clock;
        store
            .entries
            .retain(|e| Some(e.id) != source && 2 * common_prefix(&e.slots, &slots) < e.slots.len());
        store.entries.push(Entry {
            slots,
            cache,
            used,
            id: used,
        });
        let budget = store.budget;
        while store
            .entries
            .iter()
            .map(|e| e.cache.device_bytes())
            .sum::<usize>()
            > budget
        {
            let oldest = store
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => drop(store.entries.remove(i)),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Tensor, TensorData};

    fn ids(tokens: &[u32]) -> Vec<Slot> {
        tokens.iter().map(|&t| Slot::Token(t)).collect()
    }

    /// A one-layer cache of `tokens.len()` positions whose keys hold the token ids.
    fn cache_of(tokens: &[u32], device: &Device) -> KvCache {
        let mut cache = KvCache::new(1, 1, 1, 1, 1024, device);
        let s = tokens.len();
        let ids: Vec<f32> = tokens.iter().map(|&t| t as f32).collect();
        let t = Tensor::<4>::from_data(TensorData::new(ids, [1, 1, s, 1]), device);
        cache.append(0, t.clone(), t.neg());
        cache.advance(s);
        cache
    }

    /// The keys a cache holds at its positions.
    fn keys(cache: &mut KvCache) -> Vec<u32> {
        let len = cache.len;
        let (keys, _) = cache.slots(0, 0);
        let t = keys.clone().narrow(2, 0, len);
        let data = pollster::block_on(t.into_data_async()).expect("read back");
        data.try_to_vec::<f32>()
            .expect("f32")
            .iter()
            .map(|&v| v as u32)
            .collect()
    }

    #[test]
    fn a_continued_sequence_is_taken_and_a_left_one_copied() {
        let device = Device::flex();
        let prefixes = PrefixCache::new(1 << 20);
        prefixes.put(ids(&[1, 2, 3, 4]), cache_of(&[1, 2, 3, 4], &device), None);
        assert!(
            prefixes.take(&ids(&[9, 1, 2]), |_| true).is_none(),
            "no shared first token"
        );
        // Leaving it part way: a copy of the shared part; the kept sequence stays whole.
        let mut copy = prefixes
            .take(&ids(&[1, 2, 7, 8]), |_| true)
            .expect("shares two tokens");
        assert_eq!((copy.cached, copy.cache.len), (2, 2));
        assert_eq!(keys(&mut copy.cache), [1, 2]);
        assert_eq!(prefixes.len(), 1);
        // The copy's run, kept, replaces the sequence it left.
        let source = copy.source;
        assert!(source.is_some());
        prefixes.put(ids(&[1, 2, 7, 8]), copy.cache, source);
        assert_eq!(prefixes.len(), 1);
        assert!(
            prefixes
                .take(&ids(&[1, 2, 3, 4, 5]), |_| true)
                .is_some_and(|r| r.cached == 2)
        );
        prefixes.put(ids(&[1, 2, 3, 4]), cache_of(&[1, 2, 3, 4], &device), None);
        assert_eq!(prefixes.len(), 1);
        // The same prompt again: all but its last token, taken out.
        let same = prefixes
            .take(&ids(&[1, 2, 3, 4]), |_| true)
            .expect("the whole sequence");
        assert_eq!(same.cached, 3);
        assert!(
            prefixes.is_empty(),
            "a continued sequence is moved out, never shared"
        );
        // A refused entry (another rope table) is not used.
        prefixes.put(ids(&[1, 2, 3]), cache_of(&[1, 2, 3], &device), None);
        assert!(prefixes.take(&ids(&[1, 2, 3, 4]), |_| false).is_none());
        let longer = prefixes
            .take(&ids(&[1, 2, 3, 4, 5]), |_| true)
            .expect("continues it");
        assert_eq!(longer.cached, 3);
    }

    #[test]
    fn extended_sequences_replace_theirs_and_the_budget_evicts_the_oldest() {
        let device = Device::flex();
        let one = cache_of(&[1], &device).device_bytes();
        let prefixes = PrefixCache::new(2 * one);
        prefixes.put(ids(&[1, 2]), cache_of(&[1, 2], &device), None);
        prefixes.put(ids(&[1, 2, 3]), cache_of(&[1, 2, 3], &device), None);
        assert_eq!(prefixes.len(), 1, "[1, 2, 3] replaces its own prefix [1, 2]");
        prefixes.put(ids(&[1, 2, 4, 5]), cache_of(&[1, 2, 4, 5], &device), None);
        assert_eq!(
            prefixes.len(),
            1,
            "[1, 2, 4, 5] shares two of [1, 2, 3]'s three tokens"
        );
        prefixes.put(ids(&[1, 2, 3]), cache_of(&[1, 2, 3], &device), None);
        assert_eq!(prefixes.len(), 1, "and [1, 2, 3] shares half of [1, 2, 4, 5]'s");
        prefixes.put(ids(&[1, 7, 8]), cache_of(&[1, 7, 8], &device), None);
        assert_eq!(
            prefixes.len(),
            2,
            "[1, 7, 8] shares a third of [1, 2, 3]: both are kept"
        );
        prefixes.clear();
        prefixes.put(ids(&[1, 2, 3]), cache_of(&[1, 2, 3], &device), None);
        prefixes.put(ids(&[5, 6]), cache_of(&[5, 6], &device), None);
        // [1, 2, 3] is used again, so [5, 6] is the oldest when a third sequence arrives.
        let taken = prefixes.take(&ids(&[1, 2, 9]), |_| true).expect("shared");
        assert_eq!(taken.cached, 2);
        prefixes.put(ids(&[7]), cache_of(&[7], &device), None);
        assert_eq!(prefixes.len(), 2);
        assert!(
            prefixes.take(&ids(&[5, 6, 1]), |_| true).is_none(),
            "[5, 6] was evicted"
        );
        assert!(prefixes.bytes() <= prefixes.budget());
        // Tokens beyond the cached positions are cut; a cache of several rows is not kept.
        let nothing = PrefixCache::new(0);
        nothing.put(ids(&[1, 2]), cache_of(&[1, 2], &device), None);
        assert!(nothing.is_empty(), "a budget of 0 keeps nothing");
        prefixes.clear();
        prefixes.put(ids(&[1, 2, 3, 4, 5]), cache_of(&[1, 2], &device), None);
        let cut = prefixes
            .take(&ids(&[1, 2, 3, 4, 5, 6]), |_| true)
            .expect("shared");
        assert_eq!(cut.cached, 2, "only the two positions the cache held");
    }

    #[test]
    fn media_rows_match_by_content_and_a_prefix_never_ends_inside_one() {
        let device = Device::flex();
        let prefixes = PrefixCache::new(1 << 20);
        let image = |key: u64, n: u32| (0..n).map(move |at| Slot::Media { key, at });
        // [1, 2] · image 7 (3 rows) · [3, 4]
        let kept: Vec<Slot> = ids(&[1, 2])
            .into_iter()
            .chain(image(7, 3))
            .chain(ids(&[3, 4]))
            .collect();
        prefixes.put(kept.clone(), cache_of(&[1, 2, 50, 51, 52, 3, 4], &device), None);
        // The same image in a later turn: everything but the last position is reused.
        let mut next = kept.clone();
        next.extend(ids(&[5, 6]));
        let r = prefixes.take(&next, |_| true).expect("the same image");
        assert_eq!(r.cached, 7);
        prefixes.put(
            next.clone(),
            cache_of(&[1, 2, 50, 51, 52, 3, 4, 5, 6], &device),
            r.source,
        );
        // Another image after the same text: only the text is reused.
        let other: Vec<Slot> = ids(&[1, 2])
            .into_iter()
            .chain(image(8, 3))
            .chain(ids(&[3]))
            .collect();
        let r = prefixes.take(&other, |_| true).expect("the text before it");
        assert_eq!(r.cached, 2);
        // A prompt that ends inside the image's rows (its last row must run): cut before the image.
        let ends: Vec<Slot> = ids(&[1, 2]).into_iter().chain(image(7, 3)).collect();
        let mut r = prefixes.take(&ends, |_| true).expect("the text before it");
        assert_eq!(r.cached, 2);
        assert_eq!(keys(&mut r.cache), [1, 2]);
        // A state that ends inside an image is kept only up to the image.
        prefixes.clear();
        prefixes.put(ends, cache_of(&[1, 2, 50, 51], &device), None);
        let r = prefixes.take(&other, |_| true).expect("kept before the image");
        assert_eq!(r.cache.len, 2);
    }
}
