//! safetensors from bytes: the header (`u64` little-endian length, then JSON
//! `{name: {dtype, shape, data_offsets}}`), and tensors read out as stored (F32/F16/BF16 bytes) or as f32.
//!
//! Every size in the header is checked against the buffer with checked arithmetic before anything is read
//! or allocated, so a truncated or hostile file is an error naming what is wrong, never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use super::{GgmlType, RawTensor};

/// A safetensors file could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SafetensorsError {
    #[error("`{file}` is truncated: {what}")]
    Truncated { file: String, what: String },
    #[error("`{file}` has a malformed header: {reason}")]
    Header { file: String, reason: String },
    #[error("tensor `{name}` in `{file}` has dtype `{dtype}`; kiln reads F32, F16 and BF16")]
    Dtype {
        file: String,
        name: String,
        dtype: String,
    },
    #[error("tensor `{name}` in `{file}`: shape {shape:?} needs {expected} bytes, its data has {actual}")]
    Size {
        file: String,
        name: String,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
}

#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

/// A tensor read as f32: row-major values and the shape.
pub type F32Tensor = (Vec<f32>, Vec<usize>);

/// A tensor's place in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    pub start: usize,
    pub end: usize,
}

/// A parsed safetensors file borrowing its bytes.
pub struct Safetensors<'a> {
    file: String,
    data: &'a [u8],
    pub tensors: BTreeMap<String, TensorInfo>,
}

impl<'a> Safetensors<'a> {
    /// Parses the header of `bytes`; `file` names the file in errors.
    pub fn parse(file: &str, bytes: &'a [u8]) -> Result<Self, SafetensorsError> {
        let truncated = |what: &str| SafetensorsError::Truncated {
            file: file.into(),
            what: what.into(),
        };
        let header = |reason: String| SafetensorsError::Header {
            file: file.into(),
            reason,
        };
        let len_bytes: [u8; 8] = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| truncated("no header length"))?;
        let len = usize::try_from(u64::from_le_bytes(len_bytes))
            .map_err(|_| header("header length overflows".into()))?;
        let end = 8usize
            .checked_add(len)
            .ok_or_else(|| header("header length overflows".into()))?;
        let json = bytes
            .get(8..end)
            .ok_or_else(|| truncated(&format!("header of {len} bytes, file of {}", bytes.len())))?;
        let raw: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(json).map_err(|e| header(e.to_string()))?;
        let data = &bytes[end..];
        let mut tensors = BTreeMap::new();
        for (name, value) in raw {
            if name == "__metadata__" {
                continue;
            }
            let e: Entry = serde_json::from_value(value).map_err(|e| header(format!("`{name}`: {e}")))?;
            let [start, stop] = e.data_offsets;
            if start > stop {
                return Err(header(format!(
                    "`{name}`: data_offsets [{start}, {stop}] are reversed"
                )));
            }
            if stop > data.len() {
                return Err(truncated(&format!(
                    "`{name}` ends at byte {stop} of a {}-byte data section",
                    data.len()
                )));
            }
            tensors.insert(
                name,
                TensorInfo {
                    dtype: e.dtype,
                    shape: e.shape,
                    start,
                    end: stop,
                },
            );
        }
        Ok(Self {
            file: file.into(),
            data,
            tensors,
        })
    }

    /// Tensor `name` as stored (F32, F16 or BF16, little-endian like GGML's), with its shape.
    pub fn raw(&self, name: &str) -> Option<Result<RawTensor<'a>, SafetensorsError>> {
        let info = self.tensors.get(name)?;
        Some(self.read(name, info))
    }

    /// Tensor `name` as f32 values (row-major) with its shape.
    pub fn f32(&self, name: &str) -> Option<Result<F32Tensor, SafetensorsError>> {
        Some(self.raw(name)?.map(|raw| (raw.to_f32(), raw.shape)))
    }

    fn read(&self, name: &str, info: &TensorInfo) -> Result<RawTensor<'a>, SafetensorsError> {
        let ty = match info.dtype.as_str() {
            "F32" => GgmlType::F32,
            "F16" => GgmlType::F16,
            "BF16" => GgmlType::BF16,
            other => {
                return Err(SafetensorsError::Dtype {
                    file: self.file.clone(),
                    name: name.into(),
                    dtype: other.into(),
                });
            }
        };
        let bytes = &self.data[info.start..info.end];
        let expected = info
            .shape
            .iter()
            .try_fold(ty.block_bytes(), |acc: usize, &d| acc.checked_mul(d));
        if expected != Some(bytes.len()) {
            return Err(SafetensorsError::Size {
                file: self.file.clone(),
                name: name.into(),
                shape: info.shape.clone(),
                expected: expected.unwrap_or(usize::MAX),
                actual: bytes.len(),
            });
        }
        Ok(RawTensor {
            ty,
            shape: info.shape.clone(),
            bytes: Cow::Borrowed(bytes),
        })
    }
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShardIndex {
    pub weight_map: BTreeMap<String, String>,
}
