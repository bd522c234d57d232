use super::*;

mod families;
mod grammar;
mod templates;

use ToolEvent::{Arguments, Content, Start};

fn names() -> Vec<String> {
    ["get_weather", "search", "f"].map(String::from).to_vec()
}

fn start(index: usize, name: &str) -> ToolEvent {
    Start {
        index,
        name: name.into(),
    }
}

fn args(index: usize, fragment: &str) -> ToolEvent {
    Arguments {
        index,
        fragment: fragment.into(),
    }
}

fn content(text: &str) -> ToolEvent {
    Content(text.into())
}

/// Pushes `pieces`, then finishes; the events merged (adjacent content, adjacent fragments of one call).
fn parse_pieces(format: ToolFormat, pieces: &[&str]) -> Result<Vec<ToolEvent>, ToolParseError> {
    let mut p = ToolCallParser::new(format, names());
    let mut events: Vec<ToolEvent> = pieces.iter().flat_map(|t| p.push(t)).collect();
    let end = p.finish();
    assert_eq!(p.text(), pieces.concat(), "the parser keeps the whole output");
    events.extend(end?);
    let mut merged: Vec<ToolEvent> = Vec::new();
    for e in events {
        match (merged.last_mut(), e) {
            (Some(Content(a)), Content(b)) => a.push_str(&b),
            (
                Some(Arguments {
                    index: i,
                    fragment: a,
                }),
                Arguments {
                    index: j,
                    fragment: b,
                },
            ) if *i == j => a.push_str(&b),
            (_, e) => merged.push(e),
        }
    }
    assert!(
        merged
            .iter()
            .all(|e| !matches!(e, Content(t) | Arguments { fragment: t, .. } if t.is_empty())),
        "no empty events: {merged:?}"
    );
    Ok(merged)
}

fn parse(format: ToolFormat, text: &str) -> Result<Vec<ToolEvent>, ToolParseError> {
    parse_pieces(format, &[text])
}

const WEATHER: &str =
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": [1, 2]}}";
const WEATHER_ARGS: &str = "{\"location\": \"Paris\", \"days\": [1, 2]}";

#[test]
fn detects_formats_from_template_text() {
    let qwen = "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}";
    assert_eq!(tool_format(qwen), Some(ToolFormat::Hermes));
    let hermes2 = "{{- '\n<tool_call>\n' }}{{- '{' }}{{- '\"name\": \"' }}";
    assert_eq!(tool_format(hermes2), Some(ToolFormat::Hermes));
    let qwen3_coder = "<tool_call>\n<function=' + tool_call.name + '>\n<parameter=\"name\"";
    assert_eq!(tool_format(qwen3_coder), Some(ToolFormat::QwenXml));
    let glued = "<tool_call><parameter={{ k }}>{{- '<tool_call><function=' ~ tool_call.name ~ '>' }}";
    assert_eq!(
        tool_format(glued),
        None,
        "llama.cpp leaves this variant to its generic parser"
    );
    let gemma4 = "{{- '<|tool_call>call:' + function['name'] + '{' -}}";
    assert_eq!(tool_format(gemma4), Some(ToolFormat::Gemma4));
    let llama = "<|start_header_id|>{{- 'Respond in the format {\"name\": function name, \"parameters\": \
                 dictionary of argument name and its value}.' }}";
    assert_eq!(tool_format(llama), Some(ToolFormat::Llama3Json));
    assert_eq!(tool_format("{{- \"[TOOL_CALLS][\" }}"), Some(ToolFormat::Mistral));
    let devstral = "{{- \"[TOOL_CALLS]\" + tool['function']['name'] + \"[ARGS]\" + arguments }}";
    assert_eq!(tool_format(devstral), Some(ToolFormat::MistralArgs));
    assert_eq!(tool_format("<|im_start|>{{ message.content }}"), None);
    // Apriel 1.5 mentions `<tool_call>` but writes a `<tool_calls>[…]` list.
    let apriel =
        "within <tool_call></tool_call> XML tags:\n<tool_calls>[{\"name\": <function-name-1>}]</tool_calls>";
    assert_eq!(tool_format(apriel), None);
}

#[test]
fn hermes_calls() {
    let one = format!("<tool_call>\n{WEATHER}\n</tool_call>");
    assert_eq!(
        parse(ToolFormat::Hermes, &one),
        Ok(vec![start(0, "get_weather"), args(0, WEATHER_ARGS)])
    );
    // Content first, two calls, whitespace between and after them dropped.
    let two = format!(
        "I'll look.\n\n<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{{\"arguments\": {{}}, \"name\": \
         \"search\"}}</tool_call>\n"
    );
    assert_eq!(
        parse(ToolFormat::Hermes, &two),
        Ok(vec![
            content("I'll look."),
            start(0, "get_weather"),
            args(0, WEATHER_ARGS),
            start(1, "search"),
            args(1, "{}"),
        ])
    );
    // The closing tag never came (the model stopped after the object); a call without arguments.
    assert_eq!(
        parse(ToolFormat::Hermes, "<tool_call>{\"name\": \"f\"}"),
        Ok(vec![start(0, "f"), args(0, "{}")])
    );
    // No call: content untouched, a partial tag included.
    let plain = "Use <tool> tags like <tool_call";
    assert_eq!(parse(ToolFormat::Hermes, plain), Ok(vec![content(plain)]));
    // Text after the calls is content.
    let after = format!("<tool_call>{WEATHER}</tool_call>\n\nDone.");
    assert_eq!(
        parse(ToolFormat::Hermes, &after),
        Ok(vec![
            start(0, "get_weather"),
            args(0, WEATHER_ARGS),
            content("Done.")
        ])
    );
}

#[test]
fn llama3_calls() {
    let call = "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}";
    let expected = vec![start(0, "get_weather"), args(0, "{\"location\": \"Paris\"}")];
    assert_eq!(parse(ToolFormat::Llama3Json, call), Ok(expected.clone()));
    let tagged = format!("<|python_tag|>{call}");
    assert_eq!(parse(ToolFormat::Llama3Json, &tagged), Ok(expected));
    let typed = "\n{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}; {\"name\": \"search\", \
                 \"parameters\": {\"q\": \"x\"}}";
    assert_eq!(
        parse(ToolFormat::Llama3Json, typed),
        Ok(vec![
            start(0, "f"),
            args(0, "{}"),
            start(1, "search"),
            args(1, "{\"q\": \"x\"}")
        ])
    );
    // JSON that is not a call, and plain text, are content.
    for text in [
        "{\"answer\": 42}",
        "{\"names\": []}",
        "Paris is the capital.",
        "  {",
        "<|python",
    ] {
        assert_eq!(
            parse(ToolFormat::Llama3Json, text),
            Ok(vec![content(text)]),
            "{text:?}"
        );
    }
}

#[test]
fn mistral_calls() {
    let nemo = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}, {\"name\": \
                \"search\", \"arguments\": {\"q\": \"}]\"}, \"id\": \"abcdefghi\"}]";
    let expected = vec![
        start(0, "f"),
        args(0, "{\"arg1\": 1}"),
        start(1, "search"),
        args(1, "{\"q\": \"}]\"}"),
    ];
    assert_eq!(parse(ToolFormat::Mistral, nemo), Ok(expected.clone()));
    let small = "Checking.[TOOL_CALLS]f[CALL_ID]000000001[ARGS]{\"arg1\": 1}[TOOL_CALLS]search[ARGS] {\"q\": \
                 \"}]\"}";
    let with_content = [vec![content("Checking.")], expected.clone()].concat();
    assert_eq!(parse(ToolFormat::MistralArgs, small), Ok(with_content.clone()));
    // Either Mistral parser reads either syntax.
    assert_eq!(parse(ToolFormat::Mistral, small), Ok(with_content));
    assert_eq!(parse(ToolFormat::MistralArgs, nemo), Ok(expected));
    assert_eq!(
        parse(ToolFormat::Mistral, "No tools [TOOL"),
        Ok(vec![content("No tools [TOOL")])
    );
}

#[test]
fn streams_like_openai() {
    let mut p = ToolCallParser::new(ToolFormat::Hermes, names());
    assert_eq!(p.push("Sure.\n<tool_"), vec![content("Sure.")]);
    assert_eq!(
        p.push("call>\n{\"name\": \"get_"),
        vec![],
        "no start before the name is complete"
    );
    assert_eq!(
        p.push("weather\", \"arguments\": {\"lo"),
        vec![start(0, "get_weather"), args(0, "{\"lo")]
    );
    assert_eq!(p.push("cation\": \"}\"}"), vec![args(0, "cation\": \"}\"}")]);
    assert_eq!(p.push("}\n</tool"), vec![]);
    assert_eq!(p.push("_call>"), vec![]);
    assert_eq!(p.finish(), Ok(vec![]));
    assert_eq!(p.calls(), 1);
    // Arguments before the name are held until the name completes.
    let mut p = ToolCallParser::new(ToolFormat::Hermes, names());
    assert_eq!(p.push("<tool_call>{\"arguments\": {\"q\": 1"), vec![]);
    assert_eq!(
        p.push("}, \"name\": \"search\""),
        vec![start(0, "search"), args(0, "{\"q\": 1}")]
    );
    assert_eq!(p.push("}</tool_call>"), vec![]);
    assert_eq!(p.finish(), Ok(vec![]));
}

#[test]
fn malformed_calls_are_errors() {
    let unknown = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    assert_eq!(
        parse(ToolFormat::Hermes, unknown),
        Err(ToolParseError::UnknownTool { name: "rm_rf".into() })
    );
    let cases = [
        (
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>",
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
        ),
        (ToolFormat::MistralArgs, "[TOOL_CALLS]f[ARGS][1]"),
    ];
    for (format, text) in cases {
        assert!(
            matches!(parse(format, text), Err(ToolParseError::BadArguments { .. })),
            "{text:?}"
        );
    }
    let missing = "<tool_call>{\"arguments\": {}}</tool_call>";
    assert_eq!(
        parse(ToolFormat::Hermes, missing),
        Err(ToolParseError::MissingName)
    );
    assert_eq!(
        parse(
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"f\"} trailing</tool_call>"
        ),
        Err(ToolParseError::Syntax {
            at: 25,
            expected: "`</tool_call>`"
        })
    );
    for (format, text) in [
        (ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"argu"),
        (ToolFormat::Hermes, "<tool_call>\n"),
        (ToolFormat::Llama3Json, "{\"name\": \"f\", \"parameters\": {"),
        (
            ToolFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}",
        ),
        (ToolFormat::MistralArgs, "[TOOL_CALLS]f[AR"),
    ] {
        assert_eq!(parse(format, text), Err(ToolParseError::Truncated), "{text:?}");
    }
    for text in [
        "<tool_call>[1]</tool_call>",
        "<tool_call>{\"name\" \"f\"}</tool_call>",
    ] {
        assert!(
            matches!(
                parse(ToolFormat::Hermes, text),
                Err(ToolParseError::Syntax { .. })
            ),
            "{text:?}"
        );
    }
    // After an error nothing more is emitted; the text is kept for a fallback.
    let mut p = ToolCallParser::new(ToolFormat::Hermes, names());
    assert_eq!(p.push("Hi <tool_call>{\"name\": \"nope\""), vec![content("Hi")]);
    assert_eq!(p.push("} more"), vec![]);
    assert!(p.finish().is_err());
    assert_eq!(p.text(), "Hi <tool_call>{\"name\": \"nope\"} more");
}

/// Every transcript (valid and malformed) split at every character boundary (two and three pieces) and in
/// pseudo-random chunks parses as it does in one piece.
#[test]
fn fragment_boundaries_do_not_matter() {
    let transcripts: &[(ToolFormat, &str)] = &[
        (
            ToolFormat::Hermes,
            "Hi ☕.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\\"}</tool_call>\"}}\n</tool_call>\n\
             <tool_call>{\"arguments\": {\"n\": -1.5e3}, \"id\": 7, \"name\": \"search\"}</tool_call> ok",
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}",
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>{\"name\": \"zzz\", \"arguments\": {}}",
        ),
        (ToolFormat::Hermes, "a <tool_cal b </tool_call> <tool_call"),
        (
            ToolFormat::Llama3Json,
            " <|python_tag|>{\"name\": \"f\", \"parameters\": {\"é\": [true, null]}};{\"name\": \"search\"}",
        ),
        (ToolFormat::Llama3Json, "{\"nam\": 1}"),
        (
            ToolFormat::Llama3Json,
            "{\"name\": \"f\", \"parameters\": {}} trailing",
        ),
        (
            ToolFormat::Mistral,
            "x[TOOL_CALLS] [{\"id\": \"123456789\", \"arguments\": {\"a\": {\"b\": []}}, \"name\": \"f\"}]",
        ),
        (
            ToolFormat::MistralArgs,
            "[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{\"a\": \"[ARGS]\"}\n[TOOL_CALLS]f[ARGS]{}",
        ),
        (ToolFormat::MistralArgs, "[TOOL_CALLS]unknown[ARGS]{}"),
    ];
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for &(format, text) in transcripts {
        let expected = parse(format, text);
        let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &a in &cuts {
            assert_eq!(
                parse_pieces(format, &[&text[..a], &text[a..]]),
                expected,
                "{text:?} at {a}"
            );
            for &b in cuts.iter().filter(|&&b| b >= a).step_by(3) {
                let pieces = [&text[..a], &text[a..b], &text[b..]];
                assert_eq!(parse_pieces(format, &pieces), expected, "{text:?} at {a}, {b}");
            }
        }
        for _ in 0..200 {
            let mut pieces = Vec::new();
            let mut at = 0;
            while at < text.len() {
                let mut end = (at + 1 + (next() % 8) as usize).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                pieces.push(&text[at..end]);
                at = end;
            }
            assert_eq!(parse_pieces(format, &pieces), expected, "{text:?} in {pieces:?}");
        }
    }
}
