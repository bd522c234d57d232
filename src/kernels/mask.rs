//! Which keys each query of an attention sees, written once for every attention path: the CPU kernel
//! reads it as index ranges (`cpu::attention`), the generic path as an additive `[s, t]` tensor
//! ([`Mask::additive`], built by `model::layers::attention::Positions`), and the fused wgpu decode step,
//! whose one query (never inside a span) sees the last `window` keys or all of them.
//!
//! A forward runs queries at positions `pos .. pos + s` over keys at positions `0 .. pos + s` (the cache
//! and the new positions). Query `q` sees key `j` when
//! - `j ≤ q` (causal), or `j` and `q` lie in the same bidirectional span: a chunk of the prompt whose
//!   rows attend to each other (Gemma 3's image tokens); and
//! - under a sliding window `w`, `q − j < w` (a window limits how far back a query looks, never a later
//!   key of its span).
//!
//! This is transformers' Gemma 3 mask (`create_masks_for_vision_model`: full layers OR(causal, block),
//! sliding layers AND(window, OR(causal, block))) and llama.cpp's (a non-causal image batch, its SWA
//! window still applied); `tests/model_golden.rs` checks it against transformers' logits.
//!
//! A span holds the query it applies to, so the keys a query sees are always one range of positions.
//! Spans are given in absolute positions, sorted and disjoint; one that began before `pos` must have
//! ended by then (its earlier queries, already run, could not have seen later keys), which
//! [`Mask::check`] says.

use std::ops::Range;

/// The keys of each query of one forward under one layer's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mask<'a> {
    /// The first query's position.
    pub pos: usize,
    /// Queries.
    pub s: usize,
    /// A sliding window (`None`: every earlier key).
    pub window: Option<usize>,
    /// Bidirectional spans, absolute positions, sorted and disjoint.
    pub spans: &'a [Range<usize>],
}

/// Spans that no forward can honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpanError {
    #[error("the bidirectional span {start}..{end} is empty or not after the span before it")]
    Order { start: usize, end: usize },
    #[error("the bidirectional span {start}..{end} reaches past the forward's last position {last}")]
    Past { start: usize, end: usize, last: usize },
    #[error("the bidirectional span {start}..{end} straddles the cached prefix of {pos} positions")]
    Straddles { start: usize, end: usize, pos: usize },
}

impl<'a> Mask<'a> {
    /// Causal (and windowed) only.
    pub fn causal(pos: usize, s: usize, window: Option<usize>) -> Self {
        Self {
            pos,
            s,
            window,
            spans: &[],
        }
    }

    /// Whether `spans` can be honoured by a forward of `s` queries from `pos`: sorted, disjoint, not
    /// empty, within the keys `0 .. pos + s`, none begun before `pos` and still open at it.
    pub fn check(pos: usize, s: usize, spans: &[Range<usize>]) -> Result<(), SpanError> {
        let mut after = 0;
        for r in spans {
            let (start, end) = (r.start, r.end);
            if start >= end || start < after {
                return Err(SpanError::Order { start, end });
            }
            if end > pos + s {
                return Err(SpanError::Past {
                    start,
                    end,
                    last: (pos + s).saturating_sub(1),
                });
            }
            if start < pos && end > pos {
                return Err(SpanError::Straddles { start, end, pos });
            }
            after = end;
        }
        Ok(())
    }

    /// Keys (cached + new positions): `pos + s`.
    pub fn t(&self) -> usize {
        self.pos + self.s
    }

    /// The keys query `r` (position `pos + r`) sees: one range of positions, never empty. A span only
    /// reaches forward (to its end); earlier keys of it are earlier positions, which the causal rule
    /// already gives, within the window.
    pub fn keys(&self, r: usize) -> Range<usize> {
        let q = self.pos + r;
        let start = self.window.map_or(0, |w| (q + 1).saturating_sub(w));
        // The spans are sorted: the last one starting at or before q is the only one that can hold it.
        let i = self.spans.partition_point(|sp| sp.start <= q);
        match i.checked_sub(1).map(|i| &self.spans[i]) {
            Some(sp) if q < sp.end => start..sp.end,
            _ => start..q + 1,
        }
    }

    /// The keys any of queries `rows` sees: from the smallest start to the largest end.
    pub fn keys_of(&self, rows: Range<usize>) -> Range<usize> {
        rows.map(|r| self.keys(r))
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
            .unwrap_or(0..0)
    }

    /// The mask as burn's generic path adds it to the scores: `[s, t]` row-major, 0 where a query sees a
    /// key and −∞ where it does not.
    pub fn additive(&self) -> Vec<f32> {
        let t = self.t();
        let mut m = vec![f32::NEG_INFINITY; self.s * t];
        for (r, row) in m.chunks_exact_mut(t.max(1)).enumerate().take(self.s) {
            row[self.keys(r)].fill(0.0);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of the module docs, key by key.
    fn sees(window: Option<usize>, spans: &[Range<usize>], q: usize, j: usize) -> bool {
        let span = spans.iter().any(|sp| sp.contains(&q) && sp.contains(&j));
        (j <= q || span) && window.is_none_or(|w| j > q || q - j < w)
    }

    #[test]
    fn ranges_are_the_rule() {
        let spans = [3..7, 9..10, 12..16];
        for window in [None, Some(1), Some(2), Some(5)] {
            for pos in [0, 3, 7, 8] {
                let s = 16 - pos;
                if Mask::check(pos, s, &spans).is_err() {
                    continue;
                }
                let m = Mask {
                    pos,
                    s,
                    window,
                    spans: &spans,
                };
                let dense = m.additive();
                for r in 0..s {
                    for j in 0..m.t() {
                        let want = sees(window, &spans, pos + r, j);
                        assert_eq!(
                            m.keys(r).contains(&j),
                            want,
                            "pos {pos} window {window:?} q {r} j {j}"
                        );
                        assert_eq!(dense[r * m.t() + j] == 0.0, want);
                    }
                }
            }
        }
    }

    #[test]
    fn causal_without_spans() {
        let m = Mask::causal(4, 3, Some(2));
        assert_eq!([m.keys(0), m.keys(1), m.keys(2)], [3..5, 4..6, 5..7]);
        assert_eq!(m.keys_of(0..3), 3..7);
        assert_eq!(Mask::causal(0, 2, None).keys(0), 0..1);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init, reason = "a list of one span")]
    fn spans_that_cannot_be_honoured() {
        assert_eq!(
            Mask::check(4, 4, &[2..6]),
            Err(SpanError::Straddles {
                start: 2,
                end: 6,
                pos: 4
            })
        );
        assert_eq!(
            Mask::check(0, 4, &[2..6]),
            Err(SpanError::Past {
                start: 2,
                end: 6,
                last: 3
            })
        );
        assert_eq!(
            Mask::check(0, 8, &[2..4, 3..6]),
            Err(SpanError::Order { start: 3, end: 6 })
        );
        assert_eq!(
            Mask::check(0, 8, &[2..2]),
            Err(SpanError::Order { start: 2, end: 2 })
        );
        assert_eq!(Mask::check(4, 4, &[0..4, 4..8]), Ok(()));
    }
}
