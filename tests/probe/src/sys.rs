//! The one module with `unsafe`: the calls nix has no safe wrapper for.
//!
//! That is `fork` and raw `clone`/`clone3`, signal dispositions, `_exit`,
//! system calls by number with harmless arguments, the two tty ioctls, and
//! the foreign-ABI system calls (`int 0x80`, x32).
//!
//! Invariants the `SAFETY` comments rely on:
//!
//! - The probe is single-threaded for its whole life: nothing in it spawns a
//!   thread, so a forked child is a full copy of the only thread and may run
//!   ordinary Rust code (allocation included) before it calls [`exit_now`].
//! - Every pointer handed to the kernel points at a live, zeroed buffer at
//!   least as large as the length passed with it, so even a kernel that
//!   ignores our "invalid" arguments writes only into memory we own.
//! - The "invalid argument" calls use flags or fds that the kernel rejects
//!   before it acts: none of them can load, unload or change anything even
//!   when run as root on a host.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libc::{c_int, c_long};
use nix::errno::Errno;
use nix::unistd::Pid;

/// `-1` and `errno` to `Err`, anything else to `Ok`.
fn check(ret: c_long) -> Result<c_long, Errno> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The original process, with the child's pid.
    Parent(Pid),
}

/// `fork(2)`. Flush stdout before calling it, or buffered output is printed
/// twice.
pub fn fork() -> Result<Forked, Errno> {
    // SAFETY: the probe is single-threaded (module invariant), so the child
    // holds no lock another thread could own and may run any code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// `_exit(2)`: end this process now, without running exit handlers or
/// flushing buffers a forked child shares with its parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` only ends the process; it has no preconditions.
    unsafe { libc::_exit(code) }
}

/// What a signal does when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// `SIG_IGN`
    Ignore,
    /// `SIG_DFL`
    Default,
}

/// Set the disposition of signal number `signum` (any number, real-time
/// signals included).
pub fn set_disposition(signum: c_int, disposition: Disposition) -> Result<(), Errno> {
    let handler = match disposition {
        Disposition::Ignore => libc::SIG_IGN,
        Disposition::Default => libc::SIG_DFL,
    };
    // SAFETY: SIG_IGN and SIG_DFL are not functions, so no handler code can
    // run at an unexpected time.
    let previous = unsafe { libc::signal(signum, handler) };
    if previous == libc::SIG_ERR {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// `raise(3)` signal number `signum`.
pub fn raise(signum: c_int) -> Result<(), Errno> {
    // SAFETY: raise takes no pointers; what the signal does is the point.
    check(unsafe { libc::raise(signum) }.into()).map(drop)
}

/// `io_uring_setup(entries, &params)` with zeroed parameters; the ring's fd
/// on success.
pub fn io_uring_setup(entries: u32) -> Result<OwnedFd, Errno> {
    // struct io_uring_params is 120 bytes; the kernel writes the ring offsets
    // back into it.
    let mut params = [0u64; 15];
    // SAFETY: `params` is a live, zeroed, 8-aligned buffer of the size of
    // struct io_uring_params.
    let fd =
        check(unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, params.as_mut_ptr()) })?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}

/// `bpf(cmd, &attr, 0)` with a command number no kernel defines: `EINVAL`
/// when the call reaches the kernel.
pub fn bpf_unknown_command() -> Result<c_long, Errno> {
    let attr = [0u64; 32];
    // SAFETY: `attr` is live and zeroed; size 0 means the kernel reads none of
    // it, and no bpf command writes through a size-0 attribute.
    check(unsafe { libc::syscall(libc::SYS_bpf, 0x7fff_i32, attr.as_ptr(), 0u32) })
}

/// `perf_event_open(&attr, 0, -1, -1, flags)` with every flag bit set:
/// `EINVAL` before any permission check when the call reaches the kernel.
pub fn perf_event_open_bad_flags() -> Result<c_long, Errno> {
    let attr = [0u64; 32];
    // SAFETY: `attr` is live, zeroed and larger than struct perf_event_attr;
    // the flags are rejected before it is read.
    check(unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as c_int,
            -1 as c_int,
            -1 as c_int,
            c_long::MAX,
        )
    })
}

/// `userfaultfd(UFFD_USER_MODE_ONLY | O_RDWR)`: user-mode-only passes the
/// sysctl gate, and the stray `O_RDWR` bit then gives `EINVAL`.
pub fn userfaultfd_bad_flags() -> Result<c_long, Errno> {
    const UFFD_USER_MODE_ONLY: c_int = 1;
    // SAFETY: userfaultfd takes no pointers.
    check(unsafe { libc::syscall(libc::SYS_userfaultfd, UFFD_USER_MODE_ONLY | libc::O_RDWR) })
}

/// `keyctl(op, 0, 0, 0, 0)` with an operation number no kernel defines:
/// `EOPNOTSUPP` when the call reaches the kernel.
pub fn keyctl_unknown_operation() -> Result<c_long, Errno> {
    // SAFETY: no pointers; the unknown operation is rejected before any
    // argument is used.
    check(unsafe { libc::syscall(libc::SYS_keyctl, 0x7fff_i32, 0usize, 0usize, 0usize, 0usize) })
}

/// `kexec_load(0, 0, NULL, flags)` with an undefined flag bit: `EINVAL` (for
/// a caller with `CAP_SYS_BOOT`; `EPERM` without it).
pub fn kexec_load_bad_flags() -> Result<c_long, Errno> {
    const UNDEFINED_FLAG: usize = 0x4000;
    // SAFETY: zero segments and a null segment list: nothing is read; the
    // undefined flag stops the call before any image is loaded or unloaded.
    check(unsafe {
        libc::syscall(
            libc::SYS_kexec_load,
            0usize,
            0usize,
            std::ptr::null::<u8>(),
            UNDEFINED_FLAG,
        )
    })
}

/// `kexec_file_load(-1, -1, 0, NULL, flags)` with an undefined flag bit.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn kexec_file_load_bad_flags() -> Result<c_long, Errno> {
    const UNDEFINED_FLAG: usize = 0x4000_0000;
    // SAFETY: bad fds, a null zero-length command line, and an undefined flag
    // that stops the call before any image is loaded or unloaded.
    check(unsafe {
        libc::syscall(
            libc::SYS_kexec_file_load,
            -1 as c_int,
            -1 as c_int,
            0usize,
            std::ptr::null::<u8>(),
            UNDEFINED_FLAG,
        )
    })
}

/// `kexec_file_load` does not exist on this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn kexec_file_load_bad_flags() -> Result<c_long, Errno> {
    Err(Errno::ENOSYS)
}

/// `finit_module(-1, "", 0)`: `EBADF` (for a caller with `CAP_SYS_MODULE`).
pub fn finit_module_bad_fd() -> Result<c_long, Errno> {
    // SAFETY: the parameter string is a static NUL-terminated literal; fd -1
    // is rejected before anything is loaded.
    check(unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            -1 as c_int,
            c"".as_ptr(),
            0 as c_int,
        )
    })
}

/// `init_module(image, 0, "")` with an empty image: `ENOEXEC` (for a caller
/// with `CAP_SYS_MODULE`).
pub fn init_module_empty() -> Result<c_long, Errno> {
    let image = [0u8; 8];
    // SAFETY: `image` is live; length 0 means nothing is read from it, and an
    // image shorter than an ELF header is rejected before anything is loaded.
    check(unsafe { libc::syscall(libc::SYS_init_module, image.as_ptr(), 0usize, c"".as_ptr()) })
}

/// `open_by_handle_at(-1, &handle, O_RDONLY)` with an empty handle: `EBADF`
/// or `EINVAL` when the call reaches the kernel.
pub fn open_by_handle_at_bad_fd() -> Result<c_long, Errno> {
    // struct file_handle { u32 handle_bytes = 0; int handle_type = 0; ... }
    let handle = [0u32; 4];
    // SAFETY: `handle` is live and zeroed; handle_bytes = 0 means the kernel
    // reads only its 8-byte header.
    check(unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            -1 as c_int,
            handle.as_ptr(),
            libc::O_RDONLY,
        )
    })
}

/// `setns(-1, 0)`: `EBADF` when the call reaches the kernel.
pub fn setns_bad_fd() -> Result<c_long, Errno> {
    // SAFETY: no pointers; fd -1 is rejected before any namespace changes.
    check(unsafe { libc::syscall(libc::SYS_setns, -1 as c_int, 0 as c_int) })
}

/// `clone3(NULL, 0)`: `EINVAL` when the call reaches the kernel (a size
/// below the first version of `struct clone_args`), so no child is made.
pub fn clone3_size_zero() -> Result<c_long, Errno> {
    // SAFETY: a null argument of size 0 is refused before it is read.
    check(unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) })
}

/// `openat2(AT_FDCWD, NULL, NULL, 0)`: `EINVAL` when the call reaches the
/// kernel (a `struct open_how` size below its first version), so nothing
/// is opened.
pub fn openat2_size_zero() -> Result<c_long, Errno> {
    // SAFETY: the size is checked before either pointer is read.
    check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            std::ptr::null::<u8>(),
            std::ptr::null::<u8>(),
            0usize,
        )
    })
}

/// `clone(CLONE_NEWUSER | SIGCHLD)` like `fork`: the child exits 0 at once.
/// Returns the child's pid; the caller reaps it.
pub fn clone_new_user() -> Result<Pid, Errno> {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: a null stack makes the child run on a copy-on-write copy of
    // this stack, as with fork; the probe is single-threaded and the child
    // only calls `_exit`.
    let ret = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match check(ret)? {
        0 => exit_now(0),
        pid => Ok(Pid::from_raw(pid as libc::pid_t)),
    }
}

/// `clone3({flags: CLONE_NEWUSER, exit_signal: SIGCHLD})` like `fork`: the
/// child exits 0 at once. Seccomp cannot look inside clone3's argument
/// struct, so filters must refuse the whole call.
pub fn clone3_new_user() -> Result<Pid, Errno> {
    // struct clone_args, version 0 (64 bytes): flags, pidfd, child_tid,
    // parent_tid, exit_signal, stack, stack_size, tls.
    let mut args = [0u64; 8];
    args[0] = libc::CLONE_NEWUSER as u64;
    args[4] = libc::SIGCHLD as u64;
    // SAFETY: `args` is a live struct clone_args of the size passed; no pid
    // or tid pointers are set, and with no stack the child runs on a
    // copy-on-write copy of this one and only calls `_exit`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args.as_mut_ptr(),
            std::mem::size_of_val(&args),
        )
    };
    match check(ret)? {
        0 => exit_now(0),
        pid => Ok(Pid::from_raw(pid as libc::pid_t)),
    }
}

/// `getpid` through the x32 ABI (number 39 with bit 30 set).
#[cfg(target_arch = "x86_64")]
pub fn x32_getpid() -> Result<c_long, Errno> {
    const X32_SYSCALL_BIT: c_long = 0x4000_0000;
    // SAFETY: x32 getpid takes no arguments and touches no memory.
    check(unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) })
}

/// `getpid` through the i386 ABI: `int 0x80` with eax = 20.
#[cfg(target_arch = "x86_64")]
pub fn int80_getpid() -> Result<c_long, Errno> {
    const I386_NR_GETPID: u64 = 20;
    let mut rax = I386_NR_GETPID;
    // SAFETY: `int 0x80` enters the kernel's 32-bit system call path; getpid
    // takes no arguments and touches no memory. The kernel preserves every
    // register but rax; r8-r11 are marked clobbered because kernels before
    // 4.17 zeroed them. Without 32-bit emulation the instruction faults, and
    // `report_sigsegv_as_denied` turns that SIGSEGV into a verdict.
    unsafe {
        core::arch::asm!(
            "int 0x80",
            inout("rax") rax,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            options(nostack),
        );
    }
    // The 32-bit ABI returns in eax; -4095..-1 are errnos.
    let ret = rax as u32 as i32;
    if (-4095..0).contains(&ret) {
        Err(Errno::from_raw(-ret))
    } else {
        Ok(ret.into())
    }
}

/// Make SIGSEGV print `DENIED <message>` and exit 0 (used where a missing
/// ABI faults instead of returning an error).
pub fn report_sigsegv_as_denied() -> Result<(), Errno> {
    extern "C" fn on_sigsegv(_: c_int) {
        const LINE: &[u8] = b"DENIED int 0x80: killed by SIGSEGV (no 32-bit system call entry)\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; LINE is static.
        unsafe {
            libc::write(libc::STDOUT_FILENO, LINE.as_ptr().cast(), LINE.len());
            libc::_exit(0);
        }
    }
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_sigsegv),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler only calls async-signal-safe functions and never
    // returns into the faulting code.
    unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGSEGV, &action) }.map(drop)
}

/// `ioctl(fd, TIOCSTI, &byte)`: push `byte` into the terminal's input queue.
pub fn tiocsti(fd: BorrowedFd<'_>, byte: u8) -> Result<(), Errno> {
    // SAFETY: TIOCSTI reads one byte through the pointer, which points at a
    // live local.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSTI, &byte as *const u8) }.into())
        .map(drop)
}

/// `ioctl(fd, TIOCLINUX, &[TIOCL_GETSHIFTSTATE])`: a read-only subcode, so a
/// console that accepts it only reports its shift state.
pub fn tioclinux_get_shift_state(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    const TIOCL_GETSHIFTSTATE: u8 = 6;
    let mut arg = [TIOCL_GETSHIFTSTATE, 0, 0, 0];
    // SAFETY: the kernel reads the subcode from and writes one byte back to
    // `arg`, a live 4-byte buffer.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCLINUX, arg.as_mut_ptr()) }.into())
        .map(drop)
}
