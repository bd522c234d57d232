//! llama.cpp's pre-tokenizer regexes for byte-level BPE (`llm_tokenizer_bpe`) and the `tokenizer.ggml.pre`
//! values that select them, with the flags each pre type sets (`llama_vocab::impl::load`); and Gemma 4's
//! split into lines, which its `gemma4` tokenizer model implies.

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
/// Gemma 4 (`tokenizer.ggml.model` = `gemma4`): lines and runs of newlines, nothing finer; the pieces are
/// merged on raw UTF-8 with spaces already turned into `▁`.
pub(super) const GEMMA4: &str = r"[^\n]+|[\n]+";

/// What a `tokenizer.ggml.pre` value means for a `gpt2` model (llama.cpp's `llama_vocab::impl::load`).
pub(super) struct PreType {
    pub(super) regexes: &'static [&'static str],
    /// Look a whole piece up in the vocabulary before merging.
    pub(super) ignore_merges: bool,
    /// `add_bos` when `tokenizer.ggml.add_bos_token` is absent.
    pub(super) add_bos: bool,
}

/// The `tokenizer.ggml.pre` values kiln knows for a `gpt2` model (space-separated names sharing a type), from
/// llama.cpp's `llama_vocab::impl::load`.
#[rustfmt::skip]
pub(super) const PRE_TYPES: &[(&str, PreType)] = &[
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

pub(super) const fn pre(regexes: &'static [&'static str], ignore_merges: bool, add_bos: bool) -> PreType {
    PreType {
        regexes,
        ignore_merges,
        add_bos,
    }
}

pub(super) fn pre_type(name: &str) -> Option<&'static PreType> {
    let known = |names: &str| names.split(' ').any(|n| n == name);
    PRE_TYPES.iter().find(|(names, _)| known(names)).map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::SplitDelimiterBehavior;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};

    /// Every regex of every known pre type compiles with the regex engine tokenizers uses here.
    #[test]
    fn every_pre_type_compiles() {
        let regexes = PRE_TYPES
            .iter()
            .flat_map(|(names, t)| t.regexes.iter().map(move |r| (*names, *r)));
        for (names, r) in regexes.chain([("gemma4", GEMMA4)]) {
            let split = Split::new(
                SplitPattern::Regex(r.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            );
            assert!(split.is_ok(), "{names:?}: {r}: {:?}", split.err());
        }
    }
}
