//! Files below a directory handle, reached without following links.
//!
//! Everything here takes an open folder (`root`) and a relative path
//! written `a/b/c`, and works one component at a time from `root` with
//! `openat(…, O_NOFOLLOW)`: a component that is a symlink is refused
//! wherever it is, so nothing a sandboxed command plants in its workspace
//! (a symlink, a folder swapped for one) can make the runner read or write
//! outside `root`. These are the primitives for moving a job's files in
//! and out of a workspace the command controls.
//!
//! Invariants:
//! - a path is refused before any system call when it is empty, absolute,
//!   has an empty, `.` or `..` component, or holds a NUL ([`check`]);
//! - no symlink is followed: not in a folder on the way (`O_NOFOLLOW |
//!   O_DIRECTORY`), not at the end (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`);
//! - a file opened for reading is a regular file: its kind is read with
//!   `fstatat` before it is opened, so a FIFO or device is never opened at
//!   all, and the open handle is compared with what was looked at (device
//!   and inode), so one swapped in between is refused; the open itself is
//!   `O_NONBLOCK`, so even a FIFO raced in cannot hang it;
//! - a write is atomic: the bytes go to a fresh private name in the same
//!   folder (`O_CREAT | O_EXCL`), are synced, and `renameat` puts them in
//!   place, which replaces a symlink there as a name, never through it; a
//!   write that fails leaves no temporary file behind;
//! - a listing never follows a link and stops at a bound on entries and on
//!   depth, saying that it stopped.
//!
//! `openat2(RESOLVE_BENEATH)` would do the walk in one call on Linux 5.6+,
//! but a seccomp filter of a container host may refuse it; the walk works
//! everywhere (macOS too) and costs one `openat` per component.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, fsync, unlinkat, Gid, Uid, UnlinkatFlags};

/// Why a file below a folder could not be reached, written or read.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error("path {path:?} is not admissible: {why}")]
    Path { path: String, why: &'static str },
    #[error("{path:?} goes through a symlink or is one; links are never followed")]
    Symlink { path: String },
    #[error("{path:?} is a {kind}, not a regular file")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path:?} is a {kind}, not a folder")]
    NotFolder { path: String, kind: &'static str },
    #[error("{path:?} was replaced while it was being opened")]
    Replaced { path: String },
    #[error("{path:?} does not exist")]
    Missing { path: String },
    #[error("the sandbox user may not {want} {path:?} (its owner and mode deny it), so the runner does not either")]
    Denied { path: String, want: &'static str },
    #[error("cannot {op} {path:?}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: io::Error,
    },
}

impl BeneathError {
    /// A failed write of the bytes of `path`.
    pub fn from_write(path: &str, e: io::Error) -> BeneathError {
        BeneathError::io("write", path, e)
    }

    fn io(op: &'static str, path: &str, e: impl Into<io::Error>) -> BeneathError {
        BeneathError::Io {
            op,
            path: path.to_owned(),
            source: e.into(),
        }
    }

    /// The error of an `openat` with `O_NOFOLLOW` of `path` (the prefix
    /// walked so far), with `ELOOP` (and `ENOTDIR` for a symlink on the
    /// way, which `O_DIRECTORY` reports so) said as what they mean.
    fn open(e: Errno, path: &str) -> BeneathError {
        match e {
            Errno::ELOOP => BeneathError::Symlink {
                path: path.to_owned(),
            },
            Errno::ENOENT => BeneathError::Missing {
                path: path.to_owned(),
            },
            e => BeneathError::io("open", path, e),
        }
    }
}

/// The owner and modes given to what a write creates.
#[derive(Debug, Clone, Copy)]
pub struct Create {
    /// Mode of the file written (the umask does not apply: it is set with
    /// `fchmod`).
    pub mode: u32,
    /// Mode of each folder created on the way.
    pub dir_mode: u32,
    /// Owner of each file and folder created (`None`: the caller's).
    pub owner: Option<(u32, u32)>,
    /// Sync the bytes and the folder, so a write survives a crash once
    /// committed. Atomicity (old file or new, never torn) holds either
    /// way; scratch space that dies with a crash (an execution's fresh
    /// workspace) can skip the cost (a sync per file).
    pub durable: bool,
}

impl Default for Create {
    fn default() -> Create {
        Create {
            mode: 0o644,
            dir_mode: 0o755,
            owner: None,
            durable: true,
        }
    }
}

/// The components of an admissible relative path, or why it is not one.
pub fn check(rel: &str) -> Result<Vec<&str>, BeneathError> {
    let refuse = |why| BeneathError::Path {
        path: rel.to_owned(),
        why,
    };
    if rel.is_empty() {
        return Err(refuse("it is empty"));
    }
    if rel.contains('\0') {
        return Err(refuse("it holds a NUL byte"));
    }
    if rel.starts_with('/') {
        return Err(refuse("it is absolute; give a path relative to the folder"));
    }
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts {
        match *part {
            "" => return Err(refuse("it has an empty component (// or a trailing /)")),
            "." => return Err(refuse("it has a '.' component")),
            ".." => {
                return Err(refuse(
                    "it has a '..' component; paths stay below the folder",
                ))
            }
            _ => {}
        }
    }
    Ok(parts)
}

/// What kind of file a stat describes, in words.
pub fn kind_of(st: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFDIR => "folder",
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        _ => "file of unknown kind",
    }
}

fn is_kind(st: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == kind
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens the folder `parts` below `root`, creating missing ones when
/// `create` says how. `shown` is the path for messages.
fn walk(
    root: &File,
    parts: &[&str],
    create: Option<&Create>,
    shown: &str,
) -> Result<File, BeneathError> {
    let mut dir = root
        .try_clone()
        .map_err(|e| BeneathError::io("open", shown, e))?;
    let mut walked = String::new();
    for part in parts {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        let fd = match openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create.is_some() => {
                let c = create.expect("checked");
                match mkdirat(dir.as_fd(), *part, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(BeneathError::io("create folder", &walked, e)),
                }
                let fd = openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty())
                    .map_err(|e| not_a_folder(&dir, part, e, &walked))?;
                set_owner_mode(&fd, c.owner, c.dir_mode, &walked)?;
                fd
            }
            Err(e) => return Err(not_a_folder(&dir, part, e, &walked)),
        };
        dir = File::from(fd);
    }
    Ok(dir)
}

/// Says why `name` in `dir` could not be opened as a folder.
fn not_a_folder(dir: &File, name: &str, e: Errno, walked: &str) -> BeneathError {
    if matches!(e, Errno::ENOTDIR | Errno::ELOOP) {
        if let Ok(st) = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            if is_kind(&st, SFlag::S_IFLNK) {
                return BeneathError::Symlink {
                    path: walked.to_owned(),
                };
            }
            return BeneathError::NotFolder {
                path: walked.to_owned(),
                kind: kind_of(&st),
            };
        }
    }
    BeneathError::open(e, walked)
}

fn set_owner_mode(
    fd: &impl AsFd,
    owner: Option<(u32, u32)>,
    mode: u32,
    shown: &str,
) -> Result<(), BeneathError> {
    if let Some((uid, gid)) = owner {
        fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(|e| BeneathError::io("set the owner of", shown, e))?;
    }
    nix::sys::stat::fchmod(fd, Mode::from_bits_truncate(mode as _))
        .map_err(|e| BeneathError::io("set the mode of", shown, e))
}

/// Opens the folder `rel` below `root` (`""` is `root` itself).
pub fn open_dir(root: &File, rel: &str) -> Result<File, BeneathError> {
    if rel.is_empty() {
        return root
            .try_clone()
            .map_err(|e| BeneathError::io("open", ".", e));
    }
    walk(root, &check(rel)?, None, rel)
}

/// Opens the folder `rel` below `root`, creating it and the folders on the
/// way as `create` says.
pub fn create_dir_all(root: &File, rel: &str, create: &Create) -> Result<File, BeneathError> {
    walk(root, &check(rel)?, Some(create), rel)
}

/// A regular file opened below a folder, and what `fstat` said of it.
#[derive(Debug)]
pub struct Regular {
    pub file: File,
    pub size: u64,
    /// Hard links to its inode (1 for a file nobody linked elsewhere).
    pub nlink: u64,
    pub mode: u32,
}

/// Opens the regular file `rel` below `root` for reading. A symlink
/// anywhere, a FIFO, socket or device is refused, without ever opening
/// the special file.
pub fn open_regular(root: &File, rel: &str) -> Result<Regular, BeneathError> {
    let parts = check(rel)?;
    let (name, folders) = parts.split_last().expect("check gives one part at least");
    let dir = walk(root, folders, None, rel)?;
    open_regular_in(&dir, name, rel)
}

/// Opens `name` in the open folder `dir` as [`open_regular`] does; `shown`
/// is its path for messages.
pub fn open_regular_in(dir: &File, name: &str, shown: &str) -> Result<Regular, BeneathError> {
    let seen = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| BeneathError::open(e, shown))?;
    if is_kind(&seen, SFlag::S_IFLNK) {
        return Err(BeneathError::Symlink {
            path: shown.to_owned(),
        });
    }
    if !is_kind(&seen, SFlag::S_IFREG) {
        return Err(BeneathError::NotRegular {
            path: shown.to_owned(),
            kind: kind_of(&seen),
        });
    }
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd: OwnedFd = openat(dir.as_fd(), name, flags, Mode::empty())
        .map_err(|e| BeneathError::open(e, shown))?;
    let st = fstat(&fd).map_err(|e| BeneathError::io("stat", shown, e))?;
    if st.st_dev != seen.st_dev || st.st_ino != seen.st_ino || !is_kind(&st, SFlag::S_IFREG) {
        return Err(BeneathError::Replaced {
            path: shown.to_owned(),
        });
    }
    Ok(Regular {
        file: File::from(fd),
        size: st.st_size as u64,
        nlink: st.st_nlink as u64,
        mode: (st.st_mode as u32) & 0o7777,
    })
}

/// Whether `user` (uid, gid) may do `want` (a mask: 4 read, 2 write,
/// 1 search) to an inode of this owner and mode, by its permission bits
/// (the class that applies is the only one looked at, as the kernel does).
#[allow(clippy::unnecessary_cast)] // `st_mode` is not u32 everywhere (macOS)
pub fn user_may(st: &nix::sys::stat::FileStat, user: (u32, u32), want: u32) -> bool {
    let mode = (st.st_mode as u32) & 0o7777;
    let bits = if st.st_uid == user.0 {
        mode >> 6
    } else if st.st_gid == user.1 {
        mode >> 3
    } else {
        mode
    } & 0o7;
    bits & want == want
}

/// Checks that `user` could itself reach `rel` below `root` (every folder
/// on the way searchable, `root` too) and, for `write`, make or replace
/// it (the deepest existing folder writable; a file of another user in a
/// sticky folder refused), or otherwise read it. A root runner reads and
/// writes a named workspace for the command; with this it never does
/// what the command's own user could not. Links are never followed.
#[allow(clippy::unnecessary_cast)] // `st_mode` is not u32 everywhere (macOS)
pub fn check_user_may(
    root: &File,
    rel: &str,
    user: (u32, u32),
    write: bool,
) -> Result<(), BeneathError> {
    let parts = check(rel)?;
    let denied = |path: &str, want: &'static str| BeneathError::Denied {
        path: path.to_owned(),
        want,
    };
    let mut dir = root
        .try_clone()
        .map_err(|e| BeneathError::io("open", rel, e))?;
    let mut dir_st = fstat(dir.as_fd()).map_err(|e| BeneathError::io("stat", ".", e))?;
    let mut walked = String::from(".");
    for (i, part) in parts.iter().enumerate() {
        if !user_may(&dir_st, user, 0o1) {
            return Err(denied(&walked, "search"));
        }
        let last = i + 1 == parts.len();
        let st = match fstatat(dir.as_fd(), *part, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) if write => {
                return match user_may(&dir_st, user, 0o3) {
                    true => Ok(()),
                    false => Err(denied(&walked, "write in")),
                };
            }
            Err(Errno::ENOENT) => return Err(BeneathError::Missing { path: rel.into() }),
            Err(e) => return Err(BeneathError::io("stat", rel, e)),
        };
        walked = if walked == "." {
            (*part).to_owned()
        } else {
            format!("{walked}/{part}")
        };
        if last {
            if write {
                let sticky = (dir_st.st_mode as u32) & 0o1000 != 0;
                if !user_may(&dir_st, user, 0o3) || (sticky && st.st_uid != user.0) {
                    return Err(denied(&walked, "replace"));
                }
            } else if !user_may(&st, user, 0o4) {
                return Err(denied(&walked, "read"));
            }
            return Ok(());
        }
        if !is_kind(&st, SFlag::S_IFDIR) {
            return Err(BeneathError::NotFolder {
                path: walked,
                kind: kind_of(&st),
            });
        }
        let fd = openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty())
            .map_err(|e| not_a_folder(&dir, part, e, &walked))?;
        dir = File::from(fd);
        dir_st = fstat(dir.as_fd()).map_err(|e| BeneathError::io("stat", &walked, e))?;
    }
    Ok(())
}

/// A file being written below a folder under a private name; it takes its
/// real name only at [`AtomicFile::commit`], and is removed when dropped
/// uncommitted.
#[derive(Debug)]
pub struct AtomicFile {
    dir: File,
    tmp: OsString,
    name: String,
    shown: String,
    file: Option<File>,
    durable: bool,
}

impl AtomicFile {
    /// Starts writing `rel` below `root`: folders on the way are created as
    /// `create` says, and the file is made (mode and owner set) under a
    /// fresh private name beside its final place.
    pub fn create(root: &File, rel: &str, create: &Create) -> Result<AtomicFile, BeneathError> {
        let parts = check(rel)?;
        let (name, folders) = parts.split_last().expect("check gives one part at least");
        let dir = walk(root, folders, Some(create), rel)?;
        // A fixed-length name: a long final name must not make it too long.
        let tmp = OsString::from(format!(".sr-{}.part", super::random_hex()));
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            dir.as_fd(),
            tmp.as_os_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| BeneathError::io("create", rel, e))?;
        let atomic = AtomicFile {
            dir,
            tmp,
            name: (*name).to_owned(),
            shown: rel.to_owned(),
            file: Some(File::from(fd)),
            durable: create.durable,
        };
        let file = atomic.file.as_ref().expect("just set");
        set_owner_mode(file, create.owner, create.mode, rel)?;
        Ok(atomic)
    }

    /// The file to write the bytes to.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("open until committed")
    }

    /// Syncs the bytes and renames the file into place, replacing what was
    /// there (a symlink as a name; a folder there is refused by the kernel).
    pub fn commit(mut self) -> Result<(), BeneathError> {
        let file = self.file.take().expect("open until committed");
        if self.durable {
            fsync(&file).map_err(|e| BeneathError::io("sync", &self.shown, e))?;
        }
        drop(file);
        renameat(
            self.dir.as_fd(),
            self.tmp.as_os_str(),
            self.dir.as_fd(),
            self.name.as_str(),
        )
        .map_err(|e| match e {
            Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => BeneathError::NotRegular {
                path: self.shown.clone(),
                kind: "folder",
            },
            e => BeneathError::io("rename into place", &self.shown, e),
        })?;
        self.tmp.clear();
        // The rename is durable once the folder is; a failed sync of the
        // folder does not undo it.
        if self.durable {
            let _ = fsync(&self.dir);
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = unlinkat(
                self.dir.as_fd(),
                self.tmp.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

/// Writes `bytes` to `rel` below `root` atomically (see [`AtomicFile`]).
pub fn write_atomic(
    root: &File,
    rel: &str,
    bytes: &[u8],
    create: &Create,
) -> Result<(), BeneathError> {
    let mut f = AtomicFile::create(root, rel, create)?;
    f.file()
        .write_all(bytes)
        .map_err(|e| BeneathError::io("write", rel, e))?;
    f.commit()
}

/// Writes at most `max` bytes read from `from` to `rel` below `root`
/// atomically. More than `max` is `Ok(None)` and writes nothing; else the
/// number of bytes written.
pub fn write_atomic_from(
    root: &File,
    rel: &str,
    from: &mut impl Read,
    max: u64,
    create: &Create,
) -> Result<Option<u64>, BeneathError> {
    let mut f = AtomicFile::create(root, rel, create)?;
    let copied = io::copy(&mut from.take(max + 1), f.file())
        .map_err(|e| BeneathError::io("write", rel, e))?;
    if copied > max {
        return Ok(None);
    }
    f.commit()?;
    Ok(Some(copied))
}

/// Checks, without writing, that `rel` below `root` could be written: each
/// folder on the way is a folder (not a symlink, not a file) or missing,
/// and the name itself is not a folder.
pub fn check_writable(root: &File, rel: &str) -> Result<(), BeneathError> {
    let parts = check(rel)?;
    let mut dir = root
        .try_clone()
        .map_err(|e| BeneathError::io("open", rel, e))?;
    let mut walked = String::new();
    for (i, part) in parts.iter().enumerate() {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        let st = match fstatat(dir.as_fd(), *part, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(BeneathError::io("stat", &walked, e)),
        };
        let last = i + 1 == parts.len();
        if last {
            if is_kind(&st, SFlag::S_IFDIR) {
                return Err(BeneathError::NotRegular {
                    path: walked,
                    kind: "folder",
                });
            }
            return Ok(());
        }
        if is_kind(&st, SFlag::S_IFLNK) {
            return Err(BeneathError::Symlink { path: walked });
        }
        if !is_kind(&st, SFlag::S_IFDIR) {
            return Err(BeneathError::NotFolder {
                path: walked,
                kind: kind_of(&st),
            });
        }
        let fd = openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty())
            .map_err(|e| not_a_folder(&dir, part, e, &walked))?;
        dir = File::from(fd);
    }
    Ok(())
}

/// The folders on the way to `rel` below `root` that do not exist yet,
/// outermost first: what writing `rel` would make.
pub fn missing_folders(root: &File, rel: &str) -> Result<Vec<String>, BeneathError> {
    let parts = check(rel)?;
    let folders = &parts[..parts.len() - 1];
    let mut dir = root
        .try_clone()
        .map_err(|e| BeneathError::io("open", rel, e))?;
    for (i, part) in folders.iter().enumerate() {
        match openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => dir = File::from(fd),
            Err(Errno::ENOENT) => {
                return Ok((i..folders.len())
                    .map(|j| folders[..=j].join("/"))
                    .collect())
            }
            Err(e) => return Err(not_a_folder(&dir, part, e, &folders[..=i].join("/"))),
        }
    }
    Ok(Vec::new())
}

/// Removes the empty folder `rel` below `root` (one with anything in it
/// stays: `ENOTEMPTY`).
pub fn remove_empty_dir(root: &File, rel: &str) -> Result<(), BeneathError> {
    let parts = check(rel)?;
    let (name, folders) = parts.split_last().expect("check gives one part at least");
    let dir = walk(root, folders, None, rel)?;
    unlinkat(dir.as_fd(), *name, UnlinkatFlags::RemoveDir)
        .map_err(|e| BeneathError::io("remove", rel, e))
}

/// Removes the file (or symlink, as a name) `rel` below `root`; a folder is
/// refused. Missing is `Missing`.
pub fn remove_file(root: &File, rel: &str) -> Result<(), BeneathError> {
    let parts = check(rel)?;
    let (name, folders) = parts.split_last().expect("check gives one part at least");
    let dir = walk(root, folders, None, rel)?;
    let st = fstatat(dir.as_fd(), *name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| BeneathError::open(e, rel))?;
    if is_kind(&st, SFlag::S_IFDIR) {
        return Err(BeneathError::NotRegular {
            path: rel.to_owned(),
            kind: "folder",
        });
    }
    unlinkat(dir.as_fd(), *name, UnlinkatFlags::NoRemoveDir)
        .map_err(|e| BeneathError::io("remove", rel, e))
}

/// What a listing found at one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Folder,
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the listed folder, `/`-separated.
    pub path: String,
    pub kind: Kind,
    pub size: u64,
    pub nlink: u64,
}

/// How far a listing goes.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Entries returned at most (folders count).
    pub entries: usize,
    /// Folders entered below the listed one at most.
    pub depth: usize,
}

/// The entries below a folder, sorted by path.
#[derive(Debug, Default)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// A bound stopped the listing before it saw everything.
    pub truncated: bool,
}

/// Lists the tree below the folder `rel` of `root` (`""`: `root`), never
/// following a link: a symlink is listed as one, and not entered. Names
/// that are not UTF-8 are skipped (and the listing said truncated), as
/// they cannot be named in a path of this module.
pub fn list(root: &File, rel: &str, bounds: Bounds) -> Result<Listing, BeneathError> {
    let top = open_dir(root, rel)?;
    let mut listing = Listing::default();
    // (a folder's path relative to the listed one, its depth). Folders
    // waiting their turn are paths, not open handles: a folder with more
    // subfolders than the process may open descriptors must not exhaust
    // them (a daemon serving others shares its limit). Each is opened
    // again from the top, one component at a time, when its turn comes.
    let mut stack: Vec<(String, usize)> = vec![(String::new(), 0)];
    while let Some((prefix, depth)) = stack.pop() {
        let shown = if prefix.is_empty() { rel } else { &prefix };
        let dir = if prefix.is_empty() {
            top.try_clone()
                .map_err(|e| BeneathError::io("open", shown, e))?
        } else {
            let parts: Vec<&str> = prefix.split('/').collect();
            match walk(&top, &parts, None, shown) {
                Ok(d) => d,
                // Swapped for something else since it was listed: not entered.
                Err(
                    BeneathError::Symlink { .. }
                    | BeneathError::NotFolder { .. }
                    | BeneathError::Missing { .. },
                ) => continue,
                Err(e) => return Err(e),
            }
        };
        let room = bounds.entries.saturating_sub(listing.entries.len());
        let (mut names, more) = read_names(&dir, shown, room.saturating_add(1))?;
        listing.truncated |= more;
        names.sort();
        let mut below = Vec::new();
        for name in names {
            let Some(text) = name.to_str() else {
                listing.truncated = true;
                continue;
            };
            if listing.entries.len() >= bounds.entries {
                listing.truncated = true;
                listing.entries.sort_by(|a, b| a.path.cmp(&b.path));
                return Ok(listing);
            }
            let path = if prefix.is_empty() {
                text.to_owned()
            } else {
                format!("{prefix}/{text}")
            };
            let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue, // removed meanwhile
                Err(e) => return Err(BeneathError::io("stat", &path, e)),
            };
            let kind = if is_kind(&st, SFlag::S_IFREG) {
                Kind::File
            } else if is_kind(&st, SFlag::S_IFDIR) {
                Kind::Folder
            } else if is_kind(&st, SFlag::S_IFLNK) {
                Kind::Symlink
            } else {
                Kind::Special
            };
            listing.entries.push(Entry {
                path: path.clone(),
                kind,
                size: st.st_size as u64,
                nlink: st.st_nlink as u64,
            });
            if kind == Kind::Folder {
                if depth >= bounds.depth {
                    listing.truncated = true;
                    continue;
                }
                below.push((path, depth + 1));
            }
        }
        stack.extend(below.into_iter().rev());
    }
    listing.entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(listing)
}

/// The names in an open folder, without `.` and `..`: at most `cap` of
/// them, and whether there were more (a folder of millions of empty
/// files must not cost the runner memory for every name).
fn read_names(dir: &File, shown: &str, cap: usize) -> Result<(Vec<OsString>, bool), BeneathError> {
    let fd: OwnedFd = dir
        .try_clone()
        .map_err(|e| BeneathError::io("list", shown, e))?
        .into();
    let mut listing = nix::dir::Dir::from_fd(fd).map_err(|e| BeneathError::io("list", shown, e))?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(|e| BeneathError::io("list", shown, e))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            if names.len() >= cap {
                return Ok((names, true));
            }
            names.push(OsStr::from_bytes(n).to_owned());
        }
    }
    Ok((names, false))
}

#[cfg(test)]
#[path = "beneath_tests.rs"]
mod tests;
