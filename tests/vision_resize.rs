//! kiln's Pillow resampling and RGBA-on-white conversion (`model::vision::resize`) against Pillow and
//! transformers.
//!
//! The fixture `tests/fixtures/vision/resize.json` comes from `tests/fixtures/make_resize_golden.py`
//! (its docstring has the recipe of the source images and the versions: Pillow 13.0.0, transformers
//! 5.24.0). Tolerance: **bit-exact** for every output byte of every filter (BILINEAR, BICUBIC,
//! LANCZOS), every size (down, up, one axis only, 1×1 both ways, 37×1000 and 900×2 sources) and for
//! `convert_to_rgb`. Some cases (10×37 → 3×5, 64×48 → 90×7, the 37×1000 ones) are ones where Pillow 13
//! runs the vertical pass before the horizontal one; with the older always-horizontal-first order they
//! would be off by up to 18. The exhaustive check of the alpha blend runs against a literal
//! transcription of Pillow's `ImagingAlphaComposite`.

#![cfg(not(target_arch = "wasm32"))]

use kiln::model::vision::resize::{Filter, Rgb8, resize, rgba_on_white};
use serde_json::Value;
use vision_data::{base64, fnv1a, pattern, usize_of};

mod vision_data;

const FIXTURE: &str = include_str!("fixtures/vision/resize.json");

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).expect("resize.json parses")
}

fn sources(fixture: &Value) -> Vec<(String, Rgb8)> {
    let list = fixture["sources"].as_array().expect("sources");
    list.iter()
        .map(|s| {
            let (width, height) = (usize_of(s, "width"), usize_of(s, "height"));
            let ramp = (usize_of(s, "ax"), usize_of(s, "ay"));
            let data = pattern(
                width,
                height,
                3,
                usize_of(s, "seed") as u32,
                ramp,
                usize_of(s, "noise_bits") as u32,
            );
            let name = s["name"].as_str().expect("name").to_owned();
            assert_eq!(
                u64::from(fnv1a(&data)),
                s["fnv1a"].as_u64().expect("fnv1a"),
                "source {name}: recipe differs"
            );
            (name, Rgb8 { width, height, data })
        })
        .collect()
}

#[test]
fn resize_matches_pillow_bit_for_bit() {
    let fixture = fixture();
    assert_eq!(fixture["pillow"], "13.0.0");
    let sources = sources(&fixture);
    let cases = fixture["resize"].as_array().expect("resize");
    assert!(cases.len() >= 100, "{} cases", cases.len());

    let mut failures = Vec::new();
    for case in cases {
        let name = case["source"].as_str().expect("source");
        let src = &sources.iter().find(|(n, _)| n == name).expect("known source").1;
        let (width, height) = (usize_of(case, "width"), usize_of(case, "height"));
        let filter = match case["filter"].as_str().expect("filter") {
            "bilinear" => Filter::Bilinear,
            "bicubic" => Filter::Bicubic,
            "lanczos" => Filter::Lanczos,
            other => panic!("unknown filter {other}"),
        };
        let want = base64(case["data"].as_str().expect("data"));
        assert_eq!(want.len(), width * height * 3);

        let got = resize(src, width, height, filter);
        assert_eq!(
            (got.width, got.height, got.data.len()),
            (width, height, want.len())
        );
        let diffs: Vec<usize> = (0..want.len()).filter(|&i| got.data[i] != want[i]).collect();
        if let Some(&i) = diffs.first() {
            let max = diffs
                .iter()
                .map(|&i| got.data[i].abs_diff(want[i]))
                .max()
                .unwrap_or(0);
            let (px, c) = (i / 3, i % 3);
            failures.push(format!(
                "{name} -> {width}x{height} {filter:?}: {} bytes differ (max {max}); first at x {} y {} channel {c}: \
                 kiln {} pillow {}",
                diffs.len(),
                px % width,
                px / width,
                got.data[i],
                want[i]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} resizes differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn rgba_on_white_matches_transformers() {
    let fixture = fixture();
    let case = &fixture["rgba_on_white"];
    let (width, height) = (usize_of(case, "width"), usize_of(case, "height"));
    let rgba = base64(case["rgba"].as_str().expect("rgba"));
    let want = base64(case["rgb"].as_str().expect("rgb"));
    // The recipe: colours from the noise stream, alpha the pixel index mod 256 (every alpha occurs).
    let mut recipe = pattern(width, height, 4, 9, (0, 0), 8);
    for (i, px) in recipe.chunks_exact_mut(4).enumerate() {
        px[3] = i as u8;
    }
    assert_eq!(rgba, recipe);

    let got = rgba_on_white(width, height, &rgba);
    assert_eq!((got.width, got.height), (width, height));
    assert_eq!(got.data, want);
}

/// Pillow's `ImagingAlphaComposite` for one channel, transcribed literally (general destination),
/// with `dst` opaque white as transformers' background.
fn pillow_alpha_composite(src: u8, src_a: u8) -> u8 {
    const PRECISION_BITS: u32 = 7;
    let (dst, dst_a) = (255u32, 255u32);
    let (src, src_a) = (u32::from(src), u32::from(src_a));
    if src_a == 0 {
        return dst as u8;
    }
    let shift_for_div255 = |a: u32| ((a >> 8) + a) >> 8;
    let blend = dst_a * (255 - src_a);
    let outa255 = src_a * 255 + blend;
    let coef1 = src_a * 255 * 255 * (1 << PRECISION_BITS) / outa255;
    let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
    let tmp = src * coef1 + dst * coef2;
    (shift_for_div255(tmp + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8
}

#[test]
fn rgba_on_white_is_pillows_blend_for_every_value_and_alpha() {
    // 256x256: x is the colour value (R = x, G = 255 − x, B = x·7 mod 256), y the alpha.
    let mut rgba = Vec::with_capacity(256 * 256 * 4);
    for a in 0..=255u8 {
        for v in 0..=255u8 {
            rgba.extend([v, 255 - v, v.wrapping_mul(7), a]);
        }
    }
    let got = rgba_on_white(256, 256, &rgba);
    for (px, out) in rgba.chunks_exact(4).zip(got.data.chunks_exact(3)) {
        let want = [0, 1, 2].map(|c| pillow_alpha_composite(px[c], px[3]));
        assert_eq!(out, want, "rgba {px:?}");
    }
}

#[test]
fn degenerate_sizes_do_not_panic() {
    let src = Rgb8 {
        width: 5,
        height: 3,
        data: pattern(5, 3, 3, 2, (0, 0), 8),
    };
    for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
        // Zero-sized targets: that size, no pixels (Pillow raises instead).
        for (w, h) in [(0, 0), (0, 4), (4, 0)] {
            assert_eq!(
                resize(&src, w, h, filter),
                Rgb8 {
                    width: w,
                    height: h,
                    data: Vec::new()
                }
            );
        }
        // Same size: a copy.
        assert_eq!(resize(&src, 5, 3, filter), src);
        // A source without pixels: black, as Pillow.
        for (w, h) in [(0, 0), (0, 3), (4, 0)] {
            let empty = Rgb8 {
                width: w,
                height: h,
                data: Vec::new(),
            };
            assert_eq!(resize(&empty, 2, 3, filter).data, vec![0; 18]);
        }
        // Data shorter than the dimensions: the missing bytes read as black.
        let mut padded = src.clone();
        padded.data[30..].fill(0);
        let short = Rgb8 {
            data: src.data[..30].to_vec(),
            ..src.clone()
        };
        for (w, h) in [(7, 3), (5, 8), (2, 2)] {
            assert_eq!(resize(&short, w, h, filter), resize(&padded, w, h, filter));
        }
        // Dimensions no buffer could hold: treated as empty.
        let huge = Rgb8 {
            width: usize::MAX,
            height: 2,
            data: vec![1; 12],
        };
        assert_eq!(resize(&huge, 2, 2, filter).data, vec![0; 12]);
    }
    assert_eq!(
        rgba_on_white(2, 1, &[10, 20, 30, 255]).data,
        vec![10, 20, 30, 255, 255, 255]
    );
    assert_eq!(rgba_on_white(0, 7, &[]).data, Vec::<u8>::new());
}
