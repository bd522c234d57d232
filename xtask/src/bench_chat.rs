//! The multi-turn chat workload of `cargo xtask bench` (`kiln-chat`): a [`TURNS`]-turn chat on SmolLM2 in
//! headless Chromium on kiln's CPU backend (`bench/page.js` `benchChat`), each user turn ~60 tokens (45 words
//! of `bench/text.txt`), each answer [`TOKENS`] greedy tokens with the end-of-generation ids biased away. It
//! runs twice on fresh engines: keeping no prefixes (`prefixCacheBytes: 0`: every turn prefills the whole
//! conversation) and with the default prefix cache (a turn prefills only what the earlier turns did not
//! run). This prints each turn's time to the first chunk both ways; nothing asserts on the timings.

use serde_json::Value;

/// Turns of the chat.
pub const TURNS: usize = 10;
/// Tokens of each answer.
pub const TOKENS: usize = 64;

/// The per-turn table of a `benchChat` result (or its error).
pub fn table(chat: &Value) -> String {
    if let Some(e) = chat["error"].as_str() {
        return format!("\nkiln-chat: error: {e}\n");
    }
    let empty = Vec::new();
    let (cold, reuse) = (
        chat["cold"].as_array().unwrap_or(&empty),
        chat["reuse"].as_array().unwrap_or(&empty),
    );
    let ms = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.0}"));
    let mut s = format!(
        "\n{TURNS}-turn chat, kiln CPU backend in Chromium ({TOKENS}-token answers): time to first chunk per turn\n"
    );
    s += "turn | prompt tokens | cached (reuse) | TTFT cold (ms) | TTFT reuse (ms) | reuse / cold\n";
    s += "-----|---------------|----------------|----------------|-----------------|-------------\n";
    for (c, r) in cold.iter().zip(reuse) {
        let ratio = match (c["ttft_ms"].as_f64(), r["ttft_ms"].as_f64()) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.0}%", 100.0 * b / a),
            _ => "-".into(),
        };
        s += &format!(
            "{:>4} | {:>13} | {:>14} | {:>14} | {:>15} | {:>11}\n",
            c["turn"].to_string(),
            c["prompt_tokens"].to_string(),
            r["cached_tokens"].to_string(),
            ms(&c["ttft_ms"]),
            ms(&r["ttft_ms"]),
            ratio
        );
    }
    s += &format!(
        "answers identical with and without reuse: {}\n",
        chat["same_answers"]
    );
    s
}
