//! Resource exhaustion: processes, memory, disk.
//!
//! These do not ask for permission, they use up a limit, and the test checks
//! that the runner's limit (pids, memory, file size or tmpfs size) stopped
//! them. Each one ends by itself if no limit does.
//!
//! | subcommand | does | prints |
//! |---|---|---|
//! | `fork-bomb SECONDS` | forks until the deadline; each child forks once more, and every process sleeps until the deadline then exits; the parent reaps its children before it reports | `FORKS n first_error=EAGAIN` (or `first_error=none`), exit 0 |
//! | `mem-bomb MIB` | allocates and writes 1 MiB at a time, progress on stderr every 64 MiB | `ALLOCATED n` exit 0 if it got there (a memory limit should kill it first); `DENIED allocation failed after n MiB` exit 0 if an allocation was refused (RLIMIT_AS) |
//! | `fill-file PATH MIB` | writes PATH 1 MiB at a time, then fsyncs, with SIGXFSZ ignored | `WROTE n_bytes`, then `DENIED write: EFBIG (...)` exit 0 at the first error, or `ALLOWED wrote all` exit 1 |
//!
//! Forked children redirect their stdio to `/dev/null`, so they never hold
//! the runner's output pipes open.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::lifetime::{detach_stdio, sleep_until};
use crate::sys::{self, Disposition, Forked};
use crate::verdict::{errno_name, errno_text, flush_stdio, Outcome};

/// One mebibyte, the unit of `mem-bomb` and `fill-file`.
const MIB: usize = 1 << 20;

/// `fork-bomb SECONDS`.
pub fn fork_bomb(duration: Duration) -> Outcome {
    let deadline = Instant::now() + duration;
    flush_stdio();
    let mut forks: u64 = 0;
    let mut first_error: Option<Errno> = None;
    while Instant::now() < deadline {
        match sys::fork() {
            Ok(Forked::Child) => bomb_child(deadline),
            Ok(Forked::Parent(_)) => forks += 1,
            Err(errno) => {
                first_error.get_or_insert(errno);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    reap_children();
    let first_error = first_error.map_or_else(|| "none".to_owned(), errno_name);
    Outcome::report(format!("FORKS {forks} first_error={first_error}"))
}

/// A fork-bomb child: fork once more, sleep until the deadline, reap, exit.
fn bomb_child(deadline: Instant) -> ! {
    detach_stdio();
    let grandchild = sys::fork();
    sleep_until(deadline);
    if let Ok(Forked::Parent(pid)) = grandchild {
        let _ = waitpid(pid, None);
    }
    sys::exit_now(0)
}

/// Wait for every child of this process.
fn reap_children() {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// `mem-bomb MIB`.
pub fn mem_bomb(mebibytes: u64) -> Outcome {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    for done in 0..mebibytes {
        let mut chunk = Vec::new();
        if chunk.try_reserve_exact(MIB).is_err() || chunks.try_reserve(1).is_err() {
            return Outcome::denied(format!("allocation failed after {done} MiB"));
        }
        // A non-zero fill writes every byte, so every page is really backed.
        chunk.resize(MIB, 0xa5);
        chunks.push(chunk);
        let done = done + 1;
        if done % 64 == 0 {
            eprintln!("mem-bomb: {done} MiB");
        }
    }
    std::hint::black_box(&chunks);
    Outcome::report(format!("ALLOCATED {mebibytes}"))
}

/// `fill-file PATH MIB`.
pub fn fill_file(path: &std::path::Path, mebibytes: u64) -> Outcome {
    if let Err(errno) = sys::set_disposition(libc::SIGXFSZ, Disposition::Ignore) {
        return Outcome::no_verdict(format!("probe: cannot ignore SIGXFSZ: {errno}"));
    }
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC;
    let fd = match nix::fcntl::open(path, flags, Mode::from_bits_truncate(0o644)) {
        Ok(fd) => fd,
        Err(errno) => {
            return Outcome::denied(format!("open: {}", errno_text(errno))).after("WROTE 0")
        }
    };
    let chunk = vec![b'f'; MIB];
    let target = mebibytes.saturating_mul(MIB as u64);
    let mut written: u64 = 0;
    while written < target {
        let want = usize::try_from(target - written).map_or(MIB, |left| left.min(MIB));
        match nix::unistd::write(&fd, &chunk[..want]) {
            Ok(0) => return stopped(written, "write", Errno::ENOSPC),
            Ok(n) => written += n as u64,
            Err(Errno::EINTR) => {}
            Err(errno) => return stopped(written, "write", errno),
        }
    }
    if let Err(errno) = nix::unistd::fsync(&fd) {
        return stopped(written, "fsync", errno);
    }
    Outcome::allowed("wrote all").after(format!("WROTE {written}"))
}

fn stopped(written: u64, operation: &str, errno: Errno) -> Outcome {
    Outcome::denied(format!("{operation}: {}", errno_text(errno))).after(format!("WROTE {written}"))
}
