//! Any bytes that are JSON go through parse + validate of both endpoints; a panic is a finding, and every
//! refusal must be a well-formed OpenAI error.
#![no_main]

use kiln::api::{ApiError, ModelSpec, chat_request, completion_request};
use libfuzzer_sys::fuzz_target;

fn check(result: Result<(), ApiError>) {
    if let Err(e) = result {
        assert!(matches!(e.status(), 400 | 404 | 422));
        serde_json::to_string(&e.body()).expect("error body serialises");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let spec = ModelSpec { id: "m".into(), context_length: 64, vocab_size: 100, images: false, video: false };
    check(chat_request(body.clone(), &spec).map(|_| ()));
    check(completion_request(body, &spec).map(|_| ()));
});
