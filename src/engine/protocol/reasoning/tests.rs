use super::*;
use crate::tokenizer::{ChatTemplate, TemplateInputs};

fn one_shot(text: &str, starts_inside: bool) -> Split {
    let mut s = ReasoningSplitter::new(ReasoningSyntax::think(), starts_inside);
    let mut out = s.push(text);
    let end = s.finish();
    out.reasoning.push_str(&end.reasoning);
    out.content.push_str(&end.content);
    out
}

fn chunked(pieces: &[&str], starts_inside: bool) -> Split {
    let mut s = ReasoningSplitter::new(ReasoningSyntax::think(), starts_inside);
    let mut out = Split::default();
    let mut parts: Vec<Split> = pieces.iter().map(|p| s.push(p)).collect();
    parts.push(s.finish());
    for piece in parts {
        out.reasoning.push_str(&piece.reasoning);
        out.content.push_str(&piece.content);
    }
    out
}

fn split(reasoning: &str, content: &str) -> Split {
    Split {
        reasoning: reasoning.into(),
        content: content.into(),
    }
}

const TRANSCRIPTS: &[&str] = &[
    "<think>\nI'm\nthinking\n</think>\n\nHello, world!",
    "\n<think>\n\n</think>\n\nHi",
    "<think>a < b, and </thinking> is not </think>the close tag</think> after",
    "The answer is <think>not a think block</think> here.",
    "<thin>almost</think>",
    "<think>\n never closed \n</thi",
    "  \n ",
    "<thi",
    "<think>café ☕ \u{1F600}</think>\n\n¿Qué?",
    "Let me see.\n</think>\n\nParis.",
    "",
];

#[test]
fn splits_qwen3_output() {
    let out = one_shot(
        "<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
        false,
    );
    assert_eq!(out, split("I'm\nthinking", "Hello, world!\nWhat's up?"));
    // Thinking disabled: the empty block is in the prompt, the output is all content.
    assert_eq!(one_shot("Hello", false), split("", "Hello"));
    // An empty think block in the output.
    assert_eq!(one_shot("<think>\n\n</think>\n\nHi", false), split("", "Hi"));
}

#[test]
fn starts_inside_an_open_block() {
    let out = one_shot("\nLet me see.\n\n</think>\n\nParis.", true);
    assert_eq!(out, split("Let me see.", "Paris."));
    // The model closes at once.
    assert_eq!(one_shot("</think>\n\nParis.", true), split("", "Paris."));
}

#[test]
fn no_think_block_means_all_content() {
    let text = "The answer is <think>not a think block</think> here.";
    assert_eq!(one_shot(text, false), split("", text));
    // Leading whitespace is kept when there is no block.
    assert_eq!(one_shot("\n\nHello", false), split("", "\n\nHello"));
    // A near-miss of the open tag.
    assert_eq!(one_shot("<thin>x", false), split("", "<thin>x"));
    // Output that is a prefix of the open tag, then ends.
    assert_eq!(one_shot("<thi", false), split("", "<thi"));
    // Tags after the close tag are content.
    assert_eq!(
        one_shot("<think>r</think>a <think>b</think>", false),
        split("r", "a <think>b</think>")
    );
}

#[test]
fn unclosed_block_is_all_reasoning() {
    assert_eq!(
        one_shot("<think>\nstill going\n", false),
        split("still going", "")
    );
    // A close tag cut off by max_tokens stays reasoning text.
    assert_eq!(one_shot("<think>\nx\n</thi", false), split("x\n</thi", ""));
    assert_eq!(one_shot("still going", true), split("still going", ""));
}

#[test]
fn holds_back_only_what_may_be_a_tag() {
    let mut s = ReasoningSplitter::new(ReasoningSyntax::think(), false);
    assert_eq!(s.push(" <th"), split("", ""));
    assert!(!s.in_reasoning());
    assert_eq!(s.push("ink>\nStep 1"), split("Step 1", ""));
    assert!(s.in_reasoning());
    assert_eq!(s.push(".\n</"), split(".", ""));
    assert_eq!(
        s.push("b>\n"),
        split("\n</b>", ""),
        "a failed partial close tag is released"
    );
    assert_eq!(s.push("</think>"), split("", ""));
    assert!(!s.in_reasoning());
    assert_eq!(s.push("\n\n"), split("", ""));
    assert_eq!(
        s.push("Answer <"),
        split("", "Answer <"),
        "content is never held back"
    );
    assert_eq!(s.finish(), split("", ""));
}

/// Every transcript split at every character boundary (two pieces), every pair of boundaries (three pieces),
/// and in pseudo-random chunk sizes gives what the one-shot split gives.
#[test]
fn fragment_boundaries_do_not_matter() {
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for &text in TRANSCRIPTS {
        for starts_inside in [false, true] {
            let expected = one_shot(text, starts_inside);
            let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            for &a in &cuts {
                assert_eq!(
                    chunked(&[&text[..a], &text[a..]], starts_inside),
                    expected,
                    "{text:?} at {a}"
                );
                for &b in cuts.iter().filter(|&&b| b >= a) {
                    let pieces = [&text[..a], &text[a..b], &text[b..]];
                    assert_eq!(chunked(&pieces, starts_inside), expected, "{text:?} at {a}, {b}");
                }
            }
            for _ in 0..200 {
                let mut pieces = Vec::new();
                let mut at = 0;
                while at < text.len() {
                    let mut end = (at + 1 + (next() % 6) as usize).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    pieces.push(&text[at..end]);
                    at = end;
                }
                assert_eq!(
                    chunked(&pieces, starts_inside),
                    expected,
                    "{text:?} in {pieces:?}"
                );
            }
        }
    }
}

#[test]
fn detects_think_templates() {
    let qwen3 = "{%- if '</think>' in message.content %}…{%- endif %}";
    assert_eq!(reasoning_syntax(qwen3), Some(ReasoningSyntax::think()));
    let chatml = "{% for message in messages %}{{ '<|im_start|>' + message['role'] }}{% endfor %}";
    assert_eq!(reasoning_syntax(chatml), None);
}

/// The generation-prompt tails of real templates (copied from llama.cpp's `models/templates`), rendered with
/// kiln's renderer, thinking on and off.
#[test]
fn real_generation_prompts() {
    // Qwen-Qwen3-0.6B.jinja: thinking is on unless `enable_thinking` is false.
    let qwen3 = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + \
                 '<|im_end|>' + '\\n' }}{%- endfor %}\n{%- if add_generation_prompt %}\n    \
                 {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is \
                 false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}";
    // Qwen-QwQ-32B.jinja: the prompt opens the block; without `enable_thinking` (undefined is falsy) it is
    // closed at once.
    let qwq = "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n    \
               {%- if not enable_thinking -%}{{- '</think>' -}}{%- endif -%}\n{%- endif %}";
    // deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
    let r1 = "{%- if add_generation_prompt -%}{{'<｜Assistant｜><think>\\n'}}{% if not enable_thinking \
              %}{{- '</think>' -}}{% endif %}\n{%- endif %}";
    let cases = [
        (qwen3, None, false),
        (qwen3, Some(true), false),
        (qwen3, Some(false), false),
        (qwq, Some(true), true),
        (qwq, Some(false), false),
        (qwq, None, false),
        (r1, Some(true), true),
        (r1, Some(false), false),
    ];
    for (source, thinking, inside) in cases {
        let template = ChatTemplate::new(source).expect("template compiles");
        let mut inputs = TemplateInputs {
            messages: vec![serde_json::json!({"role": "user", "content": "Hi"})],
            add_generation_prompt: true,
            ..TemplateInputs::default()
        };
        if let Some(on) = thinking {
            inputs.extra.insert("enable_thinking".into(), on.into());
        }
        let prompt = template.render(&inputs).expect("template renders");
        let syntax = ReasoningSyntax::think();
        assert_eq!(prompt_ends_in_think(&prompt, &syntax), inside, "{prompt:?}");
        // The model's continuation splits accordingly.
        let out = one_shot("Hmm.\n</think>\n\nHello", inside);
        let expected = if inside {
            split("Hmm.", "Hello")
        } else {
            split("", "Hmm.\n</think>\n\nHello")
        };
        assert_eq!(out, expected);
    }
    assert!(!prompt_ends_in_think("no tags", &ReasoningSyntax::think()));
}

/// Every cut of `text` into two and three pieces splits as the whole does, with `syntax`.
fn split_with(syntax: &ReasoningSyntax, text: &str, starts_inside: bool) -> Split {
    let run = |pieces: &[&str]| {
        let mut s = ReasoningSplitter::new(syntax.clone(), starts_inside);
        let mut out = Split::default();
        let mut parts: Vec<Split> = pieces.iter().map(|p| s.push(p)).collect();
        parts.push(s.finish());
        for piece in parts {
            out.reasoning.push_str(&piece.reasoning);
            out.content.push_str(&piece.content);
        }
        out
    };
    let whole = run(&[text]);
    let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    for &a in &cuts {
        for &b in cuts.iter().filter(|&&b| b >= a) {
            let pieces = [&text[..a], &text[a..b], &text[b..]];
            assert_eq!(run(&pieces), whole, "{text:?} at {a}, {b}");
        }
    }
    whole
}

#[test]
fn qwen35_thoughts_end_at_a_tool_call() {
    let syntax = ReasoningSyntax::think_until_call();
    let call = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
    assert_eq!(
        split_with(&syntax, &format!("I will call f.\n\n{call}"), true),
        split("I will call f.", call)
    );
    assert_eq!(
        split_with(&syntax, "Hmm.\n</think>\n\nSee <tool_call> docs.", true),
        split("Hmm.", "See <tool_call> docs.")
    );
    // Without the rule (Qwen3), the tag is reasoning text.
    assert_eq!(
        one_shot(&format!("x {call}"), true),
        split(&format!("x {call}"), "")
    );
    let template = "{{ '<tool_call>\\n<function=' }}<parameter=…></think>";
    assert_eq!(reasoning_syntax(template), Some(syntax));
}

#[test]
fn gemma4_thought_channels() {
    let syntax = ReasoningSyntax::gemma4();
    assert_eq!(
        split_with(
            &syntax,
            "<|channel>thought\nThe user asks.\n<channel|>Paris.",
            false
        ),
        split("The user asks.", "Paris.")
    );
    // Thinking off: the prompt closed an empty channel; an extra empty one and a stray close tag go.
    assert_eq!(
        split_with(&syntax, "Paris.<|channel>thought\n<channel|>", false),
        split("", "Paris.")
    );
    assert_eq!(
        split_with(&syntax, "Paris.<channel|>", false),
        split("", "Paris.")
    );
    // Every thought is reasoning; a `<|channel>` of another name is content.
    assert_eq!(
        split_with(
            &syntax,
            "<|channel>thought\nA<channel|>B<|channel>thought\nC<channel|>D <|channel>x",
            false
        ),
        split("AC", "BD <|channel>x")
    );
    let prompt = "<|turn>model\n<|channel>thought\n<channel|>";
    assert!(!prompt_ends_in_think(prompt, &syntax));
    let template = "{{- '<|channel>thought\\n' + thinking_text + '\\n<channel|>' -}}";
    assert_eq!(reasoning_syntax(template), Some(syntax));
}
