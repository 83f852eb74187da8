//! Why an execution was refused before its command ran: one variant per
//! failed operation, carrying the field, path or id it concerns, and its
//! [`ErrorKind`]. The exec room speaks in these; the wire document
//! ([`ErrorInfo`]) is made once, at the edge ([`ExecError::info`], called
//! by [`crate::exec::Runner::run`] and `explain`'s front end).
//!
//! Each message is one sentence saying what to change. A hint belongs to
//! its variant (or is chosen by the caller picking the variant), never
//! edited into a message afterwards.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::ErrorKind;
use crate::exec::result::ErrorInfo;
use crate::sandbox::host::HostError;
use crate::sandbox::identity::IdentityError;

/// Whether a job's folder is inside the runner's state or above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Inside,
    Above,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Place::Inside => "inside",
            Place::Above => "above",
        })
    }
}

/// Why a named folder could not be resolved.
#[derive(Debug)]
pub enum Unresolved {
    Missing,
    Unusable(io::Error),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::Missing => f.write_str("does not exist"),
            Unresolved::Unusable(e) => write!(f, "cannot be used ({e})"),
        }
    }
}

/// Why an execution was refused before its command ran.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("{} is missing; it ships with macOS", seatbelt::SANDBOX_EXEC)]
    FindSandboxExec,
    #[error("bubblewrap was not found")]
    FindBwrap,
    #[error("{field} {} {why}; create the folder first, or leave {field} out for {default}", path.display())]
    ResolveFolder {
        field: &'static str,
        path: PathBuf,
        why: Unresolved,
        default: &'static str,
    },
    #[error("{field} {} is not a folder; name a folder", path.display())]
    NotAFolder { field: &'static str, path: PathBuf },
    #[error("{field} {} changed since it was checked (a folder on the way is now a symlink); name a folder no running command can rename", path.display())]
    Changed { field: &'static str, path: PathBuf },
    #[error("{field} {} is {place} the runner's data dir {}, which holds the store and published snapshot roots; name a folder outside it{}", path.display(), data.display(), under_jobs(*place, jobs))]
    RunnerState {
        field: &'static str,
        path: PathBuf,
        place: Place,
        data: PathBuf,
        jobs: PathBuf,
    },
    #[error("{field} {} holds the runner's receipt key, which no sandbox may see; name a folder that does not contain it", path.display())]
    ReceiptKey { field: &'static str, path: PathBuf },
    #[error("{field} {} cannot be used: {source}", path.display())]
    UseFolder {
        field: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the default extensions dir {} is a symlink or not a folder; remove it from the workspace or name extensions_dir explicitly", path.display())]
    DefaultExtensions { path: PathBuf },
    #[error("{field} {} is not writable by the sandbox user (host uid {uid}, gid {gid}), which a root runner launches commands as; give the folder to it (chown -R {uid}:{gid} {}) or set {} to the folder's owner", path.display(), path.display(), crate::sandbox::identity::SANDBOX_USER_VAR)]
    NotWritable {
        field: &'static str,
        path: PathBuf,
        uid: u32,
        gid: u32,
    },
    #[error("{field} {} cannot be reached by the sandbox user (host uid {uid}, gid {gid}), which a root runner launches bubblewrap as: {} does not let it pass; allow it (chmod o+x {}, or give the folder's group to gid {gid} with g+x), or use folders below ones it may pass", path.display(), above.display(), above.display())]
    Unreachable {
        field: &'static str,
        path: PathBuf,
        above: PathBuf,
        uid: u32,
        gid: u32,
    },
    #[error("cwd {cwd:?} does not exist in the workspace (a fresh workspace is empty)")]
    CwdInFreshWorkspace { cwd: String },
    #[error("cwd {cwd:?} does not exist in the workspace")]
    CwdMissing { cwd: String },
    #[error("cwd {cwd:?} leaves the workspace or is not a folder")]
    CwdOutside { cwd: String },
    #[error("skill {id:?}: cannot open its folder {}: {source}", path.display())]
    OpenSkill {
        id: String,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the job names session {session:?}, whose skills were not resolved by the front end; run it with skill-runner run or through the daemon")]
    UnresolvedSession { session: String },
    #[error(transparent)]
    Store(#[from] crate::package::store::StoreError),
    #[error(transparent)]
    Stage(#[from] crate::package::verify::StageError),
    #[error(transparent)]
    Argv(#[from] crate::sandbox::paths::AliasError),
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Seccomp(#[from] crate::sandbox::seccomp::SeccompError),
    #[error(transparent)]
    Seatbelt(#[from] crate::sandbox::macos::MacosError),
    #[error("Seatbelt needs {what} folder")]
    SeatbeltFolder { what: &'static str },
    #[error("the execution has no folder of its own")]
    NoExecutionFolder,
    #[error("cannot create the execution folder: {source}")]
    CreateExecutionFolder { source: io::Error },
    #[error("cannot prepare the execution's network folder: {source}")]
    PrepareNetwork { source: io::Error },
    #[error("cannot prepare the sandbox's descriptors: {source}")]
    PrepareDescriptors { source: io::Error },
    #[error("{field} {} changed since it was checked or cannot be opened without following a symlink ({source}); name a folder no running command can rename", path.display())]
    OpenFolder {
        field: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The job's environment is unknown, changed, unverifiable, or built
    /// for an interpreter this host no longer has.
    #[error("the job's {source}")]
    UseEnvironment {
        #[source]
        source: crate::package::environment::resolve::ResolveError,
    },
    #[error("skill {skill:?} declares environment {{id {}, hash {}}} and skill {other:?} declares {{id {}, hash {}}}; select skills that declare the same environment, or none", first.id, first.hash, second.id, second.hash)]
    EnvironmentsDiffer {
        skill: String,
        first: Box<crate::package::environment::EnvRef>,
        other: String,
        second: Box<crate::package::environment::EnvRef>,
    },
    #[error("the job names environment {{id {}, hash {}}} but skill {skill:?} declares {{id {}, hash {}}}; name the one the skill declares, or leave environment out", job.id, job.hash, declared.id, declared.hash)]
    EnvironmentNotDeclared {
        job: Box<crate::package::environment::EnvRef>,
        skill: String,
        declared: Box<crate::package::environment::EnvRef>,
    },
    #[error("skill {skill:?}: {source}")]
    DeclaredEnvironment {
        skill: String,
        source: crate::package::environment::declare::DeclareError,
    },
    #[error("skill {skill:?}: cannot read its SKILL.md in the snapshot root {}: {reason}", path.display())]
    ReadDeclaration {
        skill: String,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot open the environment's tree {}: {source}; run skill-runner env verify on it", path.display())]
    OpenEnvironment { path: PathBuf, source: io::Error },
    #[error("this runner cannot open its environment store: {source}")]
    OpenEnvironments {
        #[source]
        source: crate::package::environment::store::EnvError,
    },
    #[error("cannot open the prepared /etc {}: {source}", path.display())]
    OpenEtc { path: PathBuf, source: io::Error },
    #[error("cannot hand over {}: {source}", path.display())]
    HandOver { path: PathBuf, source: io::Error },
    #[error("cannot create the execution's cgroup: {source}")]
    CreateCgroup { source: io::Error },
    #[error("cannot open the execution's cgroup: {source}")]
    OpenCgroup { source: io::Error },
    /// A limit that cannot be enforced here.
    #[error(transparent)]
    Limits(#[from] crate::exec::limits::LimitError),
    #[error("cannot make the execution's cancel switch: {source}")]
    CancelSwitch { source: io::Error },
    #[error("cannot start the network proxy: {source}")]
    StartProxy { source: io::Error },
    #[error("cannot start {}: {source}", program.display())]
    Start { program: PathBuf, source: io::Error },
    #[error(transparent)]
    Files(#[from] crate::exec::files::FilesError),
}

fn under_jobs(place: Place, jobs: &Path) -> String {
    match place {
        Place::Inside => format!(" (or under {})", jobs.display()),
        Place::Above => String::new(),
    }
}

impl ExecError {
    /// The error kind of the refusal (docs/formats.md, "Error kinds").
    pub fn kind(&self) -> ErrorKind {
        use ExecError::*;
        match self {
            Store(e) => e.kind(),
            Stage(e) => e.kind(),
            Limits(_) => ErrorKind::SandboxUnavailable,
            Files(e) => e.kind(),
            UseEnvironment { source } => source.kind(),
            OpenEnvironment { .. } => ErrorKind::HashMismatch,
            OpenEnvironments { source } => source.kind(),
            EnvironmentsDiffer { .. } | EnvironmentNotDeclared { .. } => ErrorKind::BadJob,
            DeclaredEnvironment { .. } => ErrorKind::BadPackage,
            ReadDeclaration { .. } => ErrorKind::StagingFailed,
            ResolveFolder { .. }
            | NotAFolder { .. }
            | Changed { .. }
            | RunnerState { .. }
            | ReceiptKey { .. }
            | UseFolder { .. }
            | DefaultExtensions { .. }
            | NotWritable { .. }
            | CwdInFreshWorkspace { .. }
            | CwdMissing { .. }
            | CwdOutside { .. }
            | OpenSkill { .. }
            | UnresolvedSession { .. }
            | Argv(_)
            | OpenFolder { .. } => ErrorKind::BadJob,
            CreateExecutionFolder { .. } => ErrorKind::StagingFailed,
            Host(_)
            | Identity(_)
            | FindSandboxExec
            | FindBwrap
            | Unreachable { .. }
            | Seatbelt(_)
            | SeatbeltFolder { .. }
            | NoExecutionFolder
            | PrepareNetwork { .. }
            | PrepareDescriptors { .. }
            | OpenEtc { .. }
            | HandOver { .. }
            | CreateCgroup { .. }
            | OpenCgroup { .. }
            | CancelSwitch { .. }
            | StartProxy { .. }
            | Start { .. } => ErrorKind::SandboxUnavailable,
            #[cfg(target_os = "linux")]
            Seccomp(_) => ErrorKind::SandboxUnavailable,
        }
    }

    /// The wire document of the refusal: the edge, where the typed error
    /// becomes the result's `error`.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo::new(self.kind(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_kind_and_sentence_on_the_wire() {
        let e = ExecError::RunnerState {
            field: "workspace",
            path: "/data/store".into(),
            place: Place::Inside,
            data: "/data".into(),
            jobs: "/data/roots".into(),
        };
        let info = e.info();
        assert_eq!(info.kind, ErrorKind::BadJob);
        assert_eq!(
            info.message,
            "workspace /data/store is inside the runner's data dir /data, which holds the store and published snapshot roots; name a folder outside it (or under /data/roots)"
        );
        let e = ExecError::CreateExecutionFolder {
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert_eq!(e.kind(), ErrorKind::StagingFailed);
        assert!(e
            .to_string()
            .starts_with("cannot create the execution folder: "));
    }
}
