//! The platform's launcher, behind one set of functions: `linux.rs`
//! (bubblewrap) or `macos.rs` (Seatbelt), chosen at build time. The runner
//! ([`crate::exec::runner`]) orchestrates an execution through these and
//! never names a platform itself; each platform makes its launch plan in
//! [`crate::exec::plan`], as `explain` does.
//!
//! What a platform provides: [`SANDBOX`] (the sandbox's name in results),
//! `NEEDS_FOLDER` (every execution needs a folder of its own), `available`
//! (the host can start the sandbox), `lease` (the snapshot root: shared on
//! Linux, where a read-only mount protects it, private under Seatbelt),
//! `fresh_workspace`, `environments_supported` (a job's environment can
//! be mounted), `etc_view` (the prepared `/etc`, Linux only) and
//! `launcher` (the plan and the descriptors it names, opened now); [`spawn`]
//! makes the supervisor's spawn of it.

use std::path::PathBuf;
use std::time::Duration;

use crate::package::published::Lease;
use crate::package::store::PrivateDir;
use crate::sandbox::host::Bwrap;
use crate::sandbox::identity::Identity;
use crate::sandbox::profile;

#[cfg(not(target_os = "macos"))]
mod linux;
#[cfg(not(target_os = "macos"))]
pub use linux::{
    available, bound_sources, environments_supported, etc_view, folder_objects, folders,
    fresh_workspace, launcher, lease, mount_ns, NEEDS_FOLDER, SANDBOX,
};

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::{
    available, environments_supported, etc_view, fresh_workspace, launcher, lease, mount_ns,
    NEEDS_FOLDER, SANDBOX,
};

/// An execution as prepared for its launch.
#[derive(Debug)]
pub struct Prepared {
    /// The execution's folder, where it needs one (see `Runner::prepare`).
    pub dir: Option<PrivateDir>,
    /// The published snapshot root, locked for this execution.
    pub lease: Lease,
    /// Time spent finding, or staging and publishing, the snapshot root.
    pub staging: Duration,
    /// The host workspace; `None`: a fresh tmpfs (Linux).
    pub workspace: Option<PathBuf>,
    /// The host extensions dir; `None`: inside the fresh workspace.
    pub extensions: Option<PathBuf>,
    pub identity: Identity,
    /// The bwrap to use (Linux); `None` under Seatbelt.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    pub bwrap: Option<Bwrap>,
    /// Where the command reaches the proxy (a job with an allowlist).
    pub net: Option<crate::sandbox::net::Endpoint>,
    /// The profile's mounts as resolved on the host, checked in `prepare`.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    pub mounts: Vec<profile::Mount>,
    /// The prepared `/etc` (Linux), when the profile's `/etc` can be one.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    pub etc: Option<PathBuf>,
    /// The job's environment, leased (kept from `gc`) and checked for
    /// as long as the execution lasts.
    pub environment: Option<crate::package::environment::resolve::Ready>,
}

/// A launch plan, and the descriptors it names, opened.
#[derive(Debug)]
pub struct Launcher {
    pub plan: crate::exec::plan::Plan,
    pub fds: Vec<(std::os::fd::OwnedFd, i32)>,
}

/// The spawn of a launcher: its plan and descriptors, the limits the
/// runner sets on it, the cgroup it joins, the job's stdin and the host
/// identity it starts as.
pub fn spawn(
    job: &crate::exec::job::Job,
    p: &Prepared,
    launcher: Launcher,
    rlimits: Vec<(nix::sys::resource::Resource, u64, u64)>,
    cgroup_procs: Vec<std::fs::File>,
) -> crate::supervise::Spawn {
    let Launcher { plan, fds } = launcher;
    let mount_ns = mount_ns(p, &plan, &fds);
    crate::supervise::Spawn {
        program: plan.program,
        args: plan.args,
        env: plan.env,
        fds,
        rlimits,
        cgroup_procs,
        stdin: job.stdin.clone(),
        report_fd: plan.report_fd,
        stderr_fd: plan.stderr_fd,
        new_session: plan.new_session,
        identity: p.identity.switch_to(),
        mount_ns,
    }
}
