//! Pillow's image resampling and transformers' RGBA-to-RGB conversion, for the image processors of
//! vision-language models (SmolVLM/Idefics3 resizes with LANCZOS, Gemma 3 with BILINEAR, both through
//! `PIL.Image.resize` in transformers' PIL backend), so that kiln sees the pixels transformers sees.
//!
//! # What it reproduces
//!
//! - [`resize`]: `Image.resize((width, height), resample)` of an 8-bit RGB image for the
//!   [`Filter`]s BILINEAR, BICUBIC and LANCZOS, as transformers' `image_transforms.resize` calls it:
//!   no `box` and no `reducing_gap` (Pillow's default `reducing_gap` is `None`, so no `reduce()` step
//!   runs first). It follows `src/libImaging/Resample.c` of Pillow 13.0.0 (the PyPI sdist):
//!   `ImagingResampleInner`, `precompute_coeffs`, `normalize_coeffs_8bpc` and the 8-bit horizontal
//!   and vertical passes. Each axis is a 1-D convolution whose filter is stretched by the scale factor
//!   when downsampling; the weights of an output sample are computed in `f64`, normalised to sum 1 and
//!   rounded to fixed point with 22 fractional bits; a pass accumulates `u8 × i32` products in an
//!   `i32` that starts at one half and keeps the integer part clamped to 0..=255, so the first pass's
//!   output is rounded to 8 bits before the second pass reads it. An axis whose size does not change
//!   is not resampled, and an unchanged size is a copy.
//!
//!   The pass order is part of the result and depends on the Pillow version. Pillow 13 runs the
//!   vertical pass first when the height shrinks by more than twice as many pixels as the width does
//!   (`vertical_first`), the horizontal pass first otherwise; this module does the same. Pillow
//!   ≤ 12.1 always runs the horizontal pass first, and Pillow 12.2–12.3 runs the vertical pass first
//!   only for sources more than 100 times taller than wide whose height shrinks. Where the orders
//!   differ, so do the results: by a step or two on smooth images, by up to 25 steps on noise with
//!   BICUBIC or LANCZOS (whose overshoot the intermediate rounding clips). Compare against Pillow 13.
//! - [`rgba_on_white`]: transformers' `convert_to_rgb` of an RGBA image (5.24.0,
//!   `image_transforms.py`). For a PIL image it is `Image.alpha_composite` of the image over an opaque
//!   white RGBA background (Pillow's `AlphaComposite.c`: integer arithmetic with 7 extra bits), then
//!   `convert("RGB")`, which drops the alpha. Its NumPy path for RGBA arrays (`alpha·v + (1 −
//!   alpha)·255`, rounded) gives the same bytes for all 256 × 256 (value, alpha) pairs.
//!
//! # Tolerance
//!
//! Bit for bit. All of it is integer or IEEE `f64` arithmetic in the C code's order (no fused
//! multiply-adds), except LANCZOS's `sin`, which comes from the platform's math library: glibc's on
//! native Linux (the function Pillow's manylinux wheels call), the `libm` port (musl's algorithm)
//! built into std on wasm32. Those may differ in a last bit, which matters only if it moves a weight
//! across a rounding boundary of the 22-bit fixed point (an off-by-one in a few pixels). No such case
//! is known: over 250 million LANCZOS weights (every size pair up to 400 × 400 and common photo and
//! VLM sizes) the two give identical fixed-point weights, and a wasm32 build matched Pillow on about
//! 7000 random resizes. `tests/vision_resize.rs` checks both functions against Pillow 13.0.0
//! (fixture made by `tests/fixtures/make_resize_golden.py`).
//!
//! # Degenerate inputs
//!
//! Pillow refuses a zero-sized target; [`resize`] returns an image of that size with no pixels. A
//! source with no pixels resizes to black, as in Pillow. Pixel data shorter than its dimensions say
//! is read as black (transparent, hence white, for [`rgba_on_white`]) past its end, and data beyond
//! them is ignored; dimensions whose byte count overflows `usize` give an empty source (or, for the
//! target, an empty 0 × 0 image). Neither function panics on its inputs.

use std::borrow::Cow;
use std::f64::consts::PI;

/// Pillow's resampling filters (`PIL.Image.Resampling`) that kiln's processors use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Filter {
    /// `BILINEAR`: the triangle filter, support 1 (Gemma 3).
    Bilinear,
    /// `BICUBIC`: Keys' cubic convolution with `a = -0.5`, support 2.
    Bicubic,
    /// `LANCZOS`: the 3-lobed Lanczos window, support 3 (SmolVLM/Idefics3).
    Lanczos,
}

impl Filter {
    /// The filter's half-width, in source pixels, before it is stretched for downsampling.
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    /// The filter's value at `x` (in units of the possibly stretched filter), written with the same
    /// operations in the same order as Pillow's `bilinear_filter`, `bicubic_filter` and
    /// `lanczos_filter`.
    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// `sin(πx) / (πx)`, 1 at 0, as Pillow's `sinc_filter`.
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * PI;
    x.sin() / x
}

/// An 8-bit RGB image: `height` rows top to bottom, each `width` pixels of 3 bytes (R, G, B), no
/// padding, so `data.len() == width * height * 3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

/// Channels of an [`Rgb8`] pixel.
const CHANNELS: usize = 3;

/// Fractional bits of the fixed-point weights (Pillow's `PRECISION_BITS`, `32 - 8 - 2`: 8 bits of
/// result and 2 of headroom for the negative lobes' overshoot).
const PRECISION_BITS: u32 = 22;

/// One half in the fixed point, the accumulators' start, so that the final shift rounds.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Pillow's `Image.resize((width, height), filter)` of `src` (see the module docs for exactness and
/// degenerate sizes).
#[must_use]
pub fn resize(src: &Rgb8, width: usize, height: usize, filter: Filter) -> Rgb8 {
    let Some(len) = byte_len(width, height, CHANNELS) else {
        // Not addressable: nothing could hold it.
        return Rgb8 {
            width: 0,
            height: 0,
            data: Vec::new(),
        };
    };
    if len == 0 {
        return Rgb8 {
            width,
            height,
            data: Vec::new(),
        };
    }
    let Some(src_len) = byte_len(src.width, src.height, CHANNELS) else {
        // Dimensions that no buffer could match: treated as a source with no pixels.
        return Rgb8 {
            width,
            height,
            data: vec![0; len],
        };
    };
    // The source at exactly its length, zero-padded or cut if need be.
    let pixels = if src.data.len() == src_len {
        Cow::Borrowed(src.data.as_slice())
    } else {
        let mut exact = src.data[..src.data.len().min(src_len)].to_vec();
        exact.resize(src_len, 0);
        Cow::Owned(exact)
    };
    let (w0, h0) = (src.width, src.height);
    if (width, height) == (w0, h0) {
        return Rgb8 {
            width,
            height,
            data: pixels.into_owned(),
        };
    }

    // Each pass rounds its output to 8 bits, so the order matters. (Pillow skips the source rows
    // that the vertical weights never reach when it runs the horizontal pass first; rows are
    // independent, so resampling them all gives the same bytes.)
    let horizontal = |pixels: &[u8], rows| horizontal_pass(pixels, rows, w0, &Kernel::new(w0, width, filter));
    let vertical =
        |pixels: &[u8], columns| vertical_pass(pixels, columns, h0, &Kernel::new(h0, height, filter));
    let data = if vertical_first((w0, h0), (width, height)) {
        let once = vertical(&pixels, w0);
        if width == w0 {
            once
        } else {
            horizontal(&once, height)
        }
    } else if height == h0 {
        horizontal(&pixels, h0)
    } else if width == w0 {
        vertical(&pixels, w0)
    } else {
        vertical(&horizontal(&pixels, h0), width)
    };
    Rgb8 { width, height, data }
}

/// Pillow 13's choice of pass order (`ImagingResampleInner`): the vertical pass runs first when the
/// height shrinks by more than twice as many pixels as the width does, the horizontal pass otherwise.
/// (The order matters: the first pass's output is rounded to 8 bits.)
fn vertical_first((w0, h0): (usize, usize), (width, height): (usize, usize)) -> bool {
    let shrink = |from: usize, to: usize| from as i128 - to as i128;
    let (dx, dy) = (shrink(w0, width), shrink(h0, height));
    dy > 0 && dy > 2 * dx
}

/// transformers' `convert_to_rgb` of an RGBA PIL image: `Image.alpha_composite(white, image)`
/// then `convert("RGB")`. `rgba` holds `height` rows of `width` pixels of 4 bytes (R, G, B, A, not
/// premultiplied).
#[must_use]
pub fn rgba_on_white(width: usize, height: usize, rgba: &[u8]) -> Rgb8 {
    let Some(len) = byte_len(width, height, CHANNELS) else {
        return Rgb8 {
            width: 0,
            height: 0,
            data: Vec::new(),
        };
    };
    let mut data = Vec::with_capacity(len);
    // Missing pixels are transparent, hence white.
    let pixels = rgba
        .chunks_exact(4)
        .map(|p| [p[0], p[1], p[2], p[3]])
        .chain(std::iter::repeat([0; 4]));
    for [r, g, b, a] in pixels.take(len / CHANNELS) {
        data.extend([r, g, b].map(|v| over_white(v, a)));
    }
    Rgb8 { width, height, data }
}

/// One channel of Pillow's `ImagingAlphaComposite` with the destination opaque white and `alpha` the
/// source's alpha. In the C code, with `dst = (255, 255, 255, 255)`: `outa255 = a·255 + 255·(255 −
/// a) = 255²`, so `coef1 = a·255²·2⁷ / 255² = a·2⁷` exactly and `coef2 = (255 − a)·2⁷`; the
/// blend `v·coef1 + 255·coef2` is then divided by 255 (Pillow's `SHIFTFORDIV255`, `((t >> 8) + t) >> 8`,
/// with `2⁷·128` added to round) and shifted back by 7 bits. A transparent source keeps the white.
fn over_white(value: u8, alpha: u8) -> u8 {
    const PRECISION_BITS: u32 = 7;
    if alpha == 0 {
        return 255;
    }
    let (value, alpha) = (u32::from(value), u32::from(alpha));
    let coef1 = alpha << PRECISION_BITS;
    let coef2 = (255 << PRECISION_BITS) - coef1;
    let blend = value * coef1 + 255 * coef2 + (0x80 << PRECISION_BITS);
    let divided = ((blend >> 8) + blend) >> 8;
    // At most 255: the blend is at most 255·255·2⁷ plus the rounding term.
    (divided >> PRECISION_BITS) as u8
}

/// `width · height · channels`, or `None` if that does not fit a `usize`.
fn byte_len(width: usize, height: usize, channels: usize) -> Option<usize> {
    width.checked_mul(height)?.checked_mul(channels)
}

/// The fixed-point weights of a 1-D resampling from `in_size` to `out_size` samples: output sample
/// `i` is `Σ_j weights[offsets[i] + j] · input[first[i] + j]` (a compressed-row layout; Pillow pads
/// every row to the same `ksize` with zeros instead).
struct Kernel {
    first: Vec<usize>,
    offsets: Vec<usize>,
    weights: Vec<i32>,
}

impl Kernel {
    /// Pillow's `precompute_coeffs` over the box `(0, in_size)` followed by `normalize_coeffs_8bpc`.
    fn new(in_size: usize, out_size: usize, filter: Filter) -> Self {
        // Pillow parses the box as C floats, so the extent is an f32 before it becomes a double.
        let (in0, in1) = (0.0_f32, in_size as f32);
        let scale = f64::from(in1 - in0) / out_size as f64;
        // Downsampling stretches the filter over `scale` source pixels; upsampling keeps it.
        let filterscale = if scale < 1.0 { 1.0 } else { scale };
        let support = filter.support() * filterscale;
        let inv_filterscale = 1.0 / filterscale;

        let mut first = Vec::with_capacity(out_size);
        let mut offsets = Vec::with_capacity(out_size + 1);
        let mut weights = Vec::new();
        let mut row = Vec::new();
        offsets.push(0);
        for i in 0..out_size {
            let center = f64::from(in0) + (i as f64 + 0.5) * scale;
            // C's `(int)(v + 0.5)`: truncation toward zero, then clamped to the source.
            let xmin = trunc(center - support + 0.5).max(0);
            let xmax = trunc(center + support + 0.5).min(in_size as i64);
            let count = usize::try_from(xmax - xmin).unwrap_or(0);
            let xmin = usize::try_from(xmin).unwrap_or(0);

            row.clear();
            let mut sum = 0.0;
            for x in xmin..xmin + count {
                // `(x + xmin - center + 0.5) * ss` in C: the integer index first, then the doubles.
                let w = filter.weight((x as f64 - center + 0.5) * inv_filterscale);
                row.push(w);
                sum += w;
            }
            if sum != 0.0 {
                for w in &mut row {
                    *w /= sum;
                }
            }
            weights.extend(row.iter().map(|&w| to_fixed(w)));
            first.push(xmin);
            offsets.push(weights.len());
        }
        Kernel {
            first,
            offsets,
            weights,
        }
    }

    /// Output sample `i`'s first source index and weights.
    fn taps(&self, i: usize) -> (usize, &[i32]) {
        (self.first[i], &self.weights[self.offsets[i]..self.offsets[i + 1]])
    }
}

/// C's `(int)v` for the finite values here: truncation toward zero (saturating, as `as` does).
fn trunc(v: f64) -> i64 {
    v as i64
}

/// A normalised weight in the 22-bit fixed point, rounded half away from zero by truncating
/// `w·2²² ± 0.5`, as `normalize_coeffs_8bpc`.
fn to_fixed(w: f64) -> i32 {
    let scaled = w * f64::from(1_u32 << PRECISION_BITS);
    (if w < 0.0 { -0.5 + scaled } else { 0.5 + scaled }) as i32
}

/// Pillow's `clip8`: the accumulator's integer part (an arithmetic shift, i.e. floor), clamped to
/// 0..=255 (Pillow's lookup table covers −640..=639, which the filters' overshoot stays within).
///
/// The `i32` accumulators cannot overflow: a sample's positive weights sum to at most 1.29·2²² and
/// its negative ones to at least −0.29·2²² (LANCZOS upsampling; BICUBIC 1.13 and −0.13), so a sum
/// stays within ±(255·1.29·2²² + 2²¹) < 2³¹.
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// The horizontal pass (Pillow's `ImagingResampleHorizontal_8bpc`): the `rows` rows of `src`, each
/// `in_width` pixels, resampled to `kernel`'s output width.
fn horizontal_pass(src: &[u8], rows: usize, in_width: usize, kernel: &Kernel) -> Vec<u8> {
    debug_assert_eq!(src.len(), rows * in_width * CHANNELS);
    let in_row = in_width * CHANNELS;
    let out_width = kernel.first.len();
    let mut out = Vec::with_capacity(rows * out_width * CHANNELS);
    for row in 0..rows {
        let row = &src[row * in_row..(row + 1) * in_row];
        for i in 0..out_width {
            let (first, weights) = kernel.taps(i);
            let taps = &row[first * CHANNELS..(first + weights.len()) * CHANNELS];
            let mut acc = [HALF; CHANNELS];
            for (px, &w) in taps.chunks_exact(CHANNELS).zip(weights) {
                for (sum, &v) in acc.iter_mut().zip(px) {
                    *sum += i32::from(v) * w;
                }
            }
            out.extend(acc.map(clip8));
        }
    }
    out
}

/// The vertical pass (Pillow's `ImagingResampleVertical_8bpc`): `src`, `in_height` rows of
/// `columns` pixels, resampled to `kernel`'s output height. Each output row accumulates whole source
/// rows.
fn vertical_pass(src: &[u8], columns: usize, in_height: usize, kernel: &Kernel) -> Vec<u8> {
    debug_assert_eq!(src.len(), columns * in_height * CHANNELS);
    let row_bytes = columns * CHANNELS;
    let out_height = kernel.first.len();
    let mut out = Vec::with_capacity(out_height * row_bytes);
    let mut acc = vec![HALF; row_bytes];
    for i in 0..out_height {
        let (first, weights) = kernel.taps(i);
        acc.fill(HALF);
        for (j, &w) in weights.iter().enumerate() {
            let row = &src[(first + j) * row_bytes..(first + j + 1) * row_bytes];
            for (sum, &v) in acc.iter_mut().zip(row) {
                *sum += i32::from(v) * w;
            }
        }
        out.extend(acc.iter().map(|&sum| clip8(sum)));
    }
    out
}
