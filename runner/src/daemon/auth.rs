//! Bearer-token authentication of daemon requests.
//!
//! Invariants:
//! - the token text is kept only as its SHA-256 digest, never logged or
//!   printed (`Debug` shows nothing of it);
//! - a presented token is hashed and the two digests are compared in
//!   constant time, so neither the content nor the length of the real
//!   token leaks through timing;
//! - a token is at least [`MIN_TOKEN_LEN`] visible ASCII characters;
//!   surrounding whitespace (a trailing newline in a file) is ignored.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

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
    #[error("the token from {origin} is shorter than {MIN_TOKEN_LEN} characters; use 32 or more random characters (e.g. openssl rand -hex 32)")]
    TooShort { origin: String },
    #[error("the token from {origin} has characters other than visible ASCII; use e.g. openssl rand -hex 32")]
    NotPrintable { origin: String },
}

impl Token {
    /// Reads the token from a file (one line).
    pub fn from_file(path: &Path) -> Result<Token, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
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
}
