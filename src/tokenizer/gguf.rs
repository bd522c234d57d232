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
//!
//! `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte): control
//! and unknown tokens become special added tokens, user-defined ones plain added tokens, all matched on the
//! raw text, so `encode` splits them out before the model sees the text: llama.cpp's `parse_special =
//! true`. After `Tokenizer::set_encode_special_tokens(true)` special tokens are read as text while
//! user-defined ones still split, which is llama.cpp's `parse_special = false`.
//!
//! `tokenizer.ggml.add_bos_token` / `add_eos_token` (when absent, as llama.cpp: BOS for `llama` and for the
//! `llama-bpe` and `tekken` pre types) become a `TemplateProcessing` post-processor, so `encode(text, true)`
//! adds them.
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
        "`tokenizer.ggml.model` is `{0}`; kiln builds tokenizers for `gpt2` (byte-level BPE) and `llama` \
         (SentencePiece BPE)"
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

// llama.cpp's pre-tokenizer regexes (`llm_tokenizer_bpe`), each splitting the pieces of the one before.
// Non-ASCII characters are written as `\x{..}`: a source file in NFC would change some of them.
macro_rules! contractions {
    () => {
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    };
}
macro_rules! words {
    () => {
        r"|[^\r\n\p{L}\p{N}]?\p{L}+|"
    };
}
macro_rules! tail {
    () => {
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    };
}
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = concat!(contractions!(), words!(), r"\p{N}{1,3}|", tail!());
const QWEN2: &str = concat!(contractions!(), words!(), r"\p{N}|", tail!());
const QWEN35: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
// Mistral's tekken and GPT-4o's regexes as their `tokenizer.json` has them (llama.cpp rewrites them for
// `std::regex`, which lacks these classes).
macro_rules! cased {
    () => {
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    };
}
macro_rules! upper {
    () => {
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    };
}
const TEKKEN: &str = concat!(
    cased!(),
    "|",
    upper!(),
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const GPT4O: &str = concat!(
    cased!(),
    contractions!(),
    "?|",
    upper!(),
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const CJK: &str = r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+";
const DEEPSEEK_LATIN: &str = concat!(
    r"\s?[",
    r"A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}",
    r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}",
    r"\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}",
    r"\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}",
    r"\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}",
    r"\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-",
    r"\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}",
    r"\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}",
    r"\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}",
    r"\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}",
    r"\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}",
    r"\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}",
    r"\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}",
    r"\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-",
    r"\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}",
    "]+"
);
const DEEPSEEK_PUNCT: &str =
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+";
const DEEPSEEK3: &str = concat!(
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##,
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const KANA_HAN: &str = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+";

/// What a `tokenizer.ggml.pre` value means for a `gpt2` model (llama.cpp's `llama_vocab::impl::load`).
struct PreType {
    regexes: &'static [&'static str],
    /// Look a whole piece up in the vocabulary before merging.
    ignore_merges: bool,
    /// `add_bos` when `tokenizer.ggml.add_bos_token` is absent.
    add_bos: bool,
}

/// The `tokenizer.ggml.pre` values kiln knows for a `gpt2` model (space-separated names sharing a type), from
/// llama.cpp's `llama_vocab::impl::load`.
#[rustfmt::skip]
const PRE_TYPES: &[(&str, PreType)] = &[
    ("default", pre(&[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"], false, false)),
    ("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", pre(&[LLAMA3], true, true)),
    ("dbrx smaug-bpe chatglm-bpe", pre(&[LLAMA3], false, false)),
    ("glm4 glm5", pre(&[LLAMA3], true, false)),
    ("deepseek-llm", pre(&["[\r\n]", DEEPSEEK_LATIN, DEEPSEEK_PUNCT, r"\s+$", CJK, r"\p{N}+"], false, false)),
    ("deepseek-coder", pre(&["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"], false, false)),
    ("deepseek-v3 hunyuan-dense joyai-llm hy_v4", pre(&[r"\p{N}{1,3}", KANA_HAN, DEEPSEEK3], false, false)),
    ("falcon", pre(&[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"], false, false)),
    ("starcoder refact command-r smollm codeshell exaone minerva-7b", pre(&[r"\p{N}", GPT2], false, false)),
    ("gpt-2 phi-2 gigachat a.x-4.0 mellum mpt olmo jais trillion exaone4", pre(&[GPT2], false, false)),
    ("qwen2 deepseek-r1-qwen megrez stablelm2 hunyuan solar-open grok-2", pre(&[QWEN2], false, false)),
    ("qwen35", pre(&[QWEN35], false, false)),
    ("tekken", pre(&[TEKKEN], true, true)),
    ("gpt-4o llama4 kanana2 talkie minimax-m2", pre(&[GPT4O], false, false)),
];

const fn pre(regexes: &'static [&'static str], ignore_merges: bool, add_bos: bool) -> PreType {
    PreType {
        regexes,
        ignore_merges,
        add_bos,
    }
}

fn pre_type(name: &str) -> Option<&'static PreType> {
    let known = |names: &str| names.split(' ').any(|n| n == name);
    PRE_TYPES.iter().find(|(names, _)| known(names)).map(|(_, t)| t)
}

/// Builds the tokenizer `g`'s metadata describes.
pub fn tokenizer_from_gguf(g: &Gguf<'_>) -> Result<GgufTokenizer, GgufTokenizerError> {
    let model = string(g, MODEL)?.ok_or(Error::Missing(MODEL))?;
    let spm = match model {
        "llama" => true,
        "gpt2" => false,
        other => return Err(Error::UnsupportedModel(other.into())),
    };
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

    // `tokenizer.ggml.pre` is ignored for `llama` (SentencePiece adds BOS by default).
    let pre_type = if spm {
        &pre(&[], false, true)
    } else {
        let name = string(g, PRE)?.unwrap_or("default");
        pre_type(name).ok_or_else(|| Error::UnsupportedPre(name.into()))?
    };
    let add_bos = boolean(g, "tokenizer.ggml.add_bos_token")?.unwrap_or(pre_type.add_bos);
    let add_eos = boolean(g, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);

    let eog_token_ids = eog_ids(g, &vocab, n, eos)?;
    let mut tokenizer = if spm {
        let scores = match g.get(SCORES) {
            None => vec![0.0; n],
            Some(v) => numbers(v, SCORES, n)?,
        };
        let merges = spm_merges(&texts, &vocab, &scores);
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true);
        if let Some(u) = unk {
            builder = builder.unk_token(texts[u as usize].clone());
        }
        let mut t = Tokenizer::new(builder.build().map_err(|e| build(SCORES, e))?);
        let prefix = boolean(g, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
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
        t.with_decoder(Some(DecoderSequence::new(decoders)));
        t
    } else {
        let merges = string_array(g, MERGES)?.ok_or(Error::Missing(MERGES))?;
        let merges = gpt2_merges(&merges, &vocab);
        let builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre_type.ignore_merges);
        let mut t = Tokenizer::new(builder.build().map_err(|e| build(MERGES, e))?);
        let mut pres = Vec::with_capacity(pre_type.regexes.len() + 1);
        for r in pre_type.regexes {
            let split = Split::new(
                SplitPattern::Regex(r.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            );
            pres.push(PreTokenizerWrapper::Split(split.map_err(|e| build(PRE, e))?));
        }
        pres.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, false, false,
        )));
        t.with_pre_tokenizer(Some(PreSequence::new(pres)));
        t.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
        t
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
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
];
/// Texts llama.cpp takes as the EOT token when `tokenizer.ggml.eot_token_id` is absent.
#[rustfmt::skip]
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>", "<end_of_utterance>",
];

/// llama.cpp's `special_eog_ids` (without its o200k / gemma4 special cases).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every regex of every known pre type compiles with the regex engine tokenizers uses here.
    #[test]
    fn every_pre_type_compiles() {
        for (names, t) in PRE_TYPES {
            for r in t.regexes {
                let split = Split::new(
                    SplitPattern::Regex(r.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                );
                assert!(split.is_ok(), "{names:?}: {r}: {:?}", split.err());
            }
        }
    }
}
