//! Why an environment route failed (docs/daemon.md, "Environments"), and
//! the error kind of each refusal. Apart from the routes
//! ([`super::environments`]) so that [`super::app::ApiError`] can carry it
//! without the two modules importing each other.

use std::io;

use crate::error::ErrorKind;
use crate::exec::envfetch::EnvFetchError;
use crate::package::environment::build::BuildError;
use crate::package::environment::store::EnvError;
use crate::package::environment::tree::TreeError;

/// Why an environment request failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvApiError {
    #[error(transparent)]
    Store(#[from] EnvError),
    #[error("the environment upload is not admissible: {reason}")]
    Upload { reason: String },
    #[error("the environment upload: {0}")]
    Tree(#[from] TreeError),
    #[error("the uploaded tree hashes to {actual}, not the claimed {claimed}; nothing was published: send the tree's own environment hash (docs/formats.md, \"Environments\")")]
    ClaimedHash { claimed: String, actual: String },
    #[error("this daemon does not build environments (env_builds is false): build with skill-runner env build and upload the tree, or start the daemon with --env-builds true")]
    BuildsOff,
    #[error("another environment build is running in this daemon; retry when it is done")]
    BuildBusy,
    #[error(transparent)]
    Build(#[from] EnvFetchError),
    #[error("cannot write the uploaded tree into {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: io::Error,
    },
}

impl EnvApiError {
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            EnvApiError::Store(e) => e.kind(),
            EnvApiError::Upload { .. } | EnvApiError::Tree(_) => K::BadBundle,
            EnvApiError::ClaimedHash { .. } => K::HashMismatch,
            EnvApiError::BuildsOff => K::BadRequest,
            EnvApiError::BuildBusy => K::Busy,
            EnvApiError::Write { .. } => K::StoreFailed,
            EnvApiError::Build(e) => match e {
                EnvFetchError::Unavailable { .. }
                | EnvFetchError::LinuxOnly
                | EnvFetchError::RootMapped => K::SandboxUnavailable,
                EnvFetchError::Build(BuildError::Lock { .. } | BuildError::ReadLock { .. }) => {
                    K::BadRequest
                }
                EnvFetchError::Build(BuildError::Wheel { .. }) => K::HashMismatch,
                EnvFetchError::Build(BuildError::FetchSandbox { .. }) => K::SandboxUnavailable,
                EnvFetchError::Build(BuildError::Publish(e)) => e.kind(),
                _ => K::StagingFailed,
            },
        }
    }
}
