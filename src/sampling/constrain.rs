//! Token-level constrained decoding for structured outputs, backed by
//! [`llguidance`](https://github.com/guidance-ai/llguidance).
//!
//! This is what enforces OpenAI `response_format: {"type": "json_object"}`,
//! `{"type": "json_schema", "json_schema": {..}}` and tool-call arguments that must
//! match a function's `parameters` schema. No grammar engine is written here: the
//! JSON-schema-to-grammar compiler, the Earley parser and the token-trie walk that
//! turns a grammar state into a vocabulary mask all come from llguidance.
//!
//! Two types:
//!
//! * [`Vocab`] is built once per model from each token's raw bytes (byte-level BPE
//!   already decoded to bytes, SentencePiece `▁` already mapped to a space,
//!   byte-fallback `<0xAB>` tokens already turned into the single byte). Tokens marked
//!   special (`<|im_end|>`, `<|im_start|>`, ...) can never be produced inside the
//!   JSON; only the EOS token is allowed, and only once the JSON is complete.
//! * [`Constraint`] is built per request from a [`Vocab`] and the requested format.
//!   Each decoding step calls [`Constraint::mask`] on the logits (disallowed tokens
//!   become `-inf`), samples, then [`Constraint::commit`]s the sampled token. Once
//!   [`Constraint::is_done`] is true the JSON value is complete and the mask only
//!   lets EOS through.
//!
//! Schema features llguidance does not implement (`not`, `uniqueItems`,
//! `if`/`then`/`else`, `dependentRequired`, unknown `format`s, lookaround in
//! `pattern`, remote `$ref`, ...) are refused at [`Constraint::json_schema`] with
//! [`ConstraintError::Unsupported`], naming the keyword, unless
//! [`JsonOptions::lenient`] is set, in which case they are ignored (the output then
//! may not satisfy them).
//!
//! A schema may carry llguidance's own top-level `"x-guidance"` options object; it is
//! replaced by the options built from [`JsonOptions`], so a client can not switch on
//! leniency or change separators behind the server's back.

use std::sync::Arc;

use llguidance::api::{ParserLimits, StopReason, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};

/// Why a vocabulary, a schema or a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    /// The token table handed to [`Vocab::new`] can not be used.
    #[error("invalid vocabulary: {0}")]
    Vocab(String),
    /// The schema uses a JSON-schema feature llguidance does not implement.
    /// `feature` is the keyword (or `format: NAME`, `pattern`, `$ref`, ...).
    #[error("unsupported JSON schema feature `{feature}`: {message}")]
    Unsupported { feature: String, message: String },
    /// The schema is malformed, unsatisfiable, or too large for the parser limits.
    #[error("invalid JSON schema: {0}")]
    Schema(String),
    /// The grammar state failed (a committed token was not allowed, the parser
    /// ran out of its per-step budget, ...).
    #[error("constraint failed: {0}")]
    Parser(String),
}

type Result<T, E = ConstraintError> = std::result::Result<T, E>;

/// Byte that llguidance reserves to start a special token in the trie; bytes of
/// special tokens are stored behind it so no text grammar can ever match them.
const SPECIAL: u8 = TokTrie::SPECIAL_TOKEN_MARKER;
/// toktrie packs token ids in 24 bits, with `0xffffff` meaning "no token".
const MAX_VOCAB: usize = 0x00ff_ffff;
/// toktrie keeps 10 bits of trie depth per node; keep well inside it.
const MAX_TOKEN_BYTES: usize = 1000;
/// llguidance compiles schemas recursively; a 1 MiB stack (wasm32's default) overflows
/// somewhere between 200 and 300 nested array schemas in release builds, and an overflow
/// aborts (the process, or the wasm instance). Real request schemas nest far less.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// A model's vocabulary in the form llguidance needs. Build it once per model and
/// share it (it is cheap to clone: an `Arc`).
#[derive(Clone)]
pub struct Vocab {
    factory: Arc<ParserFactory>,
    eos: u32,
    len: usize,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("len", &self.len)
            .field("eos", &self.eos)
            .finish()
    }
}

impl Vocab {
    /// `tokens[id]` is the raw bytes token `id` decodes to; `special[id]` marks control
    /// tokens (chat markers, EOS, padding) that must never appear inside constrained
    /// output. A token with no bytes is never allowed. `eos` ends generation once the
    /// JSON is complete; it need not be marked special, it is treated as such anyway.
    pub fn new(tokens: Vec<Vec<u8>>, special: &[bool], eos: u32) -> Result<Self> {
        let len = tokens.len();
        if len == 0 || len > MAX_VOCAB {
            return Err(ConstraintError::Vocab(format!(
                "{len} tokens (must be 1..={MAX_VOCAB})"
            )));
        }
        if special.len() != len {
            return Err(ConstraintError::Vocab(format!(
                "{} special flags for {len} tokens",
                special.len()
            )));
        }
        if eos as usize >= len {
            return Err(ConstraintError::Vocab(format!(
                "eos token {eos} is outside the {len} tokens"
            )));
        }
        let mut words = tokens;
        for (id, word) in words.iter_mut().enumerate() {
            if word.len() > MAX_TOKEN_BYTES {
                return Err(ConstraintError::Vocab(format!(
                    "token {id} is {} bytes long (at most {MAX_TOKEN_BYTES})",
                    word.len()
                )));
            }
            if special[id] || id == eos as usize {
                // Special tokens live behind the marker byte; give a nameless one a name
                // so it still gets its own trie leaf.
                let mut marked = Vec::with_capacity(word.len() + 1);
                marked.push(SPECIAL);
                if word.is_empty() {
                    marked.extend_from_slice(format!("<special_{id}>").as_bytes());
                } else {
                    marked.extend_from_slice(word);
                }
                *word = marked;
            }
        }
        // `len <= MAX_VOCAB` was checked above, so this does not truncate.
        let info = TokRxInfo::new(len as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocab(format!("{e:#}")))?;
        // No logging to stderr, and errors without a dump of the grammar and parser state.
        factory.quiet();
        *factory.limits_mut() = ParserLimits {
            verbose_errors: false,
            ..ParserLimits::default()
        };
        Ok(Self {
            factory: Arc::new(factory),
            eos,
            len,
        })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a vocabulary has at least one token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> u32 {
        self.eos
    }
}

/// How JSON is laid out and how strictly the schema is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonOptions {
    /// Ignore unsupported keywords and formats instead of refusing the schema, and treat
    /// `oneOf` as `anyOf`. Output then satisfies only the supported part of the schema.
    pub lenient: bool,
    /// Most JSON whitespace allowed at any one place between tokens (`None`: unbounded).
    /// A small bound stops a small model from looping on newlines while still
    /// allowing pretty-printed output; `Some(0)` forces compact JSON.
    pub max_whitespace: Option<u32>,
}

impl Default for JsonOptions {
    fn default() -> Self {
        Self {
            lenient: false,
            max_whitespace: Some(4),
        }
    }
}

impl JsonOptions {
    fn x_guidance(&self) -> Value {
        let mut o = json!({ "lenient": self.lenient, "coerce_one_of": self.lenient });
        match self.max_whitespace {
            None => o["whitespace_flexible"] = json!(true),
            Some(0) => o["whitespace_flexible"] = json!(false),
            Some(n) => o["whitespace_pattern"] = json!(format!("[\\x20\\x0A\\x0D\\x09]{{0,{n}}}")),
        }
        o
    }
}

/// The grammar state of one constrained generation.
pub struct Constraint {
    matcher: Matcher,
    eos: u32,
    len: usize,
    ended: bool,
}

impl Constraint {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    pub fn json_object(vocab: &Vocab) -> Result<Self> {
        Self::json_schema_with(vocab, &json!({ "type": "object" }), &JsonOptions::default())
    }

    /// JSON satisfying `schema`, with the default [`JsonOptions`] (strict: unsupported
    /// features are refused with [`ConstraintError::Unsupported`]).
    pub fn json_schema(vocab: &Vocab, schema: &Value) -> Result<Self> {
        Self::json_schema_with(vocab, schema, &JsonOptions::default())
    }

    /// JSON satisfying `schema`, laid out and checked as `options` says.
    pub fn json_schema_with(vocab: &Vocab, schema: &Value, options: &JsonOptions) -> Result<Self> {
        if depth(schema) > MAX_SCHEMA_DEPTH {
            return Err(ConstraintError::Schema(format!(
                "schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        let schema = match schema {
            Value::Object(map) => {
                let mut map = map.clone();
                map.insert("x-guidance".to_owned(), options.x_guidance());
                Value::Object(map)
            }
            Value::Bool(_) => schema.clone(),
            other => {
                return Err(ConstraintError::Schema(format!(
                    "a schema must be an object or a boolean, not {}",
                    kind(other)
                )));
            }
        };
        Self::compile(vocab, TopLevelGrammar::from_json_schema(schema))
    }

    /// The parser of `grammar` over `vocab`'s tokens.
    fn compile(vocab: &Vocab, grammar: TopLevelGrammar) -> Result<Self> {
        let parser = vocab
            .factory
            .create_parser(grammar)
            .map_err(|e| schema_error(format!("{e:#}")))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(schema_error(e));
        }
        Ok(Self {
            matcher,
            eos: vocab.eos,
            len: vocab.len,
            ended: false,
        })
    }

    /// A constraint from a grammar in llguidance's Lark syntax (tool calls: the family's call syntax with
    /// `%json { … }` arguments; special tokens referenced by id as `<[id]>`).
    pub fn lark(vocab: &Vocab, grammar: &str) -> Result<Self> {
        Self::compile(vocab, TopLevelGrammar::from_lark(grammar.to_owned()))
    }

    /// The set of tokens allowed next (bit `id` set: token `id` allowed). Once the value
    /// is complete it holds only EOS.
    pub fn allowed(&mut self) -> Result<SimpleVob> {
        if self.ended {
            return Err(ConstraintError::Parser(
                "generation already ended with EOS".into(),
            ));
        }
        self.matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Parser(format!("{e:#}")))
    }

    /// Set every logit of a token the constraint does not allow next to `-inf`. Logits
    /// past the end of the vocabulary (padded embedding rows) are always disallowed.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self.allowed()?;
        apply_mask(&allowed, logits);
        Ok(())
    }

    /// Advance past the token that was sampled. Fails if the token was not allowed.
    pub fn commit(&mut self, token: u32) -> Result<()> {
        if self.ended {
            return Err(ConstraintError::Parser(
                "generation already ended with EOS".into(),
            ));
        }
        if token as usize >= self.len {
            return Err(ConstraintError::Parser(format!(
                "token {token} is outside the vocabulary"
            )));
        }
        if self.matcher.is_stopped() {
            if token == self.eos && !self.matcher.is_error() {
                self.ended = true;
                return Ok(());
            }
            return Err(ConstraintError::Parser(match self.matcher.get_error() {
                Some(e) => e,
                None => format!("token {token} after the end of the value (only EOS is allowed)"),
            }));
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| ConstraintError::Parser(format!("{e:#}")))?;
        if token == self.eos {
            self.ended = true;
        }
        Ok(())
    }

    /// True once the JSON value is complete: nothing but EOS may follow (or EOS was
    /// already committed).
    pub fn is_done(&self) -> bool {
        self.ended
            || (self.matcher.is_stopped()
                && matches!(
                    self.matcher.stop_reason(),
                    StopReason::NoExtension | StopReason::NoExtensionBias | StopReason::EndOfSentence
                ))
    }

    /// True if the value so far could end here (EOS is allowed now), even though more
    /// could follow (e.g. a top-level number).
    pub fn can_end(&mut self) -> bool {
        self.is_done() || self.matcher.is_accepting().unwrap_or(false)
    }
}

fn apply_mask(allowed: &SimpleVob, logits: &mut [f32]) {
    let n = allowed.len().min(logits.len());
    let (inside, outside) = logits.split_at_mut(n);
    for (chunk, &word) in inside.chunks_mut(32).zip(allowed.as_slice()) {
        match word {
            u32::MAX => {}
            0 => chunk.fill(f32::NEG_INFINITY),
            _ => {
                for (bit, logit) in chunk.iter_mut().enumerate() {
                    if word & (1 << bit) == 0 {
                        *logit = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
    outside.fill(f32::NEG_INFINITY);
}

/// Nesting depth of a JSON value, without recursion.
fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Sort llguidance's compile errors into "feature not implemented" (naming it) and
/// everything else. The message texts matched here are llguidance's own.
fn schema_error(message: String) -> ConstraintError {
    let first = message.lines().next().unwrap_or_default();
    let feature = if let Some(rest) = after(first, "Unimplemented keys: ") {
        // `Unimplemented keys: ["not", "uniqueItems"]`
        Some(rest.trim_matches(|c| c == '[' || c == ']').replace('"', ""))
    } else if let Some(rest) = after(first, "Unknown format: ") {
        Some(format!("format: {}", rest.trim()))
    } else if first.contains("oneOf constraints are not supported") {
        Some("oneOf".to_owned())
    } else if first.contains("min/maxProperties only supported") {
        Some("minProperties/maxProperties".to_owned())
    } else if first.contains("$ref") && (first.contains("supported") || first.contains("circular")) {
        Some("$ref".to_owned())
    } else if message.contains("look-around") {
        Some("pattern (look-around)".to_owned())
    } else {
        None
    };
    match feature {
        Some(feature) => ConstraintError::Unsupported { feature, message },
        None => ConstraintError::Schema(message),
    }
}

fn after<'a>(haystack: &'a str, needle: &str) -> Option<&'a str> {
    haystack.find(needle).map(|i| &haystack[i + needle.len()..])
}

#[cfg(test)]
mod tests;
