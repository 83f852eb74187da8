//! bubblewrap: the plan of [`crate::exec::plan::bwrap`], its files in
//! sealed memfds and its host folders opened at launch, so that what bwrap
//! mounts is what was checked, whatever happens to the paths meanwhile.
//!
//! With `--keep` (debugging), the bytes of every memfd handed over are
//! also written to `<execution folder>/fds/`, under the names
//! `explain --fds-dir` uses, read back from the memfds themselves: what
//! the launch loaded, to compare with an explanation.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::datadir::DataDir;
use crate::exec::error::ExecError;
use crate::exec::folders::{etc_extra, reachable_by};
use crate::exec::job::Job;
use crate::exec::launch::{Launcher, Prepared};
use crate::exec::plan::{self, Content, EnvMount, Folders, Plan, Sandbox};
use crate::package::environment::EnvRef;
use crate::package::format::PackageLimits;
use crate::package::published::{Lease, Roots};
use crate::package::stage::Selected;
use crate::package::store::PrivateDir;
use crate::sandbox::fds::{self, FD_ENVIRONMENT, FD_ETC, FD_NET};
use crate::sandbox::host::{Bwrap, Host};
use crate::sandbox::identity::Identity;
use crate::sandbox::profile;

/// The sandbox this build launches, as named in results.
pub const SANDBOX: &str = "bubblewrap";

/// Only some executions need a folder of their own (a network
/// allowlist's socket folder, `--keep`).
pub const NEEDS_FOLDER: bool = false;

/// Checks that this host can start bubblewrap.
pub fn available(host: &Host) -> Result<Option<Bwrap>, ExecError> {
    let bwrap = host.bwrap.clone()?;
    host.userns.clone()?;
    Ok(Some(bwrap))
}

/// bubblewrap binds an environment read-only at `/opt/skill-env`.
pub fn environments_supported(_env: &EnvRef) -> Result<(), ExecError> {
    Ok(())
}

/// The published snapshot root of the selection, shared: a read-only
/// mount protects it.
pub fn lease(
    roots: &Roots,
    selected: &[Selected],
    _dir: Option<&PrivateDir>,
    limits: &PackageLimits,
) -> Result<Lease, ExecError> {
    Ok(roots.acquire(selected, limits)?)
}

/// A fresh workspace is a tmpfs made by bwrap (bounded by disk_bytes,
/// never on the host disk).
pub fn fresh_workspace(_dir: Option<&PrivateDir>) -> Result<Option<PathBuf>, ExecError> {
    Ok(None)
}

/// The prepared `/etc` for these mounts ([`crate::sandbox::etcview`]),
/// or `None`, and the pieces are bound one by one as before, when the
/// profile's `/etc` cannot be one folder or the copy cannot be made
/// (said in the log: it costs time, not isolation).
pub fn etc_view(data: &DataDir, mounts: &[profile::Mount], identity: &Identity) -> Option<PathBuf> {
    let pieces = crate::sandbox::etcview::pieces(mounts)?;
    let root = data.system_views();
    let etc = match crate::sandbox::etcview::prepare(&root, &pieces, &etc_extra()) {
        Ok(etc) => etc,
        Err(e) => {
            tracing::warn!(
                "binding the profile's /etc pieces one by one: cannot prepare a copy of them: {e}"
            );
            return None;
        }
    };
    if let Some((uid, gid)) = identity.switch_to() {
        if let Err(e) = reachable_by("the prepared /etc", &etc, uid, gid) {
            tracing::warn!("binding the profile's /etc pieces one by one: {e}");
            return None;
        }
    }
    Some(etc)
}

/// The plan of a prepared execution, and its descriptors: the files in
/// sealed memfds, the host folders opened now.
pub fn launcher(job: &Job, p: &Prepared, nproc: Option<u64>) -> Result<Launcher, ExecError> {
    let bwrap = p.bwrap.as_ref().ok_or(ExecError::FindBwrap)?;
    let folders = folders(p);
    let plan = plan::bwrap(
        job,
        Sandbox {
            program: &bwrap.path,
            features: bwrap.features,
            mounts: &p.mounts,
            folders: &folders,
            identity: &p.identity,
            nproc,
        },
    )?;
    let kept = p
        .dir
        .as_ref()
        .filter(|d| d.keep)
        .map(|d| d.path.join("fds"));
    let mut fds =
        files(&plan, kept.as_deref()).map_err(|source| ExecError::PrepareDescriptors { source })?;
    // bwrap resolves what it binds by path, as the sandbox user.
    if let Some((uid, gid)) = p.identity.switch_to() {
        for (fd, path) in &plan.folders {
            if *fd != FD_ETC {
                reachable_by(field(*fd), path, uid, gid)?;
            }
        }
    }
    for (fd, path) in &plan.folders {
        fds.push((open_folder(*fd, path, p)?, *fd));
    }
    Ok(Launcher { plan, fds })
}

/// The daemon's template mount namespace for this launch, when it holds
/// every path the plan binds ([`crate::sandbox::template`]); `None`: the
/// runner's own.
#[cfg(target_os = "linux")]
pub fn mount_ns(
    p: &Prepared,
    plan: &Plan,
    fds: &[(OwnedFd, i32)],
) -> Option<std::sync::Arc<OwnedFd>> {
    use crate::sandbox::template::{for_launch, Needs};
    let mut needs = Needs::default();
    for ((_, path), object) in plan.folders.iter().zip(folder_objects(plan, fds)) {
        needs.folders.push((path.as_path(), object?));
    }
    needs.sources.push(plan.program.as_path());
    needs.sources.extend(bound_sources(p));
    for_launch(&needs).map(|t| t.ns())
}

/// What bubblewrap will bind for each folder of the plan, in its order:
/// the device and inode of the object on its descriptor (`None` where
/// there is none, or it cannot be read).
pub fn folder_objects(plan: &Plan, fds: &[(OwnedFd, i32)]) -> Vec<Option<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let object = |n: &i32| {
        let (fd, _) = fds.iter().find(|(_, target)| target == n)?;
        let m = fs::File::from(fd.try_clone().ok()?).metadata().ok()?;
        Some((m.dev(), m.ino()))
    };
    plan.folders.iter().map(|(n, _)| object(n)).collect()
}

/// The profile's sources bubblewrap binds by path (those the prepared
/// `/etc` holds are not bound).
pub fn bound_sources(p: &Prepared) -> impl Iterator<Item = &Path> {
    p.mounts
        .iter()
        .filter(|m| !(p.etc.is_some() && crate::sandbox::etcview::folded(m)))
        .filter_map(|m| match m {
            profile::Mount::RoBind { src, .. } | profile::Mount::RoBindTry { src, .. } => {
                Some(src.as_path())
            }
            profile::Mount::Symlink { .. } => None,
        })
}

#[cfg(not(target_os = "linux"))]
pub fn mount_ns(
    _p: &Prepared,
    _plan: &Plan,
    _fds: &[(OwnedFd, i32)],
) -> Option<std::sync::Arc<OwnedFd>> {
    None
}

/// The host folders of a prepared execution, as its plan binds them.
pub fn folders(p: &Prepared) -> Folders {
    Folders {
        skills: p.lease.snapshot.root.clone(),
        workspace: p.workspace.clone(),
        extensions: p.extensions.clone(),
        net: p
            .net
            .as_ref()
            .and_then(|n| n.dir.as_ref())
            .map(|(path, _)| path.clone()),
        etc: p.etc.clone(),
        environment: p
            .environment
            .as_ref()
            .map(|e| EnvMount::of(&e.record, e.host_tree().clone())),
    }
}

/// What the checks and refusals call the folder on `fd`.
fn field(fd: i32) -> &'static str {
    match fd {
        fds::FD_SKILLS => "the snapshot root",
        fds::FD_WORKSPACE => "workspace",
        fds::FD_EXTENSIONS => "extensions_dir",
        FD_NET => "the execution's network folder",
        FD_ENVIRONMENT => "the environment's tree",
        _ => "the prepared /etc",
    }
}

/// The folder on `fd`, opened without following a symlink; the network
/// folder is the one the endpoint holds open already.
fn open_folder(fd: i32, path: &Path, p: &Prepared) -> Result<OwnedFd, ExecError> {
    match fd {
        FD_NET => {
            let held = p.net.as_ref().and_then(|n| n.dir.as_ref());
            let dir = held.map(|(_, dir)| dir.try_clone()).transpose();
            dir.and_then(|d| d.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
                .map(OwnedFd::from)
                .map_err(|source| ExecError::HandOver {
                    path: path.to_owned(),
                    source,
                })
        }
        FD_ENVIRONMENT => crate::fsx::open_dir_no_symlinks(path)
            .map(OwnedFd::from)
            .map_err(|source| ExecError::OpenEnvironment {
                path: path.to_owned(),
                source,
            }),
        FD_ETC => crate::fsx::open_dir_no_symlinks(path)
            .map(OwnedFd::from)
            .map_err(|source| ExecError::OpenEtc {
                path: path.to_owned(),
                source,
            }),
        _ => crate::fsx::open_dir_no_symlinks(path)
            .map(OwnedFd::from)
            .map_err(|source| ExecError::OpenFolder {
                field: field(fd),
                path: path.to_owned(),
                source,
            }),
    }
}

/// The plan's files, each in its own sealed memfd (nothing shared); with
/// `kept`, their bytes as read back from the memfds are also written
/// there.
fn files(plan: &Plan, kept: Option<&Path>) -> io::Result<Vec<(OwnedFd, i32)>> {
    let mut fds = Vec::with_capacity(plan.files.len() + plan.folders.len());
    for (fd, content) in &plan.files {
        let owned = match content {
            Content::Bytes(bytes) => {
                let name = fds::file_name(*fd);
                let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
                let memfd = crate::supervise::sys::sealed_memfd(&name, bytes)?;
                if let Some(dir) = kept {
                    keep_copy(dir, *fd, &memfd)?;
                }
                memfd
            }
            Content::Shim(kind) => crate::sandbox::shim::executable(*kind)?,
        };
        fds.push((owned, *fd));
    }
    Ok(fds)
}

/// Writes the bytes of `memfd` as `dir/<its --fds-dir name>`.
fn keep_copy(dir: &Path, fd: i32, memfd: &OwnedFd) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = fs::File::from(memfd.try_clone()?);
    let len = file.metadata()?.len();
    let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
    file.read_exact_at(&mut bytes, 0)?;
    fs::create_dir_all(dir)?;
    fs::write(dir.join(fds::file_name(fd)), bytes)
}
