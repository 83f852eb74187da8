//! What runs beside an execution's sandbox while the supervisor waits for
//! it: the disk watcher of the host folders it writes (with the cancel
//! switch it ends the run through) and the network proxy of a job with an
//! allowlist.

use std::path::PathBuf;
use std::sync::Arc;

use crate::exec::error::ExecError;
use crate::exec::job::Job;
use crate::exec::launch::Prepared;
use crate::exec::limits::Disk;
use crate::supervise::diskwatch::DiskWatch;
use crate::supervise::Cancel;

/// How `disk_bytes` is enforced: any host folder the command writes is
/// watched; only a fresh workspace holding its own extensions dir is a
/// tmpfs alone.
pub fn disk_of(p: &Prepared) -> Disk {
    if p.workspace.is_some() || p.extensions.is_some() {
        Disk::Watcher
    } else {
        Disk::Tmpfs
    }
}

/// The cancel switch of the execution (the caller's, or one of its own
/// for the disk watcher), and the watcher of a host workspace: past
/// `disk_bytes` the run is ended. A managed session workspace counts
/// whole (what earlier jobs and uploads left too), any other folder from
/// what it held when the command started.
pub fn disk(
    cancel: Option<&Arc<Cancel>>,
    disk: Disk,
    p: &Prepared,
    job: &Job,
) -> Result<(Option<Arc<Cancel>>, Option<DiskWatch>), ExecError> {
    let disk_bytes = job.limits.disk_bytes;
    let cancel = match (cancel, disk) {
        (Some(c), _) => Some(c.clone()),
        (None, Disk::Watcher) => {
            Some(Cancel::new().map_err(|source| ExecError::CancelSwitch { source })?)
        }
        (None, Disk::Tmpfs) => None,
    };
    let watch = match (disk, &cancel) {
        (Disk::Watcher, Some(cancel)) => {
            let mut dirs: Vec<PathBuf> = p.workspace.iter().cloned().collect();
            if let Some(e) = &p.extensions {
                if !dirs.iter().any(|w| e.starts_with(w)) {
                    dirs.push(e.clone());
                }
            }
            Some(match job.managed_workspace {
                true => DiskWatch::start_whole(dirs, disk_bytes, cancel.clone()),
                false => DiskWatch::start(dirs, disk_bytes, cancel.clone()),
            })
        }
        _ => None,
    };
    Ok((cancel, watch))
}

/// The proxy of a job with an allowlist, serving this execution's
/// endpoint with this execution's policy alone.
pub fn proxy(
    job: &Job,
    p: &mut Prepared,
    runner: &crate::sandbox::net::RunnerNetwork,
) -> Result<Option<crate::sandbox::net::proxy::Session>, ExecError> {
    let (Some(net), Some(allow)) = (p.net.as_mut(), job.network.allowlist()) else {
        return Ok(None);
    };
    let policy = crate::sandbox::net::Policy {
        job: allow.clone(),
        runner: runner.clone(),
    };
    let session = net
        .start(policy, &job.execution_id)
        .map_err(|source| ExecError::StartProxy { source })?;
    Ok(Some(session))
}
