//! GGUF v3 to bytes: the inverse of [`super::gguf`], which reads what this writes.
//!
//! Layout (all little-endian, as the reader's module doc describes): magic `GGUF`, `u32` version 3,
//! `u64` tensor count, `u64` metadata count, the key/values (key string, `u32` value type, value; an array
//! is its `u32` element type, `u64` length and the elements), then per tensor its name, `u32` dimension
//! count, the `u64` dimensions in GGUF order (`dims[0]` the contiguous row), `u32` GGML type id and `u64`
//! offset within the data section. The data section starts at the next multiple of `general.alignment`
//! (default 32) and every tensor starts at a multiple of it, zero-padded, as ggml's `gguf_write_to_file`
//! lays it out (the last tensor is padded too).
//!
//! Keys are written in the map's (sorted) order and tensors in the order given, so the same input gives
//! the same bytes. Every tensor is checked before anything is written: a name given twice, 0 or more than
//! 4 dimensions, a row that is not whole blocks or a byte length that does not match the dimensions is an
//! error naming the tensor.

use std::collections::BTreeMap;
use std::io::Write;

use super::gguf::{Array, Value};
use super::quant::GgmlType;

/// The alignment when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: usize = 32;

/// A tensor to write: its name, storage type, dimensions in GGUF order (`dims[0]` is the row length; the
/// row-major shape reversed) and its bytes, whole blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorOut<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub dims: &'a [usize],
    pub data: &'a [u8],
}

/// A GGUF file could not be written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteError {
    #[error("tensor `{name}`: {reason}")]
    Tensor { name: String, reason: String },
    #[error("GGUF metadata key `general.alignment`: {0:?} is not a power of two up to 2^20")]
    Alignment(Value),
    #[error("writing the GGUF file: {0}")]
    Io(String),
}

/// The tensors of a parsed file as they are stored, borrowed, in file order: what [`write`] takes to
/// rewrite the file with other metadata.
pub fn tensors_of<'a>(g: &'a crate::loader::Gguf<'a>) -> Vec<TensorOut<'a>> {
    g.tensors
        .iter()
        .map(|(name, info)| TensorOut {
            name,
            ty: info.ty,
            dims: &info.dims,
            data: g.data(info),
        })
        .collect()
}

/// The GGUF file of `metadata` and `tensors`, as bytes.
pub fn write(metadata: &BTreeMap<String, Value>, tensors: &[TensorOut<'_>]) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::new();
    write_to(&mut out, metadata, tensors)?;
    Ok(out)
}

/// Writes the GGUF file of `metadata` and `tensors` to `w`; returns the bytes written. Everything is
/// checked before the first byte is written.
pub fn write_to(
    w: &mut impl Write,
    metadata: &BTreeMap<String, Value>,
    tensors: &[TensorOut<'_>],
) -> Result<u64, WriteError> {
    let alignment = alignment(metadata)?;
    for (i, t) in tensors.iter().enumerate() {
        check(t)?;
        if tensors[..i].iter().any(|o| o.name == t.name) {
            return Err(tensor_error(t, "appears twice".into()));
        }
    }
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_str(&mut head, key);
        head.extend_from_slice(&value_type(value).to_le_bytes());
        put_value(&mut head, value);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_str(&mut head, t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for &d in t.dims {
            head.extend_from_slice(&(d as u64).to_le_bytes());
        }
        head.extend_from_slice(&t.ty.id().to_le_bytes());
        head.extend_from_slice(&(offset as u64).to_le_bytes());
        offset = (offset + t.data.len()).next_multiple_of(alignment);
    }
    head.resize(head.len().next_multiple_of(alignment), 0);
    let io = |e: std::io::Error| WriteError::Io(e.to_string());
    w.write_all(&head).map_err(io)?;
    let zeros = vec![0u8; alignment];
    for t in tensors {
        w.write_all(t.data).map_err(io)?;
        let pad = t.data.len().next_multiple_of(alignment) - t.data.len();
        w.write_all(&zeros[..pad]).map_err(io)?;
    }
    Ok((head.len() + offset) as u64)
}

/// `general.alignment`, by the reader's rule.
fn alignment(metadata: &BTreeMap<String, Value>) -> Result<usize, WriteError> {
    match metadata.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => Ok(a as usize),
            _ => Err(WriteError::Alignment(v.clone())),
        },
    }
}

fn tensor_error(t: &TensorOut<'_>, reason: String) -> WriteError {
    WriteError::Tensor {
        name: t.name.into(),
        reason,
    }
}

/// Checks a tensor's dimensions against its type and bytes.
fn check(t: &TensorOut<'_>) -> Result<(), WriteError> {
    if !(1..=4).contains(&t.dims.len()) || t.dims.contains(&0) {
        return Err(tensor_error(t, format!("has dimensions {:?}", t.dims)));
    }
    let row = t.ty.row_bytes(t.dims[0]).ok_or_else(|| {
        tensor_error(
            t,
            format!(
                "row length {} is not a multiple of the {} block of {}",
                t.dims[0],
                t.ty,
                t.ty.block_elems()
            ),
        )
    })?;
    let size = t.dims[1..]
        .iter()
        .try_fold(row, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| tensor_error(t, format!("dimensions {:?} overflow", t.dims)))?;
    if size != t.data.len() {
        return Err(tensor_error(
            t,
            format!(
                "{} {:?} takes {size} bytes, the data has {}",
                t.ty,
                t.dims,
                t.data.len()
            ),
        ));
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The GGUF value type id (`enum gguf_type`).
fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

/// The element type id of an array.
fn array_type(a: &Array) -> u32 {
    match a {
        Array::U8(_) => 0,
        Array::I8(_) => 1,
        Array::U16(_) => 2,
        Array::I16(_) => 3,
        Array::U32(_) => 4,
        Array::I32(_) => 5,
        Array::F32(_) => 6,
        Array::Bool(_) => 7,
        Array::String(_) => 8,
        Array::U64(_) => 10,
        Array::I64(_) => 11,
        Array::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => {
            out.extend_from_slice(&array_type(a).to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            /// Appends every element's little-endian bytes.
            macro_rules! each {
                ($v:expr) => {
                    $v.iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
                };
            }
            match a {
                Array::U8(v) => out.extend_from_slice(v),
                Array::I8(v) => each!(v),
                Array::U16(v) => each!(v),
                Array::I16(v) => each!(v),
                Array::U32(v) => each!(v),
                Array::I32(v) => each!(v),
                Array::U64(v) => each!(v),
                Array::I64(v) => each!(v),
                Array::F32(v) => each!(v),
                Array::F64(v) => each!(v),
                Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
                Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::Gguf;

    #[test]
    fn fixtures_round_trip() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf");
        let mut seen = 0;
        for name in ["tiny-llama.gguf", "tiny-qwen2.gguf", "tiny-qwen3.gguf"] {
            let bytes = std::fs::read(format!("{dir}/{name}")).expect("fixture");
            let g = Gguf::parse(&bytes).expect("fixture parses");
            let out = write(&g.metadata, &tensors_of(&g)).expect("writes");
            let back = Gguf::parse(&out).expect("written file parses");
            assert_eq!(back.version, 3);
            assert_eq!(back.metadata, g.metadata, "{name}: metadata");
            assert_eq!(back.tensors.len(), g.tensors.len(), "{name}");
            for ((n0, t0), (n1, t1)) in g.tensors.iter().zip(&back.tensors) {
                assert_eq!((n0, t0.ty, &t0.dims), (n1, t1.ty, &t1.dims), "{name}");
                assert_eq!(g.data(t0), back.data(t1), "{name}: {n0} data");
                assert_eq!(t1.start % DEFAULT_ALIGNMENT as u64, 0, "{name}: {n0} aligned");
            }
            // A fixed point: writing what was written gives the same bytes.
            assert_eq!(
                write(&back.metadata, &tensors_of(&back)).expect("writes"),
                out,
                "{name}"
            );
            seen += 1;
        }
        assert_eq!(seen, 3);
    }

    #[test]
    fn every_value_kind_and_alignment_round_trip() {
        let mut md = BTreeMap::new();
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (k, v) in [
            ("u8", Value::U8(200)),
            ("i8", Value::I8(-100)),
            ("u16", Value::U16(60_000)),
            ("i16", Value::I16(-30_000)),
            ("u32", Value::U32(4_000_000_000)),
            ("i32", Value::I32(-2_000_000_000)),
            ("u64", Value::U64(u64::MAX)),
            ("i64", Value::I64(i64::MIN)),
            ("f32", Value::F32(-1.5e-7)),
            ("f64", Value::F64(std::f64::consts::PI)),
            ("bool", Value::Bool(true)),
            ("string", Value::String("héllo\n".into())),
            ("general.alignment", Value::U32(64)),
            ("a.u8", Value::Array(Array::U8(vec![0, 255]))),
            ("a.i8", Value::Array(Array::I8(vec![-128, 127]))),
            ("a.u16", Value::Array(Array::U16(vec![1, 65_535]))),
            ("a.i16", Value::Array(Array::I16(vec![-32_768]))),
            ("a.u32", Value::Array(Array::U32(vec![7, 8, 9]))),
            ("a.i32", Value::Array(Array::I32(vec![-1]))),
            ("a.u64", Value::Array(Array::U64(vec![u64::MAX, 0]))),
            ("a.i64", Value::Array(Array::I64(vec![i64::MIN, 3]))),
            ("a.f32", Value::Array(Array::F32(vec![0.25, -0.0]))),
            ("a.f64", Value::Array(Array::F64(vec![1e300]))),
            ("a.bool", Value::Array(Array::Bool(vec![true, false, true]))),
            ("a.string", Value::Array(Array::String(s(&["", "a", "ünï"])))),
            ("a.empty", Value::Array(Array::String(vec![]))),
        ] {
            md.insert(k.to_string(), v);
        }
        let f32s: Vec<u8> = (0..3).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let q8 = GgmlType::Q8_0.quantize(&[0.5; 64]).expect("whole blocks");
        let tensors = [
            TensorOut {
                name: "a",
                ty: GgmlType::F32,
                dims: &[3],
                data: &f32s,
            },
            TensorOut {
                name: "b",
                ty: GgmlType::Q8_0,
                dims: &[32, 2],
                data: &q8,
            },
        ];
        let out = write(&md, &tensors).expect("writes");
        let g = Gguf::parse(&out).expect("parses");
        assert_eq!(g.metadata, md);
        for (t, (name, info)) in tensors.iter().zip(&g.tensors) {
            assert_eq!(
                (t.name, t.ty, t.dims),
                (name.as_str(), info.ty, info.dims.as_slice())
            );
            assert_eq!(g.data(info), t.data);
            assert_eq!(info.start % 64, 0, "{name} starts on the 64-byte alignment");
        }
        assert_eq!(out.len() % 64, 0);
    }

    #[test]
    fn bad_tensors_and_alignment_are_errors_naming_them() {
        let md = BTreeMap::new();
        let data = [0u8; 34];
        let err = |t: TensorOut<'_>| write(&md, &[t]).expect_err("refused");
        let t = TensorOut {
            name: "w",
            ty: GgmlType::Q8_0,
            dims: &[32, 2],
            data: &data,
        };
        assert!(matches!(err(t), WriteError::Tensor { name, .. } if name == "w"));
        let t = TensorOut {
            name: "r",
            ty: GgmlType::Q8_0,
            dims: &[16],
            data: &data,
        };
        assert!(err(t).to_string().contains("`r`: row length 16"));
        let t = TensorOut {
            name: "z",
            ty: GgmlType::F32,
            dims: &[],
            data: &[],
        };
        assert!(err(t).to_string().contains("`z`"));
        let ok = TensorOut {
            name: "d",
            ty: GgmlType::Q8_0,
            dims: &[32],
            data: &data,
        };
        assert!(
            write(&md, &[ok, ok])
                .expect_err("twice")
                .to_string()
                .contains("`d`: appears twice")
        );
        let md = BTreeMap::from([("general.alignment".to_string(), Value::U32(24))]);
        assert!(matches!(write(&md, &[ok]), Err(WriteError::Alignment(_))));
    }
}
