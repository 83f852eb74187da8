//! The error kinds of the error documents: `error.kind` of a result and
//! of the HTTP error document `{"error": {"kind", "message"}}`
//! (docs/formats.md, "Error kinds"; docs/daemon.md, "Errors").
//!
//! One enum for every room, so a kind can never be misspelt, a new one is
//! a compile error wherever kinds are mapped, and the daemon turns each
//! into an HTTP status in one exhaustive match (`daemon::app::status`).
//! It sits at the bottom of the ladder because the package room's errors
//! name their kinds too.

use std::fmt;

use serde::Serialize;

/// What kind of refusal or failure an error document reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    // The job and its packages: the request's fault.
    BadJob,
    BadPackage,
    BadBundle,
    HashMismatch,
    NotInStore,
    Conflict,
    // The host failed before anything ran.
    StagingFailed,
    StoreFailed,
    SandboxUnavailable,
    RunnerFailed,
    // The execution.
    SandboxFailed,
    NotFound,
    NotExecutable,
    TimedOut,
    LimitExceeded,
    Cancelled,
    // The skill host.
    BadRequest,
    BinaryFile,
    CompositionRejected,
    // The daemon.
    Unauthorized,
    PathNotAllowed,
    Busy,
    ShuttingDown,
    ExecutionIdInUse,
    BodyTooLarge,
    BodyTimeout,
    NotRunning,
    ResultDropped,
    MethodNotAllowed,
    Internal,
}

impl ErrorKind {
    /// Every kind, for tests and documentation.
    pub const ALL: &'static [ErrorKind] = &[
        ErrorKind::BadJob,
        ErrorKind::BadPackage,
        ErrorKind::BadBundle,
        ErrorKind::HashMismatch,
        ErrorKind::NotInStore,
        ErrorKind::Conflict,
        ErrorKind::StagingFailed,
        ErrorKind::StoreFailed,
        ErrorKind::SandboxUnavailable,
        ErrorKind::RunnerFailed,
        ErrorKind::SandboxFailed,
        ErrorKind::NotFound,
        ErrorKind::NotExecutable,
        ErrorKind::TimedOut,
        ErrorKind::LimitExceeded,
        ErrorKind::Cancelled,
        ErrorKind::BadRequest,
        ErrorKind::BinaryFile,
        ErrorKind::CompositionRejected,
        ErrorKind::Unauthorized,
        ErrorKind::PathNotAllowed,
        ErrorKind::Busy,
        ErrorKind::ShuttingDown,
        ErrorKind::ExecutionIdInUse,
        ErrorKind::BodyTooLarge,
        ErrorKind::BodyTimeout,
        ErrorKind::NotRunning,
        ErrorKind::ResultDropped,
        ErrorKind::MethodNotAllowed,
        ErrorKind::Internal,
    ];

    /// The kind as the documents spell it.
    pub fn as_str(self) -> &'static str {
        use ErrorKind as K;
        match self {
            K::BadJob => "bad_job",
            K::BadPackage => "bad_package",
            K::BadBundle => "bad_bundle",
            K::HashMismatch => "hash_mismatch",
            K::NotInStore => "not_in_store",
            K::Conflict => "conflict",
            K::StagingFailed => "staging_failed",
            K::StoreFailed => "store_failed",
            K::SandboxUnavailable => "sandbox_unavailable",
            K::RunnerFailed => "runner_failed",
            K::SandboxFailed => "sandbox_failed",
            K::NotFound => "not_found",
            K::NotExecutable => "not_executable",
            K::TimedOut => "timed_out",
            K::LimitExceeded => "limit_exceeded",
            K::Cancelled => "cancelled",
            K::BadRequest => "bad_request",
            K::BinaryFile => "binary_file",
            K::CompositionRejected => "composition_rejected",
            K::Unauthorized => "unauthorized",
            K::PathNotAllowed => "path_not_allowed",
            K::Busy => "busy",
            K::ShuttingDown => "shutting_down",
            K::ExecutionIdInUse => "execution_id_in_use",
            K::BodyTooLarge => "body_too_large",
            K::BodyTimeout => "body_timeout",
            K::NotRunning => "not_running",
            K::ResultDropped => "result_dropped",
            K::MethodNotAllowed => "method_not_allowed",
            K::Internal => "internal",
        }
    }

    /// Whether the host failed, rather than the request being wrong: the
    /// same request may succeed later or elsewhere.
    pub fn is_host_fault(self) -> bool {
        use ErrorKind as K;
        matches!(
            self,
            K::StagingFailed
                | K::StoreFailed
                | K::SandboxUnavailable
                | K::RunnerFailed
                | K::SandboxFailed
                | K::ShuttingDown
                | K::Internal
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_as_str_spell_every_kind_alike_and_uniquely() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ErrorKind::ALL {
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert!(seen.insert(k.as_str()), "{k} twice");
        }
    }
}
