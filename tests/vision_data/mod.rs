//! The source images of the vision fixtures (`make_resize_golden.py`, `make_preprocess_golden.py`)
//! rebuilt from their recipes, and the fixtures' encodings: what `vision_resize.rs` and
//! `vision_preprocess.rs` share.

use base64::Engine as _;
use serde_json::Value;

/// Standard base64 (with padding), as Python's `base64.b64encode`.
pub fn base64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|e| panic!("not base64: {e}"))
}

fn xorshift32(mut state: u32) -> u32 {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    state
}

/// The scripts' `pattern`: byte `(ax·x + ay·y + 85·c + (r >> (32 − noise_bits))) & 0xff`, one
/// xorshift32 draw `r` per byte.
pub fn pattern(
    width: usize,
    height: usize,
    channels: usize,
    seed: u32,
    (ax, ay): (usize, usize),
    noise_bits: u32,
) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(width * height * channels);
    for y in 0..height {
        for x in 0..width {
            for c in 0..channels {
                state = xorshift32(state);
                let noise = (state >> (32 - noise_bits)) as usize;
                out.push(((ax * x + ay * y + 85 * c + noise) & 0xff) as u8);
            }
        }
    }
    out
}

/// The 32-bit FNV-1a hash the scripts record of each source, to check its recipe.
pub fn fnv1a(data: &[u8]) -> u32 {
    data.iter()
        .fold(0x811c_9dc5, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

pub fn usize_of(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}")) as usize
}
