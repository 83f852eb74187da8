//! How an execution ended, classified: the launcher's exit status, the
//! exec shim's report, the cancel and timeout flags and the limits that
//! were hit become the result's `status`, `exit_code`, `signal` and
//! `error` (docs/formats.md, "Error kinds"). Pure: it reads what the
//! supervisor observed and decides nothing else.

use std::io;

use crate::error::ErrorKind;
use crate::exec::result::{ErrorInfo, ExecResult, Status, EXIT_NOT_FOUND};
use crate::supervise::{self, ExecReport};

/// Which limits stopped the command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hits {
    pub memory: bool,
    pub pids: bool,
    pub disk: bool,
}

/// Sets status, codes and error from how the launcher ended.
pub fn classify(
    r: &mut ExecResult,
    o: &supervise::Outcome,
    l: &crate::exec::job::Limits,
    hits: Hits,
) {
    let Hits {
        memory: memory_hit,
        pids: pids_hit,
        disk: disk_hit,
    } = hits;
    // bwrap reports the command's end as an exit code: N, or 128+N when
    // the command was killed by signal N.
    let (code, signal) = match o.status {
        Ok(c) if c > 128 && c < 128 + 65 => (None, Some(c - 128)),
        Ok(c) => (Some(c), None),
        Err(sig) => (None, Some(sig)),
    };
    r.exit_code = code;
    r.signal = signal;
    if disk_hit {
        // The watcher ended the run (through the cancel switch).
        r.status = Status::LimitExceeded;
        r.error = Some(ErrorInfo::new(
            ErrorKind::LimitExceeded,
            format!(
                "the command added more than its disk_bytes limit ({}) to the workspace and extensions dir, and its sandbox was killed",
                l.disk_bytes
            ),
        ));
    } else if o.cancelled {
        r.status = Status::Cancelled;
        r.error = Some(ErrorInfo::new(
            ErrorKind::Cancelled,
            "the execution was cancelled and its sandbox killed",
        ));
    } else if o.timed_out {
        r.status = Status::TimedOut;
        r.error = Some(ErrorInfo::new(
            ErrorKind::TimedOut,
            format!(
                "the command ran past timeout_ms ({}) and its sandbox was killed",
                l.timeout_ms
            ),
        ));
    } else if o.exec == ExecReport::NotReached {
        // The shim never ran: bubblewrap did not finish the sandbox, and
        // nothing of the command ran. Its code is bubblewrap's, not the
        // command's.
        r.status = Status::Failed;
        r.exit_code = Some(crate::exec::result::EXIT_RUNNER);
        r.signal = None;
        r.error = Some(crate::exec::diagnose::setup_failed(
            &o.launcher_stderr,
            o.status,
            crate::exec::diagnose::container(),
        ));
    } else if let ExecReport::ExecFailed(errno) = o.exec {
        let not_found = crate::sandbox::shim::exit_code_for(errno) == EXIT_NOT_FOUND;
        r.status = Status::Failed;
        r.exit_code = Some(crate::sandbox::shim::exit_code_for(errno));
        r.signal = None;
        r.error = Some(ErrorInfo::new(
            if not_found { ErrorKind::NotFound } else { ErrorKind::NotExecutable },
            format!(
                "the command could not be started ({}); argv[0] is looked up in PATH=/usr/bin:/bin inside the sandbox, and staged files are 0444, so run scripts through their interpreter",
                io::Error::from_raw_os_error(errno)
            ),
        ));
    } else {
        let mut hit: Vec<&str> = Vec::new();
        if memory_hit {
            hit.push("memory_bytes");
        }
        if pids_hit {
            hit.push("pids");
        }
        match signal {
            Some(s) if s == libc::SIGXCPU => hit.push("cpu_ms"),
            Some(s) if s == libc::SIGXFSZ => hit.push("file_size_bytes"),
            // RLIMIT_CPU's hard limit ends in SIGKILL.
            Some(s)
                if s == libc::SIGKILL
                    && !memory_hit
                    && o.cpu_ms >= l.cpu_ms.unwrap_or(u64::MAX) =>
            {
                hit.push("cpu_ms")
            }
            _ => {}
        }
        if !hit.is_empty() {
            r.status = Status::LimitExceeded;
            r.error = Some(ErrorInfo::new(
                ErrorKind::LimitExceeded,
                format!("the command passed its {} limit", hit.join(" and ")),
            ));
        } else if signal.is_some() {
            r.status = Status::Signaled;
        } else {
            r.status = Status::Exited;
        }
    }
}
