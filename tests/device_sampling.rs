//! Sampling from candidates selected on the device (`engine::runtime::runner::Readout::Top`) against reading
//! every logit back, on native wgpu (lavapipe on CI), through whole requests on the tiny GGUF model
//! (`tests/fixtures/gguf/tiny-llama.gguf`): the same model loaded twice, with device selection for every
//! step it can decide (`SelectOnDevice::Always`; lavapipe's own default is greedy steps only) and off.
//!
//! Greedy, nucleus (`top_p < 1`) with a seed, presence and frequency penalties, `logit_bias` and `n = 2`,
//! and `top_p = 1` (which candidates cannot decide: such a request reads whole rows) give the same
//! tokens both ways; the counters show what each read back. (The only way the two can differ is a nucleus
//! cut or draw within ~1e-5 of a token boundary, from the f32 mass; none of these requests comes near one.)
#![cfg(not(target_arch = "wasm32"))]

use kiln::api::completion_request;
use kiln::api::response::Completion;
use kiln::engine::LoadedModel;
use kiln::engine::runtime::counters;
use kiln::model::SelectOnDevice;
use pollster::block_on;
use serde_json::{Value, json};

fn model(select: bool) -> LoadedModel {
    let gpu = match block_on(kiln::engine::runtime::device::gpu()) {
        Ok(gpu) => gpu,
        Err(e) => panic!("no wgpu adapter ({e}); `cargo xtask setup` installs lavapipe"),
    };
    let mut m = LoadedModel::from_gguf(
        "tiny",
        include_bytes!("fixtures/gguf/tiny-llama.gguf"),
        &gpu.device,
    )
    .expect("the fixture loads");
    // The default: the sort only where it pays, on a GPU; greedy's argmax on software adapters too.
    let default = match gpu.info.device_type.as_str() {
        "Cpu" => SelectOnDevice::Greedy,
        _ => SelectOnDevice::Always,
    };
    assert_eq!(m.decoder.selects_on_device(), default, "{:?}", gpu.info);
    m.decoder.set_select_on_device(match select {
        true => SelectOnDevice::Always,
        false => SelectOnDevice::Never,
    });
    m
}

/// The completion's texts and what it read back.
fn complete(m: &LoadedModel, extra: &Value) -> (Vec<String>, counters::Counts) {
    let mut body = json!({
        "model": "tiny",
        "prompt": "Once upon a time",
        "max_tokens": 20,
        // The special tokens (EOS among them) banned: every choice runs to its budget.
        "logit_bias": {"0": -100, "1": -100, "2": -100},
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let req = completion_request(body, &m.spec()).expect("valid");
    let watch = counters::watch();
    let out: Completion = block_on(m.complete(req).expect("served").collect()).expect("generated");
    let texts = out.choices.iter().map(|c| c.text.clone()).collect();
    (texts, watch.counts())
}

/// What a case reads with device selection on.
enum Expect {
    /// Candidates decide every step: one small read each.
    Decided,
    /// Some steps read the whole rows after their candidates.
    Undecided,
    /// The request reads whole rows only.
    Whole,
}
use Expect::*;

#[test]
fn device_candidates_give_the_tokens_of_whole_rows() {
    let (on, off) = (model(true), model(false));
    let vocab = on.decoder.config.vocab_size as u64;
    let cases = [
        (json!({"temperature": 0}), Decided),
        (
            json!({"temperature": 0.2, "top_p": 0.9, "seed": 11, "n": 2}),
            Decided,
        ),
        (
            json!({"temperature": 0.3, "top_p": 0.6, "seed": 5, "presence_penalty": 0.8,
                   "frequency_penalty": 0.5, "logit_bias": {"0": -100, "1": -100, "2": -100, "40": 3}}),
            Decided,
        ),
        // A hot flat distribution: the nucleus is wider than the candidates, so steps read their rows too.
        (json!({"temperature": 1.5, "top_p": 0.95, "seed": 2}), Undecided),
        // The whole distribution, which candidates cannot decide: every step reads whole rows.
        (json!({"temperature": 1.0, "seed": 3}), Whole),
    ];
    for (extra, expect) in cases {
        let (want, whole) = complete(&off, &extra);
        let (got, counts) = complete(&on, &extra);
        assert_eq!(got, want, "{extra}");
        // One read per step either way (21 steps: the prefill and 20 decode steps, less the last).
        let n = want.len() as u64;
        assert_eq!(whole.reads, 20, "{extra}: reads of whole rows");
        assert_eq!(whole.read_bytes, 4 * vocab * (1 + 19 * n), "{extra}");
        match expect {
            Decided => {
                assert_eq!(counts.reads, 20, "{extra}: reads of candidates");
                assert!(
                    counts.read_bytes * 3 < whole.read_bytes,
                    "{extra}: {} bytes of candidates against {} of rows",
                    counts.read_bytes,
                    whole.read_bytes
                );
            }
            Undecided => assert!(counts.reads > 20, "{extra}: {} reads", counts.reads),
            Whole => assert_eq!(
                (counts.reads, counts.read_bytes),
                (whole.reads, whole.read_bytes),
                "{extra}"
            ),
        }
        assert!(counts.dispatches > 0, "{extra}: wgpu launches are counted");
    }
}
