//! A prompt as the engine runs it: chunks of token ids and of media (the embedding rows that stand where
//! one image's, or one video's frames', placeholder tokens stand), in order. The runner hands its chunks
//! to [`Decoder::prefill`](crate::model::Decoder::prefill); the prefix cache matches prompts position by
//! position through their [`Slot`]s, which name a token by its id and a media row by its chunk's content
//! key and its place in the chunk, so a later turn that repeats an image finds its KV state.
//!
//! A kept state may end between two tokens, or before a media chunk, never inside one: a media chunk is
//! run whole (its rows may attend to each other, and they come from one encoder run).

use std::hash::{Hash, Hasher};

use burn::tensor::Tensor;

use crate::model::{Attend, Chunk};

/// What stands at one position of a prompt, for matching prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// A token id.
    Token(u32),
    /// Row `at` of a media chunk whose content key is `key` ([`Media::key_of`]).
    Media { key: u64, at: u32 },
}

impl Slot {
    /// Whether a kept state may end just before this position (not inside a media chunk).
    pub fn starts_a_cut(&self) -> bool {
        !matches!(self, Slot::Media { at, .. } if *at > 0)
    }
}

/// How many of the first `n` positions of `slots` a kept state may hold: `n`, or, when position `n` is
/// inside a media chunk, the positions before that chunk.
pub fn cut_at(slots: &[Slot], n: usize) -> usize {
    match slots.get(n) {
        Some(Slot::Media { at, .. }) => n - *at as usize,
        _ => n,
    }
}

/// A media item's rows in a prompt.
#[derive(Debug, Clone)]
pub struct Media {
    /// What the rows are of ([`Media::key_of`]): equal keys mean equal rows.
    pub key: u64,
    /// `[n, h]` on the decoder's device.
    pub rows: Tensor<2>,
    pub attend: Attend,
}

impl Media {
    /// The content key of media whose preprocessed values are `bytes` under preprocessing `settings` (the
    /// processor's sizes, resampling, normalisation): a 64-bit hash (std's SipHash, fixed keys), stable
    /// within a build, which is as long as a prefix cache lives.
    pub fn key_of(bytes: &[u8], settings: &str) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        settings.hash(&mut h);
        bytes.hash(&mut h);
        h.finish()
    }
}

/// One chunk of a [`Prompt`].
#[derive(Debug, Clone)]
pub enum PromptChunk {
    Ids(Vec<u32>),
    /// Boxed: a tensor handle is some 600 bytes.
    Media(Box<Media>),
}

impl PromptChunk {
    fn len(&self) -> usize {
        match self {
            PromptChunk::Ids(ids) => ids.len(),
            PromptChunk::Media(m) => m.rows.dims()[0],
        }
    }
}

/// A prompt: its chunks in order, none empty.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    chunks: Vec<PromptChunk>,
}

impl From<Vec<u32>> for Prompt {
    fn from(ids: Vec<u32>) -> Self {
        Self::new(vec![PromptChunk::Ids(ids)])
    }
}

impl Prompt {
    /// `chunks` in order (empty ones left out).
    pub fn new(chunks: Vec<PromptChunk>) -> Self {
        let chunks = chunks.into_iter().filter(|c| c.len() > 0).collect();
        Self { chunks }
    }

    /// The token ids of a rendered prompt with `media` placed where their placeholder tokens stand: each
    /// `(at, media)` takes the `n` positions `at .. at + n` (`n` its rows) in place of those ids. `None` when
    /// placements overlap, run past the ids or are out of order.
    pub fn placed(ids: Vec<u32>, media: Vec<(usize, Media)>) -> Option<Self> {
        let mut chunks = Vec::new();
        let mut next = 0;
        for (at, m) in media {
            let end = at.checked_add(m.rows.dims()[0])?;
            if at < next || end > ids.len() {
                return None;
            }
            chunks.push(PromptChunk::Ids(ids[next..at].to_vec()));
            chunks.push(PromptChunk::Media(Box::new(m)));
            next = end;
        }
        chunks.push(PromptChunk::Ids(ids[next..].to_vec()));
        Some(Self::new(chunks))
    }

    /// Positions the prompt takes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(PromptChunk::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The prompt's ids when it has no media (a text prompt).
    pub fn ids(&self) -> Option<Vec<u32>> {
        let mut ids = Vec::new();
        for c in &self.chunks {
            match c {
                PromptChunk::Ids(part) => ids.extend_from_slice(part),
                PromptChunk::Media(_) => return None,
            }
        }
        Some(ids)
    }

    /// What stands at each position.
    pub fn slots(&self) -> Vec<Slot> {
        let mut slots = Vec::with_capacity(self.len());
        for c in &self.chunks {
            match c {
                PromptChunk::Ids(ids) => slots.extend(ids.iter().map(|&id| Slot::Token(id))),
                PromptChunk::Media(m) => {
                    let n = m.rows.dims()[0] as u32;
                    slots.extend((0..n).map(|at| Slot::Media { key: m.key, at }));
                }
            }
        }
        slots
    }

    /// The chunks from position `start` on, as the decoder takes them: an ids chunk may be entered part
    /// way, a media chunk only at its start (`None` otherwise, or past the end).
    pub fn chunks_from(&self, start: usize) -> Option<Vec<Chunk<'_>>> {
        let mut at = 0;
        let mut out = Vec::new();
        for c in &self.chunks {
            let n = c.len();
            if at + n > start {
                let skip = start.saturating_sub(at);
                out.push(match c {
                    PromptChunk::Ids(ids) => Chunk::Ids(&ids[skip..]),
                    PromptChunk::Media(_) if skip > 0 => return None,
                    PromptChunk::Media(m) => Chunk::Rows {
                        rows: &m.rows,
                        attend: m.attend,
                    },
                });
            }
            at += n;
        }
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    fn media(key: u64, n: usize) -> PromptChunk {
        PromptChunk::Media(Box::new(Media {
            key,
            rows: Tensor::zeros([n, 4], &Device::flex()),
            attend: Attend::Bidirectional,
        }))
    }

    #[test]
    fn slots_and_cuts() {
        let p = Prompt::new(vec![
            PromptChunk::Ids(vec![5, 6]),
            media(9, 3),
            PromptChunk::Ids(vec![]),
            PromptChunk::Ids(vec![7]),
        ]);
        assert_eq!(p.len(), 6);
        assert_eq!(p.ids(), None);
        let slots = p.slots();
        assert_eq!(slots[0], Slot::Token(5));
        assert_eq!(slots[3], Slot::Media { key: 9, at: 1 });
        assert_eq!(slots[5], Slot::Token(7));
        assert_eq!(
            (0..=6).map(|n| cut_at(&slots, n)).collect::<Vec<_>>(),
            [0, 1, 2, 2, 2, 5, 6]
        );
        let lens = |n: usize| {
            p.chunks_from(n)
                .map(|c| c.iter().map(Chunk::len).collect::<Vec<_>>())
        };
        assert_eq!(lens(0), Some(vec![2, 3, 1]));
        assert_eq!(lens(1), Some(vec![1, 3, 1]));
        assert_eq!(lens(2), Some(vec![3, 1]));
        assert_eq!(lens(3), None, "inside the media chunk");
        assert_eq!(lens(5), Some(vec![1]));
        assert_eq!(lens(6), None, "past the end");
        assert_eq!(Prompt::from(vec![1, 2]).ids(), Some(vec![1, 2]));
    }

    #[test]
    fn media_placed_over_their_placeholders() {
        let one = |key| match media(key, 2) {
            PromptChunk::Media(m) => *m,
            PromptChunk::Ids(_) => unreachable!(),
        };
        let ids = vec![1, 0, 0, 2, 0, 0];
        let p = Prompt::placed(ids.clone(), vec![(1, one(3)), (4, one(4))]).expect("placed");
        let slots = p.slots();
        assert_eq!(slots.len(), 6);
        assert_eq!(
            slots[..3],
            [
                Slot::Token(1),
                Slot::Media { key: 3, at: 0 },
                Slot::Media { key: 3, at: 1 }
            ]
        );
        assert_eq!(
            slots[3..],
            [
                Slot::Token(2),
                Slot::Media { key: 4, at: 0 },
                Slot::Media { key: 4, at: 1 }
            ]
        );
        assert!(
            Prompt::placed(ids.clone(), vec![(1, one(3)), (2, one(4))]).is_none(),
            "overlap"
        );
        assert!(
            Prompt::placed(ids.clone(), vec![(5, one(3))]).is_none(),
            "past the ids"
        );
        assert!(
            Prompt::placed(ids, vec![(4, one(3)), (1, one(4))]).is_none(),
            "out of order"
        );
    }

    #[test]
    fn media_keys_name_the_content_and_the_settings() {
        let a = Media::key_of(&[1, 2, 3], "512 lanczos");
        assert_eq!(a, Media::key_of(&[1, 2, 3], "512 lanczos"));
        assert_ne!(a, Media::key_of(&[1, 2, 4], "512 lanczos"));
        assert_ne!(a, Media::key_of(&[1, 2, 3], "896 bilinear"));
    }
}
