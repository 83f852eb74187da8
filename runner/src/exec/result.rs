//! The result document and the exit codes of `run` (docs/formats.md).

use serde::Serialize;

pub use crate::error::ErrorKind;
use crate::package::stage::Manifest;

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Exited,
    Signaled,
    TimedOut,
    LimitExceeded,
    Cancelled,
    Rejected,
    Failed,
}

impl Status {
    /// Every status, for tests and documentation.
    pub const ALL: [Status; 7] = [
        Status::Exited,
        Status::Signaled,
        Status::TimedOut,
        Status::LimitExceeded,
        Status::Cancelled,
        Status::Rejected,
        Status::Failed,
    ];

    /// The status as the result spells it (for logs: never `Debug` text).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Exited => "exited",
            Status::Signaled => "signaled",
            Status::TimedOut => "timed_out",
            Status::LimitExceeded => "limit_exceeded",
            Status::Cancelled => "cancelled",
            Status::Rejected => "rejected",
            Status::Failed => "failed",
        }
    }
}

/// `{kind, message}`: why an execution was rejected, failed or was cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub message: String,
}

impl ErrorInfo {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorInfo {
            kind,
            message: message.into(),
        }
    }
}

/// The skills an execution saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillsInfo {
    pub identity: String,
    pub manifest: Manifest,
    /// The environment the command saw at `/opt/skill-env`, when the job
    /// named one: exactly these bytes, checked before it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::package::environment::EnvRef>,
}

/// What enforces a limit, spelt in the result as `enforced_by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mechanism {
    #[serde(rename = "cgroup v2")]
    CgroupV2,
    #[serde(rename = "cgroup v1")]
    CgroupV1,
    /// An rlimit set on bubblewrap, or `RLIMIT_NPROC` set by the shim.
    #[serde(rename = "rlimit")]
    Rlimit,
    /// A tmpfs of that size.
    #[serde(rename = "tmpfs")]
    Tmpfs,
    /// The runner's supervisor (a timeout, an output cap).
    #[serde(rename = "supervisor")]
    Supervisor,
    /// The disk watcher, measuring a host workspace.
    #[serde(rename = "watcher")]
    Watcher,
    /// Not enforced on this host (the limit's `note` says why).
    #[serde(rename = "none")]
    None,
}

impl Mechanism {
    /// Every mechanism, for tests and documentation.
    pub const ALL: [Mechanism; 7] = [
        Mechanism::CgroupV2,
        Mechanism::CgroupV1,
        Mechanism::Rlimit,
        Mechanism::Tmpfs,
        Mechanism::Supervisor,
        Mechanism::Watcher,
        Mechanism::None,
    ];

    /// The cgroup of that version.
    pub fn cgroup(version: crate::supervise::cgroup::Version) -> Mechanism {
        match version {
            crate::supervise::cgroup::Version::V1 => Mechanism::CgroupV1,
            crate::supervise::cgroup::Version::V2 => Mechanism::CgroupV2,
        }
    }
}

/// One limit as applied: its value and what enforced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub value: Option<u64>,
    pub enforced_by: Mechanism,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Applied {
    pub fn by(value: Option<u64>, enforced_by: Mechanism) -> Self {
        Applied {
            value,
            enforced_by,
            note: None,
        }
    }
}

/// The limits of an execution and how each was enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedLimits {
    pub timeout_ms: Applied,
    pub output_bytes: Applied,
    pub memory_bytes: Applied,
    pub pids: Applied,
    pub cpu_ms: Applied,
    pub file_size_bytes: Applied,
    pub tmp_bytes: Applied,
    pub open_files: Applied,
    pub disk_bytes: Applied,
}

impl AppliedLimits {
    /// Sentences for the result's `warnings` about limits weaker than their
    /// name: a `memory_bytes` that only `RLIMIT_AS` holds bounds each
    /// process's address space, not what the sandbox holds in all.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.memory_bytes.enforced_by == Mechanism::Rlimit {
            out.push(format!(
                "memory_bytes ({} bytes) is bounded per process only (RLIMIT_AS, no cgroup): memory held in memfd files, pipes or by many processes together is not counted, so the sandbox may use more; give the runner a writable cgroup, or set strict limits to refuse such jobs",
                self.memory_bytes.value.unwrap_or_default()
            ));
        }
        out
    }
}

/// Resources used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub cpu_ms: u64,
    pub max_rss_bytes: u64,
}

/// Who sent the signal that ended the command (docs/formats.md, "Who
/// sent the signal").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalSender {
    /// The runner itself: its timeout, a cancellation, the disk watcher.
    Runner,
    /// The kernel, enforcing a limit: the OOM killer at `memory_bytes`,
    /// `RLIMIT_CPU`, `RLIMIT_FSIZE`.
    Kernel,
    /// A process outside the sandbox: bubblewrap, which no process in the
    /// sandbox can see or signal, was killed by a signal the runner did
    /// not send.
    Outside,
}

/// The result document.
#[derive(Debug, Clone, Serialize)]
pub struct ExecResult {
    pub execution_id: String,
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Who sent `signal`, where the runner can know it
    /// ([`crate::exec::outcome::sender`]); absent when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_sender: Option<SignalSender>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    pub started_at: String,
    pub finished_at: String,
    pub sandbox: &'static str,
    pub skills: Option<SkillsInfo>,
    pub limits: Option<AppliedLimits>,
    pub usage: Option<Usage>,
    /// What the command asked of the network, with an allowlist only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::sandbox::net::NetworkInfo>,
    pub error: Option<ErrorInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Who the command was on the host (absent when nothing started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::sandbox::identity::Identity>,
    /// The command ran in a sandbox prepared ahead of its request
    /// (docs/prepared.md); absent when its sandbox was built for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub prepared_sandbox: bool,
    /// `outputs` (and `outputs_note`), when the job named outputs.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<crate::exec::files::Collected>,
    /// The signed receipt (docs/receipts.md): a DSSE envelope over an
    /// in-toto statement of everything above. Absent with receipts off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<crate::receipt::Envelope>,
}

/// Exit code of `skill-runner run` for the execution (docs/formats.md);
/// 125, 126 and 127 are also the exec shim's ([`crate::sandbox::shim`]).
pub const EXIT_TIMED_OUT: i32 = 124;
pub use crate::sandbox::shim::{EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_RUNNER};

impl ExecResult {
    /// A result for an execution that never started.
    pub fn rejected(execution_id: &str, sandbox: &'static str, error: ErrorInfo) -> Self {
        let now = crate::text::rfc3339(std::time::SystemTime::now());
        ExecResult {
            execution_id: execution_id.to_owned(),
            status: Status::Rejected,
            exit_code: None,
            signal: None,
            signal_sender: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms: 0,
            started_at: now.clone(),
            finished_at: now,
            sandbox,
            skills: None,
            limits: None,
            usage: None,
            network: None,
            error: Some(error),
            warnings: Vec::new(),
            identity: None,
            prepared_sandbox: false,
            outputs: None,
            receipt: None,
        }
    }

    /// The process exit code `run` uses for this result.
    pub fn cli_exit_code(&self) -> i32 {
        match self.status {
            Status::Exited => self.exit_code.unwrap_or(EXIT_RUNNER),
            Status::Signaled => 128 + self.signal.unwrap_or(0),
            Status::TimedOut => EXIT_TIMED_OUT,
            Status::LimitExceeded => match (self.exit_code, self.signal) {
                (_, Some(sig)) => 128 + sig,
                (Some(code), None) if code != 0 => code,
                _ => EXIT_RUNNER,
            },
            Status::Cancelled => 128 + libc::SIGINT,
            Status::Rejected => EXIT_RUNNER,
            Status::Failed => self.exit_code.unwrap_or(EXIT_RUNNER),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(status: Status, code: Option<i32>, signal: Option<i32>) -> ExecResult {
        let mut r = ExecResult::rejected(
            "x",
            "bubblewrap",
            ErrorInfo::new(crate::error::ErrorKind::Internal, "m"),
        );
        r.status = status;
        r.exit_code = code;
        r.signal = signal;
        r
    }

    #[test]
    fn statuses_and_mechanisms_are_spelt_as_the_result_spells_them() {
        for s in Status::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        let spelt: Vec<_> = Mechanism::ALL
            .iter()
            .map(|m| serde_json::to_value(m).unwrap())
            .collect();
        assert_eq!(
            spelt,
            serde_json::json!([
                "cgroup v2",
                "cgroup v1",
                "rlimit",
                "tmpfs",
                "supervisor",
                "watcher",
                "none"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        use crate::supervise::cgroup::Version;
        for v in [Version::V1, Version::V2] {
            assert_eq!(
                serde_json::to_value(Mechanism::cgroup(v)).unwrap(),
                serde_json::json!(v.name())
            );
        }
    }

    #[test]
    fn exit_codes_follow_docker_and_timeout() {
        assert_eq!(with(Status::Exited, Some(3), None).cli_exit_code(), 3);
        assert_eq!(with(Status::Signaled, None, Some(9)).cli_exit_code(), 137);
        assert_eq!(with(Status::TimedOut, None, Some(9)).cli_exit_code(), 124);
        assert_eq!(with(Status::Rejected, None, None).cli_exit_code(), 125);
        assert_eq!(with(Status::Failed, Some(127), None).cli_exit_code(), 127);
        assert_eq!(
            with(Status::LimitExceeded, None, Some(9)).cli_exit_code(),
            137
        );
        assert_eq!(
            with(Status::LimitExceeded, Some(0), None).cli_exit_code(),
            125
        );
    }

    #[test]
    fn document_keys() {
        let r = with(Status::Exited, Some(0), None);
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        for k in [
            "execution_id",
            "status",
            "exit_code",
            "signal",
            "stdout",
            "stderr",
            "stdout_truncated",
            "stderr_truncated",
            "duration_ms",
            "started_at",
            "finished_at",
            "sandbox",
            "skills",
            "limits",
            "usage",
            "error",
        ] {
            assert!(keys.contains(&k), "{k}");
        }
        assert_eq!(v["status"], "exited");
    }
}
