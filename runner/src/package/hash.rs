//! Package hash, file hash and set identity (docs/formats.md).
//!
//! These formats are shared byte for byte with the ScienceDiscovery runner:
//!
//! - **file hash**: lowercase hex SHA-256 of the bytes;
//! - **package hash**: one SHA-256 over, for each file in UTF-16 code-unit
//!   order of its path, `<utf8 length of path>:<path>:<size>:` then the bytes;
//! - **set identity**: SHA-256 of the compact JSON array of
//!   `{"hash","id","revision","version"}` sorted by id.
//!
//! [`PackageHasher`] is streaming: callers feed each file's header and then
//! its bytes as they copy them, so no byte is read twice. It checks that
//! files arrive in canonical order and that each file delivers exactly the
//! size its header announced, so a caller cannot produce a hash of a
//! different byte stream by mistake.
//!
//! Pure code: no I/O.

use std::cmp::Ordering;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Length of a hex SHA-256 digest.
pub const HEX_LEN: usize = 64;

/// Errors from feeding a [`PackageHasher`] out of contract.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HashError {
    #[error(
        "file {path:?} is out of order after {previous:?} (files must be hashed in UTF-16 order)"
    )]
    OutOfOrder { previous: String, path: String },
    #[error("file {path:?} announced {expected} bytes but {actual} were fed")]
    SizeMismatch {
        path: String,
        expected: u64,
        actual: u64,
    },
    #[error("bytes were fed before any file was started")]
    NoFile,
}

/// Compares two paths by their UTF-16 code units, the package-hash order.
///
/// For ASCII this is byte order; it differs from UTF-8 byte order for
/// characters above U+FFFF (surrogate pairs sort before U+E000..U+FFFF).
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Sorts paths (or anything carrying one) into package-hash order.
pub fn sort_utf16<T>(items: &mut [T], path: impl Fn(&T) -> &str) {
    items.sort_by(|a, b| utf16_cmp(path(a), path(b)));
}

pub use crate::text::to_hex;

/// True when `s` is 64 lowercase hex digits, the only accepted hash spelling.
pub fn is_hex_digest(s: &str) -> bool {
    s.len() == HEX_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn file_hash(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// Streaming package hash. Feed `begin_file`, then `update` with exactly the
/// announced number of bytes, for every file in UTF-16 path order; then
/// `finish`.
#[derive(Debug, Clone, Default)]
pub struct PackageHasher {
    sha: Sha256,
    current: Option<(String, u64, u64)>,
    previous: Option<String>,
}

impl PackageHasher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a file: checks order and closes the previous file.
    pub fn begin_file(&mut self, path: &str, size: u64) -> Result<(), HashError> {
        self.end_file()?;
        if let Some(prev) = &self.previous {
            if utf16_cmp(prev, path) != Ordering::Less {
                return Err(HashError::OutOfOrder {
                    previous: prev.clone(),
                    path: path.to_owned(),
                });
            }
        }
        self.sha
            .update(format!("{}:{}:{}:", path.len(), path, size).as_bytes());
        self.current = Some((path.to_owned(), size, 0));
        Ok(())
    }

    /// Feeds bytes of the current file.
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), HashError> {
        let Some((path, expected, fed)) = self.current.as_mut() else {
            return Err(HashError::NoFile);
        };
        *fed += bytes.len() as u64;
        if *fed > *expected {
            return Err(HashError::SizeMismatch {
                path: path.clone(),
                expected: *expected,
                actual: *fed,
            });
        }
        self.sha.update(bytes);
        Ok(())
    }

    fn end_file(&mut self) -> Result<(), HashError> {
        if let Some((path, expected, fed)) = self.current.take() {
            if fed != expected {
                return Err(HashError::SizeMismatch {
                    path,
                    expected,
                    actual: fed,
                });
            }
            self.previous = Some(path);
        }
        Ok(())
    }

    /// Returns the lowercase hex package hash.
    pub fn finish(mut self) -> Result<String, HashError> {
        self.end_file()?;
        Ok(to_hex(&self.sha.finalize()))
    }
}

/// Package hash of in-memory files; sorts them first.
pub fn package_hash<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<String, HashError> {
    let mut files: Vec<_> = files.into_iter().collect();
    sort_utf16(&mut files, |f| f.0);
    let mut hasher = PackageHasher::new();
    for (path, bytes) in files {
        hasher.begin_file(path, bytes.len() as u64)?;
        hasher.update(bytes)?;
    }
    hasher.finish()
}

/// One frozen binding: which exact package an execution gets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub id: String,
    pub revision: u64,
    pub version: String,
    pub hash: String,
}

/// Set identity of a selection: SHA-256 of the compact JSON array of
/// bindings with keys `hash, id, revision, version`, sorted by id.
pub fn set_identity(bindings: &[Binding]) -> String {
    #[derive(Serialize)]
    struct Entry<'a> {
        hash: &'a str,
        id: &'a str,
        revision: u64,
        version: &'a str,
    }
    let mut entries: Vec<Entry<'_>> = bindings
        .iter()
        .map(|b| Entry {
            hash: &b.hash,
            id: &b.id,
            revision: b.revision,
            version: &b.version,
        })
        .collect();
    entries.sort_by(|a, b| a.id.as_bytes().cmp(b.id.as_bytes()));
    // Serializing plain strings and integers cannot fail.
    let json = serde_json::to_vec(&entries).unwrap_or_default();
    to_hex(&Sha256::digest(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_order_differs_from_utf8_for_astral_plane() {
        // U+1F600 is a surrogate pair (0xD83D..) in UTF-16, below U+FFFD.
        assert_eq!(utf16_cmp("😀", "\u{fffd}"), Ordering::Less);
        assert_eq!(
            "😀".as_bytes().cmp("\u{fffd}".as_bytes()),
            Ordering::Greater
        );
    }

    #[test]
    fn ascii_order_is_byte_order() {
        let mut v = vec!["a/b", "a-b", "a.b", "B", "a_b", "SKILL.md"];
        sort_utf16(&mut v, |s| s);
        assert_eq!(v, ["B", "SKILL.md", "a-b", "a.b", "a/b", "a_b"]);
    }

    #[test]
    fn hasher_refuses_out_of_order_and_wrong_sizes() {
        let mut h = PackageHasher::new();
        h.begin_file("b", 1).unwrap();
        h.update(b"x").unwrap();
        assert!(matches!(
            h.begin_file("a", 0),
            Err(HashError::OutOfOrder { .. })
        ));

        let mut h = PackageHasher::new();
        h.begin_file("a", 2).unwrap();
        h.update(b"x").unwrap();
        assert!(matches!(h.finish(), Err(HashError::SizeMismatch { .. })));

        let mut h = PackageHasher::new();
        h.begin_file("a", 1).unwrap();
        assert!(matches!(
            h.update(b"xy"),
            Err(HashError::SizeMismatch { .. })
        ));
        assert_eq!(PackageHasher::new().update(b"x"), Err(HashError::NoFile));
    }

    #[test]
    fn duplicate_path_is_out_of_order() {
        let mut h = PackageHasher::new();
        h.begin_file("a", 0).unwrap();
        assert!(h.begin_file("a", 0).is_err());
    }

    #[test]
    fn hex_digest_spelling() {
        assert!(is_hex_digest(&"a".repeat(64)));
        assert!(!is_hex_digest(&"A".repeat(64)));
        assert!(!is_hex_digest(&"a".repeat(63)));
        assert!(!is_hex_digest(&"g".repeat(64)));
    }
}
