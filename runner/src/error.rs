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

/// Declares [`ErrorKind`] from one list of `Variant => "spelling"`: the
/// enum, [`ErrorKind::ALL`] and [`ErrorKind::as_str`] (which serde uses
/// too) cannot disagree.
macro_rules! error_kinds {
    ($($kind:ident => $name:literal,)*) => {
        /// What kind of refusal or failure an error document reports.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $($kind,)*
        }

        impl ErrorKind {
            /// Every kind, for tests and documentation.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind,)*];

            /// The kind as the documents spell it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $name,)*
                }
            }
        }
    };
}

error_kinds! {
    // The job and its packages: the request's fault.
    BadJob => "bad_job",
    BadPackage => "bad_package",
    BadBundle => "bad_bundle",
    HashMismatch => "hash_mismatch",
    NotInStore => "not_in_store",
    Conflict => "conflict",
    // The host failed before anything ran.
    StagingFailed => "staging_failed",
    StoreFailed => "store_failed",
    StoreCorrupted => "store_corrupted",
    SandboxUnavailable => "sandbox_unavailable",
    RunnerFailed => "runner_failed",
    // The execution.
    SandboxFailed => "sandbox_failed",
    NotFound => "not_found",
    NotExecutable => "not_executable",
    TimedOut => "timed_out",
    LimitExceeded => "limit_exceeded",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
    // The skill host.
    BadRequest => "bad_request",
    BinaryFile => "binary_file",
    CompositionRejected => "composition_rejected",
    // The daemon.
    Unauthorized => "unauthorized",
    PathNotAllowed => "path_not_allowed",
    Busy => "busy",
    ShuttingDown => "shutting_down",
    DiskFull => "disk_full",
    ExecutionIdInUse => "execution_id_in_use",
    BodyTooLarge => "body_too_large",
    BodyTimeout => "body_timeout",
    NotRunning => "not_running",
    ResultDropped => "result_dropped",
    MethodNotAllowed => "method_not_allowed",
    UnsupportedMediaType => "unsupported_media_type",
    // On-demand pulls from registries (docs/distribution.md).
    RegistryNotAllowed => "registry_not_allowed",
    PullFailed => "pull_failed",
    Internal => "internal",
}

impl Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl ErrorKind {
    /// Whether the host failed, rather than the request being wrong: the
    /// same request may succeed later or elsewhere.
    pub fn is_host_fault(self) -> bool {
        use ErrorKind as K;
        matches!(
            self,
            K::StagingFailed
                | K::StoreFailed
                | K::StoreCorrupted
                | K::SandboxUnavailable
                | K::RunnerFailed
                | K::SandboxFailed
                | K::ShuttingDown
                | K::DiskFull
                | K::Interrupted
                | K::PullFailed
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
    fn every_kind_is_spelt_once_in_snake_case_of_its_name() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ErrorKind::ALL {
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert!(seen.insert(k.as_str()), "{k} twice");
            let snake: String = format!("{k:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                    sep.into_iter()
                        .chain(std::iter::once(c.to_ascii_lowercase()))
                })
                .collect();
            assert_eq!(k.as_str(), snake, "{k:?}");
        }
    }
}
