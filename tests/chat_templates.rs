//! kiln's chat template rendering is byte-identical to transformers' `apply_chat_template` on the real
//! templates llama.cpp ships. The references are `tests/fixtures/templates/renderings.json`, made by
//! `make_renderings.py` next to it; the templates come from `cargo xtask fetch` into `$KILN_CACHE` (default
//! `<repo>/.cache/kiln`) and are never committed. A missing template fails the test.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

mod data;

use data::cache;
use kiln::tokenizer::{ChatTemplate, TemplateInputs};
use serde_json::Value;

const RENDERINGS: &str = include_str!("fixtures/templates/renderings.json");

/// The families every run must cover (file names in the template folder).
const REQUIRED: &[&str] = &[
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "Qwen3.5-4B.jinja",
    "google-gemma-4-31B-it.jinja",
    "LFM2.5-Instruct.jinja",
];

/// Where `expected` and `got` first differ, with a little context around that byte.
fn diff_hint(expected: &str, got: &str) -> String {
    let at = expected
        .bytes()
        .zip(got.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(got.len()));
    let around = |s: &str| {
        let mut lo = at.saturating_sub(40);
        while !s.is_char_boundary(lo) {
            lo -= 1;
        }
        let mut hi = (at + 40).min(s.len());
        while !s.is_char_boundary(hi) {
            hi += 1;
        }
        format!("{:?}", &s[lo..hi])
    };
    format!(
        "first difference at byte {at} (lengths {} vs {}):\n      expected …{}…\n      kiln     …{}…",
        expected.len(),
        got.len(),
        around(expected),
        around(got)
    )
}

fn inputs(v: &Value) -> TemplateInputs {
    let str_of = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("inputs.{k}")).to_owned();
    TemplateInputs {
        messages: v["messages"].as_array().expect("inputs.messages").clone(),
        tools: v["tools"].as_array().cloned(),
        add_generation_prompt: v["add_generation_prompt"]
            .as_bool()
            .expect("add_generation_prompt"),
        bos_token: str_of("bos_token"),
        eos_token: str_of("eos_token"),
        extra: v["extra"].as_object().cloned().unwrap_or_default(),
    }
}

#[test]
fn real_templates_render_like_transformers() {
    let doc: Value = serde_json::from_str(RENDERINGS).expect("renderings.json parses");
    let dir = cache().join(doc["template_dir"].as_str().expect("template_dir"));
    let cases = doc["cases"].as_array().expect("cases");
    let excluded = doc["excluded"].as_object().expect("excluded");

    let mut sources = BTreeMap::new();
    let mut missing = BTreeMap::new();
    for case in cases {
        let name = case["template"].as_str().expect("template");
        if !sources.contains_key(name) && !missing.contains_key(name) {
            match std::fs::read_to_string(dir.join(name)) {
                Ok(s) => sources.insert(name.to_owned(), s),
                Err(e) => missing.insert(name.to_owned(), format!("{name}: {e}")),
            };
        }
    }
    assert!(
        missing.is_empty(),
        "{} chat templates are missing from {} — run `cargo xtask fetch` (it downloads them into \
         $KILN_CACHE, default <repo>/.cache/kiln):\n  {}",
        missing.len(),
        dir.display(),
        missing.into_values().collect::<Vec<_>>().join("\n  ")
    );
    for name in REQUIRED {
        assert!(
            sources.contains_key(*name),
            "renderings.json has no cases for required template {name}"
        );
        assert!(
            !excluded.contains_key(*name),
            "required template {name} is excluded"
        );
    }

    let mut failures = Vec::new();
    let mut compiled = BTreeMap::new();
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let scenario = case["scenario"].as_str().expect("scenario");
        let expected = case["expected"].as_str().expect("expected");
        let template = compiled
            .entry(name)
            .or_insert_with(|| ChatTemplate::new(&sources[name]).map_err(|e| e.to_string()));
        let got = match template {
            Ok(t) => t.render(&inputs(&case["inputs"])).map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        match got {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{name} / {scenario}: {}", diff_hint(expected, &got))),
            Err(e) => failures.push(format!("{name} / {scenario}: kiln failed: {e}")),
        }
    }
    data::assert_none(&failures, "chat template renderings vs transformers", cases.len());
    eprintln!(
        "{} renderings of {} templates match transformers byte for byte",
        cases.len(),
        sources.len()
    );
}
