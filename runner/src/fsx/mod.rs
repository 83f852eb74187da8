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
//!   reader sees the old file or the new one, never a torn one;
//! - [`tree_stamp`] fingerprints a sealed tree's metadata, so a tree that
//!   was verified once can be checked cheaply before it is trusted again;
//! - [`aliases`] names the other paths a file is visible at through other
//!   mounts of its file system (read from the mount table);
//! - [`beneath`] reads, writes and lists below a directory handle without
//!   following links: the primitives for files moved in and out of a
//!   workspace a sandboxed command controls.

pub mod aliases;
pub mod beneath;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
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

/// Opens the folder at the absolute `path` one component at a time from
/// `/`, refusing a symlink anywhere on the way: what is opened is the
/// folder the (canonical) path named when it was checked, or nothing.
pub fn open_dir_no_symlinks(path: &Path) -> io::Result<File> {
    let rel = path
        .strip_prefix("/")
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"))?;
    let mut dir = File::open("/")?;
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a canonical path",
            ));
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(dir.as_fd(), name, flags, Mode::empty()).map_err(io::Error::from)?;
        dir = File::from(fd);
    }
    Ok(dir)
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
///
/// Works through directory handles: each folder is opened relative to its
/// open parent without following symlinks, and entries are unlinked
/// relative to it. A folder swapped for a symlink while the tree is being
/// removed (by anything that can write in it) is unlinked as a link, never
/// followed, so the deletion cannot be redirected outside the tree.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot remove a root folder",
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    remove_at(&open_dir_nofollow(parent)?, name)
}

/// Removes the entry `name` of the open folder `parent`, with everything
/// below it when it is a folder.
fn remove_at(parent: &File, name: &std::ffi::OsStr) -> io::Result<()> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir = match openat(parent.as_fd(), name, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        // A file or a symlink: unlink the entry itself.
        Err(nix::errno::Errno::ENOTDIR) | Err(nix::errno::Errno::ELOOP) => {
            return unlinkat(parent.as_fd(), name, UnlinkatFlags::NoRemoveDir)
                .map_err(io::Error::from);
        }
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if dir.metadata()?.permissions().mode() & 0o700 != 0o700 {
        nix::sys::stat::fchmod(dir.as_fd(), Mode::from_bits_truncate(0o700))
            .map_err(io::Error::from)?;
    }
    let mut names = Vec::new();
    {
        let listing = nix::dir::Dir::from_fd(dir.try_clone()?.into())?;
        let mut listing = listing;
        for entry in listing.iter() {
            let entry = entry?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(std::ffi::OsStr::from_bytes(n).to_owned());
            }
        }
    }
    for n in &names {
        remove_at(&dir, n)?;
    }
    unlinkat(parent.as_fd(), name, UnlinkatFlags::RemoveDir).map_err(io::Error::from)
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
    crate::text::to_hex(&bytes)
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
/// Durable once it returns: the file's bytes are `fsync`ed before the link
/// and its folder after, so a record that was acknowledged (a session, a
/// binding) survives a power cut too.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let tmp = sibling_tmp(path);
    let write = || -> io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        io::Write::write_all(&mut f, bytes)?;
        f.sync_all()
    };
    let written = write()
        .and_then(|()| chmod(&tmp, mode))
        .and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    written?;
    fs::File::open(parent)?.sync_all()
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

/// A fingerprint of the metadata of every folder and file below (and
/// including) `root`: the digest of one line per entry (its relative path,
/// kind, device, inode, size, mode, modification and change time), in
/// name order, and how many entries there are. A byte written, a `chmod`,
/// an entry added, removed, renamed or replaced changes it: a write moves
/// the file's times, anything else its folder's or its own change time,
/// which nobody but the kernel sets. It proves nothing against someone who
/// can set the clock back and write within one timestamp tick; only
/// re-hashing the bytes does. Symlinks are never followed.
pub fn tree_stamp(root: &Path) -> io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let line = |sha: &mut Sha256, rel: &str, m: &fs::Metadata| {
        let kind = if m.is_dir() {
            'd'
        } else if m.is_file() {
            'f'
        } else {
            'o'
        };
        sha.update(rel.as_bytes());
        sha.update(
            format!(
                "\0{kind} {} {} {} {:o} {}.{:09} {}.{:09}\n",
                m.dev(),
                m.ino(),
                m.size(),
                m.mode(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            )
            .as_bytes(),
        );
    };
    let mut sha = Sha256::new();
    let mut entries = 0u64;
    let top = fs::symlink_metadata(root)?;
    line(&mut sha, "", &top);
    let mut stack = Vec::new();
    if top.is_dir() {
        stack.push((root.to_owned(), String::new()));
    }
    while let Some((dir, rel)) = stack.pop() {
        let mut children: Vec<(std::ffi::OsString, fs::Metadata)> = Vec::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            // lstat: a symlink is stamped as itself, never followed.
            children.push((entry.file_name(), entry.metadata()?));
        }
        children.sort_by(|a, b| a.0.cmp(&b.0));
        // Folders go on the stack in reverse, so they come off in order.
        let mut below = Vec::new();
        for (name, m) in children {
            let text = name.to_string_lossy();
            let child = if rel.is_empty() {
                text.into_owned()
            } else {
                format!("{rel}/{text}")
            };
            entries += 1;
            line(&mut sha, &child, &m);
            if m.is_dir() {
                below.push((dir.join(&name), child));
            }
        }
        stack.extend(below.into_iter().rev());
    }
    Ok(format!(
        "{entries} {}",
        crate::text::to_hex(&sha.finalize())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder swapped for a symlink (`renameat2` with
    /// `RENAME_EXCHANGE`) again and again while the tree is removed never
    /// redirects the removal into the symlink's target.
    #[cfg(target_os = "linux")]
    #[test]
    fn removal_is_not_redirected_by_a_swapped_symlink() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::create_dir(&victim).unwrap();
        for i in 0..200 {
            fs::write(victim.join(format!("f{i}")), "precious").unwrap();
        }
        for round in 0..20 {
            let tree = t.path().join(format!("tree{round}"));
            let a = tree.join("a");
            fs::create_dir_all(&a).unwrap();
            for i in 0..200 {
                fs::write(a.join(format!("f{i}")), "x").unwrap();
            }
            std::os::unix::fs::symlink(&victim, tree.join("link")).unwrap();
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let racer = {
                let (stop, tree) = (stop.clone(), tree.clone());
                std::thread::spawn(move || {
                    let (a, l) = (tree.join("a"), tree.join("link"));
                    while !stop.load(Ordering::Relaxed) {
                        let swapped = nix::fcntl::renameat2(
                            nix::fcntl::AT_FDCWD,
                            &a,
                            nix::fcntl::AT_FDCWD,
                            &l,
                            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                        );
                        if swapped.is_err() {
                            break; // one side is gone
                        }
                    }
                })
            };
            // It may fail (an entry changed type under it); it must never
            // delete through the link.
            let _ = remove_tree(&tree);
            stop.store(true, Ordering::Relaxed);
            racer.join().unwrap();
            assert_eq!(fs::read_dir(&victim).unwrap().count(), 200, "round {round}");
        }
    }

    #[test]
    fn removes_sealed_trees_and_symlinks_as_links() {
        let t = tempfile::tempdir().unwrap();
        let keep = t.path().join("keep");
        fs::create_dir(&keep).unwrap();
        fs::write(keep.join("f"), "x").unwrap();
        let tree = t.path().join("tree");
        fs::create_dir_all(tree.join("a/b")).unwrap();
        fs::write(tree.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink(&keep, tree.join("a/link")).unwrap();
        seal_tree(&tree).unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(keep.join("f").exists());
        remove_tree(&tree).unwrap(); // missing is fine
    }

    /// The stamp of a tree is the same taken twice, and changes when a
    /// file is replaced by another of the same size or removed (its inode
    /// or the entry count differ whatever the clock says).
    #[test]
    fn a_tree_stamp_sees_a_replaced_or_removed_file() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("tree");
        fs::create_dir_all(tree.join("a")).unwrap();
        fs::write(tree.join("a/f"), "same").unwrap();
        fs::write(tree.join("g"), "kept").unwrap();
        let before = tree_stamp(&tree).unwrap();
        assert!(before.starts_with("3 "), "{before}");
        assert_eq!(tree_stamp(&tree).unwrap(), before);
        fs::write(t.path().join("other"), "SAME").unwrap();
        fs::rename(t.path().join("other"), tree.join("a/f")).unwrap();
        let replaced = tree_stamp(&tree).unwrap();
        assert_ne!(replaced, before);
        fs::remove_file(tree.join("g")).unwrap();
        let removed = tree_stamp(&tree).unwrap();
        assert!(removed.starts_with("2 "), "{removed}");
    }
}
