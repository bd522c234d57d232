//! Structured outputs: a chat request's `response_format` (`json_object`, `json_schema`) becomes one
//! [`Constraint`] per choice, so that every sampled token keeps the output a prefix of a valid value and
//! the choice can only end once the value is complete. The grammar work is llguidance's (see
//! [`crate::sampling::constrain`]); this module builds the model's token table for it and maps schema
//! errors to OpenAI-shaped 422s naming the field and the unsupported feature.
//!
//! JSON-schema support is llguidance's, strict: `type` (one or several), `enum`, `const`, `anyOf`,
//! `allOf`, `oneOf` where it is equivalent to `anyOf`, local `$ref`/`$defs`, `properties`, `required`,
//! `additionalProperties`, disjoint `patternProperties`, `items`, `prefixItems`, `minItems`/`maxItems`,
//! `minLength`/`maxLength`, `pattern` (no look-around), `format` (date-time, time, date, duration, email,
//! hostname, ipv4, ipv6, uuid, uri), `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`/
//! `multipleOf`; annotations (`title`, `description`, `default`, `examples`) are ignored. Anything else
//! (`not`, `if`/`then`/`else`, `uniqueItems`, `contains`, `dependentRequired`, remote `$ref`, other
//! formats, …) is refused with a 422 naming it, whatever `strict` says: kiln never drops part of a schema
//! silently. Properties come out in the schema's order.

use serde_json::Value;

use crate::api::ApiError;
use crate::api::request::ResponseFormat;
use crate::sampling::constrain::{Constraint, ConstraintError, Vocab};
use crate::tokenizer::ModelTokenizer;

/// The model's tokens as llguidance needs them: each id's bytes, special tokens marked (they can never be
/// part of constrained text), and the end-of-sequence id that ends a complete value. Ids past the
/// tokenizer's (padded embedding rows, up to `model_vocab`) are masked off by the constraint itself.
pub fn vocab(tok: &ModelTokenizer, model_vocab: usize) -> Result<Vocab, ConstraintError> {
    let n = tok.inner.get_vocab_size(true).min(model_vocab);
    let added = tok.inner.get_added_vocabulary().get_added_tokens_decoder();
    let mut tokens = Vec::with_capacity(n);
    let mut special = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let is_special = added.get(&id).is_some_and(|t| t.special) || tok.stop_ids.contains(&id);
        special.push(is_special);
        tokens.push(match added.get(&id) {
            Some(t) if t.special => t.content.clone().into_bytes(),
            _ => tok.token_bytes(id),
        });
    }
    let eos = tok
        .inner
        .token_to_id(&tok.eos_token)
        .filter(|&id| (id as usize) < n)
        .or_else(|| tok.stop_ids.first().copied())
        .ok_or_else(|| ConstraintError::Vocab("the model names no end-of-sequence token".into()))?;
    Vocab::new(tokens, &special, eos)
}

/// A schema or constraint error as the request's error, naming `param`.
pub fn schema_error(param: &str, e: ConstraintError) -> ApiError {
    match e {
        ConstraintError::Unsupported { feature, message } => ApiError::invalid(
            param,
            format!("`{param}` uses `{feature}`, a JSON-schema feature kiln does not support: {message}"),
        ),
        ConstraintError::Schema(message) => {
            ApiError::invalid(param, format!("`{param}` is not a usable JSON schema: {message}"))
        }
        other => ApiError::internal(other.to_string()),
    }
}

/// Builds one choice's constraint; a plan calls it once per choice (a constraint is that choice's parser
/// state, never shared).
pub type MakeConstraint<'a> = Box<dyn Fn() -> Result<Constraint, ApiError> + 'a>;

/// The constraint of a chat request's `response_format`; `None` for plain text.
pub fn response_constraint<'a>(vocab: &'a Vocab, format: &'a ResponseFormat) -> Option<MakeConstraint<'a>> {
    match format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(Box::new(move || {
            Constraint::json_object(vocab).map_err(|e| schema_error("response_format", e))
        })),
        ResponseFormat::JsonSchema { json_schema } => {
            let schema = Value::Object(json_schema.schema.clone().unwrap_or_default());
            Some(Box::new(move || {
                Constraint::json_schema(vocab, &schema)
                    .map_err(|e| schema_error("response_format.json_schema.schema", e))
            }))
        }
    }
}
