//! `disk_bytes` for host folders: a watcher that ends the run past the limit.
//!
//! A fresh workspace is a tmpfs of `disk_bytes` (see [`crate::sandbox::bwrap`]),
//! which the kernel bounds exactly. A workspace or extensions dir on the
//! host disk has no such bound short of project quotas, which few file
//! systems are mounted with. So a thread measures what the folders hold:
//! once at the start (the baseline, taken while the command starts), then
//! again and again; when they hold more than `disk_bytes` over the
//! baseline it flips the execution's cancel switch, and the execution is
//! reported `limit_exceeded`.
//!
//! What counts is allocated space (`st_blocks`), at least one 4 KiB block
//! per entry, so a flood of empty files or folders counts too; a file with
//! several links counts once. The walk goes through directory handles
//! (`openat` with `O_NOFOLLOW`), so no path grows past `PATH_MAX` and no
//! symlink is followed, and it holds at most [`MAX_OPEN`] of them at once
//! however wide or deep the tree: folders still to visit are kept as
//! names, and a cursor moves from one to the next (see `Tree`).
//!
//! Two kinds of failure, told apart by the errno:
//! - a folder the walker may not open or read (hidden with `chmod 0`,
//!   swapped for a symlink mid-walk: `EACCES`, `EPERM`, `ELOOP`,
//!   `ENOTDIR`) is the command's doing and counts as over the limit: the
//!   watcher fails closed ([`Verdict::Over`]); a folder that vanishes
//!   mid-walk is skipped;
//! - any other error (out of descriptors or memory, an I/O error) is the
//!   watcher's own: the run is stopped all the same, since the limit can
//!   no longer be enforced, but reported as the runner's failure
//!   ([`Verdict::Failed`]: `failed`, `runner_failed`), never as the
//!   command's limit.
//!
//! A last measurement is taken when the command has ended.
//!
//! This is a best-effort bound, not a quota. Between two measurements a
//! command can write more than the limit: the interval is [`MIN_INTERVAL`],
//! or four times the last walk's duration when the tree is large (so the
//! watcher costs at most a fifth of a core); `file_size_bytes` caps each
//! single file, and seccomp refuses `fallocate` with `FALLOC_FL_KEEP_SIZE`,
//! which would allocate past it. Files unlinked while held open are not
//! seen while they are open.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::supervise::Cancel;

/// The shortest time between two measurements.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest time between two measurements.
const MAX_INTERVAL: Duration = Duration::from_secs(2);
/// What one entry costs at least.
const MIN_ENTRY: u64 = 4096;
/// Most directory handles a walk holds open at once: the root's, the
/// cursor's, and the next cursor's or the listing's.
pub const MAX_OPEN: usize = 3;

/// Why a measurement has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    /// The command made part of its tree unreadable to the runner.
    #[error("{path} could not be read ({errno}), which counts as over the limit")]
    Hidden { path: String, errno: Errno },
    /// The watcher itself failed.
    #[error("the disk watcher could not measure {path}: {errno}")]
    Own { path: String, errno: Errno },
}

impl WalkError {
    fn of(errno: Errno, path: String) -> WalkError {
        match errno {
            Errno::EACCES | Errno::EPERM | Errno::ELOOP | Errno::ENOTDIR => {
                WalkError::Hidden { path, errno }
            }
            _ => WalkError::Own { path, errno },
        }
    }
}

/// What the watcher concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The folders stayed within the limit.
    Within,
    /// The command passed the limit (or hid part of its tree).
    Over,
    /// The watcher failed on its own (the message says how); the run was
    /// stopped, as the limit could no longer be enforced.
    Failed(String),
}

/// A running watcher.
#[derive(Debug)]
pub struct DiskWatch {
    /// Dropping it wakes and ends the thread.
    stop: mpsc::Sender<()>,
    verdict: Arc<Mutex<Verdict>>,
    thread: JoinHandle<()>,
}

type Measure = Box<dyn FnMut(&[PathBuf]) -> Result<u64, WalkError> + Send>;

impl DiskWatch {
    /// Starts watching `dirs`; past `limit` bytes over the baseline, or
    /// when it can no longer measure, flips `cancel`.
    pub fn start(dirs: Vec<PathBuf>, limit: u64, cancel: Arc<Cancel>) -> DiskWatch {
        Self::start_with(dirs, limit, cancel, Box::new(|d: &[PathBuf]| usage(d)))
    }

    /// Like [`DiskWatch::start`], but past `limit` bytes in all: what the
    /// folders held before counts too (a session's managed workspace).
    pub fn start_whole(dirs: Vec<PathBuf>, limit: u64, cancel: Arc<Cancel>) -> DiskWatch {
        let measure = |d: &[PathBuf]| usage(d);
        let mut first = true;
        let measure: Measure = Box::new(move |d: &[PathBuf]| {
            // The baseline is nothing: the first walk is taken as 0.
            if std::mem::take(&mut first) {
                return Ok(0);
            }
            measure(d)
        });
        Self::start_with(dirs, limit, cancel, measure)
    }

    fn start_with(
        dirs: Vec<PathBuf>,
        limit: u64,
        cancel: Arc<Cancel>,
        mut measure: Measure,
    ) -> DiskWatch {
        let (stop, stopped) = mpsc::channel::<()>();
        let verdict = Arc::new(Mutex::new(Verdict::Within));
        let said = verdict.clone();
        let thread = std::thread::Builder::new()
            .name("disk-watch".into())
            .spawn(move || {
                let end = |v: Verdict| {
                    *said.lock().unwrap_or_else(|p| p.into_inner()) = v;
                    cancel.cancel();
                };
                // What is there before the command writes (unreadable
                // parts of it are the job's own, counted as nothing).
                let baseline = match measure(&dirs) {
                    Ok(b) => b,
                    Err(WalkError::Hidden { .. }) => 0,
                    Err(e @ WalkError::Own { .. }) => return end(Verdict::Failed(e.to_string())),
                };
                let mut interval = MIN_INTERVAL;
                loop {
                    // Woken early (or not) when the command has ended:
                    // measure once more either way.
                    let ended = !matches!(
                        stopped.recv_timeout(interval),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    );
                    let started = Instant::now();
                    match measure(&dirs) {
                        Ok(now) if now.saturating_sub(baseline) <= limit => {}
                        Ok(_) | Err(WalkError::Hidden { .. }) => return end(Verdict::Over),
                        Err(e @ WalkError::Own { .. }) => {
                            tracing::warn!(error = %e, "disk watcher failed; stopping the run");
                            return end(Verdict::Failed(e.to_string()));
                        }
                    }
                    if ended {
                        return;
                    }
                    interval = (started.elapsed() * 4).clamp(MIN_INTERVAL, MAX_INTERVAL);
                }
            })
            .expect("spawning a thread");
        DiskWatch {
            stop,
            verdict,
            thread,
        }
    }

    #[cfg(test)]
    fn concluded(&self) -> Verdict {
        self.verdict.lock().unwrap().clone()
    }

    /// Ends the watcher; what it concluded.
    pub fn stop(self) -> Verdict {
        drop(self.stop);
        let _ = self.thread.join();
        let v = self.verdict.lock().unwrap_or_else(|p| p.into_inner());
        v.clone()
    }
}

/// Bytes the trees below `dirs` occupy (see the module docs).
pub fn usage(dirs: &[PathBuf]) -> Result<u64, WalkError> {
    let mut seen = HashSet::new();
    let mut total = 0;
    for dir in dirs {
        let root = crate::fsx::open_dir_nofollow(dir)
            .map_err(|e| WalkError::of(errno_of(&e), dir.display().to_string()))?;
        total += Tree::new(root, dir.display().to_string())?.walk(&mut seen)?;
    }
    Ok(total)
}

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// A folder to visit: its name in its parent, and what it was when listed.
struct Node {
    /// `None`: the root.
    parent: Option<Rc<Node>>,
    name: OsString,
    depth: usize,
    /// (device, inode), to know that `..` led back to this folder.
    id: (u64, u64),
}

/// One tree's walk. It holds the root's handle and one cursor, the folder
/// last reached, and moves the cursor from folder to folder: up through
/// `..` (checked to be the folder it left, by device and inode; else again
/// from the root by name), down by name. In the depth-first order of the
/// walk every folder is entered and left about once, so the walk costs
/// about one `openat` per folder, however deep.
struct Tree {
    root: File,
    root_name: String,
    cur: Rc<Node>,
    /// `None`: the cursor is at the root.
    cur_fd: Option<File>,
}

impl Tree {
    fn new(root: File, root_name: String) -> Result<Tree, WalkError> {
        let st = nix::sys::stat::fstat(root.as_fd()).map_err(|e| WalkError::Own {
            path: root_name.clone(),
            errno: e,
        })?;
        let node = Rc::new(Node {
            parent: None,
            name: OsString::new(),
            depth: 0,
            id: (st.st_dev as u64, st.st_ino as u64),
        });
        Ok(Tree {
            root,
            root_name,
            cur: node,
            cur_fd: None,
        })
    }

    fn fd(&self) -> &File {
        self.cur_fd.as_ref().unwrap_or(&self.root)
    }

    fn path_of(&self, node: &Node) -> String {
        let mut names = Vec::new();
        let mut at = Some(node);
        while let Some(n) = at.filter(|n| n.depth > 0) {
            names.push(n.name.clone());
            at = n.parent.as_deref();
        }
        let mut p = PathBuf::from(&self.root_name);
        p.extend(names.iter().rev());
        p.display().to_string()
    }

    /// The cursor into its child `node`; `false` when that vanished.
    fn down(&mut self, node: &Rc<Node>) -> Result<bool, WalkError> {
        match openat(
            self.fd().as_fd(),
            node.name.as_os_str(),
            DIR_FLAGS,
            Mode::empty(),
        ) {
            Ok(fd) => {
                self.cur_fd = Some(File::from(fd));
                self.cur = node.clone();
                Ok(true)
            }
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(WalkError::of(e, self.path_of(node))),
        }
    }

    /// The cursor to its parent; `false` when `..` is no longer that
    /// folder (the tree was rearranged), and the cursor is back at the root.
    fn up(&mut self) -> Result<bool, WalkError> {
        let parent = self
            .cur
            .parent
            .clone()
            .expect("the walk never leaves its root");
        if parent.depth == 0 {
            self.cur = parent;
            self.cur_fd = None;
            return Ok(true);
        }
        let same = match openat(self.fd().as_fd(), "..", DIR_FLAGS, Mode::empty()) {
            Ok(fd) => {
                let fd = File::from(fd);
                let st = nix::sys::stat::fstat(fd.as_fd())
                    .map_err(|e| WalkError::of(e, self.path_of(&parent)))?;
                ((st.st_dev as u64, st.st_ino as u64) == parent.id).then_some(fd)
            }
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(WalkError::of(e, self.path_of(&parent))),
        };
        match same {
            Some(fd) => {
                self.cur = parent;
                self.cur_fd = Some(fd);
                Ok(true)
            }
            None => {
                self.cur_fd = None;
                while self.cur.depth > 0 {
                    self.cur = self.cur.parent.clone().expect("depth > 0 has a parent");
                }
                Ok(false)
            }
        }
    }

    /// Moves the cursor to `target`; `false` when it vanished.
    fn reach(&mut self, target: &Rc<Node>) -> Result<bool, WalkError> {
        let mut path = Vec::new();
        let mut b = target.clone();
        while b.depth > self.cur.depth {
            path.push(b.clone());
            b = b.parent.clone().expect("depth > 0 has a parent");
        }
        let mut rearranged = false;
        while !rearranged && self.cur.depth > b.depth {
            rearranged = !self.up()?;
        }
        while !rearranged && !Rc::ptr_eq(&self.cur, &b) {
            rearranged = !self.up()?;
            path.push(b.clone());
            b = b.parent.clone().expect("depth > 0 has a parent");
        }
        if rearranged {
            // From the root, by name.
            path.clear();
            let mut n = target.clone();
            while n.depth > 0 {
                path.push(n.clone());
                n = n.parent.clone().expect("depth > 0 has a parent");
            }
        }
        for step in path.iter().rev() {
            if !self.down(step)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn walk(mut self, seen: &mut HashSet<(u64, u64)>) -> Result<u64, WalkError> {
        let mut total = 0;
        let mut stack = vec![self.cur.clone()];
        while let Some(node) = stack.pop() {
            if !self.reach(&node)? {
                continue; // removed meanwhile
            }
            let err = |e: Errno| WalkError::of(e, self.path_of(&node));
            let mut names = Vec::new();
            {
                let dup = self.fd().try_clone().map_err(|e| err(errno_of(&e)))?;
                let mut listing = nix::dir::Dir::from_fd(dup.into()).map_err(err)?;
                for entry in listing.iter() {
                    let entry = entry.map_err(err)?;
                    let name = entry.file_name().to_bytes();
                    if name != b"." && name != b".." {
                        names.push(std::ffi::OsStr::from_bytes(name).to_owned());
                    }
                }
            }
            for name in names {
                let meta = match nix::sys::stat::fstatat(
                    self.fd().as_fd(),
                    name.as_os_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                ) {
                    Ok(m) => m,
                    Err(Errno::ENOENT) => continue, // removed meanwhile
                    Err(e) => return Err(err(e)),
                };
                let is_dir = meta.st_mode & libc::S_IFMT == libc::S_IFDIR;
                let id = (meta.st_dev as u64, meta.st_ino as u64);
                if meta.st_nlink > 1 && !is_dir && !seen.insert(id) {
                    continue;
                }
                total += (meta.st_blocks as u64 * 512).max(MIN_ENTRY);
                if is_dir {
                    stack.push(Rc::new(Node {
                        parent: Some(node.clone()),
                        name,
                        depth: node.depth + 1,
                        id,
                    }));
                }
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
#[path = "diskwatch_tests.rs"]
mod tests;
