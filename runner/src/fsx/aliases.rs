//! The other paths a file is visible at on this host, through other
//! mounts of its file system: a folder above it bound somewhere else
//! (`mount --bind /srv/keys /mnt/k`, a container volume) shows the same
//! file under a second name that a check of its path alone never sees.
//!
//! [`aliases`] reads `/proc/self/mountinfo`: the mount the file's path is
//! on gives its path inside its file system; every other mount of that
//! file system (the same device) whose root is that path or a folder
//! above it shows the file too, at its mount point joined with the rest.
//! Each such path is kept only if it is that very file now (device and
//! inode, not following a link): a mount shadowed by a later one is not
//! where the file is visible. A hard link is another matter (a second
//! name in the file system itself, which no mount table lists): callers
//! that must know every name refuse a file with more than one.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One line of `mountinfo`: its device, the folder of the file system it
/// shows, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    device: String,
    root: PathBuf,
    point: PathBuf,
}

/// This thread's mount table (a thread may have a mount namespace of its
/// own), or the process's; `None` where there is no `/proc`.
fn mount_table() -> Option<String> {
    std::fs::read_to_string("/proc/thread-self/mountinfo")
        .or_else(|_| std::fs::read_to_string("/proc/self/mountinfo"))
        .ok()
}

/// The paths other than `real` (canonical) at which the same file (the
/// device and inode of `meta`) is visible through other mounts, read from
/// this process's mount table. Empty where there is no `/proc`.
pub fn aliases(real: &Path, meta: &std::fs::Metadata) -> Vec<PathBuf> {
    let Some(table) = mount_table() else {
        return Vec::new();
    };
    candidates(&table, real)
        .into_iter()
        .filter(|alias| {
            std::fs::symlink_metadata(alias)
                .is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
        })
        .collect()
}

/// Every other place at which a part of the folder `real` (canonical) is
/// visible, as pairs of a path and the folder below `real` it shows (empty:
/// `real` itself): a mount of `real` or of a folder above it (as
/// [`aliases`] finds), a mount of a folder inside it (`mount --bind
/// <real>/store /srv/pkgs`), and the same for each file system mounted
/// inside `real` (its other mounts show the folder it is mounted on). Each
/// is kept only if it is that folder now (device and inode). Empty where
/// there is no `/proc`.
pub fn views(real: &Path) -> Vec<(PathBuf, PathBuf)> {
    let Some(table) = mount_table() else {
        return Vec::new();
    };
    let id = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    view_candidates(&table, real)
        .into_iter()
        .filter(|(point, sub)| id(point).is_some_and(|i| id(&real.join(sub)) == Some(i)))
        .collect()
}

/// [`views`] by `mountinfo` (`table`) alone: pure, the part [`views`]
/// then confirms.
fn view_candidates(table: &str, real: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mounts: Vec<Mount> = table.lines().filter_map(parse).collect();
    // `real` itself, and each mount point inside it (another file system,
    // or another part of this one, whose other mounts show that folder).
    let mut targets = vec![(real.to_owned(), PathBuf::new())];
    for m in &mounts {
        if let Ok(sub) = m.point.strip_prefix(real) {
            if !sub.as_os_str().is_empty() && !targets.iter().any(|(t, _)| *t == m.point) {
                targets.push((m.point.clone(), sub.to_owned()));
            }
        }
    }
    let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
    for (target, sub) in targets {
        let Some((on, inside)) = locate(&mounts, &target) else {
            continue;
        };
        for m in mounts.iter().filter(|m| m.device == on.device) {
            let view = if let Ok(below) = inside.strip_prefix(&m.root) {
                // The mount shows `target`, below its point.
                (joined(&m.point, below), sub.clone())
            } else if let Ok(under) = m.root.strip_prefix(&inside) {
                // The mount shows a folder inside `target`, at its point.
                (m.point.clone(), sub.join(under))
            } else {
                continue;
            };
            // A name under `real` is `real`'s own path.
            if !view.0.starts_with(real) && !found.contains(&view) {
                found.push(view);
            }
        }
    }
    found
}

/// `base` joined with `rest`, without a trailing separator when `rest` is
/// empty.
fn joined(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rest)
    }
}

/// The mount `path` is on (the deepest mount point above it, the last of
/// equal ones: a later mount covers an earlier one at its point) and
/// `path`'s folder inside that mount's file system.
fn locate<'m>(mounts: &'m [Mount], path: &Path) -> Option<(&'m Mount, PathBuf)> {
    let on = mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())?;
    let on = mounts
        .iter()
        .rev()
        .find(|m| m.point == on.point)
        .unwrap_or(on);
    let rest = path.strip_prefix(&on.point).ok()?;
    Some((on, joined(&on.root, rest)))
}

/// The paths other than `real` that other mounts of `real`'s file system
/// would show it at, by `mountinfo` (`table`) alone: pure, the part
/// [`aliases`] then confirms.
fn candidates(table: &str, real: &Path) -> Vec<PathBuf> {
    let mounts: Vec<Mount> = table.lines().filter_map(parse).collect();
    let Some((on, inside)) = locate(&mounts, real) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for m in mounts.iter().filter(|m| m.device == on.device) {
        let Ok(below) = inside.strip_prefix(&m.root) else {
            continue;
        };
        let alias = joined(&m.point, below);
        if alias != real && !found.contains(&alias) {
            found.push(alias);
        }
    }
    found
}

/// One line of `mountinfo` (`id parent major:minor root point options
/// ... - type source options`), its paths unescaped.
fn parse(line: &str) -> Option<Mount> {
    let mut fields = line.split(' ');
    let (_id, _parent) = (fields.next()?, fields.next()?);
    let device = fields.next()?.to_owned();
    let root = unescape(fields.next()?);
    let point = unescape(fields.next()?);
    // A root outside the mount namespace's view (`net:[...]`, a deleted
    // folder) is not a path.
    if !root.is_absolute() || !point.is_absolute() {
        return None;
    }
    Some(Mount {
        device,
        root,
        point,
    })
}

/// A path of `mountinfo`: the kernel writes space, tab, newline and
/// backslash as `\040`, `\011`, `\012` and `\134`.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:5 / /proc rw - proc proc rw
40 22 8:1 /srv/keys /mnt/k rw,relatime - ext4 /dev/sda1 rw
41 22 8:1 /srv /data/srv\\040copy rw - ext4 /dev/sda1 rw
42 22 8:2 / /srv/other rw - ext4 /dev/sda2 rw
43 22 8:1 /home /home rw - ext4 /dev/sda1 rw
44 22 0:30 net:[4026532] /run/netns/x rw - nsfs nsfs rw
";

    fn paths(found: Vec<PathBuf>) -> Vec<String> {
        found
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_file_below_a_folder_bound_elsewhere_has_each_of_its_names() {
        let got = paths(candidates(TABLE, Path::new("/srv/keys/receipt.pem")));
        assert_eq!(
            got,
            ["/mnt/k/receipt.pem", "/data/srv copy/keys/receipt.pem"],
            "the root mount's own name is the file itself"
        );
    }

    #[test]
    fn a_mount_of_another_device_or_of_a_folder_beside_it_shows_nothing() {
        // /srv/other is another file system; /home is a folder beside.
        assert!(candidates(TABLE, Path::new("/srv/other/key")).is_empty());
        let got = paths(candidates(TABLE, Path::new("/etc/key")));
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_file_on_a_bind_mount_is_found_at_its_source_too() {
        let got = paths(candidates(TABLE, Path::new("/mnt/k/receipt.pem")));
        assert_eq!(
            got,
            ["/srv/keys/receipt.pem", "/data/srv copy/keys/receipt.pem"]
        );
    }

    #[test]
    fn a_later_mount_at_the_same_point_is_the_one_a_path_is_on() {
        // /home covered by a mount of /srv: a file seen there is /srv's.
        let table = format!("{TABLE}50 43 8:1 /srv /home rw - ext4 /dev/sda1 rw\n");
        let got = paths(candidates(&table, Path::new("/home/keys/k")));
        assert!(got.contains(&"/srv/keys/k".to_owned()), "{got:?}");
        assert!(got.contains(&"/mnt/k/k".to_owned()), "{got:?}");
    }

    fn views_of(table: &str, real: &str) -> Vec<(String, String)> {
        view_candidates(table, Path::new(real))
            .into_iter()
            .map(|(p, s)| (p.display().to_string(), s.display().to_string()))
            .collect()
    }

    #[test]
    fn a_folder_has_the_views_of_itself_of_a_folder_inside_it_and_of_what_is_mounted_in_it() {
        let table = format!(
            "{TABLE}\
60 22 8:1 /srv/data/store /srv/pkgs rw - ext4 /dev/sda1 rw
61 22 8:3 / /srv/data/state rw - ext4 /dev/sda3 rw
62 22 8:3 /blobs /mnt/blobs rw - ext4 /dev/sda3 rw
63 22 8:3 / /mnt/state rw - ext4 /dev/sda3 rw
"
        );
        let got = views_of(&table, "/srv/data");
        for want in [
            ("/data/srv copy/data", ""),
            ("/srv/pkgs", "store"),
            ("/mnt/blobs", "state/blobs"),
            ("/mnt/state", "state"),
        ] {
            assert!(
                got.contains(&(want.0.to_owned(), want.1.to_owned())),
                "{want:?} in {got:?}"
            );
        }
        // Its own path and the mount inside it are not other names.
        assert!(
            got.iter().all(|(p, _)| !p.starts_with("/srv/data")),
            "{got:?}"
        );
        // A folder beside it, on another device or not, shows nothing.
        assert!(views_of(&table, "/srv/other").is_empty());
        assert!(views_of(&table, "/etc").is_empty());
    }

    #[test]
    fn escaped_paths_are_read_as_the_kernel_wrote_them() {
        assert_eq!(unescape("/a\\040b\\011c\\134d"), Path::new("/a b\tc\\d"));
        assert_eq!(unescape("/plain\\x"), Path::new("/plain\\x"));
        assert_eq!(unescape("/end\\04"), Path::new("/end\\04"));
    }

    /// Through the real mount table, in a mount namespace of this test's
    /// own thread: a bind mount of the key's folder is found, and once a
    /// mount covers it, it is not (the path is no longer that file).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_real_mount_table_names_a_bind_mounts_copy_while_it_shows_the_file() {
        use nix::mount::{mount, MsFlags};
        let none: Option<&str> = None;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        for d in ["keys", "bound"] {
            std::fs::create_dir(real.join(d)).unwrap();
        }
        let key = real.join("keys/k");
        std::fs::write(&key, b"x").unwrap();
        let seen = std::thread::spawn(move || {
            if nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).is_err() {
                return None; // not allowed here: nothing to look at
            }
            let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
            mount(none, "/", none, private, none).unwrap();
            let meta = std::fs::metadata(&key).unwrap();
            let bound = real.join("bound");
            let keys = real.join("keys");
            mount(Some(&keys), &bound, none, MsFlags::MS_BIND, none).unwrap();
            let shown = aliases(&key, &meta);
            mount(Some("tmpfs"), &bound, Some("tmpfs"), MsFlags::empty(), none).unwrap();
            let covered = aliases(&key, &meta);
            Some((bound.join("k"), shown, covered))
        })
        .join()
        .unwrap();
        let Some((alias, shown, covered)) = seen else {
            eprintln!("skipped: this thread cannot have a mount namespace of its own here");
            return;
        };
        assert!(shown.contains(&alias), "{shown:?}");
        assert!(!covered.contains(&alias), "{covered:?}");
    }
}
