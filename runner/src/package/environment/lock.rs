//! A Python requirements lock: every requirement pinned to one version and
//! to the hashes of its files (docs/environments.md, "The lock").
//!
//! The accepted form is the one `pip-compile --generate-hashes` and `uv pip
//! compile --generate-hashes` write:
//!
//! ```text
//! # comments, blank lines
//! pypdf==4.3.1 \
//!     --hash=sha256:<64 hex> \
//!     --hash=sha256:<64 hex>
//! ```
//!
//! Lines are joined at a trailing `\` and comments dropped as pip does
//! (a `#` at the start of a line or after white space starts a comment; a
//! comment line ends a continuation). Anything that would let pip choose
//! bytes the lock does not name is refused with a sentence naming the line:
//! a requirement without `==` or without `--hash`, a wildcard or `===`
//! version, extras or markers, an editable (`-e`), a URL or a path, an
//! include (`-r`, `-c`), and every option that names a host or a source
//! (`--index-url`, `--extra-index-url`, `--trusted-host`, `--find-links`,
//! …): the index is pip's own configuration, never the lock's.
//!
//! Pure code: no I/O.

use sha2::{Digest, Sha256};

/// The `kind` a Python requirements lock has in an environment's record.
pub const PYTHON_REQUIREMENTS: &str = "python-requirements";

/// One pinned requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The name as written.
    pub name: String,
    /// The name normalized (lower case, runs of `-`, `_`, `.` as one `-`).
    pub normalized: String,
    pub version: String,
    /// `sha256:<64 hex>`, as pip's `--hash` takes them.
    pub hashes: Vec<String>,
    /// The line it starts on (1-based).
    pub line: usize,
}

/// A parsed lock and the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonLock {
    pub requirements: Vec<Requirement>,
    /// Lowercase hex SHA-256 of the lock file's bytes as given.
    pub sha256: String,
}

/// Why a lock was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LockError {
    #[error("the lock is not UTF-8 text")]
    NotUtf8,
    #[error("the lock names no requirement; list each one as name==version --hash=sha256:…")]
    Empty,
    #[error("line {line} holds {shown}, which pip would take for a line break or more text than this check reads; a lock is plain ASCII text with tabs and newlines only")]
    Character { line: usize, shown: String },
    #[error("line {line} ({text:?}): {reason}")]
    Loose {
        line: usize,
        text: String,
        reason: &'static str,
    },
    #[error(
        "line {line}: {name:?} is already required on line {first}; list each requirement once"
    )]
    Duplicate {
        line: usize,
        name: String,
        first: usize,
    },
}

const NO_HASH: &str = "a requirement without --hash=sha256:… could install any bytes; regenerate the lock with hashes (pip-compile --generate-hashes, or uv pip compile --generate-hashes)";

/// Parses a Python requirements lock, refusing every loose line.
pub fn parse_python(bytes: &[u8]) -> Result<PythonLock, LockError> {
    let text = std::str::from_utf8(bytes).map_err(|_| LockError::NotUtf8)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    plain_text(text)?;
    let mut requirements: Vec<Requirement> = Vec::new();
    for (line, logical) in logical_lines(text) {
        let stripped = strip_comment(&logical);
        let stripped = stripped.trim();
        if stripped.is_empty() {
            continue;
        }
        let req = parse_line(line, stripped)?;
        let Some(req) = req else { continue };
        if let Some(first) = requirements.iter().find(|r| r.normalized == req.normalized) {
            return Err(LockError::Duplicate {
                line,
                name: req.name,
                first: first.line,
            });
        }
        requirements.push(req);
    }
    if requirements.is_empty() {
        return Err(LockError::Empty);
    }
    Ok(PythonLock {
        requirements,
        sha256: crate::text::to_hex(&Sha256::digest(bytes)),
    })
}

/// Joins continuation lines as pip does; yields (first line number, text).
/// Refuses any character but printable ASCII, tabs and line ends (`\n`,
/// or `\r\n`). pip splits a lock with Python's `str.splitlines`, which
/// also breaks at `\r`, `\x0b`, `\x0c`, `\x1c`-`\x1e`, `\x85`,
/// `\u2028` and `\u2029`: text this parser read as one requirement and a
/// comment would reach pip as a second line, such as `--index-url` or
/// `-r /etc/shadow`. Refusing all else keeps the two readings one.
fn plain_text(text: &str) -> Result<(), LockError> {
    for (i, raw) in text.split('\n').enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(c) = raw
            .chars()
            .find(|&c| !(c == '\t' || (' '..='~').contains(&c)))
        {
            return Err(LockError::Character {
                line: i + 1,
                shown: format!("{:?}", c.to_string()),
            });
        }
    }
    Ok(())
}

fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let is_comment = raw.trim_start().starts_with('#');
        if let Some(rest) = raw.strip_suffix('\\').filter(|_| !is_comment) {
            let entry = pending.get_or_insert_with(|| (number, String::new()));
            entry.1.push_str(rest);
            continue;
        }
        match pending.take() {
            Some((first, mut joined)) => {
                if is_comment {
                    // A comment line ends the continuation, and stays a comment.
                    joined.push(' ');
                }
                joined.push_str(raw);
                out.push((first, joined));
            }
            None => out.push((number, raw.to_owned())),
        }
    }
    if let Some(last) = pending {
        out.push(last);
    }
    out
}

/// Drops a comment: `#` at the start or after white space, to the end.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

fn parse_line(line: usize, text: &str) -> Result<Option<Requirement>, LockError> {
    let loose = |reason| LockError::Loose {
        line,
        text: text.to_owned(),
        reason,
    };
    let mut tokens = text.split_ascii_whitespace();
    let first = tokens.next().unwrap_or_default();
    if first.starts_with('-') {
        return match option_name(first) {
            // Harmless: it is what the build asks of pip anyway.
            "--require-hashes" if tokens.next().is_none() => Ok(None),
            "-e" | "--editable" => Err(loose(
                "an editable requirement is built from a source folder; pin a released version with == and --hash",
            )),
            "-r" | "--requirement" | "-c" | "--constraint" => Err(loose(
                "a lock must be one self-contained file; inline the file it includes",
            )),
            "-i" | "--index-url" | "--extra-index-url" | "--trusted-host" | "-f"
            | "--find-links" | "--no-index" => Err(loose(
                "a lock must not name where packages come from; pip's own configuration (pip.conf, PIP_INDEX_URL) says that",
            )),
            _ => Err(loose(
                "pip options are not accepted in a lock (only --require-hashes, and --hash after a requirement)",
            )),
        };
    }
    if text.contains(';') {
        return Err(loose(
            "environment markers are not accepted; compile the lock for this host and drop the markers",
        ));
    }
    if first.contains("://") || first.contains('/') || first.starts_with('.') || text.contains('@')
    {
        return Err(loose(
            "a URL or a path is not a pinned requirement; pin a released version with == and --hash",
        ));
    }
    let Some((name, version)) = first.split_once("==") else {
        return Err(loose(
            "a requirement must pin one version with == (name==version); regenerate the lock with pip-compile --generate-hashes",
        ));
    };
    if name.contains('[') {
        return Err(loose(
            "extras have no meaning when dependencies are not resolved; list each requirement they pull in",
        ));
    }
    if !valid_name(name) {
        return Err(loose(
            "the requirement's name is not a valid package name, or it is followed by another comparison",
        ));
    }
    if version.starts_with('=') || version.is_empty() || !valid_version(version) {
        return Err(loose(
            "the version after == must be one exact version (no *, no ===, no comparison)",
        ));
    }
    let mut hashes = Vec::new();
    let mut rest = tokens.peekable();
    while let Some(tok) = rest.next() {
        let value = if let Some(v) = tok.strip_prefix("--hash=") {
            v
        } else if tok == "--hash" {
            rest.next().unwrap_or_default()
        } else {
            return Err(loose(
                "only --hash=sha256:… may follow a requirement in a lock",
            ));
        };
        let Some(hex) = value.strip_prefix("sha256:") else {
            return Err(loose(
                "every --hash must be sha256:<64 lowercase hex digits>",
            ));
        };
        if !crate::package::hash::is_hex_digest(hex) {
            return Err(loose(
                "every --hash must be sha256:<64 lowercase hex digits>",
            ));
        }
        hashes.push(value.to_owned());
    }
    if hashes.is_empty() {
        return Err(loose(NO_HASH));
    }
    Ok(Some(Requirement {
        name: name.to_owned(),
        normalized: normalize(name),
        version: version.to_owned(),
        hashes,
        line,
    }))
}

/// `--index-url=x` names the option `--index-url`.
fn option_name(token: &str) -> &str {
    token.split_once('=').map_or(token, |(n, _)| n)
}

/// A PEP 508 name: letters and digits, with `-`, `_`, `.` inside.
fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// The characters of a PEP 440 version (no wildcard, no comparison).
fn valid_version(version: &str) -> bool {
    version
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'!' | b'+' | b'-' | b'_'))
}

/// PEP 503 normalization: lower case, each run of `-_.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_run = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn pinned_hashed_locks_parse() {
        let text = format!(
            "# via pip-compile\n\
             pypdf==4.3.1 \\\n    --hash={H1} \\\n    --hash={H2}\n    # via -r requirements.in\n\
             \n\
             Et_Xml.File==2.0.0 --hash {H1}  # trailing comment\n\
             --require-hashes\n\
             defusedxml==0.7.1 --hash={H2}\n"
        );
        let lock = parse_python(text.as_bytes()).unwrap();
        let got: Vec<_> = lock
            .requirements
            .iter()
            .map(|r| {
                (
                    r.normalized.as_str(),
                    r.version.as_str(),
                    r.hashes.len(),
                    r.line,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("pypdf", "4.3.1", 2, 2),
                ("et-xml-file", "2.0.0", 1, 7),
                ("defusedxml", "0.7.1", 1, 9)
            ]
        );
        assert_eq!(
            lock.sha256,
            crate::package::hash::file_hash(text.as_bytes())
        );
    }

    /// Every loose line is refused, and the sentence names its line.
    #[test]
    fn loose_locks_are_refused_naming_the_line() {
        let cases: &[(&str, &str)] = &[
            ("requests\n", "must pin one version with =="),
            ("requests>=2.0 --hash=H1\n", "must pin one version with =="),
            ("requests==2.*  --hash=H1\n", "one exact version"),
            ("requests===2.0 --hash=H1\n", "one exact version"),
            ("requests==2.0,<3 --hash=H1\n", "one exact version"),
            ("requests==2.0\n", "without --hash"),
            ("requests==2.0 \\\n", "without --hash"),
            ("requests==2.0 --hash=md5:abc\n", "sha256:<64"),
            ("requests==2.0 --hash=sha256:ABC\n", "sha256:<64"),
            (
                "requests==2.0 --hash=sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
                "sha256:<64",
            ),
            ("requests==2.0 --no-binary=:all: --hash=H1\n", "only --hash"),
            ("requests[socks]==2.0 --hash=H1\n", "extras"),
            ("requests==2.0 ; python_version<'3.8' --hash=H1\n", "markers"),
            ("-e ./src\n", "editable"),
            ("--editable=git+https://example.invalid/x\n", "editable"),
            ("-r other.txt\n", "self-contained"),
            ("-c constraints.txt\n", "self-contained"),
            ("--index-url https://example.invalid/simple\n", "must not name where"),
            ("-i https://example.invalid/simple\n", "must not name where"),
            ("--extra-index-url=https://example.invalid/simple\n", "must not name where"),
            ("--trusted-host example.invalid\n", "must not name where"),
            ("--find-links ./wheels\n", "must not name where"),
            ("--no-binary :all:\n", "pip options are not accepted"),
            ("https://example.invalid/x-1.0.whl --hash=H1\n", "URL or a path"),
            ("x @ https://example.invalid/x-1.0.whl --hash=H1\n", "URL or a path"),
            ("./x-1.0.tar.gz --hash=H1\n", "URL or a path"),
            ("-x==1.0 --hash=H1\n", "pip options are not accepted"),
            ("x_==1.0 --hash=H1\n", "not a valid package name"),
        ];
        for (body, want) in cases {
            let text = format!("# header\n{}", body.replace("H1", H1));
            match parse_python(text.as_bytes()) {
                Err(LockError::Loose { line, reason, .. }) => {
                    assert_eq!(line, 2, "{body:?}");
                    assert!(reason.contains(want), "{body:?}: {reason}");
                }
                other => panic!("{body:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn empty_duplicate_and_binary_locks_are_refused() {
        assert_eq!(parse_python(b"# nothing\n\n"), Err(LockError::Empty));
        assert_eq!(parse_python(b"--require-hashes\n"), Err(LockError::Empty));
        assert_eq!(parse_python(b"\xff\xfe"), Err(LockError::NotUtf8));
        let dup = format!("Foo.Bar==1 --hash={H1}\nfoo-bar==2 --hash={H2}\n");
        assert_eq!(
            parse_python(dup.as_bytes()),
            Err(LockError::Duplicate {
                line: 2,
                name: "foo-bar".into(),
                first: 1
            })
        );
    }

    /// pip splits lines at more characters than `\n` (Python's
    /// `splitlines`): a lock this parser read as one pinned requirement
    /// and a comment made pip fetch from another index, or read
    /// `/etc/shadow` as a requirements file.
    #[test]
    fn characters_pip_would_split_a_line_at_are_refused() {
        let pin = format!("six==1.17.0 --hash=sha256:{}", "a".repeat(64));
        for sep in [
            "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\u{85}", "\u{2028}", "\u{2029}",
        ] {
            for lock in [
                format!("{pin} # c{sep}--index-url=http://127.0.0.1:9/simple\n"),
                format!("# c{sep}-r /etc/shadow\n{pin}\n"),
            ] {
                let e = parse_python(lock.as_bytes()).unwrap_err();
                assert!(matches!(e, LockError::Character { .. }), "{lock:?}: {e}");
            }
        }
        // Other controls and non-ASCII text are refused too; CRLF and tabs
        // are plain text.
        for bad in ["\x00", "\x1b", "\u{e9}"] {
            let lock = format!("{pin} # {bad}\n");
            assert!(parse_python(lock.as_bytes()).is_err(), "{lock:?}");
        }
        assert!(parse_python(format!("{pin}\t\r\n# ok\r\n").as_bytes()).is_ok());
        let e = parse_python(format!("{pin}\n#\x0b-r x\n").as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with("line 2 holds"), "{e}");
    }

    #[test]
    fn the_message_names_the_line_and_what_to_do() {
        let err = parse_python(b"pypdf==4.3.1\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("line 1 (\"pypdf==4.3.1\"): "), "{msg}");
        assert!(msg.contains("--generate-hashes"), "{msg}");
    }
}
