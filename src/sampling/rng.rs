//! A small seeded random generator: xoshiro256** seeded through splitmix64 (Blackman & Vigna). Plain Rust,
//! identical on every target, so a seeded request gives the same text natively and in the browser.

/// xoshiro256** state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed`, and for stream `stream` of it (choice `i` of a request uses stream `i`, so the
    /// choices differ but each is reproducible).
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut x = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Self {
            s: [
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
            ],
        }
    }

    /// A seed from the platform's entropy source (`crypto.getRandomValues` in the browser).
    pub fn entropy_seed() -> u64 {
        let mut buf = [0u8; 8];
        if getrandom::fill(&mut buf).is_err() {
            // No entropy source: fall back to the address of a stack value mixed with a constant.
            let local = 0u8;
            return (&local as *const u8 as u64) ^ 0x5851_F42D_4C95_7F2D;
        }
        u64::from_le_bytes(buf)
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn seeded_streams_repeat_and_differ() {
        let first4 = |seed, stream| {
            let mut r = Rng::new(seed, stream);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        let (a, b, c, d) = (first4(7, 0), first4(7, 0), first4(7, 1), first4(8, 0));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        let mut r = Rng::new(1, 0);
        let mean = (0..10_000).map(|_| r.next_f64()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
