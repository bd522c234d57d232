//! Requests → prompt token ids: chat messages rendered through the model's template, completion prompts
//! tokenised (or taken as given when they are token ids).

use crate::api::request::{Message, Role};
use crate::api::unions::{Content, ContentPart};
use crate::tokenizer::{ModelTokenizer, TemplateInputs, TokenizerError};

/// A message as chat templates see it: `role`, `content` as one string (text parts concatenated), and
/// `name`, `tool_calls` (arguments parsed back into objects, as transformers expects), `tool_call_id`,
/// `reasoning_content` when present.
pub fn template_message(m: &Message) -> serde_json::Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let content = match &m.content {
        None => serde_json::Value::Null,
        Some(Content::Text(t)) => t.clone().into(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<String>()
            .into(),
    };
    let mut out = serde_json::Map::new();
    out.insert("role".into(), role.into());
    out.insert("content".into(), content);
    if let Some(name) = &m.name {
        out.insert("name".into(), name.clone().into());
    }
    if let Some(calls) = &m.tool_calls {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                    .unwrap_or_else(|_| c.function.arguments.clone().into());
                serde_json::json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": args},
                })
            })
            .collect();
        out.insert("tool_calls".into(), calls.into());
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), id.clone().into());
    }
    if let Some(r) = m.reasoning_content.as_ref().or(m.reasoning.as_ref()) {
        out.insert("reasoning_content".into(), r.clone().into());
    }
    serde_json::Value::Object(out)
}

/// The chat prompt for `messages`, ending with the assistant's generation prompt.
pub fn chat_prompt(
    tokenizer: &ModelTokenizer,
    messages: &[Message],
) -> Result<(String, Vec<u32>), TokenizerError> {
    render(
        tokenizer,
        TemplateInputs {
            messages: messages.iter().map(template_message).collect(),
            add_generation_prompt: true,
            ..TemplateInputs::default()
        },
    )
}

/// Renders and tokenises `inputs` exactly as transformers would; where that fails and an assistant message
/// has `content: null` (OpenAI's shape for a reply that is only tool calls), renders again with `""` in its
/// place, as llama.cpp does: templates such as Qwen3's concatenate `content` without checking for null.
pub fn render(
    tokenizer: &ModelTokenizer,
    inputs: TemplateInputs,
) -> Result<(String, Vec<u32>), TokenizerError> {
    let null_content = |m: &serde_json::Value| {
        m["role"] == "assistant" && m.get("content").is_some_and(serde_json::Value::is_null)
    };
    if !inputs.messages.iter().any(null_content) {
        return tokenizer.chat_prompt(inputs);
    }
    let mut retry = inputs.clone();
    let first = match tokenizer.chat_prompt(inputs) {
        Ok(out) => return Ok(out),
        Err(e) => e,
    };
    for m in retry.messages.iter_mut().filter(|m| null_content(m)) {
        m["content"] = "".into();
    }
    tokenizer.chat_prompt(retry).map_err(|_| first)
}
