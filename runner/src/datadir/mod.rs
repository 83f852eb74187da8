//! The runner's data dir: where it is, what is in it, and who may touch it.
//!
//! One folder holds every piece of the runner's state; each piece has one
//! method here, and no other module spells a folder name of the data dir
//! (docs/data-dir.md has the layout and the modes):
//!
//! | folder | what | mode (a root runner) | mode (others) |
//! |---|---|---|---|
//! | the data dir | everything below | 0710, group: the sandbox user's | 0700 |
//! | `store/` | the content-addressed package store | 0700 | 0700 |
//! | `published/` | verified snapshot roots bound at `/skills` | 0710 | 0700 |
//! | `executions/` | per-execution folders (workspace, tmp, network) | 0710 | 0700 |
//! | `system-views/` | the prepared copies of the sandbox's `/etc` | 0710 | 0700 |
//! | `environments/` | sealed environment trees and their records | 0710 | 0700 |
//! | `roots/` | the daemon's default job root | 0710 | 0700 |
//! | `cgroups/` | the locked folders naming pooled cgroups | 0700 | 0700 |
//! | `sessions/` | session records and event logs | 0700 | 0700 |
//! | `workspaces/` | managed session workspaces, one folder per session, the sandbox user's | 0710 | 0700 |
//! | `cache/` | the host probe, the catalog index | 0700 | 0700 |
//! | `run/` | the daemon's default socket | 0700 | 0700 |
//! | `outputs/` | the kept outputs of finished executions, one folder each | 0700 | 0700 |
//! | `keys/` | the receipt signing key (0600), never a sandbox's | 0700 | 0700 |
//!
//! A root runner launches bubblewrap as the sandbox user, which resolves
//! what it binds by path: the folders it binds from (0710) let that group
//! pass, never list. `skills/` (user skills of the catalog) is read when
//! the operator makes it, never created.
//!
//! Invariants, kept by [`DataDir::open`], which every command calls before
//! it reads or writes anything of the runner's state:
//! - the data dir, and every folder and symlink on the way to it, belongs
//!   to the runner's user or to root; no folder on the way may be written
//!   by others unless it has the sticky bit (`/tmp`), and the data dir
//!   itself by no one else at all; the data dir is not a symlink. So no
//!   other local user can swap, rename or plant anything the runner keeps;
//! - folders are made and changed through descriptors opened with
//!   `O_NOFOLLOW | O_DIRECTORY` one component at a time (`mkdirat`,
//!   `openat`, `fchown`, `fchmod`): an owner or mode is never changed
//!   through a path, so a link planted on the way cannot redirect it;
//! - the data dir and every folder of the table exist with the modes of
//!   the table once it returns, whichever command opened it;
//! - a non-root runner's default never falls back to a shared folder: with
//!   neither `XDG_STATE_HOME` nor `HOME` there is no default, and
//!   [`DataDir::open`] says what to set.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};

/// The folder of a data dir that is for jobs' own folders (the daemon's
/// default root); everything else in a data dir is the runner's state.
pub const JOB_ROOT: &str = "roots";

/// The default receipt key's file name in `keys/`.
pub const RECEIPT_KEY_FILE: &str = "receipt-ed25519.pem";

/// What to set when the data dir cannot be used.
pub const HINT: &str =
    "set --data-dir or SKILL_RUNNER_DATA_DIR to a folder this user owns (in a container: a volume or a tmpfs)";

/// Symlinks followed on the way before giving up (as the kernel's 40).
const MAX_LINKS: usize = 40;

/// Who may pass a folder of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The runner's user alone (0700).
    Private,
    /// Also the sandbox user's group of a root runner (0710).
    Sandbox,
}

/// The folders of a data dir, in the order they are made.
const LAYOUT: &[(&str, Access)] = &[
    ("store", Access::Private),
    ("published", Access::Sandbox),
    ("executions", Access::Sandbox),
    ("system-views", Access::Sandbox),
    ("environments", Access::Sandbox),
    (JOB_ROOT, Access::Sandbox),
    ("cgroups", Access::Private),
    ("sessions", Access::Private),
    ("workspaces", Access::Sandbox),
    ("cache", Access::Private),
    ("run", Access::Private),
    ("outputs", Access::Private),
    ("state", Access::Private),
    ("keys", Access::Private),
];

/// Why a data dir was refused or could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("no data dir: neither XDG_STATE_HOME nor HOME is set, and a folder shared with other users is never the default; {HINT}")]
    NoDefault,
    #[error("the data dir cannot be /; {HINT}")]
    Slash,
    #[error("cannot open {path} on the way to the data dir: {source}; {HINT}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot create {path}: {source}; {HINT}")]
    Create { path: PathBuf, source: io::Error },
    #[error("{path} is not a folder, so it cannot hold the data dir; {HINT}")]
    NotAFolder { path: PathBuf },
    #[error("{path} belongs to uid {owner}, neither this runner's user (uid {uid}) nor root: that user could replace what the runner keeps below it; {HINT}")]
    NotOwned { path: PathBuf, owner: u32, uid: u32 },
    #[error("{path} can be written by other users (mode {mode:o}) and has no sticky bit: they could swap what the runner keeps below it; chmod go-w it, or {HINT}")]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error("the data dir {path} can be written by other users (mode {mode:o}): they may have planted files in it; check that nothing in it belongs to another user and chmod 700 it, or {HINT}")]
    DataDirWritable { path: PathBuf, mode: u32 },
    #[error("{path} is a symlink: a runner never reaches its state through one; name the folder it points to as the data dir (a link in it: remove it), or {HINT}")]
    Symlink { path: PathBuf },
    #[error("{path} is a symlink owned by uid {owner}, neither this runner's user (uid {uid}) nor root: that user chooses where it leads; {HINT}")]
    ForeignLink { path: PathBuf, owner: u32, uid: u32 },
    #[error("more than {MAX_LINKS} symlinks on the way to the data dir {path}; {HINT}")]
    TooManyLinks { path: PathBuf },
    #[error("cannot give {path} to group {gid}: {source}; {}", chown_fix(.source))]
    Chown {
        path: PathBuf,
        gid: u32,
        source: io::Error,
    },
    #[error("cannot set the mode of {path}: {source}; {HINT}")]
    Chmod { path: PathBuf, source: io::Error },
}

/// What to change when a folder cannot be given its group: a root without
/// CAP_CHOWN (a container started with `--cap-drop ALL`) cannot launch as
/// the sandbox user at all.
fn chown_fix(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EPERM) {
        "a root runner needs its capabilities (CHOWN, SETUID, SETGID) to launch as the sandbox user: keep the container's default capabilities, or run the runner as a non-root user (docker run --user 1000:1000 with SKILL_RUNNER_DATA_DIR on a folder it owns)"
    } else {
        HINT
    }
}

/// The default data dir: `SKILL_RUNNER_DATA_DIR`'s fallback when no
/// `--data-dir` is given: `$XDG_STATE_HOME/skill-runner`, else
/// `/var/lib/skill-runner` for root and `$HOME/.local/state/skill-runner`
/// for others. Empty when there is none (a non-root user without either
/// variable): [`DataDir::open`] then refuses with what to set.
pub fn default_path() -> PathBuf {
    let set = |name| std::env::var_os(name).filter(|d: &OsString| !d.is_empty());
    if let Some(d) = set("XDG_STATE_HOME") {
        return PathBuf::from(d).join("skill-runner");
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/skill-runner");
    }
    match set("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/skill-runner"),
        None => PathBuf::new(),
    }
}

/// An opened, checked data dir with its layout in place.
#[derive(Debug, Clone)]
pub struct DataDir {
    /// The real path: no symlink on the way.
    path: PathBuf,
    /// The other paths it or a part of it is visible at, through other
    /// mounts, as the mount table was when it was opened
    /// ([`crate::fsx::aliases::views`]): each path with the folder below
    /// `path` it shows (empty: the data dir itself). A job's folders are
    /// checked against these as against `path`.
    views: Vec<(PathBuf, PathBuf)>,
    /// What its folders are, by device and inode, as found when it was
    /// opened: a job folder is checked against these too, so a name no
    /// view knows (a bind mount made since, another letter case on a
    /// file system that ignores it) is refused all the same.
    marks: Marks,
}

/// The device and inode of the data dir's own folders, and of the
/// folders above it.
#[derive(Debug, Clone, Default)]
struct Marks {
    /// The data dir and each folder of its layout, and whether it is the
    /// job root.
    own: Vec<((u64, u64), bool)>,
    /// Every folder above it, up to `/`.
    above: Vec<(u64, u64)>,
}

impl Marks {
    fn of(real: &Path) -> Marks {
        let own = std::iter::once((real.to_owned(), false))
            .chain(
                LAYOUT
                    .iter()
                    .map(|(name, _)| (real.join(name), *name == JOB_ROOT)),
            )
            .filter_map(|(path, jobs)| Some((identity(&path)?, jobs)))
            .collect();
        let above = real.ancestors().skip(1).filter_map(identity).collect();
        Marks { own, above }
    }

    /// [`DataDir::state_at`] by what the folders are: whether `real` is
    /// inside the data dir (`Some(true)`: one of the folders on its way is
    /// one of the data dir's, the first such not its job root) or above
    /// it (`Some(false)`: it is a folder above the data dir).
    fn state_at(&self, real: &Path) -> Option<bool> {
        let here = identity(real)?;
        if self.above.contains(&here) {
            return Some(false);
        }
        // The first folder of the data dir on the way: its job root is for
        // jobs, any other is the runner's state.
        let first = real.ancestors().find_map(|folder| {
            let id = identity(folder)?;
            self.own
                .iter()
                .find(|(own, _)| *own == id)
                .map(|(_, jobs)| *jobs)
        })?;
        (!first).then_some(true)
    }
}

/// The device and inode of `path` (no link followed).
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl DataDir {
    /// Opens the data dir at `path` (a relative one: below the current
    /// folder; empty: there is no default), creating it and every folder of the layout, after
    /// checking every folder on the way (module docs). `group` is the
    /// sandbox user's group of a root runner, which may pass the folders
    /// bubblewrap binds from.
    pub fn open(path: &Path, group: Option<u32>) -> Result<DataDir, DataDirError> {
        if path.as_os_str().is_empty() {
            return Err(DataDirError::NoDefault);
        }
        let path = &std::path::absolute(path).map_err(|source| DataDirError::Open {
            path: path.to_owned(),
            source,
        })?;
        let uid = nix::unistd::geteuid().as_raw();
        let (dir, real) = walk(path, uid)?;
        let views = crate::fsx::aliases::views(&real);
        let mut dd = DataDir {
            path: real,
            views,
            marks: Marks::default(),
        };
        let mode = if group.is_some() { 0o710 } else { 0o700 };
        settle(&dir, &dd.path, group, mode)?;
        for (name, access) in LAYOUT {
            let sub = dd.path.join(name);
            let fd = subfolder(&dir, name, &sub, uid)?;
            let (group, mode) = match (access, group) {
                (Access::Sandbox, Some(g)) => (Some(g), 0o710),
                _ => (None, 0o700),
            };
            settle(&fd, &sub, group, mode)?;
        }
        dd.marks = Marks::of(&dd.path);
        Ok(dd)
    }

    /// A data dir at `path` as it is, unchecked and not created: for
    /// showing paths (`explain`) and for tests, never for writing.
    pub fn unchecked(path: &Path) -> DataDir {
        DataDir {
            path: path.to_owned(),
            views: Vec::new(),
            marks: Marks::default(),
        }
    }

    /// The data dir itself (its real path once opened).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every path the data dir or a part of it is visible at, each with
    /// the folder below the data dir it shows: [`DataDir::path`] first
    /// (with an empty one), then other mounts (a bind mount of it, of a
    /// folder above it or of a folder inside it, and other mounts of a
    /// file system mounted inside it), as found when it was opened. No job
    /// folder may be inside or above any of them, but in the job root.
    pub fn places(&self) -> impl Iterator<Item = (&Path, &Path)> {
        std::iter::once((self.path.as_path(), Path::new("")))
            .chain(self.views.iter().map(|(p, s)| (p.as_path(), s.as_path())))
    }

    /// Whether a job's folder `real` (canonical) would hold the runner's
    /// state: under one of the data dir's names ([`DataDir::places`]),
    /// that name and whether `real` is inside it (but its job root, under
    /// the same name) rather than above it.
    ///
    /// Then by what the folders are (device and inode, as found when it
    /// was opened): a folder on `real`'s way that is the data dir or a
    /// folder of its layout (the first such, if not its job root), or
    /// `real` being a folder above the data dir, is its state under a name
    /// the views do not know; that is said under the data dir's own path.
    pub fn state_at(&self, real: &Path) -> Option<(&Path, bool)> {
        self.places()
            .find_map(|(place, part)| {
                let inside = real
                    .strip_prefix(place)
                    .is_ok_and(|rest| !part.join(rest).starts_with(JOB_ROOT));
                (inside || place.starts_with(real)).then_some((place, inside))
            })
            .or_else(|| {
                let inside = self.marks.state_at(real)?;
                Some((self.path.as_path(), inside))
            })
    }

    /// `store/`: the package store ([`crate::package::store`]).
    pub fn store(&self) -> PathBuf {
        self.path.join("store")
    }

    /// `published/`: verified snapshot roots ([`crate::package::published`]).
    pub fn published(&self) -> PathBuf {
        self.path.join("published")
    }

    /// `executions/`: one locked folder per running execution.
    pub fn executions(&self) -> PathBuf {
        self.path.join("executions")
    }

    /// `system-views/`: prepared copies of the sandbox's `/etc`.
    pub fn system_views(&self) -> PathBuf {
        self.path.join("system-views")
    }

    /// `environments/`: sealed environment trees, their records and leases
    /// ([`crate::package::environment`]).
    pub fn environments(&self) -> PathBuf {
        self.path.join("environments")
    }

    /// `roots/`: the daemon's default job root, the one folder of the data
    /// dir that is for jobs' own folders.
    pub fn job_root(&self) -> PathBuf {
        self.path.join(JOB_ROOT)
    }

    /// `cgroups/`: locked folders naming a runner's pooled cgroups, and
    /// the lock files of the cgroups `run`s share (`cgroup::Shared`).
    pub fn cgroups(&self) -> PathBuf {
        self.path.join("cgroups")
    }

    /// `sessions/`: session records and event logs.
    pub fn sessions(&self) -> PathBuf {
        self.path.join("sessions")
    }

    /// `workspaces/`: the workspaces of sessions created with
    /// `"workspace": "managed"`, one folder per session id, owned by the
    /// sandbox user (docs/workspaces.md).
    pub fn workspaces(&self) -> PathBuf {
        self.path.join("workspaces")
    }

    /// `cache/`: what can be rebuilt (host probe, catalog index).
    pub fn cache(&self) -> PathBuf {
        self.path.join("cache")
    }

    /// `state/`: the daemon's execution store (docs/durability.md).
    pub fn state(&self) -> PathBuf {
        self.path.join("state")
    }

    /// `run/`: the daemon's default socket folder.
    pub fn run(&self) -> PathBuf {
        self.path.join("run")
    }

    /// `outputs/`: the kept outputs of finished executions, one folder
    /// each ([`crate::exec::files::OutputStore`]).
    pub fn outputs(&self) -> PathBuf {
        self.path.join("outputs")
    }

    /// `skills/`: the catalog's user skills, when the operator makes it.
    pub fn skills(&self) -> PathBuf {
        self.path.join("skills")
    }

    /// The runner's keys (0700): only the receipt key so far.
    pub fn keys(&self) -> PathBuf {
        self.path.join("keys")
    }

    /// The default receipt key (docs/receipts.md), in `keys/`.
    pub fn receipt_key(&self) -> PathBuf {
        self.keys().join(crate::datadir::RECEIPT_KEY_FILE)
    }
}

fn open_err(path: &Path) -> impl FnOnce(nix::Error) -> DataDirError + '_ {
    move |e| DataDirError::Open {
        path: path.to_owned(),
        source: e.into(),
    }
}

/// Opens the folder `name` below `parent` without following a link.
fn open_child(parent: &File, name: &OsStr) -> nix::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(parent.as_fd(), name, flags, Mode::empty()).map(File::from)
}

/// The permission bits of `st` (with set-id and sticky).
// `st_mode` is a u16 on macOS, a u32 on Linux.
#[allow(clippy::useless_conversion)]
fn permissions(st: &FileStat) -> u32 {
    u32::from(st.st_mode & 0o7777)
}

fn is(st: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == kind
}

/// Refuses a folder on the way that another user owns or may write.
fn check_above(st: &FileStat, path: &Path, uid: u32) -> Result<(), DataDirError> {
    if st.st_uid != uid && st.st_uid != 0 {
        return Err(DataDirError::NotOwned {
            path: path.to_owned(),
            owner: st.st_uid,
            uid,
        });
    }
    let mode = permissions(st);
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(DataDirError::WritableByOthers {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Where a walk is: the open folder, its real path, and the folders above
/// it (to go back up on `..`).
struct Cursor {
    dir: File,
    real: PathBuf,
    above: Vec<(File, PathBuf)>,
}

impl Cursor {
    /// At `/`, checked.
    fn root(uid: u32) -> Result<Cursor, DataDirError> {
        let root = Path::new("/");
        let dir = File::open(root).map_err(|source| DataDirError::Open {
            path: root.to_owned(),
            source,
        })?;
        let st = fstat(dir.as_fd()).map_err(open_err(root))?;
        check_above(&st, root, uid)?;
        Ok(Cursor {
            dir,
            real: root.to_owned(),
            above: Vec::new(),
        })
    }

    fn up(&mut self) {
        if let Some((dir, real)) = self.above.pop() {
            self.dir = dir;
            self.real = real;
        }
    }

    fn down(&mut self, child: File, real: PathBuf) {
        let dir = std::mem::replace(&mut self.dir, child);
        let up = std::mem::replace(&mut self.real, real);
        self.above.push((dir, up));
    }

    /// The entry `name` here, made (0700 when `last`, else 0755) when it
    /// is missing; not followed.
    fn entry(&self, name: &OsStr, last: bool) -> Result<FileStat, DataDirError> {
        let next = self.real.join(name);
        match fstatat(self.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => return Ok(st),
            Err(nix::Error::ENOENT) => {}
            Err(e) => return Err(open_err(&next)(e)),
        }
        let mode = if last { 0o700 } else { 0o755 };
        match mkdirat(self.dir.as_fd(), name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => {
                return Err(DataDirError::Create {
                    path: next,
                    source: e.into(),
                })
            }
        }
        fstatat(self.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(open_err(&next))
    }
}

/// Resolves `path` one component at a time from `/`, checking each folder
/// and symlink met and creating what is missing (folders above the data
/// dir 0755, the data dir 0700). Returns the data dir's descriptor and
/// real path.
fn walk(path: &Path, uid: u32) -> Result<(File, PathBuf), DataDirError> {
    let mut at = Cursor::root(uid)?;
    let mut pending: Vec<OsString> = parts(path);
    pending.reverse();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            at.up();
            continue;
        }
        let last = pending.is_empty();
        let next = at.real.join(&name);
        let st = at.entry(&name, last)?;
        if is(&st, SFlag::S_IFLNK) {
            if last {
                return Err(DataDirError::Symlink { path: next });
            }
            if st.st_uid != uid && st.st_uid != 0 {
                return Err(DataDirError::ForeignLink {
                    path: next,
                    owner: st.st_uid,
                    uid,
                });
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(DataDirError::TooManyLinks {
                    path: path.to_owned(),
                });
            }
            let target = readlinkat(at.dir.as_fd(), name.as_os_str()).map_err(open_err(&next))?;
            let target = PathBuf::from(target);
            pending.extend(parts(&target).into_iter().rev());
            if target.is_absolute() {
                at = Cursor::root(uid)?;
            }
            continue;
        }
        if !is(&st, SFlag::S_IFDIR) {
            return Err(DataDirError::NotAFolder { path: next });
        }
        let child = open_child(&at.dir, &name).map_err(|e| match e {
            nix::Error::ELOOP | nix::Error::ENOTDIR => {
                DataDirError::NotAFolder { path: next.clone() }
            }
            e => open_err(&next)(e),
        })?;
        // What was opened is what is checked.
        let st = fstat(child.as_fd()).map_err(open_err(&next))?;
        if last {
            check_data_dir(&st, &next, uid)?;
        } else {
            check_above(&st, &next, uid)?;
        }
        at.down(child, next);
    }
    if at.above.is_empty() {
        // `/` itself (or a path that climbs back to it).
        return Err(DataDirError::Slash);
    }
    Ok((at.dir, at.real))
}

/// Refuses a data dir of another user, or one others may write.
fn check_data_dir(st: &FileStat, path: &Path, uid: u32) -> Result<(), DataDirError> {
    if st.st_uid != uid {
        return Err(DataDirError::NotOwned {
            path: path.to_owned(),
            owner: st.st_uid,
            uid,
        });
    }
    let mode = permissions(st);
    if mode & 0o022 != 0 {
        return Err(DataDirError::DataDirWritable {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// The normal components of `path` and its `..` (`.` dropped).
fn parts(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .filter(|n| !n.as_bytes().is_empty())
        .collect()
}

/// Creates (0700) or opens the folder `name` of the data dir, refusing a
/// symlink or another user's folder there.
fn subfolder(data: &File, name: &str, path: &Path, uid: u32) -> Result<File, DataDirError> {
    match mkdirat(data.as_fd(), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::Error::EEXIST) => {}
        Err(e) => {
            return Err(DataDirError::Create {
                path: path.to_owned(),
                source: e.into(),
            })
        }
    }
    let fd = open_child(data, OsStr::new(name)).map_err(|e| {
        let link = fstatat(data.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| is(&st, SFlag::S_IFLNK));
        match e {
            _ if link => DataDirError::Symlink {
                path: path.to_owned(),
            },
            nix::Error::ELOOP | nix::Error::ENOTDIR => DataDirError::NotAFolder {
                path: path.to_owned(),
            },
            e => open_err(path)(e),
        }
    })?;
    let st = fstat(fd.as_fd()).map_err(open_err(path))?;
    if st.st_uid != uid {
        return Err(DataDirError::NotOwned {
            path: path.to_owned(),
            owner: st.st_uid,
            uid,
        });
    }
    Ok(fd)
}

/// Gives the opened folder `group` (when set) and `mode`, through its
/// descriptor, changing only what differs.
fn settle(fd: &File, path: &Path, group: Option<u32>, mode: u32) -> Result<(), DataDirError> {
    let st = fstat(fd.as_fd()).map_err(open_err(path))?;
    if let Some(gid) = group.filter(|&g| g != st.st_gid) {
        nix::unistd::fchown(fd.as_fd(), None, Some(nix::unistd::Gid::from_raw(gid))).map_err(
            |e| DataDirError::Chown {
                path: path.to_owned(),
                gid,
                source: e.into(),
            },
        )?;
    }
    if permissions(&st) != mode {
        // `mode_t` is a u16 on macOS: permission bits fit.
        fchmod(fd.as_fd(), Mode::from_bits_truncate(mode as libc::mode_t)).map_err(|e| {
            DataDirError::Chmod {
                path: path.to_owned(),
                source: e.into(),
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
