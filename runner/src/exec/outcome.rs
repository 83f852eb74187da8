//! How an execution ended, classified: the launcher's exit status, the
//! exec shim's report, the cancel and timeout flags and the limits that
//! were hit become the result's `status`, `exit_code`, `signal` and
//! `error` (docs/formats.md, "Error kinds"). Pure: it reads what the
//! supervisor observed and returns how it ended ([`Ended`]), which the
//! runner puts in the result; it decides nothing else.

use std::io;

use crate::error::ErrorKind;
use crate::exec::result::{ErrorInfo, Status, EXIT_NOT_FOUND};
use crate::supervise::{self, ExecReport};

/// Which limits stopped the command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hits {
    pub memory: bool,
    pub pids: bool,
    pub disk: bool,
}

/// How an execution ended: the result's `status`, `exit_code`, `signal`
/// and `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<ErrorInfo>,
}

impl Ended {
    /// Ended by the runner (a limit, a cancel, a timeout) with this
    /// error, keeping the command's codes.
    fn stopped(code: Option<i32>, signal: Option<i32>, status: Status, error: ErrorInfo) -> Ended {
        Ended {
            status,
            exit_code: code,
            signal,
            error: Some(error),
        }
    }

    /// Failed before the command ran, with the launcher's or shim's code.
    fn failed(code: i32, error: ErrorInfo) -> Ended {
        Ended {
            status: Status::Failed,
            exit_code: Some(code),
            signal: None,
            error: Some(error),
        }
    }
}

/// How the launcher ended, classified.
pub fn classify(o: &supervise::Outcome, l: &crate::exec::job::Limits, hits: Hits) -> Ended {
    // bwrap reports the command's end as an exit code: N, or 128+N when
    // the command was killed by signal N.
    let (code, signal) = match o.status {
        Ok(c) if c > 128 && c < 128 + 65 => (None, Some(c - 128)),
        Ok(c) => (Some(c), None),
        Err(sig) => (None, Some(sig)),
    };
    if hits.disk {
        // The watcher ended the run (through the cancel switch).
        return Ended::stopped(code, signal, Status::LimitExceeded, ErrorInfo::new(
            ErrorKind::LimitExceeded,
            format!(
                "the command added more than its disk_bytes limit ({}) to the workspace and extensions dir, and its sandbox was killed",
                l.disk_bytes
            ),
        ));
    }
    if o.cancelled {
        return Ended::stopped(
            code,
            signal,
            Status::Cancelled,
            ErrorInfo::new(
                ErrorKind::Cancelled,
                "the execution was cancelled and its sandbox killed",
            ),
        );
    }
    if o.timed_out {
        return Ended::stopped(
            code,
            signal,
            Status::TimedOut,
            ErrorInfo::new(
                ErrorKind::TimedOut,
                format!(
                    "the command ran past timeout_ms ({}) and its sandbox was killed",
                    l.timeout_ms
                ),
            ),
        );
    }
    match o.exec {
        // The shim never ran: bubblewrap did not finish the sandbox, and
        // nothing of the command ran. Its code is bubblewrap's, not the
        // command's.
        ExecReport::NotReached => Ended::failed(
            crate::exec::result::EXIT_RUNNER,
            crate::exec::diagnose::setup_failed(
                &o.launcher_stderr,
                o.status,
                crate::exec::diagnose::container(),
            ),
        ),
        ExecReport::ExecFailed(errno) => {
            let exit = crate::sandbox::shim::exit_code_for(errno);
            Ended::failed(exit, ErrorInfo::new(
                if exit == EXIT_NOT_FOUND { ErrorKind::NotFound } else { ErrorKind::NotExecutable },
                format!(
                    "the command could not be started ({}); argv[0] is looked up in PATH=/usr/bin:/bin inside the sandbox, and staged files are 0444, so run scripts through their interpreter",
                    io::Error::from_raw_os_error(errno)
                ),
            ))
        }
        _ => ran(code, signal, o, l, hits),
    }
}

/// The command ran and ended by itself, or by a limit the kernel enforces.
fn ran(
    code: Option<i32>,
    signal: Option<i32>,
    o: &supervise::Outcome,
    l: &crate::exec::job::Limits,
    hits: Hits,
) -> Ended {
    let mut hit: Vec<&str> = Vec::new();
    if hits.memory {
        hit.push("memory_bytes");
    }
    if hits.pids {
        hit.push("pids");
    }
    match signal {
        Some(s) if s == libc::SIGXCPU => hit.push("cpu_ms"),
        Some(s) if s == libc::SIGXFSZ => hit.push("file_size_bytes"),
        // RLIMIT_CPU's hard limit ends in SIGKILL.
        Some(s)
            if s == libc::SIGKILL && !hits.memory && o.cpu_ms >= l.cpu_ms.unwrap_or(u64::MAX) =>
        {
            hit.push("cpu_ms")
        }
        _ => {}
    }
    let (status, error) = if !hit.is_empty() {
        let error = ErrorInfo::new(
            ErrorKind::LimitExceeded,
            format!("the command passed its {} limit", hit.join(" and ")),
        );
        (Status::LimitExceeded, Some(error))
    } else if signal.is_some() {
        (Status::Signaled, None)
    } else {
        (Status::Exited, None)
    };
    Ended {
        status,
        exit_code: code,
        signal,
        error,
    }
}
