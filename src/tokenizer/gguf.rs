//! A [`tokenizers::Tokenizer`] built from a GGUF file's `tokenizer.*` metadata that tokenizes as llama.cpp's
//! `llama_vocab` (`src/llama-vocab.cpp`), from the pieces Hugging Face's tokenizers uses for such models.
//!
//! `tokenizer.ggml.model` picks the model:
//! - `gpt2`: byte-level BPE over `tokenizer.ggml.tokens` and `tokenizer.ggml.merges` (rank = position; a
//!   merge splits at its first space after byte 0, as in llama.cpp; merges whose parts or result are not
//!   tokens are dropped, a repeated pair keeps its first rank). The pre-tokenizer is llama.cpp's regex list
//!   for `tokenizer.ggml.pre` (`llm_tokenizer_bpe`), each regex a `Split(Isolated)` of the pieces of the
//!   one before, then `ByteLevel` without its own regex; the decoder is `ByteLevel`. Pre types that llama.cpp
//!   marks `ignore_merges` (`llama-bpe`, `tekken`, ...) look a whole piece up before merging. A missing
//!   `pre` means `default`, as in llama.cpp; an unknown one is an error.
//! - `llama`: SentencePiece BPE. Merges come from `tokenizer.ggml.scores` as in Hugging Face's
//!   `SentencePieceExtractor` (each split of a token into two tokens, ranked by the whole token's score, best
//!   first), which reproduces llama.cpp's best-score-first bigram merging; a character without a token
//!   falls back to the `<0xNN>` byte tokens. The normalizer prepends `▁` to each text segment between added
//!   tokens (llama.cpp's space prefix for every fragment, when `tokenizer.ggml.add_space_prefix` is true, the
//!   default) and replaces spaces by `▁`; there is no pre-tokenizer, so a segment merges as one word. The
//!   decoder turns `▁` into a space and byte tokens into bytes, fuses, and strips the one leading space the
//!   prefix added (as Hugging Face's `LlamaTokenizerFast`).
//! - `gemma4`: Gemma 4's BPE over `tokenizer.ggml.merges` (split as for `gpt2`) on raw UTF-8, as
//!   llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GEMMA4`: spaces become `▁` (no prefix), the text is cut into lines
//!   and runs of line breaks (`[^\n]+|[\n]+`) that merge separately, and a character without a token
//!   falls back to the `<0xNN>` byte tokens. (llama.cpp looks a run of line breaks up whole before
//!   merging; for Gemma 4's vocabulary merging gives the same tokens.) The decoder is the SentencePiece one
//!   without the strip. BOS is always added, whatever `tokenizer.ggml.add_bos_token` says (llama.cpp
//!   overrides it), and `tokenizer.ggml.pre` is ignored.
//!
//! `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte): control
//! and unknown tokens become special added tokens, user-defined ones plain added tokens, all matched on the
//! raw text, so `encode` splits them out before the model sees the text: llama.cpp's `parse_special =
//! true`. After `Tokenizer::set_encode_special_tokens(true)` special tokens are read as text while
//! user-defined ones still split, which is llama.cpp's `parse_special = false`.
//!
//! `tokenizer.ggml.add_bos_token` / `add_eos_token` (when absent, as llama.cpp: BOS for `llama` and for the
//! `llama-bpe` and `tekken` pre types; always for `gemma4`) become a `TemplateProcessing` post-processor,
//! so `encode(text, true)` adds them.
//!
//! Deviations from llama.cpp: equal merge scores are ordered by token id, not by position; added tokens
//! match leftmost-longest, not longest-first; a `llama` merge whose halves are not both tokens is never
//! made; `decode` returns the exact text, without llama.cpp's `clean_spaces` or its per-model
//! `lstrip`/`rstrip` token attributes (phi-3).

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, MergeMap, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer,
};

use crate::loader::gguf::{Gguf, Value};

/// A tokenizer and the special tokens a GGUF file names.
pub struct GgufTokenizer {
    pub tokenizer: Tokenizer,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id` and other end-of-generation ids the file names.
    ///
    /// As llama.cpp's `special_eog_ids`: the EOS, EOT, EOM and FIM pad/repo/separator ids the keys give,
    /// EOT/EOM found by text when their keys are absent (`<|eot_id|>`, `<|im_end|>`, `<end_of_turn>`, ...),
    /// and every token whose text llama.cpp lists as ending generation. Sorted, without duplicates.
    pub eog_token_ids: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

/// A tokenizer could not be built from a GGUF file's metadata.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufTokenizerError {
    #[error("GGUF metadata key `{0}` is missing")]
    Missing(&'static str),
    #[error("GGUF metadata key `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error(
        "`tokenizer.ggml.model` is `{0}`; kiln builds tokenizers for `gpt2` (byte-level BPE), `llama` \
         (SentencePiece BPE) and `gemma4` (Gemma 4's BPE)"
    )]
    UnsupportedModel(String),
    #[error("`tokenizer.ggml.pre` is `{0}`, a pre-tokenizer kiln does not know")]
    UnsupportedPre(String),
    #[error("building the tokenizer from `{key}` failed: {reason}")]
    Build { key: &'static str, reason: String },
}

type Error = GgufTokenizerError;

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const SCORES: &str = "tokenizer.ggml.scores";
const MERGES: &str = "tokenizer.ggml.merges";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
const UNK: &str = "tokenizer.ggml.unknown_token_id";

// `llama_token_type` values.
const UNKNOWN: i64 = 2;
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

mod pre;

use pre::{GEMMA4, PreType, pre, pre_type};

/// The tokenizer models kiln builds (`tokenizer.ggml.model`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `llama`: SentencePiece BPE from scores.
    Spm,
    /// `gpt2`: byte-level BPE from merges.
    Gpt2,
    /// `gemma4`: BPE from merges on raw UTF-8 with `▁` for spaces and `<0xNN>` byte fallback.
    Gemma4,
}

/// Builds the tokenizer `g`'s metadata describes.
pub fn tokenizer_from_gguf(g: &Gguf<'_>) -> Result<GgufTokenizer, GgufTokenizerError> {
    let model = string(g, MODEL)?.ok_or(Error::Missing(MODEL))?;
    let kind = match model {
        "llama" => Kind::Spm,
        "gpt2" => Kind::Gpt2,
        "gemma4" => Kind::Gemma4,
        other => return Err(Error::UnsupportedModel(other.into())),
    };
    let spm = kind == Kind::Spm;
    let tokens = g
        .strings(TOKENS)
        .map_err(|_| invalid(TOKENS, "is not an array of strings"))?
        .ok_or(Error::Missing(TOKENS))?;
    let n = tokens.len();
    if n == 0 || u32::try_from(n).is_err() {
        return Err(invalid(TOKENS, format!("holds {n} tokens")));
    }
    // llama.cpp names an empty token `[EMPTY_<id>]`; the text of token `id` is `texts[id]`.
    let texts: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_string()
            }
        })
        .collect();
    let mut vocab = Vocab::default();
    vocab.reserve(n);
    for (i, t) in texts.iter().enumerate() {
        if vocab.insert(t.clone(), i as u32).is_some() {
            return Err(invalid(TOKENS, format!("holds `{t}` twice")));
        }
    }
    let types = match g.get(TOKEN_TYPE) {
        None => vec![1; n],
        Some(v) => numbers(v, TOKEN_TYPE, n)?.into_iter().map(|t| t as i64).collect(),
    };

    // Special ids: llama.cpp's defaults (1/2/0 for `llama`), then the keys; out-of-range ids are ignored.
    let in_range = |i: &u32| (*i as usize) < n;
    let id = |key: &'static str, default: Option<u32>| -> Result<Option<u32>, Error> {
        let default = default.filter(in_range);
        match g.get(key) {
            None => Ok(default),
            Some(v) => match v.as_u64().and_then(|i| u32::try_from(i).ok()) {
                Some(i) => Ok(Some(i).filter(in_range).or(default)),
                None => Err(invalid(key, format!("{v:?} is not a token id"))),
            },
        }
    };
    let bos = id(BOS, spm.then_some(1))?;
    let eos = id(EOS, spm.then_some(2))?;
    let unk = id(UNK, spm.then_some(0))?;

    // `tokenizer.ggml.pre` is ignored for `llama` (SentencePiece adds BOS by default) and `gemma4`, whose
    // BOS llama.cpp always adds, whatever `add_bos_token` says.
    let pre_type = match kind {
        Kind::Spm => &pre(&[], false, true),
        Kind::Gemma4 => &pre(&[GEMMA4], false, true),
        Kind::Gpt2 => {
            let name = string(g, PRE)?.unwrap_or("default");
            pre_type(name).ok_or_else(|| Error::UnsupportedPre(name.into()))?
        }
    };
    let add_bos =
        kind == Kind::Gemma4 || boolean(g, "tokenizer.ggml.add_bos_token")?.unwrap_or(pre_type.add_bos);
    let add_eos = boolean(g, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);

    let eog_token_ids = eog_ids(g, &vocab, n, eos)?;
    let unk = unk.map(|u| texts[u as usize].clone());
    let mut tokenizer = match kind {
        Kind::Spm => {
            let scores = match g.get(SCORES) {
                None => vec![0.0; n],
                Some(v) => numbers(v, SCORES, n)?,
            };
            let merges = spm_merges(&texts, &vocab, &scores);
            let prefix = boolean(g, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
            sentencepiece(vocab, merges, unk, prefix, SCORES, &[])?
        }
        Kind::Gemma4 => {
            let merges = string_array(g, MERGES)?.ok_or(Error::Missing(MERGES))?;
            let merges = gpt2_merges(&merges, &vocab);
            sentencepiece(vocab, merges, unk, false, MERGES, pre_type.regexes)?
        }
        Kind::Gpt2 => byte_level(g, vocab, pre_type)?,
    };

    // Added tokens, matched on the raw text like llama.cpp's `tokenizer_st_partition`.
    let added = |special: bool| -> Vec<AddedToken> {
        let wanted = |t: i64| {
            if special {
                t == CONTROL || t == UNKNOWN
            } else {
                t == USER_DEFINED
            }
        };
        (0..n)
            .filter(|&i| wanted(types[i]))
            .map(|i| AddedToken::from(texts[i].clone(), special).normalized(false))
            .collect()
    };
    tokenizer.add_special_tokens(&added(true));
    tokenizer.add_tokens(&added(false));

    if add_bos || add_eos {
        // Template pieces name their token by a key (`bos`, `eos`), not by its text.
        let mut specials = Vec::new();
        for (add, tok, key, name) in [(add_bos, bos, BOS, "bos"), (add_eos, eos, EOS, "eos")] {
            if add {
                specials.push(SpecialToken::from((name, tok.ok_or(Error::Missing(key))?)));
            }
        }
        let sequence = |seq: &str, type_id: u32| -> Vec<String> {
            let bos = add_bos.then(|| format!("bos:{type_id}"));
            let eos = add_eos.then(|| format!("eos:{type_id}"));
            bos.into_iter()
                .chain([format!("{seq}:{type_id}")])
                .chain(eos)
                .collect()
        };
        let single = sequence("$A", 0);
        let pair = [single.clone(), sequence("$B", 1)].concat();
        let processor = TemplateProcessing::builder()
            .try_single(single)
            .and_then(|p| p.try_pair(pair))
            .map_err(|e| build(BOS, e))?
            .special_tokens(specials)
            .build()
            .map_err(|e| build(BOS, e))?;
        tokenizer.with_post_processor(Some(processor));
    }

    let text = |i: Option<u32>| i.map(|i| texts[i as usize].clone());
    Ok(GgufTokenizer {
        eog_token_ids,
        bos_token: text(bos),
        eos_token: text(eos),
        tokenizer,
        bos_token_id: bos,
        eos_token_id: eos,
        add_bos,
        add_eos,
        chat_template: string(g, "tokenizer.chat_template")?.map(str::to_string),
    })
}

/// A BPE over SentencePiece-style pieces (`▁` for a space, `<0xNN>` byte fallback), as Hugging Face builds
/// Llama's and Gemma's tokenizers: spaces become `▁` (after a `▁` prefix per text segment when `prefix`);
/// each of `regexes` splits the pieces of the one before (none: a segment merges as one word). The decoder
/// undoes it all, stripping the one leading space the prefix added.
fn sentencepiece(
    vocab: Vocab,
    merges: Vec<(String, String)>,
    unk: Option<String>,
    prefix: bool,
    key: &'static str,
    regexes: &[&str],
) -> Result<Tokenizer, Error> {
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(u) = unk {
        builder = builder.unk_token(u);
    }
    let mut t = Tokenizer::new(builder.build().map_err(|e| build(key, e))?);
    let replace = |from: &str, to: &str| Replace::new(from, to).map_err(|e| build(MODEL, e));
    let mut normalizers = vec![NormalizerWrapper::Replace(replace(" ", "▁")?)];
    let mut decoders = vec![
        DecoderWrapper::Replace(replace("▁", " ")?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if prefix {
        normalizers.insert(0, NormalizerWrapper::Prepend(Prepend::new("▁".into())));
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    t.with_normalizer(Some(NormalizerSequence::new(normalizers)));
    if !regexes.is_empty() {
        t.with_pre_tokenizer(Some(PreSequence::new(splits(regexes)?)));
    }
    t.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(t)
}

/// Byte-level BPE (`gpt2`): `pre`'s regexes, then `ByteLevel` without its own regex, over `g`'s merges.
fn byte_level(g: &Gguf<'_>, vocab: Vocab, pre: &PreType) -> Result<Tokenizer, Error> {
    let merges = string_array(g, MERGES)?.ok_or(Error::Missing(MERGES))?;
    let merges = gpt2_merges(&merges, &vocab);
    let builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges);
    let mut t = Tokenizer::new(builder.build().map_err(|e| build(MERGES, e))?);
    let mut pres = splits(pre.regexes)?;
    pres.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, false, false,
    )));
    t.with_pre_tokenizer(Some(PreSequence::new(pres)));
    t.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    Ok(t)
}

/// One `Split(Isolated)` pre-tokenizer per regex.
fn splits(regexes: &[&str]) -> Result<Vec<PreTokenizerWrapper>, Error> {
    regexes
        .iter()
        .map(|r| {
            let split = Split::new(
                SplitPattern::Regex(r.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            );
            Ok(PreTokenizerWrapper::Split(split.map_err(|e| build(PRE, e))?))
        })
        .collect()
}

/// `gpt2` merges `"a b"` as pairs, split at the first space after byte 0 (llama.cpp's rule), keeping those
/// whose parts and result are tokens, each pair once at its first rank.
fn gpt2_merges(merges: &[&str], ids: &Vocab) -> Vec<(String, String)> {
    let mut seen = MergeMap::default(); // used as a set of pairs
    let mut out = Vec::with_capacity(merges.len());
    let mut joined = String::new();
    for m in merges {
        // A space is one byte and never inside a character, so the split is on a character boundary.
        let Some(pos) = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
            continue;
        };
        let (a, b) = (&m[..pos], &m[pos + 1..]);
        joined.clear();
        joined.push_str(a);
        joined.push_str(b);
        let (Some(&x), Some(&y)) = (ids.get(a), ids.get(b)) else {
            continue;
        };
        if ids.contains_key(joined.as_str()) && seen.insert((x, y), (0, 0)).is_none() {
            out.push((a.to_string(), b.to_string()));
        }
    }
    out
}

/// SentencePiece merges from scores, as Hugging Face's `SentencePieceExtractor`: for every token, each split
/// into two tokens, ordered by (left id, right id); then all of them by the whole token's score, best first
/// (stable). O(total token length) hash look-ups.
fn spm_merges(texts: &[String], ids: &Vocab, scores: &[f64]) -> Vec<(String, String)> {
    let mut merges: Vec<(u32, u32, usize)> = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let start = merges.len();
        for (p, _) in t.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (ids.get(&t[..p]), ids.get(&t[p..])) {
                merges.push((l, r, i));
            }
        }
        merges[start..].sort_unstable_by_key(|&(l, r, _)| (l, r));
    }
    merges.sort_by(|a, b| scores[b.2].total_cmp(&scores[a.2]));
    merges
        .into_iter()
        .map(|(l, r, _)| (texts[l as usize].clone(), texts[r as usize].clone()))
        .collect()
}

/// Token texts llama.cpp treats as ending generation wherever they occur.
#[rustfmt::skip]
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
];
/// Texts llama.cpp takes as the EOT token when `tokenizer.ggml.eot_token_id` is absent.
#[rustfmt::skip]
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>", "<end_of_utterance>",
];

/// llama.cpp's `special_eog_ids` (without its o200k special case): where `<|tool_response>` (Gemma 4) or
/// `<|plamo:eos|>` ends generation, a `</s>` is a normal token, not an end.
fn eog_ids(g: &Gguf<'_>, ids: &Vocab, n: usize, eos: Option<u32>) -> Result<Vec<u32>, Error> {
    let key = |key: &'static str| -> Result<Option<u32>, Error> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(i) => Ok(Some(i).filter(|&i| i < n as u64).map(|i| i as u32)),
                None => Err(invalid(key, format!("{v:?} is not a token id"))),
            },
        }
    };
    // llama.cpp scans an unordered map, so which text it finds first is unspecified; the lowest id wins here.
    let by_text = |list: &[&str]| list.iter().filter_map(|t| ids.get(*t).copied()).min();
    let out = vec![
        eos,
        key("tokenizer.ggml.eot_token_id")?.or_else(|| by_text(EOT_TEXTS)),
        key("tokenizer.ggml.eom_token_id")?.or_else(|| by_text(&["<|eom_id|>"])),
        key("tokenizer.ggml.fim_pad_token_id")?,
        key("tokenizer.ggml.fim_rep_token_id")?,
        key("tokenizer.ggml.fim_sep_token_id")?,
    ];
    let mut out: Vec<u32> = out.into_iter().flatten().collect();
    out.extend(EOG_TEXTS.iter().filter_map(|t| ids.get(*t).copied()));
    if ["<|tool_response>", "<|plamo:eos|>"]
        .iter()
        .any(|t| ids.contains_key(*t))
        && let Some(s) = ids.get("</s>")
    {
        out.retain(|id| id != s);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn invalid(key: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        key,
        reason: reason.into(),
    }
}

fn build(key: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Build {
        key,
        reason: e.to_string(),
    }
}

fn string<'g>(g: &'g Gguf<'_>, key: &'static str) -> Result<Option<&'g str>, Error> {
    g.get(key)
        .map(|v| {
            v.as_str()
                .ok_or_else(|| invalid(key, format!("{v:?} is not a string")))
        })
        .transpose()
}

fn boolean(g: &Gguf<'_>, key: &'static str) -> Result<Option<bool>, Error> {
    g.get(key)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| invalid(key, format!("{v:?} is not a bool")))
        })
        .transpose()
}

fn string_array<'g>(g: &'g Gguf<'_>, key: &'static str) -> Result<Option<Vec<&'g str>>, Error> {
    g.strings(key)
        .map_err(|_| invalid(key, "is not an array of strings"))
}

/// The first `n` numbers of array `v` (llama.cpp reads `n`, the token count, and requires at least that).
fn numbers(v: &Value, key: &'static str, n: usize) -> Result<Vec<f64>, Error> {
    let items = v.as_array().ok_or_else(|| invalid(key, "is not an array"))?;
    if items.len() < n {
        return Err(invalid(
            key,
            format!("has {} entries for {n} tokens", items.len()),
        ));
    }
    (0..n)
        .map(|i| {
            items
                .f64_at(i)
                .ok_or_else(|| invalid(key, "does not hold numbers"))
        })
        .collect()
}
