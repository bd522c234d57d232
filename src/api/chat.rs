//! Validation of chat requests: the message list, tools, `tool_choice`, `response_format` and logprobs.
//! Shared fields go through [`super::validate`].

use super::error::ApiError;
use super::request::*;
use super::validate::{
    Common, DEFAULT_CHAT_MAX_TOKENS, MAX_TOP_LOGPROBS, ModelSpec, ValidChat, check_name, common, positive,
};

/// Validates a chat request against the loaded model.
pub fn validate_chat(mut req: ChatCompletionRequest, spec: &ModelSpec) -> Result<ValidChat, ApiError> {
    let max_tokens = positive("max_tokens", req.max_tokens)?;
    let max_completion_tokens = positive("max_completion_tokens", req.max_completion_tokens)?;
    // Both are upper bounds; honouring both means the smaller.
    let max_tokens = match (max_tokens, max_completion_tokens) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let common: Common = common(req.shared(), max_tokens, DEFAULT_CHAT_MAX_TOKENS, spec)?;
    refuse_unsupported(&req)?;
    check_messages(&req.messages, spec)?;

    let logprobs = match (req.logprobs, req.top_logprobs) {
        (_, Some(k)) if !(0..=MAX_TOP_LOGPROBS as i64).contains(&k) => {
            return Err(ApiError::invalid(
                "top_logprobs",
                format!("`top_logprobs` must be in 0..={MAX_TOP_LOGPROBS}, got {k}"),
            ));
        }
        (Some(true), k) => Some(k.unwrap_or(0) as usize),
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` requires `logprobs: true`",
            ));
        }
        (_, None) => None,
    };

    let tools: Vec<FunctionDefinition> = req
        .tools
        .take()
        .into_iter()
        .flatten()
        .map(|t| t.function)
        .collect();
    for (i, f) in tools.iter().enumerate() {
        check_name(&format!("tools[{i}].function.name"), &f.name)?;
        if tools[..i].iter().any(|g| g.name == f.name) {
            return Err(ApiError::invalid(
                &format!("tools[{i}].function.name"),
                format!("`tools[{i}].function.name` {:?} is defined twice", f.name),
            ));
        }
    }
    let tool_choice = match &req.tool_choice {
        None if tools.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(ToolChoice::Required) if tools.is_empty() => {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice: \"required\"` needs `tools`",
            ));
        }
        Some(ToolChoice::Function(name)) if !tools.iter().any(|f| &f.name == name) => {
            return Err(ApiError::invalid(
                "tool_choice.function.name",
                format!("`tool_choice.function.name` {name:?} is not one of `tools`"),
            ));
        }
        Some(choice) => choice.clone(),
    };

    let response_format = req.response_format.take().unwrap_or(ResponseFormat::Text);
    if let ResponseFormat::JsonSchema { json_schema } = &response_format {
        let name = json_schema
            .name
            .as_deref()
            .ok_or_else(|| ApiError::missing("response_format.json_schema.name"))?;
        check_name("response_format.json_schema.name", name)?;
        if json_schema.schema.is_none() {
            return Err(ApiError::missing("response_format.json_schema.schema"));
        }
    }

    Ok(ValidChat {
        common,
        messages: req.messages,
        logprobs,
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        response_format,
        reasoning_effort: req.reasoning_effort,
    })
}

fn refuse_unsupported(req: &ChatCompletionRequest) -> Result<(), ApiError> {
    let set = |v: &Option<serde_json::Value>| v.as_ref().is_some_and(|v| !v.is_null());
    let fields = [
        ("audio", &req.audio, "audio output is not implemented"),
        (
            "prediction",
            &req.prediction,
            "predicted outputs are not implemented",
        ),
        (
            "web_search_options",
            &req.web_search_options,
            "there is no web search in the browser engine",
        ),
        ("functions", &req.functions, "use `tools`"),
        ("function_call", &req.function_call, "use `tool_choice`"),
        ("verbosity", &req.verbosity, "output verbosity is not implemented"),
    ];
    if let Some((name, _, why)) = fields.into_iter().find(|(_, v, _)| set(v)) {
        return Err(ApiError::unsupported(name, why));
    }
    if let Some(m) = req.modalities.as_ref().filter(|m| m.iter().any(|m| m != "text")) {
        return Err(ApiError::unsupported(
            "modalities",
            &format!("only [\"text\"] can be served, got {m:?}"),
        ));
    }
    Ok(())
}

fn check_messages(messages: &[Message], spec: &ModelSpec) -> Result<(), ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` must not be empty"));
    }
    for (i, m) in messages.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].{field}");
        let only = |field: &str, roles: &str| {
            ApiError::invalid(
                &at(field),
                format!("`{}` is only allowed on {roles} messages", at(field)),
            )
        };
        if m.tool_calls.is_some() && m.role != Role::Assistant {
            return Err(only("tool_calls", "assistant"));
        }
        if (m.reasoning_content.is_some() || m.reasoning.is_some()) && m.role != Role::Assistant {
            let field = if m.reasoning_content.is_some() {
                "reasoning_content"
            } else {
                "reasoning"
            };
            return Err(only(field, "assistant"));
        }
        if m.refusal.is_some() && m.role != Role::Assistant {
            return Err(only("refusal", "assistant"));
        }
        if m.tool_call_id.is_some() && m.role != Role::Tool {
            return Err(only("tool_call_id", "tool"));
        }
        if m.role == Role::Tool && m.tool_call_id.is_none() {
            return Err(ApiError::missing(&at("tool_call_id")));
        }
        let has_calls = m.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
        match &m.content {
            None if m.role == Role::Assistant && has_calls => {}
            None => return Err(ApiError::missing(&at("content"))),
            Some(Content::Text(_)) => {}
            Some(Content::Parts(parts)) => check_parts(i, m.role, parts, spec)?,
        }
        for (j, call) in m.tool_calls.iter().flatten().enumerate() {
            check_name(
                &at(&format!("tool_calls[{j}].function.name")),
                &call.function.name,
            )?;
        }
    }
    Ok(())
}

fn check_parts(i: usize, role: Role, parts: &[ContentPart], spec: &ModelSpec) -> Result<(), ApiError> {
    if parts.is_empty() {
        return Err(ApiError::invalid(
            &format!("messages[{i}].content"),
            format!("`messages[{i}].content` must not be an empty array"),
        ));
    }
    for (j, part) in parts.iter().enumerate() {
        let (kind, served) = match part {
            ContentPart::Text { .. } => continue,
            ContentPart::ImageUrl { .. } => ("image_url", spec.images),
            ContentPart::VideoUrl { .. } => ("video_url", spec.video),
        };
        let param = format!("messages[{i}].content[{j}].{kind}");
        if role != Role::User {
            return Err(ApiError::invalid(
                &param,
                format!("`{param}`: only user messages may carry {kind} parts"),
            ));
        }
        if !served {
            let what = if kind == "image_url" { "images" } else { "video" };
            return Err(ApiError::cannot_serve(
                Some(&param),
                "unsupported_content",
                format!(
                    "`{param}`: the model `{}` is text-only and cannot read {what}",
                    spec.id
                ),
            ));
        }
    }
    Ok(())
}
