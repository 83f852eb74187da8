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
//!   workspace's descriptor with `O_NOFOLLOW`, so a symlink a command
//!   planted anywhere on the way is refused, never followed; the entry at
//!   the end is looked at without following it, and opened `O_NONBLOCK`
//!   (a FIFO swapped in cannot block the daemon); only a regular file
//!   with one link is read, so no bytes of a file outside the workspace
//!   are served through a hard link;
//! - an upload is written to a private temporary file beside its target,
//!   `fsync`ed and renamed into place; a refused or broken upload removes
//!   the temporary file and the folders it made, so nothing is left
//!   behind, and the target is the old file or the new one, never a torn
//!   one;
//! - a listing and a walk are bounded ([`MAX_LISTED`] files,
//!   [`MAX_VISITED`] entries, [`MAX_DEPTH`] folders deep) whatever a
//!   command left there.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};
use serde::{Deserialize, Serialize};

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
    #[error("{} in the workspace of session {session} is {what}, not a regular file; only regular files are read, written or deleted here", quoted(path))]
    NotRegular {
        session: String,
        path: String,
        what: &'static str,
    },
    #[error("{} in the workspace of session {session} passes through {what}; a path in the workspace goes through folders only", quoted(path))]
    NotThroughFolders {
        session: String,
        path: String,
        what: &'static str,
    },
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
            E::NotRegular { .. } | E::NotThroughFolders { .. } | E::HardLinked { .. } => {
                ErrorKind::Conflict
            }
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

/// One file of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub path: String,
    pub size: u64,
    pub modified_at: String,
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

fn flags_dir() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn kind_of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

fn what(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFDIR => "a folder",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        _ => "a special file",
    }
}

fn give(fd: &impl AsFd, owner: Option<(u32, u32)>) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    Ok(())
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
    let dir = File::from(openat(parent.as_fd(), name, flags_dir(), Mode::empty())?);
    if made {
        give(&dir, owner)?;
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

    fn io(&self, path: &str) -> impl FnOnce(io::Error) -> WorkspaceError + '_ {
        let path = path.to_owned();
        move |source| WorkspaceError::Io {
            session: self.session.clone(),
            path,
            source,
        }
    }

    /// The folder holding `path`'s last segment, opened through folders
    /// only; with `create`, missing folders are made (and given to the
    /// owner) and returned so a failed upload can remove them.
    fn parent_of(
        &self,
        path: &str,
        create: bool,
    ) -> Result<(File, OsString, Vec<(File, OsString)>), WorkspaceError> {
        check_path(path)?;
        let mut segments: Vec<&str> = path.split('/').collect();
        let last = OsString::from(segments.pop().unwrap_or_default());
        let mut dir = self.dir.try_clone().map_err(self.io(path))?;
        let mut made: Vec<(File, OsString)> = Vec::new();
        for segment in segments {
            if create {
                match mkdirat(dir.as_fd(), segment, Mode::from_bits_truncate(0o755)) {
                    Ok(()) => {
                        let child = openat(dir.as_fd(), segment, flags_dir(), Mode::empty())
                            .map_err(|e| self.io(path)(e.into()))?;
                        let child = File::from(child);
                        give(&child, self.owner).map_err(self.io(path))?;
                        made.push((dir.try_clone().map_err(self.io(path))?, segment.into()));
                        dir = child;
                        continue;
                    }
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(self.io(path)(e.into())),
                }
            }
            dir = match openat(dir.as_fd(), segment, flags_dir(), Mode::empty()) {
                Ok(fd) => File::from(fd),
                Err(Errno::ENOENT) => {
                    return Err(WorkspaceError::NoSuchFile {
                        session: self.session.clone(),
                        path: path.to_owned(),
                    })
                }
                Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                    let kind = fstatat(dir.as_fd(), segment, AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map(|st| what(kind_of(&st)))
                        .unwrap_or("something that is not a folder");
                    let kind = if kind == "a special file" {
                        "a file"
                    } else {
                        kind
                    };
                    return Err(WorkspaceError::NotThroughFolders {
                        session: self.session.clone(),
                        path: path.to_owned(),
                        what: kind,
                    });
                }
                Err(e) => return Err(self.io(path)(e.into())),
            };
        }
        Ok((dir, last, made))
    }

    /// Opens the regular file at `path` for reading; its size.
    pub fn open_file(&self, path: &str) -> Result<(File, u64), WorkspaceError> {
        let (dir, name, _) = self.parent_of(path, false)?;
        let not_found = || WorkspaceError::NoSuchFile {
            session: self.session.clone(),
            path: path.to_owned(),
        };
        let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Err(not_found()),
            Err(e) => return Err(self.io(path)(e.into())),
        };
        self.regular(path, &st)?;
        // O_NONBLOCK: a FIFO swapped in since the look cannot block.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = match openat(dir.as_fd(), name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(Errno::ENOENT) => return Err(not_found()),
            Err(Errno::ELOOP) => {
                return Err(WorkspaceError::NotRegular {
                    session: self.session.clone(),
                    path: path.to_owned(),
                    what: "a symlink",
                })
            }
            Err(e) => return Err(self.io(path)(e.into())),
        };
        // What was opened is what is checked.
        let st = fstat(file.as_fd()).map_err(|e| self.io(path)(e.into()))?;
        self.regular(path, &st)?;
        Ok((file, st.st_size as u64))
    }

    /// Refuses anything but a regular file with one link.
    fn regular(&self, path: &str, st: &FileStat) -> Result<(), WorkspaceError> {
        let kind = kind_of(st);
        if kind != SFlag::S_IFREG {
            return Err(WorkspaceError::NotRegular {
                session: self.session.clone(),
                path: path.to_owned(),
                what: what(kind),
            });
        }
        #[allow(clippy::unnecessary_cast)] // nlink_t differs between platforms
        let links = st.st_nlink as u64;
        if links > 1 {
            return Err(WorkspaceError::HardLinked {
                session: self.session.clone(),
                path: path.to_owned(),
                links,
            });
        }
        Ok(())
    }

    /// Deletes the file (or symlink: the link itself) at `path`; a folder
    /// is refused.
    pub fn delete(&self, path: &str) -> Result<(), WorkspaceError> {
        let (dir, name, _) = self.parent_of(path, false)?;
        let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => {
                return Err(WorkspaceError::NoSuchFile {
                    session: self.session.clone(),
                    path: path.to_owned(),
                })
            }
            Err(e) => return Err(self.io(path)(e.into())),
        };
        if kind_of(&st) == SFlag::S_IFDIR {
            return Err(WorkspaceError::NotRegular {
                session: self.session.clone(),
                path: path.to_owned(),
                what: "a folder",
            });
        }
        // Never follows: a symlink is removed as a link.
        unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir)
            .map_err(|e| self.io(path)(e.into()))
    }

    /// Starts an upload to `path`: its folders are made, and a private
    /// temporary file beside it is created.
    pub fn upload(&self, path: &str) -> Result<Upload, WorkspaceError> {
        let (dir, name, made) = self.parent_of(path, true)?;
        let mut upload = Upload {
            session: self.session.clone(),
            path: path.to_owned(),
            dir,
            name,
            tmp: OsString::new(),
            file: None,
            made,
            written: 0,
            owner: self.owner,
            done: false,
        };
        let tmp = OsString::from(format!(".upload-{}.tmp", crate::fsx::random_hex()));
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            upload.dir.as_fd(),
            tmp.as_os_str(),
            flags,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| upload.io(e.into()))?;
        upload.tmp = tmp;
        upload.file = Some(File::from(fd));
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
        // Walk from the folder the prefix names, if it names one.
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
        let root = if start.is_empty() {
            self.dir.try_clone().map_err(self.io(prefix))?
        } else {
            match self.parent_of(&format!("{start}/x"), false) {
                Ok((dir, _, _)) => dir,
                Err(WorkspaceError::NoSuchFile { .. }) => return Ok(listing),
                Err(e) => return Err(e),
            }
        };
        let mut visited = 0usize;
        self.walk(&root, &below, prefix, 0, &mut visited, &mut listing)?;
        listing.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }

    fn walk(
        &self,
        dir: &File,
        at: &str,
        prefix: &str,
        depth: usize,
        visited: &mut usize,
        out: &mut Listing,
    ) -> Result<(), WorkspaceError> {
        let mut names: Vec<OsString> = Vec::new();
        {
            let fd = dir.try_clone().map_err(self.io(at))?;
            let mut listing =
                nix::dir::Dir::from_fd(fd.into()).map_err(|e| self.io(at)(e.into()))?;
            for entry in listing.iter() {
                let entry = entry.map_err(|e| self.io(at)(e.into()))?;
                let n = entry.file_name().to_bytes();
                if n != b"." && n != b".." {
                    names.push(OsStr::from_bytes(n).to_owned());
                }
            }
        }
        names.sort();
        for name in names {
            *visited += 1;
            if *visited > MAX_VISITED || out.files.len() >= MAX_LISTED {
                out.truncated = true;
                return Ok(());
            }
            let Some(text) = name.to_str() else { continue };
            let path = format!("{at}{text}");
            let Ok(st) = fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            match kind_of(&st) {
                SFlag::S_IFREG if path.starts_with(prefix) => out.files.push(Listed {
                    size: st.st_size as u64,
                    modified_at: crate::text::rfc3339(
                        std::time::UNIX_EPOCH
                            + std::time::Duration::new(
                                st.st_mtime.max(0) as u64,
                                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                            ),
                    ),
                    path,
                }),
                SFlag::S_IFDIR => {
                    let below = format!("{path}/");
                    // Only folders that can hold a match.
                    if !(below.starts_with(prefix) || prefix.starts_with(&below)) {
                        continue;
                    }
                    if depth + 1 >= MAX_DEPTH {
                        out.truncated = true;
                        continue;
                    }
                    let Ok(fd) = openat(dir.as_fd(), name.as_os_str(), flags_dir(), Mode::empty())
                    else {
                        continue;
                    };
                    self.walk(&File::from(fd), &below, prefix, depth + 1, visited, out)?;
                    if out.truncated && out.files.len() >= MAX_LISTED {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// An upload in progress: dropped before [`Upload::commit`], it removes
/// its temporary file and the folders it made.
#[derive(Debug)]
pub struct Upload {
    session: String,
    path: String,
    dir: File,
    name: OsString,
    tmp: OsString,
    file: Option<File>,
    made: Vec<(File, OsString)>,
    written: u64,
    owner: Option<(u32, u32)>,
    done: bool,
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
        let file = self.file.as_mut().expect("an upload has its file");
        match file.write_all(bytes) {
            Ok(()) => {
                self.written += bytes.len() as u64;
                Ok(())
            }
            Err(e) => Err(self.io(e)),
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Makes the upload the file at its path: `fsync`, owner, then
    /// `rename` over whatever file was there; `check` is called first
    /// (the workspace's size bound) and may refuse it.
    pub fn commit(
        mut self,
        check: impl FnOnce() -> Result<(), WorkspaceError>,
    ) -> Result<u64, WorkspaceError> {
        let file = self.file.take().expect("an upload has its file");
        file.sync_all().map_err(|e| self.io(e))?;
        give(&file, self.owner).map_err(|e| self.io(e))?;
        drop(file);
        check()?;
        match renameat(
            self.dir.as_fd(),
            self.tmp.as_os_str(),
            self.dir.as_fd(),
            self.name.as_os_str(),
        ) {
            Ok(()) => {}
            Err(Errno::EISDIR) | Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => {
                return Err(WorkspaceError::NotRegular {
                    session: self.session.clone(),
                    path: self.path.clone(),
                    what: "a folder",
                })
            }
            Err(e) => return Err(self.io(e.into())),
        }
        self.done = true;
        // The rename is durable once its folder is.
        let _ = self.dir.sync_all();
        Ok(self.written)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.file = None;
        if !self.tmp.is_empty() {
            let _ = unlinkat(
                self.dir.as_fd(),
                self.tmp.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
        // The folders it made, deepest first (each empty now, or kept).
        for (parent, name) in self.made.iter().rev() {
            let _ = unlinkat(parent.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir);
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
