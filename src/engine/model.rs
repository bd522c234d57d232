//! A loaded model: the decoder on its device, the tokenizer with its chat template, and the limits requests
//! are validated against. Bytes in: fetching and caching happen at the edge.

use burn::tensor::Device;

use super::EngineError;
use crate::api::ModelSpec;
use crate::loader::{Gguf, GgufWeights, gguf_model};
use crate::model::Decoder;
use crate::tokenizer::ModelTokenizer;

/// A model ready to generate.
#[derive(Debug)]
pub struct Model {
    /// The id requests name in `model`.
    pub id: String,
    pub decoder: Decoder,
    pub tokenizer: ModelTokenizer,
}

impl Model {
    /// Loads a single-file GGUF model: config, weights (dequantised to f32 on `device`), tokenizer and chat
    /// template all come from the file.
    pub fn from_gguf(id: &str, bytes: &[u8], device: &Device) -> Result<Self, EngineError> {
        let file = Gguf::parse(bytes).map_err(crate::loader::LoadError::from)?;
        let config = gguf_model::config(&file)?;
        let tokenizer = ModelTokenizer::from_gguf(&file)?;
        let mut weights = GgufWeights::new(&file, &config)?;
        let decoder = Decoder::load(config, &mut weights, device)?;
        Ok(Self {
            id: id.to_owned(),
            decoder,
            tokenizer,
        })
    }

    /// What requests are validated against.
    pub fn spec(&self) -> ModelSpec {
        ModelSpec {
            id: self.id.clone(),
            context_length: self.decoder.config.max_position_embeddings,
            vocab_size: self.decoder.config.vocab_size,
            images: false,
            video: false,
        }
    }
}
