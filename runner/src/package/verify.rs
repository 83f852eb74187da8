//! Verification: proving that a tree of files on disk is exactly the
//! pinned package, by walking it (the exact file set, regular files only)
//! and re-hashing every byte. Staging ([`crate::package::stage`]) and the
//! store ([`crate::package::store`]) both verify through here, so neither
//! needs the other to prove its bytes.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::ErrorKind;
use crate::package::format::{PackageError, PackageLimits};
use crate::package::hash::{Binding, HashError, PackageHasher};
use crate::package::source::{self, ListError, ListedFile};

/// Why staging refused a selection. Every variant names the skill.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("skill {id:?} is selected twice")]
    DuplicateId { id: String },
    #[error("skill {id:?}: {source}")]
    Binding { id: String, source: PackageError },
    #[error("skill {id:?}: {source}")]
    List { id: String, source: ListError },
    #[error("skill {id:?}: file {path:?} changed while it was staged")]
    Changed { id: String, path: String },
    #[error("skill {id:?}: cannot stage {path:?}: {source}")]
    Io {
        id: String,
        path: String,
        source: io::Error,
    },
    #[error("skill {id:?}: the staged bytes hash to {actual}, not the pinned {expected}{}", file_note(.file))]
    HashMismatch {
        id: String,
        expected: String,
        actual: String,
        file: Option<String>,
    },
    #[error("skill {id:?}: the staged tree differs from its source: {reason}")]
    FileSet { id: String, reason: String },
    #[error("skill {id:?}: {source}")]
    Hash { id: String, source: HashError },
    #[error("skill {id:?}: the store's copy of package {hash} no longer matches its hash ({reason}); re-publish the package to repair it (skill-runner store add, or POST /v1/skill-packages)")]
    StoreCorrupted {
        id: String,
        hash: String,
        reason: String,
    },
    #[error("cannot create the snapshot root {path}: {source}")]
    Root { path: PathBuf, source: io::Error },
}

fn file_note(file: &Option<String>) -> String {
    match file {
        Some(f) => format!(" (first differing file: {f:?})"),
        None => String::new(),
    }
}

impl StageError {
    /// Short machine name for results and HTTP errors.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StageError::HashMismatch { .. } | StageError::Changed { .. } => ErrorKind::HashMismatch,
            StageError::Io { .. } | StageError::Root { .. } => ErrorKind::StagingFailed,
            StageError::StoreCorrupted { .. } => ErrorKind::StoreCorrupted,
            _ => ErrorKind::BadPackage,
        }
    }
}

/// What staging one skill produced.
#[derive(Debug, Clone, Copy)]
pub struct Staged {
    pub bytes: u64,
}

pub(super) enum HashBehindError {
    Io(String, io::Error),
    Hash(HashError),
}

impl HashBehindError {
    pub(super) fn for_skill(self, id: &str) -> StageError {
        match self {
            HashBehindError::Io(path, source) => StageError::Io {
                id: id.to_owned(),
                path,
                source,
            },
            HashBehindError::Hash(source) => StageError::Hash {
                id: id.to_owned(),
                source,
            },
        }
    }
}

/// A read buffer fitted to the largest file: 1 MiB for large packages, but
/// no bigger than needed, so small packages never pay for zeroing (and, in
/// a multi-threaded daemon, unmapping) a large allocation.
pub(super) fn read_buffer(listing: &[ListedFile]) -> Vec<u8> {
    let largest = listing.iter().map(|f| f.size).max().unwrap_or(0);
    vec![0u8; largest.clamp(4096, 1 << 20) as usize]
}

/// Walks a staged tree, checks it is a well-formed package, re-hashes every
/// byte and compares with the pin. When per-file hashes of the expected
/// package are known, a mismatch names the first differing file.
pub fn verify_tree(
    dir: &Path,
    binding: &Binding,
    limits: &PackageLimits,
    expected_files: Option<&[(String, String)]>,
) -> Result<Staged, StageError> {
    let id = &binding.id;
    let listing = source::list_dir(dir, limits).map_err(|source| StageError::List {
        id: id.clone(),
        source,
    })?;
    if let Some(expected) = expected_files {
        let same_set = listing.len() == expected.len()
            && listing.iter().zip(expected).all(|(a, b)| a.path == b.0);
        if !same_set {
            let extra = listing
                .iter()
                .find(|f| !expected.iter().any(|e| e.0 == f.path));
            return Err(StageError::FileSet {
                id: id.clone(),
                reason: match extra {
                    Some(f) => format!("unexpected file {:?}", f.path),
                    None => "a file is missing".into(),
                },
            });
        }
    }
    let (actual, bytes) = hash_listing(dir, &listing).map_err(|e| e.for_skill(id))?;
    if actual != binding.hash {
        let file = expected_files.and_then(|expected| {
            expected.iter().find_map(|(path, hash)| {
                let bytes = fs::read(dir.join(path)).ok()?;
                (crate::package::hash::file_hash(&bytes) != *hash).then(|| path.clone())
            })
        });
        return Err(StageError::HashMismatch {
            id: id.clone(),
            expected: binding.hash.clone(),
            actual,
            file,
        });
    }
    Ok(Staged { bytes })
}

/// Package hash of listed files under `dir`, reading each once.
fn hash_listing(dir: &Path, listing: &[ListedFile]) -> Result<(String, u64), HashBehindError> {
    let mut hasher = PackageHasher::new();
    let mut buf = read_buffer(listing);
    let mut total = 0;
    for f in listing {
        let io = |e| HashBehindError::Io(f.path.clone(), e);
        let mut file = File::open(dir.join(&f.path)).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        hasher
            .begin_file(&f.path, size)
            .map_err(HashBehindError::Hash)?;
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]).map_err(HashBehindError::Hash)?;
        }
        total += size;
    }
    Ok((hasher.finish().map_err(HashBehindError::Hash)?, total))
}

/// Package hash of a folder on the host (for `skill-runner hash`).
pub fn hash_dir(dir: &Path, limits: &PackageLimits) -> Result<String, ListError> {
    let listing = source::list_dir(dir, limits)?;
    hash_listing(dir, &listing)
        .map(|(h, _)| h)
        .map_err(|e| match e {
            HashBehindError::Io(path, source) => ListError::Read {
                path: dir.join(path),
                source,
            },
            HashBehindError::Hash(e) => ListError::Read {
                path: dir.to_owned(),
                source: io::Error::other(e),
            },
        })
}
