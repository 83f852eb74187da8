//! Small pure formatting helpers every room uses: one-line messages and
//! timestamps. Nothing here touches the system.

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
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Marks the running unit test skipped: prints `SKIPPED: <test>: <reason>`
/// (which `scripts/test` counts as skipped, never as passed, through
/// `SKILL_RUNNER_SKIP_LOG`), or fails it where `SKILL_RUNNER_MUST_WORK`
/// says nothing may be skipped. The caller returns right after.
#[cfg(test)]
pub(crate) fn skip_test(reason: impl std::fmt::Display) {
    let thread = std::thread::current();
    let line = format!(
        "SKIPPED: {}: {}",
        thread.name().unwrap_or("this test"),
        reason
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        std::env::var_os("SKILL_RUNNER_MUST_WORK").is_none(),
        "{line}\n(SKILL_RUNNER_MUST_WORK is set: nothing may be skipped)"
    );
    println!("{line}");
    if let Some(log) = std::env::var_os("SKILL_RUNNER_SKIP_LOG").filter(|l| !l.is_empty()) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
        file.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa0, 0xff, 0x5c]), "000fa0ff5c");
        assert_eq!(to_hex(&[]), "");
    }

    #[test]
    fn single_line_escapes_control_characters_only() {
        assert_eq!(single_line("a\nb\r\tc\u{7f}"), "a\\nb\\r\\tc\\u{7f}");
        assert_eq!(single_line("été \"x\" \\ 日本"), "été \"x\" \\ 日本");
    }
}
