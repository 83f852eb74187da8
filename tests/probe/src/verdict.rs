//! Verdicts: turning what a probe observed into the one-line protocol.
//!
//! An [`Attempt`] is one forbidden operation and how it ended. A probe that
//! tries several routes to the same forbidden thing (socket families, ptrace
//! variants, …) collects several attempts; [`verdict`] says `DENIED` only when
//! every one of them was denied, so a single open route is `ALLOWED`.
//!
//! Which errors count as a denial is a per-attempt [`Rule`]:
//!
//! - [`Rule::AnyError`]: the attempt did not happen, whatever the errno.
//!   Used where success is the only thing that matters (a write to `/skills`,
//!   a socket, a mount).
//! - [`Rule::Filtered`]: only `EPERM` and `ENOSYS` deny. Used for system calls
//!   probed with harmless but invalid arguments: a kernel that lets the call
//!   through answers `EINVAL`, `EBADF`, `EFAULT`, `EOPNOTSUPP`… and the call is
//!   then reported `ALLOWED`, because the filter did not stop it. The runner's
//!   seccomp filter answers `EPERM`; `ENOSYS` is a kernel without the call.
//!
//! Invariant: an [`Outcome`] is what the process prints on stdout when it
//! ends and the code it exits with; `main` emits it. The only other stdout
//! output is a `READY` line printed with [`say`] by the long-running probes.

use nix::errno::Errno;

/// Exit code of `DENIED`, of reports, and of a positive control that worked.
pub const EXIT_OK: i32 = 0;
/// Exit code of `ALLOWED` (the forbidden thing happened) and of a failed
/// positive control.
pub const EXIT_ALLOWED: i32 = 1;
/// Exit code of a command line the probe does not understand.
pub const EXIT_USAGE: i32 = 2;
/// Exit code when the probe could not set up its attempt (say, `fork` failed
/// before `ptrace` could be tried): there is no verdict.
pub const EXIT_NO_VERDICT: i32 = 3;

/// What the process prints on stdout, and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Lines for stdout, without the final newline; empty prints nothing.
    pub stdout: String,
    /// One line for stderr, empty for none.
    pub stderr: String,
    /// The process exit code.
    pub code: i32,
}

impl Outcome {
    /// `DENIED <reason>`, exit 0.
    pub fn denied(reason: impl AsRef<str>) -> Self {
        Self::line(format!("DENIED {}", reason.as_ref()), EXIT_OK)
    }

    /// `ALLOWED <details>`, exit 1.
    pub fn allowed(details: impl AsRef<str>) -> Self {
        Self::line(format!("ALLOWED {}", details.as_ref()), EXIT_ALLOWED)
    }

    /// A report: `text` as given, exit 0.
    pub fn report(text: impl Into<String>) -> Self {
        Self::line(text, EXIT_OK)
    }

    /// `text` on stdout and exit `code`.
    pub fn line(text: impl Into<String>, code: i32) -> Self {
        Self {
            stdout: text.into(),
            stderr: String::new(),
            code,
        }
    }

    /// Nothing more to print (the probe printed as it went); exit `code`.
    pub fn silent(code: i32) -> Self {
        Self::line(String::new(), code)
    }

    /// No verdict: `message` on stderr, exit 3.
    pub fn no_verdict(message: impl Into<String>) -> Self {
        Self {
            stdout: String::new(),
            stderr: message.into(),
            code: EXIT_NO_VERDICT,
        }
    }

    /// The same outcome with `first` printed on a line before it.
    pub fn after(mut self, first: impl AsRef<str>) -> Self {
        self.stdout = if self.stdout.is_empty() {
            first.as_ref().to_owned()
        } else {
            format!("{}\n{}", first.as_ref(), self.stdout)
        };
        self
    }
}

/// Which failures of an attempt count as the sandbox denying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Any error means the forbidden thing did not happen.
    AnyError,
    /// Only `EPERM` and `ENOSYS` deny; any other errno means the call reached
    /// the kernel's own argument checks, which the filter should have stopped.
    Filtered,
}

impl Rule {
    /// Whether `errno` from an attempt under this rule is a denial.
    pub fn denies(self, errno: Errno) -> bool {
        match self {
            Rule::AnyError => true,
            Rule::Filtered => matches!(errno, Errno::EPERM | Errno::ENOSYS),
        }
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// The operation succeeded; the text says what it did.
    Succeeded(String),
    /// The operation failed with this errno.
    Failed(Errno),
    /// The process (or child) that made it was killed by this signal
    /// (`SIGSYS` from a seccomp filter, `SIGSEGV` from a missing ABI).
    Killed(String),
}

/// One forbidden operation and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    label: String,
    ending: Ending,
    denied: bool,
}

impl Attempt {
    /// An attempt that ended with `result`, judged by `rule`.
    pub fn new(label: impl Into<String>, result: Result<String, Errno>, rule: Rule) -> Self {
        let (ending, denied) = match result {
            Ok(done) => (Ending::Succeeded(done), false),
            Err(errno) => (Ending::Failed(errno), rule.denies(errno)),
        };
        Self {
            label: label.into(),
            ending,
            denied,
        }
    }

    /// An attempt whose process was killed by `signal` before it returned:
    /// always a denial.
    pub fn killed(label: impl Into<String>, signal: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            ending: Ending::Killed(signal.into()),
            denied: true,
        }
    }

    /// Whether the sandbox denied this attempt.
    pub fn is_denied(&self) -> bool {
        self.denied
    }

    /// `label: EROFS (Read-only file system)`, `label: ok (details)`.
    fn long(&self) -> String {
        match &self.ending {
            Ending::Succeeded(done) if done.is_empty() => format!("{}: ok", self.label),
            Ending::Succeeded(done) => format!("{}: ok ({done})", self.label),
            Ending::Failed(errno) => format!("{}: {}", self.label, errno_text(*errno)),
            Ending::Killed(signal) => format!("{}: killed by {signal}", self.label),
        }
    }

    /// `label=EPERM`, `label=ok`, `label=SIGSYS`.
    fn short(&self) -> String {
        match &self.ending {
            Ending::Succeeded(_) => format!("{}=ok", self.label),
            Ending::Failed(errno) => format!("{}={}", self.label, errno_name(*errno)),
            Ending::Killed(signal) => format!("{}={signal}", self.label),
        }
    }
}

/// `DENIED` when every attempt was denied, otherwise `ALLOWED`.
///
/// One attempt is written long (`open: EROFS (Read-only file system)`);
/// several are written short, space-separated (`inet=EPERM inet6=ok`).
pub fn verdict(attempts: &[Attempt]) -> Outcome {
    let text = match attempts {
        [one] => one.long(),
        many => many
            .iter()
            .map(Attempt::short)
            .collect::<Vec<_>>()
            .join(" "),
    };
    if attempts.iter().all(Attempt::is_denied) {
        Outcome::denied(text)
    } else {
        Outcome::allowed(text)
    }
}

/// The symbolic name of `errno`: `EPERM`, or `EUNKNOWN` for one nix does not
/// know.
pub fn errno_name(errno: Errno) -> String {
    if errno == Errno::UnknownErrno {
        "EUNKNOWN".to_owned()
    } else {
        format!("{errno:?}")
    }
}

/// `EPERM (Operation not permitted)`.
pub fn errno_text(errno: Errno) -> String {
    format!("{} ({})", errno_name(errno), errno.desc())
}

/// Print `line` on stdout now and flush it, for probes that must announce
/// `READY` before they finish. Errors (a closed pipe) are ignored: the probe
/// goes on with its attempt either way.
pub fn say(line: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Flush stdout and stderr, so that a `fork` does not copy unwritten output
/// into the child.
pub fn flush_stdio() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

/// The errno of an `std::io::Error`, `UnknownErrno` when it has none.
pub fn errno_of(error: &std::io::Error) -> Errno {
    Errno::from_raw(error.raw_os_error().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_attempt_is_written_long() {
        let out = verdict(&[Attempt::new("open", Err(Errno::EROFS), Rule::AnyError)]);
        assert_eq!(out, Outcome::denied("open: EROFS (Read-only file system)"));
        assert_eq!(out.stdout, "DENIED open: EROFS (Read-only file system)");
        assert_eq!(out.code, EXIT_OK);
    }

    #[test]
    fn one_open_route_makes_the_whole_probe_allowed() {
        let out = verdict(&[
            Attempt::new("inet", Err(Errno::EPERM), Rule::AnyError),
            Attempt::new("packet", Ok(String::new()), Rule::AnyError),
        ]);
        assert_eq!(out.stdout, "ALLOWED inet=EPERM packet=ok");
        assert_eq!(out.code, EXIT_ALLOWED);
    }

    #[test]
    fn filtered_rule_counts_only_eperm_and_enosys() {
        assert!(Rule::Filtered.denies(Errno::EPERM));
        assert!(Rule::Filtered.denies(Errno::ENOSYS));
        for reached_kernel in [Errno::EINVAL, Errno::EBADF, Errno::EFAULT, Errno::EACCES] {
            assert!(!Rule::Filtered.denies(reached_kernel), "{reached_kernel:?}");
        }
        assert!(Rule::AnyError.denies(Errno::EINVAL));
    }

    #[test]
    fn filtered_attempts_that_reached_the_kernel_are_allowed() {
        let out = verdict(&[
            Attempt::new("kexec_load", Err(Errno::EPERM), Rule::Filtered),
            Attempt::new("kexec_file_load", Err(Errno::EINVAL), Rule::Filtered),
        ]);
        assert_eq!(
            out.stdout,
            "ALLOWED kexec_load=EPERM kexec_file_load=EINVAL"
        );
    }

    #[test]
    fn a_killed_attempt_is_denied() {
        let out = verdict(&[
            Attempt::killed("clone", "SIGSYS"),
            Attempt::new("unshare", Err(Errno::EPERM), Rule::AnyError),
        ]);
        assert_eq!(out.stdout, "DENIED clone=SIGSYS unshare=EPERM");
    }

    #[test]
    fn success_details_are_kept_in_the_long_form() {
        let out = verdict(&[Attempt::new(
            "write",
            Ok("wrote 6 bytes".into()),
            Rule::AnyError,
        )]);
        assert_eq!(out.stdout, "ALLOWED write: ok (wrote 6 bytes)");
    }

    #[test]
    fn after_puts_a_line_first() {
        let out = Outcome::denied("write: EFBIG (File too large)").after("WROTE 1048576");
        assert_eq!(
            out.stdout,
            "WROTE 1048576\nDENIED write: EFBIG (File too large)"
        );
        assert_eq!(Outcome::silent(0).after("READY").stdout, "READY");
    }

    #[test]
    fn errno_names_are_symbolic() {
        assert_eq!(errno_name(Errno::from_raw(4242)), "EUNKNOWN");
        assert_eq!(errno_name(Errno::EAGAIN), "EAGAIN");
    }
}
