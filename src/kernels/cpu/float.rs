//! F32, F16 and BF16 weights. Decode (fewer than [`super::panel::ROWS_FROM`] activation rows): each row
//! widened to f32 once per call, then f32 dot products against up to four activation rows at a time, eight
//! independent lanes per row (f32 sums are not reassociated by the compiler, so the lanes are what lets it
//! vectorize; they are summed pairwise at the end). Prefill (an encoder's 1024 patches, a prompt): panels
//! of rows widened to f32 and multiplied by `gemm` ([`super::panel`]), as the quantized formats do.
//!
//! [`matmul_f32`] is the same kernel on f32 weights already in memory: the baseline the quantized kernels
//! are measured against.

use super::f16_bits_to_f32;

/// Activation rows taken together against one weight row (each weight vector loaded once for four).
const ROWS: usize = 4;

/// Lanes of each running sum.
const L: usize = 8;

/// Little-endian f32.
#[inline(always)]
pub fn f32_le(b: &[u8; 4]) -> f32 {
    f32::from_le_bytes(*b)
}

/// Little-endian f16, widened exactly.
#[inline(always)]
pub fn f16_le(b: &[u8; 2]) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes(*b))
}

/// Little-endian bf16, widened exactly.
#[inline(always)]
pub fn bf16_le(b: &[u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16)
}

#[inline(always)]
fn hsum(v: [f32; L]) -> f32 {
    ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
}

/// `Σ_k w[k]·x_r[k]` for `R` rows `x_r = x[(r0 + r)·k..]`.
#[inline(always)]
fn dot_rows<const R: usize>(w: &[f32], x: &[f32], k: usize, r0: usize) -> [f32; R] {
    let xs: [&[f32]; R] = core::array::from_fn(|i| &x[(r0 + i) * k..(r0 + i + 1) * k]);
    let mut acc = [[0.0f32; L]; R];
    let (wc, wt) = w.as_chunks::<L>();
    for (c, wc) in wc.iter().enumerate() {
        for (acc, x) in acc.iter_mut().zip(&xs) {
            let xc = &x[c * L..c * L + L];
            for i in 0..L {
                acc[i] += wc[i] * xc[i];
            }
        }
    }
    let t0 = k - wt.len();
    core::array::from_fn(|r| {
        let tail: f32 = wt.iter().zip(&xs[r][t0..]).map(|(a, b)| a * b).sum();
        hsum(acc[r]) + tail
    })
}

/// See [`super::matmul`] for weights of `B`-byte elements widened by `widen`.
#[inline(always)]
pub fn matmul_bytes<const B: usize>(
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    widen: impl Fn(&[u8; B]) -> f32,
) {
    if m >= super::panel::ROWS_FROM {
        let mut decode = Widen::<B, _>(widen);
        super::panel::matmul(w, k * B, n, k, x, m, y, &mut decode);
        return;
    }
    let mut row = vec![0.0f32; k];
    let (elems, _) = w.as_chunks::<B>();
    for (col, wrow) in elems.chunks_exact(k).take(n).enumerate() {
        for (o, b) in row.iter_mut().zip(wrow) {
            *o = widen(b);
        }
        store_col(&row, x, k, m, n, col, y);
    }
}

/// Weight rows of `B`-byte floats widened to f32 for the prefill panels ([`super::panel`]).
struct Widen<const B: usize, F>(F);

impl<const B: usize, F: Fn(&[u8; B]) -> f32> super::panel::DecodeRow for Widen<B, F> {
    #[inline(always)]
    fn decode_row(&mut self, row: &[u8], out: &mut [f32]) {
        for (o, b) in out.iter_mut().zip(row.as_chunks::<B>().0) {
            *o = (self.0)(b);
        }
    }
}

/// The plain f32 kernel: `y[m, n] = x · wᵀ` for `w` of `n × k` f32 (the baseline of the benchmarks).
/// Dispatched to AVX2 + FMA on x86_64 as [`super::matmul`] is.
pub fn matmul_f32(w: &[f32], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    debug_assert!(w.len() == n * k && x.len() == m * k);
    let mut y = vec![0.0; m * n];
    if k == 0 {
        return y;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: `f32_avx2` only requires AVX2 and FMA, which the CPU has (checked just above).
        unsafe { f32_avx2(w, n, k, x, m, &mut y) };
        return y;
    }
    f32_into(w, n, k, x, m, &mut y);
    y
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn f32_avx2(w: &[f32], n: usize, k: usize, x: &[f32], m: usize, y: &mut [f32]) {
    f32_into(w, n, k, x, m, y);
}

#[inline(always)]
fn f32_into(w: &[f32], n: usize, k: usize, x: &[f32], m: usize, y: &mut [f32]) {
    for (col, wrow) in w.chunks_exact(k).take(n).enumerate() {
        store_col(wrow, x, k, m, n, col, y);
    }
}

/// Column `col` of `y` from the f32 weight row `w`.
#[inline(always)]
fn store_col(w: &[f32], x: &[f32], k: usize, m: usize, n: usize, col: usize, y: &mut [f32]) {
    let mut r0 = 0;
    while r0 + ROWS <= m {
        for (i, v) in dot_rows::<ROWS>(w, x, k, r0).into_iter().enumerate() {
            y[(r0 + i) * n + col] = v;
        }
        r0 += ROWS;
    }
    for r in r0..m {
        y[r * n + col] = dot_rows::<1>(w, x, k, r)[0];
    }
}
