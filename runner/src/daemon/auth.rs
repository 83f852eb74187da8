//! Bearer-token authentication of daemon requests.
//!
//! Invariants:
//! - the token text is kept only as its SHA-256 digest, never logged or
//!   printed (`Debug` shows nothing of it);
//! - a presented token is hashed and the two digests are compared in
//!   constant time, so neither the content nor the length of the real
//!   token leaks through timing;
//! - a token is at least [`MIN_TOKEN_LEN`] visible ASCII characters;
//!   surrounding whitespace (a trailing newline in a file) is ignored;
//! - a token file is read only when it is a regular file owned by the
//!   daemon's user that no one else may read or write, of at most
//!   [`MAX_TOKEN_FILE`] bytes: it is opened without blocking (a FIFO would
//!   hang the start) and checked on the opened descriptor, so what is
//!   checked is what is read.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// Longest token file read; a token is one short line.
pub const MAX_TOKEN_FILE: u64 = 4096;

/// A configured bearer token.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why a token could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read token file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("token file {path} is not a regular file; write the token (openssl rand -hex 32) to a regular file and name it with --token-file")]
    NotRegular { path: PathBuf },
    #[error("token file {path} is owned by uid {owner}, not by the daemon's user (uid {uid}); chown it to the daemon's user, or write the token to a file that user owns")]
    NotOwned { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "token file {path} can be read or written by other users (mode {mode:o}); chmod 600 it"
    )]
    NotPrivate { path: PathBuf, mode: u32 },
    #[error("token file {path} is larger than {MAX_TOKEN_FILE} bytes; a token is one line (openssl rand -hex 32)")]
    TooLarge { path: PathBuf },
    #[error("the token from {origin} is shorter than {MIN_TOKEN_LEN} characters; use 32 or more random characters (e.g. openssl rand -hex 32)")]
    TooShort { origin: String },
    #[error("the token from {origin} has characters other than visible ASCII; use e.g. openssl rand -hex 32")]
    NotPrintable { origin: String },
}

impl Token {
    /// Reads the token from a file (one line), refusing a file that is
    /// not regular, not the daemon user's own, readable or writable by
    /// others, or larger than [`MAX_TOKEN_FILE`].
    pub fn from_file(path: &Path) -> Result<Token, AuthError> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let read_err = |source| AuthError::ReadFile {
            path: path.to_owned(),
            source,
        };
        // O_NONBLOCK: opening a FIFO must not wait for a writer.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)
            .map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        if !meta.file_type().is_file() {
            return Err(AuthError::NotRegular {
                path: path.to_owned(),
            });
        }
        let uid = nix::unistd::geteuid().as_raw();
        if meta.uid() != uid {
            return Err(AuthError::NotOwned {
                path: path.to_owned(),
                owner: meta.uid(),
                uid,
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(AuthError::NotPrivate {
                path: path.to_owned(),
                mode: meta.mode() & 0o7777,
            });
        }
        let mut bytes = Vec::new();
        (&file)
            .take(MAX_TOKEN_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_TOKEN_FILE {
            return Err(AuthError::TooLarge {
                path: path.to_owned(),
            });
        }
        let text = String::from_utf8_lossy(&bytes);
        Token::from_text(&text, &path.display().to_string())
    }

    /// Takes the token from text; `origin` names where it came from.
    pub fn from_text(text: &str, origin: &str) -> Result<Token, AuthError> {
        let t = text.trim();
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AuthError::NotPrintable {
                origin: origin.to_owned(),
            });
        }
        if t.len() < MIN_TOKEN_LEN {
            return Err(AuthError::TooShort {
                origin: origin.to_owned(),
            });
        }
        Ok(Token {
            digest: Sha256::digest(t.as_bytes()).into(),
        })
    }

    /// True when `authorization` (the header's bytes) is `Bearer <token>`.
    pub fn verify(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let presented = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
            _ => return false,
        };
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest.ct_eq(&self.digest).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cret-token-0123456789";

    #[test]
    fn verifies_only_the_exact_bearer_token() {
        let t = Token::from_text(&format!("{SECRET}\n"), "test").unwrap();
        assert!(t.verify(Some(format!("Bearer {SECRET}").as_bytes())));
        assert!(t.verify(Some(format!("bearer {SECRET}").as_bytes())));
        assert!(!t.verify(None));
        assert!(!t.verify(Some(SECRET.as_bytes())));
        assert!(!t.verify(Some(format!("Basic {SECRET}").as_bytes())));
        assert!(!t.verify(Some(format!("Bearer {SECRET}x").as_bytes())));
        assert!(!t.verify(Some(b"Bearer ")));
        assert!(!t.verify(Some(b"Bear")));
    }

    #[test]
    fn weak_tokens_are_refused_and_never_printed() {
        assert!(matches!(
            Token::from_text("short", "x"),
            Err(AuthError::TooShort { .. })
        ));
        assert!(matches!(
            Token::from_text("has a space in the middle", "x"),
            Err(AuthError::NotPrintable { .. })
        ));
        let t = Token::from_text(SECRET, "x").unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    fn private_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_private_token_file_is_read() {
        let t = tempfile::tempdir().unwrap();
        let p = private_file(t.path(), "token", format!("{SECRET}\n").as_bytes(), 0o600);
        let token = Token::from_file(&p).unwrap();
        assert!(token.verify(Some(format!("Bearer {SECRET}").as_bytes())));
        let p = private_file(t.path(), "ro", SECRET.as_bytes(), 0o400);
        assert!(Token::from_file(&p).is_ok());
    }

    /// A token file readable by everyone was accepted with a warning only.
    #[test]
    fn a_token_file_others_may_read_or_write_is_refused() {
        let t = tempfile::tempdir().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            let p = private_file(t.path(), &format!("t{mode:o}"), SECRET.as_bytes(), mode);
            let e = Token::from_file(&p).unwrap_err();
            assert!(matches!(e, AuthError::NotPrivate { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
    }

    /// A FIFO as token file hung the start; /dev/zero was read until
    /// memory ran out.
    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = Token::from_file(&fifo).unwrap_err();
        assert!(matches!(e, AuthError::NotRegular { .. }), "{e}");
        for dev in ["/dev/zero", "/dev/null"] {
            let e = Token::from_file(Path::new(dev)).unwrap_err();
            assert!(matches!(e, AuthError::NotRegular { .. }), "{dev}: {e}");
        }
        let e = Token::from_file(t.path()).unwrap_err();
        assert!(matches!(e, AuthError::NotRegular { .. }), "{e}");
    }

    #[test]
    fn a_token_file_larger_than_a_line_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let big = vec![b'a'; MAX_TOKEN_FILE as usize + 1];
        let p = private_file(t.path(), "big", &big, 0o600);
        let e = Token::from_file(&p).unwrap_err();
        assert!(matches!(e, AuthError::TooLarge { .. }), "{e}");
        let fits = vec![b'a'; MAX_TOKEN_FILE as usize];
        let p = private_file(t.path(), "fits", &fits, 0o600);
        assert!(Token::from_file(&p).is_ok());
    }

    /// Root's runner must not take a token another user wrote.
    #[test]
    fn a_token_file_of_another_user_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to give a file to another user");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let p = private_file(t.path(), "theirs", SECRET.as_bytes(), 0o600);
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let e = Token::from_file(&p).unwrap_err();
        assert!(matches!(e, AuthError::NotOwned { owner: 65534, .. }), "{e}");
    }
}
