//! Qwen3.5 and Gemma 4 on the text side, without a model: their tokenizers (llama.cpp's GGUF vocabularies
//! `ggml-vocab-qwen35.gguf` and `ggml-vocab-gemma-4.gguf`) with their real chat templates (llama.cpp's
//! `Qwen3.5-4B.jinja` and `google-gemma-4-31B-it.jinja`), from the data cache.
//!
//! Requests are planned as the server plans them (`reasoning_effort` → `enable_thinking`, the tools
//! rendered by the template, the call syntax and think tags found in it, forced calls' grammars compiled
//! over the real vocabulary); then text written the way each model writes it goes through the plan's
//! per-choice processor twice, whole and token by token (encoded with the real tokenizer, decoded
//! incrementally as generation does), and both must give the expected `reasoning_content`, `content` and
//! `tool_calls`: the thinking split (Qwen3.5's `<think>…</think>`, Gemma 4's `<|channel>thought…<channel|>`),
//! Qwen3.5's XML calls with their parameters typed by the tools' schemas, and Gemma 4's `<|tool_call>` calls
//! in its own notation, turned into JSON as llama.cpp's parsers turn them.
#![cfg(not(target_arch = "wasm32"))]

mod data;

use data::read;
use kiln::api::{ModelSpec, chat_request};
use kiln::engine::protocol::chat_choice::ChoiceText;
use kiln::engine::protocol::detok::Detokenizer;
use kiln::engine::protocol::format::{ChatFormat, LazyVocab, ModelFormat};
use kiln::engine::protocol::plan::{self, ChatPlan};
use kiln::engine::protocol::reasoning::ReasoningSyntax;
use kiln::engine::protocol::tools::ToolFormat;
use kiln::loader::Gguf;
use kiln::tokenizer::ModelTokenizer;
use serde_json::{Value, json};

struct Family {
    tok: ModelTokenizer,
    chat: ChatFormat,
    spec: ModelSpec,
    vocab: LazyVocab,
}

fn family(vocab: &str, template: &str) -> Family {
    let bytes = read(&format!("llama.cpp/models/ggml-vocab-{vocab}.gguf"));
    let mut tok = ModelTokenizer::from_gguf(&Gguf::parse(&bytes).expect("GGUF parses")).expect("tokenizer");
    let source = String::from_utf8(read(&format!("llama.cpp/models/templates/{template}"))).unwrap();
    tok.set_chat_template(&source).expect("template compiles");
    let spec = ModelSpec {
        id: "m".into(),
        context_length: 4096,
        vocab_size: tok.inner.get_vocab_size(true),
        images: false,
        video: false,
    };
    Family {
        chat: ChatFormat::of(&tok),
        tok,
        spec,
        vocab: LazyVocab::default(),
    }
}

fn qwen35() -> Family {
    family("qwen35", "Qwen3.5-4B.jinja")
}

fn gemma4() -> Family {
    family("gemma-4", "google-gemma-4-31B-it.jinja")
}

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {}
        }, "required": ["city", "days"]}}})
}

fn time() -> Value {
    json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
        "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}})
}

impl Family {
    /// The plan of a chat request: `extra` joins a one-question body.
    fn plan(&self, extra: Value) -> ChatPlan {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let format = ModelFormat {
            spec: &self.spec,
            tokenizer: &self.tok,
            chat: &self.chat,
            vocab: &self.vocab,
            images: None,
        };
        plan::chat(&format, chat_request(body, &self.spec).expect("valid"), &[]).expect("planned")
    }

    /// `generated` through the first choice of a fresh plan for `extra`: whole, and token by token.
    fn run(&self, extra: Value, generated: &str) -> Out {
        let choice = |p: ChatPlan| p.into_parts().1.into_iter().next().expect("a choice");
        let whole = collect(&mut choice(self.plan(extra.clone())), &[generated]);
        let keep_special = self.plan(extra.clone()).prompt().params().keep_special;
        let ids = self.tok.encode(generated, false).unwrap();
        let mut detok = Detokenizer::new(keep_special);
        let mut pieces: Vec<String> = ids.iter().map(|&id| detok.push(&self.tok, id).unwrap()).collect();
        pieces.push(detok.flush(&self.tok).unwrap());
        assert_eq!(
            pieces.concat(),
            generated,
            "the text round-trips through the tokenizer"
        );
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let streamed = collect(&mut choice(self.plan(extra)), &pieces);
        assert_eq!(whole, streamed, "whole and token by token: {generated:?}");
        whole
    }
}

/// What a choice's output became.
#[derive(Debug, PartialEq)]
struct Out {
    reasoning: String,
    content: String,
    /// `(name, arguments)` of each call.
    calls: Vec<(String, Value)>,
}

/// Feeds `pieces` as steps (the last one ends the choice) and gathers the deltas as a client does.
fn collect(choice: &mut ChoiceText, pieces: &[&str]) -> Out {
    let (mut reasoning, mut content) = (String::new(), String::new());
    let mut calls: Vec<(String, String)> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let out = choice.step(piece, 1, i + 1 == pieces.len(), false).expect("step");
        reasoning.push_str(&out.reasoning);
        content.push_str(&out.content);
        for d in out.tool_calls {
            let f = d.function.expect("a function delta");
            let index = d.index as usize;
            if let Some(name) = f.name {
                assert_eq!(index, calls.len(), "calls start in order");
                assert!(
                    d.id.is_some_and(|id| id.starts_with("call_")),
                    "the first delta has the id"
                );
                calls.push((name, String::new()));
            }
            calls[index].1.push_str(&f.arguments.unwrap_or_default());
        }
    }
    assert_eq!(choice.calls(), calls.len());
    let calls = calls
        .into_iter()
        .map(|(name, args)| {
            let v = serde_json::from_str(&args).unwrap_or_else(|e| panic!("{args}: {e}"));
            (name, v)
        })
        .collect();
    Out {
        reasoning,
        content,
        calls,
    }
}

fn out(reasoning: &str, content: &str, calls: &[(&str, Value)]) -> Out {
    Out {
        reasoning: reasoning.into(),
        content: content.into(),
        calls: calls.iter().map(|(n, v)| (n.to_string(), v.clone())).collect(),
    }
}

#[test]
fn qwen35_thinking_follows_reasoning_effort() {
    let q = qwen35();
    assert_eq!(
        (q.chat.tools, q.chat.reasoning.clone()),
        (
            Some(ToolFormat::QwenXml),
            Some(ReasoningSyntax::think_until_call())
        )
    );
    // Thinking is on by default: the prompt opens the think block.
    let on = q.plan(json!({}));
    assert!(
        on.text().ends_with("<|im_start|>assistant\n<think>\n"),
        "{}",
        on.text()
    );
    assert_eq!(
        q.run(json!({}), "The user asks about Paris.\n</think>\n\nIt is sunny."),
        out("The user asks about Paris.", "It is sunny.", &[])
    );
    // A block never closed (cut by max_tokens) is all reasoning.
    assert_eq!(
        q.run(json!({}), "Hmm, let me think"),
        out("Hmm, let me think", "", &[])
    );
    // `reasoning_effort: "none"` renders `enable_thinking=false`: the prompt closes an empty block.
    let none = json!({"reasoning_effort": "none"});
    let off = q.plan(none.clone());
    assert!(off.text().ends_with("<think>\n\n</think>\n\n"), "{}", off.text());
    assert_eq!(q.run(none, "It is sunny."), out("", "It is sunny.", &[]));
    let high = q.plan(json!({"reasoning_effort": "high"}));
    assert_eq!(high.text(), on.text());
}

#[test]
fn qwen35_xml_tool_calls() {
    let q = qwen35();
    let tools = json!({"tools": [weather(), time()]});
    let prompt = q.plan(tools.clone());
    assert!(
        prompt.text().contains("<function=example_function_name>")
            && prompt.text().contains("\"name\": \"get_weather\""),
        "{}",
        prompt.text()
    );
    let call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, \"CA\"\n\
                second line\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n\
                </parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=note>\n\
                {\"x\": 1}\n</parameter>\n</function>\n</tool_call>";
    let args = json!({"city": "San Francisco, \"CA\"\nsecond line", "days": 3, "unit": "celsius",
                      "tags": ["a", "b"], "note": {"x": 1}});
    let thought = format!("I need the weather.\n</think>\n\nLet me check.\n\n{call}");
    assert_eq!(
        q.run(tools.clone(), &thought),
        out(
            "I need the weather.",
            "Let me check.",
            &[("get_weather", args.clone())]
        )
    );
    // A call straight after the thoughts, with no `</think>` (llama.cpp's Qwen3-Coder parser allows it),
    // and two calls, one without parameters and one whose parameter is not JSON where it might be.
    let two = format!(
        "Two calls.\n{call}\n<tool_call>\n<function=get_time>\n<parameter=zone>\n42\n</parameter>\n\
         </function>\n</tool_call>"
    );
    assert_eq!(
        q.run(tools.clone(), &two),
        out(
            "Two calls.",
            "",
            &[("get_weather", args.clone()), ("get_time", json!({"zone": "42"}))]
        )
    );
    let untyped = "<tool_call>\n<function=get_weather>\n<parameter=note>\nnot json\n</parameter>\n\
                   </function>\n</tool_call>";
    let none = json!({"tools": [weather()], "reasoning_effort": "none"});
    assert_eq!(
        q.run(none.clone(), untyped),
        out("", "", &[("get_weather", json!({"note": "not json"}))])
    );
    // Under `auto` a call of an unknown function is content, as it was written.
    let unknown = "<tool_call>\n<function=get_stock>\n</function>\n</tool_call>";
    assert_eq!(q.run(none, unknown), out("", unknown, &[]));
    // Forced calls are planned with a grammar over the real vocabulary.
    let forced = q.plan(json!({"tools": [weather(), time()], "tool_choice": "required"}));
    assert!(forced.prompt().is_constrained() && forced.prompt().params().keep_special);
    let choice = json!({"type": "function", "function": {"name": "get_time"}});
    let named = json!({"tools": [weather(), time()], "tool_choice": choice});
    assert!(q.plan(named).prompt().is_constrained());
}

#[test]
fn gemma4_thinking_follows_reasoning_effort() {
    let g = gemma4();
    assert_eq!(
        (g.chat.tools, g.chat.reasoning.clone()),
        (Some(ToolFormat::Gemma4), Some(ReasoningSyntax::gemma4()))
    );
    assert!(
        g.tok.stop_ids.contains(&106) && g.tok.stop_ids.contains(&1),
        "<turn|> and <eos>"
    );
    // Thinking is off by default, and with `reasoning_effort: "none"`: the prompt closes an empty thought.
    for extra in [json!({}), json!({"reasoning_effort": "none"})] {
        let off = g.plan(extra.clone());
        assert!(
            off.text().starts_with("<bos><|turn>user\n")
                && off
                    .text()
                    .ends_with("<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"),
            "{}",
            off.text()
        );
        assert_eq!(
            g.tok.encode(off.text(), false).unwrap()[0],
            2,
            "one BOS, from the template"
        );
        assert_eq!(g.run(extra, "Sunny, 22 °C."), out("", "Sunny, 22 °C.", &[]));
    }
    // Any other effort turns it on: `<|think|>` in the system turn, and the model opens its channel.
    let high = json!({"reasoning_effort": "high"});
    let on = g.plan(high.clone());
    assert!(
        on.text().starts_with("<bos><|turn>system\n<|think|>\n<turn|>\n")
            && on.text().ends_with("<|turn>model\n"),
        "{}",
        on.text()
    );
    let thought = "<|channel>thought\nThe user asks about Paris.\n<channel|>Sunny, 22 °C.";
    assert_eq!(
        g.run(high.clone(), thought),
        out("The user asks about Paris.", "Sunny, 22 °C.", &[])
    );
    // As llama.cpp reads Gemma 4: a later (often empty) thought is reasoning too, a stray `<channel|>` goes.
    let later = "Sunny.<|channel>thought\nAlso warm.<channel|>Warm.<|channel>thought\n<channel|>";
    assert_eq!(g.run(high.clone(), later), out("Also warm.", "Sunny.Warm.", &[]));
    assert_eq!(g.run(high, "Sunny.<channel|>"), out("", "Sunny.", &[]));
}

#[test]
fn gemma4_tool_calls() {
    let g = gemma4();
    let tools = json!({"tools": [weather(), time()], "reasoning_effort": "medium"});
    let prompt = g.plan(tools.clone());
    assert!(
        prompt
            .text()
            .contains("<|tool>declaration:get_weather{description:<|\"|>The weather in a city<|\"|>"),
        "{}",
        prompt.text()
    );
    let q = "<|\"|>";
    let call = format!(
        "<|tool_call>call:get_weather{{city:{q}Paris, \"FR\"\n{q},days:3,note:{{deep:true,n:null,l:[1.5,-2]}},\
         tags:[{q}a{q},{q}b{q}],unit:{q}celsius{q}}}<tool_call|>"
    );
    let args = json!({"city": "Paris, \"FR\"\n", "days": 3, "note": {"deep": true, "n": null, "l": [1.5, -2]},
                      "tags": ["a", "b"], "unit": "celsius"});
    let text = format!("<|channel>thought\nI need the weather.<channel|>{call}");
    assert_eq!(
        g.run(tools.clone(), &text),
        out("I need the weather.", "", &[("get_weather", args.clone())])
    );
    // Content first, two calls, and the `<|tool_response>` the model writes after them.
    let two =
        format!("Checking.{call}<|tool_call>call:get_time{{zone:{q}CET{q}}}<tool_call|><|tool_response>");
    assert_eq!(
        g.run(tools.clone(), &two),
        out(
            "",
            "Checking.",
            &[("get_weather", args), ("get_time", json!({"zone": "CET"}))]
        )
    );
    let empty = "<|tool_call>call:get_time{}<tool_call|>";
    assert_eq!(
        g.run(tools.clone(), empty),
        out("", "", &[("get_time", json!({}))])
    );
    // Under `auto`, a bare word where a value should be (llama.cpp refuses it too) is content.
    let bare = "<|tool_call>call:get_time{zone:CET}<tool_call|>";
    assert_eq!(g.run(tools, bare), out("", bare, &[]));
    // Forced calls are planned with a grammar over the real vocabulary.
    let forced = g.plan(json!({"tools": [weather(), time()], "tool_choice": "required"}));
    assert!(forced.prompt().is_constrained());
}

/// A conversation with calls, results and earlier reasoning renders for both families (the template
/// fixtures check the exact text against transformers).
#[test]
fn histories_with_calls_render() {
    let history = json!({"tools": [weather()], "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "reasoning_content": "Use the tool.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
             "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 22}"},
    ]});
    let q = qwen35().plan(history.clone());
    assert!(
        q.text().contains(
            "<think>\nUse the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n\
             </parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n\
             <tool_response>\n{\"temp\": 22}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
        ),
        "{}",
        q.text()
    );
    let g = gemma4().plan(history);
    assert!(
        g.text().ends_with(
            "<|turn>model\n<|channel>thought\nUse the tool.\n<channel|><|tool_call>call:get_weather{city:<|\"|>Paris\
             <|\"|>,days:1}<tool_call|><|tool_response>response:get_weather{value:<|\"|>{\"temp\": 22}<|\"|>}\
             <tool_response|>"
        ),
        "{}",
        g.text()
    );
}
