//! `disk_bytes` for host folders: a watcher that ends the run past the limit.
//!
//! A fresh workspace is a tmpfs of `disk_bytes` (see [`crate::launch`]),
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
//! several links counts once. The walk never follows a symlink. Between two
//! measurements a command can write more than the limit: the interval is
//! [`MIN_INTERVAL`], or four times the last walk's duration when the tree is
//! large (so the watcher costs at most a fifth of a core), and
//! `file_size_bytes` caps each single file.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
                let baseline = usage(&dirs);
                let mut interval = MIN_INTERVAL;
                loop {
                    match stopped.recv_timeout(interval) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let started = Instant::now();
                    let now = usage(&dirs);
                    if now.saturating_sub(baseline) > limit {
                        flag.store(true, Ordering::SeqCst);
                        cancel.cancel();
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

/// Bytes the trees below `dirs` occupy (see the module docs).
pub fn usage(dirs: &[PathBuf]) -> u64 {
    let mut seen = HashSet::new();
    dirs.iter().map(|d| tree_usage(d, &mut seen)).sum()
}

fn tree_usage(dir: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // lstat: a symlink is counted as itself, never followed.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total += (meta.blocks() * 512).max(MIN_ENTRY);
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_blocks_entries_and_links_once() {
        let d = tempfile::tempdir().unwrap();
        let empty = usage(&[d.path().to_owned()]);
        assert_eq!(empty, 0);
        fs::write(d.path().join("a"), vec![1u8; 100_000]).unwrap();
        let one = usage(&[d.path().to_owned()]);
        assert!(one >= 100_000, "{one}");
        fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
        assert_eq!(usage(&[d.path().to_owned()]), one);
        for i in 0..10 {
            fs::write(d.path().join(format!("e{i}")), b"").unwrap();
        }
        assert_eq!(usage(&[d.path().to_owned()]), one + 10 * MIN_ENTRY);
        std::os::unix::fs::symlink("/usr", d.path().join("l")).unwrap();
        assert_eq!(usage(&[d.path().to_owned()]), one + 11 * MIN_ENTRY);
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
}
