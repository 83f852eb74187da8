//! Canonical JSON, as digests and signed payloads are written
//! (docs/receipts.md, "Canonical JSON"): RFC 8785 (JCS) for the documents
//! the runner makes. Object members sorted by their names' UTF-16 code
//! units, no whitespace, strings with the minimal escapes (`\"`, `\\`,
//! `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00xx` in
//! lowercase hex, everything else as UTF-8), integers in decimal. A
//! document written with other key orders, whitespace or escapes has the
//! same canonical bytes. Integers are written exactly, also above 2^53
//! (where JCS, which reads numbers as doubles, would round them), and
//! fractions as Rust's shortest round-trip form, which JCS agrees with
//! for magnitudes from 1e-6 to below 1e21 (below 1e-6 JCS writes an
//! exponent, Rust does not); the documents digested here hold integers
//! only.

use std::io::Write;

use serde_json::{Map, Value};
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
        // Written in place (a `Vec` takes every write).
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => {
                let _ = write!(out, "{u}");
            }
            (None, Some(i), _) => {
                let _ = write!(out, "{i}");
            }
            (None, None, Some(f)) if f == f.trunc() && f.abs() < 9.007_199_254_740_992e15 => {
                let _ = write!(out, "{}", f as i64);
            }
            (None, None, Some(f)) => {
                let _ = write!(out, "{f}");
            }
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
            let members = sorted(map.iter().map(|(k, v)| (k.as_str(), v)).collect());
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

/// Each member of `map` with its value's canonical bytes, as
/// [`object_of`] takes them.
pub fn members(map: &Map<String, Value>) -> Vec<(&str, Vec<u8>)> {
    map.iter().map(|(k, v)| (k.as_str(), to_vec(v))).collect()
}

/// The canonical bytes of the object whose members are `parts`, each
/// member's value given as its canonical bytes: the same bytes as
/// [`to_vec`] of that object, without writing its members again. The
/// names must be distinct and each value canonical already (as
/// [`to_vec`] writes it), as they are in a map's members.
pub fn object_of<B: AsRef<[u8]>>(parts: &[(&str, B)]) -> Vec<u8> {
    let members = sorted(parts.iter().map(|(k, v)| (*k, v.as_ref())).collect());
    debug_assert!(
        members.windows(2).all(|w| w[0].0 != w[1].0),
        "an object's member names are distinct"
    );
    let mut out = Vec::with_capacity(
        2 + parts
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().len() + 4)
            .sum::<usize>(),
    );
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(k, &mut out);
        out.push(b':');
        out.extend_from_slice(v);
    }
    out.push(b'}');
    out
}

/// Members in the order RFC 8785 writes them: by their names' UTF-16
/// code units. That is the names' byte order (a `serde_json` map's own)
/// unless a name holds a character above U+FFFF, whose surrogates sort
/// below U+E000-U+FFFF: only then are they compared as UTF-16.
fn sorted<T>(mut members: Vec<(&str, T)>) -> Vec<(&str, T)> {
    let astral = |k: &str| k.bytes().any(|b| b >= 0xF0);
    if members.iter().any(|(k, _)| astral(k)) {
        members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    } else if !members.is_sorted_by(|a, b| a.0 <= b.0) {
        members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    }
    members
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    // Runs of bytes that need no escape are copied whole; no byte of a
    // multi-byte UTF-8 sequence is below 0x80, so none is ever escaped.
    let bytes = s.as_bytes();
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..0x20 => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[copied..i]);
        out.extend_from_slice(escape);
        copied = i + 1;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

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

    #[test]
    fn an_object_of_canonical_parts_is_the_object_written_whole() {
        let v = json!({
            "\u{e000}": [1, "\u{1}x"],
            "\u{10000}": {"b": null, "a": -2},
            "zz": "tab\there",
            "a": true,
        });
        let Value::Object(map) = &v else {
            unreachable!()
        };
        let rendered: Vec<(String, Vec<u8>)> =
            map.iter().map(|(k, v)| (k.clone(), to_vec(v))).collect();
        // Given in another order than either sort: the result is the same.
        let mut parts: Vec<(&str, &[u8])> = rendered
            .iter()
            .map(|(k, b)| (k.as_str(), b.as_slice()))
            .collect();
        parts.reverse();
        assert_eq!(object_of(&parts), to_vec(&v));
        assert_eq!(object_of::<&[u8]>(&[]), b"{}");
    }
}
