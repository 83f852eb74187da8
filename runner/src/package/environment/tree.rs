//! The environment tree and its hash (docs/formats.md, "Environments").
//!
//! An environment tree holds regular files and symlinks; folders are
//! implied by the paths below them. This module decides what is
//! admissible (paths, symlink targets) and computes the **environment
//! hash**: one SHA-256 over, for each entry in the byte order of its
//! UTF-8 path,
//!
//! - a regular file: `f:` (or `x:` when executable), then
//!   `<utf8 length of path>:<path>:<size>:` and the bytes;
//! - a symlink: `l:<utf8 length of path>:<path>:<utf8 length of target>:`
//!   and the target.
//!
//! [`TreeHasher`] is streaming, like the package hasher: callers feed each
//! file's header and then its bytes as they copy them. It checks that
//! entries arrive in order and that each file delivers exactly the size
//! its header announced.
//!
//! Pure code: no I/O.

use sha2::{Digest, Sha256};

use crate::package::format;

/// Absolute folders a symlink may point into: the read-only system every
/// sandbox profile binds (the default profile's `/usr`, `/bin`, `/sbin`,
/// `/lib`, `/lib64`). `/etc` is not among them: the sandbox's `/etc` is a
/// prepared copy whose contents depend on the profile.
pub const SYSTEM_PREFIXES: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64"];

/// How deep an environment tree may nest.
pub const MAX_DEPTH: usize = 64;

/// What one entry of a tree is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of `size` bytes; `exec` when any execute bit is set.
    File { size: u64, exec: bool },
    /// A symlink and its target, as written (checked by [`check_target`]).
    Symlink { target: String },
}

/// One entry of a tree: a tree-relative `/`-separated path and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub kind: EntryKind,
}

/// Why a path, a target or a stream of entries is not admissible.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    #[error(transparent)]
    Path(#[from] format::PackageError),
    #[error("symlink {path:?} points to {target:?}, {reason}; an environment's symlinks may point only inside the tree (a relative target) or into /usr, /bin, /sbin, /lib or /lib64")]
    Target {
        path: String,
        target: String,
        reason: &'static str,
    },
    #[error("entry {path:?} is out of order after {previous:?} (entries are hashed in the byte order of their paths)")]
    OutOfOrder { previous: String, path: String },
    #[error("{path:?} is a file and also a folder of {child:?}")]
    FileAsFolder { path: String, child: String },
    #[error("file {path:?} announced {expected} bytes but {actual} were fed")]
    SizeMismatch {
        path: String,
        expected: u64,
        actual: u64,
    },
    #[error("bytes were fed while no file was open")]
    NoFile,
    #[error("{path:?} nests deeper than {limit} levels")]
    TooDeep { path: String, limit: usize },
}

/// Checks a tree-relative path: the package path rules, and a depth bound.
pub fn check_path(path: &str) -> Result<(), TreeError> {
    format::check_path(path)?;
    if path.split('/').count() > MAX_DEPTH {
        return Err(TreeError::TooDeep {
            path: path.to_owned(),
            limit: MAX_DEPTH,
        });
    }
    Ok(())
}

/// Checks the target of the symlink at `path`.
///
/// A relative target is zero or more leading `..` segments, then plain
/// names; it may climb at most as many levels as `path`'s folder is deep,
/// so it resolves inside the tree. A `..` after a name is refused, because
/// the name may itself be a symlink and the kernel would then climb from
/// where it points, not where the text suggests. An absolute target is
/// one of [`SYSTEM_PREFIXES`] or below one, in plain names.
pub fn check_target(path: &str, target: &str) -> Result<(), TreeError> {
    let bad = |reason| {
        Err(TreeError::Target {
            path: path.to_owned(),
            target: target.to_owned(),
            reason,
        })
    };
    if target.is_empty() {
        return bad("an empty target");
    }
    if target.contains('\0') {
        return bad("a target with a NUL byte");
    }
    if let Some(rest) = target.strip_prefix('/') {
        if rest.split('/').any(|s| matches!(s, "" | "." | "..")) {
            return bad("an absolute target with an empty, '.' or '..' segment");
        }
        let inside_system = SYSTEM_PREFIXES
            .iter()
            .any(|p| target == *p || target.strip_prefix(p).is_some_and(|r| r.starts_with('/')));
        if !inside_system {
            return bad("an absolute path outside the read-only system");
        }
        return Ok(());
    }
    let depth = path.split('/').count() - 1;
    let mut climbs = 0;
    let mut named = false;
    for segment in target.split('/') {
        match segment {
            "" => return bad("a target with an empty segment"),
            "." => return bad("a target with a '.' segment"),
            ".." if named => return bad("a target with '..' after a name"),
            ".." => climbs += 1,
            _ => named = true,
        }
    }
    if climbs > depth {
        return bad("a target that leaves the tree");
    }
    Ok(())
}

/// Checks one entry: its path, and a symlink's target.
pub fn check_entry(entry: &Entry) -> Result<(), TreeError> {
    check_path(&entry.path)?;
    if let EntryKind::Symlink { target } = &entry.kind {
        check_target(&entry.path, target)?;
    }
    Ok(())
}

/// Sorts entries into hash order: the bytes of their paths.
pub fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
}

/// Streaming environment hash. Feed [`TreeHasher::begin_file`] then
/// [`TreeHasher::update`] with exactly the announced bytes, or
/// [`TreeHasher::symlink`], for every entry in hash order; then
/// [`TreeHasher::finish`].
#[derive(Debug, Clone, Default)]
pub struct TreeHasher {
    sha: Sha256,
    current: Option<(String, u64, u64)>,
    previous: Option<String>,
}

impl TreeHasher {
    pub fn new() -> Self {
        Self::default()
    }

    fn begin(&mut self, path: &str) -> Result<(), TreeError> {
        self.end_file()?;
        if let Some(prev) = &self.previous {
            if prev.as_bytes() >= path.as_bytes() {
                return Err(TreeError::OutOfOrder {
                    previous: prev.clone(),
                    path: path.to_owned(),
                });
            }
        }
        self.previous = Some(path.to_owned());
        Ok(())
    }

    /// Starts a regular file.
    pub fn begin_file(&mut self, path: &str, size: u64, exec: bool) -> Result<(), TreeError> {
        self.begin(path)?;
        let kind = if exec { 'x' } else { 'f' };
        self.sha
            .update(format!("{kind}:{}:{path}:{size}:", path.len()).as_bytes());
        self.current = Some((path.to_owned(), size, 0));
        Ok(())
    }

    /// Feeds bytes of the current file.
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), TreeError> {
        let Some((path, expected, fed)) = self.current.as_mut() else {
            return Err(TreeError::NoFile);
        };
        *fed += bytes.len() as u64;
        if *fed > *expected {
            return Err(TreeError::SizeMismatch {
                path: path.clone(),
                expected: *expected,
                actual: *fed,
            });
        }
        self.sha.update(bytes);
        Ok(())
    }

    /// Hashes a symlink.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), TreeError> {
        self.begin(path)?;
        self.sha
            .update(format!("l:{}:{path}:{}:{target}", path.len(), target.len()).as_bytes());
        Ok(())
    }

    fn end_file(&mut self) -> Result<(), TreeError> {
        if let Some((path, expected, fed)) = self.current.take() {
            if fed != expected {
                return Err(TreeError::SizeMismatch {
                    path,
                    expected,
                    actual: fed,
                });
            }
        }
        Ok(())
    }

    /// Returns the lowercase hex environment hash.
    pub fn finish(mut self) -> Result<String, TreeError> {
        self.end_file()?;
        Ok(crate::text::to_hex(&self.sha.finalize()))
    }
}

/// An in-memory entry for [`tree_hash`]: a file's bytes or a link's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content<'a> {
    File { bytes: &'a [u8], exec: bool },
    Symlink { target: &'a str },
}

/// Environment hash of in-memory entries, each checked; sorts them first.
pub fn tree_hash<'a>(
    entries: impl IntoIterator<Item = (&'a str, Content<'a>)>,
) -> Result<String, TreeError> {
    let mut entries: Vec<_> = entries.into_iter().collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    // A folder on disk cannot also be a file; in memory it must be refused.
    let paths: std::collections::HashSet<&str> = entries.iter().map(|e| e.0).collect();
    for (path, _) in &entries {
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let folder = &path[..at + i];
            if paths.contains(folder) {
                return Err(TreeError::FileAsFolder {
                    path: folder.to_owned(),
                    child: (*path).to_owned(),
                });
            }
            at += i + 1;
        }
    }
    let mut hasher = TreeHasher::new();
    for (path, content) in entries {
        check_path(path)?;
        match content {
            Content::File { bytes, exec } => {
                hasher.begin_file(path, bytes.len() as u64, exec)?;
                hasher.update(bytes)?;
            }
            Content::Symlink { target } => {
                check_target(path, target)?;
                hasher.symlink(path, target)?;
            }
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_inside_the_tree_or_the_system_are_admissible() {
        for (path, target) in [
            ("bin/python", "../python/bin/python3"),
            ("a/b/c", "../../d"),
            ("a/link", ".."),
            ("link", "file"),
            ("link", "sub/dir/file"),
            ("bin/python3", "/usr/bin/python3"),
            ("lib", "/usr"),
            ("x", "/lib64/ld-linux-x86-64.so.2"),
            ("x", "/bin/sh"),
        ] {
            assert_eq!(check_target(path, target), Ok(()), "{path} -> {target}");
        }
    }

    #[test]
    fn targets_that_could_leave_the_tree_are_refused() {
        for (path, target, reason) in [
            ("link", "..", "a target that leaves the tree"),
            ("a/link", "../../x", "a target that leaves the tree"),
            ("a/link", "b/../../x", "a target with '..' after a name"),
            ("a/link", "b/..", "a target with '..' after a name"),
            ("link", "./x", "a target with a '.' segment"),
            ("link", "a//b", "a target with an empty segment"),
            ("link", "a/", "a target with an empty segment"),
            ("link", "", "an empty target"),
            (
                "link",
                "/etc/passwd",
                "an absolute path outside the read-only system",
            ),
            (
                "link",
                "/opt/skill-env/x",
                "an absolute path outside the read-only system",
            ),
            (
                "link",
                "/usrx/bin",
                "an absolute path outside the read-only system",
            ),
            (
                "link",
                "/",
                "an absolute target with an empty, '.' or '..' segment",
            ),
            (
                "link",
                "/usr/../etc",
                "an absolute target with an empty, '.' or '..' segment",
            ),
            (
                "link",
                "/usr/",
                "an absolute target with an empty, '.' or '..' segment",
            ),
        ] {
            match check_target(path, target) {
                Err(TreeError::Target { reason: r, .. }) => {
                    assert_eq!(r, reason, "{path} -> {target}")
                }
                other => panic!("{path} -> {target}: {other:?}"),
            }
        }
    }

    #[test]
    fn hasher_refuses_disorder_sizes_and_a_file_used_as_a_folder() {
        let mut h = TreeHasher::new();
        h.begin_file("b", 0, false).unwrap();
        assert!(matches!(
            h.begin_file("a", 0, false),
            Err(TreeError::OutOfOrder { .. })
        ));
        // `a-b` sorts between `a` and `a/b`: the check is not about neighbours.
        let file = |bytes| Content::File { bytes, exec: false };
        assert!(matches!(
            tree_hash([("a", file(b"")), ("a-b", file(b"")), ("a/b", file(b""))]),
            Err(TreeError::FileAsFolder { .. })
        ));
        let mut h = TreeHasher::new();
        h.begin_file("a", 2, true).unwrap();
        h.update(b"x").unwrap();
        assert!(matches!(h.finish(), Err(TreeError::SizeMismatch { .. })));
        assert_eq!(TreeHasher::new().update(b"x"), Err(TreeError::NoFile));
    }

    #[test]
    fn executable_bit_and_kind_change_the_hash() {
        let plain = tree_hash([(
            "a",
            Content::File {
                bytes: b"x",
                exec: false,
            },
        )])
        .unwrap();
        let exec = tree_hash([(
            "a",
            Content::File {
                bytes: b"x",
                exec: true,
            },
        )])
        .unwrap();
        let link = tree_hash([("a", Content::Symlink { target: "x" })]).unwrap();
        assert_ne!(plain, exec);
        assert_ne!(plain, link);
        assert_ne!(exec, link);
    }

    #[test]
    fn paths_follow_the_package_rules_and_a_depth_bound() {
        assert!(check_path("a/../b").is_err());
        assert!(check_path("/a").is_err());
        assert!(check_path(&vec!["d"; MAX_DEPTH].join("/")).is_ok());
        assert!(matches!(
            check_path(&vec!["d"; MAX_DEPTH + 1].join("/")),
            Err(TreeError::TooDeep { .. })
        ));
    }
}
