//! GGUF (v2 and v3) from bytes: the header, metadata key/values, tensor infos and the aligned data section.
//!
//! Layout (all little-endian): magic `GGUF`, `u32` version, `u64` tensor count, `u64` metadata count (v1 used
//! `u32` counts and is refused), then the key/values, then per tensor its name, `u32` dimension count,
//! `u64` dimensions (`ne[0]` first: the innermost, contiguous one), `u32` type and `u64` offset within the
//! data section, which starts at the next multiple of `general.alignment` (default 32).
//!
//! Tensor positions are `u64` on every platform: a wasm32 module streams files past its 4 GiB address space
//! (it holds one tensor at a time), so a file position is never a `usize`. Offsets and sizes that overflow
//! 64 bits, tensors that overlap ([`super::stream`]) or end past the file's declared length are malformed,
//! named.
//!
//! Every count and length is checked against the bytes that remain before anything is allocated, using the
//! smallest size an element can take in the file. Arrays are stored typed (`Vec<u8>`, `Vec<f32>`, …), so an
//! array never takes more memory than its bytes in the file, except string arrays: a string takes at least
//! 8 bytes in the file and 24 (`String`) in the array, so no single allocation exceeds 3× the file's size.
//! Element and byte counts use checked arithmetic. Dequantisation lives in [`super::quant`].

use std::collections::BTreeMap;

use super::quant::GgmlType;

/// A GGUF file could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    #[error("not a GGUF file (magic {0:?}, expected `GGUF`)")]
    Magic([u8; 4]),
    #[error("GGUF version {0} is not supported (kiln reads versions 2 and 3)")]
    Version(u32),
    #[error("the GGUF file is truncated while reading {0}")]
    Truncated(String),
    #[error("the GGUF file is malformed: {0}")]
    Malformed(String),
    #[error("tensor `{name}` has GGML type {ty}, which kiln does not read ({supported})")]
    UnsupportedType {
        name: String,
        ty: u32,
        supported: &'static str,
    },
    #[error("GGUF metadata key `{key}`: {reason}")]
    Metadata { key: String, reason: String },
}

/// The most bytes a header read from a file's first bytes may take ([`Gguf::parse_header`]; a vocabulary of
/// 262k tokens takes a few MiB).
pub const MAX_HEADER_BYTES: usize = 256 << 20;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// A metadata array, stored by element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
}

impl Array {
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a float, when the array holds numbers.
    pub fn f64_at(&self, i: usize) -> Option<f64> {
        match self {
            Array::U8(v) => v.get(i).map(|&x| x.into()),
            Array::I8(v) => v.get(i).map(|&x| x.into()),
            Array::U16(v) => v.get(i).map(|&x| x.into()),
            Array::I16(v) => v.get(i).map(|&x| x.into()),
            Array::U32(v) => v.get(i).map(|&x| x.into()),
            Array::I32(v) => v.get(i).map(|&x| x.into()),
            Array::U64(v) => v.get(i).map(|&x| x as f64),
            Array::I64(v) => v.get(i).map(|&x| x as f64),
            Array::F32(v) => v.get(i).map(|&x| x.into()),
            Array::F64(v) => v.get(i).copied(),
            Array::Bool(_) | Array::String(_) => None,
        }
    }

    /// The strings, when it is a string array.
    pub fn strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Where a tensor lives and how it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub ty: GgmlType,
    /// GGUF order: `dims[0]` is the contiguous (row) dimension. The row-major shape is this reversed.
    pub dims: Vec<usize>,
    /// Byte range within the file (64-bit on every platform: a file may be larger than the address space
    /// of a wasm32 module that streams it).
    pub start: u64,
    pub end: u64,
}

impl TensorInfo {
    /// The bytes the tensor takes in the file.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// The byte range as indices into a file held in memory (`None` past this platform's address space).
    pub fn range(&self) -> Option<std::ops::Range<usize>> {
        Some(usize::try_from(self.start).ok()?..usize::try_from(self.end).ok()?)
    }

    /// The row-major (PyTorch-order) shape.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF file borrowing its bytes.
#[derive(Clone)]
pub struct Gguf<'a> {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    /// Tensor infos in file order.
    pub tensors: Vec<(String, TensorInfo)>,
    bytes: &'a [u8],
}

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Whether `bytes` may be a prefix of the file: a count beyond them is then [`GgufError::Truncated`]
    /// (more bytes may follow) rather than malformed.
    prefix: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| GgufError::Truncated(what.into()))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// A count of items each at least `min_size` bytes long, checked against what remains.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize, GgufError> {
        let n = self.u64(what)?;
        match usize::try_from(n) {
            Ok(n) if n.checked_mul(min_size).is_some_and(|b| b <= self.remaining()) => Ok(n),
            // Within a header's size, more bytes may hold it; beyond, no GGUF header is that large.
            Ok(n) if self.prefix && n.checked_mul(min_size).is_some_and(|b| b <= MAX_HEADER_BYTES) => {
                Err(GgufError::Truncated(what.into()))
            }
            _ => Err(GgufError::Malformed(format!(
                "{what} is {n}, more than the {} bytes left can hold",
                self.remaining()
            ))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.count(what, 1)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| GgufError::Malformed(format!("{what} is not UTF-8")))
    }

    fn value(&mut self, ty: u32, key: &str) -> Result<Value, GgufError> {
        let w =
            |r: &mut Self, n| -> Result<&'a [u8], GgufError> { r.take(n, &format!("the value of `{key}`")) };
        Ok(match ty {
            0 => Value::U8(w(self, 1)?[0]),
            1 => Value::I8(w(self, 1)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(w(self, 2)?.try_into().unwrap_or_default())),
            3 => Value::I16(i16::from_le_bytes(w(self, 2)?.try_into().unwrap_or_default())),
            4 => Value::U32(u32::from_le_bytes(w(self, 4)?.try_into().unwrap_or_default())),
            5 => Value::I32(i32::from_le_bytes(w(self, 4)?.try_into().unwrap_or_default())),
            6 => Value::F32(f32::from_le_bytes(w(self, 4)?.try_into().unwrap_or_default())),
            7 => match w(self, 1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(GgufError::Malformed(format!("`{key}` holds bool byte {b}"))),
            },
            8 => Value::String(self.string(&format!("the value of `{key}`"))?),
            9 => {
                let elem = self.u32(&format!("the array type of `{key}`"))?;
                let what = format!("the length of `{key}`");
                /// Reads `n` fixed-size little-endian elements.
                macro_rules! fixed {
                    ($variant:ident, $t:ty) => {{
                        const SIZE: usize = std::mem::size_of::<$t>();
                        let n = self.count(&what, SIZE)?;
                        let raw = self.take(n * SIZE, &format!("the values of `{key}`"))?;
                        Array::$variant(
                            raw.chunks_exact(SIZE)
                                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                                .collect(),
                        )
                    }};
                }
                Value::Array(match elem {
                    0 => fixed!(U8, u8),
                    1 => fixed!(I8, i8),
                    2 => fixed!(U16, u16),
                    3 => fixed!(I16, i16),
                    4 => fixed!(U32, u32),
                    5 => fixed!(I32, i32),
                    6 => fixed!(F32, f32),
                    7 => {
                        let n = self.count(&what, 1)?;
                        let raw = self.take(n, &format!("the values of `{key}`"))?;
                        if let Some(b) = raw.iter().find(|&&b| b > 1) {
                            return Err(GgufError::Malformed(format!("`{key}` holds bool byte {b}")));
                        }
                        Array::Bool(raw.iter().map(|&b| b == 1).collect())
                    }
                    8 => {
                        let n = self.count(&what, 8)?;
                        let mut items = Vec::with_capacity(n);
                        for i in 0..n {
                            items.push(self.string(&format!("`{key}`[{i}]"))?);
                        }
                        Array::String(items)
                    }
                    10 => fixed!(U64, u64),
                    11 => fixed!(I64, i64),
                    12 => fixed!(F64, f64),
                    t => {
                        return Err(GgufError::Malformed(format!(
                            "`{key}` has array element type {t}"
                        )));
                    }
                })
            }
            10 => Value::U64(u64::from_le_bytes(w(self, 8)?.try_into().unwrap_or_default())),
            11 => Value::I64(i64::from_le_bytes(w(self, 8)?.try_into().unwrap_or_default())),
            12 => Value::F64(f64::from_le_bytes(w(self, 8)?.try_into().unwrap_or_default())),
            t => return Err(GgufError::Malformed(format!("`{key}` has value type {t}"))),
        })
    }
}

impl<'a> Gguf<'a> {
    /// Parses the header, metadata and tensor infos of `bytes` and checks every tensor's byte range.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        Self::parse_within_len(bytes, Some(bytes.len() as u64), false)
    }

    /// Parses the header of a file whose first bytes are `prefix` (a file arriving in pieces): the
    /// metadata and tensor infos, without the data section, which is checked only for arithmetic overflow.
    /// A prefix that ends inside the header is [`GgufError::Truncated`]. The result holds no tensor data
    /// ([`Gguf::data`] is empty); see [`super::stream`].
    pub fn parse_header(prefix: &[u8]) -> Result<Gguf<'static>, GgufError> {
        Self::parse_header_of(prefix, None)
    }

    /// [`Gguf::parse_header`] of a file whose length is declared (a download's `content-length`, a
    /// `Blob`'s size): a tensor whose data would end past it is malformed, named.
    pub fn parse_header_of(prefix: &[u8], file_len: Option<u64>) -> Result<Gguf<'static>, GgufError> {
        let g = Gguf::parse_within_len(prefix, file_len, true)?;
        Ok(Gguf {
            version: g.version,
            metadata: g.metadata,
            tensors: g.tensors,
            bytes: &[],
        })
    }

    /// The header at the start of `bytes`, with tensor ranges checked against `file_len` when it is known;
    /// `prefix`: `bytes` may be only the file's first bytes.
    fn parse_within_len(bytes: &'a [u8], file_len: Option<u64>, prefix: bool) -> Result<Self, GgufError> {
        let mut r = Reader {
            bytes,
            pos: 0,
            prefix,
        };
        let magic: [u8; 4] = r.array("the magic")?;
        if &magic != b"GGUF" {
            return Err(GgufError::Magic(magic));
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        // A tensor info takes at least 8 (name length) + 4 + 4 + 8 bytes; a key/value at least 8 + 4 + 1.
        let n_tensors = r.count("the tensor count", 24)?;
        let n_kv = r.count("the metadata count", 13)?;
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key {i}"))?;
            let ty = r.u32(&format!("the type of `{key}`"))?;
            let value = r.value(ty, &key)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::Malformed(format!(
                    "metadata key `{key}` appears twice"
                )));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a as usize,
                _ => {
                    return Err(GgufError::Metadata {
                        key: "general.alignment".into(),
                        reason: format!("{v:?} is not a power of two up to 2^20"),
                    });
                }
            },
        };
        let mut infos = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = r.string(&format!("the name of tensor {i}"))?;
            let n_dims = r.u32(&format!("the dimension count of `{name}`"))?;
            if !(1..=4).contains(&n_dims) {
                return Err(GgufError::Malformed(format!(
                    "tensor `{name}` has {n_dims} dimensions"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = r.u64(&format!("the dimensions of `{name}`"))?;
                dims.push(
                    usize::try_from(d)
                        .map_err(|_| GgufError::Malformed(format!("tensor `{name}` has dimension {d}")))?,
                );
            }
            let ty = r.u32(&format!("the type of `{name}`"))?;
            let ty = GgmlType::from_id(ty).ok_or(GgufError::UnsupportedType {
                name: name.clone(),
                ty,
                supported: GgmlType::SUPPORTED,
            })?;
            let offset = r.u64(&format!("the offset of `{name}`"))?;
            infos.push((name, dims, ty, offset));
        }
        let data_start = r
            .pos
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| GgufError::Truncated("the data section".into()))?;
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, dims, ty, offset) in infos {
            let elements = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
                .filter(|&n| n > 0)
                .ok_or_else(|| GgufError::Malformed(format!("tensor `{name}` has dimensions {dims:?}")))?;
            if !dims[0].is_multiple_of(ty.block_elems()) {
                return Err(GgufError::Malformed(format!(
                    "tensor `{name}`: row length {} is not a multiple of the {ty:?} block of {}",
                    dims[0],
                    ty.block_elems()
                )));
            }
            let size = (elements / ty.block_elems() as u64)
                .checked_mul(ty.block_bytes() as u64)
                .ok_or_else(|| {
                    GgufError::Malformed(format!("tensor `{name}`: its size overflows 64 bits"))
                })?;
            if !offset.is_multiple_of(alignment as u64) {
                return Err(GgufError::Malformed(format!(
                    "tensor `{name}` starts at offset {offset}, not a multiple of the alignment {alignment}"
                )));
            }
            let (start, end) = (data_start as u64)
                .checked_add(offset)
                .and_then(|start| Some((start, start.checked_add(size)?)))
                .ok_or_else(|| {
                    GgufError::Malformed(format!(
                        "tensor `{name}`: its offset {offset} and size {size} overflow 64 bits"
                    ))
                })?;
            match file_len {
                Some(len) if end > len && !prefix => {
                    return Err(GgufError::Truncated(format!("the data of `{name}`")));
                }
                Some(len) if end > len => {
                    return Err(GgufError::Malformed(format!(
                        "the data of `{name}` ends at byte {end}, past the end of the file ({len} bytes)"
                    )));
                }
                _ => {}
            }
            if tensors.iter().any(|(n, _): &(String, TensorInfo)| *n == name) {
                return Err(GgufError::Malformed(format!("tensor `{name}` appears twice")));
            }
            tensors.push((name, TensorInfo { ty, dims, start, end }));
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            bytes,
        })
    }

    /// The info of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The raw bytes of a tensor. A header parsed alone ([`Gguf::parse_header`]) holds no tensor data:
    /// its `data` is empty (and asserts in debug builds).
    pub fn data(&self, info: &TensorInfo) -> &'a [u8] {
        let data = info.range().and_then(|r| self.bytes.get(r));
        debug_assert!(data.is_some(), "tensor data asked of a header parsed alone");
        data.unwrap_or_default()
    }

    /// Tensor `name` dequantised to f32, row-major, with its row-major shape.
    pub fn f32(&self, name: &str) -> Option<(Vec<f32>, Vec<usize>)> {
        let info = self.tensor(name)?;
        Some((info.ty.dequantize(self.data(info)), info.shape()))
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// A required metadata value, as an error naming the key when it is absent.
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::Metadata {
            key: key.into(),
            reason: "is missing".into(),
        })
    }

    /// A required non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize, GgufError> {
        let v = self.require(key)?;
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                reason: format!("{v:?} is not a non-negative integer"),
            })
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                reason: format!("{v:?} is not a string"),
            }),
        }
    }

    /// An optional array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let items = v
            .as_array()
            .and_then(Array::strings)
            .ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                reason: "is not an array of strings".into(),
            })?;
        Ok(Some(items.iter().map(String::as_str).collect()))
    }
}
