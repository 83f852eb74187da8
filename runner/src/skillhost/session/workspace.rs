//! Managed workspaces: the folder a session created with `"workspace":
//! "managed"` keeps for its jobs, `<data-dir>/workspaces/<session id>`
//! (docs/workspaces.md), and the single-file operations the daemon's
//! file routes make on it.
//!
//! Invariants:
//! - the folder is made by the runner with `mkdirat` and given to the
//!   sandbox user through its descriptor (`fchown`), never through a path;
//!   so is every folder and file an upload makes in it;
//! - a workspace path is an admissible relative path ([`check_path`]):
//!   not empty, not absolute, no `.`, `..` or empty segment, no NUL,
//!   backslash or control character, at most [`MAX_PATH`] bytes;
//! - every operation walks the path one component at a time from the
//!   workspace's descriptor with `O_NOFOLLOW` ([`crate::fsx::beneath`]),
//!   so a symlink a command planted anywhere on the way is refused, never
//!   followed; the entry at the end is looked at without following it and
//!   a special file is never opened (a FIFO cannot block the daemon); only
//!   a regular file with one link is read, so no bytes of a file outside
//!   the workspace are served through a hard link;
//! - an upload is written to a private temporary file beside its target,
//!   `fsync`ed and renamed into place; a refused or broken upload removes
//!   the temporary file and the folders it made, so nothing is left
//!   behind, and the target is the old file or the new one, never a torn
//!   one;
//! - a listing and a walk are bounded ([`MAX_LISTED`] files,
//!   [`MAX_VISITED`] entries, [`MAX_DEPTH`] folders deep) whatever a
//!   command left there.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::openat;
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{fchown, Gid, Uid};
use serde::{Deserialize, Serialize};

use crate::fsx::beneath::{self, AtomicFile, BeneathError, Bounds, Create, Kind};

use crate::error::ErrorKind;
use crate::text::single_line;

/// The longest workspace path accepted, in bytes.
pub const MAX_PATH: usize = 1024;
/// The most files one listing returns.
pub const MAX_LISTED: usize = 10_000;
/// The most entries one listing looks at (files, folders, anything).
pub const MAX_VISITED: usize = 100_000;
/// The deepest folder a listing walks into.
pub const MAX_DEPTH: usize = 64;

/// What kind of workspace a session keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceKind {
    /// A folder the daemon made under its data dir, deleted with the
    /// session; every job naming the session runs in it.
    Managed,
}

/// Why a workspace operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{} is not an admissible workspace path: {reason}; name a file relative to the workspace, like data/in.csv", quoted(path))]
    BadPath { path: String, reason: &'static str },
    #[error("session {0} has no managed workspace; create the session with \"workspace\": \"managed\" to keep files between its jobs")]
    NotManaged(String),
    #[error(
        "{} does not exist in the workspace of session {session}",
        quoted(path)
    )]
    NoSuchFile { session: String, path: String },
    #[error("{} in the workspace of session {session} is a {kind}, not a regular file; only regular files are read, written or deleted here", quoted(path))]
    NotRegular {
        session: String,
        path: String,
        kind: &'static str,
    },
    #[error("{} in the workspace of session {session} passes through a {kind} ({}); a path in the workspace goes through folders only, never a link", quoted(path), quoted(at))]
    NotThroughFolders {
        session: String,
        path: String,
        at: String,
        kind: &'static str,
    },
    #[error("{} in the workspace of session {session} was replaced while it was being opened; send the request again", quoted(path))]
    Replaced { session: String, path: String },
    #[error("{} in the workspace of session {session} has {links} hard links; a file linked elsewhere is not served, since its bytes may be another file's: copy it inside the sandbox (cp) and fetch the copy", quoted(path))]
    HardLinked {
        session: String,
        path: String,
        links: u64,
    },
    #[error("the workspace of session {session} would hold {would} bytes, over this daemon's workspace_bytes of {limit}; delete files first (DELETE /v1/sessions/{session}/files/PATH), or raise --workspace-bytes")]
    Full {
        session: String,
        would: u64,
        limit: u64,
    },
    #[error("{} in the workspace of session {session} cannot be reached: a job changed its permissions ({source}); have a job of the session restore them (chmod u+rwx)", quoted(path))]
    NoAccess {
        session: String,
        path: String,
        source: io::Error,
    },
    #[error(
        "the workspace of session {session} is missing; delete the session and create it again"
    )]
    Missing { session: String },
    #[error("workspace file {} of session {session}: {source}", quoted(path))]
    Io {
        session: String,
        path: String,
        source: io::Error,
    },
}

fn quoted(path: &str) -> String {
    format!("{:?}", single_line(path))
}

impl WorkspaceError {
    /// The error kind of the error document.
    pub fn kind(&self) -> ErrorKind {
        use WorkspaceError as E;
        match self {
            E::BadPath { .. } => ErrorKind::BadRequest,
            E::NotManaged(_) | E::NoSuchFile { .. } => ErrorKind::NotFound,
            E::NotRegular { .. }
            | E::NotThroughFolders { .. }
            | E::HardLinked { .. }
            | E::Replaced { .. }
            | E::NoAccess { .. } => ErrorKind::Conflict,
            E::Full { .. } => ErrorKind::BodyTooLarge,
            E::Missing { .. } | E::Io { .. } => ErrorKind::Internal,
        }
    }
}

/// Checks a workspace path (module docs).
pub fn check_path(path: &str) -> Result<(), WorkspaceError> {
    let bad = |reason| {
        Err(WorkspaceError::BadPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("it is empty");
    }
    if path.len() > MAX_PATH {
        return bad("it is longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return bad("it is absolute");
    }
    if path.contains('\0') {
        return bad("it contains a NUL byte");
    }
    if path.contains('\\') {
        return bad("it contains a backslash");
    }
    if path.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    for segment in path.split('/') {
        match segment {
            "" => return bad("it has an empty segment"),
            "." => return bad("it has a '.' segment"),
            ".." => return bad("it has a '..' segment"),
            s if s.len() > 255 => return bad("a segment is longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

/// A permission refused: what a command's `chmod` does to the daemon's
/// user when it is not root.
fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// One file of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub path: String,
    pub size: u64,
}

/// The answer of `GET /v1/sessions/{id}/files?prefix=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    pub session: String,
    pub prefix: String,
    /// Regular files whose path starts with `prefix`, by path.
    pub files: Vec<Listed>,
    /// More entries than one listing may hold or look at were there.
    pub truncated: bool,
}

/// An opened managed workspace.
#[derive(Debug)]
pub struct Workspace {
    session: String,
    dir: File,
    /// Who its files belong to: the sandbox user of a root runner.
    owner: Option<(u32, u32)>,
}

/// Makes the workspace folder `path` (its parent is the data dir's
/// `workspaces/`), owned by `owner`, 0700. An existing one is kept.
pub fn make(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no parent"));
    };
    let parent = crate::fsx::open_dir_nofollow(parent)?;
    let made = match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => true,
        Err(Errno::EEXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_DIRECTORY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_CLOEXEC;
    let dir = File::from(openat(parent.as_fd(), name, flags, Mode::empty())?);
    if let (true, Some((uid, gid))) = (made, owner) {
        fchown(&dir, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    Ok(())
}

impl Workspace {
    /// Opens the workspace folder `path` of `session` without following
    /// a link; `owner` is who the files it makes belong to.
    pub fn open(
        session: &str,
        path: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<Workspace, WorkspaceError> {
        let dir = crate::fsx::open_dir_nofollow(path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                WorkspaceError::Missing {
                    session: session.to_owned(),
                }
            }
            _ if denied(&e) => WorkspaceError::NoAccess {
                session: session.to_owned(),
                path: ".".to_owned(),
                source: e,
            },
            _ => WorkspaceError::Io {
                session: session.to_owned(),
                path: String::new(),
                source: e,
            },
        })?;
        Ok(Workspace {
            session: session.to_owned(),
            dir,
            owner,
        })
    }

    /// The sentence of a refusal below the workspace, for `path`.
    fn refused(&self, path: &str, e: BeneathError) -> WorkspaceError {
        let session = self.session.clone();
        let path = path.to_owned();
        match e {
            BeneathError::Path { .. } => WorkspaceError::BadPath {
                path,
                reason: "it is not a relative path of folders and a name",
            },
            BeneathError::Symlink { path: at } if at == path => WorkspaceError::NotRegular {
                session,
                path,
                kind: "symlink",
            },
            BeneathError::Symlink { path: at } => WorkspaceError::NotThroughFolders {
                session,
                path,
                at,
                kind: "symlink",
            },
            BeneathError::NotRegular { kind, .. } => WorkspaceError::NotRegular {
                session,
                path,
                kind,
            },
            BeneathError::NotFolder { path: at, kind } => WorkspaceError::NotThroughFolders {
                session,
                path,
                at,
                kind,
            },
            BeneathError::Replaced { .. } => WorkspaceError::Replaced { session, path },
            BeneathError::Missing { .. } => WorkspaceError::NoSuchFile { session, path },
            BeneathError::Denied { .. } => WorkspaceError::NoAccess {
                session,
                path,
                source: std::io::Error::from_raw_os_error(libc::EACCES),
            },
            // A mode a command set (chmod 000): its doing, not the host's.
            BeneathError::Io { source, .. } if denied(&source) => WorkspaceError::NoAccess {
                session,
                path,
                source,
            },
            BeneathError::Io { source, .. } => WorkspaceError::Io {
                session,
                path,
                source,
            },
        }
    }

    /// Opens the regular file at `path` for reading; its size.
    pub fn open_file(&self, path: &str) -> Result<(File, u64), WorkspaceError> {
        check_path(path)?;
        let r = beneath::open_regular(&self.dir, path).map_err(|e| self.refused(path, e))?;
        if r.nlink > 1 {
            return Err(WorkspaceError::HardLinked {
                session: self.session.clone(),
                path: path.to_owned(),
                links: r.nlink,
            });
        }
        Ok((r.file, r.size))
    }

    /// Deletes the file (or symlink: the link itself) at `path`; a folder
    /// is refused.
    pub fn delete(&self, path: &str) -> Result<(), WorkspaceError> {
        check_path(path)?;
        beneath::remove_file(&self.dir, path).map_err(|e| self.refused(path, e))
    }

    /// Starts an upload to `path`: its folders are made (given to the
    /// owner), and a private temporary file beside it is created.
    pub fn upload(&self, path: &str) -> Result<Upload, WorkspaceError> {
        check_path(path)?;
        let made = beneath::missing_folders(&self.dir, path).map_err(|e| self.refused(path, e))?;
        let root = self.dir.try_clone().map_err(|e| {
            self.refused(
                path,
                BeneathError::Io {
                    op: "open",
                    path: String::new(),
                    source: e,
                },
            )
        })?;
        let create = Create {
            mode: 0o644,
            dir_mode: 0o755,
            owner: self.owner,
            // An answered upload survives a power cut.
            durable: true,
        };
        let mut upload = Upload {
            session: self.session.clone(),
            path: path.to_owned(),
            root,
            made,
            file: None,
            written: 0,
        };
        // Dropped on a refusal: the folders made on the way go too.
        upload.file =
            Some(AtomicFile::create(&self.dir, path, &create).map_err(|e| self.refused(path, e))?);
        Ok(upload)
    }

    /// Bytes the workspace occupies (as `disk_bytes` counts them).
    pub fn usage(&self, root: &Path) -> Result<u64, WorkspaceError> {
        crate::supervise::diskwatch::usage(&[root.to_owned()]).map_err(|e| WorkspaceError::Io {
            session: self.session.clone(),
            path: String::new(),
            source: io::Error::other(e.to_string()),
        })
    }

    /// The regular files whose path starts with `prefix` (a plain string
    /// prefix; empty for all), bounded (module docs).
    pub fn list(&self, prefix: &str) -> Result<Listing, WorkspaceError> {
        if prefix.contains('\0') || prefix.len() > MAX_PATH || prefix.starts_with('/') {
            return Err(WorkspaceError::BadPath {
                path: prefix.to_owned(),
                reason: "a prefix is a relative path of at most 1024 bytes, without NUL",
            });
        }
        // Walked from the folder the prefix names, if it names one.
        let (start, below) = match prefix.rsplit_once('/') {
            Some((folder, _)) => (folder, format!("{folder}/")),
            None => ("", String::new()),
        };
        let mut listing = Listing {
            session: self.session.clone(),
            prefix: prefix.to_owned(),
            files: Vec::new(),
            truncated: false,
        };
        if !start.is_empty() {
            check_path(start)?;
        }
        let bounds = Bounds {
            entries: MAX_VISITED,
            depth: MAX_DEPTH,
        };
        let found = match beneath::list(&self.dir, start, bounds) {
            Ok(found) => found,
            Err(BeneathError::Missing { .. }) => return Ok(listing),
            Err(e) => return Err(self.refused(start, e)),
        };
        listing.truncated = found.truncated;
        for entry in found.entries {
            if entry.kind != Kind::File {
                continue;
            }
            let path = format!("{below}{}", entry.path);
            if !path.starts_with(prefix) {
                continue;
            }
            if listing.files.len() == MAX_LISTED {
                listing.truncated = true;
                break;
            }
            listing.files.push(Listed {
                path,
                size: entry.size,
            });
        }
        listing.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }
}

/// An upload in progress: dropped before [`Upload::commit`], it removes
/// its temporary file and the folders it made.
#[derive(Debug)]
pub struct Upload {
    session: String,
    path: String,
    root: File,
    /// The folders it made, outermost first.
    made: Vec<String>,
    file: Option<AtomicFile>,
    written: u64,
}

impl Upload {
    fn io(&self, source: io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            session: self.session.clone(),
            path: self.path.clone(),
            source,
        }
    }

    /// Appends `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), WorkspaceError> {
        use std::io::Write;
        let file = self.file.as_mut().expect("an upload has its file");
        match file.file().write_all(bytes) {
            Ok(()) => {
                self.written += bytes.len() as u64;
                Ok(())
            }
            Err(e) => Err(self.io(e)),
        }
    }

    /// Bytes written so far with [`Upload::write`].
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Another handle of the file being written, for writing it
    /// asynchronously; [`Upload::commit`] then makes what it wrote the file.
    pub fn handle(&mut self) -> io::Result<File> {
        self.file
            .as_mut()
            .expect("an upload has its file")
            .file()
            .try_clone()
    }

    /// Makes the upload the file at its path: synced, then renamed over
    /// whatever file was there; `check` is called first (the workspace's
    /// size bound, which sees the bytes written) and may refuse it.
    pub fn commit(
        mut self,
        check: impl FnOnce() -> Result<(), WorkspaceError>,
    ) -> Result<u64, WorkspaceError> {
        let mut file = self.file.take().expect("an upload has its file");
        // Synced first, so the size bound counts its blocks.
        file.file().sync_all().map_err(|e| self.io(e))?;
        check()?;
        let size = file.file().metadata().map_err(|e| self.io(e))?.len();
        match file.commit() {
            Ok(()) => {}
            Err(BeneathError::NotRegular { kind, .. }) => {
                return Err(WorkspaceError::NotRegular {
                    session: self.session.clone(),
                    path: self.path.clone(),
                    kind,
                })
            }
            Err(BeneathError::Io { source, .. }) => return Err(self.io(source)),
            Err(e) => return Err(self.io(io::Error::other(e.to_string()))),
        }
        self.made.clear();
        Ok(size)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // The temporary file first (AtomicFile's own drop), then the
        // folders it made, deepest first (each empty now, else kept).
        self.file = None;
        for folder in self.made.iter().rev() {
            let _ = beneath::remove_empty_dir(&self.root, folder);
        }
    }
}

/// The workspace folder of session `id` below `workspaces`.
pub fn path_of(workspaces: &Path, id: &str) -> PathBuf {
    workspaces.join(id)
}

#[cfg(test)]
#[path = "workspace_tests.rs"]
mod tests;
