//! A small mount namespace for bubblewrap to start in (docs/template.md).
//!
//! bubblewrap reads the whole mount table once for every bind it makes
//! and copies the whole table when it makes the sandbox's namespace, so
//! every mount of the host costs every sandbox, whether the sandbox sees
//! it or not (a container host has hundreds). The daemon makes, once, a
//! namespace that holds only what sandboxes bind: a read-only tmpfs root
//! with recursive binds of a few *roots* at their own paths (`/usr`,
//! `/dev`, `/proc`, the data dir, the job roots, any other profile
//! source) and the host's top-level symlinks (`/lib64 -> usr/lib64`, for
//! bubblewrap's own loader). Each launch joins it (`setns`, in the child,
//! before bubblewrap's `exec`) when it holds every path the launch binds;
//! otherwise that launch starts in the host's namespace, as without one.
//! What a sandbox sees is unchanged: bubblewrap binds the same objects,
//! with the same mounts below them.
//!
//! Invariants:
//! - a launch joins a template only if every path it binds resolves there
//!   to the object it names on the host: folders (opened without
//!   symlinks, so canonical) lie under a root and have their descriptor's
//!   device and inode there; every other source and bubblewrap itself
//!   resolve to the same device and inode, or are missing in both
//!   ([`Template::covers`]). Only such sources become new roots, never
//!   folders;
//! - the template is private: no mount of the host reaches it. Any change
//!   of the host's mount table (seen by `poll` on its `mountinfo`, by a
//!   watcher thread and at each launch) drops it, and the next launch
//!   makes a new one;
//! - nothing is made on the host: roots are opened without following a
//!   symlink, mount points are made in the template's own tmpfs, never
//!   through a symlink or below a root, with the modes and owners of the
//!   host's folders above each root;
//! - a template is used only where the runner may make and join one
//!   (`CAP_SYS_ADMIN` and `CAP_SYS_CHROOT`, as root or as root of a user
//!   namespace; each new one is joined once first) and only where
//!   [`enable`]d: by the daemon, and by `run` for the escape suite;
//!   elsewhere bubblewrap starts in the runner's own namespace.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The most roots one template holds; past it, launches that need more
/// start in the host's namespace.
const MAX_ROOTS: usize = 32;
/// The most sources whose check one template remembers.
const MAX_CHECKED: usize = 256;

/// Launches started in a template, and in the runner's own namespace
/// while templates are enabled (`/metrics`).
static IN_TEMPLATE: AtomicU64 = AtomicU64::new(0);
static IN_HOST: AtomicU64 = AtomicU64::new(0);
/// Templates made.
static BUILT: AtomicU64 = AtomicU64::new(0);

/// `(launches in a template, launches in the host's namespace, templates
/// made)` since the daemon started.
pub fn counts() -> (u64, u64, u64) {
    (
        IN_TEMPLATE.load(Ordering::Relaxed),
        IN_HOST.load(Ordering::Relaxed),
        BUILT.load(Ordering::Relaxed),
    )
}

/// The paths one launch makes bubblewrap bind or run.
#[derive(Debug, Default)]
pub struct Needs<'a> {
    /// The folders handed over on descriptors: each canonical path (no
    /// symlink, no `..`) and the `(dev, ino)` of its descriptor.
    pub folders: Vec<(&'a Path, (u64, u64))>,
    /// Paths bubblewrap resolves itself, following symlinks: the
    /// profile's sources and bubblewrap's own program.
    pub sources: Vec<&'a Path>,
}

/// One template namespace.
#[derive(Debug)]
pub struct Template {
    ns: Arc<OwnedFd>,
    /// Its root (`O_PATH`), where sources are resolved to check them.
    root: OwnedFd,
    roots: Vec<PathBuf>,
    /// Source path to the host's `(dev, ino)` it was checked with (`None`:
    /// missing) and whether the template resolves it to the same.
    checked: Mutex<HashMap<PathBuf, Checked>>,
}

/// A source's host object when it was checked (`(dev, ino)`, `None`:
/// missing), and whether the template resolved it to the same.
type Checked = (Option<(u64, u64)>, bool);

/// What [`Template::covers`] found.
#[derive(Debug, PartialEq, Eq)]
enum Cover {
    Yes,
    /// Not held; a template with these roots added would hold it.
    Add(Vec<PathBuf>),
    /// A folder under a root is another object here than on the host: a
    /// root was replaced on the host since the template was made.
    Stale,
    No,
}

impl Template {
    /// The namespace's descriptor, for `setns` in the launch's child.
    pub fn ns(&self) -> Arc<OwnedFd> {
        self.ns.clone()
    }

    fn covers(&self, needs: &Needs<'_>) -> Cover {
        for &(f, host) in &needs.folders {
            // A folder outside the roots is not added: folders come and go
            // (an environment build's), roots stay.
            if !f.is_absolute()
                || !canonical_form(f)
                || !self.roots.iter().any(|r| f.starts_with(r))
            {
                return Cover::No;
            }
            if stat_in_root(&self.root, f, true).ok() != Some(host) {
                return Cover::Stale;
            }
        }
        let mut add = Vec::new();
        for s in &needs.sources {
            if self.resolves_same(s) {
                continue;
            }
            // Only a path whose every part is a real folder can be a root.
            match std::fs::canonicalize(s) {
                Ok(real) if real == *s => add.push(real),
                _ => return Cover::No,
            }
        }
        if add.is_empty() {
            Cover::Yes
        } else {
            Cover::Add(add)
        }
    }

    /// Whether `path` resolves in the template to the object it resolves
    /// to on the host, or is missing in both. Remembered with the host's
    /// object: a path that leads elsewhere on the host is checked again
    /// (below the roots the two share their file systems, so only the
    /// host's side can move).
    fn resolves_same(&self, path: &Path) -> bool {
        let host = match std::fs::metadata(path) {
            Ok(m) => Some((m.dev(), m.ino())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(_) => return false,
        };
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(seen, same)) = checked.get(path) {
            if seen == host {
                return same;
            }
        }
        let same = match (host, stat_in_root(&self.root, path, false)) {
            (Some(a), Ok(b)) => a == b,
            (None, Err(e)) => e.kind() == io::ErrorKind::NotFound,
            _ => false,
        };
        if checked.len() < MAX_CHECKED || checked.contains_key(path) {
            checked.insert(path.to_owned(), (host, same));
        }
        same
    }
}

/// No `..` (`components` already drops `.` and repeated separators):
/// `starts_with` on it means "below".
fn canonical_form(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// `(dev, ino)` of `path` resolved with `root` as `/`: through symlinks,
/// or with `no_symlinks` through none.
fn stat_in_root(root: &OwnedFd, path: &Path, no_symlinks: bool) -> io::Result<(u64, u64)> {
    let fd = crate::supervise::sys::open_in_root(root.as_fd(), path, no_symlinks)?;
    let m = File::from(fd).metadata()?;
    Ok((m.dev(), m.ino()))
}

/// The template of this daemon, once [`enable`]d.
#[derive(Debug)]
struct State {
    roots: Vec<PathBuf>,
    current: Option<Arc<Template>>,
    /// The runner's own `mountinfo`: readable for a `poll` when its mount
    /// table changes (the watcher thread has a descriptor of its own).
    watch: File,
    /// The last making failed: launches start in the runner's own
    /// namespace until the host's mount table changes.
    broken: bool,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes launches start in a template holding `roots` (and `/usr`,
/// `/dev`, `/proc`); `Err` says why none can be made here, and launches
/// then start in the runner's own namespace.
pub fn enable(roots: &[PathBuf]) -> io::Result<()> {
    let mut all: Vec<PathBuf> = ["/usr", "/dev", "/proc"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    // A folder not there (yet) is no root: what lies below it is not held.
    all.extend(roots.iter().filter_map(|r| std::fs::canonicalize(r).ok()));
    let watch = File::open("/proc/self/mountinfo")?;
    let watcher = File::open("/proc/self/mountinfo")?;
    let first = build(&all)?;
    *state() = Some(State {
        roots: first.roots.clone(),
        current: Some(Arc::new(first)),
        watch,
        broken: false,
    });
    // An idle daemon must not hold a file system the host unmounted: the
    // template goes as soon as the host's mount table changes.
    std::thread::Builder::new()
        .name("skill-runner-mounts".into())
        .spawn(move || loop {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut fds = [PollFd::new(watcher.as_fd(), PollFlags::POLLPRI)];
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                std::thread::sleep(std::time::Duration::from_secs(1));
                continue;
            }
            if let Some(st) = state().as_mut() {
                st.current = None;
                st.broken = false;
            }
        })?;
    Ok(())
}

/// The template this launch starts in, or `None`: the runner's own
/// namespace (templates not enabled, or none can hold what it binds).
pub fn for_launch(needs: &Needs<'_>) -> Option<Arc<Template>> {
    let mut guard = state();
    let Some(state) = guard.as_mut() else {
        IN_HOST.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    if changed(&state.watch) {
        state.current = None;
        state.broken = false;
    }
    for _ in 0..2 {
        if state.broken {
            break;
        }
        let template = match &state.current {
            Some(t) => t.clone(),
            None => match build(&state.roots) {
                Ok(t) => {
                    // Roots that are gone were left out.
                    state.roots = t.roots.clone();
                    let t = Arc::new(t);
                    state.current = Some(t.clone());
                    t
                }
                Err(e) => {
                    tracing::warn!("bubblewrap starts in the runner's own mount namespace until the host's mount table changes: cannot make a template namespace: {e}");
                    state.broken = true;
                    break;
                }
            },
        };
        match template.covers(needs) {
            Cover::Yes => {
                IN_TEMPLATE.fetch_add(1, Ordering::Relaxed);
                return Some(template);
            }
            Cover::Add(add) if state.roots.len() + add.len() <= MAX_ROOTS => {
                tracing::debug!(roots = ?add, "a launch binds paths outside the template: making one that holds them");
                state.roots.extend(add);
                state.current = None;
            }
            Cover::Stale => {
                tracing::debug!("a root was replaced on the host: making the template again");
                state.current = None;
            }
            Cover::Add(_) | Cover::No => break,
        }
    }
    IN_HOST.fetch_add(1, Ordering::Relaxed);
    None
}

/// Whether the mount table `watch` reads has changed since the last call.
fn changed(watch: &File) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(watch.as_fd(), PollFlags::POLLPRI)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR)),
        // Cannot tell: make a new one rather than trust an old one.
        Err(_) => true,
    }
}

/// `roots` sorted, without duplicates and without any root below another.
fn outermost(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut sorted: Vec<PathBuf> = roots.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for r in sorted {
        // Sorted, so an ancestor comes before everything below it.
        if !out.iter().any(|o| r.starts_with(o)) {
            out.push(r);
        }
    }
    out
}

/// The host's top-level symlinks (`/lib64 -> usr/lib64`), remade in the
/// template so that programs and loaders find their usual paths.
fn top_level_links() -> io::Result<Vec<(std::ffi::OsString, PathBuf)>> {
    let mut links = Vec::new();
    for entry in std::fs::read_dir("/")? {
        let entry = entry?;
        if entry.file_type()?.is_symlink() {
            links.push((entry.file_name(), std::fs::read_link(entry.path())?));
        }
    }
    Ok(links)
}

/// Makes a template holding `roots`, in a thread of its own: the thread
/// leaves the runner's namespace, builds the template and ends; the
/// namespace lives on in its descriptor.
fn build(roots: &[PathBuf]) -> io::Result<Template> {
    let mut roots = outermost(roots);
    if roots.iter().any(|r| !r.is_absolute() || !canonical_form(r)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a template root is not a canonical path",
        ));
    }
    // A root removed on the host (or made a symlink) is left out.
    roots.retain(|r| std::fs::symlink_metadata(r).is_ok_and(|m| !m.file_type().is_symlink()));
    let links = top_level_links()?;
    let (ns, root) = std::thread::scope(|s| {
        s.spawn(|| inside(&roots, &links))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the template's thread panicked")))
    })?;
    // Making one needs CAP_SYS_ADMIN, joining one CAP_SYS_CHROOT too: a
    // template no launch could join would fail every launch.
    std::thread::scope(|s| {
        s.spawn(|| join(&ns))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the template's thread panicked")))
    })?;
    BUILT.fetch_add(1, Ordering::Relaxed);
    Ok(Template {
        ns: Arc::new(ns),
        root,
        roots,
        checked: Mutex::new(HashMap::new()),
    })
}

/// Joins `ns` from this thread alone, as a launch's child joins it.
fn join(ns: &OwnedFd) -> io::Result<()> {
    use nix::sched::{setns, unshare, CloneFlags};
    unshare(CloneFlags::CLONE_FS)?;
    setns(ns, CloneFlags::CLONE_NEWNS)
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("joining it: {e}")))
}

/// The template's making, in the thread that enters it.
fn inside(
    roots: &[PathBuf],
    links: &[(std::ffi::OsString, PathBuf)],
) -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    let none: Option<&str> = None;
    let err = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
    };
    // This thread alone (its own fs context comes with the namespace).
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| err("unshare(CLONE_NEWNS)", e))?;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(|e| err("making the namespace private", e))?;
    let ns = OwnedFd::from(File::open("/proc/thread-self/ns/mnt")?);
    // Every source is opened before the scratch tmpfs can cover one.
    // Roots are canonical: one reached through a symlink (swapped in since
    // it was chosen) is refused, never followed.
    let slash = File::open("/")?;
    let mut sources = Vec::with_capacity(roots.len());
    for r in roots {
        let f = crate::supervise::sys::open_in_root(slash.as_fd(), r, true)
            .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", r.display())))?;
        let is_dir = File::from(f.try_clone()?).metadata()?.is_dir();
        sources.push((f, is_dir));
    }
    // The mode and owner of every folder above a root, read before the
    // scratch tmpfs covers `/tmp` (a root may lie below it).
    let mut above: HashMap<PathBuf, (u32, u32, u32)> = HashMap::new();
    for r in roots {
        for a in r.ancestors().skip(1) {
            if a == Path::new("/") || above.contains_key(a) {
                continue;
            }
            let m = std::fs::symlink_metadata(a)?;
            above.insert(a.to_owned(), (m.uid(), m.gid(), m.mode() & 0o7777));
        }
    }
    let scratch = Path::new("/tmp");
    mount(
        Some("tmpfs"),
        scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(|e| err("mounting the template's tmpfs", e))?;
    let top = File::open(scratch)?;
    let top_dev = top.metadata()?.dev();
    for (r, (src, is_dir)) in roots.iter().zip(&sources) {
        let target = mount_point(&top, top_dev, scratch, r, *is_dir, &above)?;
        let from = format!("/proc/thread-self/fd/{}", src.as_raw_fd());
        mount(
            Some(from.as_str()),
            &target,
            none,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            none,
        )
        .map_err(|e| err(&format!("binding {}", r.display()), e))?;
    }
    for (name, target) in links {
        // A root of the same name (a folder on this host) wins; /tmp is
        // always a folder (bubblewrap mounts on it).
        if name != "tmp"
            && !roots
                .iter()
                .any(|r| r.starts_with(Path::new("/").join(name)))
        {
            nix::unistd::symlinkat(target.as_path(), top.as_fd(), name.as_os_str())
                .map_err(|e| err("remaking a top-level symlink", e))?;
        }
    }
    // bubblewrap mounts its own root's tmpfs on /tmp.
    match nix::sys::stat::mkdirat(
        top.as_fd(),
        "tmp",
        nix::sys::stat::Mode::from_bits_truncate(0o755),
    ) {
        Ok(()) | Err(nix::Error::EEXIST) => {}
        Err(e) => return Err(err("making /tmp", e)),
    }
    nix::unistd::chdir(scratch).map_err(|e| err("entering the template", e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| err("pivot_root", e))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| err("leaving the host's root", e))?;
    nix::unistd::chdir("/").map_err(|e| err("entering the template", e))?;
    mount(
        none,
        "/",
        none,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        none,
    )
    .map_err(|e| err("making the template's root read-only", e))?;
    let root = nix::fcntl::open(
        "/",
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| err("opening the template's root", e))?;
    Ok((ns, root))
}

/// Makes `root`'s mount point in the scratch tmpfs (its folders, then a
/// folder or an empty file), never through a symlink and never off the
/// tmpfs; returns its path.
fn mount_point(
    top: &File,
    top_dev: u64,
    scratch: &Path,
    root: &Path,
    is_dir: bool,
    above: &HashMap<PathBuf, (u32, u32, u32)>,
) -> io::Result<PathBuf> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    let parts: Vec<&std::ffi::OsStr> = root
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        // The root of the host itself: bound over the whole scratch.
        return Ok(scratch.to_owned());
    };
    let mut dir = top.try_clone()?;
    let mut host = PathBuf::from("/");
    for name in parents {
        match mkdirat(dir.as_fd(), *name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = openat(
            dir.as_fd(),
            *name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        dir = File::from(fd);
        if dir.metadata()?.dev() != top_dev {
            return Err(io::Error::other(format!(
                "{} lies below another root",
                root.display()
            )));
        }
        // The host folder's mode and owner, so that bubblewrap, as the
        // sandbox user, passes here exactly where it passes on the host.
        host.push(name);
        let &(uid, gid, mode) = above
            .get(&host)
            .ok_or_else(|| io::Error::other(format!("no owner read for {}", host.display())))?;
        std::os::unix::fs::fchown(&dir, Some(uid), Some(gid)).or_else(|e| {
            // Root of a user namespace that maps only itself: modes still hold.
            if e.raw_os_error() == Some(libc::EINVAL) {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        dir.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    }
    if is_dir {
        mkdirat(dir.as_fd(), *last, Mode::from_bits_truncate(0o755))?;
    } else {
        openat(
            dir.as_fd(),
            *last,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o444),
        )?;
    }
    Ok(scratch.join(root.strip_prefix("/").unwrap_or(root)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn roots_below_another_root_are_dropped() {
        let got = outermost(&paths(&[
            "/var/lib/x",
            "/usr",
            "/var/lib/x/published",
            "/usr/share",
            "/dev",
            "/usr",
        ]));
        assert_eq!(got, paths(&["/dev", "/usr", "/var/lib/x"]));
        // A sibling that shares a prefix of characters is not below.
        let got = outermost(&paths(&["/data", "/data2"]));
        assert_eq!(got, paths(&["/data", "/data2"]));
        assert_eq!(outermost(&paths(&["/usr", "/"])), paths(&["/"]));
    }

    /// `CAP_SYS_ADMIN` in this process's user namespace.
    fn privileged() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caps = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .unwrap();
        u64::from_str_radix(caps.trim(), 16).unwrap() & (1 << 21) != 0
    }

    #[test]
    fn a_template_holds_its_roots_and_says_what_it_lacks() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let inside = base.join("inside");
        let outside = base.join("outside");
        std::fs::create_dir_all(inside.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("a"), "a").unwrap();
        std::fs::write(outside.join("b"), "b").unwrap();
        std::os::unix::fs::symlink("a", inside.join("to-a")).unwrap();
        std::os::unix::fs::symlink("../outside/b", inside.join("to-b")).unwrap();
        let template = match build(&[inside.clone(), PathBuf::from("/usr")]) {
            Ok(template) => template,
            Err(e) => {
                assert!(
                    !privileged(),
                    "a privileged process could not make a template: {e}"
                );
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
                return;
            }
        };
        fn folders<'a>(f: &[&'a Path]) -> Needs<'a> {
            let id = |p: &Path| {
                let m = std::fs::metadata(p).unwrap();
                (m.dev(), m.ino())
            };
            Needs {
                folders: f.iter().map(|p| (*p, id(p))).collect(),
                sources: vec![],
            }
        }
        fn sources<'a>(s: &[&'a Path]) -> Needs<'a> {
            Needs {
                folders: vec![],
                sources: s.to_vec(),
            }
        }
        assert_eq!(
            template.covers(&folders(&[&inside.join("sub")])),
            Cover::Yes
        );
        // The folders above a root have the host's modes and owners: a
        // user the host keeps out of `base` is kept out here too.
        let host = std::fs::metadata(&base).unwrap();
        let fd = crate::supervise::sys::open_in_root(template.root.as_fd(), &base, true).unwrap();
        let here = File::from(fd).metadata().unwrap();
        assert_eq!(here.mode() & 0o7777, host.mode() & 0o7777);
        assert_eq!((here.uid(), here.gid()), (host.uid(), host.gid()));
        assert_ne!(
            here.dev(),
            host.dev(),
            "a folder of the template's own tmpfs"
        );
        // Folders outside the roots are not added: they come and go.
        assert_eq!(template.covers(&folders(&[&outside])), Cover::No);
        assert_eq!(
            template.covers(&folders(&[&inside.join("sub/../../outside")])),
            Cover::No
        );
        // A folder replaced on the host since: another object there.
        std::fs::rename(inside.join("sub"), base.join("old-sub")).unwrap();
        std::fs::create_dir(inside.join("sub")).unwrap();
        let sub = inside.join("sub");
        assert_eq!(template.covers(&folders(&[&sub])), Cover::Yes);
        let old = folders(&[&base.join("old-sub")]).folders[0].1;
        let moved = Needs {
            folders: vec![(sub.as_path(), old)],
            sources: vec![],
        };
        assert_eq!(template.covers(&moved), Cover::Stale);
        std::fs::remove_dir(base.join("old-sub")).unwrap();
        // Sources resolve as bubblewrap resolves them: through symlinks.
        assert_eq!(
            template.covers(&sources(&[&inside.join("to-a")])),
            Cover::Yes
        );
        assert_eq!(
            template.covers(&sources(&[Path::new("/usr/bin/env")])),
            Cover::Yes
        );
        assert_eq!(
            template.covers(&sources(&[&inside.join("missing")])),
            Cover::Yes
        );
        // A symlink out of the roots cannot be a root itself.
        assert_eq!(
            template.covers(&sources(&[&inside.join("to-b")])),
            Cover::No
        );
        let b = outside.join("b");
        assert_eq!(
            template.covers(&sources(&[&b])),
            Cover::Add(vec![b.clone()])
        );
        // With it added, the file is there and nothing was made on the host.
        let bigger = build(&[inside.clone(), b.clone()]).unwrap();
        assert_eq!(bigger.covers(&sources(&[&b])), Cover::Yes);
        assert_eq!(bigger.covers(&sources(&[&inside.join("to-b")])), Cover::Yes);
        let mut names: Vec<_> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["inside", "outside"]);
    }

    #[test]
    fn only_canonical_forms_are_compared_by_prefix() {
        assert!(canonical_form(Path::new("/var/lib/x")));
        assert!(!canonical_form(Path::new("/var/lib/x/../../etc")));
        assert!(!canonical_form(Path::new("../x")));
    }
}
