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
//! symlink is followed; a folder it cannot open or read (hidden with
//! `chmod 0`, or vanishing mid-walk aside) counts as over the limit: it
//! fails closed. A last measurement is taken when the command has ended.
//!
//! This is a best-effort bound, not a quota. Between two measurements a
//! command can write more than the limit: the interval is [`MIN_INTERVAL`],
//! or four times the last walk's duration when the tree is large (so the
//! watcher costs at most a fifth of a core); `file_size_bytes` caps each
//! single file, and seccomp refuses `fallocate` with `FALLOC_FL_KEEP_SIZE`,
//! which would allocate past it. Files unlinked while held open are not
//! seen while they are open.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::supervise::Cancel;

/// The shortest time between two measurements.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest time between two measurements.
const MAX_INTERVAL: Duration = Duration::from_secs(2);
/// What one entry costs at least.
const MIN_ENTRY: u64 = 4096;

/// A running watcher.
#[derive(Debug)]
pub struct DiskWatch {
    /// Dropping it wakes and ends the thread.
    stop: mpsc::Sender<()>,
    hit: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl DiskWatch {
    /// Starts watching `dirs`; past `limit` bytes over the baseline, flips
    /// `cancel`.
    pub fn start(dirs: Vec<PathBuf>, limit: u64, cancel: Arc<Cancel>) -> DiskWatch {
        let (stop, stopped) = mpsc::channel::<()>();
        let hit = Arc::new(AtomicBool::new(false));
        let flag = hit.clone();
        let thread = std::thread::Builder::new()
            .name("disk-watch".into())
            .spawn(move || {
                // What is there before the command writes (unreadable
                // parts of it are the job's own, counted as nothing).
                let baseline = usage(&dirs).unwrap_or(0);
                let mut interval = MIN_INTERVAL;
                loop {
                    // Woken early (or not) when the command has ended:
                    // measure once more either way.
                    let ended = !matches!(
                        stopped.recv_timeout(interval),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    );
                    let started = Instant::now();
                    let over =
                        usage(&dirs).map_or(true, |now| now.saturating_sub(baseline) > limit);
                    if over {
                        flag.store(true, Ordering::SeqCst);
                        cancel.cancel();
                        return;
                    }
                    if ended {
                        return;
                    }
                    interval = (started.elapsed() * 4).clamp(MIN_INTERVAL, MAX_INTERVAL);
                }
            })
            .expect("spawning a thread");
        DiskWatch { stop, hit, thread }
    }

    /// Ends the watcher; whether it found the limit passed.
    pub fn stop(self) -> bool {
        drop(self.stop);
        let _ = self.thread.join();
        self.hit.load(Ordering::SeqCst)
    }
}

/// Bytes the trees below `dirs` occupy (see the module docs); `None` when
/// part of a tree could not be read.
pub fn usage(dirs: &[PathBuf]) -> Option<u64> {
    let mut seen = HashSet::new();
    let mut total = 0;
    for dir in dirs {
        let root = crate::fsx::open_dir_nofollow(dir).ok()?;
        total += tree_usage(root, &mut seen)?;
    }
    Some(total)
}

/// Walks below the open folder `root` through directory handles.
fn tree_usage(root: File, seen: &mut HashSet<(u64, u64)>) -> Option<u64> {
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let mut names = Vec::new();
        {
            let mut listing = nix::dir::Dir::from_fd(dir.try_clone().ok()?.into()).ok()?;
            for entry in listing.iter() {
                let entry = entry.ok()?;
                let name = entry.file_name().to_bytes();
                if name != b"." && name != b".." {
                    names.push(std::ffi::OsStr::from_bytes(name).to_owned());
                }
            }
        }
        for name in names {
            let meta = match nix::sys::stat::fstatat(
                dir.as_fd(),
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(m) => m,
                Err(nix::errno::Errno::ENOENT) => continue, // removed meanwhile
                Err(_) => return None,
            };
            let is_dir = meta.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if meta.st_nlink > 1
                && !is_dir
                && !seen.insert((meta.st_dev as u64, meta.st_ino as u64))
            {
                continue;
            }
            total += (meta.st_blocks as u64 * 512).max(MIN_ENTRY);
            if is_dir {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match openat(dir.as_fd(), name.as_os_str(), flags, Mode::empty()) {
                    Ok(fd) => stack.push(File::from(fd)),
                    Err(nix::errno::Errno::ENOENT) => {}
                    Err(_) => return None,
                }
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs;

    #[test]
    fn counts_blocks_entries_and_links_once() {
        let d = tempfile::tempdir().unwrap();
        let empty = usage(&[d.path().to_owned()]).unwrap();
        assert_eq!(empty, 0);
        fs::write(d.path().join("a"), vec![1u8; 100_000]).unwrap();
        let one = usage(&[d.path().to_owned()]).unwrap();
        assert!(one >= 100_000, "{one}");
        fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
        assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one);
        for i in 0..10 {
            fs::write(d.path().join(format!("e{i}")), b"").unwrap();
        }
        assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one + 10 * MIN_ENTRY);
        std::os::unix::fs::symlink("/usr", d.path().join("l")).unwrap();
        assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one + 11 * MIN_ENTRY);
    }

    #[test]
    fn flips_the_switch_past_the_limit_and_only_then() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("before"), vec![1u8; 1 << 20]).unwrap();
        let cancel = Cancel::new().unwrap();
        let w = DiskWatch::start(vec![d.path().to_owned()], 512 << 10, cancel.clone());
        // Under the limit over the baseline: nothing happens.
        std::thread::sleep(MIN_INTERVAL * 3);
        fs::write(d.path().join("small"), vec![1u8; 100 << 10]).unwrap();
        std::thread::sleep(MIN_INTERVAL * 3);
        assert!(!w.hit.load(Ordering::SeqCst));
        fs::write(d.path().join("big"), vec![1u8; 1 << 20]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !w.hit.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(MIN_INTERVAL);
        }
        assert!(
            w.stop(),
            "the watcher did not see 1 MiB over a 512 KiB limit"
        );
    }

    #[test]
    fn a_last_measurement_is_taken_when_the_command_ends() {
        let d = tempfile::tempdir().unwrap();
        let cancel = Cancel::new().unwrap();
        let w = DiskWatch::start(vec![d.path().to_owned()], 512 << 10, cancel);
        std::thread::sleep(MIN_INTERVAL / 2);
        fs::write(d.path().join("big"), vec![1u8; 1 << 20]).unwrap();
        // Stopped before the next periodic measurement could see it.
        assert!(w.stop());
    }

    #[test]
    fn deep_trees_are_walked_and_unreadable_folders_fail_closed() {
        let d = tempfile::tempdir().unwrap();
        // 25 levels of 200-byte names: deeper than PATH_MAX in total, so
        // made (and walked) relative to directory handles.
        let name = "x".repeat(200);
        let mut dir = File::open(d.path()).unwrap();
        for _ in 0..25 {
            nix::sys::stat::mkdirat(dir.as_fd(), name.as_str(), Mode::from_bits_truncate(0o755))
                .unwrap();
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
            dir = File::from(openat(dir.as_fd(), name.as_str(), flags, Mode::empty()).unwrap());
        }
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT;
        let big = openat(dir.as_fd(), "big", flags, Mode::from_bits_truncate(0o644)).unwrap();
        std::io::Write::write_all(&mut File::from(big), &vec![1u8; 1 << 20]).unwrap();
        let used = usage(&[d.path().to_owned()]).unwrap();
        assert!(used >= 1 << 20, "{used}");
        // A folder the walker cannot read is not "empty": no answer.
        // (Root reads it anyway: the check needs an ordinary user.)
        if !nix::unistd::geteuid().is_root() {
            let hidden = d.path().join("hidden");
            fs::create_dir(&hidden).unwrap();
            fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o0))
                .unwrap();
            assert_eq!(usage(&[d.path().to_owned()]), None);
        }
    }
}
