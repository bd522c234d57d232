//! A chat request's images, as a vision-language model's processor prepares them (transformers'
//! `processor(text, images)` is the reference): each `image_url` part, in order, is one [`Image`] the
//! edge decoded; the chat template sees it as a `{"type": "image"}` part and renders the family's
//! placeholder (`<image>`, `<start_of_image>`); [`expand`] replaces each placeholder by the image's token
//! layout (tile markers and one run of image tokens per tile, [`ImageProcessor::image_prompt`]); after
//! tokenisation [`place`] finds each tile's run, where the encoder's rows for that tile will stand.
//!
//! Images are decoded at the edge (a browser's canvas gives RGBA pixels); the engine preprocesses them
//! ([`ImageProcessor::preprocess`]) and never sees file bytes or URLs.

use crate::api::ApiError;
use crate::api::request::{Message, Role};
use crate::api::unions::{Content, ContentPart};
use crate::model::vision::preprocess::{ImageProcessor, Preprocessed};

/// An image as the edge decoded it: `width · height` pixels of 4 bytes (R, G, B, A; not premultiplied;
/// rows top to bottom).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub rgba: Vec<u8>,
}

/// What a model needs to take images: its processor and its vision part's tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageFormat {
    pub processor: ImageProcessor,
    /// The token each encoder row stands over.
    pub image_token: u32,
    /// Encoder rows per tile.
    pub tokens_per_tile: usize,
}

/// One image of a planned prompt: its tiles, and where each tile's run of image tokens starts.
#[derive(Debug, Clone)]
pub struct PlannedImage {
    pub pixels: Preprocessed,
    /// One position per tile, in the tiles' order.
    pub at: Vec<usize>,
}

/// The `image_url` parts of `messages` in order: `(message, part, detail is "low")`.
fn image_parts(messages: &[Message]) -> Vec<(usize, usize, bool)> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if let Some(Content::Parts(parts)) = &m.content {
            for (j, p) in parts.iter().enumerate() {
                if let ContentPart::ImageUrl { image_url } = p {
                    out.push((i, j, image_url.detail.as_deref() == Some("low")));
                }
            }
        }
    }
    out
}

/// Preprocesses `images`, one per `image_url` part of `messages` in order; a part without its image (the
/// edge did not decode it) is refused naming it.
pub fn preprocess(
    format: &ImageFormat,
    messages: &[Message],
    images: &[Image],
) -> Result<Vec<Preprocessed>, ApiError> {
    let parts = image_parts(messages);
    if let Some(&(i, j, _)) = parts.get(images.len()) {
        let param = format!("messages[{i}].content[{j}].image_url");
        return Err(ApiError::invalid(
            &param,
            format!("`{param}`: the image was not decoded (images reach the engine as pixels)"),
        ));
    }
    if images.len() > parts.len() {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "{} images were given for {} image_url parts",
                images.len(),
                parts.len()
            ),
        ));
    }
    Ok(parts
        .iter()
        .zip(images)
        .map(|(&(_, _, low), image)| {
            format
                .processor
                .preprocess(image.width, image.height, &image.rgba, low)
        })
        .collect())
}

/// A message's `content` as a vision-language model's chat template takes it: a list of
/// `{"type": "text", "text": …}` and `{"type": "image"}` parts (a string becomes one text part), as
/// transformers' processors hand it over.
pub fn template_content(m: &Message) -> serde_json::Value {
    let text = |t: &str| serde_json::json!({"type": "text", "text": t});
    match &m.content {
        None => serde_json::Value::Null,
        // Assistant and tool turns keep their text as it is: templates read them as strings.
        Some(Content::Text(t)) if m.role == Role::Assistant || m.role == Role::Tool => t.clone().into(),
        Some(Content::Text(t)) => serde_json::json!([text(t)]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text: t } => text(t),
                ContentPart::ImageUrl { .. } => serde_json::json!({"type": "image"}),
                ContentPart::VideoUrl { .. } => serde_json::json!({"type": "video"}),
            })
            .collect(),
    }
}

/// `text` (the rendered prompt) with its `k`-th image placeholder replaced by image `k`'s token layout;
/// a count that differs from the images' is refused (a placeholder typed in a message's text counts).
pub fn expand(text: &str, format: &ImageFormat, images: &[Preprocessed]) -> Result<String, ApiError> {
    let placeholder = format.processor.placeholder();
    let pieces: Vec<&str> = text.split(placeholder).collect();
    if pieces.len() != images.len() + 1 {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the prompt holds {} image placeholders ({placeholder}) for {} images: the chat template \
                 does not place them, or a message's text contains one",
                pieces.len() - 1,
                images.len()
            ),
        ));
    }
    let mut out = String::with_capacity(text.len());
    for (piece, image) in pieces.iter().zip(images) {
        out.push_str(piece);
        out.push_str(&format.processor.image_prompt(image, format.tokens_per_tile));
    }
    out.push_str(pieces[pieces.len() - 1]);
    Ok(out)
}

/// Where each tile of `images` stands in `ids`: the starts of the runs of image tokens, one run of
/// `tokens_per_tile` per tile in order; anything else (the tokenizer split the layout otherwise) is
/// refused.
pub fn place(
    ids: &[u32],
    format: &ImageFormat,
    images: Vec<Preprocessed>,
) -> Result<Vec<PlannedImage>, ApiError> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != format.image_token {
            i += 1;
            continue;
        }
        let start = i;
        while i < ids.len() && ids[i] == format.image_token {
            i += 1;
        }
        runs.push((start, i - start));
    }
    let tiles: usize = images.iter().map(|p| p.tiles.len()).sum();
    let n = format.tokens_per_tile;
    if runs.len() != tiles || runs.iter().any(|&(_, len)| len != n) {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the prompt's image tokens are {} runs of lengths {:?}; its {tiles} image tiles need one run \
                 of {n} each",
                runs.len(),
                runs.iter().map(|r| r.1).collect::<Vec<_>>()
            ),
        ));
    }
    let mut runs = runs.into_iter().map(|(start, _)| start);
    Ok(images
        .into_iter()
        .map(|pixels| PlannedImage {
            at: runs.by_ref().take(pixels.tiles.len()).collect(),
            pixels,
        })
        .collect())
}
