//! `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`: the one form a registry
//! reference takes on the command line and in a job (docs/distribution.md,
//! "References"). Pure.

use std::fmt;

/// A parsed registry reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host` or `host:port`, as written (lowercase).
    pub registry: String,
    /// The repository path, e.g. `skills/pdf`.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:` and 64 lowercase hex digits.
    pub digest: Option<String>,
}

/// Why a reference was refused: one sentence naming the form expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference:?} is not a registry reference: {reason}; write oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: &'static str,
}

const SCHEME: &str = "oci://";

impl Reference {
    /// Parses `text`, refusing anything but the documented form.
    pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
        let bad = |reason| ReferenceError {
            reference: text.to_owned(),
            reason,
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it does not start with oci://"))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("the digest is not sha256:"))?;
                if !is_hex64(hex) {
                    return Err(bad("the digest is not sha256: and 64 lowercase hex digits"));
                }
                (r, Some(d.to_owned()))
            }
            None => (rest, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("it names no repository after the host"))?;
        check_registry(registry).map_err(bad)?;
        // A tag follows the last ':' of the last path component.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t)),
            _ => (path, None),
        };
        check_repository(repository).map_err(bad)?;
        if let Some(t) = tag {
            check_tag(t).map_err(bad)?;
        }
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The same repository at `digest` (the tag kept for display).
    pub fn at_digest(&self, digest: &str) -> Reference {
        Reference {
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }

    /// `oci://host/repo@sha256:…`, the form pulls take.
    pub fn digest_form(&self) -> Option<String> {
        self.digest
            .as_ref()
            .map(|d| format!("{SCHEME}{}/{}@{d}", self.registry, self.repository))
    }

    /// The host without its port.
    pub fn host(&self) -> &str {
        self.registry
            .rsplit_once(':')
            .map_or(&self.registry[..], |(h, _)| h)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

pub(crate) fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_registry(registry: &str) -> Result<(), &'static str> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (registry, None),
    };
    if host.is_empty() || host.len() > 253 {
        return Err("the host is empty or too long");
    }
    if !host.split('.').all(|l| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }) {
        return Err("the host is not lowercase letters, digits, '-' and '.'");
    }
    if let Some(p) = port {
        match p.parse::<u16>() {
            Ok(n) if n > 0 && !p.starts_with('0') => {}
            _ => return Err("the port is not a number from 1 to 65535"),
        }
    }
    Ok(())
}

fn check_repository(repo: &str) -> Result<(), &'static str> {
    if repo.is_empty() || repo.len() > 255 {
        return Err("the repository is empty or longer than 255 characters");
    }
    for part in repo.split('/') {
        let ok = !part.is_empty()
            && part.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && part.as_bytes()[0].is_ascii_alphanumeric()
            && part.as_bytes()[part.len() - 1].is_ascii_alphanumeric();
        if !ok {
            return Err("a repository component is not lowercase letters and digits joined by '.', '_' or '-'");
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), &'static str> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && (tag.as_bytes()[0].is_ascii_alphanumeric() || tag.as_bytes()[0] == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err("the tag is not 1 to 128 letters, digits, '.', '_' or '-'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_documented_forms_parse() {
        let r = Reference::parse(&format!("oci://127.0.0.1:5000/skills/pdf:v1@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "skills/pdf");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.host(), "127.0.0.1");
        assert_eq!(
            r.to_string(),
            format!("oci://127.0.0.1:5000/skills/pdf:v1@{D}")
        );
        let r = Reference::parse("oci://registry.example/a").unwrap();
        assert_eq!((r.tag, r.digest), (None, None));
        let r = Reference::parse(&format!("oci://localhost/a/b@{D}")).unwrap();
        assert_eq!(r.digest_form().unwrap(), format!("oci://localhost/a/b@{D}"));
    }

    #[test]
    fn anything_else_is_refused_with_the_form() {
        for bad in [
            "docker://h/r",
            "h/r",
            "oci://h",
            "oci:///r",
            "oci://H/r",
            "oci://h:0/r",
            "oci://h:99999/r",
            "oci://h/R",
            "oci://h/r/",
            "oci://h/-r",
            "oci://h/r:",
            "oci://h/r:-x",
            "oci://h/r@sha256:abc",
            "oci://h/r@sha512:0123",
            &format!("oci://h/r@{}", D.to_uppercase()),
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(
                e.to_string().contains("oci://HOST[:PORT]/REPO"),
                "{bad}: {e}"
            );
        }
    }
}
