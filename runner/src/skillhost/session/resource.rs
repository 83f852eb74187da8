//! Bounded UTF-8 reads of one file of a frozen package
//! (`read_skill_resource`, `load_skill_section`).
//!
//! A read never executes anything and never leaves the package: the file
//! must be listed in the stored package's index, it is opened below the
//! sealed tree without following symlinks, and its bytes must hash to the
//! file hash the index recorded when the package was published, so what is
//! served is exactly what was frozen. A file with a NUL byte or that is not
//! UTF-8 is refused as binary. `offset` and `limit` are in bytes; the
//! returned text ends on a character boundary at or before
//! `offset + limit`, and `next_offset` says where to continue.

use std::io::Read;

use serde::{Deserialize, Serialize};

use super::SessionError;
use crate::fsx;
use crate::package::store::{IndexEntry, StoredPackage};

/// Bytes returned when the caller gives no limit.
pub const DEFAULT_READ_LIMIT: u64 = 64 * 1024;
/// The largest limit accepted.
pub const MAX_READ_LIMIT: u64 = 1024 * 1024;

/// Where a read starts and how much it may return, as a query string gives
/// them (`?offset=&limit=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRange {
    pub offset: Option<u64>,
    pub limit: Option<u64>,
}

/// A piece of a package file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chunk {
    pub skill: String,
    /// The file's path inside the package.
    pub file: String,
    /// `/skills/<skill>/<file>`.
    pub path: String,
    /// The whole file's size in bytes.
    pub size: u64,
    pub offset: u64,
    pub limit: u64,
    /// Bytes of `content`.
    pub returned: u64,
    /// True when the file continues past the returned text.
    pub truncated: bool,
    /// Where the next read starts, when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    pub content: String,
}

/// The whole of `entry` of `pkg`, read below the sealed tree without
/// following symlinks, refused unless it hashes to the index's file hash.
pub fn frozen_bytes(pkg: &StoredPackage, entry: &IndexEntry) -> Result<Vec<u8>, SessionError> {
    let io = |source| SessionError::Io {
        path: pkg.tree.join(&entry.path),
        source,
    };
    let root = fsx::open_dir_nofollow(&pkg.tree).map_err(io)?;
    let mut file = fsx::open_beneath(&root, &entry.path).map_err(io)?;
    let mut bytes = Vec::with_capacity(entry.size as usize);
    (&mut file)
        .take(entry.size + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 != entry.size || crate::package::hash::file_hash(&bytes) != entry.hash {
        return Err(SessionError::Tampered {
            path: pkg.tree.join(&entry.path),
        });
    }
    Ok(bytes)
}

/// Reads `entry` of `pkg` within `range`.
pub fn read(
    skill: &str,
    pkg: &StoredPackage,
    entry: &IndexEntry,
    range: ReadRange,
) -> Result<Chunk, SessionError> {
    let display = format!("/skills/{skill}/{}", entry.path);
    let offset = range.offset.unwrap_or(0);
    let limit = range.limit.unwrap_or(DEFAULT_READ_LIMIT);
    if limit == 0 || limit > MAX_READ_LIMIT {
        return Err(SessionError::BadLimit {
            limit,
            max: MAX_READ_LIMIT,
        });
    }
    if offset > entry.size {
        return Err(SessionError::OffsetPastEnd {
            path: display,
            offset,
            size: entry.size,
        });
    }
    let bytes = frozen_bytes(pkg, entry)?;
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(SessionError::Binary {
            path: display,
            reason: format!("a NUL byte at offset {at}"),
        });
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| SessionError::Binary {
        path: display.clone(),
        reason: format!("not UTF-8 from offset {}", e.valid_up_to()),
    })?;
    let start = offset as usize;
    if !text.is_char_boundary(start) {
        let boundary = (0..start).rev().find(|&i| text.is_char_boundary(i));
        return Err(SessionError::OffsetSplitsChar {
            path: display,
            offset,
            boundary: boundary.unwrap_or(0) as u64,
        });
    }
    let mut end = (offset.saturating_add(limit)).min(entry.size) as usize;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == start && start < text.len() {
        return Err(SessionError::LimitSplitsChar {
            path: display,
            offset,
            limit,
        });
    }
    let truncated = end < text.len();
    Ok(Chunk {
        skill: skill.to_owned(),
        file: entry.path.clone(),
        path: display,
        size: entry.size,
        offset,
        limit,
        returned: (end - start) as u64,
        truncated,
        next_offset: truncated.then_some(end as u64),
        content: text[start..end].to_owned(),
    })
}
