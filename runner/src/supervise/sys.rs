//! The few operating-system calls that need `unsafe`, in one place.
//!
//! - [`spawn`]: starts a program with a [`ChildSetup`] applied between
//!   the child's birth and its `exec` (only async-signal-safe calls, no
//!   allocation): place descriptors at fixed numbers (stdio included), set
//!   rlimits, join cgroups, ask to be killed with the runner. On Linux the
//!   child shares the runner's memory until it execs (`CLONE_VM |
//!   CLONE_VFORK`, as `posix_spawn` does), so starting a sandbox costs no
//!   copy of the runner's page tables and no copy-on-write faults
//!   afterwards, whatever the runner's size (the daemon's is large);
//! - [`sealed_memfd`]: an anonymous, sealed (immutable) file holding data a
//!   sandbox reads at start;
//! - [`wait_exit_nowait`] / [`reap`]: wait for a child without reaping it,
//!   then reap it with its resource usage. Splitting the two keeps the pid
//!   reserved until the supervisor is done signalling it, so a kill can
//!   never hit a recycled pid;
//! - [`arg_max`], [`limit_malloc_arenas`], [`return_freed_memory`] and
//!   [`trim_malloc`]: a system constant and allocator settings, which libc
//!   offers only as `unsafe` functions;
//! - [`release_program_pages`]: drops the resident pages of the program's
//!   own code, to be read back as used (`madvise`);
//! - [`has_access_acl`]: whether a file carries an ACL (`lgetxattr`);
//! - [`open_in_root`]: opens a path resolved as if a folder were `/`
//!   (`openat2` with `RESOLVE_IN_ROOT`).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Lowest fd number used as scratch while remapping descriptors.
const SCRATCH_FD_BASE: RawFd = 100;

/// What the child does before `exec`. Everything is prepared in the
/// parent; `ChildSetup::apply` only issues system calls.
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
    /// Without a new session: put the child in a process group of its own.
    pub process_group: bool,
    /// Raise `/proc/self/oom_score_adj` to 1000 (raising needs no
    /// privilege, and is inherited): when one memory cgroup holds the runner
    /// and its sandboxes together (a container's `--memory`), the kernel's
    /// OOM killer takes a sandboxed process first, not the runner that would
    /// report it. Linux only; an error here fails the spawn.
    pub oom_first: bool,
    /// `(uid, gid)` to become before `exec`, with no supplementary groups:
    /// a runner started as root launches the sandbox as an unprivileged
    /// host user (see [`crate::sandbox::identity`]).
    pub identity: Option<(u32, u32)>,
    /// A mount namespace to join before `exec` (Linux): the daemon's
    /// template ([`crate::sandbox::template`]). The program's path is
    /// resolved there.
    pub mount_ns: Option<RawFd>,
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
            // group leader, which a fresh child is not.
            check(unsafe { libc::setsid() })?;
        } else if self.process_group {
            // SAFETY: setpgid(0, 0) makes the caller a group leader.
            check(unsafe { libc::setpgid(0, 0) })?;
        }
        #[cfg(target_os = "linux")]
        if self.oom_first {
            // SAFETY: open with a static NUL-terminated path and plain
            // flags; write from a static buffer to the fd it returned;
            // close of that same fd. No memory of ours is touched.
            unsafe {
                let fd = libc::open(
                    c"/proc/self/oom_score_adj".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                check(fd)?;
                let n = libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
                if n != 4 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        for &fd in &self.cgroup_procs {
            // SAFETY: fd is an open cgroup.procs file inherited from the
            // parent; the buffer is a static byte string.
            let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            if n != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        // Before the descriptors move (one could land on its number) and
        // while still privileged. The child has an fs context of its own
        // (no CLONE_FS), as joining a mount namespace requires.
        #[cfg(target_os = "linux")]
        if let Some(ns) = self.mount_ns {
            // SAFETY: setns takes a descriptor and a flag; it changes only
            // this child's mount namespace, root and working directory.
            check(unsafe { libc::setns(ns, libc::CLONE_NEWNS) })?;
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
        #[cfg(target_os = "linux")]
        if let Some((uid, gid)) = self.identity {
            // Groups first: once the uid changes, the right to change them
            // is gone. The cgroup was joined above, while still root.
            // SAFETY: setgroups with a zero count reads no memory;
            // setresgid/setresuid take plain integers.
            unsafe {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
            }
        }
        // After the identity change, which clears the parent-death signal.
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
        Ok(())
    }
}

/// Starts `program` (an absolute path) with `args` and exactly the
/// environment `env`, applying `setup` in the child before `exec`. The
/// child's stdio is whatever `setup.fd_map` puts at 0, 1 and 2. Returns
/// its pid; the caller reaps it.
pub fn spawn(
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    setup: &ChildSetup,
) -> io::Result<libc::pid_t> {
    let c = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument or environment variable contains a NUL byte",
            )
        })
    };
    let prog = c(program.as_os_str().as_bytes())?;
    let mut argv_owned = vec![prog.clone()];
    for a in args {
        argv_owned.push(c(a.as_bytes())?);
    }
    let mut env_owned = Vec::with_capacity(env.len());
    for (k, v) in env {
        env_owned.push(c(format!("{k}={v}").as_bytes())?);
    }
    let argv: Vec<*const libc::c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = env_owned
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let exec = Exec {
        program: prog.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        setup,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
    };
    spawn_exec(&exec)
}

/// Everything the child needs, prepared by the parent: the child only
/// reads it (and, on Linux, writes back the errno of a failure).
struct Exec<'a> {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    setup: &'a ChildSetup,
    parent: libc::pid_t,
}

/// Why the child failed before `exec` (0: it did not).
#[cfg(target_os = "linux")]
struct ChildError(std::sync::atomic::AtomicI32);

/// The child's side: reset signal handlers, apply the setup, exec.
/// Returns only on failure, with the errno.
///
/// # Safety
///
/// Must run in a freshly created child, before `exec`, with every signal
/// blocked. It calls only async-signal-safe functions and allocates
/// nothing, so it is also sound in a child sharing the parent's memory.
unsafe fn child_exec(exec: &Exec<'_>) -> libc::c_int {
    // Handlers installed by the runner (and its runtime) are addresses in
    // its memory: the child must not run them. And the command starts
    // from a clean slate whatever the runner inherited: every signal gets
    // its default action (Rust programs ignore SIGPIPE; a parent may have
    // ignored others) before anything is unblocked.
    for sig in 1..SIGNALS {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            default_action(sig);
        }
    }
    if let Err(e) = exec.setup.apply(exec.parent) {
        return e.raw_os_error().unwrap_or(libc::EINVAL);
    }
    // SAFETY: program, argv and envp are NUL-terminated strings and
    // null-terminated arrays owned by the parent, alive until we exec.
    unsafe { libc::execve(exec.program, exec.argv, exec.envp) };
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Sets `sig`'s action to the default (async-signal-safe). The raw system
/// call, because the C library refuses to touch the signals it reserves
/// for itself (32 and 33), which a parent may still have left ignored.
#[cfg(target_os = "linux")]
fn default_action(sig: libc::c_int) {
    /// The kernel's `struct sigaction` on Linux.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: libc::c_ulong,
        restorer: usize,
        mask: u64,
    }
    let dfl = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: rt_sigaction reads the local struct; the size is that of the
    // kernel's signal set. A number the kernel refuses fails harmlessly.
    // (The struct is all zeros, so architectures whose kernel struct has
    // no `sa_restorer` read the same action.)
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &dfl as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            std::mem::size_of::<u64>(),
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn default_action(sig: libc::c_int) {
    // SAFETY: sigaction reads the local struct; an invalid number fails
    // harmlessly.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
    }
}

/// One past the highest signal number.
#[cfg(target_os = "linux")]
const SIGNALS: libc::c_int = 65;
#[cfg(not(target_os = "linux"))]
const SIGNALS: libc::c_int = 32;

/// A stack for the child until it execs: its own mapping with a guard
/// page below, unmapped afterwards. Not from the allocator: a heap block
/// would be zeroed (touched) on every spawn and kept by the allocator
/// afterwards, while pages of a fresh mapping that the child never touches
/// are never backed.
#[cfg(target_os = "linux")]
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

#[cfg(target_os = "linux")]
impl ChildStack {
    fn new() -> io::Result<ChildStack> {
        let page = 4096;
        let len = CHILD_STACK + page;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // SAFETY: the lowest page of our own mapping becomes inaccessible,
        // so an overflow faults instead of writing below the mapping.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer: the end of the mapping (page aligned, so
    /// also 16-byte aligned as the ABI asks).
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of our own mapping.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

#[cfg(target_os = "linux")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which no one
        // uses any more (the child has exec'd or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Size of the child's stack. The setup uses a few hundred bytes; pages
/// never touched are never backed.
#[cfg(target_os = "linux")]
const CHILD_STACK: usize = 256 * 1024;

#[cfg(target_os = "linux")]
fn spawn_exec(exec: &Exec<'_>) -> io::Result<libc::pid_t> {
    struct Arg<'a, 'b> {
        exec: &'a Exec<'b>,
        error: ChildError,
    }
    extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the parent's `Arg`, alive until the
        // child has exec'd or exited (CLONE_VFORK suspends the parent until
        // then); the child runs with every signal blocked.
        unsafe {
            let arg = &*(arg as *const Arg<'_, '_>);
            let errno = child_exec(arg.exec);
            arg.error
                .0
                .store(errno, std::sync::atomic::Ordering::Relaxed);
            libc::_exit(127)
        }
    }

    let arg = Arg {
        exec,
        error: ChildError(std::sync::atomic::AtomicI32::new(0)),
    };
    let stack = ChildStack::new()?;
    let top = stack.top();

    // Block everything so no handler of ours runs in the child, which
    // shares our memory until it execs; it resets them before unblocking.
    // SAFETY: sigset_t is plain data; zeroed is a valid value.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_sigmask only changes this thread's mask, restored
    // below.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: `child_main` runs on `stack`, which outlives the child's use
    // of it (the parent resumes only once the child has exec'd or exited);
    // CLONE_VM without CLONE_FILES gives the child its own descriptor
    // table, so its dup2/close-on-exec changes never touch ours.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &arg as *const Arg<'_, '_> as *mut libc::c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    let errno = arg.error.0.load(std::sync::atomic::Ordering::Relaxed);
    if errno != 0 {
        // It has exited (status 127); reap it so no zombie is left.
        let mut status = 0;
        // SAFETY: waitpid on our own child, writing a local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(pid)
}

/// Elsewhere: `fork`, the setup, `exec`; the errno of a failure comes back
/// on a close-on-exec pipe.
#[cfg(not(target_os = "linux"))]
fn spawn_exec(exec: &Exec<'_>) -> io::Result<libc::pid_t> {
    use std::os::fd::AsRawFd;
    let (r, w) = pipe_cloexec()?;
    // SAFETY: sigset_t is plain data; zeroed is a valid value.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as on Linux: block everything around the fork, restore after.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the child calls only async-signal-safe functions
    // (`child_exec`, write, _exit) before exec.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the fresh child with every signal blocked.
        unsafe {
            let errno = child_exec(exec);
            let bytes = errno.to_ne_bytes();
            libc::write(w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        }
    }
    let fork_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(fork_error);
    }
    drop(w);
    let mut bytes = [0u8; 4];
    let n = loop {
        // SAFETY: reads into a local buffer of the given length.
        let n = unsafe { libc::read(r.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n == bytes.len() as isize {
        let mut status = 0;
        // SAFETY: waitpid on our own child, writing a local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(bytes)));
    }
    Ok(pid)
}

/// Marks every descriptor numbered `first` or above close-on-exec
/// (async-signal-safe). Marking rather than closing keeps descriptors the
/// child still uses before `exec` (the macOS exec-error pipe) open.
fn close_from(first: RawFd) {
    #[cfg(target_os = "linux")]
    {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: close_range takes plain integers and only changes flags
        // of this child's descriptors (its table is its own copy).
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

/// An anonymous executable file holding `bytes` (mode 0555), sealed
/// against any change: what bubblewrap executes as the small exec shim
/// ([`crate::sandbox::shim::executable`]). Linux 6.3 and later want executability
/// asked for (`MFD_EXEC`, refused under `vm.memfd_noexec = 2`); before,
/// the flag is unknown (`EINVAL`) and every memfd is executable.
#[cfg(target_os = "linux")]
pub fn executable_memfd(name: &std::ffi::CStr, bytes: &[u8]) -> io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    const MFD_EXEC: libc::c_uint = 0x10;
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a valid C string and constant flags.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), base | MFD_EXEC) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(name.as_ptr(), base) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh fd that nothing else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    std::io::Write::write_all(&mut &file, bytes)?;
    // SAFETY: fchmod on our own fd.
    if unsafe { libc::fchmod(file.as_raw_fd(), 0o555) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd with integer arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// Makes `cmd` start with each `(fd, target)` of `fds` on `target` (for
/// tests that run a program as bubblewrap would, with its descriptors).
#[cfg(all(test, target_os = "linux"))]
pub fn place_fds(cmd: &mut std::process::Command, fds: Vec<(RawFd, RawFd)>) {
    // SAFETY: between fork and exec, only fcntl and dup2 on descriptors
    // the caller keeps open: first out of the way (a source may sit on a
    // target number), then onto their numbers.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let mut moved = [0; 16];
            for (i, (fd, _)) in fds.iter().enumerate().take(16) {
                moved[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 100);
                if moved[i] < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, (_, target)) in fds.iter().enumerate().take(16) {
                if libc::dup2(moved[i], *target) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
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

/// Reads descriptor `fd` (inherited, not owned by anything else) to its
/// end, at most `max` bytes: `Err` past them. The exec shim reads a
/// prepared sandbox's hand-over this way (crate::sandbox::handover).
pub fn read_inherited(fd: RawFd, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: reads into a live local buffer of the given length; the
        // number is only read from, never closed or owned here.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n as usize]);
        if out.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too large",
            ));
        }
    }
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

/// The exec shim's side (see [`crate::sandbox::shim`]), inside the finished
/// sandbox: writes `started` to `report`, moves `stderr` to fd 2 (when it
/// is open), restores SIGPIPE's default action, marks every descriptor
/// above 2 close-on-exec and calls `execvp(argv[0], argv)`. Returns only
/// if that fails: with the errno, after writing it (4 bytes,
/// little-endian) to `report`. A missing `report` (the printed command
/// run by hand) is ignored.
#[cfg(target_os = "linux")]
pub fn shim_exec(report: RawFd, stderr: RawFd, started: u8, argv: &[CString]) -> libc::c_int {
    let write_all = |bytes: &[u8]| {
        let mut off = 0;
        while off < bytes.len() {
            // SAFETY: writes from a live local buffer of the given length.
            let n = unsafe { libc::write(report, bytes[off..].as_ptr().cast(), bytes.len() - off) };
            if n > 0 {
                off += n as usize;
            } else if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            } else {
                return;
            }
        }
    };
    write_all(&[started]);
    // SAFETY: F_GETFD only asks whether the number is an open descriptor.
    if unsafe { libc::fcntl(stderr, libc::F_GETFD) } >= 0 {
        // SAFETY: dup2 onto stderr, then close the original; both numbers
        // are ours and nothing else in this single-threaded process uses
        // them.
        unsafe {
            libc::dup2(stderr, 2);
            libc::close(stderr);
        }
    }
    default_action(libc::SIGPIPE);
    close_from(3);
    let errno = match argv.first() {
        None => libc::EINVAL,
        Some(program) => {
            let ptrs: Vec<*const libc::c_char> = argv
                .iter()
                .map(|a| a.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect();
            // SAFETY: program and every argument are NUL-terminated strings
            // alive for the call; the array is null-terminated.
            unsafe { libc::execvp(program.as_ptr(), ptrs.as_ptr()) };
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL)
        }
    };
    write_all(&errno.to_le_bytes());
    errno
}

/// Forks a detached process for the exec shim's network forwarder
/// ([`crate::sandbox::net::forward`]): the shim forks a child, which forks the
/// forwarder and exits at once, and the shim reaps it; the forwarder is
/// then nobody's child in the sandbox but pid 1's, so the command never
/// sees it in `wait`. In the forwarder, stdin, stdout and stderr become
/// `/dev/null` and every other descriptor but `keep` is closed (the
/// shim's report pipe among them, whose end must come with the command's
/// `execve`). Returns `true` in the forwarder, `false` in the shim.
///
/// Only for a single-threaded process (the shim, before it executes the
/// command).
#[cfg(target_os = "linux")]
pub fn fork_detached(keep: RawFd) -> io::Result<bool> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY: the shim is single-threaded (it runs before anything starts
    // a thread), so the child's memory is consistent and it may run
    // ordinary code, allocation included.
    let child = check(unsafe { libc::fork() })?;
    if child > 0 {
        let mut status = 0;
        // SAFETY: waits for the child just forked, writing into a local.
        while unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::last_os_error());
            }
        }
        return if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(false)
        } else {
            Err(io::Error::other("the forwarder could not be started"))
        };
    }
    // SAFETY: as above; this child is single-threaded too.
    match unsafe { libc::fork() } {
        // SAFETY: _exit ends the intermediate child without running
        // anything of the parent's (no atexit handlers, no buffers).
        -1 => unsafe { libc::_exit(1) },
        0 => {}
        // SAFETY: as above.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: open with a NUL-terminated literal path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
    if null >= 0 {
        for fd in 0..3 {
            // SAFETY: dup2 onto stdio numbers of this process alone.
            unsafe { libc::dup2(null, fd) };
        }
    }
    let close_range = |from: RawFd, to: RawFd| {
        if from > to {
            return;
        }
        // SAFETY: close_range takes plain integers; it closes descriptors
        // of this process alone.
        let r = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                from as libc::c_uint,
                to as libc::c_uint,
                0 as libc::c_uint,
            )
        };
        if r != 0 {
            for fd in from..=to.min(65535) {
                // SAFETY: closing a number we may not hold fails with EBADF.
                unsafe { libc::close(fd) };
            }
        }
    };
    close_range(3, keep - 1);
    close_range(keep + 1, RawFd::MAX);
    Ok(true)
}

/// Whether `path` (not followed, if a symlink) carries a POSIX access
/// ACL, which can deny a user what the mode bits allow. A file system
/// without extended attributes has none.
#[cfg(target_os = "linux")]
pub fn has_access_acl(path: &Path) -> io::Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: both strings are NUL-terminated and live across the call; a
    // null buffer of size 0 only asks for the attribute's size.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    if n >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

/// See the Linux version: elsewhere no ACL is looked at.
#[cfg(not(target_os = "linux"))]
pub fn has_access_acl(_path: &Path) -> io::Result<bool> {
    Ok(false)
}

/// Sets an extended attribute (tests: an ACL the runner must notice).
#[cfg(all(test, target_os = "linux"))]
pub fn set_xattr(path: &Path, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: NUL-terminated strings and a buffer of `value.len()` bytes,
    // all alive across the call.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `sysconf(_SC_ARG_MAX)`: the bytes `execve` takes for argv and the
/// environment together; `None` when the system does not say.
pub fn arg_max() -> Option<usize> {
    // SAFETY: sysconf reads a system constant; no memory is involved.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// Drops this process's resident pages of its own program file (its
/// code and read-only data) and has the kernel read them back one page at
/// a time, as they are used: `MADV_RANDOM` (no read-ahead around a fault),
/// then `MADV_PAGEOUT`. A page another process maps too is left as it is.
/// Returns the bytes advised (0 where this is not Linux or the maps do
/// not read).
///
/// Without this, every fault in the code maps the 64 KiB around it
/// (fault-around) from a page cache the build or another run filled, so
/// a daemon that runs a little of everything once, at its start, kept
/// nearly all of its ~14 MiB of code resident.
pub fn release_program_pages() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return 0;
        };
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return 0;
        };
        let exe = exe.to_string_lossy();
        let mut advised = 0;
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            // offset, device, inode, then the path (which may hold spaces).
            let path = f.skip(3).collect::<Vec<_>>().join(" ");
            if path != exe || perms.contains('w') {
                continue;
            }
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            let len = end.saturating_sub(start);
            // SAFETY: the range is one of this process's own mappings of
            // its program, which is never unmapped, and neither advice
            // changes what the memory holds: a dropped page of a file
            // mapping is read back from the file at the next access, a
            // written (copy-on-write) page is kept or swapped, never lost.
            unsafe {
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_RANDOM);
                if libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT) == 0 {
                    advised += len as u64;
                }
            }
        }
        advised
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Has glibc's malloc give freed memory back to the kernel as it goes:
/// allocations of `threshold` bytes or more are mapped on their own
/// (`M_MMAP_THRESHOLD`, which also stops glibc raising it after every
/// large free), and free memory past `threshold` at the top of a heap is
/// returned (`M_TRIM_THRESHOLD`). Nothing elsewhere. Call it before the
/// process starts a thread.
pub fn return_freed_memory(threshold: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters, and no other
    // thread exists yet to allocate concurrently.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, threshold);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = threshold;
}

/// Returns the free memory of every malloc arena to the kernel (glibc's
/// `malloc_trim(0)`, which also releases whole free pages inside a heap);
/// nothing elsewhere.
pub fn trim_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes each arena's lock itself; it only gives
    // pages of free chunks back, never memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's malloc at `arenas` arenas (`M_ARENA_MAX`); nothing
/// elsewhere. Call it before the process starts a thread.
pub fn limit_malloc_arenas(arenas: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter, and no other
    // thread exists yet to allocate concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// `path` (absolute or not) opened `O_PATH`, resolved with `root` as
/// `/`: `..` and absolute symlinks stay inside it (`openat2`,
/// `RESOLVE_IN_ROOT`, Linux 5.6); with `no_symlinks`, a symlink anywhere
/// on the way fails it (`ELOOP`).
#[cfg(target_os = "linux")]
pub fn open_in_root(
    root: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    no_symlinks: bool,
) -> io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let rel = path.strip_prefix("/").unwrap_or(path);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = CString::new(rel.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: open_how is plain integers; all zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    if no_symlinks {
        how.resolve |= libc::RESOLVE_NO_SYMLINKS;
    }
    // SAFETY: openat2 reads the NUL-terminated path and `how`, of the size
    // given, and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
