//! `probe`: the escape suite's agent inside the sandbox.
//!
//! The escape suite copies this binary into a sandbox's writable
//! `/workspace` and runs `/workspace/probe <subcommand> [args]` under the
//! runner. Each subcommand attempts one forbidden thing, with system calls
//! made directly (nix, libc), never through a host tool, and reports what
//! happened, so the test can assert that the attempt failed.
//!
//! # Output protocol
//!
//! One line on stdout:
//!
//! - `DENIED <reason>`, exit 0: the attempt failed the way a sandbox should
//!   make it fail. The reason names the operation and the errno, such as
//!   `open: EROFS (Read-only file system)`; a subcommand that tries several
//!   routes lists them all, such as `inet-tcp=EPERM packet=EPERM`.
//! - `ALLOWED <details>`, exit 1: the forbidden thing happened.
//! - reports print the data asked for, exit 0; `socket-unix`, a positive
//!   control, prints `OK unix socket` (exit 0) or `FAILED <errno>` (exit 1).
//! - a command line the probe does not understand: usage on stderr, exit 2.
//! - the probe could not set up its attempt (a `fork` failed before ptrace
//!   could be tried): a message on stderr, exit 3, no verdict.
//!
//! Which errnos deny depends on the attempt (see [`verdict`]): for changes
//! (writes, sockets, mounts) any error denies; for the system calls probed
//! with harmless but invalid arguments only `EPERM` and `ENOSYS` deny, since
//! `EINVAL`, `EBADF` or `EFAULT` mean the call reached the kernel, which the
//! runner's seccomp filter (it answers `EPERM`) should have prevented.
//!
//! # Subcommands
//!
//! | subcommand | attempts / does | module |
//! |---|---|---|
//! | `write-file PATH` | create (or truncate) PATH and write to it | [`fs`] |
//! | `append PATH` | open an existing PATH for append and write to it | [`fs`] |
//! | `rename FROM TO` | rename(2) | [`fs`] |
//! | `chmod PATH MODE_OCTAL` | chmod(2) | [`fs`] |
//! | `unlink PATH` | unlink(2) | [`fs`] |
//! | `rmdir PATH` | rmdir(2) | [`fs`] |
//! | `mkdir PATH` | mkdir(2), mode 0755 | [`fs`] |
//! | `symlink TARGET LINKPATH` | symlink(2) | [`fs`] |
//! | `read-file PATH` | open and read; `ALLOWED <first line>` | [`fs`] |
//! | `connect HOST:PORT` | TCP connect to an IPv4 or `[IPv6]` literal, 2 s timeout | [`net`] |
//! | `socket-inet` | sockets: TCP and UDP over IPv4 and IPv6, netlink, packet | [`net`] |
//! | `socket-unix` | an `AF_UNIX` socket (positive control) | [`net`] |
//! | `socket-outside` | the sockets an allowlist still refuses: UDP and raw over IPv4 and IPv6, netlink, packet | [`net`] |
//! | `proxy-get URL`, `proxy-connect AUTHORITY PATH` | a request through the proxy `$http_proxy` names: absolute-form GET, or CONNECT then GET PATH in the tunnel (reports) | [`net`] |
//! | `ptrace` | PTRACE_ATTACH, PTRACE_TRACEME, process_vm_readv | [`escalate`] |
//! | `mount` | mount a tmpfs, unmount `/skills`, pivot_root | [`escalate`] |
//! | `unshare-user` | unshare and clone/clone3 into new user and mount namespaces | [`escalate`] |
//! | `io-uring` | io_uring_setup | [`syscalls`] |
//! | `tiocsti` | TIOCSTI on stdin, stdout, stderr, `/dev/tty` | [`syscalls`] |
//! | `tioclinux` | TIOCLINUX on the same | [`syscalls`] |
//! | `bpf`, `perf-event-open`, `userfaultfd`, `keyctl`, `kexec`, `init-module`, `open-by-handle-at`, `setns`, `clone3`, `openat2` | the call with harmless invalid arguments | [`syscalls`] |
//! | `x32-syscall` | getpid through the x32 ABI | [`syscalls`] |
//! | `i386-syscall` | getpid through `int 0x80` | [`syscalls`] |
//! | `procs`, `caps`, `env`, `fds`, `uid` | reports | [`report`] |
//! | `fork-bomb SECONDS`, `mem-bomb MIB`, `fill-file PATH MIB` | use up a limit | [`exhaust`] |
//! | `sleep SECONDS [HEARTBEAT_PATH]`, `ignore-term-sleep SECONDS`, `double-fork PIDFILE SECONDS` | outlive the timeout (`READY` first) | [`lifetime`] |
//! | `flood BYTES`, `echo-stdin`, `exit CODE`, `kill-self SIGNAL` | output and exit controls | [`lifetime`] |
//!
//! Each module's documentation gives its exact output formats. All `unsafe`
//! code is in [`sys`].
//!
//! The probe is Linux-only; elsewhere it says so and exits 2.

#[cfg(target_os = "linux")]
mod args;
#[cfg(target_os = "linux")]
mod escalate;
#[cfg(target_os = "linux")]
mod exhaust;
#[cfg(target_os = "linux")]
mod fs;
#[cfg(target_os = "linux")]
mod lifetime;
#[cfg(target_os = "linux")]
mod net;
#[cfg(target_os = "linux")]
mod report;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod syscalls;
#[cfg(target_os = "linux")]
mod verdict;

#[cfg(target_os = "linux")]
fn main() {
    use std::io::Write;

    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let outcome = match args::parse(&argv) {
        Ok(command) => run(command),
        Err(error) => verdict::Outcome {
            stdout: String::new(),
            stderr: format!("probe: {}", error.explain()),
            code: verdict::EXIT_USAGE,
        },
    };
    if !outcome.stdout.is_empty() {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", outcome.stdout);
        let _ = stdout.flush();
    }
    if !outcome.stderr.is_empty() {
        let _ = writeln!(std::io::stderr(), "{}", outcome.stderr);
    }
    std::process::exit(outcome.code);
}

/// Make the attempt `command` names.
#[cfg(target_os = "linux")]
fn run(command: args::Command) -> verdict::Outcome {
    use args::Command;

    match command {
        Command::WriteFile(path) => fs::write_file(&path),
        Command::Append(path) => fs::append(&path),
        Command::Rename(from, to) => fs::rename(&from, &to),
        Command::Chmod(path, mode) => fs::chmod(&path, mode),
        Command::Unlink(path) => fs::unlink(&path),
        Command::Rmdir(path) => fs::rmdir(&path),
        Command::Mkdir(path) => fs::mkdir(&path),
        Command::Symlink(target, link) => fs::symlink(&target, &link),
        Command::ReadFile(path) => fs::read_file(&path),
        Command::Connect(addr) => net::connect(addr),
        Command::SocketInet => net::socket_inet(),
        Command::SocketUnix => net::socket_unix(),
        Command::SocketOutside => net::socket_outside(),
        Command::ProxyGet(url) => net::proxy_get(&url),
        Command::ProxyConnect(authority, path) => net::proxy_connect(&authority, &path),
        Command::Ptrace => escalate::ptrace(),
        Command::Mount => escalate::mount(),
        Command::UnshareUser => escalate::unshare_user(),
        Command::IoUring => syscalls::io_uring(),
        Command::Tiocsti => syscalls::tty(syscalls::TtyIoctl::Sti),
        Command::Tioclinux => syscalls::tty(syscalls::TtyIoctl::Linux),
        Command::Raw(call) => syscalls::raw(call),
        Command::X32Syscall => syscalls::x32(),
        Command::I386Syscall => syscalls::i386(),
        Command::Procs => report::procs(),
        Command::Caps => report::caps(),
        Command::Env => report::env(),
        Command::Fds => report::fds(),
        Command::Uid => report::uid(),
        Command::ForkBomb(duration) => exhaust::fork_bomb(duration),
        Command::MemBomb(mebibytes) => exhaust::mem_bomb(mebibytes),
        Command::FillFile(path, mebibytes) => exhaust::fill_file(&path, mebibytes),
        Command::IgnoreTermSleep(duration) => lifetime::ignore_term_sleep(duration),
        Command::DoubleFork(pidfile, duration) => lifetime::double_fork(&pidfile, duration),
        Command::Sleep(duration, heartbeat) => lifetime::sleep(duration, &heartbeat),
        Command::Flood(bytes) => lifetime::flood(bytes),
        Command::EchoStdin => lifetime::echo_stdin(),
        Command::Exit(code) => lifetime::exit(code),
        Command::KillSelf(signal) => lifetime::kill_self(signal),
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("probe: the escape-suite probe runs only on Linux");
    std::process::exit(2);
}
