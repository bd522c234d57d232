//! OpenAI's response schemas (`tests/fixtures/openai-response-schemas.json`, extracted from
//! `shared/spec/openai-openapi.json` by `tests/fixtures/extract_openai_schemas.py`), shared by the tests that
//! check built shapes (`api_schemas.rs`) and generated ones (`generation.rs`).

use serde_json::{Value, json};

pub fn validator(root: &str) -> jsonschema::Validator {
    let text = include_str!("../fixtures/openai-response-schemas.json");
    let mut schema: Value = serde_json::from_str(text).expect("schema JSON");
    // One documented gap in OpenAI's schema: with `echo` and `logprobs`, the API returns `null` as the first
    // prompt token's logprob and top alternatives (it has no context), which the schema's item types omit.
    let lp = &mut schema["$defs"]["CreateCompletionResponse"]["properties"]["choices"]["items"]["properties"]
        ["logprobs"]["anyOf"][0]["properties"];
    for key in ["token_logprobs", "top_logprobs"] {
        let item = lp[key]["items"].take();
        lp[key]["items"] = json!({"anyOf": [item, {"type": "null"}]});
    }
    schema["$ref"] = json!(format!("#/$defs/{root}"));
    jsonschema::validator_for(&schema).expect("schema compiles")
}

/// Fails listing every schema violation of `instance` against `$defs/<root>`.
pub fn assert_valid(root: &str, instance: &impl serde::Serialize) {
    let value = serde_json::to_value(instance).unwrap();
    let v = validator(root);
    let errors: Vec<String> = v
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{root}: {value:#}\n{}", errors.join("\n"));
}
