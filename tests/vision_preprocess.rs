//! kiln's image processors and prompt expansion (`model::vision::preprocess`) against transformers'
//! PIL-backend processors.
//!
//! The fixture `tests/fixtures/vision/preprocess.json` comes from
//! `tests/fixtures/make_preprocess_golden.py` (its docstring has the source images' recipe, the pixel
//! codec and the versions: transformers 5.24.0, Pillow 13.0.0), with scaled-down configs: SmolVLM
//! (`Idefics3Processor`) with tiles of 64 and a longest edge of 128, with and without image splitting;
//! Gemma 3 (`Gemma3Processor`) at 64 × 64 with CLIP's per-channel mean and std. Seven sources: 1×1,
//! 37×100, 100×37, 64×64, 130×70 RGB, a 45×80 RGBA with varied alpha and a 90×40 grey (`L`) image,
//! given to kiln as the RGBA a browser decodes.
//!
//! Checked: the tile count, grid and side; every pixel value, within one 8-bit step of the resize (the
//! leeway of LANCZOS's platform `sin`, see `resize`), and on its level exactly transformers' `f32`
//! (rescale and normalise are platform-independent); the expanded prompt text. The test prints the
//! largest difference; found: **bit-exact**, every `f32` identical (native x86_64).

#![cfg(not(target_arch = "wasm32"))]

use kiln::model::vision::Projector;
use kiln::model::vision::preprocess::{ImageProcessor, Normalize};
use serde_json::Value;
use vision_data::{base64, fnv1a, pattern, usize_of};

mod vision_data;

const FIXTURE: &str = include_str!("fixtures/vision/preprocess.json");

/// A source rebuilt from its recipe as the RGBA a browser decodes: (name, width, height, rgba).
fn sources(fixture: &Value) -> Vec<(String, usize, usize, Vec<u8>)> {
    let list = fixture["sources"].as_array().expect("sources");
    list.iter()
        .map(|s| {
            let name = s["name"].as_str().expect("name").to_owned();
            let (width, height, channels) = (
                usize_of(s, "width"),
                usize_of(s, "height"),
                usize_of(s, "channels"),
            );
            let raw = pattern(
                width,
                height,
                channels,
                usize_of(s, "seed") as u32,
                (usize_of(s, "ax"), usize_of(s, "ay")),
                usize_of(s, "noise_bits") as u32,
            );
            let rgba: Vec<u8> = match s["mode"].as_str().expect("mode") {
                "RGBA" => raw,
                "RGB" => raw
                    .chunks_exact(3)
                    .flat_map(|p| [p[0], p[1], p[2], 255])
                    .collect(),
                "L" => raw.iter().flat_map(|&g| [g, g, g, 255]).collect(),
                other => panic!("mode {other}"),
            };
            assert_eq!(
                u64::from(fnv1a(&rgba)),
                s["fnv1a"].as_u64().expect("fnv1a"),
                "source {name}: recipe differs"
            );
            (name, width, height, rgba)
        })
        .collect()
}

/// The fixture's codec (see the script's docstring): `count` bytes in planes of `side × side`, each
/// byte the left neighbour (the one above for a row's first, 0 for a plane's first) plus a zigzag
/// difference, Rice-coded with parameter `k`, bits most significant first.
fn rice_decode(packed: &[u8], k: u32, count: usize, side: usize) -> Vec<u8> {
    let mut pos = 0usize;
    let mut bit = || {
        let b = packed[pos / 8] >> (7 - pos % 8) & 1;
        pos += 1;
        u32::from(b)
    };
    let mut out: Vec<u8> = Vec::with_capacity(count);
    for i in 0..count {
        let mut q = 0u32;
        while bit() == 1 {
            q += 1;
        }
        let low = (0..k).fold(0u32, |acc, _| acc << 1 | bit());
        let z = q << k | low;
        let d = if z.is_multiple_of(2) {
            (z / 2) as i32
        } else {
            -((z as i32 + 1) / 2)
        };
        let (col, row) = (i % side, i / side);
        let pred = if col > 0 {
            out[i - 1]
        } else if row % side > 0 {
            out[i - side]
        } else {
            0
        };
        out.push((i32::from(pred) + d).rem_euclid(256) as u8);
    }
    out
}

/// transformers' value of level `v` in channel `c` (`rescale` in `f64`, then `normalize` in `f32`).
fn golden_value(n: &Normalize, c: usize, v: u8) -> f32 {
    ((f64::from(v) * n.rescale) as f32 - n.mean[c]) / n.std[c]
}

/// The 8-bit level nearest to kiln's value `x` in channel `c`.
fn level_of(n: &Normalize, c: usize, x: f32) -> i32 {
    (0..=255u8)
        .min_by(|&a, &b| {
            let (da, db) = (
                (golden_value(n, c, a) - x).abs(),
                (golden_value(n, c, b) - x).abs(),
            );
            da.total_cmp(&db)
        })
        .map(i32::from)
        .unwrap_or(0)
}

#[test]
fn preprocess_matches_transformers() {
    let fixture: Value = serde_json::from_str(FIXTURE).expect("preprocess.json parses");
    assert_eq!(fixture["transformers"], "5.24.0");
    assert_eq!(fixture["pillow"], "13.0.0");
    let sources = sources(&fixture);
    let family = |name: &str| {
        let f = &fixture["families"][name];
        let projector = match name {
            "smolvlm" => Projector::PixelShuffle { scale_factor: 2 },
            "gemma3" => Projector::AvgPool { tokens_per_image: 16 },
            other => panic!("family {other}"),
        };
        let config = serde_json::to_vec(&f["preprocessor_config"]).expect("config");
        let processor = ImageProcessor::from_json(&config, projector).expect("preprocessor_config parses");
        let tokens = usize_of(f, "image_seq_len");
        let text = f["text"].as_str().expect("text").to_owned();
        (processor, tokens, text)
    };
    let families = [("smolvlm", family("smolvlm")), ("gemma3", family("gemma3"))];

    let cases = fixture["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 3 * sources.len());
    let (mut failures, mut max_step, mut inexact, mut values) = (Vec::new(), 0, 0usize, 0usize);
    for case in cases {
        let name = case["source"].as_str().expect("source");
        let (_, width, height, rgba) = sources.iter().find(|s| s.0 == name).expect("known source");
        let fam = case["family"].as_str().expect("family");
        let (processor, tokens, text) = &families.iter().find(|f| f.0 == fam).expect("known family").1;
        let low = case["detail_low"].as_bool().expect("detail_low");
        let label = format!("{name} {fam}{}", if low { " (detail low)" } else { "" });
        let normalize = processor.normalize();

        let got = processor.preprocess(*width, *height, rgba, low);
        let (tiles, rows, cols, side) = (
            usize_of(case, "tiles"),
            usize_of(case, "rows"),
            usize_of(case, "cols"),
            usize_of(case, "side"),
        );
        if (got.tiles.len(), got.rows, got.cols, got.side) != (tiles, rows, cols, side) {
            failures.push(format!(
                "{label}: {} tiles {}×{} of side {}, transformers {tiles} tiles {rows}×{cols} of side {side}",
                got.tiles.len(),
                got.rows,
                got.cols,
                got.side
            ));
            continue;
        }

        let area = side * side;
        let count = tiles * 3 * area;
        let k = case["k"].as_u64().expect("k") as u32;
        let want = rice_decode(&base64(case["pixels"].as_str().expect("pixels")), k, count, side);
        assert_eq!(
            u64::from(fnv1a(&want)),
            case["fnv1a"].as_u64().expect("fnv1a"),
            "{label}: decoder"
        );
        let pixels = got.pixels();
        assert_eq!(pixels.len(), count, "{label}");
        // The largest difference in 8-bit steps, where it first occurs, and how many values sit on the
        // right level without being its exact `f32` (the arithmetic after the resize differs).
        let (mut case_max, mut worst, mut off_grid) = (0, None, 0usize);
        for (i, (&x, &v)) in pixels.iter().zip(&want).enumerate() {
            let c = i / area % 3;
            let expect = golden_value(&normalize, c, v);
            values += 1;
            if x.to_bits() == expect.to_bits() {
                continue;
            }
            inexact += 1;
            let step = (level_of(&normalize, c, x) - i32::from(v)).unsigned_abs();
            if step == 0 {
                off_grid += 1;
            }
            if worst.is_none() || step > case_max {
                worst = Some((i, x, expect));
            }
            case_max = case_max.max(step);
        }
        max_step = max_step.max(case_max);
        if let Some((i, x, expect)) = worst.filter(|_| case_max > 1 || off_grid > 0) {
            let (tile, c, y, xx) = (i / (3 * area), i / area % 3, i % area / side, i % side);
            failures.push(format!(
                "{label}: up to {case_max} steps off, {off_grid} values off the f32 of their level; worst first \
                 at tile {tile} channel {c} y {y} x {xx}: kiln {x}, transformers {expect}"
            ));
        }

        let expanded = text.replacen(processor.placeholder(), &processor.image_prompt(&got, *tokens), 1);
        let prompt = case["prompt"].as_str().expect("prompt");
        if expanded != prompt {
            failures.push(format!(
                "{label}: prompt\n  kiln         {expanded:?}\n  transformers {prompt:?}"
            ));
        }
    }
    println!(
        "{} cases, {values} pixel values: {inexact} not bit-exact, largest difference {max_step} 8-bit steps",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
