//! How an execution ended, classified: the launcher's exit status, the
//! exec shim's report, the cancel and timeout flags and the limits that
//! were hit become the result's `status`, `exit_code`, `signal` and
//! `error` (docs/formats.md, "Error kinds"). Pure: [`classify`] reads what
//! the supervisor observed and returns how it ended ([`Ended`]), and
//! [`result`] makes the result document of it; nothing else is decided.

use std::io;

use crate::error::ErrorKind;
use crate::exec::diagnose::SetupFailure;
use crate::exec::job::{Job, Limits};
use crate::exec::launch::Prepared;
use crate::exec::result::{
    AppliedLimits, ErrorInfo, ExecResult, SignalSender, SkillsInfo, Status, Usage, EXIT_NOT_FOUND,
    EXIT_RUNNER,
};
use crate::supervise::{self, ExecReport};

/// Which limits stopped the command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hits {
    pub memory: bool,
    pub pids: bool,
    pub disk: bool,
}

/// Why a launched execution did not end by itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndError {
    /// The disk watcher ended the run (through the cancel switch).
    #[error("the command added more than its disk_bytes limit ({limit}) to the workspace and extensions dir, and its sandbox was killed")]
    DiskBytes { limit: u64 },
    #[error("the execution was cancelled and its sandbox killed")]
    Cancelled,
    #[error("the command ran past timeout_ms ({limit}) and its sandbox was killed")]
    TimedOut { limit: u64 },
    /// bubblewrap did not finish the sandbox: nothing of the command ran.
    #[error(transparent)]
    Setup(#[from] SetupFailure),
    #[error("the command could not be started ({}); argv[0] is looked up in PATH=/usr/bin:/bin inside the sandbox, and staged files are 0444, so run scripts through their interpreter", io::Error::from_raw_os_error(*errno))]
    Exec { errno: i32 },
    /// The disk watcher failed on its own and stopped the run: the
    /// runner's fault, never the command's limit.
    #[error("{reason}, so disk_bytes could no longer be enforced and the sandbox was killed; the runner failed, not the command: retry")]
    Watcher { reason: String },
    /// Limits the kernel enforced, by their names in the job.
    #[error("the command passed its {} limit", hit.join(" and "))]
    Limits { hit: Vec<&'static str> },
}

impl EndError {
    /// The error kind (docs/formats.md, "Error kinds").
    pub fn kind(&self) -> ErrorKind {
        match self {
            EndError::DiskBytes { .. } | EndError::Limits { .. } => ErrorKind::LimitExceeded,
            EndError::Cancelled => ErrorKind::Cancelled,
            EndError::Watcher { .. } => ErrorKind::RunnerFailed,
            EndError::TimedOut { .. } => ErrorKind::TimedOut,
            EndError::Setup(_) => ErrorKind::SandboxFailed,
            EndError::Exec { errno } => {
                if crate::sandbox::shim::exit_code_for(*errno) == EXIT_NOT_FOUND {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::NotExecutable
                }
            }
        }
    }

    /// The wire document: the edge, where the result's `error` is made.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo::new(self.kind(), self.to_string())
    }
}

/// How an execution ended: the result's `status`, `exit_code`, `signal`
/// and `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<EndError>,
}

impl Ended {
    /// A run the disk watcher stopped after failing on its own.
    pub fn watcher_failed(reason: String) -> Ended {
        Ended {
            status: Status::Failed,
            exit_code: Some(crate::exec::result::EXIT_RUNNER),
            signal: None,
            error: Some(EndError::Watcher { reason }),
        }
    }
}

/// How the launcher ended, classified.
pub fn classify(o: &supervise::Outcome, l: &Limits, hits: Hits) -> Ended {
    // bwrap reports the command's end as an exit code: N, or 128+N when
    // the command was killed by signal N.
    let (code, signal) = match o.status {
        Ok(c) if c > 128 && c < 128 + 65 => (None, Some(c - 128)),
        Ok(c) => (Some(c), None),
        Err(sig) => (None, Some(sig)),
    };
    // Ended by the runner, keeping the command's codes.
    let stopped = |status, error| Ended {
        status,
        exit_code: code,
        signal,
        error: Some(error),
    };
    // Failed before the command ran, with the launcher's or shim's code.
    let failed = |exit, error| Ended {
        status: Status::Failed,
        exit_code: Some(exit),
        signal: None,
        error: Some(error),
    };
    if hits.disk {
        let limit = l.disk_bytes;
        return stopped(Status::LimitExceeded, EndError::DiskBytes { limit });
    }
    if o.cancelled {
        return stopped(Status::Cancelled, EndError::Cancelled);
    }
    if o.timed_out {
        let limit = l.timeout_ms;
        return stopped(Status::TimedOut, EndError::TimedOut { limit });
    }
    match o.exec {
        // The shim never ran: bubblewrap did not finish the sandbox. Its
        // code is bubblewrap's, not the command's.
        ExecReport::NotReached => {
            let why = crate::exec::diagnose::setup_failed(
                &o.launcher_stderr,
                o.status,
                crate::exec::diagnose::container(),
            );
            failed(EXIT_RUNNER, EndError::Setup(why))
        }
        ExecReport::ExecFailed(errno) => failed(
            crate::sandbox::shim::exit_code_for(errno),
            EndError::Exec { errno },
        ),
        _ => ran(code, signal, o, l, hits),
    }
}

/// The command ran and ended by itself, or by a limit the kernel enforces.
fn ran(
    code: Option<i32>,
    signal: Option<i32>,
    o: &supervise::Outcome,
    l: &Limits,
    hits: Hits,
) -> Ended {
    let mut hit: Vec<&'static str> = Vec::new();
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
        (Status::LimitExceeded, Some(EndError::Limits { hit }))
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

/// Who sent the signal that ended the command, where the runner can know
/// it; `None` when it cannot (or no signal ended it).
///
/// The supervisor sees bubblewrap's exit status, not the command's: a
/// command killed by signal N reaches it as exit code 128+N, and waitid's
/// siginfo names only the child that died, never who signalled it (the
/// sender's pid reaches only the receiver, and SIGKILL cannot be caught).
/// So:
/// - the runner knows its own kills (timeout, cancellation, disk watcher);
/// - it knows the kernel's at a limit: the cgroup counted an OOM kill
///   (SIGKILL), `cpu_ms` was spent (SIGXCPU, or SIGKILL at the hard
///   limit), or SIGXFSZ at `file_size_bytes`;
/// - it knows a signal came from outside the sandbox when bubblewrap
///   itself died by it: bubblewrap runs in the host's pid namespace,
///   which no process in the sandbox can see, and the runner sent
///   nothing;
/// - it cannot tell apart the command signalling itself, another of its
///   processes doing so, the kernel for a fault (SIGSEGV) and a host
///   process signalling the command directly: these carry no sender.
pub fn sender(o: &supervise::Outcome, ended: &Ended) -> Option<SignalSender> {
    let signal = ended.signal?;
    match (&ended.status, &ended.error) {
        (Status::TimedOut | Status::Cancelled, _) => Some(SignalSender::Runner),
        (Status::LimitExceeded, Some(EndError::DiskBytes { .. })) => Some(SignalSender::Runner),
        (Status::LimitExceeded, Some(EndError::Limits { hit })) => {
            let by =
                |limit: &str, signals: &[i32]| hit.contains(&limit) && signals.contains(&signal);
            (by("memory_bytes", &[libc::SIGKILL])
                || by("cpu_ms", &[libc::SIGXCPU, libc::SIGKILL])
                || by("file_size_bytes", &[libc::SIGXFSZ]))
            .then_some(SignalSender::Kernel)
        }
        (Status::Signaled, _) if o.status.is_err() => Some(SignalSender::Outside),
        _ => None,
    }
}

/// What the result of a launched execution is made of, besides the
/// supervisor's outcome.
#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    pub applied: AppliedLimits,
    /// The cgroup's peak memory, where it has one.
    pub peak: Option<u64>,
    /// The whole tree's CPU time from the cgroup, where it has one: the
    /// launcher's own rusage misses bwrap's pid 1 and all below it.
    pub cpu_ms: Option<u64>,
    pub network: Option<crate::sandbox::net::NetworkInfo>,
}

/// The result document of a launched execution.
pub fn result(job: &Job, p: &Prepared, outcome: &supervise::Outcome, f: Finished) -> ExecResult {
    let Finished {
        ended,
        applied,
        peak,
        cpu_ms,
        network,
    } = f;
    let finished_at = outcome.started_at + outcome.duration;
    let signal_sender = sender(outcome, &ended);
    // The packages' warnings, then those of limits weaker than asked.
    let mut warnings = p.lease.snapshot.warnings.clone();
    warnings.extend(applied.warnings());
    ExecResult {
        execution_id: job.execution_id.clone(),
        status: ended.status,
        exit_code: ended.exit_code,
        signal: ended.signal,
        signal_sender,
        stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
        stderr: String::from_utf8_lossy(&outcome.stderr.bytes).into_owned(),
        stdout_truncated: outcome.stdout.truncated,
        stderr_truncated: outcome.stderr.truncated,
        duration_ms: outcome.duration.as_millis() as u64,
        started_at: crate::text::rfc3339(outcome.started_at),
        finished_at: crate::text::rfc3339(finished_at),
        sandbox: crate::exec::launch::SANDBOX,
        skills: Some(SkillsInfo {
            identity: p.lease.snapshot.identity.clone(),
            manifest: p.lease.snapshot.manifest.clone(),
            environment: p.environment.as_ref().map(|e| e.record.env_ref()),
        }),
        limits: Some(applied),
        usage: Some(Usage {
            cpu_ms: cpu_ms.unwrap_or(0).max(outcome.cpu_ms),
            max_rss_bytes: peak
                .unwrap_or(outcome.max_rss_bytes)
                .max(outcome.max_rss_bytes),
        }),
        network,
        error: ended.error.as_ref().map(EndError::info),
        warnings,
        identity: Some(p.identity.clone()),
        prepared_sandbox: false,
        outputs: None,
        receipt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ends_keep_their_kinds_and_sentences() {
        let e = EndError::Limits {
            hit: vec!["memory_bytes", "pids"],
        };
        assert_eq!(e.kind(), ErrorKind::LimitExceeded);
        assert_eq!(
            e.to_string(),
            "the command passed its memory_bytes and pids limit"
        );
        let not_found = EndError::Exec {
            errno: libc::ENOENT,
        };
        assert_eq!(not_found.kind(), ErrorKind::NotFound);
        let denied = EndError::Exec {
            errno: libc::EACCES,
        };
        assert_eq!(denied.info().kind, ErrorKind::NotExecutable);
        let setup = EndError::Setup(SetupFailure::Silent { code: 1 });
        assert_eq!(setup.kind(), ErrorKind::SandboxFailed);
    }

    fn outcome(status: Result<i32, i32>, timed_out: bool) -> supervise::Outcome {
        supervise::Outcome {
            status,
            timed_out,
            cancelled: false,
            exec: ExecReport::Executed,
            launcher_stderr: Vec::new(),
            stdout: Default::default(),
            stderr: Default::default(),
            started_at: std::time::SystemTime::now(),
            duration: std::time::Duration::ZERO,
            cpu_ms: 0,
            max_rss_bytes: 0,
        }
    }

    /// Who sent the signal, for every way a run ends by one.
    #[test]
    fn a_signal_names_its_sender_where_the_runner_can_know_it() {
        let l = Limits {
            timeout_ms: 1000,
            output_bytes: 1 << 20,
            memory_bytes: 1 << 30,
            pids: 64,
            cpu_ms: None,
            file_size_bytes: 1 << 30,
            tmp_bytes: 1 << 20,
            open_files: 64,
            disk_bytes: 1 << 30,
        };
        let none = Hits::default();
        let oom = Hits {
            memory: true,
            ..Hits::default()
        };
        let cases = [
            // bubblewrap itself killed, the runner sent nothing: outside.
            (
                outcome(Err(libc::SIGKILL), false),
                none,
                Status::Signaled,
                Some(SignalSender::Outside),
            ),
            (
                outcome(Err(libc::SIGTERM), false),
                none,
                Status::Signaled,
                Some(SignalSender::Outside),
            ),
            // The command killed (by itself, its sandbox or anyone): unknown.
            (
                outcome(Ok(128 + libc::SIGKILL), false),
                none,
                Status::Signaled,
                None,
            ),
            (
                outcome(Ok(128 + libc::SIGTERM), false),
                none,
                Status::Signaled,
                None,
            ),
            // The runner's timeout.
            (
                outcome(Err(libc::SIGKILL), true),
                none,
                Status::TimedOut,
                Some(SignalSender::Runner),
            ),
            // The OOM killer, at the command or at bubblewrap.
            (
                outcome(Ok(128 + libc::SIGKILL), false),
                oom,
                Status::LimitExceeded,
                Some(SignalSender::Kernel),
            ),
            (
                outcome(Err(libc::SIGKILL), false),
                oom,
                Status::LimitExceeded,
                Some(SignalSender::Kernel),
            ),
            (
                outcome(Ok(128 + libc::SIGXFSZ), false),
                none,
                Status::LimitExceeded,
                Some(SignalSender::Kernel),
            ),
            // No signal, no sender.
            (outcome(Ok(0), false), none, Status::Exited, None),
            (outcome(Ok(3), false), oom, Status::LimitExceeded, None),
        ];
        for (o, hits, status, sender_is) in cases {
            let ended = classify(&o, &l, hits);
            assert_eq!(ended.status, status, "{:?}", o.status);
            assert_eq!(sender(&o, &ended), sender_is, "{:?} {hits:?}", o.status);
        }
    }
}
