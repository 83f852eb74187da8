//! The base of an environment: the interpreter it was built for, named by
//! its path, the version it reports and the SHA-256 of its binary
//! (docs/formats.md, "Environments", the record's `base`).
//!
//! [`probe_python`] names an interpreter when an environment is made;
//! [`check_base`] re-hashes the binary at use, so an interpreter upgraded
//! on the host refuses the environment with a sentence instead of loading
//! libraries built for another one.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::Command;

use crate::package::environment::{Base, Family};

/// The interpreter environments are built for by default: Debian's, with
/// pip, inside the sandbox's read-only `/usr`.
pub const DEFAULT_PYTHON: &str = "/usr/bin/python3";

/// Why an interpreter could not be named, or no longer matches.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    #[error(
        "interpreter {path} must be an absolute path under /usr (the sandbox's read-only system)"
    )]
    InterpreterPath { path: String },
    #[error("cannot read interpreter {path}: {source}")]
    ReadInterpreter { path: PathBuf, source: io::Error },
    #[error("cannot run {path} to ask its version: {reason}")]
    ProbeInterpreter { path: String, reason: String },
    #[error("the environment was built for {path} with SHA-256 {want}, but that binary is now {got}; rebuild the environment for this host's interpreter")]
    BaseChanged {
        path: String,
        want: String,
        got: String,
    },
}

/// The binary a path resolves to, and its SHA-256.
fn binary_sha256(path: &str) -> Result<String, BaseError> {
    let read_err = |source| BaseError::ReadInterpreter {
        path: PathBuf::from(path),
        source,
    };
    let real = fs::canonicalize(path).map_err(read_err)?;
    let bytes = fs::read(&real).map_err(read_err)?;
    Ok(crate::package::hash::file_hash(&bytes))
}

fn check_interpreter_path(path: &str) -> Result<(), BaseError> {
    let ok = path.starts_with("/usr/")
        && !path
            .split('/')
            .skip(1)
            .any(|s| matches!(s, "" | "." | ".."));
    if ok {
        Ok(())
    } else {
        Err(BaseError::InterpreterPath {
            path: path.to_owned(),
        })
    }
}

/// Names the Python interpreter at `path`: its version (asked of it, in
/// isolated mode with an empty environment) and the SHA-256 of its binary.
pub fn probe_python(path: &str) -> Result<Base, BaseError> {
    check_interpreter_path(path)?;
    let sha256 = binary_sha256(path)?;
    let probe_err = |reason: String| BaseError::ProbeInterpreter {
        path: path.to_owned(),
        reason,
    };
    let out = Command::new(path)
        .args([
            "-I",
            "-c",
            "import sys; print('.'.join(map(str, sys.version_info[:3])))",
        ])
        .env_clear()
        .output()
        .map_err(|e| probe_err(e.to_string()))?;
    if !out.status.success() {
        return Err(probe_err(format!("it exited with {}", out.status)));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(probe_err(format!("it printed {version:?}")));
    }
    Ok(Base {
        family: Family::Python,
        path: path.to_owned(),
        version,
        sha256,
    })
}

/// Checks that the base's binary is still the one the environment was
/// built for.
pub fn check_base(base: &Base) -> Result<(), BaseError> {
    check_interpreter_path(&base.path)?;
    let got = binary_sha256(&base.path)?;
    if got != base.sha256 {
        return Err(BaseError::BaseChanged {
            path: base.path.clone(),
            want: base.sha256.clone(),
            got,
        });
    }
    Ok(())
}

/// [`check_base`], with the binary's SHA-256 remembered in `cache` (a
/// folder of the store) under a fingerprint of the file it resolves to:
/// its real path, device, inode, size, modification and change times.
/// A binary that was replaced, rewritten or touched has another
/// fingerprint and is hashed again; one that still has it is not read (as
/// the tree's stamp, this trusts that nobody set the clock back; a
/// failure to remember is only a cost).
pub fn check_base_cached(base: &Base, cache: &std::path::Path) -> Result<(), BaseError> {
    use std::os::unix::fs::MetadataExt;
    check_interpreter_path(&base.path)?;
    let read_err = |source| BaseError::ReadInterpreter {
        path: PathBuf::from(&base.path),
        source,
    };
    let real = fs::canonicalize(&base.path).map_err(read_err)?;
    let meta = fs::metadata(&real).map_err(read_err)?;
    let fingerprint = format!(
        "{}\n{}\n{}\n{}\n{}.{}\n{}.{}",
        real.display(),
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    let remembered = cache.join(crate::package::hash::file_hash(fingerprint.as_bytes()));
    if fs::read_to_string(&remembered).is_ok_and(|sha| sha == base.sha256) {
        return Ok(());
    }
    check_base(base)?;
    let _ = crate::fsx::write_replace(&remembered, base.sha256.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_must_lie_in_the_read_only_system() {
        for bad in [
            "python3",
            "/root/.pyenv/shims/python3",
            "/usr/../root/python",
            "/usr//bin/python3",
        ] {
            assert!(matches!(
                check_interpreter_path(bad),
                Err(BaseError::InterpreterPath { .. })
            ));
        }
        assert!(check_interpreter_path("/usr/bin/python3").is_ok());
    }

    #[test]
    fn the_base_names_the_binary_and_notices_a_change() {
        if !std::path::Path::new(DEFAULT_PYTHON).exists() {
            crate::text::skip_test(format!("no {DEFAULT_PYTHON}"));
            return;
        }
        let base = probe_python(DEFAULT_PYTHON).unwrap();
        assert!(base.version.starts_with("3."), "{base:?}");
        check_base(&base).unwrap();
        let other = Base {
            sha256: "0".repeat(64),
            ..base
        };
        assert!(matches!(
            check_base(&other),
            Err(BaseError::BaseChanged { .. })
        ));
    }

    #[test]
    fn a_base_is_remembered_by_its_binary_fingerprint_and_a_wrong_one_still_refused() {
        if !std::path::Path::new(DEFAULT_PYTHON).exists() {
            crate::text::skip_test(format!("no {DEFAULT_PYTHON}"));
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let cache = t.path().join("bases");
        let base = probe_python(DEFAULT_PYTHON).unwrap();
        check_base_cached(&base, &cache).unwrap();
        let files: Vec<_> = fs::read_dir(&cache).unwrap().collect();
        assert_eq!(files.len(), 1);
        let remembered = files[0].as_ref().unwrap().path();
        assert_eq!(fs::read_to_string(&remembered).unwrap(), base.sha256);
        check_base_cached(&base, &cache).unwrap();
        // A record naming other bytes is not served by the cache.
        let stale = Base {
            sha256: "0".repeat(64),
            ..base.clone()
        };
        assert!(matches!(
            check_base_cached(&stale, &cache),
            Err(BaseError::BaseChanged { .. })
        ));
    }
}
