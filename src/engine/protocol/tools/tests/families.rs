//! Qwen3-Coder's XML calls (Qwen3.5) and Gemma 4's calls: JSON arguments out of each family's notation,
//! the same whatever the cut of the text into pieces.

use serde_json::{Value, json};

use super::*;

/// Parses `text` whole and cut into single characters; both must agree.
fn both(format: ToolFormat, schemas: &[(&str, Value)], text: &str) -> Result<Vec<ToolEvent>, ToolParseError> {
    let run = |pieces: &[&str]| {
        let schemas = schemas.iter().map(|(n, s)| (n.to_string(), s.clone())).collect();
        let mut p = ToolCallParser::new(format, names()).with_schemas(schemas);
        let mut events: Vec<ToolEvent> = pieces.iter().flat_map(|t| p.push(t)).collect();
        events.extend(p.finish()?);
        Ok(merge(events))
    };
    let whole = run(&[text]);
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run(&chars), whole, "{text:?} cut into characters");
    whole
}

fn merge(events: Vec<ToolEvent>) -> Vec<ToolEvent> {
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
    merged
}

fn weather_schema() -> Vec<(&'static str, Value)> {
    vec![(
        "get_weather",
        json!({"type": "object", "properties": {
            "location": {"type": "string"}, "days": {"type": ["integer", "null"]},
            "unit": {"enum": ["c", "f"]}, "any": {}}}),
    )]
}

#[test]
fn xml_calls() {
    let call = "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, \"FR\"\n</parameter>\n\
                <parameter=days>\n3\n</parameter>\n<parameter=unit>\nc\n</parameter>\n<parameter=any>\n[1]\n\
                </parameter>\n</function>\n</tool_call>";
    let json = "{\"location\":\"Paris, \\\"FR\\\"\",\"days\":3,\"unit\":\"c\",\"any\":[1]}";
    let text = format!("Let me see.\n\n{call}\n{}", call.replace("get_weather", "f"));
    assert_eq!(
        both(ToolFormat::QwenXml, &weather_schema(), &text),
        Ok(vec![
            content("Let me see."),
            start(0, "get_weather"),
            args(0, json),
            start(1, "f"),
            // `f` has no schema: values that parse as JSON are JSON, others strings.
            args(1, json),
        ])
    );
    // Without a schema, `3` is a number and text a string; a multi-line value keeps its inner lines; a call
    // with no parameters is `{}`; text after the call is content; `</tool_call>` may be missing at the end.
    let text = "<tool_call>\n<function=f>\n<parameter=a>\n3\n</parameter>\n<parameter=b>\nline 1\n\nline 3\n\
                </parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n</function>\n</tool_call>\
                \nDone.";
    assert_eq!(
        both(ToolFormat::QwenXml, &[], text),
        Ok(vec![
            start(0, "f"),
            args(0, "{\"a\":3,\"b\":\"line 1\\n\\nline 3\"}"),
            start(1, "search"),
            args(1, "{}"),
            content("Done."),
        ])
    );
    assert_eq!(
        both(ToolFormat::QwenXml, &[], "<tool_call>\n<function=f>\n</function>"),
        Ok(vec![start(0, "f"), args(0, "{}")])
    );
    // Malformed: an unknown function, a broken wrapper, a call cut short.
    let unknown = "<tool_call>\n<function=nope>\n</function>\n</tool_call>";
    assert_eq!(
        both(ToolFormat::QwenXml, &[], unknown),
        Err(ToolParseError::UnknownTool { name: "nope".into() })
    );
    let broken = "<tool_call>\n{\"name\": \"f\"}\n</tool_call>";
    assert!(matches!(
        both(ToolFormat::QwenXml, &[], broken),
        Err(ToolParseError::Syntax { .. })
    ));
    let cut = "<tool_call>\n<function=f>\n<parameter=a>\nabc";
    assert_eq!(
        both(ToolFormat::QwenXml, &[], cut),
        Err(ToolParseError::Truncated)
    );
}

#[test]
fn gemma4_calls() {
    let q = "<|\"|>";
    let call = format!(
        "<|tool_call>call:get_weather{{location:{q}Paris, \"FR\"{q},days:3,\
         opts:{{deep:true,n:null,l:[1.5,-2e3,{q}x{q}]}},empty:[],none:{{}}}}<tool_call|>"
    );
    let json = "{\"location\":\"Paris, \\\"FR\\\"\",\"days\":3,\
                \"opts\":{\"deep\":true,\"n\":null,\"l\":[1.5,-2e3,\"x\"]},\"empty\":[],\"none\":{}}";
    let text = format!(
        "Checking.\n{call}{}<|tool_response>",
        call.replace("get_weather", "f")
    );
    assert_eq!(
        both(ToolFormat::Gemma4, &[], &text),
        Ok(vec![
            content("Checking."),
            start(0, "get_weather"),
            args(0, json),
            start(1, "f"),
            args(1, json),
        ])
    );
    assert_eq!(
        both(
            ToolFormat::Gemma4,
            &[],
            "<|tool_call>call:search{}<tool_call|>\nDone."
        ),
        Ok(vec![start(0, "search"), args(0, "{}"), content("Done.")])
    );
    // Whitespace around the parts is allowed; the end tag may be missing at the end.
    assert_eq!(
        both(
            ToolFormat::Gemma4,
            &[],
            &format!("<|tool_call>call:f{{ a : {q}x{q} , b: [ 1 , 2 ] }}")
        ),
        Ok(vec![start(0, "f"), args(0, "{\"a\":\"x\",\"b\":[1,2]}")])
    );
    // Malformed: a bare word, a missing `call:`, a call cut short, an unknown function.
    let bare = "<|tool_call>call:f{unit:celsius}<tool_call|>";
    assert!(matches!(
        both(ToolFormat::Gemma4, &[], bare),
        Err(ToolParseError::BadArguments { .. })
    ));
    assert!(matches!(
        both(ToolFormat::Gemma4, &[], "<|tool_call>f{}<tool_call|>"),
        Err(ToolParseError::Syntax { .. })
    ));
    assert_eq!(
        both(ToolFormat::Gemma4, &[], &format!("<|tool_call>call:f{{a:{q}x")),
        Err(ToolParseError::Truncated)
    );
    assert_eq!(
        both(ToolFormat::Gemma4, &[], "<|tool_call>call:nope{}<tool_call|>"),
        Err(ToolParseError::UnknownTool { name: "nope".into() })
    );
}
