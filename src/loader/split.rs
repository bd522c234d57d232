//! llama.cpp's split GGUF files (its `gguf-split` tool, `llama_model_loader`'s splits): one model's tensors
//! spread over `n` files, conventionally named `<prefix>-00001-of-0000n.gguf`. The first file holds every
//! metadata key; each file holds `split.no` (`u16`, its index from 0), `split.count` (`u16`, `n`) and
//! `split.tensors.count` (`i32`, the tensors of all files), then its own tensors.
//!
//! [`split`] writes such files from one; [`check`] checks the headers of a model's files against each
//! other before any tensor is read, with errors naming the file and the key.

use std::collections::{BTreeMap, BTreeSet};

use super::gguf::{Gguf, GgufError, Value};
use super::gguf_write::{WriteError, tensors_of, write};

/// `split.no`: the file's index, from 0.
pub const NO: &str = "split.no";
/// `split.count`: how many files the model has.
pub const COUNT: &str = "split.count";
/// `split.tensors.count`: the tensors over all files.
pub const TENSORS: &str = "split.tensors.count";

/// The model in `g` as `n` files (as `gguf-split --split-max-tensors ⌈T/n⌉` writes them): the tensors in
/// file order, cut into `n` runs of at most `⌈T/n⌉`; the first file with every metadata key, the others
/// with the split keys (and `general.alignment`, when set, so every file lays its data out alike).
pub fn split(g: &Gguf<'_>, n: usize) -> Result<Vec<Vec<u8>>, WriteError> {
    let tensors = tensors_of(g);
    let per = tensors.len().div_ceil(n.max(1)).max(1);
    let count = u16::try_from(n).unwrap_or(u16::MAX);
    let total = i32::try_from(tensors.len()).unwrap_or(i32::MAX);
    (0..n)
        .map(|i| {
            let mut meta = match i {
                0 => g.metadata.clone(),
                _ => g
                    .metadata
                    .iter()
                    .filter(|(k, _)| *k == "general.alignment")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<BTreeMap<_, _>>(),
            };
            meta.insert(NO.into(), Value::U16(i as u16));
            meta.insert(COUNT.into(), Value::U16(count));
            meta.insert(TENSORS.into(), Value::I32(total));
            let run = tensors
                .get(i * per..((i + 1) * per).min(tensors.len()))
                .unwrap_or(&[]);
            write(&meta, run)
        })
        .collect()
}

/// An error about key `key` of file `file` (0-based) of a split model.
fn bad(file: usize, key: &str, reason: impl std::fmt::Display) -> GgufError {
    GgufError::Metadata {
        key: key.into(),
        reason: format!("file {} of the model: {reason}", file + 1),
    }
}

/// Checks the headers of one model's files, in order, as llama.cpp's loader does: a single file without
/// split keys is the whole model; otherwise file `i` says `split.no = i` and `split.count = n`, the first
/// file's `split.tensors.count` is the number of tensors in all of them, and no tensor is in two files.
pub fn check(headers: &[&Gguf<'_>]) -> Result<(), GgufError> {
    let n = headers.len();
    let Some(first) = headers.first() else {
        return Err(GgufError::Malformed("a model needs at least one file".into()));
    };
    let count = |g: &Gguf<'_>, i: usize, key: &str| -> Result<Option<u64>, GgufError> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(i, key, format!("{v:?} is not a count"))),
        }
    };
    if n == 1 && first.get(COUNT).is_none() {
        return Ok(());
    }
    for (i, g) in headers.iter().enumerate() {
        match count(g, i, COUNT)? {
            Some(c) if c == n as u64 => {}
            Some(c) => return Err(bad(i, COUNT, format!("the model is in {c} files; {n} given"))),
            None => return Err(bad(i, COUNT, format!("is missing: {n} files given as one model"))),
        }
        match count(g, i, NO)? {
            Some(no) if no == i as u64 => {}
            Some(no) => {
                return Err(bad(
                    i,
                    NO,
                    format!("is {no}: the files must be given in order (expected {i})"),
                ));
            }
            None => return Err(bad(i, NO, "is missing")),
        }
    }
    let mut seen = BTreeSet::new();
    for (i, g) in headers.iter().enumerate() {
        if let Some((name, _)) = g.tensors.iter().find(|(name, _)| !seen.insert(name.as_str())) {
            return Err(GgufError::Malformed(format!(
                "tensor `{name}` is in file {} and in an earlier file of the model",
                i + 1
            )));
        }
    }
    if let Some(t) = count(first, 0, TENSORS)?
        && t != seen.len() as u64
    {
        return Err(bad(
            0,
            TENSORS,
            format!("says {t} tensors; the files hold {}", seen.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::gguf_write::TensorOut;
    use crate::loader::quant::GgmlType;

    fn model() -> Vec<u8> {
        let data: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 16]).collect();
        let names: Vec<String> = (0..5).map(|i| format!("t{i}.weight")).collect();
        let tensors: Vec<TensorOut<'_>> = (0..5)
            .map(|i| TensorOut {
                name: &names[i],
                ty: GgmlType::F32,
                dims: &[4],
                data: &data[i],
            })
            .collect();
        let meta = BTreeMap::from([("general.architecture".to_owned(), Value::String("llama".into()))]);
        write(&meta, &tensors).unwrap()
    }

    #[test]
    fn split_files_hold_the_model_and_check_against_each_other() {
        let bytes = model();
        let whole = Gguf::parse(&bytes).unwrap();
        check(&[&whole]).unwrap();
        let files = split(&whole, 2).unwrap();
        let parsed: Vec<Gguf<'_>> = files.iter().map(|f| Gguf::parse(f).unwrap()).collect();
        let headers: Vec<&Gguf<'_>> = parsed.iter().collect();
        check(&headers).unwrap();
        assert_eq!(parsed[0].tensors.len(), 3);
        assert_eq!(parsed[1].tensors.len(), 2);
        assert_eq!(parsed[0].str("general.architecture").unwrap(), Some("llama"));
        assert!(parsed[1].get("general.architecture").is_none());
        for (g, no) in parsed.iter().zip(0u64..) {
            assert_eq!(g.get(NO).and_then(Value::as_u64), Some(no));
            assert_eq!(g.get(TENSORS).and_then(Value::as_u64), Some(5));
        }
        let (name, info) = &parsed[1].tensors[1];
        assert_eq!(
            (name.as_str(), parsed[1].data(info)),
            ("t4.weight", &[4u8; 16][..])
        );

        // Out of order, one missing, one given twice: each named.
        let e = check(&[headers[1], headers[0]]).unwrap_err().to_string();
        assert!(e.contains("split.no") && e.contains("file 1"), "{e}");
        let e = check(&headers[..1]).unwrap_err().to_string();
        assert!(
            e.contains("split.count") && e.contains("in 2 files; 1 given"),
            "{e}"
        );
        let e = check(&[headers[0], headers[1], headers[1]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("split.count"), "{e}");
        let e = check(&[headers[0], &whole]).unwrap_err().to_string();
        assert!(e.contains("split.count") && e.contains("file 2"), "{e}");
    }
}
