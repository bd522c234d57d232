//! A Q4_K_M GGUF derived from another GGUF with kiln's own quantisers: every quantisable tensor is
//! dequantised ([`GgmlType::dequantize`]) and quantised again ([`GgmlType::quantize`], llama.cpp's
//! `quantize_row_*_ref`, which is what `llama-quantize` runs when it has no importance matrix) to the type
//! llama.cpp's Q4_K_M mix picks for it; the rest is copied. The result is deterministic: the same input
//! gives the same bytes.
//!
//! The type rule is `llama_tensor_get_type` of `src/llama-quant.cpp` (llama.cpp as vendored by
//! `llama-cpp-python==0.3.36`) for `LLAMA_FTYPE_MOSTLY_Q4_K_M`, dense models, no overrides:
//!
//! - only tensors of 2 or more dimensions whose name ends in `weight` and holds no `_norm.weight` (nor the
//!   other names `tensor_allows_quantization` excludes) are quantised; the rest keep their type and bytes;
//! - the default is Q4_K (`llama_ftype_get_default_type`);
//! - `output.weight`, and `token_embd.weight` when there is no `output.weight` (tied embeddings), become
//!   Q6_K, or Q8_0 when their row length is not a multiple of 256 (or the arch is Falcon);
//! - `attn_v.weight` (and `attn_qkv` / `attn_kv_b`, which llama.cpp counts with it) become Q6_K when
//!   `use_more_bits(i, n)` holds for the i-th of the n such tensors, counted in llama.cpp's tensor order
//!   ([`llama_order`]: by layer number, then name; files often list `blk.10` before `blk.2`);
//! - `ffn_down` becomes Q6_K when `use_more_bits(i, n_layer)` holds for the i-th of them (Falcon: Q6_K in
//!   the first sixteenth, Q5_K where `use_more_bits`, else Q4_K);
//! - `use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2`;
//! - finally `tensor_type_fallback`: a row length that is not a multiple of the type's block turns Q4_K
//!   into Q5_0, Q5_K into Q5_1, Q6_K into Q8_0 (Q2_K/Q3_K into Q4_0, IQ4_XS into IQ4_NL), and into F16
//!   when even that does not fit.
//!
//! A tensor whose chosen type is the type it already has is copied unchanged, as `llama-quantize` does.
//! Mixture-of-experts models (`{arch}.expert_count` > 1) are refused: their rules (and the 70B attn_v
//! bump) are not implemented.

use std::collections::BTreeMap;

use super::LoadError;
use super::gguf::{Gguf, GgufError, Value};
use super::gguf_write::{self, TensorOut};
use super::quant::GgmlType;

/// `LLAMA_FTYPE_MOSTLY_Q4_K_M`, the value of `general.file_type`.
pub const FILE_TYPE_Q4_K_M: u32 = 15;

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third in between.
pub fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// llama.cpp's `tensor_category`, as far as the Q4_K_M mix of a dense model tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    /// `attn_v`, `attn_qkv` and `attn_kv_b` (`category_is_attn_v`).
    AttnV,
    FfnDown,
    Other,
}

/// `tensor_get_category` (the first match wins, in llama.cpp's order).
fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        Category::TokenEmbd
    } else if ["attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"]
        .iter()
        .any(|p| name.contains(p))
    {
        Category::AttnV
    } else if [
        "attn_k.weight",
        "attn_q.weight",
        "attn_output.weight",
        "ffn_up",
        "ffn_gate",
    ]
    .iter()
    .any(|p| name.contains(p))
    {
        Category::Other
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// `tensor_allows_quantization` with default parameters (the names that matter outside MoE and
/// state-space models).
fn allows_quantization(name: &str, dims: &[usize]) -> bool {
    dims.len() >= 2
        && name.ends_with("weight")
        && ![
            "_norm.weight",
            "ffn_gate_inp.weight",
            "ffn_gate_tid2eid.weight",
            "altup",
            "laurel",
            "per_layer_model_proj",
            "ssm_conv1d",
            "shortconv.conv.weight",
            "indexer.k_proj.weight",
            "indexer.q_proj.weight",
        ]
        .iter()
        .any(|p| name.contains(p))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// `tensor_type_fallback`: a type whose block fits a row of `ncols`.
pub fn fallback(ty: GgmlType, ncols: usize) -> GgmlType {
    if ncols.is_multiple_of(ty.block_elems()) {
        return ty;
    }
    let to = match ty {
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if ncols.is_multiple_of(to.block_elems()) {
        to
    } else {
        GgmlType::F16
    }
}

/// The order llama.cpp's model loader keeps tensors in (`weight_name_comparer`), in which `llama-quantize`
/// counts the attn_v and ffn_down tensors and writes its output: by layer (`blk.N.`; other tensors, as
/// layer -1, first), then by name. Returns indices into `names`.
pub fn llama_order<S: AsRef<str>>(names: &[S]) -> Vec<usize> {
    let layer = |name: &str| -> i64 {
        let rest = name.strip_prefix("blk.").unwrap_or("");
        rest[..rest.bytes().take_while(u8::is_ascii_digit).count()]
            .parse()
            .unwrap_or(-1)
    };
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (names[a].as_ref(), names[b].as_ref());
        layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
    });
    order
}

/// The Q4_K_M type of each tensor `(name, GGUF dims, current type)` (the result is in the same order;
/// the counters run in [`llama_order`]) for a model of `n_layer` layers (`falcon`: the Falcon arch's
/// rules).
pub fn q4_k_m_types(tensors: &[(&str, &[usize], GgmlType)], n_layer: usize, falcon: bool) -> Vec<GgmlType> {
    let tied = !tensors.iter().any(|(n, _, _)| category(n) == Category::Output);
    let n_attention_wv = tensors
        .iter()
        .filter(|(n, _, _)| category(n) == Category::AttnV)
        .count();
    let (mut i_attention_wv, mut i_ffn_down) = (0, 0);
    let names: Vec<&str> = tensors.iter().map(|t| t.0).collect();
    let mut out = tensors.iter().map(|t| t.2).collect::<Vec<_>>();
    for i in llama_order(&names) {
        let (name, dims, _) = tensors[i];
        if !allows_quantization(name, dims) {
            continue;
        }
        let nx = dims[0];
        let mut new = GgmlType::Q4_K;
        match category(name) {
            Category::Output | Category::TokenEmbd if tied || category(name) == Category::Output => {
                new = if falcon || !nx.is_multiple_of(new.block_elems()) {
                    GgmlType::Q8_0
                } else {
                    GgmlType::Q6_K
                };
            }
            Category::AttnV => {
                if use_more_bits(i_attention_wv, n_attention_wv) {
                    new = GgmlType::Q6_K;
                }
                i_attention_wv += 1;
            }
            Category::FfnDown => {
                if falcon {
                    new = if i_ffn_down < n_layer / 16 {
                        GgmlType::Q6_K
                    } else if use_more_bits(i_ffn_down, n_layer) {
                        GgmlType::Q5_K
                    } else {
                        GgmlType::Q4_K
                    };
                } else if use_more_bits(i_ffn_down, n_layer) {
                    new = GgmlType::Q6_K;
                }
                i_ffn_down += 1;
            }
            _ => {}
        }
        out[i] = fallback(new, nx);
    }
    out
}

/// `file` as a Q4_K_M GGUF (v3): the tensors in [`llama_order`] (as `llama-quantize` writes them), each
/// quantised to the type the module doc's rule picks; the metadata copied with `general.file_type` = 15,
/// `general.quantization_version` = 2 and `general.name` / `general.quantized_by` saying it was derived.
/// A source tensor with a non-finite block scale is an error naming it.
pub fn q4_k_m(file: &Gguf) -> Result<Vec<u8>, LoadError> {
    let arch = file.str("general.architecture")?.unwrap_or("llama").to_string();
    if let Some(v) = file.get(&format!("{arch}.expert_count"))
        && v.as_u64().is_some_and(|n| n > 1)
    {
        return Err(GgufError::Metadata {
            key: format!("{arch}.expert_count"),
            reason: format!("is {v:?}: deriving Q4_K_M supports dense models only"),
        }
        .into());
    }
    let n_layer = match file.get(&format!("{arch}.block_count")) {
        Some(_) => file.usize(&format!("{arch}.block_count"))?,
        None => file
            .tensors
            .iter()
            .filter(|(n, _)| category(n) == Category::FfnDown)
            .count(),
    };
    let list: Vec<(&str, &[usize], GgmlType)> = file
        .tensors
        .iter()
        .map(|(n, t)| (n.as_str(), t.dims.as_slice(), t.ty))
        .collect();
    let types = q4_k_m_types(&list, n_layer, arch == "falcon");
    let mut data: Vec<Vec<u8>> = Vec::with_capacity(types.len());
    for ((name, info), &to) in file.tensors.iter().zip(&types) {
        let bytes = file.data(info);
        if to == info.ty {
            data.push(bytes.to_vec());
            continue;
        }
        let blocks = |ty: GgmlType, reason: String| LoadError::Blocks {
            name: name.clone(),
            ty: ty.name(),
            reason,
        };
        info.ty.check(bytes).map_err(|e| blocks(info.ty, e.to_string()))?;
        let x = info.ty.dequantize(bytes);
        let q = to
            .quantize(&x)
            .ok_or_else(|| blocks(to, format!("{} elements are not whole {to} blocks", x.len())))?;
        data.push(q);
    }
    let mut metadata: BTreeMap<String, Value> = file.metadata.clone();
    let from = file.get("general.file_type").and_then(Value::as_u64);
    let name = file.str("general.name")?.unwrap_or("model").to_string();
    metadata.insert("general.file_type".into(), Value::U32(FILE_TYPE_Q4_K_M));
    metadata.insert("general.quantization_version".into(), Value::U32(2));
    metadata.insert(
        "general.name".into(),
        Value::String(format!("{name} (Q4_K_M derived by kiln)")),
    );
    metadata.insert(
        "general.quantized_by".into(),
        Value::String(format!(
            "kiln loader::derive::q4_k_m: llama.cpp's Q4_K_M mix with its reference quantisers (no \
             imatrix), requantised from general.file_type {}",
            from.map_or_else(|| "unknown".to_string(), |f| f.to_string())
        )),
    );
    let names: Vec<&str> = file.tensors.iter().map(|(n, _)| n.as_str()).collect();
    let tensors: Vec<TensorOut<'_>> = llama_order(&names)
        .into_iter()
        .map(|i| TensorOut {
            name: names[i],
            ty: types[i],
            dims: &file.tensors[i].1.dims,
            data: &data[i],
        })
        .collect();
    gguf_write::write(&metadata, &tensors).map_err(|e| GgufError::Malformed(e.to_string()).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType::*;

    #[test]
    fn use_more_bits_matches_llama_cpp() {
        let picked: Vec<usize> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
        assert_eq!(
            (0..2).map(|i| use_more_bits(i, 2)).collect::<Vec<_>>(),
            [false, true]
        );
    }

    /// SmolLM2-135M's tensors (hidden 576, intermediate 1536, 30 layers, tied embeddings).
    #[test]
    fn smollm2_mix() {
        let mut names = vec![("token_embd.weight".to_string(), vec![576, 49152])];
        for i in 0..30 {
            for (t, d) in [
                ("attn_norm.weight", vec![576]),
                ("attn_q.weight", vec![576, 576]),
                ("attn_k.weight", vec![576, 192]),
                ("attn_v.weight", vec![576, 192]),
                ("attn_output.weight", vec![576, 576]),
                ("ffn_norm.weight", vec![576]),
                ("ffn_gate.weight", vec![576, 1536]),
                ("ffn_up.weight", vec![576, 1536]),
                ("ffn_down.weight", vec![1536, 576]),
            ] {
                names.push((format!("blk.{i}.{t}"), d));
            }
        }
        names.push(("output_norm.weight".into(), vec![576]));
        // As the real file lists them: blk.0, blk.1, blk.10, …; the counters must still follow the layers.
        names.sort();
        let list: Vec<(&str, &[usize], GgmlType)> = names
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice(), if d.len() == 1 { F32 } else { Q4_1 }))
            .collect();
        let types = q4_k_m_types(&list, 30, false);
        let mut hist = BTreeMap::new();
        for t in &types {
            *hist.entry(t.name()).or_insert(0) += 1;
        }
        // 61 norms; token_embd tied → Q8_0; attn_v: 14 × Q6_K→Q8_0, 16 × Q4_K→Q5_0; ffn_down (1536 wide):
        // 14 × Q6_K, 16 × Q4_K; q, k, o, gate, up: Q4_K→Q5_0.
        assert_eq!(
            hist,
            BTreeMap::from([
                ("F32", 61),
                ("Q8_0", 15),
                ("Q5_0", 16 + 150),
                ("Q6_K", 14),
                ("Q4_K", 16)
            ])
        );
        assert_eq!(
            types[names
                .iter()
                .position(|(n, _)| n == "token_embd.weight")
                .expect("embd")],
            Q8_0
        );
        let at = |name: &str| types[names.iter().position(|(n, _)| n == name).expect("name")];
        assert_eq!(
            (at("blk.5.attn_v.weight"), at("blk.6.attn_v.weight")),
            (Q8_0, Q5_0)
        );
        assert_eq!(
            (at("blk.5.ffn_down.weight"), at("blk.6.ffn_down.weight")),
            (Q6_K, Q4_K)
        );
    }

    #[test]
    fn llama_order_sorts_by_layer_then_name() {
        let names = [
            "blk.10.b",
            "output.weight",
            "blk.2.a",
            "blk.10.a",
            "token_embd.weight",
            "blk.x",
        ];
        let sorted: Vec<&str> = llama_order(&names).into_iter().map(|i| names[i]).collect();
        assert_eq!(
            sorted,
            [
                "blk.x",
                "output.weight",
                "token_embd.weight",
                "blk.2.a",
                "blk.10.a",
                "blk.10.b"
            ]
        );
    }

    #[test]
    fn untied_output_and_k_quant_rows() {
        let list: Vec<(&str, &[usize], GgmlType)> = vec![
            ("token_embd.weight", &[256, 8], Q8_0),
            ("output.weight", &[256, 8], Q8_0),
            ("blk.0.attn_qkv.weight", &[256, 8], F16),
            ("blk.0.attn_qkv.bias", &[8, 8], F32),
            ("blk.0.ffn_down.weight", &[100, 8], F16),
        ];
        assert_eq!(q4_k_m_types(&list, 1, false), [Q4_K, Q6_K, Q6_K, F32, F16]);
        assert_eq!(q4_k_m_types(&list[1..2], 1, true), [Q8_0]);
    }
}
