//! Python's formatting as Jinja2 templates see it, for [`super::template`]: `str()`/`repr()` of template
//! values, `json.dumps` (transformers' `tojson`) and Jinja2's `indent` filter.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};

/// Jinja2's `indent(width=4, first=False, blank=False)`, including its quirk of keeping a trailing newline
/// (`'{\n'|indent(4, first=true)` is `'    {\n'`); `width` may be a string.
pub(super) fn indent(
    s: Value,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<String, Error> {
    let width = width.or(kwargs.get("width")?);
    let first = first.or(kwargs.get("first")?).unwrap_or(false);
    let blank = blank.or(kwargs.get("blank")?).unwrap_or(false);
    kwargs.assert_all_used()?;
    let pad = width.map_or(Ok(" ".repeat(4)), |w| indent_unit(&w))?;
    // Python's `(s + "\n").splitlines()`: the text always ends in a line break, so the last piece is empty.
    let mut lines = vec![String::new()];
    let text = py_str(&s) + "\n";
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}'..='\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        ) {
            if c == '\r' && chars.peek() == Some(&'\n') {
                chars.next();
            }
            lines.push(String::new());
        } else if let Some(line) = lines.last_mut() {
            line.push(c);
        }
    }
    lines.pop();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            if blank || !line.is_empty() {
                out.push_str(&pad);
            }
        }
        out.push_str(line);
    }
    Ok(if first { pad + &out } else { out })
}

/// An indent as Python takes it: a number of spaces, or the string itself.
pub(super) fn indent_unit(v: &Value) -> Result<String, Error> {
    Ok(match v.as_str() {
        Some(s) => s.to_owned(),
        None => " ".repeat(usize::try_from(v.clone())?),
    })
}

/// Python's `str(x)`: strings as they are, anything else as `repr` writes it.
pub(super) fn py_str(v: &Value) -> String {
    match v.as_str() {
        Some(s) => s.to_owned(),
        None if v.is_undefined() => String::new(),
        None => {
            let mut out = String::new();
            py_repr(v, &mut out);
            out
        }
    }
}

/// Python's `repr` of the values templates hold: `None`, `True`, `1.0`, `'it'`, `[…]`, `{'k': …}`.
pub(super) fn py_repr(v: &Value, out: &mut String) {
    use minijinja::value::ValueKind as K;
    match v.kind() {
        K::Undefined => {}
        K::None => out.push_str("None"),
        K::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        K::Number if !v.is_integer() => {
            out.push_str(&f64::try_from(v.clone()).map_or_else(|_| v.to_string(), py_float))
        }
        K::String => py_str_repr(v.as_str().unwrap_or_default(), out),
        K::Seq | K::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&item, out);
            }
            out.push(']');
        }
        K::Map => {
            out.push('{');
            for (i, key) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&key, out);
                out.push_str(": ");
                py_repr(&v.get_item(&key).unwrap_or_default(), out);
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; non-printable characters escaped.
pub(super) fn py_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            // Not `str.isprintable()`: controls, separators other than ' ', common format characters.
            c if c != ' '
                && (c.is_control()
                    || c.is_whitespace()
                    || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}')) =>
            {
                let n = c as u32;
                out.push_str(&match n {
                    0..=0xff => format!("\\x{n:02x}"),
                    0x100..=0xffff => format!("\\u{n:04x}"),
                    _ => format!("\\U{n:08x}"),
                });
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// How `json.dumps` lays out its output.
pub(super) struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ascii: bool,
    sort_keys: bool,
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, every argument honoured. Like Python's, the result is a plain string (`| e` escapes it).
pub(super) fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        Some(v) if !v.is_none() => Some(indent_unit(&v)?),
        _ => None,
    };
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ));
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write_py_json(&json, &style, 0, &mut out);
    Ok(Value::from(out))
}

/// Python `json.dumps` formatting.
pub(super) fn write_py_json(v: &serde_json::Value, style: &JsonStyle, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
    };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => out.push_str(&py_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        J::String(s) => py_string(s, style.ascii, out),
        J::Array(items) if items.is_empty() => out.push_str("[]"),
        J::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, depth + 1);
                write_py_json(item, style, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if map.is_empty() => out.push_str("{}"),
        J::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, depth + 1);
                py_string(k, style.ascii, out);
                out.push_str(&style.key_sep);
                write_py_json(item, style, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

/// Python's `repr(float)`.
pub(super) fn py_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        let s = format!("{f:?}");
        // Rust writes `1e-5`, Python `1e-05`.
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// A JSON string as Python writes it; with `ensure_ascii`, everything outside ' '..='~' as `\uXXXX`.
pub(super) fn py_string(s: &str, ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ascii && !(' '..='~').contains(&c)) => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
