//! The grammars compiled by llguidance and run on a byte-level vocabulary (one token per byte, plus the
//! special tokens), so that what they accept can be checked exactly.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};

use super::super::{GrammarOptions, ToolFormat, ToolGrammarError, call_grammar};
use crate::engine::protocol::reasoning::ReasoningSyntax;

const SPECIALS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
];

/// A vocabulary of the 256 bytes, the special tokens, and EOS last.
fn env() -> TokEnv {
    let mut words: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    for s in SPECIALS.iter().chain(&["<eos>"]) {
        words.push([&[0xFF][..], s.as_bytes()].concat());
    }
    let n = words.len() as u32;
    Arc::new(ApproximateTokEnv::new(TokTrie::from(
        &TokRxInfo::new(n, n - 1),
        &words,
    )))
}

fn special_ids() -> Vec<(String, u32)> {
    SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| (s.to_string(), 256 + i as u32))
        .collect()
}

fn matcher(grammar: &str) -> Matcher {
    let mut factory = ParserFactory::new_simple(&env()).expect("factory");
    factory.quiet();
    let m = Matcher::new(factory.create_parser(TopLevelGrammar::from_lark(grammar.to_owned())));
    assert!(!m.is_error(), "{grammar}\n{:?}", m.get_error());
    m
}

/// Whether the grammar accepts `text` (special tokens written `\u{1}NAME\u{1}` when `special`) as a whole
/// output.
fn accepts(grammar: &str, text: &str, special: bool) -> bool {
    let mut tokens = Vec::new();
    for (i, part) in text.split('\u{1}').enumerate() {
        match SPECIALS.iter().position(|s| *s == part) {
            Some(k) if i % 2 == 1 && special => tokens.push(256 + k as u32),
            _ => tokens.extend(part.bytes().map(u32::from)),
        }
    }
    let mut m = matcher(grammar);
    let valid = m.validate_tokens(&tokens).expect("validate");
    valid == tokens.len() && m.consume_tokens(&tokens).is_ok() && m.is_accepting().unwrap_or(false)
}

fn tools() -> Vec<(String, Value)> {
    vec![
        (
            "get_weather".into(),
            json!({"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"], "additionalProperties": false}),
        ),
        ("now".into(), Value::Null),
    ]
}

fn grammar(format: ToolFormat, required: bool, parallel: bool, special: bool, think: Option<bool>) -> String {
    let ids = special_ids();
    let syntax = ReasoningSyntax::think();
    let options = GrammarOptions {
        required,
        parallel,
        special_tokens: if special { &ids } else { &[] },
        reasoning: think.map(|inside| (&syntax, inside)),
    };
    call_grammar(format, &tools(), &options).expect("grammar")
}

/// Every combination compiles.
#[test]
fn grammars_compile() {
    for format in [
        ToolFormat::Hermes,
        ToolFormat::Llama3Json,
        ToolFormat::Mistral,
        ToolFormat::MistralArgs,
        ToolFormat::QwenXml,
        ToolFormat::Gemma4,
    ] {
        for bits in 0..16 {
            let think = match bits / 8 {
                0 => None,
                _ => Some(bits % 2 == 0),
            };
            let g = grammar(format, bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, think);
            matcher(&g);
        }
    }
    let none = call_grammar(ToolFormat::Hermes, &[], &GrammarOptions::default());
    assert_eq!(none, Err(ToolGrammarError::NoTools));
    let bad = call_grammar(
        ToolFormat::Hermes,
        &[("f".into(), json!(1))],
        &GrammarOptions::default(),
    );
    assert_eq!(bad, Err(ToolGrammarError::BadParameters { name: "f".into() }));
}

const PARIS: &str = "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}";

#[test]
fn hermes_grammar_accepts_exactly_calls() {
    for special in [true, false] {
        let one = grammar(ToolFormat::Hermes, true, false, special, None);
        let call = format!("\u{1}<tool_call>\u{1}\n{PARIS}\n\u{1}</tool_call>\u{1}");
        assert!(accepts(&one, &call, special), "{one}");
        let now = "\u{1}<tool_call>\u{1}\n{\"name\": \"now\", \"arguments\": {}}\n\u{1}</tool_call>\u{1}";
        assert!(accepts(&one, now, special));
        assert!(
            !accepts(&one, &format!("{call}\n{call}"), special),
            "one call only"
        );
        assert!(!accepts(&one, "Hello", special), "calls are required");
        let wrong = call.replace("get_weather", "get_weathers");
        assert!(!accepts(&one, &wrong, special), "unknown name");
        let untyped = call.replace("\"Paris\"", "3");
        assert!(!accepts(&one, &untyped, special), "schema enforced");
        let parallel = grammar(ToolFormat::Hermes, true, true, special, None);
        assert!(accepts(&parallel, &format!("{call}\n{call}"), special));
        let auto = grammar(ToolFormat::Hermes, false, false, special, None);
        assert!(accepts(&auto, "Hello <b>", special));
        assert!(accepts(&auto, &call, special));
        assert!(
            !accepts(&auto, "Sure <tool_call>", false),
            "text never writes the opener"
        );
        // A think block first: optional, or to be closed when the prompt opened it.
        let think = grammar(ToolFormat::Hermes, true, false, special, Some(false));
        let thought = format!("\u{1}<think>\u{1}\nHmm </b>.\n\u{1}</think>\u{1}\n\n{call}");
        assert!(accepts(&think, &thought, special), "{think}");
        assert!(accepts(&think, &call, special));
        let inside = grammar(ToolFormat::Hermes, true, false, special, Some(true));
        assert!(
            accepts(&inside, &format!("Hmm.\n\u{1}</think>\u{1}\n\n{call}"), special),
            "{inside}"
        );
        assert!(
            !accepts(&inside, &call, special),
            "the open block must be closed first"
        );
    }
}

#[test]
fn llama3_grammar() {
    let call = "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}";
    let one = grammar(ToolFormat::Llama3Json, true, false, true, None);
    assert!(accepts(&one, call, true), "{one}");
    assert!(!accepts(&one, PARIS, true), "Llama 3 says `parameters`");
    let parallel = grammar(ToolFormat::Llama3Json, true, true, true, None);
    assert!(accepts(&parallel, &format!("{call}; {call}"), true));
    let auto = grammar(ToolFormat::Llama3Json, false, false, true, None);
    assert!(accepts(&auto, "Paris {is} nice", true));
    assert!(!accepts(&auto, " {\"x\": 1}", true));
}

#[test]
fn mistral_grammars() {
    for special in [true, false] {
        let nemo = grammar(ToolFormat::Mistral, true, true, special, None);
        let item = "{\"name\": \"now\", \"arguments\": {}, \"id\": \"a1b2c3d4e\"}";
        assert!(
            accepts(&nemo, &format!("\u{1}[TOOL_CALLS]\u{1}[{item}, {item}]"), special),
            "{nemo}"
        );
        assert!(!accepts(&nemo, "\u{1}[TOOL_CALLS]\u{1}[]", special));
        let single = grammar(ToolFormat::Mistral, true, false, special, None);
        assert!(!accepts(
            &single,
            &format!("\u{1}[TOOL_CALLS]\u{1}[{item}, {item}]"),
            special
        ));

        let args = grammar(ToolFormat::MistralArgs, true, true, special, None);
        let call = "\u{1}[TOOL_CALLS]\u{1}get_weather\u{1}[ARGS]\u{1}{\"location\": \"Paris\"}";
        let now = "\u{1}[TOOL_CALLS]\u{1}now\u{1}[ARGS]\u{1}{}";
        assert!(accepts(&args, call, special), "{args}");
        assert!(accepts(&args, &format!("{call}{now}"), special));
        assert!(!accepts(
            &args,
            &call.replace("Paris\"", "Paris\", \"x\": 1"),
            special
        ));
        if special {
            let with_id = "\u{1}[TOOL_CALLS]\u{1}now\u{1}[CALL_ID]\u{1}000000001\u{1}[ARGS]\u{1}{}";
            assert!(accepts(&args, with_id, special));
        }
    }
}

/// Tools whose parameters take each kind of value.
fn typed_tools() -> Vec<(String, Value)> {
    vec![
        (
            "get_weather".into(),
            json!({"type": "object", "properties": {
                "location": {"type": "string"}, "unit": {"enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1}, "tags": {"type": "array"}},
                "required": ["location", "days"]}),
        ),
        ("now".into(), Value::Null),
    ]
}

fn typed_grammar(format: ToolFormat, parallel: bool, special: bool) -> String {
    let ids = special_ids();
    let options = GrammarOptions {
        required: true,
        parallel,
        special_tokens: if special { &ids } else { &[] },
        reasoning: None,
    };
    call_grammar(format, &typed_tools(), &options).expect("grammar")
}

#[test]
fn qwen_xml_grammar_follows_the_schemas() {
    for special in [true, false] {
        let g = typed_grammar(ToolFormat::QwenXml, false, special);
        let param = |k: &str, v: &str| format!("<parameter={k}>\n{v}\n</parameter>\n");
        let call = |params: &str| {
            format!(
                "\u{1}<tool_call>\u{1}\n<function=get_weather>\n{params}</function>\n\u{1}</tool_call>\u{1}"
            )
        };
        let full = [
            param("location", "Paris, \"FR\"\nline 2"),
            param("unit", "c"),
            param("days", "3"),
            param("tags", "[1, 2]"),
        ]
        .concat();
        assert!(accepts(&g, &call(&full), special), "{g}");
        let required = [param("location", "Paris"), param("days", "3")].concat();
        assert!(
            accepts(&g, &call(&required), special),
            "optional parameters may go"
        );
        let now = "\u{1}<tool_call>\u{1}\n<function=now>\n</function>\n\u{1}</tool_call>\u{1}";
        assert!(accepts(&g, now, special));
        assert!(
            !accepts(&g, &call(&param("location", "Paris")), special),
            "`days` is required"
        );
        let bad_unit = [param("location", "Paris"), param("unit", "k"), param("days", "3")].concat();
        assert!(!accepts(&g, &call(&bad_unit), special), "not in the enum");
        let bad_days = [param("location", "Paris"), param("days", "0")].concat();
        assert!(!accepts(&g, &call(&bad_days), special), "below the minimum");
        assert!(!accepts(
            &g,
            &format!("{}\n{}", call(&required), call(&required)),
            special
        ));
        let parallel = typed_grammar(ToolFormat::QwenXml, true, special);
        assert!(accepts(
            &parallel,
            &format!("{}\n{}", call(&required), call(&required)),
            special
        ));
    }
}

#[test]
fn gemma4_grammar_follows_the_schemas() {
    let g = typed_grammar(ToolFormat::Gemma4, false, false);
    let q = "<|\"|>";
    let call = |args: &str| format!("<|tool_call>call:get_weather{{{args}}}<tool_call|>");
    let full = format!("days:3,location:{q}Paris, \"FR\"{q},tags:[{q}a{q},{{x:1.5}}],unit:{q}c{q}");
    assert!(accepts(&g, &call(&full), false), "{g}");
    assert!(accepts(&g, &call(&format!("days:3,location:{q}Paris{q}")), false));
    assert!(accepts(&g, "<|tool_call>call:now{}<tool_call|>", false));
    assert!(
        !accepts(&g, &call(&format!("location:{q}Paris{q},days:3")), false),
        "keys sorted"
    );
    assert!(
        !accepts(&g, &call(&format!("location:{q}Paris{q}")), false),
        "`days` is required"
    );
    assert!(
        !accepts(&g, &call(&format!("days:0,location:{q}Paris{q}")), false),
        "below the minimum"
    );
    let bad_unit = format!("days:3,location:{q}Paris{q},unit:{q}k{q}");
    assert!(!accepts(&g, &call(&bad_unit), false), "not in the enum");
    let one = call(&format!("days:3,location:{q}P{q}"));
    assert!(!accepts(&g, &format!("{one}{one}"), false));
    let parallel = typed_grammar(ToolFormat::Gemma4, true, false);
    assert!(accepts(&parallel, &format!("{one}{one}"), false));
}
