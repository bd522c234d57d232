//! The image processors of the vision-language families kiln runs, reproduced from transformers'
//! PIL backend (5.24.0: `Idefics3ImageProcessorPil` for SmolVLM, `Gemma3ImageProcessorPil` for
//! Gemma 3, as their processors `Idefics3Processor` and `Gemma3Processor` call them), and the
//! processors' expansion of an image's placeholder in the prompt. So kiln's encoder gets the pixel
//! values, and its language model the image tokens, that transformers gives them.
//!
//! [`ImageProcessor`] comes from `preprocessor_config.json` ([`ImageProcessor::from_json`]) or from
//! a family's defaults ([`ImageProcessor::default_for`]). [`ImageProcessor::preprocess`] turns the
//! RGBA pixels a browser decodes into the encoder's inputs ([`Preprocessed`]: tiles of
//! `[3, S, S]`), and [`ImageProcessor::image_prompt`] gives the text that replaces the image's
//! placeholder ([`ImageProcessor::placeholder`]) in the prompt before it is tokenized.
//!
//! # The pipeline (transformers 5.24.0, PIL backend)
//!
//! Every resize is Pillow's `Image.resize` of the 8-bit RGB image ([`resize`], bit for bit), so each
//! step's output is rounded to 8 bits; only the last step makes floats.
//!
//! 1. `convert_to_rgb`: an image with alpha is composited onto opaque white ([`rgba_on_white`]);
//!    a browser's RGBA of an opaque (or grey) image gives the same RGB bytes as Pillow's
//!    `convert("RGB")` of the original.
//! 2. SmolVLM (`Idefics3ImageProcessorPil._preprocess`):
//!    - resize so that the longest edge is `size.longest_edge` (`L`), the other edge
//!      `int(L / aspect)` or `int(L · aspect)` in `f64`, rounded up to even, at least 1; then, if
//!      the longest edge is above 4096 (`MAX_IMAGE_SIZE`), scaled to 4096 (the other edge truncated,
//!      not made even). Always resized, up or down (a 1×1 image becomes `L × L`).
//!    - with `do_image_splitting` (the default; not for [`detail_low`](ImageProcessor::preprocess)):
//!      `resize_for_vision_encoder`: the longest edge rounded up to a multiple of
//!      `max_image_size.longest_edge` (`M`), the other edge `int(longest / aspect)` of the new
//!      longest edge (the aspect of the step before, in `f64`), rounded up to a multiple of `M`; the
//!      image resized to that. If either edge is then above `M`, it is cut into `rows × cols` tiles
//!      of `M × M` (row-major) followed by the whole image resized to `M × M` (the global image);
//!      otherwise (both edges `M`) it is the only tile and rows = cols = 0.
//!    - without splitting: the image of the first step resized to `M × M`, the only tile.
//!
//!    All with `resample` (SmolVLM ships 1, LANCZOS).
//! 3. Gemma 3 (`Gemma3ImageProcessorPil._preprocess`): resized to `size` (`height × width`, no
//!    aspect kept) with `resample` (2, BILINEAR). Pan and scan never runs: `Gemma3Processor` passes
//!    `do_pan_and_scan = False` itself, over the value in `preprocessor_config.json`.
//!
//!    LLaVA (`CLIPImageProcessorPil`, as llava-hf ships): resized so that the shortest edge is
//!    `size.shortest_edge` (`s`), the other `int(s · long / short)` in `f64`, with `resample` (3,
//!    BICUBIC); then the centre `crop × crop` (`crop_size`), from `((w − crop) / 2, (h − crop) / 2)`
//!    truncated.
//! 4. Each tile, channel-first: `rescale` (`image.astype(float64) * rescale_factor`, then cast to
//!    `float32`), then `normalize` (`(x - mean) / std` in `float32`, `mean` and `std` cast to
//!    `float32` first). Per channel that is a function of the 8-bit value, computed here once per
//!    value with the same `f64`/`f32` operations ([`Normalize`]), so the floats are transformers'
//!    bit for bit. (SmolVLM's padding to the batch's largest tile changes nothing for one image:
//!    every tile is `M × M`.)
//!
//! # Prompt expansion
//!
//! - SmolVLM (`Idefics3Processor.replace_image_token`, the same as `SmolVLMProcessor`'s): for a
//!   split image, per row `r` and column `c` (from 1) `<fake_token_around_image><row_{r}_col_{c}>`
//!   and `<image>` × `image_seq_len`, a `\n` after each row, then `\n`,
//!   `<fake_token_around_image><global-img>`, `<image>` × `image_seq_len`,
//!   `<fake_token_around_image>` (nothing between them); a single image is the global part alone,
//!   without the leading `\n`. `image_seq_len` is the encoder's rows per
//!   tile, `(image_size / patch_size)² / scale_factor²` (`VisionConfig::tokens_per_image`).
//! - Gemma 3: `<start_of_image>` becomes `\n\n<start_of_image>` + `<image_soft_token>` ×
//!   `mm_tokens_per_image` + `<end_of_image>\n\n`.
//! - LLaVA (`LlavaProcessor`): `<image>` becomes `<image>` × the rows of one image (the patches, plus
//!   the class token with `vision_feature_select_strategy` `full`), nothing around them.
//!
//! # Tolerance
//!
//! Bit for bit wherever [`resize`] is (see its docs: LANCZOS's `sin` comes from the platform's
//! library). `tests/vision_preprocess.rs` checks tile counts, grids, every pixel value and the
//! expanded prompts against transformers 5.24.0 with Pillow 13.0.0 (fixture made by
//! `tests/fixtures/make_preprocess_golden.py`, scaled-down configs): every `f32` identical, native
//! x86_64 and wasm32 (Node) alike.
//!
//! # Deviations
//!
//! - An image without pixels (a zero width or height, or dimensions whose byte count overflows) is
//!   taken as one white pixel; transformers refuses it. Pixel data shorter than the dimensions say
//!   is transparent (white) past its end, as in [`rgba_on_white`].
//! - `do_convert_rgb` is always on (kiln's input is RGBA); `do_pad` does nothing for one image.
//!   `do_resize = false` and resampling filters other than LANCZOS, BILINEAR and BICUBIC are refused
//!   by [`ImageProcessor::from_json`], as are tile sides above 4096.
//! - A JSON `null` is read as the field's absence (the class default), as transformers' processors
//!   pass their own defaults for the fields real configs leave `null`.

use serde_json::{Map, Value};

use super::config::Projector;
use super::resize::{Filter, Rgb8, resize, rgba_on_white};

/// transformers' `MAX_IMAGE_SIZE` for Idefics3: the longest edge after the first resize is at most
/// this; kiln also takes no tile side above it.
const MAX_IMAGE_SIZE: usize = 4096;

/// SmolVLM's image token strings (`Idefics3Processor`).
const FAKE_TOKEN: &str = "<fake_token_around_image>";
const SMOLVLM_IMAGE_TOKEN: &str = "<image>";
const GLOBAL_IMAGE_TOKEN: &str = "<global-img>";

/// Gemma 3's (its tokenizer's `boi_token`, `image_token`, `eoi_token`).
const BOI_TOKEN: &str = "<start_of_image>";
const GEMMA_IMAGE_TOKEN: &str = "<image_soft_token>";
const EOI_TOKEN: &str = "<end_of_image>";

/// LLaVA's (`LlavaProcessor.image_token`).
const LLAVA_IMAGE_TOKEN: &str = "<image>";

/// How an image becomes pixel values for the encoder (from `preprocessor_config.json`, or a
/// family's defaults).
#[derive(Debug, Clone, PartialEq)]
pub enum ImageProcessor {
    /// SmolVLM (`Idefics3ImageProcessor`, also `SmolVLMImageProcessor`, which is the same).
    Idefics3 {
        /// `size.longest_edge`: the longest edge of the first resize (4 × `max_image_size` as shipped).
        longest_edge: usize,
        /// `max_image_size.longest_edge`: the tile side, the encoder's `image_size`.
        max_image_size: usize,
        /// `do_image_splitting`: tiles plus the global image (else the global image only).
        split: bool,
        /// `resample` (LANCZOS as shipped).
        filter: Filter,
        normalize: Normalize,
    },
    /// Gemma 3 (`Gemma3ImageProcessor`): one tile, the image resized to `size × size`.
    Gemma3 {
        /// `size.height` = `size.width`: the encoder's `image_size`.
        size: usize,
        /// `resample` (BILINEAR as shipped).
        filter: Filter,
        normalize: Normalize,
    },
    /// LLaVA (`CLIPImageProcessor`): one tile, the shortest edge resized to `shortest_edge`, then the
    /// centre `crop × crop`.
    Clip {
        /// `size.shortest_edge` (at least `crop`).
        shortest_edge: usize,
        /// `crop_size`: the encoder's `image_size`.
        crop: usize,
        /// `resample` (BICUBIC as shipped).
        filter: Filter,
        normalize: Normalize,
    },
}

/// The last step: an 8-bit value `v` of channel `c` becomes
/// `(f32(f64(v) · rescale) − mean[c]) / std[c]` in `f32` (transformers' `rescale` then `normalize`).
/// `do_rescale = false` is `rescale = 1`, `do_normalize = false` is mean 0 and std 1 (both exact).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// `rescale_factor` (`1/255`), applied in `f64` as transformers does.
    pub rescale: f64,
    /// `image_mean`, cast to `f32`.
    pub mean: [f32; 3],
    /// `image_std`, cast to `f32`.
    pub std: [f32; 3],
}

impl Normalize {
    /// `1/255`, mean and std 0.5 (`IMAGENET_STANDARD_*`): what SmolVLM and Gemma 3 ship.
    pub const STANDARD: Normalize = Normalize {
        rescale: 1.0 / 255.0,
        mean: [0.5; 3],
        std: [0.5; 3],
    };

    /// `1/255` and CLIP's mean and std (`OPENAI_CLIP_*`): what LLaVA ships.
    pub const CLIP: Normalize = Normalize {
        rescale: 1.0 / 255.0,
        mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
        std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
    };

    /// The value of each 8-bit level per channel.
    fn table(&self) -> [[f32; 256]; 3] {
        let mut table = [[0.0; 256]; 3];
        for (c, row) in table.iter_mut().enumerate() {
            for (v, out) in row.iter_mut().enumerate() {
                let scaled = (v as f64 * self.rescale) as f32;
                *out = (scaled - self.mean[c]) / self.std[c];
            }
        }
        table
    }
}

/// An image as the encoder takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessed {
    /// Each tile (SmolVLM: `rows · cols` tiles in row-major order, then the global image, or the
    /// global image alone; Gemma 3: one) as `[3, S, S]` `f32`, channel-major, rows top to bottom.
    pub tiles: Vec<Vec<f32>>,
    /// `S`, the tiles' side.
    pub side: usize,
    /// The tile grid (0 and 0 for a single image).
    pub rows: usize,
    pub cols: usize,
}

impl Preprocessed {
    /// All tiles as one `[n, 3, S, S]` buffer.
    pub fn pixels(&self) -> Vec<f32> {
        self.tiles.concat()
    }
}

/// A `preprocessor_config.json` kiln cannot follow.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PreprocessorError {
    #[error("`preprocessor_config.json` does not parse: {0}")]
    Json(String),
    #[error("`preprocessor_config.json` field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> PreprocessorError {
    PreprocessorError::Invalid {
        field,
        reason: reason.into(),
    }
}

impl ImageProcessor {
    /// Parses `preprocessor_config.json` for the family of `projector` (SmolVLM for
    /// [`Projector::PixelShuffle`], Gemma 3 for [`Projector::AvgPool`]). Absent (or `null`) fields
    /// take transformers' class defaults (SmolVLM: `size.longest_edge` 1456, `max_image_size` 364;
    /// Gemma 3: `size` 224; both LANCZOS/BILINEAR, 1/255, mean and std 0.5). Errors name the field.
    pub fn from_json(bytes: &[u8], projector: Projector) -> Result<Self, PreprocessorError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| PreprocessorError::Json(e.to_string()))?;
        let Value::Object(obj) = value else {
            return Err(PreprocessorError::Json("not a JSON object".into()));
        };
        let kind = match projector {
            Projector::PixelShuffle { .. } => ["Idefics3ImageProcessor", "SmolVLMImageProcessor"],
            Projector::AvgPool { .. } => ["Gemma3ImageProcessor"; 2],
            Projector::Mlp { .. } => ["CLIPImageProcessor", "LlavaImageProcessor"],
        };
        if let Some(t) = get(&obj, "image_processor_type") {
            let name = t.as_str().unwrap_or_default();
            let base = name
                .strip_suffix("Fast")
                .or(name.strip_suffix("Pil"))
                .unwrap_or(name);
            if !kind.contains(&base) {
                return Err(invalid(
                    "image_processor_type",
                    format!("{t}: the model's family takes {}", kind[0]),
                ));
            }
        }
        if !flag(&obj, "do_resize", true)? {
            return Err(invalid(
                "do_resize",
                "false: kiln implements the processor with do_resize = true",
            ));
        }
        let normalize = Normalize {
            rescale: if flag(&obj, "do_rescale", true)? {
                let r = number(&obj, "rescale_factor", 1.0 / 255.0)?;
                if r.is_finite() {
                    r
                } else {
                    return Err(invalid("rescale_factor", format!("{r} is not finite")));
                }
            } else {
                1.0
            },
            mean: match projector {
                Projector::Mlp { .. } => triple_or(&obj, "image_mean", Normalize::CLIP.mean)?,
                _ => triple(&obj, "image_mean", 0.5)?,
            },
            std: match projector {
                Projector::Mlp { .. } => triple_or(&obj, "image_std", Normalize::CLIP.std)?,
                _ => triple(&obj, "image_std", 0.5)?,
            },
        };
        let normalize = if flag(&obj, "do_normalize", true)? {
            if normalize.std.contains(&0.0) {
                return Err(invalid("image_std", "has a zero"));
            }
            normalize
        } else {
            Normalize {
                mean: [0.0; 3],
                std: [1.0; 3],
                ..normalize
            }
        };
        match projector {
            Projector::PixelShuffle { .. } => Ok(ImageProcessor::Idefics3 {
                longest_edge: longest_edge(&obj, "size", "size.longest_edge", 4 * 364)?,
                max_image_size: side_limit(
                    "max_image_size.longest_edge",
                    longest_edge(&obj, "max_image_size", "max_image_size.longest_edge", 364)?,
                )?,
                split: flag(&obj, "do_image_splitting", true)?,
                filter: filter(&obj, Filter::Lanczos)?,
                normalize,
            }),
            Projector::AvgPool { .. } => Ok(ImageProcessor::Gemma3 {
                size: side_limit("size", square(&obj, 224)?)?,
                filter: filter(&obj, Filter::Bilinear)?,
                normalize,
            }),
            Projector::Mlp { .. } => {
                if flag(&obj, "do_pad", false)? {
                    return Err(invalid(
                        "do_pad",
                        "true: kiln implements LLaVA's processor without padding to a square",
                    ));
                }
                if !flag(&obj, "do_center_crop", true)? {
                    return Err(invalid(
                        "do_center_crop",
                        "false: kiln implements LLaVA's processor with its centre crop",
                    ));
                }
                let crop = side_limit("crop_size", square_of(&obj, "crop_size", 224)?)?;
                let shortest_edge = match get(&obj, "size") {
                    None => 224,
                    Some(v) => match v.get("shortest_edge") {
                        Some(n) => positive(n, "size.shortest_edge")?,
                        None => {
                            return Err(invalid(
                                "size",
                                format!("{v}: kiln takes {{\"shortest_edge\": n}}"),
                            ));
                        }
                    },
                };
                if shortest_edge < crop || shortest_edge > MAX_IMAGE_SIZE {
                    return Err(invalid(
                        "size.shortest_edge",
                        format!("{shortest_edge}: from crop_size ({crop}) to {MAX_IMAGE_SIZE}"),
                    ));
                }
                Ok(ImageProcessor::Clip {
                    shortest_edge,
                    crop,
                    filter: filter(&obj, Filter::Bicubic)?,
                    normalize,
                })
            }
        }
    }

    /// The family's defaults for an encoder of `image_size`: what SmolVLM's and Gemma 3's
    /// `preprocessor_config.json` say (SmolVLM: `size.longest_edge` 4 × `image_size`,
    /// `max_image_size` `image_size`, splitting, LANCZOS; Gemma 3: `size` `image_size`, BILINEAR;
    /// both 1/255, mean and std 0.5).
    pub fn default_for(projector: Projector, image_size: usize) -> Self {
        match projector {
            Projector::PixelShuffle { .. } => ImageProcessor::Idefics3 {
                longest_edge: 4 * image_size,
                max_image_size: image_size,
                split: true,
                filter: Filter::Lanczos,
                normalize: Normalize::STANDARD,
            },
            Projector::AvgPool { .. } => ImageProcessor::Gemma3 {
                size: image_size,
                filter: Filter::Bilinear,
                normalize: Normalize::STANDARD,
            },
            Projector::Mlp { .. } => ImageProcessor::Clip {
                shortest_edge: image_size,
                crop: image_size,
                filter: Filter::Bicubic,
                normalize: Normalize::CLIP,
            },
        }
    }

    /// How it turns 8-bit values into the encoder's.
    pub fn normalize(&self) -> Normalize {
        match *self {
            ImageProcessor::Idefics3 { normalize, .. }
            | ImageProcessor::Gemma3 { normalize, .. }
            | ImageProcessor::Clip { normalize, .. } => normalize,
        }
    }

    /// The side of the tiles it makes (the encoder's `image_size`).
    pub fn side(&self) -> usize {
        match *self {
            ImageProcessor::Idefics3 { max_image_size, .. } => max_image_size,
            ImageProcessor::Gemma3 { size, .. } => size,
            ImageProcessor::Clip { crop, .. } => crop,
        }
    }

    /// `rgba` (`width · height` pixels of 4 bytes, R G B A not premultiplied, rows top to bottom: what
    /// a browser decodes) → the encoder's inputs. `detail_low` (OpenAI's `detail: "low"`) asks for the
    /// single-image form: SmolVLM's global image alone (`do_image_splitting = False`); Gemma 3 has no
    /// other.
    pub fn preprocess(&self, width: usize, height: usize, rgba: &[u8], detail_low: bool) -> Preprocessed {
        let mut rgb = rgba_on_white(width, height, rgba);
        if rgb.width == 0 || rgb.height == 0 {
            rgb = Rgb8 {
                width: 1,
                height: 1,
                data: vec![255; 3],
            };
        }
        match *self {
            ImageProcessor::Idefics3 {
                longest_edge,
                max_image_size,
                split,
                filter,
                normalize,
            } => {
                let m = max_image_size.max(1);
                let table = normalize.table();
                let (h, w) = rescale_to_max_len(rgb.height, rgb.width, longest_edge.max(1));
                let (h, w) = scale_below_upper_bound(h, w, MAX_IMAGE_SIZE);
                let first = resize(&rgb, w, h, filter);
                if !split || detail_low {
                    let global = resize(&first, m, m, filter);
                    return single(planes(&global, 0, 0, m, &table), m);
                }
                let (h, w) = resize_for_vision_encoder(h, w, m);
                let whole = resize(&first, w, h, filter);
                if h <= m && w <= m {
                    return single(planes(&whole, 0, 0, m, &table), m);
                }
                let rows = (h - m) / m + 1;
                let cols = (w - m) / m + 1;
                let mut tiles = Vec::with_capacity(rows * cols + 1);
                for r in 0..rows {
                    for c in 0..cols {
                        tiles.push(planes(&whole, c * m, r * m, m, &table));
                    }
                }
                let global = resize(&whole, m, m, filter);
                tiles.push(planes(&global, 0, 0, m, &table));
                Preprocessed {
                    tiles,
                    side: m,
                    rows,
                    cols,
                }
            }
            ImageProcessor::Gemma3 {
                size,
                filter,
                normalize,
            } => {
                let s = size.max(1);
                let image = resize(&rgb, s, s, filter);
                single(planes(&image, 0, 0, s, &normalize.table()), s)
            }
            ImageProcessor::Clip {
                shortest_edge,
                crop,
                filter,
                normalize,
            } => {
                let (w, h) = (rgb.width, rgb.height);
                let (short, long) = if w <= h { (w, h) } else { (h, w) };
                let long = int(shortest_edge as f64 * long as f64 / short as f64).max(shortest_edge);
                let (w, h) = if w <= h {
                    (shortest_edge, long)
                } else {
                    (long, shortest_edge)
                };
                let image = resize(&rgb, w, h, filter);
                let (left, top) = ((w - crop) / 2, (h - crop) / 2);
                single(planes(&image, left, top, crop, &normalize.table()), crop)
            }
        }
    }

    /// The placeholder a prompt holds for one image before expansion: `<image>` (SmolVLM),
    /// `<start_of_image>` (Gemma 3).
    pub fn placeholder(&self) -> &'static str {
        match self {
            ImageProcessor::Idefics3 { .. } => SMOLVLM_IMAGE_TOKEN,
            ImageProcessor::Gemma3 { .. } => BOI_TOKEN,
            ImageProcessor::Clip { .. } => LLAVA_IMAGE_TOKEN,
        }
    }

    /// The text that replaces [`placeholder`](Self::placeholder) for `image` (see the module docs),
    /// with `tokens` image tokens per tile: the encoder's rows per tile (`tokens_per_image()` of the
    /// vision config; SmolVLM's `image_seq_len`, Gemma 3's `mm_tokens_per_image`).
    pub fn image_prompt(&self, image: &Preprocessed, tokens: usize) -> String {
        match self {
            ImageProcessor::Idefics3 { .. } => {
                let run = SMOLVLM_IMAGE_TOKEN.repeat(tokens);
                let mut out = String::new();
                if image.rows > 0 || image.cols > 0 {
                    for r in 1..=image.rows {
                        for c in 1..=image.cols {
                            out.push_str(&format!("{FAKE_TOKEN}<row_{r}_col_{c}>{run}"));
                        }
                        out.push('\n');
                    }
                    out.push('\n');
                }
                out.push_str(&format!("{FAKE_TOKEN}{GLOBAL_IMAGE_TOKEN}{run}{FAKE_TOKEN}"));
                out
            }
            ImageProcessor::Gemma3 { .. } => {
                format!(
                    "\n\n{BOI_TOKEN}{}{EOI_TOKEN}\n\n",
                    GEMMA_IMAGE_TOKEN.repeat(tokens)
                )
            }
            ImageProcessor::Clip { .. } => LLAVA_IMAGE_TOKEN.repeat(tokens),
        }
    }
}

fn single(tile: Vec<f32>, side: usize) -> Preprocessed {
    Preprocessed {
        tiles: vec![tile],
        side,
        rows: 0,
        cols: 0,
    }
}

/// The `side × side` window of `image` at `(x0, y0)` as `[3, side, side]` values of `table`
/// (pixels outside the image, which only an image too large to allocate leaves, read as 0).
fn planes(image: &Rgb8, x0: usize, y0: usize, side: usize, table: &[[f32; 256]; 3]) -> Vec<f32> {
    let area = side * side;
    let mut out = vec![0.0; 3 * area];
    for y in 0..side {
        let start = ((y0 + y) * image.width + x0) * 3;
        let row = image
            .data
            .get(start..start + side * 3)
            .filter(|_| x0 + side <= image.width);
        for x in 0..side {
            let px = row.map_or([0; 3], |r| [r[3 * x], r[3 * x + 1], r[3 * x + 2]]);
            for c in 0..3 {
                out[c * area + y * side + x] = table[c][usize::from(px[c])];
            }
        }
    }
    out
}

/// Python's `int(x)` of the non-negative floats here: truncation (saturating).
fn int(x: f64) -> usize {
    x as usize
}

/// `math.ceil(x / m) * m`, the division in `f64` as Python's `/` (at least `m`: a zero edge,
/// which transformers would hand to Pillow and fail on, becomes one tile).
fn ceil_to(x: usize, m: usize) -> usize {
    int((x.max(1) as f64 / m as f64).ceil()).saturating_mul(m)
}

/// `_resize_output_size_rescale_to_max_len(height, width, max_len=…)`: the longest edge to `max_len`,
/// the other by the aspect ratio, truncated, rounded up to even, at least 1.
fn rescale_to_max_len(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (height, width) = if width >= height {
        let mut h = int(max_len as f64 / aspect);
        if !h.is_multiple_of(2) {
            h += 1;
        }
        (h, max_len)
    } else {
        let mut w = int(max_len as f64 * aspect);
        if !w.is_multiple_of(2) {
            w += 1;
        }
        (max_len, w)
    };
    (height.max(1), width.max(1))
}

/// `_resize_output_size_scale_below_upper_bound`: a longest edge above `max_len` scaled down to it.
fn scale_below_upper_bound(height: usize, width: usize, max_len: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let (height, width) = if width >= height && width > max_len {
        (int(max_len as f64 / aspect), max_len)
    } else if height > width && height > max_len {
        (max_len, int(max_len as f64 * aspect))
    } else {
        (height, width)
    };
    (height.max(1), width.max(1))
}

/// `resize_for_vision_encoder`: both edges rounded up to multiples of `m`, the shorter one from the
/// rounded longer one by the aspect ratio.
fn resize_for_vision_encoder(height: usize, width: usize, m: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    if width >= height {
        let w = ceil_to(width, m);
        (ceil_to(int(w as f64 / aspect), m), w)
    } else {
        let h = ceil_to(height, m);
        (h, ceil_to(int(h as f64 * aspect), m))
    }
}

/// `obj[key]`, a JSON `null` read as absent.
fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn flag(obj: &Map<String, Value>, key: &'static str, default: bool) -> Result<bool, PreprocessorError> {
    match get(obj, key) {
        None => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| invalid(key, format!("{v} is not a boolean"))),
    }
}

fn number(obj: &Map<String, Value>, key: &'static str, default: f64) -> Result<f64, PreprocessorError> {
    match get(obj, key) {
        None => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| invalid(key, format!("{v} is not a number"))),
    }
}

/// A per-channel `f32` triple: 3 numbers, or one for all channels (as transformers takes both).
fn triple(obj: &Map<String, Value>, key: &'static str, default: f32) -> Result<[f32; 3], PreprocessorError> {
    let finite = |v: &Value| v.as_f64().filter(|x| x.is_finite()).map(|x| x as f32);
    match get(obj, key) {
        None => Ok([default; 3]),
        Some(Value::Array(items)) if items.len() == 3 => {
            let mut out = [0.0; 3];
            for (o, v) in out.iter_mut().zip(items) {
                *o = finite(v).ok_or_else(|| invalid(key, format!("{v} is not a finite number")))?;
            }
            Ok(out)
        }
        Some(v) => finite(v)
            .map(|x| [x; 3])
            .ok_or_else(|| invalid(key, format!("{v}: expected 3 numbers (one per channel) or one"))),
    }
}

/// [`triple`] with a per-channel default.
fn triple_or(
    obj: &Map<String, Value>,
    key: &'static str,
    default: [f32; 3],
) -> Result<[f32; 3], PreprocessorError> {
    match get(obj, key) {
        None => Ok(default),
        Some(_) => triple(obj, key, 0.0),
    }
}

/// A positive integer.
fn positive(v: &Value, field: &'static str) -> Result<usize, PreprocessorError> {
    v.as_u64()
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| invalid(field, format!("{v} is not a positive integer")))
}

/// `obj[key]["longest_edge"]` (`{"longest_edge": n}`).
fn longest_edge(
    obj: &Map<String, Value>,
    key: &str,
    field: &'static str,
    default: usize,
) -> Result<usize, PreprocessorError> {
    match get(obj, key) {
        None => Ok(default),
        Some(v) => match v.get("longest_edge") {
            Some(n) => positive(n, field),
            None => Err(invalid(field, format!("{v}: kiln takes {{\"longest_edge\": n}}"))),
        },
    }
}

/// Gemma 3's `size`: `{"height": n, "width": n}` or `n` (a square either way).
fn square(obj: &Map<String, Value>, default: usize) -> Result<usize, PreprocessorError> {
    square_of(obj, "size", default)
}

/// `obj[key]` (`size`, `crop_size`) as a square's side: `{"height": n, "width": n}` or `n`.
fn square_of(
    obj: &Map<String, Value>,
    key: &'static str,
    default: usize,
) -> Result<usize, PreprocessorError> {
    let Some(v) = get(obj, key) else {
        return Ok(default);
    };
    if v.is_number() {
        return positive(v, key);
    }
    let (height, width) = match key {
        "crop_size" => ("crop_size.height", "crop_size.width"),
        _ => ("size.height", "size.width"),
    };
    match (v.get("height"), v.get("width")) {
        (Some(h), Some(w)) => {
            let (h, w) = (positive(h, height)?, positive(w, width)?);
            if h == w {
                Ok(h)
            } else {
                Err(invalid(
                    key,
                    format!("{h} × {w}: kiln's encoder takes a square image"),
                ))
            }
        }
        _ => Err(invalid(
            key,
            format!("{v}: kiln takes {{\"height\": n, \"width\": n}}"),
        )),
    }
}

fn side_limit(field: &'static str, side: usize) -> Result<usize, PreprocessorError> {
    if side > MAX_IMAGE_SIZE {
        return Err(invalid(
            field,
            format!("{side}: kiln takes tiles of at most {MAX_IMAGE_SIZE}"),
        ));
    }
    Ok(side)
}

/// `resample`: PIL's filter numbers (`PIL.Image.Resampling`).
fn filter(obj: &Map<String, Value>, default: Filter) -> Result<Filter, PreprocessorError> {
    let Some(v) = get(obj, "resample") else {
        return Ok(default);
    };
    match v.as_u64() {
        Some(1) => Ok(Filter::Lanczos),
        Some(2) => Ok(Filter::Bilinear),
        Some(3) => Ok(Filter::Bicubic),
        _ => Err(invalid(
            "resample",
            format!("{v}: kiln resamples with LANCZOS (1), BILINEAR (2) or BICUBIC (3)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLVLM: Projector = Projector::PixelShuffle { scale_factor: 4 };
    const GEMMA3: Projector = Projector::AvgPool {
        tokens_per_image: 256,
    };

    /// SmolVLM-256M-Instruct's `preprocessor_config.json`.
    const SMOLVLM_256M: &str = r#"{"do_convert_rgb": true, "do_image_splitting": true, "do_normalize": true,
        "do_pad": true, "do_rescale": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5],
        "image_processor_type": "Idefics3ImageProcessor", "image_std": [0.5, 0.5, 0.5],
        "max_image_size": {"longest_edge": 512}, "processor_class": "Idefics3Processor", "resample": 1,
        "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 2048}}"#;

    /// Gemma 3 4B's.
    const GEMMA3_4B: &str = r#"{"do_convert_rgb": null, "do_normalize": true, "do_pan_and_scan": null,
        "do_rescale": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5],
        "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
        "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": null, "pan_and_scan_min_crop_size": null,
        "pan_and_scan_min_ratio_to_activate": null, "processor_class": "Gemma3Processor", "resample": 2,
        "rescale_factor": 0.00392156862745098, "size": {"height": 896, "width": 896}}"#;

    #[test]
    fn defaults_are_the_shipped_configs() {
        let smol = ImageProcessor::from_json(SMOLVLM_256M.as_bytes(), SMOLVLM).unwrap();
        assert_eq!(smol, ImageProcessor::default_for(SMOLVLM, 512));
        let gemma = ImageProcessor::from_json(GEMMA3_4B.as_bytes(), GEMMA3).unwrap();
        assert_eq!(gemma, ImageProcessor::default_for(GEMMA3, 896));
        assert_eq!(gemma.side(), 896);
        // An empty config is the classes' defaults.
        let bare = ImageProcessor::from_json(b"{}", SMOLVLM).unwrap();
        assert_eq!(bare, ImageProcessor::default_for(SMOLVLM, 364));
    }

    #[test]
    fn field_errors_name_the_field() {
        let field = |json: &str, projector| match ImageProcessor::from_json(json.as_bytes(), projector) {
            Err(PreprocessorError::Invalid { field, .. }) => field,
            other => panic!("{json}: {other:?}"),
        };
        assert_eq!(
            field(r#"{"size": {"height": 8, "width": 8}}"#, SMOLVLM),
            "size.longest_edge"
        );
        assert_eq!(
            field(r#"{"max_image_size": {"longest_edge": 0}}"#, SMOLVLM),
            "max_image_size.longest_edge"
        );
        assert_eq!(
            field(r#"{"max_image_size": {"longest_edge": 5000}}"#, SMOLVLM),
            "max_image_size.longest_edge"
        );
        assert_eq!(field(r#"{"resample": 0}"#, SMOLVLM), "resample");
        assert_eq!(field(r#"{"image_mean": [0.5, 0.5]}"#, SMOLVLM), "image_mean");
        assert_eq!(field(r#"{"image_std": 0}"#, GEMMA3), "image_std");
        assert_eq!(field(r#"{"do_resize": false}"#, GEMMA3), "do_resize");
        assert_eq!(field(r#"{"do_rescale": "yes"}"#, GEMMA3), "do_rescale");
        assert_eq!(
            field(r#"{"size": {"height": 896, "width": 640}}"#, GEMMA3),
            "size"
        );
        assert_eq!(
            field(r#"{"size": {"height": -1, "width": 640}}"#, GEMMA3),
            "size.height"
        );
        assert_eq!(
            field(r#"{"image_processor_type": "SiglipImageProcessor"}"#, GEMMA3),
            "image_processor_type"
        );
        assert!(matches!(
            ImageProcessor::from_json(b"[1]", GEMMA3),
            Err(PreprocessorError::Json(_))
        ));
        // Scalars, `Fast` names and switched-off steps are fine.
        let p = ImageProcessor::from_json(
            br#"{"image_processor_type": "SmolVLMImageProcessorFast", "image_mean": 0.25, "do_normalize": false,
                "do_rescale": false, "do_image_splitting": false}"#,
            SMOLVLM,
        )
        .unwrap();
        let ImageProcessor::Idefics3 { split, normalize, .. } = p else {
            panic!()
        };
        assert!(!split);
        assert_eq!(
            normalize,
            Normalize {
                rescale: 1.0,
                mean: [0.0; 3],
                std: [1.0; 3]
            }
        );
    }

    #[test]
    fn smolvlm_grid_at_full_size() {
        let p = ImageProcessor::default_for(SMOLVLM, 512);
        // 1×1 → 2048² → 4×4 tiles and the global image.
        let out = p.preprocess(1, 1, &[10, 20, 30, 255], false);
        assert_eq!((out.tiles.len(), out.rows, out.cols, out.side), (17, 4, 4, 512));
        assert!(out.tiles.iter().all(|t| t.len() == 3 * 512 * 512));
        // 640×480 → 2048×1536 → 4 columns, 3 rows.
        let out = p.preprocess(640, 480, &vec![128; 640 * 480 * 4], false);
        assert_eq!((out.tiles.len(), out.rows, out.cols), (13, 3, 4));
        let low = p.preprocess(640, 480, &vec![128; 640 * 480 * 4], true);
        assert_eq!((low.tiles.len(), low.rows, low.cols), (1, 0, 0));
        assert_eq!(low.pixels().len(), 3 * 512 * 512);
    }

    #[test]
    fn degenerate_images_do_not_panic() {
        let smol = ImageProcessor::default_for(SMOLVLM, 32);
        let gemma = ImageProcessor::default_for(GEMMA3, 32);
        for p in [&smol, &gemma] {
            for (w, h, data) in [
                (0, 0, vec![]),
                (0, 5, vec![]),
                (3, 2, vec![1, 2, 3]),
                (usize::MAX, 2, vec![]),
            ] {
                let out = p.preprocess(w, h, &data, false);
                assert!(!out.tiles.is_empty());
                assert!(out.tiles.iter().all(|t| t.len() == 3 * 32 * 32));
            }
        }
        // One white pixel: 1.0 everywhere after (1 - 0.5) / 0.5.
        let out = gemma.preprocess(0, 0, &[], false);
        assert!(out.pixels().iter().all(|&v| v == 1.0));
        // Tall and thin: the short edge truncates to 0 and becomes 1, then one tile wide.
        let out = smol.preprocess(1, 5000, &[], false);
        assert_eq!((out.rows, out.cols), (4, 1));
    }

    #[test]
    fn prompts() {
        let smol = ImageProcessor::default_for(SMOLVLM, 32);
        let grid = Preprocessed {
            tiles: vec![],
            side: 32,
            rows: 1,
            cols: 2,
        };
        assert_eq!(
            smol.image_prompt(&grid, 2),
            "<fake_token_around_image><row_1_col_1><image><image><fake_token_around_image><row_1_col_2><image><image>\n\
             \n<fake_token_around_image><global-img><image><image><fake_token_around_image>"
        );
        let one = Preprocessed {
            rows: 0,
            cols: 0,
            ..grid
        };
        assert_eq!(
            smol.image_prompt(&one, 1),
            "<fake_token_around_image><global-img><image><fake_token_around_image>"
        );
        let gemma = ImageProcessor::default_for(GEMMA3, 32);
        assert_eq!(
            gemma.image_prompt(&one, 2),
            "\n\n<start_of_image><image_soft_token><image_soft_token><end_of_image>\n\n"
        );
        assert_eq!(
            (smol.placeholder(), gemma.placeholder()),
            ("<image>", "<start_of_image>")
        );
    }
}
