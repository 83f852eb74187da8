//! Seatbelt: `/usr/bin/sandbox-exec` with the profile of
//! [`crate::exec::plan::seatbelt`]. No descriptors are handed over; every
//! execution has a folder of its own, holding its private snapshot root,
//! its fresh workspace and its `/tmp`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::datadir::DataDir;
use crate::exec::error::ExecError;
use crate::exec::folders::unusable;
use crate::exec::job::Job;
use crate::exec::launch::{Launcher, Prepared};
use crate::package::format::PackageLimits;
use crate::package::published::{Lease, Roots};
use crate::package::stage::Selected;
use crate::package::store::PrivateDir;
use crate::sandbox::host::{Bwrap, Host};
use crate::sandbox::identity::Identity;
use crate::sandbox::profile;

/// The sandbox this build launches, as named in results.
pub const SANDBOX: &str = "seatbelt";

/// Every execution needs a folder of its own (Seatbelt's folders).
pub const NEEDS_FOLDER: bool = true;

/// Checks that this host can start Seatbelt.
pub fn available(_host: &Host) -> Result<Option<Bwrap>, ExecError> {
    if Path::new(seatbelt::SANDBOX_EXEC).exists() {
        Ok(None)
    } else {
        Err(ExecError::FindSandboxExec)
    }
}

/// The execution's folder, which every execution here has.
fn execution_folder(dir: Option<&PrivateDir>) -> Result<&Path, ExecError> {
    dir.map(|d| d.path.as_path())
        .ok_or(ExecError::NoExecutionFolder)
}

/// The snapshot root, staged private to the execution: no mount protects
/// a shared one.
pub fn lease(
    _roots: &Roots,
    selected: &[Selected],
    dir: Option<&PrivateDir>,
    limits: &PackageLimits,
) -> Result<Lease, ExecError> {
    let root = execution_folder(dir)?.join("skills");
    Ok(crate::package::published::stage_private(
        selected, &root, limits,
    )?)
}

/// Seatbelt needs a folder for a fresh workspace.
pub fn fresh_workspace(dir: Option<&PrivateDir>) -> Result<Option<PathBuf>, ExecError> {
    let w = execution_folder(dir)?.join("workspace");
    fs::create_dir(&w).map_err(|e| unusable("workspace", &w, e))?;
    Ok(Some(w))
}

/// Seatbelt has no mount namespace: an environment's sealed tree is a
/// read-only parameter of the profile, at its host path
/// ([`crate::exec::plan::seatbelt_environment`]).
pub fn environments_supported(_env: &crate::package::environment::EnvRef) -> Result<(), ExecError> {
    Ok(())
}

/// No prepared `/etc` under Seatbelt.
pub fn etc_view(
    _data: &DataDir,
    _mounts: &[profile::Mount],
    _identity: &Identity,
) -> Option<PathBuf> {
    None
}

/// The Seatbelt plan of a prepared execution.
pub fn launcher(job: &Job, p: &Prepared, nproc: Option<u64>) -> Result<Launcher, ExecError> {
    debug_assert!(nproc.is_none(), "macOS applies no pids rlimit");
    let tmp = execution_folder(p.dir.as_ref())?.join("tmp");
    fs::create_dir_all(&tmp).map_err(|e| unusable("tmp", &tmp, e))?;
    let folders = crate::sandbox::macos::Folders {
        snapshot_root: p.lease.snapshot.root.clone(),
        // Always folders under Seatbelt (prepare makes a fresh one).
        workspace: p.workspace.clone().ok_or(ExecError::SeatbeltFolder {
            what: "a workspace",
        })?,
        extensions: p.extensions.clone().ok_or(ExecError::SeatbeltFolder {
            what: "an extensions",
        })?,
        tmp,
        proxy_port: p.net.as_ref().and_then(|n| n.port),
        environment: p.environment.as_ref().map(|ready| {
            crate::exec::plan::seatbelt_environment(&ready.record, ready.host_tree().clone())
        }),
    };
    let plan = crate::exec::plan::seatbelt_launch(job, &folders)?;
    Ok(Launcher {
        plan,
        fds: Vec::new(),
    })
}

/// Seatbelt has no mount namespace: a command starts in the runner's view.
pub fn mount_ns(
    _p: &Prepared,
    _plan: &crate::exec::plan::Plan,
    _fds: &[(std::os::fd::OwnedFd, i32)],
) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
    None
}
