//! Loading a GGUF file as it streams in (`kiln::engine::runtime::load::GgufLoader`): any split of the file into
//! pieces gives the model that the whole bytes give (the same logits, bit for bit, and the same greedy
//! text), tensors go to the device as their bytes arrive, and a bad or truncated file is an error naming
//! what is wrong — found from the header, before any tensor is placed, wherever the header can tell.

use std::cell::RefCell;
use std::collections::BTreeMap;

use burn::tensor::Device;
use kiln::engine::runtime::load::GgufLoader;
use kiln::engine::{EngineError, LoadedModel};
use kiln::loader::Gguf;
use kiln::loader::gguf_write::{TensorOut, write};

const FILES: [(&str, &[u8]); 3] = [
    ("tiny-llama", include_bytes!("fixtures/gguf/tiny-llama.gguf")),
    ("tiny-qwen2", include_bytes!("fixtures/gguf/tiny-qwen2.gguf")),
    ("tiny-qwen3", include_bytes!("fixtures/gguf/tiny-qwen3.gguf")),
];

/// Loads `bytes` pushed in pieces of `sizes` (cycled), recording every `(loaded, total)` report.
fn streamed(
    bytes: &[u8],
    sizes: &[usize],
    device: &Device,
) -> (Result<LoadedModel, EngineError>, Vec<(u64, u64)>) {
    let mut reports = Vec::new();
    let result = {
        let mut loader = GgufLoader::new(device, |l, t| reports.push((l, t)));
        let mut at = 0;
        let mut result = Ok(());
        for &size in sizes.iter().cycle() {
            if at >= bytes.len() || result.is_err() {
                break;
            }
            let end = (at + size).min(bytes.len());
            result = loader.push(&bytes[at..end]);
            at = end;
        }
        result.and_then(|()| loader.finish("tiny"))
    };
    (result, reports)
}

/// The logits of a short prompt, as f32s.
fn logits(model: &LoadedModel) -> Vec<f32> {
    let d = &model.decoder;
    let ids = vec![1u32, 5, 9, 2, 7];
    let mut cache = d.new_cache(1, ids.len());
    d.forward(&[ids], &mut cache, true)
        .expect("forward")
        .into_data()
        .try_into_vec::<f32>()
        .expect("f32")
}

#[test]
fn any_split_gives_the_model_of_the_whole_file() {
    let device = Device::flex();
    for (name, bytes) in FILES {
        let whole = LoadedModel::from_gguf(name, bytes, &device).expect("whole file loads");
        let want = logits(&whole);
        let greedy = |m: &LoadedModel| {
            pollster::block_on(kiln::engine::runtime::runner::greedy(
                &m.decoder,
                &[1, 5, 9],
                6,
                &[],
            ))
            .expect("greedy")
        };
        let want_text = greedy(&whole);
        // One byte at a time through the header; pieces that end inside tensors, on their edges, and
        // pieces holding several tensors.
        for sizes in [
            &[1usize][..],
            &[7, 4093, 1],
            &[32],
            &[65_536],
            &[bytes.len()],
            &[100_003, 3],
        ] {
            let (model, reports) = streamed(bytes, sizes, &device);
            let model = model.unwrap_or_else(|e| panic!("{name} in pieces of {sizes:?}: {e}"));
            assert_eq!(logits(&model), want, "{name} in pieces of {sizes:?}: logits");
            assert_eq!(greedy(&model), want_text, "{name} in pieces of {sizes:?}: greedy");
            let total = reports[0].1;
            assert_eq!(reports[0].0, 0, "{name}: the header reports before any tensor");
            assert!(
                reports.windows(2).all(|w| w[0].0 <= w[1].0),
                "{name}: progress is monotonic"
            );
            assert_eq!(
                *reports.last().unwrap(),
                (total, total),
                "{name}: progress reaches the total"
            );
            let g = Gguf::parse(bytes).unwrap();
            assert!(
                reports.len() > g.tensors.len(),
                "{name}: a report per tensor (got {})",
                reports.len()
            );
        }
    }
}

#[test]
fn tensors_reach_the_device_as_their_bytes_arrive() {
    let bytes = FILES[0].1;
    let g = Gguf::parse(bytes).unwrap();
    // The first tensor placed (`rope_freqs.weight` goes into the config instead).
    let first_end = g
        .tensors
        .iter()
        .filter(|(n, _)| n != "rope_freqs.weight")
        .map(|(_, t)| t.end as usize)
        .min()
        .unwrap();
    let last_start = g.tensors.iter().map(|(_, t)| t.start as usize).max().unwrap();
    let reports = RefCell::new(Vec::new());
    let mut loader = GgufLoader::new(&Device::flex(), |l, _| reports.borrow_mut().push(l));
    loader
        .push(&bytes[..first_end])
        .expect("header and the first tensor");
    let after_first = reports.borrow().last().copied();
    loader.push(&bytes[first_end..last_start]).expect("the middle");
    drop(loader);
    assert!(
        after_first.is_some_and(|l| l > 0),
        "the first tensor is placed once its bytes are in"
    );
    assert!(
        reports.borrow().last().copied() > after_first,
        "more tensors placed as more bytes arrive"
    );
}

fn err(bytes: &[u8], sizes: &[usize]) -> (String, Vec<(u64, u64)>) {
    let (result, reports) = streamed(bytes, sizes, &Device::flex());
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => (e.to_string(), reports),
    }
}

#[test]
fn a_truncated_file_names_what_is_missing() {
    let bytes = FILES[0].1;
    let g = Gguf::parse(bytes).unwrap();
    let (last, info) = g.tensors.iter().max_by_key(|(_, t)| t.end).unwrap();
    // Cut inside the last tensor.
    let (e, _) = err(&bytes[..info.end as usize - 10], &[4096]);
    assert!(e.contains("truncated") && e.contains(last.as_str()), "{e}");
    // Cut inside the header.
    let (e, reports) = err(&bytes[..200], &[7]);
    assert!(e.contains("truncated"), "{e}");
    assert!(reports.is_empty(), "nothing placed without a header");
    // Nothing at all.
    let (e, _) = err(&[], &[1]);
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn garbage_is_refused_at_once() {
    let mut bad = FILES[0].1.to_vec();
    bad[..4].copy_from_slice(b"GGUX");
    let (e, reports) = err(&bad, &[1 << 20]);
    assert!(e.contains("not a GGUF file"), "{e}");
    assert!(reports.is_empty());
}

/// The fixture rewritten with `edit` applied to its tensors.
fn rewritten(edit: impl Fn(&mut Vec<(String, kiln::loader::GgmlType, Vec<usize>, Vec<u8>)>)) -> Vec<u8> {
    let g = Gguf::parse(FILES[0].1).unwrap();
    let mut tensors: Vec<_> = g
        .tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.ty, t.dims.clone(), g.data(t).to_vec()))
        .collect();
    edit(&mut tensors);
    let out: Vec<TensorOut<'_>> = tensors
        .iter()
        .map(|(name, ty, dims, data)| TensorOut {
            name,
            ty: *ty,
            dims,
            data,
        })
        .collect();
    let metadata: BTreeMap<_, _> = g.metadata.clone();
    write(&metadata, &out).expect("writes")
}

#[test]
fn header_errors_come_before_any_tensor_is_placed() {
    // An unknown tensor.
    let extra = rewritten(|t| {
        let mut x = t[0].clone();
        x.0 = "blk.0.mystery.weight".into();
        t.push(x);
    });
    let (e, reports) = err(&extra, &[1 << 20]);
    assert!(e.contains("blk.0.mystery.weight"), "{e}");
    assert!(reports.is_empty(), "refused before placing: {reports:?}");
    // A missing one.
    let missing = rewritten(|t| t.retain(|(n, ..)| n != "blk.1.ffn_up.weight"));
    let (e, reports) = err(&missing, &[1 << 20]);
    assert!(e.contains("blk.1.ffn_up.weight") && e.contains("missing"), "{e}");
    assert!(reports.is_empty());
    // One of the wrong shape (same bytes, rows and columns swapped).
    let reshaped = rewritten(|t| {
        let x = t
            .iter_mut()
            .find(|(n, ..)| n == "blk.0.attn_output.weight")
            .unwrap();
        if let [a, b] = x.2[..] {
            // Same element count, another shape; keep whole blocks by halving rows and doubling cols.
            x.2 = vec![a * 2, b / 2];
        }
    });
    let (e, reports) = err(&reshaped, &[1 << 20]);
    assert!(
        e.contains("blk.0.attn_output.weight") && e.contains("shape"),
        "{e}"
    );
    assert!(reports.is_empty());
}

#[test]
fn a_nan_scale_names_the_tensor() {
    let g = Gguf::parse(FILES[0].1).unwrap();
    let (name, info) = g
        .tensors
        .iter()
        .find(|(_, t)| t.ty.is_quantized())
        .expect("a quantized tensor");
    // A NaN written over the scale of the fourth block: the first offset whose f16 NaN the block check
    // catches (the scale's place differs between formats).
    let at = info.start as usize + info.ty.block_bytes() * 3;
    let block = &FILES[0].1[at..at + info.ty.block_bytes()];
    let off = (0..block.len() - 1)
        .find(|&o| {
            let mut b = block.to_vec();
            b[o..o + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
            info.ty.check(&b).is_err()
        })
        .expect("a scale to corrupt");
    let mut bad = FILES[0].1.to_vec();
    bad[at + off..at + off + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let (e, _) = err(&bad, &[5000]);
    assert!(e.contains(name.as_str()), "{e}");
}

#[test]
fn a_model_beyond_the_weight_limit_is_refused_before_allocation() {
    let bytes = FILES[0].1;
    let reports = RefCell::new(Vec::new());
    let mut loader = GgufLoader::new(&Device::flex(), |l, t| reports.borrow_mut().push((l, t)))
        .with_weight_limit(Some(1000));
    let e = loader.push(bytes).map(|_| ()).unwrap_err();
    assert!(matches!(e, EngineError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("does not fit"), "{e}");
    assert!(reports.borrow().is_empty());
    // The next load works.
    LoadedModel::from_gguf("tiny", bytes, &Device::flex()).expect("a later load");
}

#[path = "data/mod.rs"]
mod data;

/// The derived SmolLM2 Q4_K_M (Q4_K, Q6_K and Q8_0 tensors): a NaN super-block scale in a K-quant tensor,
/// or the file cut inside one, is an error naming that tensor, found as the stream reaches it.
#[test]
fn corrupt_k_quant_tensors_name_themselves() {
    let bytes = data::read(data::SMOLLM2_Q4KM);
    let g = Gguf::parse(&bytes).unwrap();
    for want in ["Q4_K", "Q6_K"] {
        let (name, info) = g
            .tensors
            .iter()
            .filter(|(_, t)| t.ty.name() == want)
            .min_by_key(|(_, t)| t.start)
            .unwrap_or_else(|| panic!("a {want} tensor"));
        // The fifth super-block's `d`, found as the offset whose f16 NaN the block check refuses.
        let at = info.start as usize + info.ty.block_bytes() * 4;
        let block = &bytes[at..at + info.ty.block_bytes()];
        let off = (0..block.len() - 1)
            .find(|&o| {
                let mut b = block.to_vec();
                b[o..o + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
                info.ty.check(&b).is_err()
            })
            .expect("a scale to corrupt");
        let mut bad = bytes[..info.end as usize + 4096].to_vec();
        bad[at + off..at + off + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        let (e, _) = err(&bad, &[1 << 20]);
        assert!(e.contains(name.as_str()) && e.contains(want), "{want}: {e}");
        // Cut in the middle of the tensor.
        let (e, _) = err(&bytes[..(info.start + info.end) as usize / 2], &[1 << 20]);
        assert!(
            e.contains("truncated") && e.contains(name.as_str()),
            "{want}: {e}"
        );
    }
}

/// Where tensor `name`'s info keeps its data offset (`u64`) in the header of `bytes`.
fn offset_field(bytes: &[u8], name: &str) -> usize {
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_slice())
        .expect("the tensor's info");
    let dims_at = at + key.len();
    let n_dims = u32::from_le_bytes(bytes[dims_at..dims_at + 4].try_into().unwrap()) as usize;
    dims_at + 4 + 8 * n_dims + 4
}

#[test]
fn tensors_stored_out_of_info_order_stream_correctly() {
    // Swap the data of two same-sized tensors and their offsets: the infos no longer follow file order.
    let bytes = FILES[0].1;
    let g = Gguf::parse(bytes).unwrap();
    // Each name keeps its own bytes (data and offset move together), so only the sizes must agree.
    let (a, b) = g
        .tensors
        .iter()
        .enumerate()
        .find_map(|(i, (a, ia))| {
            g.tensors
                .get(i + 2..)
                .unwrap_or_default()
                .iter()
                .find(|(_, ib)| ib.end - ib.start == ia.end - ia.start)
                .map(|(b, _)| (a.clone(), b.clone()))
        })
        .expect("two tensors of one size, not neighbours");
    let (a, b) = (a.as_str(), b.as_str());
    let (ia, ib) = (g.tensor(a).unwrap().clone(), g.tensor(b).unwrap().clone());
    assert_eq!(ia.end - ia.start, ib.end - ib.start);
    let mut swapped = bytes.to_vec();
    let (ra, rb) = (ia.range().unwrap(), ib.range().unwrap());
    swapped[ra.clone()].copy_from_slice(&bytes[rb.clone()]);
    swapped[rb].copy_from_slice(&bytes[ra]);
    let (fa, fb) = (offset_field(bytes, a), offset_field(bytes, b));
    swapped[fa..fa + 8].copy_from_slice(&bytes[fb..fb + 8]);
    swapped[fb..fb + 8].copy_from_slice(&bytes[fa..fa + 8]);
    let g2 = Gguf::parse(&swapped).unwrap();
    assert_eq!(
        g2.data(g2.tensor(a).unwrap()),
        g.data(&ia),
        "the swap keeps each tensor's bytes"
    );
    let want = logits(&LoadedModel::from_gguf("tiny", bytes, &Device::flex()).unwrap());
    for sizes in [&[swapped.len()][..], &[999], &[1 << 14]] {
        let (model, _) = streamed(&swapped, sizes, &Device::flex());
        assert_eq!(logits(&model.expect("loads")), want, "pieces of {sizes:?}");
    }
}

#[test]
fn empty_pieces_are_nothing_and_a_failed_loader_stays_failed() {
    let bytes = FILES[0].1;
    let mut loader = GgufLoader::new(&Device::flex(), |_, _| {});
    loader.push(&[]).unwrap();
    loader.push(&bytes[..100]).unwrap();
    loader.push(&[]).unwrap();
    loader.push(&bytes[100..]).unwrap();
    loader.push(&[]).unwrap();
    let model = loader.finish("tiny").expect("loads");
    assert_eq!(
        logits(&model),
        logits(&LoadedModel::from_gguf("tiny", bytes, &Device::flex()).unwrap())
    );
    // A NaN scale stops the load; the rest of the file is refused, not placed as the next tensor.
    let g = Gguf::parse(bytes).unwrap();
    let (_, info) = g.tensors.iter().find(|(_, t)| t.ty.is_quantized()).unwrap();
    let mut bad = bytes.to_vec();
    let off = (0..info.ty.block_bytes() - 1)
        .find(|&o| {
            let at = info.start as usize;
            let mut b = bytes[at..at + info.ty.block_bytes()].to_vec();
            b[o..o + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
            info.ty.check(&b).is_err()
        })
        .unwrap();
    bad[info.start as usize + off..info.start as usize + off + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let mut loader = GgufLoader::new(&Device::flex(), |_, _| {});
    assert!(loader.push(&bad[..info.end as usize]).is_err());
    let again = loader.push(&bad[info.end as usize..]).unwrap_err().to_string();
    assert!(again.contains("earlier error"), "{again}");
    assert!(loader.finish("tiny").is_err());
}

#[test]
fn an_absurd_count_in_a_streamed_header_is_refused_at_once() {
    // The tensor count (bytes 8..16) says 2^40 tensors: no header that large exists, so the stream refuses
    // it instead of gathering bytes for it.
    let mut bad = FILES[0].1.to_vec();
    bad[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let mut loader = GgufLoader::new(&Device::flex(), |_, _| {});
    let e = loader.push(&bad[..4096]).unwrap_err().to_string();
    assert!(e.contains("tensor count"), "{e}");
}

/// Pushes `files` (a split model) into one loader: each file's pieces of `header` bytes until its header
/// is in, then the rest of every file in pieces of `rest`; records every `(loaded, total)` report.
fn streamed_files(
    files: &[Vec<u8>],
    header: usize,
    rest: usize,
    device: &Device,
) -> (Result<LoadedModel, EngineError>, Vec<(u64, u64)>) {
    let mut reports = Vec::new();
    let result = (|| {
        let mut loader = GgufLoader::files(device, files.len(), |l, t| reports.push((l, t)));
        let mut at = vec![0; files.len()];
        for (i, f) in files.iter().enumerate() {
            while !loader.header_in(i) && at[i] < f.len() {
                let end = (at[i] + header).min(f.len());
                loader.push_to(i, &f[at[i]..end])?;
                at[i] = end;
            }
        }
        for (i, f) in files.iter().enumerate() {
            for piece in f[at[i]..].chunks(rest) {
                loader.push_to(i, piece)?;
            }
        }
        loader.finish("tiny")
    })();
    (result, reports)
}

/// A model split into files (llama.cpp's `gguf-split` layout, `kiln::loader::split`) loads into the model
/// of the whole file, bit for bit, however its pieces arrive — headers first, or each file whole in turn
/// (tensors of the first file then wait for the later headers); files out of order, missing or extra are
/// refused, naming the file and the key, before any tensor is placed.
#[test]
fn a_split_model_loads_as_the_whole_file() {
    let device = Device::flex();
    let (_, bytes) = FILES[0];
    let want = logits(&LoadedModel::from_gguf("tiny", bytes, &device).expect("whole file loads"));
    let g = Gguf::parse(bytes).expect("fixture parses");
    for n in [1, 2, 3] {
        let files = kiln::loader::split::split(&g, n).expect("split");
        for (header, rest) in [(1, 1 << 20), (4096, 333), (usize::MAX, usize::MAX)] {
            let (model, reports) = streamed_files(&files, header, rest.min(1 << 30), &device);
            let model = model.unwrap_or_else(|e| panic!("{n} files, pieces {header}/{rest}: {e}"));
            assert_eq!(logits(&model), want, "{n} files, pieces {header}/{rest}");
            let total = reports[0].1;
            assert_eq!(
                reports.first(),
                Some(&(0, total)),
                "nothing placed before the headers"
            );
            assert_eq!(reports.last(), Some(&(total, total)));
        }
        if n == 1 {
            continue;
        }
        let swapped: Vec<Vec<u8>> = files.iter().rev().cloned().collect();
        let fail = |files: &[Vec<u8>]| {
            let (model, reports) = streamed_files(files, 1 << 20, 1 << 20, &device);
            let Err(e) = model else { panic!("refused") };
            let e = e.to_string();
            assert!(reports.iter().all(|&(l, _)| l == 0), "{e}: nothing placed");
            e
        };
        let e = fail(&swapped);
        assert!(e.contains("split.no") && e.contains("in order"), "{e}");
        let e = fail(&files[..n - 1]);
        assert!(
            e.contains("split.count") && e.contains(&format!("in {n} files")),
            "{e}"
        );
        let mut extra = files.clone();
        extra.push(bytes.to_vec());
        let e = fail(&extra);
        assert!(e.contains("split.count"), "{e}");
        // The first file alone, as a one-file model.
        let (model, _) = streamed(&files[0], &[1 << 20], &device);
        let Err(e) = model else { panic!("refused") };
        let e = e.to_string();
        assert!(e.contains(&format!("in {n} files; 1 given")), "{e}");
    }
}

/// The committed split fixture (the e2e tests load it by URL) is `split_gguf`'s output for tiny-llama.
#[test]
fn the_split_fixture_is_the_split_of_tiny_llama() {
    let g = Gguf::parse(FILES[0].1).expect("fixture parses");
    let files = kiln::loader::split::split(&g, 2).expect("split");
    let committed: [&[u8]; 2] = [
        include_bytes!("fixtures/gguf/tiny-llama-00001-of-00002.gguf"),
        include_bytes!("fixtures/gguf/tiny-llama-00002-of-00002.gguf"),
    ];
    for (i, (made, committed)) in files.iter().zip(committed).enumerate() {
        assert!(
            made.as_slice() == committed,
            "file {}: regenerate with `cargo run --example split_gguf -- tests/fixtures/gguf/tiny-llama.gguf 2`",
            i + 1
        );
    }
}
