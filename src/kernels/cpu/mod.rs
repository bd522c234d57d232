//! Quantized matrix products on the CPU, straight from GGML blocks: `y = x · Wᵀ` with `W` kept in its
//! GGUF storage type, written so LLVM vectorizes it (wasm32 `simd128`, x86 SSE/AVX).
//!
//! Shapes: `x` is `m × k` row-major f32 (the activations, `m` = 1 when decoding, 64…512 when prefilling),
//! `W` is `n` rows of `k` elements (the GGUF tensor of shape `[k, n]` in GGML order, i.e. `n` output
//! features), row `r` at byte `r · row_bytes` with `row_bytes = k / block_elems · block_bytes`; the result is
//! `m × n` row-major f32.
//!
//! The design follows llama.cpp's CPU backend, except for 16-bit rather than 8-bit activations:
//! - Each activation row is quantized once per call to 16 bits ([`act`]): into 32-element blocks with an
//!   f32 scale (plus the block's exact sum for the formats with a minimum) for the 32-element weight formats
//!   ([`q32`]), into super-blocks of 256 (f32 scale, 256 × i16, 16 sums of 16) for the K-quants
//!   ([`kquants`]). The products are integer dot products per block (weight integers × i16 → i32,
//!   `i32x4.dot_i16x8_s` / `pmaddwd`, [`dot`]), scaled per block in f32; minimums go through the
//!   activation block sums.
//! - Why 16 bits: llama.cpp's 8-bit activations (`Q8_0`/`Q8_K`) put logits of our test models up to 0.25
//!   off the f32 path, enough for greedy decoding to diverge from the WebGPU backend within a few tokens.
//!   The 128-bit SIMD multiply-add is i16 × i16 → i32 either way, so the weights are widened to i16
//!   regardless; i16 activations take the same number of multiply-adds, drop the widening of the
//!   activation side, and cut the error 258-fold, to about the f32 rounding of the rest. The costs are twice
//!   the activation bytes (a 576-element row is 1.1 KiB, in L1 still) and, for the K-quants, sub-block
//!   scales applied in f32 instead of i32 (an i32 sum over a super-block could overflow: see
//!   [`kquants`]).
//! - Decode (fewer than 4 activation rows): each weight block is decoded in registers and dotted with each
//!   row ("fused"; the 32-element formats everywhere, on wasm four blocks' f16 scales widened at once;
//!   `Q4_K`/`Q6_K` on wasm; the other K-quants, and all of them natively, decode each weight row once into
//!   i16 values plus scales and dot every activation row with it).
//! - Prefill (4 rows or more, [`panel`]): the integer products would pay an f32 conversion and scaling per
//!   block of every output and, natively, run at half the width of FMA; instead a panel of weight rows is
//!   dequantised to f32 at a time and multiplied by `gemm` (burn-flex's own f32 matmul, packed and
//!   register-blocked) with the f32 activations: the dense f32 path's speed plus one decode per weight
//!   element per call, without holding more than a panel of f32 weights.
//! - F32/F16/BF16 weights are widened a row at a time and take f32 dot products, four activation rows per
//!   pass over a weight row ([`float`]), at any `m`.
//! - On x86_64 the same code is also compiled for AVX2 + FMA and chosen at run time (native builds target
//!   SSE2); on wasm32 `simd128` intrinsics replace the loops LLVM does not vectorize well there. No
//!   allocation per block.
//! - Threads (the `threads` feature, [`split`]): the output features are split into one range of weight
//!   rows per thread of rayon's pool, each range the single-threaded kernel above; without the feature
//!   (the default wasm build) everything runs on the calling thread.
//!
//! Accuracy: the 16-bit activations (decode only) are the only approximation beyond f32 rounding; an
//! output deviates from
//! the exact `dequantize(W) · x` by at most `Σ_k |w_k| · amax(x-block of k) / 65534` (half a quantization
//! step per element) plus f32 rounding, see `tests/kernels_cpu.rs`.

pub mod act;
pub mod activation;
pub mod attention;
pub mod delta;
pub mod dot;
pub mod float;
pub mod kquants;
pub mod panel;
pub mod q32;
pub mod rows;
pub mod split;
pub mod team;

use crate::loader::quant::{BlockFormat, GgmlType, float as fmt, iq, k_high, k_low, legacy};

/// Whether [`matmul`] computes products for weights stored as `ty`.
pub fn supports(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | IQ4_NL
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_XS
    )
}

/// `y[m, n] = Σ_k x[m, k] · W[n, k]`. `x`: m × k row-major f32; `w`: n rows of k elements stored as GGML
/// blocks (row r at byte r * row_bytes, row_bytes = k / block_elems * block_bytes); returns m × n row-major.
///
/// Callers guarantee `k % ty.block_elems() == 0`, `w.len() == n * row_bytes` and `x.len() == m * k`
/// (checked in debug builds); a type [`supports`] rejects yields zeros.
pub fn matmul(ty: GgmlType, w: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    debug_assert!(
        k.is_multiple_of(ty.block_elems()),
        "k = {k} is not a whole number of {ty:?} blocks"
    );
    debug_assert_eq!(
        w.len(),
        n * (k / ty.block_elems()) * ty.block_bytes(),
        "{ty:?} weight bytes"
    );
    debug_assert_eq!(x.len(), m * k, "activation length");
    let mut y = vec![0.0; m * n];
    if m == 0 || n == 0 || k == 0 {
        return y;
    }
    #[cfg(feature = "threads")]
    let threads = split::threads();
    #[cfg(feature = "threads")]
    if let Some(rows) = split::range_rows(threads, n, k, m) {
        // Quantized once here, read by every range.
        let act = prepare(ty, x, m, k);
        split::matmul(ty, w, n, k, m, &mut y, rows, threads - 1, &|w, n, y| {
            one_thread(ty, w, n, k, x, &act, m, y)
        });
        return y;
    }
    one_thread(ty, w, n, k, x, &prepare(ty, x, m, k), m, &mut y);
    y
}

/// [`matmul`] of each weight of `parts` (all `k` wide) by the same `x` (`m × k`). In the threaded build a
/// decode step's products (`m = 1`) run in one team run ([`split::matmul_many`]); otherwise, and for
/// prefill, one [`matmul`] after another. Either way each result is [`matmul`]'s, bit for bit.
pub fn matmul_many(parts: &[split::Part<'_>], k: usize, x: &[f32], m: usize) -> Vec<Vec<f32>> {
    #[cfg(feature = "threads")]
    if m == 1
        && x.len() == k
        && let Some(ys) = split::matmul_many(parts, k, x)
    {
        return ys;
    }
    parts.iter().map(|p| matmul(p.ty, p.w, p.n, k, x, m)).collect()
}

/// The activations the kernels of `ty` read for `m` rows of `x` (`m × k`): quantized to 16 bits for the
/// decode path of the quantized formats, else `x` as it is ([`act::Prepared`]).
pub fn prepare(ty: GgmlType, x: &[f32], m: usize, k: usize) -> act::Prepared {
    use GgmlType::*;
    match ty {
        Q4_0 => q32::prepare::<{ legacy::Q4_0::BYTES }, q32::Q4_0>(x, m, k),
        Q4_1 => q32::prepare::<{ legacy::Q4_1::BYTES }, q32::Q4_1>(x, m, k),
        Q5_0 => q32::prepare::<{ legacy::Q5_0::BYTES }, q32::Q5_0>(x, m, k),
        Q5_1 => q32::prepare::<{ legacy::Q5_1::BYTES }, q32::Q5_1>(x, m, k),
        Q8_0 => q32::prepare::<{ legacy::Q8_0::BYTES }, q32::Q8_0>(x, m, k),
        IQ4_NL => q32::prepare::<{ iq::IQ4_NL::BYTES }, q32::IQ4_NL>(x, m, k),
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS => kquants::prepare(x, m, k),
        _ => act::Prepared::F32,
    }
}

/// [`matmul`] on the calling thread over activations from [`prepare`], into a zeroed `y`: the AVX2 + FMA
/// build of the kernels where the CPU has them (x86_64), the baseline one otherwise.
#[allow(clippy::too_many_arguments, reason = "the product's shape and its operands")]
fn one_thread(
    ty: GgmlType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    act: &act::Prepared,
    m: usize,
    y: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: `matmul_avx2` only requires AVX2 and FMA, which the CPU has (checked just above).
        unsafe { matmul_avx2(ty, w, n, k, x, act, m, y) };
        return;
    }
    matmul_into(ty, w, n, k, x, act, m, y);
}

/// [`matmul_into`] compiled for AVX2 + FMA (native x86_64 builds target SSE2 only; burn-flex's gemm
/// dispatches the same way). The same code: only the instruction selection differs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments, reason = "the product's shape and its operands")]
fn matmul_avx2(
    ty: GgmlType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    act: &act::Prepared,
    m: usize,
    y: &mut [f32],
) {
    matmul_into(ty, w, n, k, x, act, m, y);
}

/// The body of [`matmul`], into a zeroed `y`.
#[inline(always)]
#[allow(clippy::too_many_arguments, reason = "the product's shape and its operands")]
fn matmul_into(
    ty: GgmlType,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    act: &act::Prepared,
    m: usize,
    y: &mut [f32],
) {
    use kquants::{FUSED_Q4_K, FUSED_Q6_K, decode_iq4_xs, decode_q2_k, decode_q3_k, decode_q4_k};
    use kquants::{decode_q5_k, decode_q6_k, matmul_with as k_with};
    use q32::matmul_with as q_with;
    let y = &mut *y;
    match ty {
        GgmlType::F32 => float::matmul_bytes::<{ fmt::F32::BYTES }>(w, n, k, x, m, y, float::f32_le),
        GgmlType::F16 => float::matmul_bytes::<{ fmt::F16::BYTES }>(w, n, k, x, m, y, float::f16_le),
        GgmlType::BF16 => float::matmul_bytes::<{ fmt::BF16::BYTES }>(w, n, k, x, m, y, float::bf16_le),
        GgmlType::Q4_0 => q_with::<{ legacy::Q4_0::BYTES }, q32::Q4_0>(w, n, k, x, act, m, y),
        GgmlType::Q4_1 => q_with::<{ legacy::Q4_1::BYTES }, q32::Q4_1>(w, n, k, x, act, m, y),
        GgmlType::Q5_0 => q_with::<{ legacy::Q5_0::BYTES }, q32::Q5_0>(w, n, k, x, act, m, y),
        GgmlType::Q5_1 => q_with::<{ legacy::Q5_1::BYTES }, q32::Q5_1>(w, n, k, x, act, m, y),
        GgmlType::Q8_0 => q_with::<{ legacy::Q8_0::BYTES }, q32::Q8_0>(w, n, k, x, act, m, y),
        GgmlType::IQ4_NL => q_with::<{ iq::IQ4_NL::BYTES }, q32::IQ4_NL>(w, n, k, x, act, m, y),
        GgmlType::Q2_K => k_with::<{ k_low::Q2_K::BYTES }>(w, n, k, x, act, m, y, decode_q2_k, None),
        GgmlType::Q3_K => k_with::<{ k_low::Q3_K::BYTES }>(w, n, k, x, act, m, y, decode_q3_k, None),
        GgmlType::Q4_K => k_with::<{ k_high::Q4_K::BYTES }>(w, n, k, x, act, m, y, decode_q4_k, FUSED_Q4_K),
        GgmlType::Q5_K => k_with::<{ k_high::Q5_K::BYTES }>(w, n, k, x, act, m, y, decode_q5_k, None),
        GgmlType::Q6_K => k_with::<{ k_high::Q6_K::BYTES }>(w, n, k, x, act, m, y, decode_q6_k, FUSED_Q6_K),
        GgmlType::IQ4_XS => k_with::<{ iq::IQ4_XS::BYTES }>(w, n, k, x, act, m, y, decode_iq4_xs, None),
        #[allow(unreachable_patterns)]
        _ => {}
    }
}

/// The f16 bytes at `b[0..2]` (little-endian) as f32, exactly, branch-free so that loops of it vectorize:
/// the 15 magnitude bits shifted into an f32 and rescaled by 2¹¹² handle normals and subnormals; inf/NaN
/// are patched.
#[inline(always)]
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let em = u32::from(h & 0x7fff);
    let v = f32::from_bits(em << 13) * f32::from_bits(0x7780_0000);
    let v = if em >= 0x7c00 {
        f32::from_bits((em << 13) | 0x7f80_0000)
    } else {
        v
    };
    f32::from_bits(v.to_bits() | sign)
}

/// The little-endian f16 at `b[i..i + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}
