//! Tests of constrained decoding on toy vocabularies: random sampling under the mask always gives valid JSON.
use super::*;

/// Single bytes 0..=255, a few multi-byte tokens, then two special tokens (EOS last).
fn toy_vocab() -> (Vocab, Vec<Vec<u8>>) {
    let mut tokens: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    for t in [
        "{\"", "\":", "\",", ",\"", "\"}", "true", "false", "null", "name", "age", "color", "tags", "red",
        "green", "blue", "  ", "\n", "12", "345", "[\"", "\"]", "}", "]",
    ] {
        tokens.push(t.as_bytes().to_vec());
    }
    tokens.push(b"<|im_start|>".to_vec());
    tokens.push(b"<|im_end|>".to_vec());
    let n = tokens.len();
    let mut special = vec![false; n];
    special[n - 2] = true;
    special[n - 1] = true;
    let vocab = Vocab::new(tokens.clone(), &special, (n - 1) as u32).expect("toy vocab");
    (vocab, tokens)
}

/// xorshift64*, so the tests need no rand crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Random logits, masked, sampled uniformly among the survivors (with a bias towards
/// EOS and closing tokens so values end); returns the bytes produced before EOS.
fn generate(mut c: Constraint, vocab: &Vocab, tokens: &[Vec<u8>], seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut out = Vec::new();
    for _ in 0..400 {
        let mut logits: Vec<f32> = (0..vocab.len())
            .map(|_| (rng.next() % 1000) as f32 / 100.0)
            .collect();
        c.mask(&mut logits).expect("mask");
        let allowed: Vec<usize> = (0..logits.len()).filter(|&i| logits[i].is_finite()).collect();
        assert!(
            !allowed.is_empty(),
            "empty mask after {:?}",
            String::from_utf8_lossy(&out)
        );
        // Prefer ending tokens half the time so strings and arrays terminate.
        let closers: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|&i| {
                i == vocab.eos() as usize
                    || matches!(
                        tokens[i].as_slice(),
                        b"\"" | b"]" | b"}" | b"\"]" | b"\"}" | b"\","
                    )
            })
            .collect();
        let pool = if !closers.is_empty() && rng.next().is_multiple_of(2) {
            &closers
        } else {
            &allowed
        };
        let tok = pool[(rng.next() % pool.len() as u64) as usize] as u32;
        c.commit(tok).expect("commit of an allowed token");
        if tok == vocab.eos() {
            assert!(c.is_done());
            return out;
        }
        out.extend_from_slice(&tokens[tok as usize]);
    }
    panic!("no EOS after 400 tokens: {:?}", String::from_utf8_lossy(&out));
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false
    })
}

fn check_against_schema(v: &Value) {
    let o = v.as_object().expect("object");
    assert_eq!(o.len(), 4, "{v}");
    assert!(o["name"].as_str().is_some_and(|s| s.chars().count() <= 8), "{v}");
    assert!(o["age"].as_i64().is_some_and(|a| (0..=150).contains(&a)), "{v}");
    assert!(
        ["red", "green", "blue"].contains(&o["color"].as_str().expect("color")),
        "{v}"
    );
    let tags = o["tags"].as_array().expect("tags");
    assert!(
        tags.len() <= 3
            && tags
                .iter()
                .all(|t| t.as_str().is_some_and(|s| s.chars().count() <= 4)),
        "{v}"
    );
}

#[test]
fn schema_sampling_always_valid() {
    let (vocab, tokens) = toy_vocab();
    for seed in 0..20 {
        let c = Constraint::json_schema(&vocab, &schema()).expect("schema compiles");
        let out = generate(c, &vocab, &tokens, seed);
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", String::from_utf8_lossy(&out)));
        check_against_schema(&v);
        eprintln!("seed {seed}: {}", String::from_utf8_lossy(&out));
    }
}

#[test]
fn json_object_sampling_parses() {
    let (vocab, tokens) = toy_vocab();
    for seed in 0..20 {
        let c = Constraint::json_object(&vocab).expect("json_object compiles");
        let out = generate(c, &vocab, &tokens, seed);
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", String::from_utf8_lossy(&out)));
        assert!(v.is_object(), "{v}");
    }
}

#[test]
fn special_tokens_never_inside_and_eos_only_at_end() {
    let (vocab, _) = toy_vocab();
    let n = vocab.len();
    let mut c = Constraint::json_object(&vocab).expect("compiles");
    let allowed = c.allowed().expect("mask");
    assert!(!allowed.is_allowed((n - 2) as u32), "<|im_start|> allowed");
    assert!(!allowed.is_allowed(vocab.eos()), "EOS allowed before any JSON");
    assert!(allowed.is_allowed(b'{' as u32));
    assert!(!allowed.is_allowed(b'[' as u32), "top level must be an object");
    for b in b"{}" {
        c.commit(*b as u32).expect("commit");
    }
    assert!(c.is_done());
    let allowed = c.allowed().expect("mask");
    assert_eq!(allowed.num_set(), 1);
    assert!(allowed.is_allowed(vocab.eos()));
    assert!(c.commit(b' ' as u32).is_err());
    c.commit(vocab.eos()).expect("eos");
    assert!(c.is_done());
}

#[test]
fn disallowed_token_is_an_error_not_a_panic() {
    let (vocab, _) = toy_vocab();
    let mut c = Constraint::json_schema(&vocab, &schema()).expect("compiles");
    assert!(matches!(c.commit(b'x' as u32), Err(ConstraintError::Parser(_))));
    assert!(c.commit(u32::MAX).is_err());
}

#[test]
fn unsupported_feature_is_named() {
    let (vocab, _) = toy_vocab();
    let bad = json!({"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}});
    let err = Constraint::json_schema(&vocab, &bad)
        .err()
        .expect("must be refused");
    eprintln!("not: {err}");
    match &err {
        ConstraintError::Unsupported { feature, .. } => assert_eq!(feature, "not"),
        other => panic!("wrong error: {other:?}"),
    }
    let bad = json!({"type": "array", "uniqueItems": true, "items": {"type": "integer"}});
    let err = Constraint::json_schema(&vocab, &bad)
        .err()
        .expect("must be refused");
    eprintln!("uniqueItems: {err}");
    assert!(matches!(&err, ConstraintError::Unsupported { feature, .. } if feature == "uniqueItems"));

    let bad = json!({"type": "string", "format": "credit-card"});
    let err = Constraint::json_schema(&vocab, &bad)
        .err()
        .expect("must be refused");
    eprintln!("format: {err}");
    assert!(matches!(&err, ConstraintError::Unsupported { feature, .. } if feature == "format: credit-card"));

    let bad = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
    let err = Constraint::json_schema(&vocab, &bad).err();
    assert!(
        matches!(&err, Some(ConstraintError::Unsupported { feature, .. }) if feature == "oneOf"),
        "{err:?}"
    );

    for (bad, want) in [
        (
            json!({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
            "if, then",
        ),
        (
            json!({"type": "object", "dependentRequired": {"a": ["b"]}}),
            "dependentRequired",
        ),
        (
            json!({"type": "array", "contains": {"type": "integer"}}),
            "contains",
        ),
        (
            json!({"type": "string", "pattern": "^(?!foo)[a-z]+$"}),
            "pattern (look-around)",
        ),
        (json!({"$ref": "https://example.com/schema.json"}), "$ref"),
        (
            json!({"type": "object", "minProperties": 1, "properties": {"a": {"type": "integer"}}}),
            "minProperties/maxProperties",
        ),
    ] {
        let err = Constraint::json_schema(&vocab, &bad).err();
        eprintln!("{bad} => {err:?}");
        assert!(
            matches!(&err, Some(ConstraintError::Unsupported { feature, .. }) if feature == want),
            "{bad}: {err:?}"
        );
    }

    // Lenient: the same schema is accepted and the keyword ignored.
    let lenient = JsonOptions {
        lenient: true,
        ..JsonOptions::default()
    };
    let bad = json!({"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}});
    assert!(Constraint::json_schema_with(&vocab, &bad, &lenient).is_ok());
}

#[test]
fn malformed_schema_is_an_error() {
    let (vocab, _) = toy_vocab();
    let err = Constraint::json_schema(&vocab, &json!(42))
        .err()
        .expect("refused");
    assert!(matches!(err, ConstraintError::Schema(_)));
    let err = Constraint::json_schema(&vocab, &json!({"type": "objekt"}))
        .err()
        .expect("refused");
    eprintln!("objekt: {err}");
    let err = Constraint::json_schema(&vocab, &json!({"properties": 3}))
        .err()
        .expect("refused");
    eprintln!("properties 3: {err}");
}

#[test]
fn too_deep_schema_is_an_error_not_a_stack_overflow() {
    let (vocab, _) = toy_vocab();
    let mut s = json!({"type": "integer"});
    for _ in 0..300 {
        s = json!({"type": "array", "items": s});
    }
    assert!(matches!(
        Constraint::json_schema(&vocab, &s),
        Err(ConstraintError::Schema(_))
    ));
}

#[test]
fn bad_vocab_is_an_error() {
    assert!(Vocab::new(vec![], &[], 0).is_err());
    assert!(Vocab::new(vec![b"a".to_vec()], &[false, false], 0).is_err());
    assert!(Vocab::new(vec![b"a".to_vec()], &[false], 1).is_err());
    assert!(Vocab::new(vec![vec![b'a'; 5000]], &[false], 0).is_err());
    // Duplicate byte strings (SentencePiece `▁` and `<0x20>` both decode to " ") are fine.
    let v = Vocab::new(
        vec![b" ".to_vec(), b" ".to_vec(), b"{".to_vec(), b"}".to_vec(), vec![]],
        &[false, false, false, false, true],
        4,
    )
    .expect("duplicates");
    let mut c = Constraint::json_object(&v).expect("compiles");
    c.commit(2).expect("{");
    let m = c.allowed().expect("mask");
    assert!(m.is_allowed(0) && m.is_allowed(1) && m.is_allowed(3));
}

#[test]
fn mask_pads_longer_logits() {
    let (vocab, _) = toy_vocab();
    let mut c = Constraint::json_object(&vocab).expect("compiles");
    let mut logits = vec![0.0f32; vocab.len() + 7];
    c.mask(&mut logits).expect("mask");
    assert!(logits[vocab.len()..].iter().all(|l| *l == f32::NEG_INFINITY));
    assert!(logits[b'{' as usize].is_finite());
}
