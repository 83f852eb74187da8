//! The per-use check of a sealed tree: a fingerprint of its metadata taken
//! when it is sealed, compared before every use without reading a byte or
//! a folder listing (docs/environments.md, "The per-use check").
//!
//! What it records, for the tree's root, each folder and each entry (the
//! paths the manifest names, no others): device, inode, mode, owner, size
//! and change time (`ctime`). Why that is enough to notice every change of
//! a sealed tree on disk:
//!
//! - adding, removing or renaming an entry (a file replaced by `rename`,
//!   a folder swapped for a symlink) changes the change time of the
//!   folder that holds it, and a replaced entry has another inode;
//! - writing or truncating a file, `chmod`, `chown`, a hard link made to
//!   it, changes its own change time;
//! - a mount over a folder of the tree shows another device and inode.
//!
//! Nobody but the kernel sets a change time; it moves with the clock, so
//! someone who can set the clock back and change a file within one tick
//! could go unnoticed: only re-hashing every byte
//! ([`super::store::EnvStore::verify`]) proves the bytes. Only the
//! runner's user and root can change the store at all (the data dir is
//! the runner's, 0700 or 0710; docs/datadir.md).
//!
//! The format is private to the store, `trees/<hash>/stamp.bin`: a magic
//! line, then per path: the path (`.` for the root), a NUL, and seven
//! little-endian `u64` fields. The check is one `fstatat` (without
//! following a symlink at the end) per path, relative to the tree's open
//! root, and an integer comparison.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, FileStat};

/// The first bytes of a stamp file.
pub const MAGIC: &[u8] = b"skill-runner tree stamp 2\n";
/// The stamp's file in `trees/<hash>/`.
pub const FILE: &str = "stamp.bin";

const FIELDS: usize = 7;

// `st_dev` is an i32 on macOS, a u64 on Linux: widened (sign-extended
// there), it is still one number per device, and is only compared.
#[allow(clippy::unnecessary_cast)]
fn fields(st: &FileStat) -> [u64; FIELDS] {
    [
        st.st_dev as u64,
        st.st_ino,
        u64::from(st.st_mode),
        u64::from(st.st_uid),
        st.st_size as u64,
        st.st_ctime as u64,
        st.st_ctime_nsec as u64,
    ]
}

fn stat(root: &File, path: &CStr) -> io::Result<FileStat> {
    fstatat(root.as_fd(), path, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

/// How far the file systems' clock may lag the fine clock: change times
/// come from the kernel's coarse clock, which ticks every 1 to 10 ms.
const TICK: Duration = Duration::from_millis(20);

/// Takes the stamp of the open tree `root` over `paths` (tree-relative,
/// folders and entries; the root itself is added first).
///
/// Returns only once the clock is past every change time it recorded, so
/// that a change made right after the stamp (within the same tick of the
/// coarse clock) still gets a later change time, and shows.
pub fn take<'a>(root: &File, paths: impl IntoIterator<Item = &'a str>) -> io::Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    let mut latest = Duration::ZERO;
    for path in std::iter::once(".").chain(paths) {
        let c = std::ffi::CString::new(path)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL"))?;
        let st = stat(root, &c)?;
        out.extend_from_slice(c.as_bytes_with_nul());
        for f in fields(&st) {
            out.extend_from_slice(&f.to_le_bytes());
        }
        let ctime = Duration::new(st.st_ctime.max(0) as u64, st.st_ctime_nsec as u32);
        latest = latest.max(ctime);
    }
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        if now > latest + TICK {
            return Ok(out);
        }
        std::thread::sleep(
            (latest + TICK)
                .saturating_sub(now)
                .max(Duration::from_millis(1)),
        );
    }
}

/// True when every path of `stamp` still has the metadata it was sealed
/// with; false for anything else (a change, a missing path, a stamp that
/// is not one). A large tree is checked by two threads, each half of it:
/// the check is one system call per path, and a use waits for it.
pub fn holds(root: &File, stamp: &[u8]) -> bool {
    let Some(records) = parse(stamp) else {
        return false;
    };
    if records.len() < PARALLEL_FROM {
        return check(root, &records);
    }
    let (first, second) = records.split_at(records.len() / 2);
    std::thread::scope(|s| {
        let other = s.spawn(|| check(root, second));
        let mine = check(root, first);
        other.join().unwrap_or(false) && mine
    })
}

/// From how many paths a second thread is worth its start.
const PARALLEL_FROM: usize = 512;

/// The stamp's records: each path and its sealed fields.
fn parse(stamp: &[u8]) -> Option<Vec<(&CStr, [u64; FIELDS])>> {
    let mut rest = stamp.strip_prefix(MAGIC)?;
    if rest.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(rest.len() / 80);
    while !rest.is_empty() {
        let nul = rest.iter().position(|b| *b == 0)?;
        let path = CStr::from_bytes_with_nul(&rest[..=nul]).ok()?;
        let values = rest.get(nul + 1..nul + 1 + FIELDS * 8)?;
        let mut want = [0u64; FIELDS];
        for (w, chunk) in want.iter_mut().zip(values.chunks_exact(8)) {
            *w = u64::from_le_bytes(chunk.try_into().ok()?);
        }
        out.push((path, want));
        rest = &rest[nul + 1 + FIELDS * 8..];
    }
    Some(out)
}

fn check(root: &File, records: &[(&CStr, [u64; FIELDS])]) -> bool {
    records
        .iter()
        .all(|(path, want)| stat(root, path).is_ok_and(|st| fields(&st) == *want))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::fsx;

    fn tree(dir: &std::path::Path) -> Vec<&'static str> {
        fs::create_dir_all(dir.join("a/b")).unwrap();
        fs::write(dir.join("a/b/f.py"), "x = 1\n").unwrap();
        fs::write(dir.join("top"), "top\n").unwrap();
        std::os::unix::fs::symlink("a/b/f.py", dir.join("link")).unwrap();
        vec!["a", "a/b", "a/b/f.py", "link", "top"]
    }

    fn stamped(dir: &std::path::Path) -> (File, Vec<u8>) {
        let paths = tree(dir);
        let root = fsx::open_dir_nofollow(dir).unwrap();
        let stamp = take(&root, paths).unwrap();
        assert!(holds(&root, &stamp));
        (root, stamp)
    }

    /// Each change a sealed tree can suffer on disk breaks the stamp:
    /// a write, a truncate, a chmod (even set back), an entry added,
    /// removed or replaced by rename, a folder swapped for a symlink.
    #[test]
    fn every_kind_of_change_breaks_the_stamp_and_a_read_does_not() {
        type Change = fn(&std::path::Path);
        let changes: &[(&str, Change)] = &[
            ("read", |d| {
                fs::read(d.join("a/b/f.py")).unwrap();
                fs::read_dir(d.join("a")).unwrap().count();
            }),
            ("write", |d| {
                fs::write(d.join("a/b/f.py"), "x = 2\n").unwrap()
            }),
            ("truncate", |d| {
                fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("top"))
                    .unwrap()
                    .set_len(0)
                    .unwrap()
            }),
            ("chmod and back", |d| {
                let p = d.join("top");
                fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
            }),
            ("add", |d| fs::write(d.join("a/b/new.py"), "").unwrap()),
            ("remove", |d| fs::remove_file(d.join("link")).unwrap()),
            ("rename over", |d| {
                fs::write(d.join("a/b/g.py"), "x = 1\n").unwrap();
                fs::rename(d.join("a/b/g.py"), d.join("a/b/f.py")).unwrap();
            }),
            ("folder swapped for a symlink", |d| {
                fs::rename(d.join("a/b"), d.join("moved")).unwrap();
                std::os::unix::fs::symlink("../moved", d.join("a/b")).unwrap();
            }),
            ("hard link made elsewhere", |d| {
                fs::hard_link(d.join("top"), d.join("../outside")).unwrap()
            }),
        ];
        for (what, change) in changes {
            let t = tempfile::tempdir().unwrap();
            let dir = t.path().join("tree");
            let (root, stamp) = stamped(&dir);
            change(&dir);
            assert_eq!(holds(&root, &stamp), *what == "read", "{what}");
        }
    }

    /// A tree large enough for two threads: a change in either half shows.
    #[test]
    fn a_change_in_either_half_of_a_large_tree_shows() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("tree");
        fs::create_dir_all(&dir).unwrap();
        let names: Vec<String> = (0..PARALLEL_FROM + 10)
            .map(|i| format!("f{i:04}"))
            .collect();
        for n in &names {
            fs::write(dir.join(n), n).unwrap();
        }
        for victim in [&names[1], &names[names.len() - 2]] {
            let root = fsx::open_dir_nofollow(&dir).unwrap();
            let stamp = take(&root, names.iter().map(String::as_str)).unwrap();
            assert!(holds(&root, &stamp));
            fs::set_permissions(dir.join(victim), fs::Permissions::from_mode(0o600)).unwrap();
            assert!(!holds(&root, &stamp), "{victim}");
        }
    }

    #[test]
    fn a_stamp_that_is_not_one_never_holds() {
        let t = tempfile::tempdir().unwrap();
        let (root, stamp) = stamped(&t.path().join("tree"));
        for bad in [
            &b""[..],
            MAGIC,
            &stamp[..stamp.len() - 1],
            b"skill-runner tree stamp 1\n",
        ] {
            assert!(!holds(&root, bad));
        }
        let mut flipped = stamp.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(!holds(&root, &flipped));
    }
}
