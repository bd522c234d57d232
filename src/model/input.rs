//! What a prefill runs: a prompt as chunks, each a run of consecutive positions. A chunk is token ids
//! (embedded from the model's table, scaled as the family scales them) or embedding rows that stand where
//! a media item's placeholder tokens stand (an image's features after the projector, in the LM's hidden
//! size, taken as they are: Gemma 3 does not scale them by √h). Each chunk has its attention rule: causal,
//! or bidirectional among its own rows (Gemma 3's image tokens), which the decoder turns into the spans
//! of [`crate::kernels::mask`].

use std::ops::Range;

use burn::tensor::Tensor;

/// How a chunk's rows attend to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Attend {
    /// Each row sees the rows before it (and itself), as text does.
    #[default]
    Causal,
    /// Every row of the chunk sees every other row of it, besides what causality gives (within a
    /// layer's sliding window, which limits how far back a row looks: `kernels::mask`).
    Bidirectional,
}

/// One chunk of a prompt.
#[derive(Debug, Clone, Copy)]
pub enum Chunk<'a> {
    /// Token ids, one position each.
    Ids(&'a [u32]),
    /// Embedding rows `[n, h]` on the decoder's device, one position each.
    Rows { rows: &'a Tensor<2>, attend: Attend },
}

impl Chunk<'_> {
    /// Positions the chunk takes.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Ids(ids) => ids.len(),
            Chunk::Rows { rows, .. } => rows.dims()[0],
        }
    }

    /// Whether it takes no position.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The bidirectional spans of `chunks` run from position `pos`: absolute positions, in order.
pub fn spans(chunks: &[Chunk<'_>], pos: usize) -> Vec<Range<usize>> {
    let mut at = pos;
    let mut spans = Vec::new();
    for c in chunks {
        let n = c.len();
        if let Chunk::Rows {
            attend: Attend::Bidirectional,
            ..
        } = c
            && n > 0
        {
            spans.push(at..at + n);
        }
        at += n;
    }
    spans
}

/// The ids of `chunks` when every chunk is ids (a text prompt), in one row.
pub fn all_ids(chunks: &[Chunk<'_>]) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    for c in chunks {
        match c {
            Chunk::Ids(part) => ids.extend_from_slice(part),
            Chunk::Rows { .. } => return None,
        }
    }
    Some(ids)
}

/// `chunks` split after their first `n` positions, when that falls between chunks or inside a chunk of
/// ids (a chunk of embedding rows is never split: its rows may attend to each other); `None` otherwise or
/// when either part would be empty.
pub fn split<'a>(chunks: &[Chunk<'a>], n: usize) -> Option<(Vec<Chunk<'a>>, Vec<Chunk<'a>>)> {
    let total: usize = chunks.iter().map(Chunk::len).sum();
    if n == 0 || n >= total {
        return None;
    }
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    let mut at = 0;
    for c in chunks {
        let len = c.len();
        if at + len <= n {
            first.push(*c);
        } else if at >= n {
            rest.push(*c);
        } else {
            let Chunk::Ids(ids) = c else {
                return None;
            };
            let (a, b) = ids.split_at(n - at);
            first.push(Chunk::Ids(a));
            rest.push(Chunk::Ids(b));
        }
        at += len;
    }
    Some((first, rest))
}
