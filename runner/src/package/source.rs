//! Listing a package folder on the host.
//!
//! [`list_dir`] walks a folder without following symlinks and returns its
//! files in package-hash order. Anything that is not a regular file or a
//! folder (symlink, FIFO, socket, device) is an error naming its path, never
//! silently skipped; so are names that are not UTF-8 or not admissible, and
//! any limit passed. Empty folders carry no meaning (folders are not hashed)
//! and are not listed.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::package::format::{check_path, LimitTally, PackageError, PackageLimits, SKILL_MD};
use crate::package::hash::sort_utf16;

/// One regular file of a package folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Package-relative `/`-separated path.
    pub path: String,
    /// Size when listed; the copy re-checks it.
    pub size: u64,
}

/// Why a folder could not be listed as a package.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is a {kind}; packages may hold only regular files and folders")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path} has a name that is not UTF-8")]
    NotUtf8 { path: PathBuf },
    #[error("the folder nests deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error(transparent)]
    Package(#[from] PackageError),
}

/// How deep a package folder may nest.
pub const MAX_DEPTH: usize = 32;

/// Lists the package at `root`: regular files only, sorted for hashing.
pub fn list_dir(root: &Path, limits: &PackageLimits) -> Result<Vec<ListedFile>, ListError> {
    list_dir_with_folders(root, limits).map(|(files, _)| files)
}

/// Like [`list_dir`], and also returns every folder below `root` (relative
/// paths, empty ones included, in walk order). The catalog stamps them to
/// notice a file added anywhere in the package.
pub fn list_dir_with_folders(
    root: &Path,
    limits: &PackageLimits,
) -> Result<(Vec<ListedFile>, Vec<String>), ListError> {
    let meta = fs::symlink_metadata(root).map_err(|source| ListError::Read {
        path: root.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(ListError::NotRegular {
            path: root.to_owned(),
            kind: kind_name(&meta.file_type()),
        });
    }
    let mut out = Vec::new();
    let mut folders = Vec::new();
    let mut tally = LimitTally::new(*limits);
    walk(root, "", 0, &mut tally, &mut out, &mut folders)?;
    sort_utf16(&mut out, |f| &f.path);
    if !out.iter().any(|f| f.path == SKILL_MD) {
        return Err(PackageError::MissingSkillMd.into());
    }
    Ok((out, folders))
}

fn walk(
    dir: &Path,
    prefix: &str,
    depth: usize,
    tally: &mut LimitTally,
    out: &mut Vec<ListedFile>,
    folders: &mut Vec<String>,
) -> Result<(), ListError> {
    if depth > MAX_DEPTH {
        return Err(ListError::TooDeep { limit: MAX_DEPTH });
    }
    let read_err = |source| ListError::Read {
        path: dir.to_owned(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| ListError::NotUtf8 { path: path.clone() })?;
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        check_path(&rel)?;
        // DirEntry::file_type does not follow symlinks.
        let ty = entry.file_type().map_err(|source| ListError::Read {
            path: path.clone(),
            source,
        })?;
        if ty.is_dir() {
            folders.push(rel.clone());
            walk(&path, &rel, depth + 1, tally, out, folders)?;
        } else if ty.is_file() {
            let size = entry
                .metadata()
                .map_err(|source| ListError::Read {
                    path: path.clone(),
                    source,
                })?
                .len();
            tally.add(&rel, size)?;
            out.push(ListedFile { path: rel, size });
        } else {
            return Err(ListError::NotRegular {
                path,
                kind: kind_name(&ty),
            });
        }
    }
    Ok(())
}

/// A person's word for a file type.
pub fn kind_name(ty: &fs::FileType) -> &'static str {
    if ty.is_symlink() {
        "symlink"
    } else if ty.is_fifo() {
        "FIFO"
    } else if ty.is_socket() {
        "socket"
    } else if ty.is_block_device() || ty.is_char_device() {
        "device"
    } else if ty.is_dir() {
        "folder"
    } else {
        "regular file"
    }
}

/// Reads a whole folder into memory (for `pack` and bundles): files in hash
/// order with their bytes. Each file is opened without following symlinks
/// and must still have its listed size.
pub fn read_dir_files(
    root: &Path,
    limits: &PackageLimits,
) -> Result<Vec<(String, Vec<u8>)>, ListError> {
    use std::io::Read;
    let listing = list_dir(root, limits)?;
    let root_fd = crate::fsx::open_dir_nofollow(root).map_err(|source| ListError::Read {
        path: root.to_owned(),
        source,
    })?;
    let mut out = Vec::with_capacity(listing.len());
    for f in listing {
        let path = root.join(&f.path);
        let read_err = |source| ListError::Read {
            path: path.clone(),
            source,
        };
        let mut file = crate::fsx::open_beneath(&root_fd, &f.path).map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        if !meta.is_file() {
            return Err(ListError::NotRegular {
                path,
                kind: kind_name(&meta.file_type()),
            });
        }
        let mut bytes = Vec::with_capacity(f.size as usize);
        (&mut file)
            .take(f.size + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 != f.size {
            return Err(read_err(io::Error::other(
                "the file changed size while it was read",
            )));
        }
        out.push((f.path, bytes));
    }
    Ok(out)
}
