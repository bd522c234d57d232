//! GGUF positions past 4 GiB (issue 42): a file larger than a wasm32 module's address space is read in
//! pieces, so every position in it is 64-bit. Synthetic headers, written here byte by byte, place tensors
//! at offsets above 2³²; no 4 GB file is needed: the stream is fed the same zero piece until it reaches
//! them (it skips bytes between tensors without keeping them). Bad positions — offsets or sizes that
//! overflow 64 bits, tensors that overlap or end past the file's declared length — are errors naming the
//! tensor.

#![cfg(not(target_arch = "wasm32"))]

use kiln::loader::stream::{Event, GgufStream};
use kiln::loader::{Gguf, GgufError, LoadError};

/// A GGUF v3 header without metadata: per tensor `(name, dims, ggml type id, offset in the data section)`.
fn header(tensors: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend(0u64.to_le_bytes());
    for (name, dims, ty, offset) in tensors {
        b.extend((name.len() as u64).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }
    // The data section starts at the next multiple of the default alignment (32).
    b.resize(b.len().next_multiple_of(32), 0);
    b
}

const F32: u32 = 0;
const Q8_0: u32 = 8;
const GIB4: u64 = 1 << 32;

#[test]
fn header_offsets_above_4_gib_are_read_as_64_bit_positions() {
    let bytes = header(&[
        ("a", &[64], F32, 0),
        ("far", &[32, 2], Q8_0, GIB4 + 4096),
        ("farther", &[8], F32, 3 * GIB4),
    ]);
    let data = bytes.len() as u64;
    let g = Gguf::parse_header(&bytes).expect("a header past 4 GiB is read on every platform");
    let far = g.tensor("far").unwrap();
    assert_eq!(
        (far.start, far.end),
        (data + GIB4 + 4096, data + GIB4 + 4096 + 2 * 34)
    );
    assert_eq!(far.size(), 68);
    let farther = g.tensor("farther").unwrap();
    assert_eq!(farther.start, data + 3 * GIB4);
    // Held in memory, such a range is an index only where the platform addresses it.
    assert_eq!(far.range().is_some(), usize::BITS == 64);
    // A declared length the tensors fit in, and one they do not: the tensor past it is named.
    Gguf::parse_header_of(&bytes, Some(farther.end)).unwrap();
    let e = Gguf::parse_header_of(&bytes, Some(farther.end - 1))
        .err()
        .expect("an error")
        .to_string();
    assert!(
        e.contains("`farther`") && e.contains(&format!("ends at byte {}", farther.end)),
        "{e}"
    );
}

#[test]
fn offsets_and_sizes_that_overflow_64_bits_are_named() {
    // The offset (aligned) plus the data section's start overflows.
    let e = Gguf::parse_header(&header(&[("big_offset", &[8], F32, u64::MAX - 31)]))
        .err()
        .expect("an error")
        .to_string();
    assert!(
        e.contains("`big_offset`") && e.contains("overflow 64 bits"),
        "{e}"
    );
    // The start fits, the end does not.
    let e = Gguf::parse_header(&header(&[(
        "big_end",
        &[1 << 20],
        F32,
        u64::MAX - (1 << 16) - 31,
    )]))
    .err()
    .expect("an error")
    .to_string();
    assert!(e.contains("`big_end`") && e.contains("overflow 64 bits"), "{e}");
    // Dimensions whose product overflows.
    let e = Gguf::parse_header(&header(&[("wide", &[1 << 32, 1 << 32, 1 << 8], F32, 0)]))
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("`wide`"), "{e}");
    // Elements that fit in 64 bits, bytes that do not.
    let e = Gguf::parse_header(&header(&[("heavy", &[1 << 31, 1 << 31], F32, 0)]))
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("`heavy`") && e.contains("overflows 64 bits"), "{e}");
}

/// Feeds `stream` `n` bytes of zeros, in pieces of one reused buffer; returns the tensors it completed.
fn feed(stream: &mut GgufStream, mut n: u64, seen: &mut Vec<(String, u64, Vec<u8>)>) {
    let zeros = vec![0u8; 64 << 20];
    while n > 0 {
        let take = n.min(zeros.len() as u64) as usize;
        stream
            .push::<LoadError>(&zeros[..take], &mut |e| {
                if let Event::Tensor { name, info, bytes } = e {
                    seen.push((name.to_owned(), info.start, bytes.to_vec()));
                }
                Ok(())
            })
            .unwrap();
        n -= take as u64;
    }
}

#[test]
fn a_stream_hands_over_tensors_past_4_gib_and_checks_overlaps_and_length() {
    let bytes = header(&[("near", &[8], F32, 0), ("far", &[8], F32, GIB4 + 64)]);
    let data = bytes.len() as u64;
    let mut stream = GgufStream::new();
    stream.declare_len(data + GIB4 + 96);
    let mut seen = Vec::new();
    stream
        .push::<LoadError>(&bytes, &mut |e| {
            assert!(matches!(e, Event::Header(_)));
            Ok(())
        })
        .unwrap();
    // Up to the last byte before `far`, then `far` itself, which is not zeros.
    feed(&mut stream, GIB4 + 64, &mut seen);
    let far: Vec<u8> = (1..=32).collect();
    stream
        .push::<LoadError>(&far, &mut |e| {
            if let Event::Tensor { name, info, bytes } = e {
                seen.push((name.to_owned(), info.start, bytes.to_vec()));
            }
            Ok(())
        })
        .unwrap();
    let g = stream.finish::<LoadError>(&mut |_| Ok(())).unwrap();
    assert_eq!(g.tensors.len(), 2);
    let names: Vec<(&str, u64)> = seen.iter().map(|(n, s, _)| (n.as_str(), *s)).collect();
    assert_eq!(names, [("near", data), ("far", data + GIB4 + 64)]);
    assert_eq!(seen[1].2, far);

    // A file that ends before a tensor does: named, with where each ends, past 4 GiB.
    let mut stream = GgufStream::new();
    stream.push::<LoadError>(&bytes, &mut |_| Ok(())).unwrap();
    feed(&mut stream, GIB4 + 80, &mut Vec::new());
    let e = stream
        .finish::<LoadError>(&mut |_| Ok(()))
        .err()
        .expect("an error")
        .to_string();
    assert!(
        e.contains("`far`") && e.contains(&format!("at byte {}", data + GIB4 + 80)),
        "{e}"
    );

    // A declared length shorter than the tensors: refused with the header, naming the tensor.
    let mut stream = GgufStream::new();
    stream.declare_len(data + GIB4);
    let e = stream
        .push::<LoadError>(&bytes, &mut |_| Ok(()))
        .expect_err("an error")
        .to_string();
    assert!(
        e.contains("`far`") && e.contains("past the end of the file"),
        "{e}"
    );

    // Tensors that overlap past 4 GiB: both named.
    let overlapping = header(&[("one", &[64], F32, GIB4), ("two", &[64], F32, GIB4 + 128)]);
    let e = GgufStream::new()
        .push::<LoadError>(&overlapping, &mut |_| Ok(()))
        .expect_err("an error")
        .to_string();
    assert!(
        e.contains("`one`") && e.contains("`two`") && e.contains("overlap"),
        "{e}"
    );
}

#[test]
fn a_whole_file_shorter_than_its_tensors_is_truncated_not_malformed() {
    let mut bytes = header(&[("t", &[8], F32, 0)]);
    bytes.extend([0u8; 16]);
    assert!(matches!(Gguf::parse(&bytes), Err(GgufError::Truncated(w)) if w.contains("`t`")));
    bytes.extend([0u8; 16]);
    Gguf::parse(&bytes).unwrap();
}

#[test]
fn a_header_only_stream_reads_the_header_and_gathers_no_tensor() {
    let mut bytes = header(&[("t", &[1024], F32, 0)]);
    bytes.extend(vec![0u8; 8192]);
    let events = |mut stream: GgufStream| {
        let mut seen = Vec::new();
        for piece in bytes.chunks(1000) {
            stream
                .push::<LoadError>(piece, &mut |e| {
                    seen.push(matches!(e, Event::Header(_)));
                    Ok(())
                })
                .unwrap();
        }
        seen
    };
    // A loading stream hands over the header, then `t`; a header-only one the header alone.
    assert_eq!(events(GgufStream::new()), [true, false]);
    assert_eq!(events(GgufStream::new().header_only()), [true]);
}
