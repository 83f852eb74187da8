//! The exec shim: how the runner knows for certain whether the command
//! itself was executed, without reading a word of bubblewrap's text.
//!
//! bubblewrap reports a child pid before it mounts `/proc`, pivots the
//! root or sets the hostname, so its status cannot tell a sandbox that
//! failed during setup from a command that exited 1. So bubblewrap does not
//! execute the command: it executes the runner's own binary, handed to it
//! as descriptor [`FD_SHIM`] and named [`SHIM_PATH`], with [`SHIM_ARG`] as
//! first argument. That process (the shim) runs only once bubblewrap has
//! finished everything (namespaces, uid map, mounts, `/proc`, hostname,
//! capabilities, seccomp: bubblewrap's `execvp` is its very last step), and
//! it is the only holder of the report pipe [`FD_EXEC_REPORT`]: bubblewrap's
//! monitor and its pid 1 close every descriptor they do not use.
//!
//! The shim is started as `SHIM_PATH MODE [--nproc N] -- COMMAND…`
//! ([`ShimArgs`]). It
//! 0. starts the network forwarder (mode [`SHIM_NET_ARG`]) and sets
//!    `RLIMIT_NPROC` to N ([`NPROC_OPT`]); if either fails it exits 125
//!    before its report, a sandbox that was not finished;
//! 1. writes one byte, [`STARTED`], to the report pipe;
//! 2. moves the command's stderr ([`FD_STDERR`]) to fd 2: bubblewrap's own
//!    fd 2 is a pipe of its own, so its messages never reach the command's
//!    stderr or its stream events;
//! 3. restores SIGPIPE's default action (the Rust runtime ignores it, and
//!    an ignored signal stays ignored across `execve`), marks every
//!    descriptor above 2 close-on-exec (the report pipe and its own binary
//!    included), and calls `execvp` with the command;
//! 4. only if that fails: writes the errno (4 bytes, little-endian) and
//!    exits 127 (not found) or 126.
//!
//! The runner reads the pipe to its end ([`ExecReport::parse`]): nothing
//! means bubblewrap never finished the sandbox (`sandbox_failed`, with
//! bubblewrap's own stderr as the reason); the byte alone means the command
//! was executed (the pipe closed at its `execve`); the byte and an errno
//! mean the command could not be executed, and why.
//!
//! For a job without a network allowlist, bubblewrap executes not the
//! runner's binary but the small shim ([`small_shim`],
//! `runner/exec-shim/shim.rs`): the same argv, descriptors, report and
//! exit codes, steps 1-4 and `RLIMIT_NPROC`, in a few kilobytes without a
//! C library. A job with an allowlist needs the forwarder, so the runner's
//! own binary.
//!
//! The runner's binary runs inside the sandbox, so a dynamically linked
//! runner needs its libraries there: the built-in profile binds `/usr` and
//! `/lib*`; the release build (`scripts/build-release`) is static and
//! needs nothing.

use std::ffi::CString;
use std::os::unix::ffi::OsStringExt;

// Its descriptors are in the sandbox's table (crate::sandbox::fds).
pub use crate::sandbox::fds::{FD_EXEC_REPORT, FD_SHIM, FD_STDERR};
/// What bwrap executes: the shim, through [`FD_SHIM`], which then
/// executes the command.
pub const SHIM_PATH: &str = "/proc/self/fd/8";

pub use crate::supervise::report::{ExecReport, STARTED};

/// The shim's exit codes, which are also `skill-runner run`'s: the sandbox
/// was not finished (125), the command could not be executed (126) or
/// was not found (127).
pub const EXIT_RUNNER: i32 = 125;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;

/// The first argument that makes the runner's binary act as the shim.
pub const SHIM_ARG: &str = "--skill-runner-exec-shim";
/// Like [`SHIM_ARG`], and the shim first starts the network forwarder of a
/// job with an allowlist ([`crate::sandbox::net::forward`]). A forwarder that
/// cannot start is a sandbox that was not finished: the shim then exits
/// 125 before its report, with the reason on bubblewrap's stderr.
pub const SHIM_NET_ARG: &str = "--skill-runner-exec-shim-net";
/// The small exec shim (`runner/exec-shim/shim.rs`, built by
/// `runner/build.rs`): the same contract as [`run_if_shim`] for
/// [`SHIM_ARG`], as a program of a few kilobytes without a C library or
/// the Rust runtime. `None` where it is not built (other than Linux on
/// x86_64 or aarch64 with glibc).
pub fn small_shim() -> Option<&'static [u8]> {
    #[cfg(small_exec_shim)]
    {
        Some(include_bytes!(env!("SKILL_RUNNER_EXEC_SHIM")))
    }
    #[cfg(not(small_exec_shim))]
    {
        None
    }
}

/// Which exec shim a sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimKind {
    /// The small shim ([`small_shim`]), where it is built and the job has
    /// no network allowlist.
    Small,
    /// The runner's own binary, which also starts the forwarder.
    Runner,
}

/// What bubblewrap executes as the shim, opened once per process (each
/// execution gets its own duplicate): for a job without a network
/// allowlist the small shim ([`small_shim`]) in a sealed memfd, else, or
/// where the kernel refuses executable memfds (`vm.memfd_noexec = 2`), the
/// runner's own binary, which also starts the forwarder.
///
/// The small shim is what makes the difference: the runner's binary is a
/// static PIE of ~50 MB whose start (relocations, glibc's CPU probing, the
/// Rust runtime) cost ~1 ms of CPU in every sandbox; the small shim's
/// costs ~0.01 ms more than `/bin/true` alone (README, benchmarks).
#[cfg(target_os = "linux")]
pub fn executable(kind: ShimKind) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::sync::OnceLock;
    type Opened = Result<std::fs::File, (std::io::ErrorKind, String)>;
    static EXE: OnceLock<Opened> = OnceLock::new();
    static SMALL: OnceLock<Option<std::fs::File>> = OnceLock::new();
    if kind == ShimKind::Small {
        let small = SMALL.get_or_init(|| {
            let memfd = |bytes| crate::supervise::sys::executable_memfd(c"skill-runner-exec-shim", bytes);
            match small_shim().map(memfd) {
            Some(Ok(f)) => Some(std::fs::File::from(f)),
            Some(Err(e)) => {
                tracing::warn!("the small exec shim cannot be an executable memfd ({e}); bubblewrap executes the runner's own binary instead");
                None
            }
            None => None,
        }});
        if let Some(f) = small {
            return Ok(f.try_clone()?.into());
        }
    }
    let exe = EXE.get_or_init(|| {
        // Close-on-exec here; the spawn places a copy at FD_SHIM without it.
        std::fs::File::open("/proc/self/exe").map_err(|e| (e.kind(), e.to_string()))
    });
    match exe {
        Ok(f) => Ok(f.try_clone()?.into()),
        Err((kind, msg)) => Err(std::io::Error::new(
            *kind,
            format!("cannot open the runner's own binary (/proc/self/exe): {msg}"),
        )),
    }
}

/// The option before the command that gives the `pids` limit as
/// `RLIMIT_NPROC` (`--nproc N`), for the shim to set in the sandbox.
///
/// It is set here, inside the execution's own user namespace, and not by
/// the runner before bwrap starts: since Linux 5.14 the kernel counts
/// `RLIMIT_NPROC` per user namespace and uid, checking every ancestor
/// namespace against the limit in force where it was created. Set inside,
/// the limit counts this execution's processes and threads alone; set
/// before bwrap, it would count every process of the host uid, the other
/// executions' included, and could even refuse bwrap its namespaces.
pub const NPROC_OPT: &str = "--nproc";

/// The option that makes the shim of a prepared sandbox wait for its
/// command: it reads the hand-over message on
/// [`crate::sandbox::handover::FD_HANDOVER`] to its end, checks it, moves
/// to its cwd, takes its environment as its whole one and then goes on as
/// with a command on its argv (docs/prepared.md). Anything wrong with the
/// message is a sandbox that was not finished (125 before the report).
pub const HANDOVER_OPT: &str = "--handover";

/// The shim's arguments: `MODE [--nproc N] -- COMMAND…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimArgs {
    /// [`SHIM_NET_ARG`]: start the network forwarder first.
    pub network: bool,
    pub nproc: Option<u64>,
    /// [`HANDOVER_OPT`]: the command comes on the hand-over pipe.
    pub handover: bool,
    pub argv: Vec<std::ffi::OsString>,
}

impl ShimArgs {
    /// `None` if `args` (without the program name) are not the shim's;
    /// `Some(Err)` if they are, but malformed.
    pub fn parse(
        mut args: impl Iterator<Item = std::ffi::OsString>,
    ) -> Option<Result<ShimArgs, String>> {
        let network = match args.next() {
            Some(a) if a == SHIM_NET_ARG => true,
            Some(a) if a == SHIM_ARG => false,
            _ => return None,
        };
        let mut nproc = None;
        let mut handover = false;
        loop {
            match args.next() {
                Some(a) if a == "--" => break,
                Some(a) if a == HANDOVER_OPT => handover = true,
                Some(a) if a == NPROC_OPT => {
                    let n = args.next().and_then(|n| n.to_str()?.parse().ok());
                    match n {
                        Some(n) => nproc = Some(n),
                        None => return Some(Err(format!("{NPROC_OPT} needs a number"))),
                    }
                }
                Some(a) => return Some(Err(format!("unknown shim option {a:?}"))),
                None => return Some(Err("no -- before the command".into())),
            }
        }
        let argv: Vec<_> = args.collect();
        if handover && !argv.is_empty() {
            return Some(Err(format!("{HANDOVER_OPT} takes no command after --")));
        }
        Some(Ok(ShimArgs {
            network,
            nproc,
            handover,
            argv,
        }))
    }
}

/// If this process was started as the shim (`argv[1]` is [`SHIM_ARG`] or
/// [`SHIM_NET_ARG`]), becomes the command and never returns. Call it first
/// in `main`.
///
/// Anything that fails before the report byte is a sandbox that was not
/// finished: the shim exits 125 with the reason on bubblewrap's stderr.
pub fn run_if_shim() {
    let shim = match ShimArgs::parse(std::env::args_os().skip(1)) {
        None => return,
        Some(Ok(shim)) => shim,
        Some(Err(e)) => unfinished(&format!("bad shim arguments: {e}")),
    };
    #[cfg(target_os = "linux")]
    if shim.network {
        if let Err(e) = crate::sandbox::net::forward::start() {
            unfinished(&format!(
                "cannot start the network forwarder on {} in the sandbox: {e}",
                crate::sandbox::net::FORWARDER_ADDR
            ));
        }
    }
    // After the forwarder: it is not the command, and keeps no budget of it.
    if let Some(n) = shim.nproc {
        #[cfg(target_os = "linux")]
        if let Err(e) =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NPROC, n, n)
        {
            unfinished(&format!("cannot set RLIMIT_NPROC to {n}: {e}"));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = n;
    }
    let argv = if shim.handover {
        take_handover()
    } else {
        shim.argv
    };
    let argv: Vec<CString> = argv
        .into_iter()
        .filter_map(|a| CString::new(a.into_vec()).ok())
        .collect();
    #[cfg(target_os = "linux")]
    let errno = crate::supervise::sys::shim_exec(FD_EXEC_REPORT, FD_STDERR, STARTED, &argv);
    #[cfg(not(target_os = "linux"))]
    let errno = {
        let _ = argv;
        libc::ENOSYS
    };
    std::process::exit(exit_code_for(errno));
}

/// A prepared sandbox's command: read to the end of its pipe, checked,
/// its cwd entered and its environment made the whole one. Never returns
/// on a message that is not right.
#[cfg(target_os = "linux")]
fn take_handover() -> Vec<std::ffi::OsString> {
    use crate::sandbox::handover::{Command, FD_HANDOVER, MAX_BYTES};
    let bytes = crate::supervise::sys::read_inherited(FD_HANDOVER, MAX_BYTES)
        .unwrap_or_else(|e| unfinished(&format!("cannot read the hand-over: {e}")));
    let command = Command::decode(&bytes).unwrap_or_else(|e| unfinished(&e.to_string()));
    if let Err(e) = std::env::set_current_dir(&command.cwd) {
        unfinished(&format!(
            "cannot enter the command's cwd {}: {e}",
            command.cwd
        ));
    }
    let names: Vec<_> = std::env::vars_os().map(|(k, _)| k).collect();
    for k in names {
        std::env::remove_var(k);
    }
    for (k, v) in &command.env {
        std::env::set_var(k, v);
    }
    // As bubblewrap does after its --chdir.
    std::env::set_var("PWD", &command.cwd);
    command.argv.into_iter().map(Into::into).collect()
}

/// Nothing hands a command over elsewhere: prepared sandboxes are
/// bubblewrap's.
#[cfg(not(target_os = "linux"))]
fn take_handover() -> Vec<std::ffi::OsString> {
    unfinished("prepared sandboxes are bubblewrap's")
}

/// Ends the shim before its report: the runner sees a sandbox that was
/// not finished, with `why` among bubblewrap's messages.
fn unfinished(why: &str) -> ! {
    eprintln!("skill-runner: {why}");
    std::process::exit(EXIT_RUNNER);
}

/// The exit code of a command that could not be executed, as shells use
/// them: 127 not found, 126 found but not executable.
pub fn exit_code_for(errno: i32) -> i32 {
    if errno == libc::ENOENT || errno == libc::ENOTDIR {
        EXIT_NOT_FOUND
    } else {
        EXIT_NOT_EXECUTABLE
    }
}

/// The address space the runner's own binary needs to start as a
/// prepared sandbox's shim (docs/prepared.md), with room to spare: it starts in 24 MiB
/// (release build) and 48 MiB (debug build) under `RLIMIT_AS` here, where
/// the small shim of a sandbox built for its command needs next to none.
pub const SHIM_ADDRESS_SPACE: u64 = 128 << 20;

/// Whether a prepared sandbox's shim can start under a job's
/// `memory_bytes`: always where a memory cgroup holds it (it limits what
/// is charged, not what is mapped), else where `RLIMIT_AS`, which holds it
/// then, leaves [`SHIM_ADDRESS_SPACE`]. A sandbox prepared under less would
/// die before its hand-over, and the next one after it.
pub fn shim_fits(memory_bytes: u64, held_by_cgroup: bool) -> bool {
    held_by_cgroup || memory_bytes >= SHIM_ADDRESS_SPACE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_arguments_parse_without_ambiguity() {
        let parse = |a: &[&str]| ShimArgs::parse(a.iter().map(std::ffi::OsString::from));
        assert_eq!(parse(&["sh", "-c", "x"]), None);
        assert_eq!(parse(&[]), None);
        assert_eq!(
            parse(&[SHIM_ARG, "--", "--nproc", "3"]),
            Some(Ok(ShimArgs {
                network: false,
                nproc: None,
                handover: false,
                argv: vec!["--nproc".into(), "3".into()],
            }))
        );
        assert_eq!(
            parse(&[SHIM_NET_ARG, NPROC_OPT, "20", "--", "true"]),
            Some(Ok(ShimArgs {
                network: true,
                nproc: Some(20),
                handover: false,
                argv: vec!["true".into()],
            }))
        );
        for bad in [
            &[SHIM_ARG, "true"][..],
            &[SHIM_ARG, NPROC_OPT, "x", "--", "true"],
            &[SHIM_ARG, NPROC_OPT],
            &[SHIM_ARG],
            &[SHIM_ARG, HANDOVER_OPT, "--", "true"],
        ] {
            assert!(matches!(parse(bad), Some(Err(_))), "{bad:?}");
        }
    }

    #[test]
    fn exec_errors_map_to_shell_codes() {
        assert_eq!(exit_code_for(libc::ENOENT), 127);
        assert_eq!(exit_code_for(libc::EACCES), 126);
        assert_eq!(exit_code_for(libc::ENOEXEC), 126);
    }

    /// Runs the small shim from its memfd as bubblewrap would (fd 7 the
    /// report pipe, fd 9 the command's stderr), outside any sandbox.
    #[cfg(small_exec_shim)]
    fn run_small(args: &[&str]) -> (Option<i32>, Vec<u8>, String, String) {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let shim = executable(ShimKind::Small).unwrap();
        let (report_r, report_w) = crate::supervise::sys::pipe_cloexec().unwrap();
        let (err_r, err_w) = crate::supervise::sys::pipe_cloexec().unwrap();
        let (mut report_r, mut err_r) = (std::fs::File::from(report_r), std::fs::File::from(err_r));
        let mut cmd = std::process::Command::new(format!("/proc/self/fd/{FD_SHIM}"));
        cmd.args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        crate::supervise::sys::place_fds(
            &mut cmd,
            vec![
                (shim.as_raw_fd(), FD_SHIM),
                (report_w.as_raw_fd(), FD_EXEC_REPORT),
                (err_w.as_raw_fd(), FD_STDERR),
            ],
        );
        let child = cmd.spawn().unwrap();
        drop((report_w, err_w));
        let out = child.wait_with_output().unwrap();
        let mut report = Vec::new();
        report_r.read_to_end(&mut report).unwrap();
        let mut command_err = String::new();
        err_r.read_to_string(&mut command_err).unwrap();
        let bwrap_err = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            out.status.code(),
            report,
            String::from_utf8_lossy(&out.stdout).into_owned() + &command_err,
            bwrap_err,
        )
    }

    #[cfg(small_exec_shim)]
    #[test]
    fn the_small_shim_keeps_the_contract() {
        // Executed: the byte alone; stdout and the moved stderr are the
        // command's; nothing above fd 2 reaches it; SIGPIPE is default.
        let (code, report, out, bwrap) = run_small(&[
            SHIM_ARG,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; grep ^SigIgn /proc/$$/status; ls -m /proc/$$/fd",
        ]);
        assert_eq!(code, Some(0), "{bwrap}");
        assert_eq!(ExecReport::parse(&report), ExecReport::Executed);
        assert!(out.starts_with("out\nSigIgn:"), "{out:?}");
        // One line, without a pipe: the shell's own pipe to a `tr` showed
        // as fd 3 whenever `ls` looked before the shell had closed it.
        assert!(out.contains("\n0, 1, 2\nerr\n"), "{out:?}");
        assert!(out.contains("err\n"), "{out:?}");
        let ign = out.lines().find(|l| l.starts_with("SigIgn")).unwrap();
        let mask = u64::from_str_radix(ign.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{ign}");
        // Not found on PATH: the errno, 127.
        let (code, report, ..) = run_small(&[SHIM_ARG, "--", "no-such-command-here"]);
        assert_eq!(code, Some(127));
        assert_eq!(
            ExecReport::parse(&report),
            ExecReport::ExecFailed(libc::ENOENT)
        );
        // Not executable: 126.
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "echo never\n").unwrap();
        let (code, report, ..) = run_small(&[SHIM_ARG, "--", plain.to_str().unwrap()]);
        assert_eq!(code, Some(126));
        assert_eq!(
            ExecReport::parse(&report),
            ExecReport::ExecFailed(libc::EACCES)
        );
        // RLIMIT_NPROC before the report.
        let (code, _, out, _) = run_small(&[
            SHIM_ARG,
            NPROC_OPT,
            "37",
            "--",
            "grep",
            "processes",
            "/proc/self/limits",
        ]);
        assert_eq!(code, Some(0));
        assert!(out.contains(" 37 "), "{out}");
        // Malformed: 125 before any report, the reason on bwrap's stderr.
        for bad in [
            &[SHIM_ARG, "true"][..],
            &[SHIM_ARG, NPROC_OPT, "x", "--", "true"],
            &[SHIM_NET_ARG, "--", "true"],
            &[SHIM_ARG],
        ] {
            let (code, report, _, bwrap) = run_small(bad);
            assert_eq!(code, Some(125), "{bad:?}");
            assert_eq!(
                ExecReport::parse(&report),
                ExecReport::NotReached,
                "{bad:?}"
            );
            assert!(
                bwrap.starts_with("skill-runner: bad shim arguments"),
                "{bwrap}"
            );
        }
    }

    /// A file without a known format runs under /bin/sh, as execvp does.
    #[cfg(small_exec_shim)]
    #[test]
    fn the_small_shim_runs_a_script_without_a_shebang_with_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "echo ran \"$@\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let (code, report, out, _) =
            run_small(&[SHIM_ARG, "--", script.to_str().unwrap(), "a", "b"]);
        assert_eq!(code, Some(0));
        assert_eq!(ExecReport::parse(&report), ExecReport::Executed);
        assert_eq!(out, "ran a b\n");
    }

    #[test]
    fn the_shim_path_names_the_shim_descriptor() {
        assert_eq!(SHIM_PATH, format!("/proc/self/fd/{FD_SHIM}"));
    }
}
