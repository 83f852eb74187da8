//! The host folders of an execution: the ones a job names (`workspace`,
//! `extensions_dir`, a skill's `path`), resolved and checked; the default
//! extensions dir the runner makes in a workspace; and whether the sandbox
//! user can reach and write them.
//!
//! Invariants:
//! - the runner creates only the folders it chooses itself (a fresh
//!   workspace, the default extensions dir), never a path from the job,
//!   where a typo would otherwise become a new folder anywhere the
//!   runner's user may write;
//! - no job folder is inside the runner's state or above it
//!   ([`Runner::not_state`](crate::exec::Runner)); only `<data>/roots` is for jobs;
//! - a confined path resolves to itself, else a folder on the way was
//!   swapped after it was checked.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::datadir::DataDir;
use crate::exec::error::{ExecError, Place, Unresolved};
use crate::sandbox::paths::DEFAULT_EXTENSIONS;

/// What the runner adds to a prepared `/etc`: the account files.
pub fn etc_extra() -> [crate::sandbox::etcview::Extra<'static>; 2] {
    use crate::sandbox::bwrap::{GROUP, PASSWD};
    [("passwd", PASSWD.as_bytes()), ("group", GROUP.as_bytes())]
}

/// Whether a job's paths were confined to roots (and must resolve to
/// themselves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confined {
    Yes,
    No,
}

impl From<bool> for Confined {
    fn from(confined: bool) -> Confined {
        if confined {
            Confined::Yes
        } else {
            Confined::No
        }
    }
}

/// A host folder the job names, and what the job gets without it.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub field: &'static str,
    pub path: &'a Path,
    /// What the job gets without it ("a fresh empty one").
    pub default: &'static str,
}

/// A host folder the job names, resolved. It must exist and be a folder.
pub fn named_folder(named: Named<'_>, confined: Confined) -> Result<PathBuf, ExecError> {
    let Named {
        field,
        path,
        default,
    } = named;
    let real = path.canonicalize().map_err(|e| ExecError::ResolveFolder {
        field,
        path: path.to_owned(),
        why: if e.kind() == io::ErrorKind::NotFound {
            Unresolved::Missing
        } else {
            Unresolved::Unusable(e)
        },
        default,
    })?;
    if confined == Confined::Yes && real != path {
        return Err(changed(field, path));
    }
    if !real.is_dir() {
        return Err(ExecError::NotAFolder {
            field,
            path: path.to_owned(),
        });
    }
    Ok(real)
}

/// A confined path that no longer resolves to itself: a folder on the way
/// was swapped (for a symlink) after the check.
pub fn changed(field: &'static str, path: &Path) -> ExecError {
    ExecError::Changed {
        field,
        path: path.to_owned(),
    }
}

/// Refuses a job folder (canonical) inside the runner's state (the
/// canonical data dir `data`, but its job root) or above it.
/// The data dir is checked under each of its names ([`DataDir::state_at`]).
pub fn not_state(data: &DataDir, field: &'static str, real: &Path) -> Result<(), ExecError> {
    match data.state_at(real) {
        Some((place, inside)) => Err(ExecError::RunnerState {
            field,
            path: real.to_owned(),
            place: if inside { Place::Inside } else { Place::Above },
            data: place.to_owned(),
            jobs: data.job_root(),
        }),
        None => Ok(()),
    }
}

/// A managed session workspace (a folder right below the data dir's
/// `workspaces/`) is the one folder of the runner's state a job may run
/// in; anything else there is refused as the runner's state.
pub fn managed_workspace(data: &DataDir, real: &Path) -> Result<(), ExecError> {
    if real.parent() == Some(data.workspaces().as_path()) {
        return Ok(());
    }
    not_state(data, "workspace", real)
}

/// Refuses a job folder (canonical) that holds the receipt key (`key`,
/// canonical too): what is below a workspace, extensions dir, profile
/// mount or skill path reaches the sandbox.
pub fn not_key(field: &'static str, real: &Path, key: &Path) -> Result<(), ExecError> {
    if key.starts_with(real) {
        return Err(ExecError::ReceiptKey {
            field,
            path: real.to_owned(),
        });
    }
    Ok(())
}

/// The cwd must be a folder inside the workspace after resolving
/// symlinks: a symlink in the workspace must not lead it elsewhere.
pub fn check_cwd(cwd: &str, workspace: Option<&Path>) -> Result<(), ExecError> {
    if cwd.is_empty() {
        return Ok(());
    }
    let Some(workspace) = workspace else {
        return Err(ExecError::CwdInFreshWorkspace {
            cwd: cwd.to_owned(),
        });
    };
    let real = workspace
        .join(cwd)
        .canonicalize()
        .map_err(|_| ExecError::CwdMissing {
            cwd: cwd.to_owned(),
        })?;
    if !real.starts_with(workspace) || !real.is_dir() {
        return Err(ExecError::CwdOutside {
            cwd: cwd.to_owned(),
        });
    }
    Ok(())
}

/// `<workspace>/.sciencediscovery/skill-extensions`, made one component at
/// a time relative to the open parent (`mkdirat`, then `openat` with
/// `O_NOFOLLOW`), so a component swapped for a symlink meanwhile is refused
/// rather than followed; what the runner makes is given to `owner` (the
/// sandbox user) through its descriptor.
pub fn default_extensions_dir(
    workspace: &Path,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, ExecError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    use std::os::fd::AsFd;
    let mut parent = crate::fsx::open_dir_no_symlinks(workspace)
        .map_err(|e| unusable("workspace", workspace, e))?;
    let mut path = workspace.to_owned();
    for part in DEFAULT_EXTENSIONS.split('/') {
        path.push(part);
        let made = match mkdirat(parent.as_fd(), part, Mode::from_bits_truncate(0o755)) {
            Ok(()) => true,
            Err(nix::errno::Errno::EEXIST) => false,
            Err(e) => return Err(unusable("extensions_dir", &path, e.into())),
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir = match openat(parent.as_fd(), part, flags, Mode::empty()) {
            Ok(fd) => fs::File::from(fd),
            Err(nix::errno::Errno::ELOOP) | Err(nix::errno::Errno::ENOTDIR) => {
                return Err(ExecError::DefaultExtensions { path })
            }
            Err(e) => return Err(unusable("extensions_dir", &path, e.into())),
        };
        if let (true, Some((uid, gid))) = (made, owner) {
            nix::unistd::fchown(
                dir.as_fd(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(|e| unusable("extensions_dir", &path, e.into()))?;
        }
        parent = dir;
    }
    Ok(path)
}

/// Refuses a folder the sandbox user cannot reach: bubblewrap, started as
/// that user, resolves what it binds by path, so every folder above must
/// let it pass.
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub fn reachable_by(field: &'static str, dir: &Path, uid: u32, gid: u32) -> Result<(), ExecError> {
    use std::os::unix::fs::MetadataExt;
    for above in dir.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(above) else {
            continue;
        };
        if !crate::sandbox::identity::may_search(uid, gid, meta.uid(), meta.gid(), meta.mode()) {
            return Err(ExecError::Unreachable {
                field,
                path: dir.to_owned(),
                above: above.to_owned(),
                uid,
                gid,
            });
        }
    }
    Ok(())
}

/// Refuses a named folder the sandbox user could not write, naming the
/// user and the fix (a root runner launches as that user).
pub fn writable_by(field: &'static str, dir: &Path, uid: u32, gid: u32) -> Result<(), ExecError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).map_err(|e| unusable(field, dir, e))?;
    if crate::sandbox::identity::may_write(uid, gid, meta.uid(), meta.gid(), meta.mode()) {
        return Ok(());
    }
    Err(ExecError::NotWritable {
        field,
        path: dir.to_owned(),
        uid,
        gid,
    })
}

/// A folder that exists but cannot be used.
pub fn unusable(field: &'static str, path: &Path, source: io::Error) -> ExecError {
    ExecError::UseFolder {
        field,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_folder_in_the_runners_state_is_refused_but_its_job_root() {
        let data = &DataDir::unchecked(Path::new("/data"));
        assert!(not_state(data, "workspace", Path::new("/data/store/x")).is_err());
        assert!(not_state(data, "workspace", Path::new("/")).is_err());
        assert!(not_state(data, "workspace", Path::new("/data/roots/a")).is_ok());
        assert!(not_state(data, "workspace", Path::new("/elsewhere")).is_ok());
    }

    #[test]
    fn the_default_extensions_dir_is_made_below_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let made = default_extensions_dir(ws.path(), None).unwrap();
        assert_eq!(made, ws.path().join(DEFAULT_EXTENSIONS));
        assert!(made.is_dir());
        // A symlink planted in its place is refused, not followed.
        let other = tempfile::tempdir().unwrap();
        fs::remove_dir(&made).unwrap();
        std::os::unix::fs::symlink(other.path(), &made).unwrap();
        let e = default_extensions_dir(ws.path(), None).unwrap_err();
        assert!(matches!(e, ExecError::DefaultExtensions { .. }), "{e}");
    }

    #[test]
    fn a_cwd_must_stay_in_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        fs::create_dir(ws.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", ws.path().join("out")).unwrap();
        assert!(check_cwd("", None).is_ok());
        assert!(check_cwd("sub", Some(ws.path())).is_ok());
        assert!(matches!(
            check_cwd("out", Some(ws.path())),
            Err(ExecError::CwdOutside { .. })
        ));
        assert!(matches!(
            check_cwd("none", Some(ws.path())),
            Err(ExecError::CwdMissing { .. })
        ));
        assert!(matches!(
            check_cwd("sub", None),
            Err(ExecError::CwdInFreshWorkspace { .. })
        ));
    }
}
