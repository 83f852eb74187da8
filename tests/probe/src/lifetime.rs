//! Lifetime and output: processes that try to outlive the runner's timeout
//! or flood its pipes, and the plain controls the supervision tests need.
//!
//! | subcommand | does | prints |
//! |---|---|---|
//! | `sleep SECONDS [HEARTBEAT_PATH]` | writes a heartbeat (below) to HEARTBEAT_PATH, default `/workspace/sleep.alive`, every 100 ms until SECONDS have passed | `READY` (after the first heartbeat), exit 0 |
//! | `ignore-term-sleep SECONDS` | ignores SIGTERM, SIGINT and SIGHUP, then sleeps | `READY`, exit 0 |
//! | `double-fork PIDFILE SECONDS` | forks; the child calls `setsid` and forks again; the grandchild points its stdio at `/dev/null`, ignores SIGTERM, SIGINT and SIGHUP, writes `PID STARTTIME` to PIDFILE (its pid inside the sandbox and field 22 of `/proc/self/stat`, its start time in clock ticks after boot, the same number the host sees), and heartbeats `PIDFILE.alive` for SECONDS | the original process prints `READY` once the grandchild has written both files, and exits 0 |
//! | `flood BYTES` | writes BYTES of `x` to stdout, 64 KiB at a time | the bytes; exit 0, also when the reader goes away (EPIPE) |
//! | `echo-stdin` | copies stdin to stdout | the input |
//! | `exit CODE` | exits with CODE | nothing |
//! | `kill-self SIGNAL` | resets SIGNAL to its default action and raises it | nothing; if the process survives, a message on stderr and exit 3 |
//!
//! A heartbeat file holds a decimal counter and a newline; it is rewritten
//! (to `PATH.tmp`, then renamed over `PATH`, so a reader never sees it half
//! written) every 100 ms with the counter one higher. A host test that sees
//! the counter stop knows the process is gone, whatever pid namespace it
//! was in.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;

use crate::sys::{self, Disposition, Forked};
use crate::verdict::{errno_text, flush_stdio, say, Outcome, EXIT_NO_VERDICT, EXIT_OK};

/// Time between two heartbeats.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// How long `double-fork` waits for the grandchild to report.
const GRANDCHILD_REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Size of one `flood` and `echo-stdin` write.
const CHUNK: usize = 64 * 1024;

/// The signals the stubborn probes ignore.
const STUBBORN_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Sleep until `deadline` (not at all if it has passed).
pub fn sleep_until(deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

/// Point fds 0, 1 and 2 at `/dev/null`, so that a background process does
/// not hold the runner's pipes open.
pub fn detach_stdio() {
    let flags = OFlag::O_RDWR | OFlag::O_CLOEXEC;
    if let Ok(null) = nix::fcntl::open("/dev/null", flags, Mode::empty()) {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// A heartbeat file and its counter.
#[derive(Debug)]
struct Heartbeat {
    path: PathBuf,
    scratch: PathBuf,
    count: u64,
}

impl Heartbeat {
    fn new(path: &Path) -> Self {
        let mut scratch = path.as_os_str().to_owned();
        scratch.push(".tmp");
        Self {
            path: path.to_owned(),
            scratch: scratch.into(),
            count: 0,
        }
    }

    /// Write the next count.
    fn beat(&mut self) -> std::io::Result<()> {
        self.count += 1;
        std::fs::write(&self.scratch, format!("{}\n", self.count))?;
        std::fs::rename(&self.scratch, &self.path)
    }

    /// Beat every [`HEARTBEAT_INTERVAL`] until `deadline`. Errors after the
    /// first are ignored: the heartbeat is a courtesy to the test.
    fn until(&mut self, deadline: Instant) {
        while Instant::now() < deadline {
            sleep_until((Instant::now() + HEARTBEAT_INTERVAL).min(deadline));
            let _ = self.beat();
        }
    }
}

/// `sleep SECONDS [HEARTBEAT_PATH]`.
pub fn sleep(duration: Duration, heartbeat: &Path) -> Outcome {
    let deadline = Instant::now() + duration;
    let mut heartbeat = Heartbeat::new(heartbeat);
    if let Err(error) = heartbeat.beat() {
        eprintln!(
            "probe: cannot write heartbeat {}: {error}",
            heartbeat.path.display()
        );
    }
    say("READY");
    heartbeat.until(deadline);
    Outcome::silent(EXIT_OK)
}

/// Ignore the signals in [`STUBBORN_SIGNALS`].
fn ignore_polite_signals() -> Result<(), Errno> {
    STUBBORN_SIGNALS
        .iter()
        .try_for_each(|signal| sys::set_disposition(*signal, Disposition::Ignore))
}

/// `ignore-term-sleep SECONDS`.
pub fn ignore_term_sleep(duration: Duration) -> Outcome {
    let deadline = Instant::now() + duration;
    if let Err(errno) = ignore_polite_signals() {
        return Outcome::no_verdict(format!("probe: cannot ignore signals: {errno}"));
    }
    say("READY");
    sleep_until(deadline);
    Outcome::silent(EXIT_OK)
}

/// `double-fork PIDFILE SECONDS`.
pub fn double_fork(pidfile: &Path, duration: Duration) -> Outcome {
    let deadline = Instant::now() + duration;
    let (ready_rx, ready_tx) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(errno) => return Outcome::no_verdict(format!("probe: pipe failed: {errno}")),
    };
    flush_stdio();
    let child = match sys::fork() {
        Ok(Forked::Child) => {
            drop(ready_rx);
            let _ = nix::unistd::setsid();
            match sys::fork() {
                Ok(Forked::Child) => grandchild(pidfile, deadline, ready_tx),
                Ok(Forked::Parent(_)) => sys::exit_now(0),
                Err(errno) => sys::exit_now(errno as i32),
            }
        }
        Ok(Forked::Parent(child)) => child,
        Err(errno) => return Outcome::no_verdict(format!("probe: fork failed: {errno}")),
    };
    drop(ready_tx);
    let _ = waitpid(child, None);
    match wait_for_byte(&ready_rx, GRANDCHILD_REPORT_TIMEOUT) {
        Ok(true) => Outcome::line("READY", EXIT_OK),
        Ok(false) => Outcome::no_verdict(format!(
            "probe: the grandchild could not write {}",
            pidfile.display()
        )),
        Err(errno) => Outcome::no_verdict(format!(
            "probe: waiting for the grandchild failed: {}",
            errno_text(errno)
        )),
    }
}

/// The detached grandchild of `double-fork`: write the pidfile and the first
/// heartbeat, tell the parent, then heartbeat until `deadline`.
fn grandchild(pidfile: &Path, deadline: Instant, ready: std::os::fd::OwnedFd) -> ! {
    detach_stdio();
    let _ = ignore_polite_signals();
    let pid = std::process::id();
    let starttime = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| start_time(&stat))
        .unwrap_or(0);
    let mut heartbeat = Heartbeat::new(&alive_path(pidfile));
    let written =
        write_atomically(pidfile, &format!("{pid} {starttime}\n")).and_then(|()| heartbeat.beat());
    if written.is_err() {
        sys::exit_now(1);
    }
    let _ = nix::unistd::write(&ready, b"R");
    drop(ready);
    heartbeat.until(deadline);
    sys::exit_now(0)
}

/// `PIDFILE.alive`.
fn alive_path(pidfile: &Path) -> PathBuf {
    let mut alive = pidfile.as_os_str().to_owned();
    alive.push(".alive");
    alive.into()
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut scratch = path.as_os_str().to_owned();
    scratch.push(".tmp");
    std::fs::write(&scratch, text)?;
    std::fs::rename(&scratch, path)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name,
/// field 2, is in parentheses and may hold spaces and parentheses, so the
/// fields are counted from the last `)`.
fn start_time(stat: &str) -> Option<u64> {
    let (_, after_comm) = stat.rsplit_once(')')?;
    // after_comm starts with field 3 (state); field 22 is 19 further on.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// Wait up to `timeout` for one byte on `fd`: `true` if it came, `false` on
/// end of file or timeout.
fn wait_for_byte(fd: &std::os::fd::OwnedFd, timeout: Duration) -> Result<bool, Errno> {
    let timeout = PollTimeout::try_from(timeout).map_err(|_| Errno::EINVAL)?;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    loop {
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => return Ok(false),
            Ok(_) => break,
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(fd.as_fd(), &mut byte) {
            Ok(n) => return Ok(n == 1),
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
}

/// `flood BYTES`.
pub fn flood(bytes: u64) -> Outcome {
    let chunk = [b'x'; CHUNK];
    let stdout = std::io::stdout();
    let mut left = bytes;
    while left > 0 {
        let want = usize::try_from(left).map_or(CHUNK, |left| left.min(CHUNK));
        match nix::unistd::write(stdout.as_fd(), &chunk[..want]) {
            Ok(n) => left -= n as u64,
            Err(Errno::EINTR) => {}
            Err(Errno::EPIPE) => return Outcome::silent(EXIT_OK),
            Err(errno) => {
                return Outcome::no_verdict(format!("probe: write to stdout failed: {errno}"))
            }
        }
    }
    Outcome::silent(EXIT_OK)
}

/// `echo-stdin`.
pub fn echo_stdin() -> Outcome {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match nix::unistd::read(stdin.as_fd(), &mut buf) {
            Ok(0) => return Outcome::silent(EXIT_OK),
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(errno) => {
                return Outcome::no_verdict(format!("probe: read from stdin failed: {errno}"))
            }
        };
        let mut pending = &buf[..n];
        while !pending.is_empty() {
            match nix::unistd::write(stdout.as_fd(), pending) {
                Ok(written) => pending = &pending[written..],
                Err(Errno::EINTR) => {}
                Err(Errno::EPIPE) => return Outcome::silent(EXIT_OK),
                Err(errno) => {
                    return Outcome::no_verdict(format!("probe: write to stdout failed: {errno}"))
                }
            }
        }
    }
}

/// `exit CODE`.
pub fn exit(code: i32) -> Outcome {
    Outcome::silent(code)
}

/// `kill-self SIGNAL`.
pub fn kill_self(signal: libc::c_int) -> Outcome {
    let _ = std::io::stdout().flush();
    // The Rust runtime ignores SIGPIPE; every signal gets its default action.
    let _ = sys::set_disposition(signal, Disposition::Default);
    if let Err(errno) = sys::raise(signal) {
        return Outcome::no_verdict(format!("probe: raise({signal}) failed: {errno}"));
    }
    Outcome {
        stdout: String::new(),
        stderr: format!("probe: still alive after raising signal {signal}"),
        code: EXIT_NO_VERDICT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_counts_fields_after_the_command_name() {
        let stat = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 99 0 0 0 1 0 0 0 \
                    20 0 1 0 987654 2367488 200 18446744073709551615";
        assert_eq!(start_time(stat), Some(987_654));
        assert_eq!(start_time("1 (init) S 0"), None);
        assert_eq!(start_time("no parentheses"), None);
    }

    #[test]
    fn side_files_sit_next_to_the_pidfile() {
        assert_eq!(
            alive_path(Path::new("/workspace/pid")),
            Path::new("/workspace/pid.alive")
        );
        assert_eq!(
            Heartbeat::new(Path::new("/workspace/sleep.alive")).scratch,
            Path::new("/workspace/sleep.alive.tmp")
        );
    }
}
