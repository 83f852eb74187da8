//! Supervising one sandboxed process: the only place that spawns.
//!
//! [`supervise`] starts the launcher (bwrap, or sandbox-exec), feeds its
//! stdin, drains stdout and stderr, enforces the wall-clock timeout and
//! cancellation, and reaps it with its resource usage: one `poll` loop on
//! the calling thread, over the launcher's pidfd (readable once it exited,
//! without reaping it), the cancel switch and every pipe. Kernels without
//! pidfds (< 5.3) get a waiter thread that reports the exit on a pipe.
//!
//! Invariants:
//! - output is read in fixed-size chunks; at most `output_bytes` per stream
//!   is kept or forwarded, the rest is drained and counted, so a flood of
//!   any size costs constant memory and never blocks the command; the
//!   deadline is checked by the clock on every wake-up, so a flood cannot
//!   hold it off either;
//! - on timeout or cancel the launcher is killed with SIGKILL; bubblewrap's
//!   `--die-with-parent` then takes pid 1 of the sandbox's pid namespace
//!   down, and with it every process in it (also one that ignores SIGTERM or
//!   double-forked into a new session). The caller's cgroup kill is the
//!   second line;
//! - the child is reaped only after the supervisor stops signalling it, so a
//!   kill never reaches a recycled pid;
//! - descriptors other than 0–2 reach the child only where asked for, at
//!   fixed numbers (everything else the runner opens is close-on-exec);
//! - the child's OOM score is raised to the most (`oom_score_adj` 1000), so
//!   where one memory cgroup holds the runner and its sandboxes (a
//!   container's `--memory`), the kernel kills a sandboxed process first and
//!   the runner lives to report the run.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::report::ExecReport;
use crate::supervise::sys::{self, ChildSetup};

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (at most `output_bytes` per stream).
pub trait Sink: Send {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]);
    /// Called once per stream when its cap is first passed.
    fn truncated(&mut self, _stream: Stream, _cap: u64) {}
    /// Called once, just before the launcher is spawned: staging is done
    /// (`staged_bytes` in `staging` time). Not called for a job refused
    /// before its launch.
    fn launching(&mut self, _staged_bytes: u64, _staging: Duration) {}
}

/// Discards output (it is still captured when asked).
#[derive(Debug, Default)]
pub struct NoSink;
impl Sink for NoSink {
    fn chunk(&mut self, _: Stream, _: &[u8]) {}
}

/// Forwards output to the runner's own stdout and stderr.
#[derive(Debug, Default)]
pub struct ForwardSink;
impl Sink for ForwardSink {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) {
        // A closed terminal is not the command's problem: ignore errors.
        let _ = match stream {
            Stream::Stdout => io::stdout().lock().write_all(bytes),
            Stream::Stderr => io::stderr().lock().write_all(bytes),
        };
    }
    fn truncated(&mut self, stream: Stream, cap: u64) {
        let name = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        let _ = writeln!(
            io::stderr().lock(),
            "\nskill-runner: {name} passed output_bytes ({cap}); the rest is dropped"
        );
    }
}

/// A cancellation switch: a pipe the supervisor polls.
#[derive(Debug)]
pub struct Cancel {
    read: OwnedFd,
    write: OwnedFd,
}

impl Cancel {
    pub fn new() -> io::Result<Arc<Cancel>> {
        let (read, write) = sys::pipe_cloexec()?;
        Ok(Arc::new(Cancel { read, write }))
    }

    /// Asks the supervised execution to stop. Safe to call many times and
    /// from a signal-handling thread.
    pub fn cancel(&self) {
        let _ = nix::unistd::write(&self.write, b"x");
    }

    /// Whether it was switched (a look, without waiting).
    pub fn is_set(&self) -> bool {
        let mut fds = [PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
    }
}

/// What to start.
#[derive(Debug)]
pub struct Spawn {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The launcher's whole environment (it starts from an empty one).
    pub env: Vec<(String, String)>,
    /// Descriptors for the child: `(fd, number in the child)`.
    pub fds: Vec<(OwnedFd, RawFd)>,
    pub rlimits: Vec<(nix::sys::resource::Resource, u64, u64)>,
    pub cgroup_procs: Vec<File>,
    pub stdin: Option<Vec<u8>>,
    /// Child fd number of the exec shim's report pipe, if the launcher
    /// runs the shim (see [`crate::sandbox::shim`]).
    pub report_fd: Option<RawFd>,
    /// Child fd number for the command's stderr, if the launcher passes it
    /// on apart from its own: the launcher's fd 2 then gets a pipe of its
    /// own, read into [`Outcome::launcher_stderr`] and never forwarded.
    pub stderr_fd: Option<RawFd>,
    /// Start the child in a new session (no controlling terminal) when the
    /// launcher does not do it itself.
    pub new_session: bool,
    /// The host `(uid, gid)` to launch as, when not the runner's own.
    pub identity: Option<(u32, u32)>,
    /// The mount namespace to start in, when not the runner's own
    /// ([`crate::sandbox::template`]); held until the child has it.
    pub mount_ns: Option<std::sync::Arc<OwnedFd>>,
}

/// Output kept from one stream.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// The first `output_bytes` bytes (when capturing).
    pub bytes: Vec<u8>,
    /// All bytes the command wrote.
    pub total: u64,
    pub truncated: bool,
    /// The last bytes written (≤ 4 KiB), kept even when not capturing, for
    /// diagnosing launcher failures.
    pub tail: Vec<u8>,
}

const TAIL: usize = 4096;

/// The most of the shim's report kept: its byte and an errno.
const REPORT_MAX: usize = 16;

/// How the launcher ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `Ok(code)` or `Err(signal)` of the launcher process.
    pub status: Result<i32, i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Whether the command itself was executed, from the shim's report.
    pub exec: ExecReport,
    /// What the launcher itself wrote to its stderr (the last 4 KiB),
    /// when it was kept apart from the command's (`Spawn::stderr_fd`).
    pub launcher_stderr: Vec<u8>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub started_at: SystemTime,
    pub duration: Duration,
    pub cpu_ms: u64,
    pub max_rss_bytes: u64,
}

/// Output policy for [`supervise`].
#[derive(Debug, Clone, Copy)]
pub struct OutputPolicy {
    pub cap: u64,
    pub capture: bool,
}

/// Runs `spawn` to completion under the timeout.
pub fn supervise(
    spawn: Spawn,
    timeout: Duration,
    output: OutputPolicy,
    sink: &mut dyn Sink,
    cancel: Option<&Cancel>,
) -> io::Result<Outcome> {
    start(spawn)?.watch(timeout, output, sink, cancel)
}

/// A launcher spawned and not yet watched: its pid (not reaped), its
/// exit notice and its pipes. [`Started::watch`] supervises it to its
/// end; dropped unwatched, it is killed and reaped (a prepared sandbox
/// discarded, see [`crate::exec::prepared`]).
#[derive(Debug)]
pub struct Started {
    pid: libc::pid_t,
    exit_r: OwnedFd,
    waiter: Option<std::thread::JoinHandle<()>>,
    stdin: Option<(File, Vec<u8>)>,
    stdout: Option<File>,
    stderr: Option<File>,
    report: Option<File>,
    launcher_err: Option<File>,
    has_report: bool,
    started_at: SystemTime,
    start: Instant,
    /// Watched (or being watched): the loop owns the pid now.
    taken: bool,
}

/// Spawns `spawn` and returns it unwatched: nothing reads its pipes or
/// counts its time until [`Started::watch`].
pub fn start(spawn: Spawn) -> io::Result<Started> {
    // Stdio: pipes for the outputs (and for stdin when the job gives
    // some), /dev/null otherwise. Every end is close-on-exec; the child
    // gets its ends at 0, 1 and 2 through the fd map.
    let (stdin_child, stdin_ours) = match &spawn.stdin {
        Some(_) => {
            let (r, w) = sys::pipe_cloexec()?;
            (r, Some(File::from(w)))
        }
        None => (OwnedFd::from(File::open("/dev/null")?), None),
    };
    let (stdout_r, stdout_w) = sys::pipe_cloexec()?;
    let (stderr_r, stderr_w) = sys::pipe_cloexec()?;
    let mut keep_alive: Vec<OwnedFd> = vec![stdin_child, stdout_w, stderr_w];
    let mut fd_map: Vec<(RawFd, RawFd)> = keep_alive
        .iter()
        .zip(0..)
        .map(|(fd, target)| (fd.as_raw_fd(), target))
        .collect();
    for (fd, target) in spawn.fds {
        fd_map.push((fd.as_raw_fd(), target));
        keep_alive.push(fd);
    }
    let report_read = match spawn.report_fd {
        Some(target) => {
            let (r, w) = sys::pipe_cloexec()?;
            fd_map.push((w.as_raw_fd(), target));
            keep_alive.push(w);
            Some(File::from(r))
        }
        None => None,
    };
    // The command's stderr moves to its own number; the launcher's fd 2
    // becomes a pipe of its own.
    let launcher_err = match spawn.stderr_fd {
        Some(target) => {
            let (r, w) = sys::pipe_cloexec()?;
            let stderr_entry = fd_map
                .iter_mut()
                .find(|(_, t)| *t == 2)
                .expect("stderr is mapped");
            let command_stderr = stderr_entry.0;
            stderr_entry.0 = w.as_raw_fd();
            fd_map.push((command_stderr, target));
            keep_alive.push(w);
            Some(File::from(r))
        }
        None => None,
    };
    let setup = ChildSetup {
        fd_map,
        rlimits: spawn.rlimits,
        cgroup_procs: spawn.cgroup_procs.iter().map(|f| f.as_raw_fd()).collect(),
        die_with_parent: true,
        oom_first: true,
        new_session: spawn.new_session,
        // Its own process group: a Ctrl-C at the terminal reaches the
        // runner, which then stops the sandbox itself. (A new session is
        // a new group too.)
        process_group: true,
        identity: spawn.identity,
        mount_ns: spawn.mount_ns.as_ref().map(|ns| ns.as_raw_fd()),
    };
    let has_report = spawn.report_fd.is_some();

    let started_at = SystemTime::now();
    let start = Instant::now();
    let pid = sys::spawn(&spawn.program, &spawn.args, &spawn.env, &setup)?;
    // The child has its copies; ours would keep pipes open.
    drop(keep_alive);
    drop(spawn.cgroup_procs);

    let stdin = stdin_ours.map(|s| (s, spawn.stdin.unwrap_or_default()));
    // Learn of the exit without reaping: a pidfd where the kernel has one
    // (no thread needed), else a waiter thread and a pipe.
    let pidfd = sys::pidfd_open(pid).ok();
    let (exit_r, exit_w) = match pidfd {
        Some(fd) => (fd, None),
        None => {
            let (r, w) = sys::pipe_cloexec()?;
            (r, Some(w))
        }
    };
    // Without a pidfd, a waiter thread learns of the exit (without
    // reaping) and says so on a pipe.
    let waiter = exit_w.map(|exit_w| {
        std::thread::spawn(move || {
            let _ = sys::wait_exit_nowait(pid);
            let _ = nix::unistd::write(&exit_w, b"x");
        })
    });
    Ok(Started {
        pid,
        exit_r,
        waiter,
        stdin,
        stdout: Some(File::from(stdout_r)),
        stderr: Some(File::from(stderr_r)),
        report: report_read,
        launcher_err,
        has_report,
        started_at,
        start,
        taken: false,
    })
}

impl Started {
    /// Whether the launcher has not exited yet (a prepared sandbox whose
    /// bubblewrap died while it waited is never handed a command).
    pub fn alive(&self) -> bool {
        let mut fds = [PollFd::new(self.exit_r.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
    }

    /// The launcher's pid (not reaped while this lives).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Hands the launcher its command's stdin and starts its clock now:
    /// the timeout and `duration_ms` of a prepared sandbox count from its
    /// hand-over, not from when it was prepared.
    pub fn hand_over(&mut self, stdin: Option<Vec<u8>>) {
        if let Some((_, data)) = self.stdin.as_mut() {
            *data = stdin.unwrap_or_default();
        }
        self.started_at = SystemTime::now();
        self.start = Instant::now();
    }

    /// Supervises the launcher to its end under `timeout`, counted from
    /// its spawn (or its hand-over).
    pub fn watch(
        mut self,
        timeout: Duration,
        output: OutputPolicy,
        sink: &mut dyn Sink,
        cancel: Option<&Cancel>,
    ) -> io::Result<Outcome> {
        self.taken = true;
        let pid = self.pid;
        let (started_at, start, has_report) = (self.started_at, self.start, self.has_report);
        let waiter = self.waiter.take();
        let exit_r = self.exit_r.try_clone()?;
        // An empty stdin is an end of file at once, never a pipe left open.
        let stdin = self.stdin.take().filter(|(_, data)| !data.is_empty());
        let (stdout, stderr) = (self.stdout.take(), self.stderr.take());
        let (report_read, launcher_err) = (self.report.take(), self.launcher_err.take());
        drop(self);
        watch(Watch {
            pid,
            exit_r,
            waiter,
            io: Io::new(stdin, stdout, stderr, report_read, launcher_err, output),
            has_report,
            started_at,
            start,
            timeout,
            sink,
            cancel,
        })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        kill_launcher(self.pid);
        let _ = sys::reap(self.pid);
        if let Some(w) = self.waiter.take() {
            let _ = w.join();
        }
    }
}

/// What the watch loop works on.
struct Watch<'a> {
    pid: libc::pid_t,
    exit_r: OwnedFd,
    waiter: Option<std::thread::JoinHandle<()>>,
    io: Io,
    has_report: bool,
    started_at: SystemTime,
    start: Instant,
    timeout: Duration,
    sink: &'a mut dyn Sink,
    cancel: Option<&'a Cancel>,
}

/// The one loop: the exit, the cancel switch, the deadline, and every
/// byte in and out.
fn watch(w: Watch<'_>) -> io::Result<Outcome> {
    let Watch {
        pid,
        exit_r,
        waiter,
        mut io,
        has_report,
        started_at,
        start,
        timeout,
        sink,
        cancel,
    } = w;

    // One loop on this thread: the exit, the cancel switch, the deadline,
    // and every byte in and out.
    let deadline = start + timeout;
    let (mut timed_out, mut cancelled, mut killed) = (false, false, false);
    let mut reaped: Option<(sys::Reaped, Duration)> = None;
    let mut drain_until: Option<Instant> = None;
    loop {
        let exited = reaped.is_some();
        if exited && !io.open() {
            break;
        }
        let wake_at = match (exited, killed) {
            // Output may only keep flowing from a process that escaped the
            // pid namespace; it gets a grace period, not forever.
            (true, _) => drain_until,
            (false, false) => Some(deadline),
            (false, true) => None,
        };
        let wait = match wake_at {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
                    .unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(7);
        let mut which: Vec<Source> = Vec::with_capacity(7);
        if !exited {
            fds.push(PollFd::new(exit_r.as_fd(), PollFlags::POLLIN));
            which.push(Source::Exit);
        }
        if let (Some(c), false) = (cancel, killed) {
            fds.push(PollFd::new(c.read.as_fd(), PollFlags::POLLIN));
            which.push(Source::Cancel);
        }
        io.poll_set(&mut fds, &mut which);
        match poll(&mut fds, wait) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                // Never leave the sandbox running behind an error.
                kill_launcher(pid);
                if reaped.is_none() {
                    let _ = sys::reap(pid);
                }
                return Err(e.into());
            }
        }
        let ready: Vec<Source> = fds
            .iter()
            .zip(&which)
            .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
            .map(|(_, w)| *w)
            .collect();
        drop(fds);
        // Deadlines are checked by the clock, not by poll timing out: a
        // command that floods its output keeps poll busy forever.
        let now = Instant::now();
        if exited && drain_until.is_some_and(|d| now >= d) {
            break; // the drain grace period is over
        }
        if !exited && !killed && now >= deadline {
            timed_out = true;
            kill_launcher(pid);
            killed = true;
        }
        for w in ready {
            match w {
                Source::Exit => {
                    let r = sys::reap(pid)?;
                    reaped = Some((r, start.elapsed()));
                    drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
                Source::Cancel => {
                    if !killed {
                        cancelled = true;
                        kill_launcher(pid);
                        killed = true;
                    }
                }
                other => io.ready(other, sink),
            }
        }
    }
    if let Some(w) = waiter {
        let _ = w.join();
    }
    let (reaped, duration) = reaped.expect("the loop ends only after the reap");
    // Without a report channel, reaching exec is all we know.
    let exec = if has_report {
        ExecReport::parse(&io.report.1)
    } else {
        ExecReport::Unknown
    };
    let launcher_stderr = std::mem::take(&mut io.launcher_err.1);
    let (stdout, stderr) = io.finish();
    Ok(Outcome {
        status: reaped.status,
        timed_out,
        cancelled,
        exec,
        launcher_stderr,
        stdout,
        stderr,
        started_at,
        duration,
        cpu_ms: reaped.cpu_ms,
        max_rss_bytes: reaped.max_rss_bytes,
    })
}

/// Kills the launcher and its process group. The pid is not reaped yet,
/// so it and its group are still ours. The group matters where there is
/// no pid namespace (Seatbelt).
fn kill_launcher(pid: libc::pid_t) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// What a ready descriptor in the poll set is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Exit,
    Cancel,
    Stdin,
    Out(usize),
    Report,
    LauncherErr,
}

/// How long output may keep flowing after the launcher was reaped (only a
/// process that escaped the pid namespace could still hold the pipes).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The bytes moving in and out: stdin in, stdout/stderr out, the shim's
/// report and the launcher's own stderr out. Reads are fixed-size; a flood
/// costs constant memory.
struct Io {
    /// The pipe, the bytes, how many were written.
    stdin: Option<(File, Vec<u8>, usize)>,
    outs: [(Option<File>, Stream, Captured); 2],
    /// The shim's report: at most [`REPORT_MAX`] bytes are kept.
    report: (Option<File>, Vec<u8>),
    /// The launcher's stderr: the last [`TAIL`] bytes are kept.
    launcher_err: (Option<File>, Vec<u8>),
    buf: Vec<u8>,
    policy: OutputPolicy,
}

impl Io {
    fn new(
        stdin: Option<(File, Vec<u8>)>,
        stdout: Option<File>,
        stderr: Option<File>,
        report: Option<File>,
        launcher_err: Option<File>,
        policy: OutputPolicy,
    ) -> Io {
        let stdin = stdin.map(|(pipe, data)| {
            let _ = nix::fcntl::fcntl(
                &pipe,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
            (pipe, data, 0usize)
        });
        Io {
            stdin,
            outs: [
                (stdout, Stream::Stdout, Captured::default()),
                (stderr, Stream::Stderr, Captured::default()),
            ],
            report: (report, Vec::new()),
            launcher_err: (launcher_err, Vec::new()),
            buf: vec![0u8; 64 * 1024],
            policy,
        }
    }

    /// Whether an output (or the report or launcher's stderr) is still open.
    fn open(&self) -> bool {
        self.outs.iter().any(|o| o.0.is_some())
            || self.report.0.is_some()
            || self.launcher_err.0.is_some()
    }

    /// Adds what is waited on: stdin while data remains, the outputs, the
    /// report, the launcher's stderr.
    fn poll_set<'a>(&'a self, fds: &mut Vec<PollFd<'a>>, which: &mut Vec<Source>) {
        if let Some((f, data, off)) = &self.stdin {
            if *off < data.len() {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLOUT));
                which.push(Source::Stdin);
            }
        }
        for (i, (f, _, _)) in self.outs.iter().enumerate() {
            if let Some(f) = f {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
                which.push(Source::Out(i));
            }
        }
        if let Some(f) = &self.report.0 {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
            which.push(Source::Report);
        }
        if let Some(f) = &self.launcher_err.0 {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
            which.push(Source::LauncherErr);
        }
    }

    /// Moves the bytes of one ready descriptor.
    fn ready(&mut self, source: Source, sink: &mut dyn Sink) {
        match source {
            Source::Stdin => {
                let Some((f, data, off)) = self.stdin.as_mut() else {
                    return;
                };
                match f.write(&data[*off..]) {
                    Ok(n) => *off += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // EPIPE: the command closed stdin; that is its right.
                    Err(_) => *off = data.len(),
                }
                if *off >= data.len() {
                    self.stdin = None; // closing the pipe sends EOF
                }
            }
            Source::Out(i) => {
                let (file, stream, cap) = &mut self.outs[i];
                let Some(f) = file.as_mut() else { return };
                match f.read(&mut self.buf) {
                    Ok(0) | Err(_) => *file = None,
                    Ok(n) => take(cap, *stream, &self.buf[..n], self.policy, sink),
                }
            }
            Source::Report => {
                let (file, kept) = &mut self.report;
                let Some(f) = file.as_mut() else { return };
                match f.read(&mut self.buf) {
                    Ok(0) | Err(_) => *file = None,
                    Ok(n) => {
                        let room = REPORT_MAX.saturating_sub(kept.len()).min(n);
                        kept.extend_from_slice(&self.buf[..room]);
                    }
                }
            }
            Source::LauncherErr => {
                let (file, kept) = &mut self.launcher_err;
                let Some(f) = file.as_mut() else { return };
                match f.read(&mut self.buf) {
                    Ok(0) | Err(_) => *file = None,
                    Ok(n) => {
                        kept.extend_from_slice(&self.buf[..n]);
                        if kept.len() > TAIL {
                            kept.drain(..kept.len() - TAIL);
                        }
                    }
                }
            }
            Source::Exit | Source::Cancel => {}
        }
    }

    fn finish(self) -> (Captured, Captured) {
        let [(_, _, stdout), (_, _, stderr)] = self.outs;
        (stdout, stderr)
    }
}

/// Accounts a chunk: capture and forward up to the cap, keep the tail.
fn take(
    cap: &mut Captured,
    stream: Stream,
    bytes: &[u8],
    policy: OutputPolicy,
    sink: &mut dyn Sink,
) {
    let room = policy.cap.saturating_sub(cap.total).min(bytes.len() as u64) as usize;
    if room > 0 {
        sink.chunk(stream, &bytes[..room]);
        if policy.capture {
            cap.bytes.extend_from_slice(&bytes[..room]);
        }
    }
    if room < bytes.len() && !cap.truncated {
        cap.truncated = true;
        sink.truncated(stream, policy.cap);
    }
    cap.total += bytes.len() as u64;
    if bytes.len() >= TAIL {
        cap.tail.clear();
        cap.tail.extend_from_slice(&bytes[bytes.len() - TAIL..]);
    } else {
        cap.tail.extend_from_slice(bytes);
        if cap.tail.len() > TAIL {
            cap.tail.drain(..cap.tail.len() - TAIL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect(Vec<u8>, u32);
    impl Sink for Collect {
        fn chunk(&mut self, _: Stream, b: &[u8]) {
            self.0.extend_from_slice(b);
        }
        fn truncated(&mut self, _: Stream, _: u64) {
            self.1 += 1;
        }
    }

    #[test]
    fn cap_and_tail_accounting() {
        let mut c = Captured::default();
        let mut sink = Collect::default();
        let p = OutputPolicy {
            cap: 10,
            capture: true,
        };
        take(&mut c, Stream::Stdout, b"0123456", p, &mut sink);
        take(&mut c, Stream::Stdout, b"789abcdef", p, &mut sink);
        take(&mut c, Stream::Stdout, b"more", p, &mut sink);
        assert_eq!(c.bytes, b"0123456789");
        assert_eq!(sink.0, b"0123456789");
        assert_eq!(sink.1, 1);
        assert!(c.truncated);
        assert_eq!(c.total, 20);
        assert_eq!(c.tail, b"0123456789abcdefmore");
    }

    #[test]
    fn supervises_a_plain_process() {
        // Pure supervision (no sandbox): stdin in, stdout out, exit code.
        let mut spawn = plain("/bin/sh", &["-c", "cat; echo err >&2; exit 3"]);
        spawn.stdin = Some(b"hello".to_vec());
        let out = run_plain(spawn).unwrap();
        assert_eq!(out.status, Ok(3));
        assert_eq!(out.stdout.bytes, b"hello");
        assert_eq!(out.stderr.bytes, b"err\n");
        assert!(!out.timed_out);
    }

    fn plain(program: &str, args: &[&str]) -> Spawn {
        Spawn {
            program: program.into(),
            args: args.iter().map(|a| a.into()).collect(),
            fds: vec![],
            rlimits: vec![],
            cgroup_procs: vec![],
            stdin: None,
            report_fd: None,
            stderr_fd: None,
            env: vec![],
            new_session: false,
            identity: None,
            mount_ns: None,
        }
    }

    fn run_plain(spawn: Spawn) -> io::Result<Outcome> {
        let policy = OutputPolicy {
            cap: 1 << 20,
            capture: true,
        };
        supervise(spawn, Duration::from_secs(10), policy, &mut NoSink, None)
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked_or_ignored() {
        // The runner ignores SIGPIPE (Rust does) and blocks signals around
        // the spawn; neither may reach the command.
        let out = run_plain(plain(
            "/usr/bin/grep",
            &["-E", "^Sig(Blk|Ign)", "/proc/self/status"],
        ))
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout.bytes),
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
        );
    }

    #[test]
    fn the_report_decides_whether_the_command_was_executed() {
        // The shim's protocol on a plain process: nothing written (setup
        // failed), its byte (executed), its byte and an errno.
        let report = |script: &str| {
            let mut s = plain("/bin/sh", &["-c", script]);
            s.report_fd = Some(7);
            run_plain(s).unwrap().exec
        };
        assert_eq!(report("exit 1"), ExecReport::NotReached);
        assert_eq!(report("printf S >&7; exit 1"), ExecReport::Executed);
        assert_eq!(
            report(r"printf 'S\002\000\000\000' >&7; exit 127"),
            ExecReport::ExecFailed(libc::ENOENT)
        );
        // Without a report channel, nothing is known.
        assert_eq!(
            run_plain(plain("/bin/true", &[])).unwrap().exec,
            ExecReport::Unknown
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_child_is_the_first_the_oom_killer_takes() {
        // A memfd hog under a container's --memory killed the runner
        // instead of the hog, and the run had no result.
        let out = run_plain(plain("/bin/cat", &["/proc/self/oom_score_adj"])).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout.bytes), "1000\n");
    }

    #[test]
    fn the_launchers_stderr_is_kept_apart_from_the_commands() {
        let mut s = plain("/bin/sh", &["-c", "echo launcher >&2; echo command >&9"]);
        s.stderr_fd = Some(9);
        let out = run_plain(s).unwrap();
        assert_eq!(out.stderr.bytes, b"command\n");
        assert_eq!(out.launcher_stderr, b"launcher\n");
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let err = run_plain(plain("/nonexistent/program", &[])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_failing_setup_is_an_error() {
        // A setup step that fails in the child before exec (here an
        // rlimit with soft above hard) comes back to the caller as an error.
        let mut s = plain("/bin/true", &[]);
        s.rlimits = vec![(nix::sys::resource::Resource::RLIMIT_NOFILE, 2048, 1024)];
        let err = run_plain(s).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    /// Runs `program args` in a new session under a short timeout.
    fn run_timed(program: &str, args: &[&str], timeout_ms: u64) -> Outcome {
        let mut s = plain(program, args);
        s.new_session = true;
        let policy = OutputPolicy {
            cap: 1024,
            capture: true,
        };
        let timeout = Duration::from_millis(timeout_ms);
        supervise(s, timeout, policy, &mut NoSink, None).unwrap()
    }

    #[test]
    fn timeout_kills_a_command_that_floods_its_output() {
        // Output arriving without pause must not keep the deadline from
        // being noticed.
        let out = run_timed("/usr/bin/yes", &[], 300);
        assert!(out.timed_out);
        assert_eq!(out.status, Err(libc::SIGKILL));
        assert!(out.stdout.truncated);
        assert!(out.stdout.total > 1024);
    }

    #[test]
    fn timeout_kills() {
        let out = run_timed("/bin/sh", &["-c", "exec sleep 30"], 200);
        assert!(out.timed_out);
        assert_eq!(out.status, Err(libc::SIGKILL));
    }
}
