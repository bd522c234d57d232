//! A GGUF file arriving in pieces (a fetch stream, the Cache API, slices of an `ArrayBuffer`): the header is
//! parsed as soon as its bytes are in, then each tensor is handed over as soon as its last byte arrives, and
//! its bytes are dropped. The file is never whole in memory: what the stream holds at any time is the
//! header (until it parses) or the one tensor being completed.
//!
//! A tensor that lies whole inside one pushed piece is handed over as a slice of it (no copy); one that
//! spans pieces is gathered into one buffer of the file's largest tensor's size, reused from tensor to
//! tensor ([`gather_buffer`]). Tensors are handed over in
//! file order, which need not be the order of the tensor infos. Bytes between tensors (alignment padding)
//! and after the last one are skipped.

use super::LoadError;
use super::gguf::{Gguf, GgufError, TensorInfo};

pub use super::gguf::MAX_HEADER_BYTES;

/// A file error as the caller's error type.
fn fail<E: From<LoadError>>(e: GgufError) -> E {
    E::from(LoadError::from(e))
}

/// `n` bytes, at most `limit` (a piece's length).
fn clamp(n: u64, limit: usize) -> usize {
    usize::try_from(n).map_or(limit, |n| n.min(limit))
}

/// The buffer tensors are gathered in, for the whole file: one allocation of the largest tensor's size,
/// made when the first tensor that spans pieces begins, freed after the file's last tensor. Gathering each tensor in a buffer of its own size (or growing one) would
/// leave, in a wasm module's memory (which never shrinks), the freed block of an earlier large tensor
/// beside the new block of a larger one: measured, the 8B shape's load grew the module by its
/// `token_embd` (282 MB) and its `output.weight` (431 MB) together.
fn gather_buffer<E: From<LoadError>>(header: &Gguf<'static>) -> Result<Vec<u8>, E> {
    let Some((name, info)) = header.tensors.iter().max_by_key(|(_, t)| t.size()) else {
        return Ok(Vec::new());
    };
    let size = usize::try_from(info.size()).map_err(|_| {
        fail(GgufError::Malformed(format!(
            "tensor `{name}` takes {} bytes, more than this platform can address",
            info.size()
        )))
    })?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(size).map_err(|_| {
        fail(GgufError::Malformed(format!(
            "tensor `{name}` takes {size} bytes, more than this platform could allocate"
        )))
    })?;
    Ok(buf)
}

/// What a pushed piece completed.
pub enum Event<'s> {
    /// The header parsed (metadata and tensor infos; [`Gguf::data`] is empty).
    Header(&'s Gguf<'static>),
    /// Every byte of tensor `name` arrived.
    Tensor {
        name: &'s str,
        info: &'s TensorInfo,
        bytes: &'s [u8],
    },
}

/// A GGUF file fed piece by piece with [`GgufStream::push`].
pub struct GgufStream {
    /// Header bytes until the header parses; afterwards the part of the current tensor seen so far.
    buf: Vec<u8>,
    /// Bytes of the file pushed so far (a file may be larger than this platform's address space).
    pos: u64,
    /// The file's declared length, when known: a tensor ending past it is refused with the header.
    len: Option<u64>,
    /// The header gathered so far is retried once it reaches this length (doubling: linear work overall).
    retry_at: usize,
    /// Stop at the header: the bytes after it are not looked at ([`GgufStream::header_only`]).
    header_only: bool,
    header: Option<Gguf<'static>>,
    /// Indices into the header's tensors, by start offset.
    order: Vec<usize>,
    /// Position in `order` of the next tensor to complete.
    next: usize,
}

impl Default for GgufStream {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufStream {
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            retry_at: 0,
            len: None,
            header_only: false,
            header: None,
            order: Vec::new(),
            next: 0,
        }
    }

    /// Declares the file's length (a download's `content-length`, a `Blob`'s size), before its first
    /// bytes: every tensor's range is checked against it once the header parses.
    pub fn declare_len(&mut self, len: u64) {
        self.len = Some(len);
    }

    /// The header, once it has parsed (and while no tensor is being handed over).
    pub fn header(&self) -> Option<&Gguf<'static>> {
        self.header.as_ref()
    }

    /// A stream that reads the header and nothing after it (an inspection): no tensor is gathered, so its
    /// memory is the header's alone.
    pub fn header_only(mut self) -> Self {
        self.header_only = true;
        self
    }

    /// Feeds the next bytes of the file; `on` sees the header once it parses and each tensor once it is
    /// complete. An error from `on` stops the stream and is returned.
    pub fn push<E: From<LoadError>>(
        &mut self,
        piece: &[u8],
        on: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.header.is_some() {
            return match self.header_only {
                true => Ok(()),
                false => self.data(piece, on),
            };
        }
        if self.buf.is_empty() {
            // The whole header may be in this first piece (all of a file's bytes at once): parse it in
            // place, without gathering a copy.
            if self.begin(piece, on)? {
                return Ok(());
            }
        }
        self.buf.extend_from_slice(piece);
        self.pos += piece.len() as u64;
        if self.buf.len() < self.retry_at {
            return Ok(());
        }
        let gathered = std::mem::take(&mut self.buf);
        if !self.begin(&gathered, on)? {
            self.buf = gathered;
        }
        Ok(())
    }

    /// Parses the header at the start of `bytes` (the file's first bytes) and hands on the data after it:
    /// `Ok(false)` when `bytes` end inside the header.
    fn begin<E: From<LoadError>>(
        &mut self,
        bytes: &[u8],
        on: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<bool, E> {
        let header = match Gguf::parse_header_of(bytes, self.len) {
            Ok(h) => h,
            Err(GgufError::Truncated(what)) => {
                if bytes.len() > MAX_HEADER_BYTES {
                    return Err(fail(GgufError::Malformed(format!(
                        "the header is larger than {} MiB (still reading {what})",
                        MAX_HEADER_BYTES >> 20
                    ))));
                }
                self.retry_at = bytes.len().saturating_mul(2).clamp(4096, MAX_HEADER_BYTES + 1);
                return Ok(false);
            }
            Err(e) => return Err(fail(e)),
        };
        let mut order: Vec<usize> = (0..header.tensors.len()).collect();
        order.sort_by_key(|&i| header.tensors[i].1.start);
        for pair in order.windows(2) {
            let (a, b) = (&header.tensors[pair[0]], &header.tensors[pair[1]]);
            if b.1.start < a.1.end {
                return Err(fail(GgufError::Malformed(format!(
                    "the data of tensors `{}` and `{}` overlap",
                    a.0, b.0
                ))));
            }
        }
        self.order = order;
        on(Event::Header(&header))?;
        self.header = Some(header);
        // The bytes after the header are the start of the data section.
        self.pos = 0;
        if !self.header_only {
            self.data(bytes, on)?;
        }
        Ok(true)
    }

    /// Hands on the tensors that `piece`, the file's bytes from `self.pos` on, completes.
    fn data<E: From<LoadError>>(
        &mut self,
        piece: &[u8],
        on: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(header) = self.header.take() else {
            return Ok(());
        };
        let result = self.data_with(&header, piece, on);
        self.header = Some(header);
        result
    }

    fn data_with<E: From<LoadError>>(
        &mut self,
        header: &Gguf<'static>,
        mut piece: &[u8],
        on: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while !piece.is_empty() {
            let Some(&i) = self.order.get(self.next) else {
                // Past the last tensor: padding.
                self.pos += piece.len() as u64;
                return Ok(());
            };
            let (name, info) = &header.tensors[i];
            if self.pos < info.start {
                let skip = clamp(info.start - self.pos, piece.len());
                self.pos += skip as u64;
                piece = &piece[skip..];
                continue;
            }
            let need = info.end - self.pos;
            let take = clamp(need, piece.len());
            if self.buf.is_empty() && take as u64 == info.size() {
                // Whole inside this piece: no copy.
                on(Event::Tensor {
                    name,
                    info,
                    bytes: &piece[..take],
                })?;
            } else {
                if self.buf.capacity() == 0 {
                    self.buf = gather_buffer(header)?;
                }
                // The buffer holds the largest tensor ([`gather_buffer`]): this never reallocates.
                self.buf.extend_from_slice(&piece[..take]);
                if take as u64 == need {
                    on(Event::Tensor {
                        name,
                        info,
                        bytes: &self.buf,
                    })?;
                    self.buf.clear();
                }
            }
            self.pos += take as u64;
            piece = &piece[take..];
            if self.pos == info.end {
                self.next += 1;
                if self.next == self.order.len() {
                    // The file's last tensor: its buffer goes (another file of the model may follow).
                    self.buf = Vec::new();
                }
            }
        }
        Ok(())
    }

    /// Ends the file: the header, once every tensor has been handed over; otherwise an error naming what
    /// is missing.
    pub fn finish<E: From<LoadError>>(
        mut self,
        on: &mut dyn FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<Gguf<'static>, E> {
        if self.header.is_none() {
            let gathered = std::mem::take(&mut self.buf);
            if !self.begin(&gathered, on)? {
                // The file ended inside the header.
                return Err(match Gguf::parse_header(&gathered) {
                    Err(e) => fail(e),
                    Ok(_) => fail(GgufError::Truncated("the header".into())),
                });
            }
        }
        let Some(header) = self.header.take() else {
            return Err(fail(GgufError::Truncated("the header".into())));
        };
        if let Some(&i) = self.order.get(self.next) {
            let (name, info) = &header.tensors[i];
            return Err(fail(GgufError::Truncated(format!(
                "the data of `{name}` (the file ends at byte {}, the tensor at {})",
                self.pos, info.end
            ))));
        }
        Ok(header)
    }
}
