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
//!
//! macOS has no `/proc`, so no other mount is looked for there, but it
//! has firmlinks (`mod firmlink`): the read-only system volume and the
//! data volume are joined at the folders `/usr/share/firmlinks` lists, so
//! `/Users/a/data` is also `/System/Volumes/Data/Users/a/data`, and the
//! other way round. There [`aliases`] and [`views`] add the names the
//! firmlinks give a path (or, for [`views`], a folder inside it), each
//! kept only if it is that very file or folder now, as above. The known
//! firmlinks are built in too, and read after the table, so a table that
//! cannot be read loses none of them. That part is pure code, tested on
//! Linux and type-checked for macOS: it has not been run on a Mac.

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

/// macOS's firmlinks table ([`firmlink`]); `None` on every other system.
fn firmlink_table() -> Option<String> {
    cfg!(target_os = "macos").then(firmlink::table)
}

/// The paths other than `real` (canonical) at which the same file (the
/// device and inode of `meta`) is visible through other mounts, read from
/// this process's mount table, and on macOS through firmlinks. Empty
/// where there is neither.
pub fn aliases(real: &Path, meta: &std::fs::Metadata) -> Vec<PathBuf> {
    let mounted = mount_table().map_or_else(Vec::new, |table| candidates(&table, real));
    let linked = firmlink_table().map_or_else(Vec::new, |table| firmlink::names(&table, real));
    mounted
        .into_iter()
        .chain(linked)
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
/// inside `real` (its other mounts show the folder it is mounted on), and
/// on macOS the names firmlinks give it or a folder inside it. Each is
/// kept only if it is that folder now (device and inode). Empty where
/// there is neither a `/proc` nor a firmlink.
pub fn views(real: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mounted = mount_table().map_or_else(Vec::new, |table| view_candidates(&table, real));
    let linked = firmlink_table().map_or_else(Vec::new, |table| firmlink::views(&table, real));
    let id = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    mounted
        .into_iter()
        .chain(linked)
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

/// macOS's firmlinks: the read-only system volume and the data volume
/// are joined at the folders `/usr/share/firmlinks` lists, one a line, as
/// a path on the system volume, a tab, and the folder it shows, relative
/// to the data volume's root, `/System/Volumes/Data`: `/Users\tUsers`
/// makes `/Users/a/data` and `/System/Volumes/Data/Users/a/data` one
/// folder. So a path at or below either end of a firmlink has a second
/// name, the same path below the other end.
///
/// No other path has one. The system volume is not shown under
/// `/System/Volumes/Data`, so a system folder outside every firmlink
/// (`/usr/bin`) has its own name only. A folder of the data volume
/// outside every firmlink (`/System/Volumes/Data/sw`, made there by hand)
/// has its own name only too: the system volume's folder of the same name,
/// if there is one, is another folder, and a name that `synthetic.conf`
/// makes at `/` is either a symlink, which a canonical path has already
/// resolved, or an empty folder that another volume is mounted on. One
/// step is enough: in the built-in table, the other end of a firmlink is
/// inside no other firmlink.
///
/// The functions here are pure, so they are tested on any system; `table`
/// reads this Mac's. Written from the publicly described layout of macOS
/// 10.15 and later; not run on a Mac.
mod firmlink {
    use super::joined;
    use std::path::{Component, Path, PathBuf};

    /// Where macOS shows the data volume's root.
    const DATA_VOLUME: &str = "/System/Volumes/Data";

    /// This Mac's list of firmlinks.
    const TABLE: &str = "/usr/share/firmlinks";

    /// The firmlinks macOS 12 is described to have (earlier versions have
    /// fewer), read after [`TABLE`] in case it cannot be read or lacks one.
    pub(super) const BUILT_IN: &str = "\
/AppleInternal\tAppleInternal
/Applications\tApplications
/Library\tLibrary
/System/Library/Caches\tSystem/Library/Caches
/System/Library/Assets\tSystem/Library/Assets
/System/Library/PreinstalledAssets\tSystem/Library/PreinstalledAssets
/System/Library/AssetsV2\tSystem/Library/AssetsV2
/System/Library/PreinstalledAssetsV2\tSystem/Library/PreinstalledAssetsV2
/System/Library/CoreServices/CoreTypes.bundle/Contents/Library\tSystem/Library/CoreServices/CoreTypes.bundle/Contents/Library
/System/Library/Speech\tSystem/Library/Speech
/Users\tUsers
/Volumes\tVolumes
/cores\tcores
/opt\topt
/private\tprivate
/usr/local\tusr/local
/usr/libexec/cups\tusr/libexec/cups
/usr/share/snmp\tusr/share/snmp
";

    /// This Mac's firmlinks table followed by the built-in one. Every name
    /// found through them is confirmed (device and inode) before it is
    /// used, so an entry this Mac does not have costs one `lstat`, while
    /// an unreadable or cut table loses none of the known firmlinks.
    pub(super) fn table() -> String {
        let mut text = std::fs::read_to_string(TABLE).unwrap_or_default();
        text.push('\n');
        text.push_str(BUILT_IN);
        text
    }

    /// The firmlinks of `table`, each as its system end and its data end
    /// (both absolute), the lines that are not one left out.
    fn links(table: &str) -> impl Iterator<Item = (PathBuf, PathBuf)> + '_ {
        table.lines().filter_map(|line| {
            let (system, target) = parse(line)?;
            Some((system, Path::new(DATA_VOLUME).join(target)))
        })
    }

    /// One line of a firmlinks table: an absolute path, a tab, a relative
    /// one; fields after a second tab are ignored. `None` for a blank line,
    /// a comment (`#`) or a line that is not one.
    pub(super) fn parse(line: &str) -> Option<(PathBuf, PathBuf)> {
        if line.trim_start().starts_with('#') {
            return None;
        }
        let mut fields = line.split('\t');
        let system = plain(fields.next()?)?;
        let target = plain(fields.next()?)?;
        (system.has_root() && !target.has_root()).then_some((system, target))
    }

    /// `text` (trimmed) as a path of names alone, without a trailing or
    /// doubled separator; `None` if it has `..` or no name at all.
    fn plain(text: &str) -> Option<PathBuf> {
        let mut path = PathBuf::new();
        for part in Path::new(text.trim()).components() {
            match part {
                Component::RootDir => path.push("/"),
                Component::Normal(name) => path.push(name),
                Component::CurDir => {}
                Component::ParentDir | Component::Prefix(_) => return None,
            }
        }
        path.file_name().is_some().then_some(path)
    }

    /// The names other than `real` (canonical) that the firmlinks of
    /// `table` give it: for a path at or below either end of one, the
    /// same path below its other end.
    pub(super) fn names(table: &str, real: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = Vec::new();
        for (system, data) in links(table) {
            for (end, other) in [(&system, &data), (&data, &system)] {
                let Ok(rest) = real.strip_prefix(end) else {
                    continue;
                };
                let name = joined(other, rest);
                if name != real && !found.contains(&name) {
                    found.push(name);
                }
            }
        }
        found
    }

    /// [`super::views`] through the firmlinks of `table` alone, as pairs
    /// of a path and the folder below `real` (canonical) it shows: each of
    /// `real`'s [`names`] with an empty one, and the other end of each
    /// firmlink with an end inside `real` (a data dir at
    /// `/System/Volumes/Data/usr` shows its `local` at `/usr/local`).
    pub(super) fn views(table: &str, real: &Path) -> Vec<(PathBuf, PathBuf)> {
        let mut found: Vec<(PathBuf, PathBuf)> = names(table, real)
            .into_iter()
            .map(|name| (name, PathBuf::new()))
            .collect();
        for (system, data) in links(table) {
            for (end, other) in [(&system, &data), (&data, &system)] {
                let Ok(sub) = end.strip_prefix(real) else {
                    continue;
                };
                // `real` itself is among its names; a name under `real` is
                // `real`'s own path.
                if sub.as_os_str().is_empty() || other.starts_with(real) {
                    continue;
                }
                let view = (other.clone(), sub.to_owned());
                if !found.contains(&view) {
                    found.push(view);
                }
            }
        }
        found
    }
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

    /// A firmlinks table as `/usr/share/firmlinks` has it, with trailing
    /// slashes, a comment, a blank line and lines that are not firmlinks.
    const FIRMLINKS: &str = "\
# firmlinks
/Users/\tUsers/

/Applications\tApplications
/usr/local\tusr/local
/System/Library/Caches\tSystem/Library/Caches
/Library\tLibrary\tignored
no tab at all
relative\trelative
/absolute\t/absolute
/parent\t../parent
/\troot
/empty\t
\tempty
";

    fn names_of(table: &str, real: &str) -> Vec<String> {
        paths(firmlink::names(table, Path::new(real)))
    }

    #[test]
    fn a_path_below_a_firmlink_is_also_named_on_the_data_volume() {
        for (real, other) in [
            ("/Users/a/data", "/System/Volumes/Data/Users/a/data"),
            (
                "/usr/local/lib/x/y",
                "/System/Volumes/Data/usr/local/lib/x/y",
            ),
            (
                "/System/Library/Caches/c",
                "/System/Volumes/Data/System/Library/Caches/c",
            ),
            ("/Library/k", "/System/Volumes/Data/Library/k"),
        ] {
            assert_eq!(names_of(FIRMLINKS, real), [other], "{real}");
        }
    }

    #[test]
    fn a_path_on_the_data_volume_below_a_firmlink_is_also_named_at_the_firmlink() {
        for (real, other) in [
            ("/System/Volumes/Data/Users/a/data", "/Users/a/data"),
            ("/System/Volumes/Data/usr/local/lib/x", "/usr/local/lib/x"),
            (
                "/System/Volumes/Data/System/Library/Caches/c",
                "/System/Library/Caches/c",
            ),
        ] {
            assert_eq!(names_of(FIRMLINKS, real), [other], "{real}");
        }
    }

    #[test]
    fn either_end_of_a_firmlink_is_named_at_the_other() {
        assert_eq!(
            names_of(FIRMLINKS, "/Users"),
            ["/System/Volumes/Data/Users"]
        );
        assert_eq!(
            names_of(FIRMLINKS, "/System/Volumes/Data/usr/local"),
            ["/usr/local"]
        );
    }

    #[test]
    fn a_path_outside_every_firmlink_has_no_other_name() {
        for real in [
            "/usr/bin/env",
            "/usr",
            "/System/Volumes/Data/sw/data",
            "/System/Volumes/Data/usr",
            "/System/Volumes/Data",
            "/System",
            "/",
        ] {
            assert!(names_of(FIRMLINKS, real).is_empty(), "{real}");
        }
    }

    #[test]
    fn a_path_that_only_begins_with_the_letters_of_a_firmlink_is_not_below_it() {
        for real in [
            "/Usersfoo",
            "/Usersfoo/a",
            "/usr/localx/y",
            "/System/Volumes/Data/Usersfoo/a",
            "/System/Volumes/DataX/Users/a",
        ] {
            assert!(names_of(FIRMLINKS, real).is_empty(), "{real}");
        }
    }

    #[test]
    fn lines_of_a_firmlinks_table_that_are_not_firmlinks_are_left_out() {
        for line in [
            "",
            "   ",
            "# /Users\tUsers",
            "no tab at all",
            "/Users",
            "relative\trelative",
            "/absolute\t/absolute",
            "/parent\t../parent",
            "/..\tparent",
            "/\troot",
            "/empty\t",
            "\tempty",
        ] {
            assert_eq!(firmlink::parse(line), None, "{line:?}");
        }
        // None of them gives a name; the lines around them still do.
        for real in ["/absolute/x", "/parent/x", "/relative/x", "/root/x"] {
            assert!(names_of(FIRMLINKS, real).is_empty(), "{real}");
        }
        assert_eq!(
            firmlink::parse("/Users//\t./Users/\r"),
            Some((PathBuf::from("/Users"), PathBuf::from("Users")))
        );
    }

    fn firmlink_views_of(table: &str, real: &str) -> Vec<(String, String)> {
        firmlink::views(table, Path::new(real))
            .into_iter()
            .map(|(p, s)| (p.display().to_string(), s.display().to_string()))
            .collect()
    }

    #[test]
    fn a_data_dir_is_seen_at_its_firmlink_names_and_at_the_firmlinks_inside_it() {
        let pair = |p: &str, s: &str| (p.to_owned(), s.to_owned());
        assert_eq!(
            firmlink_views_of(FIRMLINKS, "/Users/a/data"),
            [pair("/System/Volumes/Data/Users/a/data", "")]
        );
        assert_eq!(
            firmlink_views_of(FIRMLINKS, "/System/Volumes/Data/usr"),
            [pair("/usr/local", "local")]
        );
        assert_eq!(
            firmlink_views_of(FIRMLINKS, "/usr"),
            [pair("/System/Volumes/Data/usr/local", "local")]
        );
        // The data volume is inside `/System`, and `/Users` shows a part.
        let got = firmlink_views_of(FIRMLINKS, "/System");
        assert!(
            got.contains(&pair("/Users", "Volumes/Data/Users")),
            "{got:?}"
        );
        // Both ends inside it: each is under its own path already.
        assert!(
            !got.iter().any(|(p, _)| p.starts_with("/System")),
            "{got:?}"
        );
        assert!(firmlink_views_of(FIRMLINKS, "/").is_empty());
        assert!(firmlink_views_of(FIRMLINKS, "/System/Volumes/Data/sw").is_empty());
    }

    #[test]
    fn every_line_of_the_built_in_firmlinks_table_is_a_firmlink() {
        let lines: Vec<&str> = firmlink::BUILT_IN.lines().collect();
        assert!(lines.len() >= 9, "{lines:?}");
        for line in lines {
            let (system, target) = firmlink::parse(line).expect(line);
            assert_eq!(Path::new("/").join(&target), system, "{line}");
        }
        assert_eq!(
            names_of(firmlink::BUILT_IN, "/private/tmp/x"),
            ["/System/Volumes/Data/private/tmp/x"]
        );
        assert!(firmlink::table().ends_with(firmlink::BUILT_IN));
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn no_firmlink_is_looked_for_on_a_system_other_than_macos() {
        assert_eq!(firmlink_table(), None);
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
