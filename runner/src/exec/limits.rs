//! The limit policy of an execution: which mechanism enforces each limit
//! of the job on this host (a cgroup, an rlimit set on bubblewrap, the
//! exec shim's `RLIMIT_NPROC`, a sized tmpfs, the disk watcher), and a
//! refusal when one cannot be enforced: a limit is never dropped. The
//! choice is reported in the result (`limits`, docs/formats.md).

use crate::exec::result::{Applied, AppliedLimits, Mechanism};
use crate::sandbox::identity::Identity;
use crate::supervise::cgroup::Cgroup;

/// The resource limits of an execution.
#[derive(Debug, Default)]
pub struct Rlimits {
    /// Set by the runner's spawn on bubblewrap (and so on everything in
    /// the sandbox).
    pub runner: Vec<(nix::sys::resource::Resource, u64, u64)>,
    /// `RLIMIT_NPROC`, set by the exec shim inside the sandbox's user
    /// namespace (see [`crate::sandbox::shim::NPROC_OPT`]).
    pub nproc: Option<u64>,
}

/// Whether this kernel counts `RLIMIT_NPROC` per user namespace (Linux
/// 5.14 and later), so that the shim's limit counts the execution's own
/// processes alone.
#[cfg(target_os = "linux")]
pub fn nproc_per_namespace() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    version >= (5, 14)
}

/// How `disk_bytes` is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disk {
    /// A fresh workspace: a tmpfs of that size (writes fail past it).
    Tmpfs,
    /// A host workspace: [`crate::supervise::diskwatch`] ends the run past it.
    Watcher,
}

/// A limit this host cannot hold as asked: the job is refused, never run
/// with the limit dropped. `no_cgroup` is why there is no cgroup, in
/// parentheses, or empty.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("strict limits are set, and {limit} would be held per process by an rlimit, not by a cgroup{no_cgroup}; give the runner a writable cgroup (cgroup v2 with Delegate=yes, or the memory and pids controllers) or run it without strict limits")]
    NotHeldStrictly {
        limit: &'static str,
        no_cgroup: String,
    },
    #[error("the pids limit cannot be enforced here: there is no pids cgroup{no_cgroup}, and RLIMIT_NPROC does not bind the sandbox's uid, which maps to host root; give the runner a writable cgroup (cgroup v2 with Delegate=yes, or the pids controller) or run it as root with user namespaces that map the sandbox user")]
    PidsUnenforceable { no_cgroup: String },
}

/// Under strict limits, memory and pids limits that no cgroup would hold
/// are refused rather than held per process by an rlimit.
fn refuse_unheld(
    cg: Option<&Cgroup>,
    no_cgroup: &dyn Fn(&str, &str) -> String,
) -> Result<(), LimitError> {
    #[cfg(target_os = "linux")]
    for (limit, held) in [
        ("memory_bytes", cg.is_some_and(Cgroup::limits_memory)),
        ("pids", cg.is_some_and(Cgroup::limits_pids)),
    ] {
        if !held {
            return Err(LimitError::NotHeldStrictly {
                limit,
                no_cgroup: no_cgroup(" (", ")"),
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (cg, no_cgroup); // macOS has no cgroups: its limits say `none`
    Ok(())
}

/// Chooses the mechanism for each limit, or refuses the execution when a
/// limit cannot be enforced on this host: a limit is never dropped. With
/// `strict` (`--strict-limits`, the daemon's `strict_limits`), memory and
/// pids limits that no cgroup would hold are refused too, rather than held
/// per process by an rlimit.
pub fn limits_plan(
    l: &crate::exec::job::Limits,
    cg: Option<&Cgroup>,
    cg_note: Option<String>,
    identity: &Identity,
    disk: Disk,
    strict: bool,
) -> Result<(Rlimits, AppliedLimits), LimitError> {
    use nix::sys::resource::Resource;
    let mut r = vec![
        (Resource::RLIMIT_CORE, 0, 0),
        (Resource::RLIMIT_FSIZE, l.file_size_bytes, l.file_size_bytes),
        (Resource::RLIMIT_NOFILE, l.open_files, l.open_files),
    ];
    let no_cgroup = |before: &str, after: &str| {
        cg_note
            .as_ref()
            .map(|n| format!("{before}{n}{after}"))
            .unwrap_or_default()
    };
    if strict {
        refuse_unheld(cg, &no_cgroup)?;
    }
    let memory = memory(l, cg, &mut r, &no_cgroup);
    let (pids, nproc) = pids(l, cg, identity, &no_cgroup)?;
    let cpu = cpu(l, &mut r);
    Ok((
        Rlimits { runner: r, nproc },
        AppliedLimits {
            timeout_ms: Applied::by(Some(l.timeout_ms), Mechanism::Supervisor),
            output_bytes: Applied::by(Some(l.output_bytes), Mechanism::Supervisor),
            memory_bytes: memory,
            pids,
            cpu_ms: cpu,
            file_size_bytes: Applied::by(Some(l.file_size_bytes), Mechanism::Rlimit),
            tmp_bytes: Applied::by(Some(l.tmp_bytes), Mechanism::Tmpfs),
            open_files: Applied::by(Some(l.open_files), Mechanism::Rlimit),
            disk_bytes: disk_bytes(l, disk),
        },
    ))
}

/// The rlimits of the runner's spawn, as `(resource, soft, hard)`.
type RunnerRlimits = Vec<(nix::sys::resource::Resource, u64, u64)>;

/// `memory_bytes`: the cgroup where it limits memory, else `RLIMIT_AS`
/// (pushed onto `r`), which macOS does not enforce.
fn memory(
    l: &crate::exec::job::Limits,
    cg: Option<&Cgroup>,
    r: &mut RunnerRlimits,
    no_cgroup: &dyn Fn(&str, &str) -> String,
) -> Applied {
    if let Some(cg) = cg.filter(|c| c.limits_memory()) {
        return Applied::by(Some(l.memory_bytes), Mechanism::cgroup(cg.version()));
    }
    if cfg!(target_os = "macos") {
        return Applied {
            value: Some(l.memory_bytes),
            enforced_by: Mechanism::None,
            note: Some("macOS has no cgroups and does not enforce RLIMIT_AS".into()),
        };
    }
    r.push((
        nix::sys::resource::Resource::RLIMIT_AS,
        l.memory_bytes,
        l.memory_bytes,
    ));
    Applied {
        value: Some(l.memory_bytes),
        enforced_by: Mechanism::Rlimit,
        note: Some(format!(
            "RLIMIT_AS per process (address space, not resident memory; memfd files and pipe buffers lie outside it, while /tmp, /dev/shm and a fresh workspace are bounded by their own sizes){}",
            no_cgroup("; no cgroup: ", "")
        )),
    }
}

/// `pids`: the cgroup where it limits pids, else the shim's
/// `RLIMIT_NPROC` (the second value), which the kernel does not apply to
/// host root: then the execution is refused.
fn pids(
    l: &crate::exec::job::Limits,
    cg: Option<&Cgroup>,
    identity: &Identity,
    no_cgroup: &dyn Fn(&str, &str) -> String,
) -> Result<(Applied, Option<u64>), LimitError> {
    if let Some(cg) = cg.filter(|c| c.limits_pids()) {
        return Ok((
            Applied::by(Some(l.pids), Mechanism::cgroup(cg.version())),
            None,
        ));
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (identity, no_cgroup); // only the Linux fallback asks
        Ok((
            Applied {
                value: Some(l.pids),
                enforced_by: Mechanism::None,
                note: Some(
                    "no cgroups on this OS; RLIMIT_NPROC would count every process of the user"
                        .into(),
                ),
            },
            None,
        ))
    }
    #[cfg(target_os = "linux")]
    {
        // The kernel exempts host root from RLIMIT_NPROC; any other uid
        // is bound by it.
        if identity.root_mapped {
            return Err(LimitError::PidsUnenforceable {
                no_cgroup: no_cgroup(" (", ")"),
            });
        }
        let counted = if nproc_per_namespace() {
            "this execution's processes and threads (the shim sets it inside the execution's own user namespace)".to_owned()
        } else {
            format!(
                "every process of host uid {} (concurrent executions together: this kernel is older than 5.14)",
                identity.uid
            )
        };
        Ok((
            Applied {
                value: Some(l.pids),
                enforced_by: Mechanism::Rlimit,
                note: Some(format!(
                    "RLIMIT_NPROC counts {counted}, and a refused fork is not reported as limit_exceeded{}",
                    no_cgroup("; no cgroup: ", "")
                )),
            },
            Some(l.pids),
        ))
    }
}

/// `disk_bytes`: a sized tmpfs for a fresh workspace, the watcher for a
/// host one.
fn disk_bytes(l: &crate::exec::job::Limits, disk: Disk) -> Applied {
    match disk {
        Disk::Tmpfs => Applied {
            value: Some(l.disk_bytes),
            enforced_by: Mechanism::Tmpfs,
            note: Some(
                "the fresh workspace is a tmpfs of this size (memory, charged to the memory limit where a cgroup enforces it); nothing reaches the host disk".into(),
            ),
        },
        Disk::Watcher => Applied {
            value: Some(l.disk_bytes),
            enforced_by: Mechanism::Watcher,
            note: Some(format!(
                "the runner measures the host workspace and extensions dir every {} ms or more, and once the command has ended, and ends the run past the limit (a best-effort bound: between two measurements a command may write more; a fresh workspace is a tmpfs of this size)",
                crate::supervise::diskwatch::MIN_INTERVAL.as_millis()
            )),
        },
    }
}

/// `cpu_ms`: `RLIMIT_CPU` (pushed onto `r`), in whole seconds.
fn cpu(l: &crate::exec::job::Limits, r: &mut RunnerRlimits) -> Applied {
    match l.cpu_ms {
        Some(ms) => {
            let secs = ms.div_ceil(1000);
            r.push((nix::sys::resource::Resource::RLIMIT_CPU, secs, secs + 1));
            Applied {
                value: Some(ms),
                enforced_by: Mechanism::Rlimit,
                note: Some(format!("RLIMIT_CPU per process, rounded up to {secs} s")),
            }
        }
        None => Applied::by(None, Mechanism::None),
    }
}
