//! Privilege attempts: reach into another process, change the mount table,
//! make a new user namespace.
//!
//! Each subcommand tries several routes and is `DENIED` only if all fail.
//! Routes that could change this process are tried in a forked child, which
//! reports through its exit status (0, or the errno), so one route's success
//! cannot make a later route succeed. A child killed by a signal (`SIGSYS`
//! from a seccomp filter that kills) counts as denied.
//!
//! | subcommand | routes (labels) | rule |
//! |---|---|---|
//! | `ptrace` | `attach` (PTRACE_ATTACH to a sleeping child), `traceme` (PTRACE_TRACEME in a child), `process_vm_readv` (read the sleeping child's memory) | any error denies |
//! | `mount` | `mount` (tmpfs on `/tmp/m`, made first), `umount` (`/skills`, MNT_DETACH), `pivot_root` (to a path that does not exist) | `mount`, `umount`: any error; `pivot_root`: only EPERM/ENOSYS, since the kernel checks privilege first and a missing path then gives ENOENT |
//! | `unshare-user` | `unshare-user` (CLONE_NEWUSER), `unshare-mount` (CLONE_NEWNS), `clone-user` (clone with CLONE_NEWUSER), `clone3-user` (the same through clone3) | any error denies |

use std::io::IoSliceMut;
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::signal::{self, Signal};
use nix::sys::stat::Mode;
use nix::sys::uio::RemoteIoVec;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::sys::{self as rawsys, Forked};
use crate::verdict::{flush_stdio, verdict, Attempt, Outcome, Rule};

/// Bytes the ptrace probe tries to read out of its child.
static MARKER: [u8; 8] = *b"probe-vm";

/// Where `mount` tries to mount a tmpfs.
const MOUNT_POINT: &str = "/tmp/m";

/// Run `attempt` in a forked child and return what it returned there.
fn in_child(label: &str, attempt: fn() -> Result<(), Errno>) -> Result<Attempt, Errno> {
    flush_stdio();
    match rawsys::fork()? {
        Forked::Child => {
            let code = match attempt() {
                Ok(()) => 0,
                Err(errno) => errno as i32,
            };
            rawsys::exit_now(code)
        }
        Forked::Parent(child) => Ok(reap(label, child)),
    }
}

/// Wait for `child` and turn its exit status into an attempt: 0 is success,
/// any other code is the errno, a signal is a kill.
fn reap(label: &str, child: Pid) -> Attempt {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => {
                return Attempt::new(label, Ok(String::new()), Rule::AnyError)
            }
            Ok(WaitStatus::Exited(_, code)) => {
                return Attempt::new(label, Err(Errno::from_raw(code)), Rule::AnyError)
            }
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                return Attempt::killed(label, signal.as_str())
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => return Attempt::new(label, Err(errno), Rule::AnyError),
        }
    }
}

/// `ptrace`.
pub fn ptrace() -> Outcome {
    flush_stdio();
    let target = match rawsys::fork() {
        Ok(Forked::Child) => {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            loop {
                nix::unistd::pause();
            }
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(errno) => return Outcome::no_verdict(format!("probe: fork failed: {errno}")),
    };
    let attach = Attempt::new("attach", ptrace_attach(target), Rule::AnyError);
    let peek = Attempt::new("process_vm_readv", read_marker(target), Rule::AnyError);
    let _ = signal::kill(target, Signal::SIGKILL);
    let _ = waitpid(target, None);
    let traceme = match in_child("traceme", nix::sys::ptrace::traceme) {
        Ok(attempt) => attempt,
        Err(errno) => return Outcome::no_verdict(format!("probe: fork failed: {errno}")),
    };
    verdict(&[attach, traceme, peek])
}

/// Attach to `pid`, wait for it to stop, detach.
fn ptrace_attach(pid: Pid) -> Result<String, Errno> {
    nix::sys::ptrace::attach(pid)?;
    let _ = waitpid(pid, None);
    let _ = nix::sys::ptrace::detach(pid, None);
    Ok(format!("attached to {pid}"))
}

/// Read [`MARKER`] out of `pid`, where fork put it at the same address.
fn read_marker(pid: Pid) -> Result<String, Errno> {
    let mut buf = [0u8; 8];
    let remote = [RemoteIoVec {
        base: MARKER.as_ptr() as usize,
        len: MARKER.len(),
    }];
    let n = nix::sys::uio::process_vm_readv(pid, &mut [IoSliceMut::new(&mut buf)], &remote)?;
    Ok(format!(
        "read {n} bytes: {:?}",
        String::from_utf8_lossy(&buf[..n])
    ))
}

/// `mount`.
pub fn mount() -> Outcome {
    // Only the mount is under test: a failure here shows up as its ENOENT.
    let _ = nix::unistd::mkdir(MOUNT_POINT, Mode::from_bits_truncate(0o755));
    let mounted = nix::mount::mount(
        Some("tmpfs"),
        MOUNT_POINT,
        Some("tmpfs"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map(|()| {
        let _ = nix::mount::umount2(MOUNT_POINT, MntFlags::MNT_DETACH);
        format!("mounted a tmpfs on {MOUNT_POINT}")
    });
    let unmounted = nix::mount::umount2("/skills", MntFlags::MNT_DETACH)
        .map(|()| "detached /skills".to_owned());
    let missing = Path::new("/nonexistent-probe-root");
    let pivoted = nix::unistd::pivot_root(missing, &missing.join("old"))
        .map(|()| "pivoted the root".to_owned());
    verdict(&[
        Attempt::new("mount", mounted, Rule::AnyError),
        Attempt::new("umount", unmounted, Rule::AnyError),
        Attempt::new("pivot_root", pivoted, Rule::Filtered),
    ])
}

/// `unshare-user`.
pub fn unshare_user() -> Outcome {
    let unshare_user = in_child("unshare-user", || {
        nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
    });
    let unshare_mount = in_child("unshare-mount", || {
        nix::sched::unshare(CloneFlags::CLONE_NEWNS)
    });
    let (unshare_user, unshare_mount) = match (unshare_user, unshare_mount) {
        (Ok(user), Ok(mount)) => (user, mount),
        (Err(errno), _) | (_, Err(errno)) => {
            return Outcome::no_verdict(format!("probe: fork failed: {errno}"))
        }
    };
    flush_stdio();
    let clone_user = cloned("clone-user", rawsys::clone_new_user());
    let clone3_user = cloned("clone3-user", rawsys::clone3_new_user());
    verdict(&[unshare_user, unshare_mount, clone_user, clone3_user])
}

/// The attempt for a clone that returned `result`: reap the child if there
/// was one.
fn cloned(label: &str, result: Result<Pid, Errno>) -> Attempt {
    match result {
        Ok(child) => {
            let _ = waitpid(child, None);
            Attempt::new(
                label,
                Ok(format!("child {child} in a new user namespace")),
                Rule::AnyError,
            )
        }
        Err(errno) => Attempt::new(label, Err(errno), Rule::AnyError),
    }
}
