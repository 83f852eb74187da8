//! The command line: `probe <subcommand> [args]`, parsed into a [`Command`].
//!
//! Parsing is pure (no I/O) so it is unit-tested here. Every subcommand and
//! its arguments are listed once, in [`SUBCOMMANDS`], which is also the usage
//! text; an unknown subcommand or a bad argument is a [`UsageError`] and the
//! probe exits 2 without attempting anything.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where `sleep` writes its heartbeat when no path is given.
pub const DEFAULT_SLEEP_HEARTBEAT: &str = "/workspace/sleep.alive";

/// Every subcommand and its argument synopsis, in the order of the module
/// documentation of `main`.
pub const SUBCOMMANDS: &[(&str, &str)] = &[
    ("write-file", "PATH"),
    ("append", "PATH"),
    ("rename", "FROM TO"),
    ("chmod", "PATH MODE_OCTAL"),
    ("unlink", "PATH"),
    ("rmdir", "PATH"),
    ("mkdir", "PATH"),
    ("symlink", "TARGET LINKPATH"),
    ("read-file", "PATH"),
    ("connect", "HOST:PORT"),
    ("socket-inet", ""),
    ("socket-unix", ""),
    ("socket-outside", ""),
    ("proxy-get", "URL"),
    ("proxy-connect", "AUTHORITY PATH"),
    ("ptrace", ""),
    ("mount", ""),
    ("unshare-user", ""),
    ("io-uring", ""),
    ("tiocsti", ""),
    ("tioclinux", ""),
    ("bpf", ""),
    ("perf-event-open", ""),
    ("userfaultfd", ""),
    ("keyctl", ""),
    ("kexec", ""),
    ("init-module", ""),
    ("open-by-handle-at", ""),
    ("setns", ""),
    ("clone3", ""),
    ("openat2", ""),
    ("x32-syscall", ""),
    ("i386-syscall", ""),
    ("procs", ""),
    ("caps", ""),
    ("env", ""),
    ("fds", ""),
    ("uid", ""),
    ("fork-bomb", "SECONDS"),
    ("mem-bomb", "MIB"),
    ("fill-file", "PATH MIB"),
    ("ignore-term-sleep", "SECONDS"),
    ("double-fork", "PIDFILE SECONDS"),
    ("sleep", "SECONDS [HEARTBEAT_PATH]"),
    ("flood", "BYTES"),
    ("echo-stdin", ""),
    ("exit", "CODE"),
    ("kill-self", "SIGNAL"),
];

/// A system call probed with harmless, invalid arguments (see `syscalls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawCall {
    /// `bpf`
    Bpf,
    /// `perf-event-open`
    PerfEventOpen,
    /// `userfaultfd`
    Userfaultfd,
    /// `keyctl`
    Keyctl,
    /// `kexec`: `kexec_load` and `kexec_file_load`
    Kexec,
    /// `init-module`: `finit_module` and `init_module`
    InitModule,
    /// `open-by-handle-at`
    OpenByHandleAt,
    /// `setns`
    Setns,
    /// `clone3`: its flags are in memory a filter cannot read
    Clone3,
    /// `openat2`: its resolve flags are in memory a filter cannot read
    Openat2,
}

/// One parsed invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `write-file PATH`
    WriteFile(PathBuf),
    /// `append PATH`
    Append(PathBuf),
    /// `rename FROM TO`
    Rename(PathBuf, PathBuf),
    /// `chmod PATH MODE_OCTAL`
    Chmod(PathBuf, u32),
    /// `unlink PATH`
    Unlink(PathBuf),
    /// `rmdir PATH`
    Rmdir(PathBuf),
    /// `mkdir PATH`
    Mkdir(PathBuf),
    /// `symlink TARGET LINKPATH`
    Symlink(PathBuf, PathBuf),
    /// `read-file PATH`
    ReadFile(PathBuf),
    /// `connect HOST:PORT`
    Connect(SocketAddr),
    /// `socket-inet`
    SocketInet,
    /// `socket-unix`
    SocketUnix,
    /// `socket-outside`
    SocketOutside,
    /// `proxy-get URL`
    ProxyGet(String),
    /// `proxy-connect AUTHORITY PATH`
    ProxyConnect(String, String),
    /// `ptrace`
    Ptrace,
    /// `mount`
    Mount,
    /// `unshare-user`
    UnshareUser,
    /// `io-uring`
    IoUring,
    /// `tiocsti`
    Tiocsti,
    /// `tioclinux`
    Tioclinux,
    /// `bpf`, `perf-event-open`, `userfaultfd`, `keyctl`, `kexec`,
    /// `init-module`, `open-by-handle-at`, `setns`, `clone3`, `openat2`
    Raw(RawCall),
    /// `x32-syscall`
    X32Syscall,
    /// `i386-syscall`
    I386Syscall,
    /// `procs`
    Procs,
    /// `caps`
    Caps,
    /// `env`
    Env,
    /// `fds`
    Fds,
    /// `uid`
    Uid,
    /// `fork-bomb SECONDS`
    ForkBomb(Duration),
    /// `mem-bomb MIB`
    MemBomb(u64),
    /// `fill-file PATH MIB`
    FillFile(PathBuf, u64),
    /// `ignore-term-sleep SECONDS`
    IgnoreTermSleep(Duration),
    /// `double-fork PIDFILE SECONDS`
    DoubleFork(PathBuf, Duration),
    /// `sleep SECONDS [HEARTBEAT_PATH]`
    Sleep(Duration, PathBuf),
    /// `flood BYTES`
    Flood(u64),
    /// `echo-stdin`
    EchoStdin,
    /// `exit CODE`
    Exit(i32),
    /// `kill-self SIGNAL`
    KillSelf(i32),
}

/// A command line the probe does not understand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    message: String,
    /// Whether the subcommand itself was missing or unknown, so that the
    /// whole list of subcommands is worth printing.
    bad_subcommand: bool,
}

impl UsageError {
    fn subcommand(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            bad_subcommand: true,
        }
    }

    fn argument(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            bad_subcommand: false,
        }
    }

    /// The message, followed by the full [`usage`] when the subcommand
    /// itself was missing or unknown.
    pub fn explain(&self) -> String {
        if self.bad_subcommand {
            format!("{}\n{}", self.message, usage())
        } else {
            self.message.clone()
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}

/// The usage text: one line per subcommand.
pub fn usage() -> String {
    let mut lines = vec![
        "usage: probe <subcommand> [args]".to_owned(),
        "subcommands:".to_owned(),
    ];
    lines.extend(
        SUBCOMMANDS
            .iter()
            .map(|(name, synopsis)| format!("  {name} {synopsis}").trim_end().to_owned()),
    );
    lines.join("\n")
}

/// Parse the arguments after the program name.
pub fn parse(args: &[OsString]) -> Result<Command, UsageError> {
    let (name, rest) = args
        .split_first()
        .ok_or_else(|| UsageError::subcommand("no subcommand given"))?;
    let name = name
        .to_str()
        .ok_or_else(|| UsageError::subcommand("the subcommand is not UTF-8"))?;
    let synopsis = SUBCOMMANDS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, synopsis)| *synopsis)
        .ok_or_else(|| UsageError::subcommand(format!("unknown subcommand {name:?}")))?;
    let (required, optional) = arity(synopsis);
    if rest.len() < required || rest.len() > required + optional {
        return Err(UsageError::argument(format!(
            "usage: probe {name} {synopsis}"
        )));
    }
    let path = |i: usize| PathBuf::from(&rest[i]);
    let command = match name {
        "write-file" => Command::WriteFile(path(0)),
        "append" => Command::Append(path(0)),
        "rename" => Command::Rename(path(0), path(1)),
        "chmod" => Command::Chmod(path(0), octal_mode(&rest[1])?),
        "unlink" => Command::Unlink(path(0)),
        "rmdir" => Command::Rmdir(path(0)),
        "mkdir" => Command::Mkdir(path(0)),
        "symlink" => Command::Symlink(path(0), path(1)),
        "read-file" => Command::ReadFile(path(0)),
        "connect" => Command::Connect(socket_addr(&rest[0])?),
        "socket-inet" => Command::SocketInet,
        "socket-unix" => Command::SocketUnix,
        "socket-outside" => Command::SocketOutside,
        "proxy-get" => Command::ProxyGet(text(&rest[0], "URL")?.to_owned()),
        "proxy-connect" => Command::ProxyConnect(
            text(&rest[0], "AUTHORITY")?.to_owned(),
            text(&rest[1], "PATH")?.to_owned(),
        ),
        "ptrace" => Command::Ptrace,
        "mount" => Command::Mount,
        "unshare-user" => Command::UnshareUser,
        "io-uring" => Command::IoUring,
        "tiocsti" => Command::Tiocsti,
        "tioclinux" => Command::Tioclinux,
        "bpf" => Command::Raw(RawCall::Bpf),
        "perf-event-open" => Command::Raw(RawCall::PerfEventOpen),
        "userfaultfd" => Command::Raw(RawCall::Userfaultfd),
        "keyctl" => Command::Raw(RawCall::Keyctl),
        "kexec" => Command::Raw(RawCall::Kexec),
        "init-module" => Command::Raw(RawCall::InitModule),
        "open-by-handle-at" => Command::Raw(RawCall::OpenByHandleAt),
        "setns" => Command::Raw(RawCall::Setns),
        "clone3" => Command::Raw(RawCall::Clone3),
        "openat2" => Command::Raw(RawCall::Openat2),
        "x32-syscall" => Command::X32Syscall,
        "i386-syscall" => Command::I386Syscall,
        "procs" => Command::Procs,
        "caps" => Command::Caps,
        "env" => Command::Env,
        "fds" => Command::Fds,
        "uid" => Command::Uid,
        "fork-bomb" => Command::ForkBomb(seconds(&rest[0])?),
        "mem-bomb" => Command::MemBomb(count(&rest[0], "MIB")?),
        "fill-file" => Command::FillFile(path(0), count(&rest[1], "MIB")?),
        "ignore-term-sleep" => Command::IgnoreTermSleep(seconds(&rest[0])?),
        "double-fork" => Command::DoubleFork(path(0), seconds(&rest[1])?),
        "sleep" => Command::Sleep(
            seconds(&rest[0])?,
            rest.get(1)
                .map_or_else(|| PathBuf::from(DEFAULT_SLEEP_HEARTBEAT), PathBuf::from),
        ),
        "flood" => Command::Flood(count(&rest[0], "BYTES")?),
        "echo-stdin" => Command::EchoStdin,
        "exit" => Command::Exit(exit_code(&rest[0])?),
        "kill-self" => Command::KillSelf(signal_number(&rest[0])?),
        _ => {
            return Err(UsageError::subcommand(format!(
                "subcommand {name:?} has no parser"
            )))
        }
    };
    Ok(command)
}

/// (required, optional) argument counts of a synopsis such as
/// `SECONDS [HEARTBEAT_PATH]`.
fn arity(synopsis: &str) -> (usize, usize) {
    let words = synopsis.split_whitespace();
    let optional = words.clone().filter(|w| w.starts_with('[')).count();
    (words.count() - optional, optional)
}

fn text<'a>(arg: &'a OsStr, what: &str) -> Result<&'a str, UsageError> {
    arg.to_str()
        .ok_or_else(|| UsageError::argument(format!("{what} is not UTF-8: {arg:?}")))
}

/// A permission mode in octal, `644` or `0o644` or `04755`, at most `7777`.
fn octal_mode(arg: &OsStr) -> Result<u32, UsageError> {
    let raw = text(arg, "MODE_OCTAL")?;
    let digits = raw.strip_prefix("0o").unwrap_or(raw);
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|mode| *mode <= 0o7777)
        .ok_or_else(|| {
            UsageError::argument(format!("MODE_OCTAL must be octal up to 7777, not {raw:?}"))
        })
}

/// `HOST:PORT` with an IP literal: `127.0.0.1:80`, `[::1]:80`.
fn socket_addr(arg: &OsStr) -> Result<SocketAddr, UsageError> {
    let raw = text(arg, "HOST:PORT")?;
    raw.parse().map_err(|_| {
        UsageError::argument(format!(
            "HOST:PORT must be an IPv4 or [IPv6] literal with a port, not {raw:?}"
        ))
    })
}

/// A non-negative number of seconds, fractions allowed (`0.5`).
fn seconds(arg: &OsStr) -> Result<Duration, UsageError> {
    let raw = text(arg, "SECONDS")?;
    raw.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 1e7)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            UsageError::argument(format!(
                "SECONDS must be a number from 0 to 1e7, not {raw:?}"
            ))
        })
}

/// A non-negative integer count.
fn count(arg: &OsStr, what: &str) -> Result<u64, UsageError> {
    let raw = text(arg, what)?;
    raw.parse().map_err(|_| {
        UsageError::argument(format!(
            "{what} must be a non-negative integer, not {raw:?}"
        ))
    })
}

/// An exit code, 0 to 255.
fn exit_code(arg: &OsStr) -> Result<i32, UsageError> {
    let raw = text(arg, "CODE")?;
    raw.parse::<u8>()
        .map(i32::from)
        .map_err(|_| UsageError::argument(format!("CODE must be 0 to 255, not {raw:?}")))
}

/// A signal by number (`9`, real-time signals included) or by name
/// (`SIGKILL`, `KILL`).
fn signal_number(arg: &OsStr) -> Result<i32, UsageError> {
    let raw = text(arg, "SIGNAL")?;
    if let Ok(number) = raw.parse::<i32>() {
        return if (1..=64).contains(&number) {
            Ok(number)
        } else {
            Err(UsageError::argument(format!(
                "SIGNAL {number} is out of range"
            )))
        };
    }
    let name = if raw.starts_with("SIG") {
        raw.to_owned()
    } else {
        format!("SIG{raw}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|signal| signal as i32)
        .map_err(|_| {
            UsageError::argument(format!("SIGNAL must be a number or a name, not {raw:?}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Command, UsageError> {
        let args: Vec<OsString> = words.iter().map(OsString::from).collect();
        parse(&args)
    }

    #[test]
    fn every_listed_subcommand_parses_with_sample_arguments() {
        for (name, synopsis) in SUBCOMMANDS {
            let mut words = vec![*name];
            for word in synopsis.split_whitespace() {
                words.push(match word.trim_matches(|c| c == '[' || c == ']') {
                    "MODE_OCTAL" => "644",
                    "HOST:PORT" => "127.0.0.1:9",
                    "SECONDS" | "MIB" | "BYTES" | "CODE" | "SIGNAL" => "1",
                    _ => "/workspace/x",
                });
            }
            assert!(parse_words(&words).is_ok(), "{words:?}");
        }
    }

    #[test]
    fn paths_and_modes() {
        assert_eq!(
            parse_words(&["chmod", "/skills/a", "0o4755"]),
            Ok(Command::Chmod("/skills/a".into(), 0o4755))
        );
        assert_eq!(
            parse_words(&["chmod", "/skills/a", "777"]),
            Ok(Command::Chmod("/skills/a".into(), 0o777))
        );
        assert!(parse_words(&["chmod", "/skills/a", "9"]).is_err());
        assert!(parse_words(&["chmod", "/skills/a", "17777"]).is_err());
        assert_eq!(
            parse_words(&["symlink", "/etc/passwd", "/skills/l"]),
            Ok(Command::Symlink("/etc/passwd".into(), "/skills/l".into()))
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(
            parse_words(&["connect", "[::1]:443"]),
            Ok(Command::Connect("[::1]:443".parse().unwrap()))
        );
        assert!(parse_words(&["connect", "example.com:80"]).is_err());
        assert!(parse_words(&["connect", "1.1.1.1"]).is_err());
    }

    #[test]
    fn durations_allow_fractions() {
        assert_eq!(
            parse_words(&["fork-bomb", "0.25"]),
            Ok(Command::ForkBomb(Duration::from_millis(250)))
        );
        assert!(parse_words(&["sleep", "-1"]).is_err());
        assert!(parse_words(&["sleep", "NaN"]).is_err());
        assert!(parse_words(&["sleep", "inf"]).is_err());
    }

    #[test]
    fn sleep_heartbeat_defaults_to_the_workspace() {
        assert_eq!(
            parse_words(&["sleep", "3"]),
            Ok(Command::Sleep(
                Duration::from_secs(3),
                DEFAULT_SLEEP_HEARTBEAT.into()
            ))
        );
        assert_eq!(
            parse_words(&["sleep", "3", "/tmp/hb"]),
            Ok(Command::Sleep(Duration::from_secs(3), "/tmp/hb".into()))
        );
    }

    #[test]
    fn exit_codes_and_signals() {
        assert_eq!(parse_words(&["exit", "255"]), Ok(Command::Exit(255)));
        assert!(parse_words(&["exit", "256"]).is_err());
        assert_eq!(parse_words(&["kill-self", "9"]), Ok(Command::KillSelf(9)));
        assert_eq!(
            parse_words(&["kill-self", "TERM"]),
            Ok(Command::KillSelf(libc::SIGTERM))
        );
        assert_eq!(
            parse_words(&["kill-self", "SIGSYS"]),
            Ok(Command::KillSelf(libc::SIGSYS))
        );
        assert!(parse_words(&["kill-self", "0"]).is_err());
        assert!(parse_words(&["kill-self", "NOPE"]).is_err());
    }

    #[test]
    fn wrong_argument_counts_and_names_are_usage_errors() {
        assert!(parse_words(&[]).is_err());
        assert!(parse_words(&["nope"]).is_err());
        assert!(parse_words(&["write-file"]).is_err());
        assert!(parse_words(&["write-file", "a", "b"]).is_err());
        assert!(parse_words(&["socket-inet", "extra"]).is_err());
        assert!(parse_words(&["sleep", "1", "a", "b"]).is_err());
        assert!(parse_words(&["mem-bomb", "-3"]).is_err());
    }

    #[test]
    fn arity_reads_the_synopsis() {
        assert_eq!(arity(""), (0, 0));
        assert_eq!(arity("FROM TO"), (2, 0));
        assert_eq!(arity("SECONDS [HEARTBEAT_PATH]"), (1, 1));
    }
}
