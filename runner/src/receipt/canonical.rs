//! Canonical JSON, as digests and signed payloads are written
//! (docs/receipts.md, "Canonical JSON"): RFC 8785 (JCS) for the documents
//! the runner makes. Object members sorted by their names' UTF-16 code
//! units, no whitespace, strings with the minimal escapes (`\"`, `\\`,
//! `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00xx` in
//! lowercase hex, everything else as UTF-8), integers in decimal. A
//! document written with other key orders, whitespace or escapes has the
//! same canonical bytes. Fractions are written as Rust's shortest
//! round-trip form, which JCS agrees with for the values below 1e21 that
//! have one; the documents digested here hold integers only.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical bytes of `value`.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    out
}

/// The SHA-256 of the canonical bytes of `value`, lowercase hex.
pub fn sha256_hex(value: &Value) -> String {
    crate::text::to_hex(&Sha256::digest(to_vec(value)))
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn bytes_sha256_hex(bytes: &[u8]) -> String {
    crate::text::to_hex(&Sha256::digest(bytes))
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => out.extend_from_slice(u.to_string().as_bytes()),
            (None, Some(i), _) => out.extend_from_slice(i.to_string().as_bytes()),
            (None, None, Some(f)) if f == f.trunc() && f.abs() < 9.007_199_254_740_992e15 => {
                out.extend_from_slice((f as i64).to_string().as_bytes())
            }
            (None, None, Some(f)) => out.extend_from_slice(format!("{f}").as_bytes()),
            (None, None, None) => out.extend_from_slice(b"null"),
        },
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes())
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_whitespace_and_escapes_do_not_change_the_bytes() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, "x\u0041\/"], "a": {"z": null, "y": true}}"#)
                .unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"y":true,"z":null},"b":[1,"xA/"]}"#).unwrap();
        assert_eq!(to_vec(&a), to_vec(&b));
        assert_eq!(to_vec(&a), br#"{"a":{"y":true,"z":null},"b":[1,"xA/"]}"#);
    }

    #[test]
    fn strings_use_the_minimal_escapes_of_rfc_8785() {
        let v = json!("\u{1}\u{1f}\n\t\"\\é€\u{7f}");
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "\"\\u0001\\u001f\\n\\t\\\"\\\\é€\u{7f}\""
        );
    }

    #[test]
    fn members_sort_by_utf16_code_units_as_rfc_8785_says() {
        // U+10000 is 0xD800 0xDC00 in UTF-16, below U+E000 (UTF-8 sorts
        // them the other way round).
        let v = json!({"\u{e000}": 1, "\u{10000}": 2, "a": 3});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "{\"a\":3,\"\u{10000}\":2,\"\u{e000}\":1}"
        );
        let n = json!({"n": -3, "m": 18446744073709551615u64, "f": 2.0, "g": 0.5});
        assert_eq!(
            String::from_utf8(to_vec(&n)).unwrap(),
            r#"{"f":2,"g":0.5,"m":18446744073709551615,"n":-3}"#
        );
    }
}
