//! The few operating-system calls that need `unsafe`, in one place.
//!
//! - [`ChildSetup`]: what the forked child does between `fork` and `exec`
//!   (only async-signal-safe calls, no allocation): place inherited file
//!   descriptors at fixed numbers, set rlimits, join cgroups, ask to be
//!   killed with the runner;
//! - [`sealed_memfd`]: an anonymous, sealed (immutable) file holding data a
//!   sandbox reads at start;
//! - [`wait_exit_nowait`] / [`reap`]: wait for a child without reaping it,
//!   then reap it with its resource usage. Splitting the two keeps the pid
//!   reserved until the supervisor is done signalling it, so a kill can
//!   never hit a recycled pid.

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Lowest fd number used as scratch while remapping descriptors.
const SCRATCH_FD_BASE: RawFd = 100;

/// What the child does before `exec`. Everything is prepared in the
/// parent; [`ChildSetup::apply`] only issues system calls.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    /// `(fd in the parent, fd number in the child)`.
    pub fd_map: Vec<(RawFd, RawFd)>,
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(nix::sys::resource::Resource, u64, u64)>,
    /// Open `cgroup.procs` files; the child writes `0` (itself) to each.
    pub cgroup_procs: Vec<RawFd>,
    /// Kill the child when the runner dies (Linux).
    pub die_with_parent: bool,
    /// Call `setsid` (no controlling terminal, own process group).
    pub new_session: bool,
}

impl ChildSetup {
    fn apply(&self, parent: libc::pid_t) -> io::Result<()> {
        let check = |r: libc::c_int| {
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        #[cfg(target_os = "linux")]
        if self.die_with_parent {
            // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and
            // touches no memory of ours.
            check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
            // The parent may have died before the prctl took effect.
            // SAFETY: getppid has no preconditions.
            if unsafe { libc::getppid() } != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = parent;
        // The runner blocks SIGINT/SIGTERM/SIGHUP in its threads to handle
        // them itself; the command must start with nothing blocked.
        // SAFETY: sigemptyset/sigprocmask write only the local set and the
        // calling thread's mask.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            check(libc::sigprocmask(
                libc::SIG_SETMASK,
                &empty,
                std::ptr::null_mut(),
            ))?;
        }
        if self.new_session {
            // SAFETY: setsid has no preconditions; it fails only for a
            // group leader, which the caller avoids.
            check(unsafe { libc::setsid() })?;
        }
        for &fd in &self.cgroup_procs {
            // SAFETY: fd is an open cgroup.procs file inherited from the
            // parent; the buffer is a static byte string.
            let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            if n != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        // Two passes, so a source fd that happens to have a target number
        // of another mapping is not clobbered before it is moved.
        let mut scratch = [0 as RawFd; 16];
        if self.fd_map.len() > scratch.len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        for (i, &(src, _)) in self.fd_map.iter().enumerate() {
            // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an fd we own; returns a new fd.
            let fd = unsafe { libc::fcntl(src, libc::F_DUPFD_CLOEXEC, SCRATCH_FD_BASE) };
            check(fd)?;
            scratch[i] = fd;
        }
        for (i, &(_, target)) in self.fd_map.iter().enumerate() {
            // SAFETY: dup2 onto a fixed number; it clears FD_CLOEXEC on the
            // target, which is what makes it survive exec.
            check(unsafe { libc::dup2(scratch[i], target) })?;
        }
        // Nothing else crosses exec: descriptors the runner inherited from
        // its own parent without close-on-exec would otherwise leak into
        // the sandbox.
        let first_free = self
            .fd_map
            .iter()
            .map(|&(_, t)| t)
            .max()
            .unwrap_or(2)
            .max(2)
            + 1;
        close_from(first_free);
        for (resource, soft, hard) in &self.rlimits {
            nix::sys::resource::setrlimit(*resource, *soft, *hard).map_err(io::Error::from)?;
        }
        Ok(())
    }

    /// Installs the setup on `cmd`.
    pub fn install(self, cmd: &mut Command) {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: `apply` makes only async-signal-safe system calls (prctl,
        // getppid, sigprocmask, setsid, write, fcntl, dup2, close_range,
        // setrlimit) on data prepared before
        // the fork, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || self.apply(parent));
        }
    }
}

/// Marks every descriptor numbered `first` or above close-on-exec
/// (async-signal-safe). Marking rather than closing keeps the standard
/// library's exec-error pipe working until the exec itself.
fn close_from(first: RawFd) {
    #[cfg(target_os = "linux")]
    {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: close_range takes plain integers and only changes flags
        // of this (forked, single-threaded) process's descriptors.
        let r = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            )
        };
        if r == 0 {
            return;
        }
    }
    // Kernels before 5.11: one by one up to a generous bound.
    for fd in first..65536 {
        // SAFETY: F_SETFD on a number we may not hold fails harmlessly
        // with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// An anonymous file holding `bytes`, sealed against any change, with its
/// offset at 0, ready to hand to a child.
#[cfg(target_os = "linux")]
pub fn sealed_memfd(name: &std::ffi::CStr, bytes: &[u8]) -> io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: name is a valid C string; flags are constants.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh fd that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = std::fs::File::from(owned);
    std::io::Write::write_all(&mut &file, bytes)?;
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd with integer arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    std::io::Seek::seek(&mut &file, std::io::SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// A pipe whose both ends are close-on-exec.
pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(target_os = "linux")]
    {
        Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        let (r, w) = nix::unistd::pipe()?;
        fcntl(&r, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        fcntl(&w, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        Ok((r, w))
    }
}

/// A pidfd for child `pid`: readable once it has exited, without reaping
/// it (Linux ≥ 5.3). `Err` elsewhere.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a fresh descriptor owned by no one
        // else; pidfds are close-on-exec by default.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// Blocks until child `pid` has exited, without reaping it.
pub fn wait_exit_nowait(pid: libc::pid_t) -> io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes into `info`, which lives for the call.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// How a reaped child ended, and what it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// `Ok(code)` for a normal exit, `Err(signal)` when killed.
    pub status: Result<i32, i32>,
    pub cpu_ms: u64,
    pub max_rss_bytes: u64,
}

/// Reaps `pid` (which must have exited) with its resource usage, which
/// includes the descendants it waited for.
pub fn reap(pid: libc::pid_t) -> io::Result<Reaped> {
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes into `status` and `usage`, both live here.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    let status = if libc::WIFSIGNALED(status) {
        Err(libc::WTERMSIG(status))
    } else {
        Ok(libc::WEXITSTATUS(status))
    };
    Ok(Reaped {
        status,
        cpu_ms: ms(usage.ru_utime) + ms(usage.ru_stime),
        // Linux reports kilobytes, macOS bytes.
        max_rss_bytes: if cfg!(target_os = "macos") {
            usage.ru_maxrss as u64
        } else {
            usage.ru_maxrss as u64 * 1024
        },
    })
}
