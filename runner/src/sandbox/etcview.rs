//! The sandbox's `/etc` as one read-only bind of a prepared copy.
//!
//! A profile shows the command a few host files below `/etc` (the default
//! one: `ld.so.cache`, `alternatives`, `ssl/certs`), and the runner adds
//! `/etc/passwd` and `/etc/group`. As separate binds each piece costs
//! bubblewrap a mount, a read of the whole mount table and a read-only
//! remount. Here they are copied once into a folder of the data dir, and
//! `/etc` is that folder, bound read-only on one descriptor
//! ([`crate::sandbox::bwrap::FD_ETC`]). The sandbox sees the same bytes,
//! the same symlinks and nothing else below `/etc`, read-only as before.
//!
//! A copy must not go stale: what it was made from is written down with
//! it (a manifest: device, inode, size, modification and change time of
//! every folder and regular file it copied), and each execution looks at
//! those again (about ten `statx` calls for the default profile) before
//! it uses the copy. A changed entry shows up there: a file rewritten in
//! place changes its own times, an entry added, removed, renamed or
//! replaced changes its folder's. A change makes a new copy, a new
//! *generation* beside the old one; the old one is left alone, since a
//! running sandbox may have it bound. A copy made from entries changed in
//! the last [`SETTLE`] is used but not recorded as current (the next
//! execution looks again): a second change within one timestamp tick of
//! the first would not show in the times.
//!
//! Layout: `<root>/<key>/<generation>/{manifest,etc/...}` and
//! `<root>/<key>/current` naming the generation; `<key>` is a digest of
//! the pieces (source, destination) and the account files, `<generation>`
//! the digest of the manifest. Copies are built in `<root>/.staging/` and
//! renamed into place, so a reader sees a whole generation or none.
//!
//! What cannot be copied faithfully and safely is refused with an error,
//! and the caller then binds the pieces as before: a piece that is a
//! symlink itself, a device, FIFO or socket below one, a name with a
//! newline, a file or folder closed to its owner, group or others or
//! carrying an ACL (a bind keeps it closed to some user; a copy readable
//! by the sandbox user would not), pieces where one lies below another
//! (binds hide the first; a copy would merge them), a folder on the way or
//! inside that someone other than root or the runner's user may change
//! (the copy is made by path), more than [`MAX_BYTES`] or [`MAX_ENTRIES`].
//! A generation's name covers the copied bytes as well as the stamps, so
//! a file changed without its times moving never reuses an older copy.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::sandbox::profile::Mount;

/// How recent a source change may be for its copy to be recorded as
/// current (see the module docs).
pub const SETTLE: Duration = Duration::from_secs(2);

/// One piece of the host's `/etc` the profile shows: the host path and
/// where it appears in the sandbox (below `/etc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub src: PathBuf,
    pub dest: PathBuf,
}

/// The pieces of `mounts` that the view takes over, or `None` when the
/// profile's `/etc` cannot be one folder: nothing of it below `/etc`, or
/// something there that is not a read-only bind (a mirrored symlink), or a
/// mount of `/etc` itself.
pub fn pieces(mounts: &[Mount]) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    for m in mounts {
        match m {
            Mount::RoBind { dest, .. } | Mount::RoBindTry { dest, .. }
                if dest == Path::new("/etc") =>
            {
                return None;
            }
            Mount::RoBind { src, dest } | Mount::RoBindTry { src, dest } if folded(m) => {
                out.push(Piece {
                    src: src.clone(),
                    dest: dest.clone(),
                });
            }
            Mount::Symlink { dest, .. } if dest.starts_with("/etc") => return None,
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Whether a mount is one of those the view takes over.
pub fn folded(m: &Mount) -> bool {
    match m {
        Mount::RoBind { dest, .. } | Mount::RoBindTry { dest, .. } => dest.starts_with("/etc"),
        Mount::Symlink { .. } => false,
    }
}

/// Files the runner itself puts in `/etc` (name below `/etc`, contents).
pub type Extra<'a> = (&'a str, &'a [u8]);

/// The folder whose copy of `pieces` and `extra` is current, made now if
/// there is none: a folder below `root` to bind read-only at `/etc`.
pub fn prepare(root: &Path, pieces: &[Piece], extra: &[Extra<'_>]) -> io::Result<PathBuf> {
    prepare_with(root, pieces, extra, SETTLE)
}

/// [`prepare`] with the settling time as a parameter (tests use zero).
pub fn prepare_with(
    root: &Path,
    pieces: &[Piece],
    extra: &[Extra<'_>],
    settle: Duration,
) -> io::Result<PathBuf> {
    let keydir = root.join(key(pieces, extra));
    if let Some(dir) = current(&keydir)? {
        return Ok(dir);
    }
    build(root, &keydir, pieces, extra, settle)
}

/// Where `explain` says the view is, as a path relative to the views'
/// `root`: the current generation when an execution would use it, else the
/// one the host's files give now (made by the first execution that uses
/// it).
pub fn expected(root: &Path, pieces: &[Piece], extra: &[Extra<'_>]) -> io::Result<PathBuf> {
    let key = key(pieces, extra);
    if let Some(etc) = current(&root.join(&key))? {
        if let Ok(rel) = etc.strip_prefix(root) {
            return Ok(rel.to_owned());
        }
    }
    let manifest = scan(pieces)?;
    let content = copy_or_hash(pieces, extra, None)?;
    Ok(PathBuf::from(key)
        .join(generation(&manifest.text, &content))
        .join("etc"))
}

/// The identity of a view: its pieces and extra files.
fn key(pieces: &[Piece], extra: &[Extra<'_>]) -> String {
    let mut h = Sha256::new();
    h.update(b"skill-runner etc view 1\n");
    for p in pieces {
        h.update(p.src.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update(p.dest.as_os_str().as_encoded_bytes());
        h.update([0]);
    }
    h.update(b"\n");
    for (name, bytes) in extra {
        h.update(name.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    crate::text::to_hex(&h.finalize())
}

/// A generation's name: what it was made from and what it holds. The bytes
/// count too: a file can change without its times moving (a write through
/// a shared mapping, a coarse clock), and a copy of the new bytes must not
/// be mistaken for an older one of the same stamps.
fn generation(manifest: &str, content: &str) -> String {
    let mut h = Sha256::new();
    h.update(manifest.as_bytes());
    h.update(b"\0");
    h.update(content.as_bytes());
    crate::text::to_hex(&h.finalize())
}

/// The current generation's `etc` folder when what it was made from is
/// unchanged.
fn current(keydir: &Path) -> io::Result<Option<PathBuf>> {
    let name = match fs::read_to_string(keydir.join("current")) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let gen = keydir.join(&name);
    let manifest = match fs::read_to_string(gen.join("manifest")) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for line in manifest.lines() {
        let (stamp, path) = line.split_once('\t').unwrap_or((line, ""));
        let now = fs::symlink_metadata(path).ok().map(|m| {
            if stamp.starts_with("a ") {
                stamp_above(&m)
            } else {
                stamp_of(&m)
            }
        });
        if now.as_deref() != Some(stamp) {
            return Ok(None);
        }
    }
    Ok(Some(gen.join("etc")))
}

/// What is recorded of a folder above a piece: that it is the same folder,
/// with the same mode and owner (its times move with every entry added
/// or removed beside the piece, which changes nothing copied).
fn stamp_above(m: &fs::Metadata) -> String {
    format!(
        "a {} {} {:o} {} {}",
        m.dev(),
        m.ino(),
        m.mode(),
        m.uid(),
        m.gid()
    )
}

/// What is recorded of a folder or regular file.
fn stamp_of(m: &fs::Metadata) -> String {
    let kind = if m.is_dir() { 'd' } else { 'f' };
    format!(
        "{kind} {} {} {} {}.{:09} {}.{:09}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// The most a copy holds: beyond, the pieces are bound one by one (a
/// profile naming a large tree must not make every host change a copy of
/// it).
pub const MAX_BYTES: u64 = 64 << 20;
/// The most entries a copy holds.
pub const MAX_ENTRIES: usize = 10_000;

/// What a copy is made from: one line per folder and regular file,
/// `stamp<TAB>path`, in a fixed order (the manifest), and the latest time
/// any of those files or folders changed.
#[derive(Debug, PartialEq, Eq)]
struct Manifest {
    text: String,
    newest: SystemTime,
}

/// The manifest of the pieces as they are now.
///
/// Only what everyone may read is copied: the copy is made by the runner
/// and readable by the sandbox user, so a file or folder closed to its
/// owner, group or others, or carrying an ACL (which a bind would have
/// kept closed to some user), is refused, and the pieces stay binds. So
/// are pieces where one lies below another (binds would hide the first).
fn scan(pieces: &[Piece]) -> io::Result<Manifest> {
    for (i, a) in pieces.iter().enumerate() {
        for b in &pieces[i + 1..] {
            if a.dest.starts_with(&b.dest) || b.dest.starts_with(&a.dest) {
                // Binds would hide the earlier piece; a copy would merge them.
                return Err(unsupported(&b.dest, "where another piece is too"));
            }
        }
    }
    let mut out = String::new();
    let mut newest = SystemTime::UNIX_EPOCH;
    let (mut bytes, mut entries) = (0u64, 0usize);
    let me = nix::unistd::geteuid().as_raw();
    for p in pieces {
        let meta = fs::symlink_metadata(&p.src).map_err(at(&p.src))?;
        if meta.file_type().is_symlink() {
            return Err(unsupported(&p.src, "a symlink"));
        }
        // The folders above: the sandbox user must be able to pass them
        // (a bind would fail where it cannot), nobody else may change them,
        // and they are part of what the copy was made from.
        let mut above: Vec<&Path> = p.src.ancestors().skip(1).collect();
        above.reverse();
        for dir in above {
            let m = fs::symlink_metadata(dir).map_err(at(dir))?;
            if m.file_type().is_symlink() || !only_trusted_change(&m, me, true) {
                return Err(unsupported(dir, "a folder someone else may change"));
            }
            if m.mode() & 0o111 != 0o111 || crate::supervise::sys::has_access_acl(dir)? {
                return Err(unsupported(dir, "a folder not everyone may pass"));
            }
            record(&mut out, plain(dir)?, &stamp_above(&m));
        }
        // Only ordinary file systems, and no mount crossed: a file of /proc
        // or /sys can say something else to root than to the sandbox user.
        if !ordinary_file_system(&p.src)? {
            return Err(unsupported(&p.src, "on a file system that is not copied"));
        }
        let device = meta.dev();
        walk(&p.src, &meta, &mut |path, m| {
            if m.dev() != device {
                return Err(unsupported(path, "on another mount"));
            }
            let name = plain(path)?;
            // Readable by owner, group and others alike, and no ACL: then
            // the sandbox user may read it through a bind whoever it is.
            let open_to_all = if m.is_dir() {
                m.mode() & 0o555 == 0o555
            } else {
                !m.is_file() || m.mode() & 0o444 == 0o444
            };
            let acl = (m.is_dir() || m.is_file()) && crate::supervise::sys::has_access_acl(path)?;
            if !open_to_all || acl {
                return Err(unsupported(path, "not readable by everyone"));
            }
            if m.is_dir() && !only_trusted_change(m, me, false) {
                return Err(unsupported(path, "a folder someone else may change"));
            }
            entries += 1;
            bytes += if m.is_file() { m.size() } else { 0 };
            if entries > MAX_ENTRIES || bytes > MAX_BYTES {
                return Err(unsupported(
                    path,
                    "beyond what a copy holds (64 MiB, 10,000 entries)",
                ));
            }
            if m.is_dir() || m.is_file() {
                record(&mut out, name, &stamp_of(m));
                newest = newest.max(changed_at(m));
            }
            Ok(())
        })?;
    }
    Ok(Manifest { text: out, newest })
}

/// `path` as a manifest can hold it: UTF-8, no newline or tab.
fn plain(path: &Path) -> io::Result<&str> {
    path.to_str()
        .filter(|s| !s.contains(['\n', '\t']))
        .ok_or_else(|| unsupported(path, "a name that is not plain UTF-8"))
}

/// Adds a manifest line.
fn record(out: &mut String, path: &str, stamp: &str) {
    out.push_str(stamp);
    out.push('\t');
    out.push_str(path);
    out.push('\n');
}

/// The later of a file's modification and change times.
fn changed_at(m: &fs::Metadata) -> SystemTime {
    let at = |secs: i64, nanos: i64| {
        u64::try_from(secs)
            .ok()
            .map(|s| SystemTime::UNIX_EPOCH + Duration::new(s, nanos.clamp(0, 999_999_999) as u32))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    at(m.mtime(), m.mtime_nsec()).max(at(m.ctime(), m.ctime_nsec()))
}

/// Whether `path` is on a file system whose files read the same to every
/// reader: the disk and memory file systems a host's `/etc` lives on.
#[cfg(target_os = "linux")]
fn ordinary_file_system(path: &Path) -> io::Result<bool> {
    const ORDINARY: &[i64] = &[
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0x7371_7368, // squashfs
        0x2FC1_2FC1, // zfs
        0xF2F5_2010, // f2fs
    ];
    let fs = nix::sys::statfs::statfs(path).map_err(|e| at(path)(e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.filesystem_type().0 as i64;
    Ok(ORDINARY.contains(&kind))
}

/// See the Linux version: elsewhere (where `explain` alone looks) every
/// file system counts.
#[cfg(not(target_os = "linux"))]
fn ordinary_file_system(_path: &Path) -> io::Result<bool> {
    Ok(true)
}

/// Whether only root or the runner's own user can change what a folder
/// holds: owned by one of them and writable by no one else (a sticky
/// folder, where others cannot move what they do not own, is allowed on
/// the way to a piece). The copy is made by path, so nobody else may swap
/// an entry for a symlink between the look and the copy.
fn only_trusted_change(m: &fs::Metadata, me: u32, sticky_ok: bool) -> bool {
    let owner = m.uid() == 0 || m.uid() == me;
    let others_write = m.mode() & 0o022 != 0;
    let sticky = m.mode() & 0o1000 != 0;
    owner && (!others_write || (sticky_ok && sticky))
}

/// Calls `visit` on `path` and, for a folder, everything below it (names
/// sorted); refuses what a copy cannot hold.
fn walk(
    path: &Path,
    meta: &fs::Metadata,
    visit: &mut dyn FnMut(&Path, &fs::Metadata) -> io::Result<()>,
) -> io::Result<()> {
    let ty = meta.file_type();
    if !(ty.is_dir() || ty.is_file() || ty.is_symlink()) {
        return Err(unsupported(path, "not a file, folder or symlink"));
    }
    visit(path, meta)?;
    if ty.is_dir() {
        let mut names: Vec<_> = fs::read_dir(path)
            .and_then(|d| {
                d.map(|e| e.map(|e| e.file_name()))
                    .collect::<io::Result<_>>()
            })
            .map_err(at(path))?;
        names.sort();
        for name in names {
            let child = path.join(name);
            let m = fs::symlink_metadata(&child).map_err(at(&child))?;
            walk(&child, &m, visit)?;
        }
    }
    Ok(())
}

/// Puts the path into an error from the file system.
fn at(path: &Path) -> impl Fn(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn unsupported(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{} is {what}", path.display()),
    )
}

/// Makes a new generation and returns its `etc` folder.
fn build(
    root: &Path,
    keydir: &Path,
    pieces: &[Piece],
    extra: &[Extra<'_>],
    settle: Duration,
) -> io::Result<PathBuf> {
    let started = SystemTime::now();
    let before = scan(pieces)?;
    let staging = root.join(".staging");
    fs::create_dir_all(&staging)?;
    sweep_staging(&staging);
    let tmp = staging.join(crate::fsx::random_hex());
    let made = fill(&tmp, pieces, extra, &before.text);
    // The copy is of what the manifest says only if nothing changed while
    // it was made.
    let made = made.and_then(|content| {
        if scan(pieces)? == before {
            Ok(content)
        } else {
            Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the host's files changed while they were copied",
            ))
        }
    });
    let placed = made.and_then(|content| {
        fs::create_dir_all(keydir)?;
        // Passable by the sandbox user, whatever the umask (bwrap, which a
        // root runner starts as that user, binds the copy by its path).
        crate::fsx::chmod(root, 0o755)?;
        crate::fsx::chmod(keydir, 0o755)?;
        let name = generation(&before.text, &content);
        let gen = keydir.join(&name);
        match fs::rename(&tmp, &gen) {
            Ok(()) => Ok((name, gen)),
            // Another runner made the same generation first: use theirs.
            Err(_) if gen.join("manifest").is_file() => Ok((name, gen)),
            Err(e) => Err(at(&gen)(e)),
        }
    });
    // Whatever happened, nothing is left in staging.
    let _ = crate::fsx::remove_tree(&tmp);
    let (name, gen) = placed?;
    // Recorded as current only when the last change is older than the
    // settling time (see the module docs).
    if settle.is_zero() || before.newest + settle < started {
        crate::fsx::write_replace(&keydir.join("current"), name.as_bytes())?;
    }
    Ok(gen.join("etc"))
}

/// Copies the pieces and extra files into `tmp/etc` (folders 0555, files
/// 0444 at the end), writes `tmp/manifest`, and returns the digest of what
/// was copied.
fn fill(tmp: &Path, pieces: &[Piece], extra: &[Extra<'_>], manifest: &str) -> io::Result<String> {
    let etc = tmp.join("etc");
    fs::create_dir_all(&etc)?;
    let content = copy_or_hash(pieces, extra, Some(&etc))?;
    fs::write(tmp.join("manifest"), manifest)?;
    seal(&etc)?;
    crate::fsx::chmod(&tmp.join("manifest"), 0o444)?;
    crate::fsx::chmod(tmp, 0o555)?;
    Ok(content)
}

/// The digest of what a copy of the pieces and extra files holds (names,
/// kinds, bytes, link targets), copying it into `out` (the copy's `etc`)
/// on the way when given.
///
/// Nothing here follows a symlink into the host: a source file is opened
/// with `O_NOFOLLOW` and must be the file [`scan`] looked at (same device
/// and inode, at most the size seen), and in `out` no piece lies below
/// another ([`scan`] refuses overlaps) and no folder is entered through a
/// link, so each write lands in the copy. Files are created, never
/// rewritten.
fn copy_or_hash(pieces: &[Piece], extra: &[Extra<'_>], out: Option<&Path>) -> io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut h = Sha256::new();
    let entry = |h: &mut Sha256, rel: &Path, kind: &[u8], data: &[u8]| {
        h.update(rel.as_os_str().as_bytes());
        h.update([0]);
        h.update(kind);
        h.update((data.len() as u64).to_le_bytes());
        h.update(data);
    };
    for p in pieces {
        let dest = p
            .dest
            .strip_prefix("/etc")
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a piece outside /etc"))?
            .to_owned();
        if let (Some(out), Some(parent)) = (out, dest.parent()) {
            fs::create_dir_all(out.join(parent))?;
        }
        let meta = fs::symlink_metadata(&p.src)?;
        walk(&p.src, &meta, &mut |path, m| {
            let below = path.strip_prefix(&p.src).unwrap_or(Path::new(""));
            // (Joining an empty path would add a trailing slash.)
            let rel = if below.as_os_str().is_empty() {
                dest.clone()
            } else {
                dest.join(below)
            };
            let to = out.map(|o| o.join(&rel));
            let ty = m.file_type();
            if ty.is_dir() {
                entry(&mut h, &rel, b"d", b"");
                if let Some(to) = to {
                    fs::create_dir(&to)?;
                }
            } else if ty.is_symlink() {
                let target = fs::read_link(path)?;
                entry(&mut h, &rel, b"l", target.as_os_str().as_bytes());
                if let Some(to) = to {
                    std::os::unix::fs::symlink(&target, &to)?;
                }
            } else {
                let bytes = read_as_scanned(path, m)?;
                entry(&mut h, &rel, b"f", &bytes);
                if let Some(to) = to {
                    write_created(&to, &bytes)?;
                }
            }
            Ok(())
        })?;
    }
    for (name, bytes) in extra {
        entry(&mut h, Path::new(name), b"f", bytes);
        if let Some(out) = out {
            write_created(&out.join(name), bytes)?;
        }
    }
    Ok(crate::text::to_hex(&h.finalize()))
}

/// The bytes of the regular file `scan` saw at `path`, or an error when
/// the entry is something else now (a symlink, another file, longer).
fn read_as_scanned(path: &Path, seen: &fs::Metadata) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let changed = || {
        io::Error::new(
            io::ErrorKind::Interrupted,
            format!("{} changed while it was copied", path.display()),
        )
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| changed())?;
    let now = file.metadata()?;
    if !now.is_file() || now.dev() != seen.dev() || now.ino() != seen.ino() {
        return Err(changed());
    }
    let mut bytes = Vec::with_capacity(seen.size() as usize);
    file.take(seen.size() + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != seen.size() {
        return Err(changed());
    }
    Ok(bytes)
}

/// Creates `path` (never through a symlink, never over anything) with
/// `bytes`.
fn write_created(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

/// Files 0444 (0555 where anyone could execute them), folders 0555,
/// symlinks as they are.
fn seal(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        if ty.is_dir() {
            seal(&entry.path())?;
        } else if ty.is_file() {
            let mode = entry.metadata()?.permissions().mode();
            let x = if mode & 0o111 == 0o111 { 0o111 } else { 0 };
            crate::fsx::chmod(&entry.path(), 0o444 | x)?;
        }
    }
    crate::fsx::chmod(dir, 0o555)
}

/// Removes staging folders a crashed runner left (older than an hour).
fn sweep_staging(staging: &Path) {
    let Ok(entries) = fs::read_dir(staging) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old {
            let _ = crate::fsx::remove_tree(&entry.path());
        }
    }
}

#[cfg(test)]
#[path = "etcview_tests.rs"]
mod tests;
