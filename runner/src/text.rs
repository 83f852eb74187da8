//! Small pure formatting helpers every room uses: one-line messages and
//! timestamps. Nothing here touches the system.

use std::fmt::Write as _;

/// `text` on one line: control characters (newlines included) are written
/// as escapes (`\n`), so a message that quotes its input (a JSON key, a
/// TOML line, a file name) stays one sentence in logs, results and error
/// documents. Other text is left as it is.
pub fn single_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Lowercase hex of a digest.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_line_escapes_control_characters_only() {
        assert_eq!(single_line("a\nb\r\tc\u{7f}"), "a\\nb\\r\\tc\\u{7f}");
        assert_eq!(single_line("été \"x\" \\ 日本"), "été \"x\" \\ 日本");
    }
}
