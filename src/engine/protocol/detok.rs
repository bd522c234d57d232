//! Incremental detokenisation and stop strings, per choice.
//!
//! [`Detokenizer`] turns a growing list of ids into text deltas that never split a UTF-8 character: it
//! decodes a short window of recent ids twice (with and without the newest ones) and emits the difference,
//! holding it back while it ends in U+FFFD (a character whose bytes have not all arrived). Decoding a window
//! rather than the whole list keeps each step O(window), and decoding with a prefix keeps tokenizers that
//! strip a leading space (SentencePiece) correct mid-sequence.
//!
//! [`StopMatcher`] finds the earliest of up to 4 stop strings in the text, across token boundaries, and
//! releases only text that cannot be the start of one: in streaming, a partial match is held back until it
//! either completes (the output ends before it) or fails (the text is released).

use crate::tokenizer::{ModelTokenizer, TokenizerError};

/// Text deltas from a growing list of ids.
#[derive(Debug, Clone, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    /// Special tokens are part of the text (otherwise skipped).
    keep_special: bool,
}

impl Detokenizer {
    /// `keep_special`: decode special tokens as their text instead of skipping them.
    pub fn new(keep_special: bool) -> Self {
        Self {
            keep_special,
            ..Self::default()
        }
    }

    /// Appends `id` and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &ModelTokenizer, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        let prefix = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            !self.keep_special,
        )?;
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], !self.keep_special)?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.is_char_boundary(prefix.len()) {
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(full[prefix.len()..].to_owned())
        } else {
            Ok(String::new())
        }
    }

    /// Whatever is still held back (an incomplete character at the end: emitted as decoded, U+FFFD).
    pub fn flush(&mut self, tokenizer: &ModelTokenizer) -> Result<String, TokenizerError> {
        let prefix = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            !self.keep_special,
        )?;
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], !self.keep_special)?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(match full.get(prefix.len()..) {
            Some(rest) if full.starts_with(&prefix) => rest.to_owned(),
            _ => String::new(),
        })
    }
}

/// Stop-string matching over a choice's text.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// The choice's text so far (released and held back).
    text: String,
    /// Bytes of `text` already released.
    released: usize,
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// Text that can be released now (possibly empty).
    Release(String),
    /// A stop string was found: the text up to it, and the choice ends.
    Stop(String),
}

impl StopMatcher {
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..Self::default()
        }
    }

    /// The text released so far.
    pub fn released(&self) -> &str {
        &self.text[..self.released]
    }

    /// Adds `delta` and says what may be released.
    pub fn push(&mut self, delta: &str) -> Matched {
        let search_from = self.released;
        self.text.push_str(delta);
        // The earliest stop string that starts at or after the released text.
        let found = self
            .stops
            .iter()
            .filter_map(|s| {
                self.text[search_from..]
                    .find(s.as_str())
                    .map(|at| search_from + at)
            })
            .min();
        if let Some(at) = found {
            let out = self.text[self.released..at].to_owned();
            self.text.truncate(at);
            self.released = at;
            return Matched::Stop(out);
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let held = self
            .stops
            .iter()
            .map(|s| {
                (1..s.len())
                    .rev()
                    .filter(|&k| s.is_char_boundary(k))
                    .find(|&k| self.text.len() - self.released >= k && self.text.ends_with(&s[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let end = self.text.len() - held;
        let out = self.text[self.released..end].to_owned();
        self.released = end;
        Matched::Release(out)
    }

    /// Releases everything held back (the choice ended for another reason).
    pub fn flush(&mut self) -> String {
        let out = self.text[self.released..].to_owned();
        self.released = self.text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_across_pieces_hold_back_and_cut() {
        let mut m = StopMatcher::new(&["END".into(), "\n\n".into()]);
        assert_eq!(m.push("Hello E"), Matched::Release("Hello ".into()));
        assert_eq!(
            m.push("x"),
            Matched::Release("Ex".into()),
            "a failed partial match is released"
        );
        assert_eq!(m.push(" and E"), Matched::Release(" and ".into()));
        assert_eq!(m.push("N"), Matched::Release(String::new()));
        assert_eq!(m.push("D and more"), Matched::Stop(String::new()));
        assert_eq!(m.released(), "Hello Ex and ");
        let mut m = StopMatcher::new(&["\n\n".into()]);
        assert_eq!(m.push("a\n"), Matched::Release("a".into()));
        assert_eq!(m.flush(), "\n");
        // The earliest of two matches wins; one inside a single piece is found too.
        let mut m = StopMatcher::new(&["cd".into(), "b".into()]);
        assert_eq!(m.push("abcd"), Matched::Stop("a".into()));
        let mut m = StopMatcher::new(&["é!".into()]);
        assert_eq!(m.push("café"), Matched::Release("caf".into()));
        assert_eq!(m.push("?"), Matched::Release("é?".into()));
    }
}
