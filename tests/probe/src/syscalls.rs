//! System calls a sandbox must refuse outright: kernel attack surface
//! (io_uring, bpf, perf, userfaultfd, keys, kexec, modules, file handles,
//! namespaces), terminal injection, and the foreign system call ABIs a
//! filter written for x86_64 can miss.
//!
//! The calls are made by number with harmless but invalid arguments, chosen
//! so that a kernel that lets the call through rejects the arguments before
//! it does anything, even for root on a host. Hence the [`Rule::Filtered`]
//! rule: `EPERM` (our seccomp filter's answer) and `ENOSYS` deny; `EINVAL`,
//! `EBADF`, `EFAULT`, `EOPNOTSUPP`… mean the call reached the kernel's own
//! checks and are reported `ALLOWED`.
//!
//! | subcommand | call(s), labels | a kernel that lets it through answers |
//! |---|---|---|
//! | `bpf` | `bpf` with an undefined command | EINVAL |
//! | `perf-event-open` | `perf_event_open` with every flag bit set | EINVAL |
//! | `userfaultfd` | `userfaultfd(UFFD_USER_MODE_ONLY \| O_RDWR)` | EINVAL |
//! | `keyctl` | `keyctl` with an undefined operation | EOPNOTSUPP |
//! | `kexec` | `kexec_load`, `kexec_file_load` with an undefined flag | EINVAL (EPERM without CAP_SYS_BOOT) |
//! | `init-module` | `finit_module(-1)`, `init_module` of an empty image | EBADF, ENOEXEC (EPERM without CAP_SYS_MODULE) |
//! | `open-by-handle-at` | `open_by_handle_at(-1, empty handle)` | EINVAL or EBADF (EPERM from kernels that check CAP_DAC_READ_SEARCH first) |
//! | `setns` | `setns(-1, 0)` | EBADF |
//!
//! `kexec` and `init-module` check the capability before the arguments, so
//! for them `EPERM` proves only that the capability is missing, which in a
//! sandbox it must be; a kernel built without kexec or module support
//! answers `ENOSYS` even on a host. The others prove the filter.
//!
//! The rest use [`Rule::AnyError`]: `io-uring` (a real `io_uring_setup(8)`),
//! `tiocsti` (push `x` into the input of stdin, stdout, stderr and
//! `/dev/tty`), `tioclinux` (the read-only `TIOCL_GETSHIFTSTATE` on the
//! same), `x32-syscall` and `i386-syscall` (getpid through the x32 ABI and
//! through `int 0x80`; a `SIGSEGV` from a kernel without 32-bit entry is
//! caught and printed as `DENIED`, a `SIGSYS` from a killing filter ends the
//! process, which the test sees).

use std::os::fd::{AsFd, BorrowedFd};

use libc::c_long;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::args::RawCall;
use crate::sys;
use crate::verdict::{verdict, Attempt, Outcome, Rule};

/// One raw system call attempt: its label and the wrapper that makes it.
type LabelledCall = (&'static str, fn() -> Result<c_long, Errno>);

/// The calls behind each raw subcommand.
fn calls(call: RawCall) -> &'static [LabelledCall] {
    match call {
        RawCall::Bpf => &[("bpf", sys::bpf_unknown_command)],
        RawCall::PerfEventOpen => &[("perf_event_open", sys::perf_event_open_bad_flags)],
        RawCall::Userfaultfd => &[("userfaultfd", sys::userfaultfd_bad_flags)],
        RawCall::Keyctl => &[("keyctl", sys::keyctl_unknown_operation)],
        RawCall::Kexec => &[
            ("kexec_load", sys::kexec_load_bad_flags),
            ("kexec_file_load", sys::kexec_file_load_bad_flags),
        ],
        RawCall::InitModule => &[
            ("finit_module", sys::finit_module_bad_fd),
            ("init_module", sys::init_module_empty),
        ],
        RawCall::OpenByHandleAt => &[("open_by_handle_at", sys::open_by_handle_at_bad_fd)],
        RawCall::Setns => &[("setns", sys::setns_bad_fd)],
        RawCall::Clone3 => &[("clone3", sys::clone3_size_zero)],
        RawCall::Openat2 => &[("openat2", sys::openat2_size_zero)],
    }
}

/// `bpf`, `perf-event-open`, `userfaultfd`, `keyctl`, `kexec`,
/// `init-module`, `open-by-handle-at`, `setns`, `clone3`, `openat2`.
pub fn raw(call: RawCall) -> Outcome {
    let attempts: Vec<Attempt> = calls(call)
        .iter()
        .map(|(label, make)| {
            let result = make().map(|ret| format!("returned {ret}"));
            Attempt::new(*label, result, Rule::Filtered)
        })
        .collect();
    verdict(&attempts)
}

/// `io-uring`.
pub fn io_uring() -> Outcome {
    let result = sys::io_uring_setup(8).map(|_ring| "created a ring of 8 entries".to_owned());
    verdict(&[Attempt::new("io_uring_setup", result, Rule::AnyError)])
}

/// Which terminal ioctl to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtyIoctl {
    /// `TIOCSTI`: inject a byte into the input queue.
    Sti,
    /// `TIOCLINUX`: the Linux console's multiplexed control.
    Linux,
}

/// `tiocsti` and `tioclinux`: the ioctl on fds 0, 1, 2 and on `/dev/tty`.
pub fn tty(which: TtyIoctl) -> Outcome {
    let try_on = |fd: BorrowedFd<'_>| {
        match which {
            TtyIoctl::Sti => sys::tiocsti(fd, b'x'),
            TtyIoctl::Linux => sys::tioclinux_get_shift_state(fd),
        }
        .map(|()| String::new())
    };
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let stdio = [
        ("stdin", stdin.as_fd()),
        ("stdout", stdout.as_fd()),
        ("stderr", stderr.as_fd()),
    ];
    let mut attempts: Vec<Attempt> = stdio
        .iter()
        .map(|(label, fd)| Attempt::new(*label, try_on(*fd), Rule::AnyError))
        .collect();
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let dev_tty = match nix::fcntl::open("/dev/tty", flags, Mode::empty()) {
        Ok(fd) => Attempt::new("dev-tty", try_on(fd.as_fd()), Rule::AnyError),
        Err(errno) => Attempt::new("dev-tty-open", Err(errno), Rule::AnyError),
    };
    attempts.push(dev_tty);
    verdict(&attempts)
}

/// `x32-syscall`.
pub fn x32() -> Outcome {
    #[cfg(target_arch = "x86_64")]
    {
        let result = sys::x32_getpid().map(|pid| format!("getpid returned {pid}"));
        verdict(&[Attempt::new("x32 getpid", result, Rule::AnyError)])
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Outcome::denied("not applicable on this arch")
    }
}

/// `i386-syscall`.
pub fn i386() -> Outcome {
    #[cfg(target_arch = "x86_64")]
    {
        if let Err(errno) = sys::report_sigsegv_as_denied() {
            return Outcome::no_verdict(format!("probe: cannot catch SIGSEGV: {errno}"));
        }
        let result = sys::int80_getpid().map(|pid| format!("getpid returned {pid}"));
        verdict(&[Attempt::new("int 0x80", result, Rule::AnyError)])
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Outcome::denied("not applicable on this arch")
    }
}
