//! Load-time quantisation of a float checkpoint (Hugging Face safetensors in f32, f16 or bf16): each weight
//! matrix is quantized with kiln's own quantizers (llama.cpp's reference algorithms, [`super::quant`]) as it
//! is taken, so the decoder keeps it in GGML blocks like a GGUF file's. 1-D tensors (norms, biases) stay
//! as they are. A row length that is not a whole number of the type's blocks falls back as
//! `llama-quantize` does (Q4_K → Q5_0, Q6_K → Q8_0, …: [`super::derive::fallback`]); where no block fits,
//! the matrix keeps the checkpoint's own type. Matrices are quantized 64 rows at a time, so no more than
//! that is ever widened to f32.

use std::borrow::Cow;

use super::derive::fallback;
use super::{GgmlType, LoadError, RawTensor, Weights};

/// Rows widened to f32 and quantized together.
const ROWS_AT_ONCE: usize = 64;

/// The types a checkpoint can be quantized to, as the `quantize` load option names them (lowercase GGML
/// names: `q8_0`, `q4_k`, …).
pub const QUANTIZE_TYPES: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// The quantized type named `name` (`"q4_k"`, case-insensitive), or an error listing the choices.
pub fn quantize_type(name: &str) -> Result<GgmlType, String> {
    QUANTIZE_TYPES
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let names: Vec<String> = QUANTIZE_TYPES.iter().map(|t| t.name().to_lowercase()).collect();
            format!("`quantize` must be one of {}, got {name:?}", names.join(", "))
        })
}

/// A [`Weights`] whose float weight matrices come out quantized to `ty`.
pub struct Quantizing<'w> {
    inner: &'w mut dyn Weights,
    ty: GgmlType,
    /// Names under these prefixes keep their types.
    kept: Vec<String>,
}

impl<'w> Quantizing<'w> {
    pub fn new(inner: &'w mut dyn Weights, ty: GgmlType) -> Self {
        Self {
            inner,
            ty,
            kept: Vec::new(),
        }
    }

    /// Leaves the tensors whose names start with one of `prefixes` as they are (a vision tower's).
    pub fn keeping(mut self, prefixes: impl IntoIterator<Item = String>) -> Self {
        self.kept.extend(prefixes);
        self
    }
}

impl Weights for Quantizing<'_> {
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(name)
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<RawTensor<'_>, LoadError> {
        let ty = self.ty;
        let raw = self.inner.take(name, expected)?;
        let float = matches!(raw.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let &[_, cols] = raw.shape.as_slice() else {
            return Ok(raw);
        };
        if !float || !name.ends_with(".weight") || self.kept.iter().any(|p| name.starts_with(p.as_str())) {
            return Ok(raw);
        }
        let target = fallback(ty, cols);
        if !target.is_quantized() {
            return Ok(raw);
        }
        // A few rows at a time: a tensor is never widened to f32 whole (a 1B model's embedding would
        // take a GiB).
        let src_row = raw.ty.row_bytes(cols).unwrap_or(0).max(1);
        let mut bytes = Vec::with_capacity(raw.shape[0] * target.row_bytes(cols).unwrap_or(0));
        for rows in raw.bytes.chunks(src_row * ROWS_AT_ONCE) {
            let values = raw.ty.dequantize(rows);
            if values.iter().any(|v| !v.is_finite()) {
                return Err(LoadError::Blocks {
                    name: name.into(),
                    ty: raw.ty.name(),
                    reason: "holds a NaN or infinite value, which cannot be quantized".into(),
                });
            }
            let q = target.quantize(&values).ok_or_else(|| LoadError::Blocks {
                name: name.into(),
                ty: target.name(),
                reason: format!("rows of {cols} are not whole blocks"),
            })?;
            bytes.extend_from_slice(&q);
        }
        Ok(RawTensor {
            ty: target,
            shape: raw.shape,
            bytes: Cow::Owned(bytes),
        })
    }

    fn leftover(&self) -> Option<String> {
        self.inner.leftover()
    }

    fn total_bytes(&self) -> u64 {
        self.inner.total_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_case_insensitively() {
        assert_eq!(quantize_type("q4_k"), Ok(GgmlType::Q4_K));
        assert_eq!(quantize_type("Q8_0"), Ok(GgmlType::Q8_0));
        assert_eq!(quantize_type("iq4_xs"), Ok(GgmlType::IQ4_XS));
        let e = quantize_type("q4").unwrap_err();
        assert!(e.contains("q4_k") && e.contains("\"q4\""), "{e}");
        assert!(quantize_type("f16").is_err(), "not a quantized type");
    }
}
