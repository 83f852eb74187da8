//! File-system primitives the staging and store code rely on.
//!
//! - [`open_beneath`] opens a path below a directory handle one component
//!   at a time with `O_NOFOLLOW`, so a symlink swapped into a source tree
//!   after it was listed cannot redirect a read outside it;
//! - [`copy_fd`] copies with `copy_file_range` (in-kernel, no user-space
//!   buffer) and falls back to read/write where the kernel says no;
//! - [`remove_tree`] deletes a tree whose folders were made read-only;
//! - [`LockFile`] is an advisory `flock` held for the life of a private
//!   folder, which is how a sweeper tells a live folder from a crashed one;
//! - [`write_replace`] and [`write_new`] write whole files atomically: a
//!   reader sees the old file or the new one, never a torn one.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

/// Opens `rel` (a checked, `/`-separated relative path) below `root`
/// without following any symlink on the way.
pub fn open_beneath(root: &File, rel: &str) -> io::Result<File> {
    let mut segments = rel.split('/').peekable();
    let mut dir: Option<File> = None;
    while let Some(segment) = segments.next() {
        let parent = dir.as_ref().unwrap_or(root);
        let last = segments.peek().is_none();
        let flags = if last {
            // O_NONBLOCK: a FIFO swapped in must not block the open.
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK
        } else {
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_DIRECTORY
        };
        let fd = openat(parent.as_fd(), segment, flags, Mode::empty()).map_err(io::Error::from)?;
        dir = Some(File::from(fd));
    }
    dir.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty path"))
}

/// Opens a directory as a handle, refusing a symlink at the last component.
pub fn open_dir_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Copies `len` bytes (or until EOF when the source is shorter) from `src`
/// to `dst`, calling `progress(bytes_so_far)` after each chunk. Returns the
/// number of bytes copied.
pub fn copy_fd(src: &File, dst: &File, len: u64, mut progress: impl FnMut(u64)) -> io::Result<u64> {
    const CHUNK: usize = 4 << 20;
    let mut done: u64 = 0;
    let mut in_kernel = true;
    let mut buf = Vec::new();
    loop {
        // Ask for one byte past the announced size: growth must be seen.
        let want = ((len + 1).saturating_sub(done)).min(CHUNK as u64) as usize;
        if want == 0 {
            break;
        }
        let n = if in_kernel {
            #[cfg(target_os = "linux")]
            let copied = nix::fcntl::copy_file_range(src.as_fd(), None, dst.as_fd(), None, want);
            #[cfg(not(target_os = "linux"))]
            let copied: nix::Result<usize> = Err(nix::errno::Errno::ENOSYS);
            match copied {
                Ok(n) => n,
                Err(
                    nix::errno::Errno::EXDEV
                    | nix::errno::Errno::EINVAL
                    | nix::errno::Errno::ENOSYS
                    | nix::errno::Errno::EOPNOTSUPP,
                ) => {
                    in_kernel = false;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            buf.resize(want, 0);
            let n = (&*src).read(&mut buf)?;
            (&*dst).write_all(&buf[..n])?;
            n
        };
        if n == 0 {
            break;
        }
        done += n as u64;
        progress(done);
    }
    Ok(done)
}

/// Sets mode `mode` on `path` without following a symlink at the end.
pub fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Removes a tree even where its folders are 0555: makes each folder
/// writable on the way down. Missing is not an error.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        chmod(path, 0o700)?;
    }
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    fs::remove_dir(path)
}

/// Sets files 0444 and folders 0555 below (and including) `root`, deepest
/// first, so a folder is locked only after its children are.
pub fn seal_tree(root: &Path) -> io::Result<()> {
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        if ty.is_dir() {
            seal_tree(&entry.path())?;
        } else {
            chmod(&entry.path(), 0o444)?;
        }
    }
    chmod(root, 0o555)
}

/// An exclusive advisory lock on a file, held until dropped (or until the
/// process dies, which is what makes crash detection reliable).
#[derive(Debug)]
pub struct LockFile {
    _file: File,
    path: PathBuf,
}

impl LockFile {
    /// Creates (if needed) and locks `path`; fails with `WouldBlock` when
    /// another live process holds it.
    pub fn acquire(path: &Path) -> io::Result<LockFile> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        try_flock(&file)?;
        Ok(LockFile {
            _file: file,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Non-blocking exclusive `flock`.
pub fn try_flock(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // `nix::fcntl::Flock` consumes the file; the plain call keeps ownership.
    #[allow(deprecated)]
    nix::fcntl::flock(
        file.as_raw_fd(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .map_err(io::Error::from)
}

/// Blocking shared `flock`, held until the file is closed.
pub fn lock_shared(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        #[allow(deprecated)]
        match nix::fcntl::flock(file.as_raw_fd(), nix::fcntl::FlockArg::LockShared) {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// True when the lock file at `path` is held by a live process. A missing
/// lock file counts as not held.
pub fn is_locked(path: &Path) -> bool {
    match fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => matches!(try_flock(&f), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
        Err(_) => false,
    }
}

/// 16 random bytes as hex, for private folder names and execution ids.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    // The kernel's random source does not fail on Linux >= 3.17 or macOS.
    getrandom::fill(&mut bytes).expect("getrandom failed");
    crate::hash::to_hex(&bytes)
}

/// A private sibling name for a file being written next to `path`.
fn sibling_tmp(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.{}.tmp", random_hex()))
}

/// Writes `bytes` to `path`, replacing it atomically (write a private
/// sibling, then `rename`). Creates the parent folder.
pub fn write_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = sibling_tmp(path);
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Creates `path` with `bytes` and `mode` unless it exists: a private
/// sibling is written, then `link(2)`ed into place, which is atomic and
/// never replaces. An existing `path` is `AlreadyExists`, untouched.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = sibling_tmp(path);
    let written = fs::write(&tmp, bytes)
        .and_then(|()| chmod(&tmp, mode))
        .and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    written
}

/// Creates a folder with mode 0700 (and its parents, 0755 as usual).
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    chmod(path, 0o700)
}
