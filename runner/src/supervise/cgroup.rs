//! Per-execution control groups: memory and process limits that hold for
//! the whole sandbox, not one process at a time.
//!
//! Detection order: cgroup v2 where the runner's own cgroup can offer the
//! `memory` and `pids` controllers to children; else cgroup v1 hierarchies
//! for `memory` and `pids`; else none, and [`Support::None`] says why in
//! words the result repeats (the caller falls back to rlimits or refuses).
//!
//! Each execution gets `<own cgroup>/skill-runner/<tag>/<execution>` in every
//! hierarchy used. The sandbox joins it from inside the spawned child before
//! `exec` (writing `0` to `cgroup.procs` moves the writer), so not a single
//! process of the sandbox starts outside the limits. After the sandbox
//! exits the runner reads whether a limit was hit, kills anything left and
//! removes the folders.
//!
//! ## cgroup v2: the runner's own leaf
//!
//! cgroup v2 lets a cgroup other than the root either hold processes or
//! give domain controllers (`memory`, `pids`) to its children, never both
//! (the kernel's "no internal processes" rule; enabling one then fails with
//! `EBUSY`). A runner started as a systemd service with `Delegate=yes`, or
//! as the process of a container with its own cgroup namespace (where
//! `/proc/self/cgroup` shows `/`, a namespace root that is not the real
//! root), is a member of the very cgroup it must enable them in. So
//! [`Support::detect`] first moves this process into a leaf of its own and
//! then enables the controllers:
//!
//! ```text
//! <own cgroup>/                       memory and pids enabled for children
//! ├── runner/                         the runner process (all its threads)
//! └── skill-runner/<tag>/<execution>  one per execution
//! ```
//!
//! - The root cgroup is exempt from the rule: a runner there stays where it
//!   is, and executions still go below `skill-runner/`, never in the root.
//! - A write to `cgroup.procs` moves the whole process, every thread, so a
//!   runner that has started threads moves as one (v2 splits threads only
//!   in threaded subtrees, which are refused).
//! - A runner that finds itself in `<X>/runner` while `X` already gives
//!   memory and pids to its children (a second runner there, or a service
//!   manager told to start it in that subgroup) uses `X` as its own.
//! - Other processes in the runner's cgroup (a container's init, an
//!   orchestrator that runs `skill-runner run` from the same service) are
//!   not the runner's to move: enabling the controllers then fails, the
//!   runner moves back to where it was, and [`Support::None`] names them and
//!   what to change (start the runner alone in its cgroup, or move them into
//!   `<own cgroup>/runner` first). Limits are never dropped silently.
//!
//! The move is done by every process that calls [`Support::detect`] (`run`,
//! `serve`, `doctor`: each is the runner). A one-shot `run` leaves `runner/`
//! in place with the controllers enabled; a service manager removes the
//! whole subtree when the service stops.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which mechanism a cgroup uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        }
    }
}

/// Where per-execution cgroups can be made on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    V2 {
        parent: PathBuf,
    },
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        /// Where the CPU time of an execution's whole tree is counted
        /// (`cpuacct.usage`); limits nothing.
        cpuacct: Option<PathBuf>,
    },
    None {
        reason: String,
    },
}

impl Support {
    /// Looks at `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn detect() -> Support {
        let mountinfo = standard_mounts()
            .unwrap_or_else(|| fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let support = Support::from_tables(&mountinfo, &own);
        // Usable only if we may create folders there (and on v2 give them
        // the controllers, which may move this process: see the module doc).
        match support {
            Support::V2 { parent } => match claim_v2(&parent) {
                Ok(parent) => Support::V2 { parent },
                Err(reason) => Support::None {
                    reason: format!("cgroup v2: {reason}"),
                },
            },
            Support::V1 {
                memory,
                pids,
                cpuacct,
            } => {
                let memory = memory.filter(|p| fs::create_dir_all(p).is_ok());
                let pids = pids.filter(|p| fs::create_dir_all(p).is_ok());
                let cpuacct = cpuacct.filter(|p| fs::create_dir_all(p).is_ok());
                if memory.is_none() && pids.is_none() {
                    Support::None {
                        reason: "cgroup v1 memory and pids hierarchies are not writable".into(),
                    }
                } else {
                    Support::V1 {
                        memory,
                        pids,
                        cpuacct,
                    }
                }
            }
            none => none,
        }
    }

    /// Pure part of [`Support::detect`]: from mountinfo and own-cgroup text.
    pub fn from_tables(mountinfo: &str, own_cgroup: &str) -> Support {
        let mut v2_mount = None;
        let mut v1: Vec<(PathBuf, String)> = Vec::new(); // (mount point, options)
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mut r = right.split_whitespace();
            let fstype = r.next().unwrap_or("");
            let _source = r.next();
            let super_opts = r.next().unwrap_or("");
            let mount_point = left.split_whitespace().nth(4).unwrap_or("");
            match fstype {
                "cgroup2" => v2_mount = Some(PathBuf::from(mount_point)),
                "cgroup" => v1.push((PathBuf::from(mount_point), super_opts.to_owned())),
                _ => {}
            }
        }
        let own_path = |controller: &str| -> Option<String> {
            own_cgroup.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                let hit = if controller.is_empty() {
                    ctrls.is_empty()
                } else {
                    ctrls.split(',').any(|c| c == controller)
                };
                hit.then(|| path.to_owned())
            })
        };
        let v1_memory = v1.iter().find(|(_, o)| o.split(',').any(|x| x == "memory"));
        let v1_pids = v1.iter().find(|(_, o)| o.split(',').any(|x| x == "pids"));
        let v1_cpuacct = v1
            .iter()
            .find(|(_, o)| o.split(',').any(|x| x == "cpuacct"));
        if v1_memory.is_none() && v1_pids.is_none() {
            if let (Some(mount), Some(own)) = (v2_mount, own_path("")) {
                return Support::V2 {
                    parent: join_cgroup(&mount, &own).join("skill-runner"),
                };
            }
            return Support::None {
                reason: "no cgroup hierarchy with memory or pids controllers is mounted".into(),
            };
        }
        let under = |m: Option<&(PathBuf, String)>, c: &str| {
            m.map(|(mount, _)| {
                join_cgroup(mount, &own_path(c).unwrap_or_else(|| "/".into())).join("skill-runner")
            })
        };
        Support::V1 {
            memory: under(v1_memory, "memory"),
            pids: under(v1_pids, "pids"),
            cpuacct: under(v1_cpuacct, "cpuacct"),
        }
    }

    /// The same support one level down, under `tag` (one folder per data
    /// dir), created now. Executions of runners sharing a data dir share a
    /// folder, where their lock files tell live from dead; runners with
    /// other data dirs never touch it.
    pub fn scoped(self, tag: &str) -> Support {
        let make = |parent: &Path| -> io::Result<PathBuf> {
            let dir = parent.join(tag);
            fs::create_dir_all(&dir)?;
            if dir.join("cgroup.subtree_control").exists() {
                enable_controllers(&dir)?;
            }
            Ok(dir)
        };
        match self {
            Support::V2 { parent } => match make(&parent) {
                Ok(parent) => Support::V2 { parent },
                Err(e) => Support::None {
                    reason: format!("cannot create cgroups under {}: {e}", parent.display()),
                },
            },
            Support::V1 {
                memory,
                pids,
                cpuacct,
            } => Support::V1 {
                memory: memory.and_then(|p| make(&p).ok()),
                pids: pids.and_then(|p| make(&p).ok()),
                cpuacct: cpuacct.and_then(|p| make(&p).ok()),
            },
            none => none,
        }
    }

    /// The version in use, if any.
    pub fn version(&self) -> Option<Version> {
        match self {
            Support::V2 { .. } => Some(Version::V2),
            Support::V1 { .. } => Some(Version::V1),
            Support::None { .. } => None,
        }
    }

    /// Whether an execution's cgroup here holds its `memory_bytes`.
    pub fn limits_memory(&self) -> bool {
        match self {
            Support::V2 { .. } => true,
            Support::V1 { memory, .. } => memory.is_some(),
            Support::None { .. } => false,
        }
    }
}

/// The usual layouts (`/sys/fs/cgroup` as cgroup2, or `memory` and `pids`
/// v1 hierarchies below it), found with `statfs`, written as the mountinfo
/// lines [`Support::from_tables`] reads. Rendering `/proc/self/mountinfo`
/// costs the kernel far more (a tenth of a run's CPU, measured), so it is
/// read only when this finds nothing.
fn standard_mounts() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
        const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
        let fs_type = |p: &str| {
            nix::sys::statfs::statfs(p)
                .ok()
                // f_type's width differs between libcs and architectures.
                .map(|s| {
                    #[allow(clippy::unnecessary_cast)]
                    let t = s.filesystem_type().0 as i64;
                    t
                })
        };
        if fs_type("/sys/fs/cgroup") == Some(CGROUP2_SUPER_MAGIC) {
            return Some("0 0 0:0 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n".to_owned());
        }
        let mut lines = String::new();
        for c in ["memory", "pids"] {
            let path = format!("/sys/fs/cgroup/{c}");
            if fs_type(&path) == Some(CGROUP_SUPER_MAGIC) {
                lines.push_str(&format!("0 0 0:0 / {path} rw - cgroup cgroup rw,{c}\n"));
            }
        }
        // Counted where the limits are: only beside memory or pids.
        let cpuacct = "/sys/fs/cgroup/cpuacct";
        if !lines.is_empty() && fs_type(cpuacct) == Some(CGROUP_SUPER_MAGIC) {
            lines.push_str(&format!(
                "0 0 0:0 / {cpuacct} rw - cgroup cgroup rw,cpuacct\n"
            ));
        }
        (!lines.is_empty()).then_some(lines)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

fn join_cgroup(mount: &Path, own: &str) -> PathBuf {
    mount.join(own.trim_start_matches('/'))
}

/// The leaf below its own cgroup that a cgroup v2 runner moves itself into
/// (see the module doc).
pub const RUNNER_LEAF: &str = "runner";

/// The controllers every execution cgroup needs, as `cgroup.subtree_control`
/// takes them.
const CONTROLLERS: &str = "+memory +pids";

/// cgroup v2: makes `parent` (`<own cgroup>/skill-runner`) a folder whose
/// children get the memory and pids controllers, moving this process into
/// `<own cgroup>/runner` first where the kernel requires it. Returns the
/// folder to use, which differs from `parent` when this process already
/// sat in a runner leaf; else why it cannot be done.
fn claim_v2(parent: &Path) -> Result<PathBuf, String> {
    let (Some(own), Some(name)) = (parent.parent(), parent.file_name()) else {
        return Err(format!("{} has no parent cgroup", parent.display()));
    };
    let base = delegate_v2(own)?;
    let parent = base.join(name);
    fs::create_dir_all(&parent)
        .and_then(|()| enable_controllers(&parent))
        .map_err(|e| {
            format!(
                "cannot create {} with memory and pids: {e}",
                parent.display()
            )
        })?;
    Ok(parent)
}

/// Makes the runner's own cgroup `own` give memory and pids to its
/// children, and returns it (or, for a runner already in a runner leaf, the
/// cgroup above it that already does).
fn delegate_v2(own: &Path) -> Result<PathBuf, String> {
    if own
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!(
            "this process's cgroup ({}) lies outside its cgroup namespace; start skill-runner inside the namespace's cgroup tree",
            own.display()
        ));
    }
    if !own.join("cgroup.controllers").exists() {
        return Err(format!(
            "{} is not a cgroup: the cgroup2 file system mounted there is not the one of this process's cgroup namespace (mount cgroup2 again inside the namespace)",
            own.display()
        ));
    }
    // Only the real root lacks cgroup.type; a cgroup namespace's root has it.
    if !own.join("cgroup.type").exists() {
        enable_controllers(own).map_err(|e| {
            format!(
                "cannot enable memory and pids in {}: {e}",
                own.join("cgroup.subtree_control").display()
            )
        })?;
        return Ok(own.to_owned());
    }
    if own.file_name() == Some(RUNNER_LEAF.as_ref()) {
        if let Some(up) = own.parent().filter(|up| controllers_enabled(up)) {
            return Ok(up.to_owned());
        }
    }
    let kind = fs::read_to_string(own.join("cgroup.type")).unwrap_or_default();
    if kind.trim() != "domain" {
        return Err(format!(
            "{} is a {} cgroup; memory and pids need a domain cgroup",
            own.display(),
            kind.trim()
        ));
    }
    let available = fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| !available.split_whitespace().any(|x| x == *c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the {} controller{} not delegated to {} (its cgroup.controllers: {:?}); start skill-runner in a cgroup that has them, such as a systemd service with Delegate=yes",
            missing.join(" and "),
            if missing.len() > 1 { "s are" } else { " is" },
            own.display(),
            available.trim()
        ));
    }
    if controllers_enabled(own) {
        return Ok(own.to_owned());
    }
    // No internal processes: leave for a leaf, then enable.
    let leaf = own.join(RUNNER_LEAF);
    let made = match fs::create_dir(&leaf) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(format!("cannot create {}: {e}", leaf.display())),
    };
    if let Err(e) = fs::write(leaf.join("cgroup.procs"), "0") {
        if made {
            let _ = fs::remove_dir(&leaf);
        }
        return Err(format!(
            "cannot move this process into {}: {e}",
            leaf.display()
        ));
    }
    match enable_controllers(own) {
        Ok(()) => Ok(own.to_owned()),
        Err(e) => {
            // Back to where it was, so a refusal leaves nothing changed.
            let _ = fs::write(own.join("cgroup.procs"), "0");
            if made {
                let _ = fs::remove_dir(&leaf);
            }
            let others = members(own);
            if e.raw_os_error() == Some(libc::EBUSY) && !others.is_empty() {
                Err(format!(
                    "{} holds other processes ({}), and cgroup v2 lets a cgroup hold processes or give memory and pids to child cgroups, not both; start skill-runner as the only process of its cgroup (a systemd service or scope with Delegate=yes, a container's only process), or move the other processes into {} first",
                    own.display(),
                    others.join(", "),
                    leaf.display()
                ))
            } else {
                Err(format!(
                    "cannot enable memory and pids in {}: {e}",
                    own.join("cgroup.subtree_control").display()
                ))
            }
        }
    }
}

/// Whether `dir` gives memory and pids to its children.
fn controllers_enabled(dir: &Path) -> bool {
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    ["memory", "pids"]
        .iter()
        .all(|c| enabled.split_whitespace().any(|x| x == *c))
}

/// Gives memory and pids to the children of `dir` (cgroup v2).
fn enable_controllers(dir: &Path) -> io::Result<()> {
    if controllers_enabled(dir) {
        return Ok(());
    }
    fs::write(dir.join("cgroup.subtree_control"), CONTROLLERS)
}

/// The processes in cgroup `dir` other than this one, as `pid N (comm)`,
/// at most five.
fn members(dir: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let mut out: Vec<String> = procs
        .lines()
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != me)
        .take(5)
        .map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("pid {pid} ({})", comm.trim())
        })
        .collect();
    if procs.lines().filter(|p| !p.trim().is_empty()).count() > out.len() + 1 {
        out.push("…".into());
    }
    out
}

/// One execution's cgroup(s).
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    /// Where the tree's CPU time is counted: the v2 folder (`cpu.stat`),
    /// or a v1 `cpuacct` folder.
    cpu: Option<PathBuf>,
    /// CPU time (ns) counted before this execution got the cgroup.
    base_cpu_ns: u64,
    /// Counters as they were when this execution got the cgroup (a pooled
    /// cgroup carries its earlier executions' counts).
    base_oom_events: u64,
    base_pids_refused: u64,
    /// Memory still charged when this execution got the cgroup (kernel
    /// caches an earlier execution left), not counted in its peak.
    base_usage: u64,
    /// Whether the peak-memory figure covers this execution only.
    peak_is_own: bool,
    /// v2's `memory.peak` as opened to restart it: since Linux 6.12 a
    /// write resets the peak for reads through that descriptor only, so
    /// the figure is read back through it.
    peak_file: Option<fs::File>,
    /// The limits (memory bytes, pids) last written to the folders; a
    /// pooled cgroup reused with the same ones is not written again.
    limits: Option<(u64, u64)>,
    /// The held lock of a [`Shared`] slot: released (after the folders are
    /// removed, if they are) when the cgroup is dropped or given back.
    lease: Option<crate::fsx::LockFile>,
}

impl Cgroup {
    /// Creates the execution's cgroups and sets the limits.
    pub fn create(
        support: &Support,
        name: &str,
        memory_bytes: u64,
        pids: u64,
    ) -> io::Result<Cgroup> {
        let mut cg = Cgroup::fresh(support.version().unwrap_or(Version::V1));
        match support {
            Support::V2 { parent } => {
                let dir = parent.join(name);
                create_leaf(&dir)?;
                cg.memory = Some(dir.clone());
                cg.cpu = Some(dir.clone());
                cg.pids = Some(dir);
            }
            Support::V1 {
                memory,
                pids: pids_parent,
                cpuacct,
            } => {
                if let Some(parent) = memory {
                    let dir = parent.join(name);
                    create_leaf(&dir)?;
                    cg.memory = Some(dir);
                }
                if let Some(parent) = pids_parent {
                    let dir = parent.join(name);
                    create_leaf(&dir)?;
                    cg.pids = Some(dir);
                }
                // Only counts: without it the result's CPU time is the
                // launcher's alone.
                if let Some(parent) = cpuacct {
                    let dir = parent.join(name);
                    if create_leaf(&dir).is_ok() {
                        cg.cpu = Some(dir);
                    }
                }
            }
            Support::None { reason } => return Err(io::Error::other(reason.clone())),
        }
        cg.set_limits(memory_bytes, pids)?;
        cg.limits = Some((memory_bytes, pids));
        Ok(cg)
    }

    /// The cgroup `name` as it is, its folders not made: every folder it
    /// has where `support` makes one (which may or may not exist).
    fn named(support: &Support, name: &str) -> io::Result<Cgroup> {
        let mut cg = Cgroup::fresh(support.version().unwrap_or(Version::V1));
        match support {
            Support::V2 { parent } => {
                let dir = parent.join(name);
                cg.memory = Some(dir.clone());
                cg.cpu = Some(dir.clone());
                cg.pids = Some(dir);
            }
            Support::V1 {
                memory,
                pids,
                cpuacct,
            } => {
                cg.memory = memory.as_ref().map(|p| p.join(name));
                cg.pids = pids.as_ref().map(|p| p.join(name));
                cg.cpu = cpuacct.as_ref().map(|p| p.join(name));
            }
            Support::None { reason } => return Err(io::Error::other(reason.clone())),
        }
        Ok(cg)
    }

    /// Lets go of the cgroup without removing it: a [`Shared`] slot kept
    /// for the next `run` (its lease is released).
    fn release(mut self) {
        self.memory = None;
        self.pids = None;
        self.cpu = None;
    }

    /// Its folders, one per hierarchy (a sandbox's processes are in all).
    pub fn folders(&self) -> Vec<PathBuf> {
        self.dirs().cloned().collect()
    }

    /// A cgroup with no folders yet, whose counters start at zero.
    fn fresh(version: Version) -> Cgroup {
        Cgroup {
            version,
            memory: None,
            pids: None,
            cpu: None,
            base_cpu_ns: 0,
            base_oom_events: 0,
            base_pids_refused: 0,
            base_usage: 0,
            peak_is_own: true,
            peak_file: None,
            limits: None,
            lease: None,
        }
    }

    /// Sets the memory and process limits.
    fn set_limits(&self, memory_bytes: u64, pids: u64) -> io::Result<()> {
        let memory = memory_bytes.to_string();
        match self.version {
            Version::V2 => {
                if let Some(dir) = &self.memory {
                    fs::write(dir.join("memory.max"), &memory)?;
                    // No swap: the limit is on real memory use.
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                }
            }
            Version::V1 => {
                if let Some(dir) = &self.memory {
                    // With swap accounting, the same bound on memory+swap.
                    // The kernel keeps memory <= memory+swap at every step,
                    // so a raise goes memsw-first and a cut memory-first.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    let limit = dir.join("memory.limit_in_bytes");
                    if fs::write(&limit, &memory).is_err() {
                        let _ = fs::write(&memsw, &memory);
                        fs::write(&limit, &memory)?;
                    }
                    let _ = fs::write(&memsw, &memory);
                }
            }
        }
        if let Some(dir) = &self.pids {
            fs::write(dir.join("pids.max"), pids.to_string())?;
        }
        Ok(())
    }

    /// Makes a cgroup an earlier execution used ready for the next: its
    /// limits, counters taken as the new baseline, the peak reset.
    fn reuse(&mut self, memory_bytes: u64, pids: u64) -> io::Result<()> {
        // An idle cgroup can be removed under the pool (another data dir's
        // daemon sweeps empty leaves it takes for abandoned, see
        // `sweep_others`); with unchanged limits nothing below would write
        // to it and notice. Its mtime is set first, which says it is in
        // use and fails for a folder that is gone: the pool then makes a
        // new one.
        self.touch()?;
        // Unchanged limits are not written again: nothing but the runner
        // writes them (a sandbox has no cgroup file system), and each write
        // is a cgroupfs open, write and close.
        if self.limits != Some((memory_bytes, pids)) {
            self.limits = None;
            self.set_limits(memory_bytes, pids)?;
            self.limits = Some((memory_bytes, pids));
        }
        self.take_counters();
        // The peak restarts from what is charged now, and that is taken off
        // the figure reported for this execution.
        self.peak_is_own = self.restart_peak();
        let current = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        self.base_usage = self
            .memory
            .as_ref()
            .and_then(|dir| fs::read_to_string(dir.join(current)).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        Ok(())
    }

    /// Takes its counters again as the baseline of what an execution
    /// used, and restarts its peak from what is charged now: for a
    /// prepared sandbox at the hand-over of its command, so that the
    /// command's usage (CPU, peak memory, OOM kills, refused forks) is
    /// counted from then, as its clock is, and not what its preparation
    /// cost. What the waiting sandbox holds stays charged, as a sandbox
    /// built for the command holds it too. The peak of a cgroup whose
    /// peak could not be restarted stays unreported.
    pub fn rebase(&mut self) {
        self.take_counters();
        self.peak_is_own = self.peak_is_own && self.restart_peak();
    }

    fn take_counters(&mut self) {
        self.base_oom_events = self.oom_events();
        self.base_pids_refused = self.pids_refused();
        self.base_cpu_ns = self.cpu_ns().unwrap_or(0);
    }

    /// Restarts the peak from what is charged now; whether it could.
    fn restart_peak(&mut self) -> bool {
        self.peak_file = None;
        let Some(dir) = &self.memory else {
            return false;
        };
        match self.version {
            // A write resets v1's peak for every reader.
            Version::V1 => fs::write(dir.join("memory.max_usage_in_bytes"), "0").is_ok(),
            // Linux 6.12 and later reset memory.peak on a write, for reads
            // through the descriptor written; older kernels refuse it, and
            // the peak then also counts what ran before, so it is not
            // reported.
            Version::V2 => {
                use std::io::Write;
                let opened = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dir.join("memory.peak"));
                match opened {
                    Ok(f) if (&f).write_all(b"reset\n").is_ok() => {
                        self.peak_file = Some(f);
                        true
                    }
                    _ => false,
                }
            }
        }
    }

    /// Memory charged to it now (`None`: unreadable; 0 without a memory
    /// cgroup).
    fn charged(&self) -> Option<u64> {
        let Some(dir) = &self.memory else {
            return Some(0);
        };
        let file = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
    }

    /// Whether what is charged to it is at most [`REUSE_MAX_CHARGED`].
    fn charge_near_zero(&self) -> bool {
        self.charged().is_some_and(|c| c <= REUSE_MAX_CHARGED)
    }

    /// Asks the kernel to reclaim what is charged to an empty cgroup: page
    /// cache, and what swap can take (a tmpfs file without swap stays).
    fn reclaim(&self) {
        let Some(dir) = &self.memory else { return };
        match self.version {
            // Linux 5.19 and later; the write fails (EAGAIN) when less
            // could be reclaimed than asked.
            Version::V2 => {
                if let Some(c) = self.charged() {
                    let _ = fs::write(dir.join("memory.reclaim"), c.to_string());
                }
            }
            Version::V1 => {
                let _ = fs::write(dir.join("memory.force_empty"), "0");
            }
        }
    }

    /// True when no process is left in it.
    fn is_empty(&self) -> bool {
        self.dirs()
            .all(|d| fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty()))
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn limits_memory(&self) -> bool {
        self.memory.is_some()
    }

    pub fn limits_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// The file of every hierarchy that the child writes `0` to, to join
    /// before exec.
    ///
    /// On v1 this is `tasks` (move the writing thread) rather than
    /// `cgroup.procs` (move the thread group): the forked child has a single
    /// thread, and moving `current` alone skips the kernel's global
    /// threadgroup lock, whose writer waits for an RCU grace period. Traced
    /// here: 5–15 ms per write to `cgroup.procs` right after another
    /// sandbox's namespaces were torn down, 20–100 µs to `tasks`.
    pub fn procs_files(&self) -> io::Result<Vec<File>> {
        let name = match self.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        };
        self.dirs()
            .map(|d| fs::OpenOptions::new().write(true).open(d.join(name)))
            .collect()
    }

    /// Sets its folders' mtime to now: [`sweep_others`] reads it as the
    /// time it was last in use. (cgroupfs keeps the times set on its
    /// folders.) One `utimensat` per folder, by path; an error when a
    /// folder is not there (removed under the pool).
    fn touch(&self) -> io::Result<()> {
        use nix::sys::stat::{utimensat, UtimensatFlags};
        use nix::sys::time::TimeSpec;
        for dir in self.dirs() {
            utimensat(
                nix::fcntl::AT_FDCWD,
                dir.as_path(),
                &TimeSpec::UTIME_OMIT,
                &TimeSpec::UTIME_NOW,
                UtimensatFlags::NoFollowSymlink,
            )?;
        }
        Ok(())
    }

    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        let pids = self
            .pids
            .as_ref()
            .filter(|p| Some(*p) != self.memory.as_ref());
        let cpu = self
            .cpu
            .as_ref()
            .filter(|c| Some(*c) != self.memory.as_ref() && Some(*c) != self.pids.as_ref());
        self.memory.iter().chain(pids).chain(cpu)
    }

    /// CPU time (ns) of every process that ran in the cgroup: v2
    /// `cpu.stat` `usage_usec` (there without the cpu controller), v1
    /// `cpuacct.usage`.
    fn cpu_ns(&self) -> Option<u64> {
        let dir = self.cpu.as_ref()?;
        match self.version {
            Version::V2 => {
                let text = fs::read_to_string(dir.join("cpu.stat")).ok()?;
                text.lines()
                    .any(|l| l.starts_with("usage_usec "))
                    .then(|| counter_in(&text, "usage_usec") * 1000)
            }
            Version::V1 => fs::read_to_string(dir.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse()
                .ok(),
        }
    }

    /// CPU time of this execution's whole process tree, in ms, where a
    /// cgroup counts it.
    pub fn cpu_ms(&self) -> Option<u64> {
        Some(self.cpu_ns()?.saturating_sub(self.base_cpu_ns) / 1_000_000)
    }

    /// Times the memory limit was hit since the cgroup was made: processes
    /// it killed, and on v2 also allocations it was about to fail (`oom`:
    /// reclaim could not make room, whether or not a kill followed).
    fn oom_events(&self) -> u64 {
        let Some(dir) = &self.memory else { return 0 };
        match self.version {
            Version::V2 => {
                let events = dir.join("memory.events");
                counter(&events, "oom_kill") + counter(&events, "oom")
            }
            Version::V1 => counter(&dir.join("memory.oom_control"), "oom_kill"),
        }
    }

    /// Forks refused by the pids limit since the cgroup was made.
    fn pids_refused(&self) -> u64 {
        let Some(dir) = &self.pids else { return 0 };
        counter(&dir.join("pids.events"), "max")
    }

    /// True when this execution hit the memory limit (a process was
    /// killed, or an allocation failed, for it).
    pub fn memory_exceeded(&self) -> bool {
        match (&self.memory, self.version) {
            // Both figures from one read of the file.
            (Some(dir), Version::V1) => {
                let text = fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
                counter_in(&text, "under_oom") > 0
                    || counter_in(&text, "oom_kill") > self.base_oom_events
            }
            _ => self.oom_events() > self.base_oom_events,
        }
    }

    /// True when the pids limit refused a fork of this execution.
    pub fn pids_exceeded(&self) -> bool {
        self.pids_refused() > self.base_pids_refused
    }

    /// Peak memory of the whole sandbox, where the kernel records it for
    /// this execution alone.
    pub fn peak_memory(&self) -> Option<u64> {
        if !self.peak_is_own {
            return None;
        }
        let dir = self.memory.as_ref()?;
        let text = match (&self.peak_file, self.version) {
            // Through the descriptor the reset was written to.
            (Some(f), _) => {
                use std::os::unix::fs::FileExt;
                let mut buf = [0u8; 32];
                let n = f.read_at(&mut buf, 0).ok()?;
                String::from_utf8_lossy(&buf[..n]).into_owned()
            }
            (None, Version::V2) => fs::read_to_string(dir.join("memory.peak")).ok()?,
            (None, Version::V1) => {
                fs::read_to_string(dir.join("memory.max_usage_in_bytes")).ok()?
            }
        };
        let peak: u64 = text.trim().parse().ok()?;
        Some(peak.saturating_sub(self.base_usage))
    }

    /// Kills every process left in the cgroup(s).
    pub fn kill_all(&self) {
        self.kill_all_found_empty();
    }

    /// [`Cgroup::kill_all`]; true when every folder was read and found
    /// empty at the first look, so nothing was killed and a second look
    /// ([`Cgroup::is_empty`]) would read the same files again.
    fn kill_all_found_empty(&self) -> bool {
        let mut empty = true;
        for dir in self.dirs() {
            if self.version == Version::V2 && fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                empty = false;
                continue;
            }
            // Usually empty, or holding a sandbox init that is already
            // exiting (tearing down its namespaces): poll briefly rather
            // than sleeping long (≤ 100 ms in all). The first looks come
            // soon, as the teardown usually ends within a fraction of the
            // longest pause: every execution waits here before its result.
            let deadline = std::time::Instant::now() + Duration::from_millis(100);
            let mut pause = Duration::from_micros(20);
            loop {
                let procs = match fs::read_to_string(dir.join("cgroup.procs")) {
                    Ok(p) => p,
                    Err(_) => {
                        empty = false;
                        String::new()
                    }
                };
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                empty = false;
                for &pid in &pids {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                if std::time::Instant::now() >= deadline {
                    break;
                }
                // Woken by the exits themselves where the kernel has
                // pidfds: one wake-up, however loaded the machine (a
                // pause there costs a trip through the run queue each).
                if !wait_exited(&pids, Duration::from_millis(1)) {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_micros(250));
                }
            }
        }
        empty
    }
}

/// Waits up to `most` for the processes `pids` to have exited, each on a
/// pidfd (readable once the process has exited, which is after it left
/// its cgroup); false when a pidfd could not be had for one (a kernel
/// without them), so the caller pauses instead. The caller reads the
/// cgroup again either way: this only says when.
fn wait_exited(pids: &[i32], most: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = Vec::new();
    for &pid in pids {
        match crate::supervise::sys::pidfd_open(pid) {
            Ok(fd) => fds.push(fd),
            // Gone already.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => return false,
        }
    }
    let deadline = std::time::Instant::now() + most;
    while !fds.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let ms = left.as_millis().clamp(1, 1000) as u16;
        let mut polled: Vec<PollFd<'_>> = fds
            .iter()
            .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        let ready: Vec<bool> = match poll(&mut polled, PollTimeout::from(ms)) {
            Ok(0) => break,
            Ok(_) => polled
                .iter()
                .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
                .collect(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        };
        drop(polled);
        let mut i = 0;
        fds.retain(|_| {
            i += 1;
            !ready[i - 1]
        });
    }
    true
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        let dirs: Vec<PathBuf> = self.dirs().cloned().collect();
        for dir in dirs {
            // rmdir fails with EBUSY until the last process is gone.
            for _ in 0..1000 {
                match fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
    }
}

/// Most memory an idle cgroup may still have charged to go back to the
/// pool: kernel caches of an ordinary execution stay below it.
pub const REUSE_MAX_CHARGED: u64 = 8 << 20;

/// Execution cgroups kept for reuse by a long-running runner (the daemon).
///
/// Making and removing a memory cgroup per execution cost about half a
/// millisecond of CPU here (`mkdir`, `rmdir`, and the kernel's deferred
/// work to take the memory cgroup offline): reuse gave the daemon 3% more
/// throughput, measured as two daemons alternating slices of one load. An idle cgroup holds no process (checked before it is put
/// back) and nothing of it is visible inside a sandbox, which has its own
/// cgroup namespace and no cgroup file system; what carries over is
/// reset or taken as a baseline by `Cgroup::reuse`. Cgroups are named
/// `<prefix>+<n>`, where `<prefix>` names a folder (`<data>/cgroups/`) the
/// runner keeps locked while it lives, so a sweep removes them only after
/// it died.
#[derive(Debug)]
pub struct Pool {
    support: Support,
    prefix: String,
    /// Idle cgroups, each with when it went idle.
    idle: std::sync::Mutex<Vec<(std::time::Instant, Cgroup)>>,
    made: std::sync::atomic::AtomicU64,
    keep: usize,
}

impl Pool {
    pub fn new(support: Support, prefix: String, keep: usize) -> Pool {
        Pool {
            support,
            prefix,
            idle: std::sync::Mutex::new(Vec::new()),
            made: std::sync::atomic::AtomicU64::new(0),
            keep,
        }
    }

    /// An idle cgroup with these limits, or a new one.
    pub fn take(&self, memory_bytes: u64, pids: u64) -> io::Result<Cgroup> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some((since, mut cg)) = idle else { break };
            // Idle long enough that another data dir's sweep may take it
            // for abandoned (`sweep_others`, which reads the folder's
            // mtime): never reused, so the sweep can never remove a
            // cgroup between its reuse and the sandbox joining it (the
            // launch would fail, 503 sandbox_unavailable). Dropping it
            // removes it.
            if since.elapsed() >= REUSE_IDLE {
                continue;
            }
            // Its mtime, set by `reuse`, says it is in use (`sweep_others`).
            if cg.reuse(memory_bytes, pids).is_ok() {
                return Ok(cg);
            }
            // Say a lower limit cannot be set over memory still charged:
            // that one is removed, and the next tried.
        }
        let n = self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Cgroup::create(
            &self.support,
            &format!("{}+{n}", self.prefix),
            memory_bytes,
            pids,
        )
    }

    /// Takes a cgroup back after its execution: emptied, then kept idle if
    /// it holds no process, its memory charge is back near zero and the
    /// pool has room, removed otherwise.
    pub fn give(&self, cg: Cgroup) {
        if !cg.emptied_for_reuse() {
            return; // dropped: removed once its last process is gone
        }
        // Its mtime is when it went idle: another data dir's sweep takes
        // only a cgroup idle for `ABANDONED_AFTER` for abandoned, and the
        // pool never reuses one idle for `REUSE_IDLE`, half that. One whose
        // time cannot be set (a folder gone) would fail its reuse anyway:
        // dropped.
        if cg.touch().is_err() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.keep {
            idle.push((std::time::Instant::now(), cg));
        }
    }
}

/// The name of [`Shared`] slot `n`'s cgroup, and of its lock file.
pub const SHARED_PREFIX: &str = "run-";

/// Execution cgroups shared by the short-lived runners of one data dir
/// (`run`, one process per command), kept between them instead of made
/// and removed by each.
///
/// Making a cgroup in each hierarchy (memory, pids, cpuacct) and removing
/// it again was the most expensive step of a `run` of its own: the memory
/// cgroup's `mkdir` alone 30-70 µs here, all of it with the `rmdir`s and
/// the limit writes ~0.16 ms of a `run`, plus the kernel's deferred work
/// to take a memory cgroup offline. Slot `n` is the cgroup `run-<n>`,
/// leased by holding the lock file `<locks>/run-<n>` (a plain file, which
/// no sweep removes: a lock file unlinked while another process opens it
/// could be held by two at once); a `run` takes the first slot it can
/// lock, so there are as many as `run`s ever ran at once. A slot is
/// reused as the daemon's [`Pool`] reuses its cgroups (`Cgroup::reuse`:
/// limits written, counters and the peak taken as the new baseline),
/// only if it holds no process, is present in every hierarchy, was in use
/// less than [`REUSE_IDLE`] ago, and its peak can be restarted (so a
/// result's peak memory is its own); otherwise it is removed and made
/// afresh. Given back, it is emptied and kept, or removed if something
/// stays in it or charged to it. What a runner that died left in its slot
/// is killed by the next sweep ([`sweep_shared`]) or the next lease.
#[derive(Debug)]
pub struct Shared {
    support: Support,
    locks: PathBuf,
}

impl Shared {
    pub fn new(support: Support, locks: PathBuf) -> Shared {
        Shared { support, locks }
    }

    /// The first free slot's cgroup with these limits, leased until it is
    /// given back or dropped.
    pub fn take(&self, memory_bytes: u64, pids: u64) -> io::Result<Cgroup> {
        let mut n = 0u64;
        loop {
            let name = format!("{SHARED_PREFIX}{n}");
            n += 1;
            let lock = match crate::fsx::LockFile::acquire(&self.locks.join(&name)) {
                Ok(lock) => lock,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound && n == 1 => {
                    fs::create_dir_all(&self.locks)?;
                    n = 0;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut cg = Cgroup::named(&self.support, &name)?;
            cg.lease = Some(lock);
            if cg.reusable(memory_bytes, pids) {
                return Ok(cg);
            }
            // Removed (what is in it killed first), then made afresh; a
            // slot that cannot be removed is left for the next sweep.
            let lock = cg.lease.take();
            drop(cg);
            match Cgroup::create(&self.support, &name, memory_bytes, pids) {
                Ok(mut cg) => {
                    cg.lease = lock;
                    return Ok(cg);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes a slot's cgroup back after its execution: emptied and kept
    /// for the next `run` if nothing is left in it or charged to it
    /// (as [`Pool::give`] decides), removed otherwise.
    pub fn give(&self, cg: Cgroup) {
        if !cg.emptied_for_reuse() {
            return; // dropped: removed once its last process is gone
        }
        let _ = cg.touch();
        cg.release();
    }
}

impl Cgroup {
    /// Empties a cgroup given back after its execution and says whether
    /// the next one may have it ([`Pool::give`], [`Shared::give`]).
    ///
    /// A little left charged (kernel caches, ~1.4 MB after a /bin/true
    /// here) stays: it is reclaimable under the next limit and taken off
    /// the next peak, and emptying every cgroup cost more than reuse
    /// saved. More is reclaimed first, and if it stays the cgroup is not
    /// reused: files the execution left on a tmpfs outside the sandbox
    /// (a named workspace under /dev/shm, say) stay charged to it with no
    /// process left, and would count against the next tenant's memory
    /// limit (dropped, its charge moves to the parent).
    fn emptied_for_reuse(&self) -> bool {
        if !self.kill_all_found_empty() && !self.is_empty() {
            return false;
        }
        if !self.charge_near_zero() {
            self.reclaim();
            if !self.charge_near_zero() {
                tracing::debug!(
                    charged = self.charged(),
                    "a cgroup still charged after reclaim is not reused"
                );
                return false;
            }
        }
        true
    }

    /// Whether a [`Shared`] slot's cgroup can be handed out as it is, and
    /// if so makes it ready ([`Cgroup::reuse`]): it is there in every
    /// hierarchy, idle for less than [`REUSE_IDLE`] (an older one another
    /// data dir's sweep may take for abandoned at any moment), holds no
    /// process, and its peak restarts.
    fn reusable(&mut self, memory_bytes: u64, pids: u64) -> bool {
        let recent = self.dirs().next().is_some_and(|d| {
            fs::metadata(d)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|idle| idle < REUSE_IDLE)
        });
        if !recent || !self.is_empty() {
            return false;
        }
        self.reuse(memory_bytes, pids).is_ok() && (self.peak_is_own || self.memory.is_none())
    }
}

/// Whether `name` is a [`Shared`] slot's: `run-<n>` (an execution's own
/// cgroup is `<execution id>.<random>`, with a dot).
pub fn is_slot(name: &str) -> bool {
    name.strip_prefix(SHARED_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Empties the [`Shared`] slots under `support` whose runner died: each
/// slot whose lock (in `locks`) is free is idle, so whatever process is
/// still in it is killed; the slot itself is kept. A slot whose runner
/// lives is not touched.
pub fn sweep_shared(support: &Support, locks: &Path) {
    let Some(parent) = parents(support).into_iter().next() else {
        return;
    };
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str().filter(|n| is_slot(n)) else {
            continue;
        };
        // An empty slot needs nothing (a lease checks again): one read,
        // not a lock and a look in every hierarchy, for each idle slot.
        if fs::read_to_string(e.path().join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty()) {
            continue;
        }
        let Ok(lock) = crate::fsx::LockFile::acquire(&locks.join(name)) else {
            continue; // held: its runner is alive (or the lock is unusable)
        };
        if let Ok(mut cg) = Cgroup::named(support, name) {
            cg.lease = Some(lock);
            if !cg.kill_all_found_empty() && !cg.is_empty() {
                drop(cg); // removed once its last process is gone
                continue;
            }
            cg.release();
        }
    }
}

/// Creates an execution's cgroup folder, re-creating its parent if a
/// runner that shared it removed it when it went idle.
fn create_leaf(dir: &Path) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match fs::create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => {
                tries += 1;
                if let Some(parent) = dir.parent() {
                    fs::create_dir_all(parent)?;
                    if parent.join("cgroup.subtree_control").exists() {
                        enable_controllers(parent)?;
                    }
                }
            }
            other => return other,
        }
    }
}

/// Reads `key N` from a flat-keyed cgroup file; 0 when absent.
fn counter(path: &Path, key: &str) -> u64 {
    counter_in(&fs::read_to_string(path).unwrap_or_default(), key)
}

/// Reads `key N` from the text of a flat-keyed cgroup file; 0 when absent.
fn counter_in(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

fn parents(support: &Support) -> Vec<&PathBuf> {
    match support {
        Support::V2 { parent } => vec![parent],
        Support::V1 {
            memory,
            pids,
            cpuacct,
        } => memory
            .iter()
            .chain(pids.iter())
            .chain(cpuacct.iter())
            .collect(),
        Support::None { .. } => vec![],
    }
}

/// How long an execution cgroup of another data dir must have been empty
/// before [`sweep_others`] removes it, read as its folder's mtime. A
/// `run`'s cgroup is empty only for the instants between its creation and
/// the sandbox joining it, and between the sandbox's end and its removal.
/// A daemon's pooled cgroup (`<owner>+<n>`) is empty between executions:
/// its pool sets the folder's mtime when it gives it back and when it
/// takes it (`Cgroup::touch`), and never reuses one idle for
/// [`REUSE_IDLE`], so a sweep removes only pooled cgroups their pool will
/// not hand out again. (Before, a sweep by any other daemon's start could
/// remove a pooled cgroup created over ten minutes earlier in the instant
/// between its reuse and the sandbox joining it: a plain command's launch
/// failed, 503 `sandbox_unavailable`, once in a 20-minute soak.)
const ABANDONED_AFTER: Duration = Duration::from_secs(600);

/// How long a pooled cgroup may have been idle and still be reused: half
/// of [`ABANDONED_AFTER`], so a cgroup the pool reuses was in use (its
/// mtime set, `Cgroup::touch`) less than that long ago, and no sweep of
/// another data dir can take it for abandoned.
pub const REUSE_IDLE: Duration = Duration::from_secs(300);

/// Sweeps what runners of *other* data dirs left (a data dir that was
/// deleted never sweeps itself): execution cgroups that hold no process and
/// were created more than `ABANDONED_AFTER` ago, then their folders once
/// empty. Costs a listing per data dir ever used on this host, so the daemon
/// does it at start, not every `run`.
pub fn sweep_others(support: &Support) {
    for parent in parents(support) {
        let Some(shared) = parent.parent() else {
            continue;
        };
        for folder in fs::read_dir(shared).into_iter().flatten().flatten() {
            if folder.path() == *parent || !folder.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for leaf in fs::read_dir(folder.path()).into_iter().flatten().flatten() {
                let old = leaf
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > ABANDONED_AFTER);
                let empty = fs::read_to_string(leaf.path().join("cgroup.procs"))
                    .is_ok_and(|p| p.trim().is_empty());
                if old && empty {
                    let _ = fs::remove_dir(leaf.path());
                }
            }
            // Gone once empty; a live runner re-creates it (`create_leaf`).
            let _ = fs::remove_dir(folder.path());
        }
    }
}

/// Sweeps execution cgroups left by a crashed runner of this data dir:
/// folders under its `skill-runner/<tag>` parents whose name is not in
/// `live`.
pub fn sweep(support: &Support, live: &dyn Fn(&str) -> bool) {
    for parent in parents(support) {
        let Ok(entries) = fs::read_dir(parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            // A `Shared` slot is emptied under its lock (`sweep_shared`),
            // never removed by its name alone.
            if is_slot(name) {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) && !live(name) {
                // Dropping kills what is left in it and removes it.
                let mut leftover = Cgroup::fresh(support.version().unwrap_or(Version::V1));
                leftover.memory = Some(e.path());
                drop(leftover);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";

    #[test]
    fn v1_hybrid_uses_own_paths() {
        let own = "8:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/x\n0::/\n";
        assert_eq!(
            Support::from_tables(HYBRID, own),
            Support::V1 {
                memory: Some("/sys/fs/cgroup/memory/process_api/abc/skill-runner".into()),
                pids: Some("/sys/fs/cgroup/pids/skill-runner".into()),
                cpuacct: Some("/sys/fs/cgroup/cpuacct/x/skill-runner".into()),
            }
        );
    }

    #[test]
    fn pure_v2() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            Support::from_tables(mi, "0::/user.slice/x.scope\n"),
            Support::V2 {
                parent: "/sys/fs/cgroup/user.slice/x.scope/skill-runner".into()
            }
        );
    }

    #[test]
    fn nothing_mounted() {
        assert!(matches!(Support::from_tables("", ""), Support::None { .. }));
    }

    /// A stand-in for a cgroup v2 folder: the files [`delegate_v2`] reads.
    /// (What only the kernel does, such as refusing with EBUSY, is tested in
    /// the cgroup v2 guest: scripts/test-cgroup2.)
    fn fake_cgroup(dir: &Path, kind: Option<&str>, controllers: &str, enabled: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("cgroup.controllers"), controllers).unwrap();
        fs::write(dir.join("cgroup.subtree_control"), enabled).unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
        if let Some(kind) = kind {
            fs::write(dir.join("cgroup.type"), kind).unwrap();
        }
    }

    #[test]
    fn v2_root_enables_in_place_and_never_moves() {
        let t = tempfile::tempdir().unwrap();
        fake_cgroup(t.path(), None, "cpu memory pids\n", "");
        assert_eq!(delegate_v2(t.path()).unwrap(), t.path());
        let enabled = fs::read_to_string(t.path().join("cgroup.subtree_control")).unwrap();
        assert_eq!(enabled, CONTROLLERS);
        assert!(!t.path().join(RUNNER_LEAF).exists());
    }

    #[test]
    fn v2_non_root_moves_into_its_leaf_then_enables() {
        // A delegated service's cgroup, or a cgroup namespace's root (which
        // has cgroup.type: only the real root has not).
        let t = tempfile::tempdir().unwrap();
        let own = t.path().join("runner.service");
        fake_cgroup(&own, Some("domain\n"), "memory pids\n", "");
        assert_eq!(delegate_v2(&own).unwrap(), own);
        assert_eq!(
            fs::read_to_string(own.join("runner/cgroup.procs")).unwrap(),
            "0"
        );
        assert_eq!(
            fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            CONTROLLERS
        );
    }

    #[test]
    fn v2_a_runner_already_in_a_runner_leaf_uses_the_cgroup_above() {
        let t = tempfile::tempdir().unwrap();
        let up = t.path().join("runner.service");
        fake_cgroup(&up, Some("domain\n"), "memory pids\n", "memory pids\n");
        let own = up.join(RUNNER_LEAF);
        fake_cgroup(&own, Some("domain\n"), "memory pids\n", "");
        assert_eq!(delegate_v2(&own).unwrap(), up);
        assert!(!own.join(RUNNER_LEAF).exists());
    }

    #[test]
    fn v2_refusals_say_what_is_wrong() {
        let t = tempfile::tempdir().unwrap();
        let cases: &[(&str, Option<&str>, &str, &str)] = &[
            (
                "no-pids",
                Some("domain"),
                "cpu memory",
                "the pids controller is not delegated",
            ),
            (
                "none",
                Some("domain"),
                "",
                "the memory and pids controllers are not delegated",
            ),
            (
                "threaded",
                Some("threaded"),
                "memory pids",
                "is a threaded cgroup",
            ),
        ];
        for (name, kind, controllers, want) in cases {
            let own = t.path().join(name);
            fake_cgroup(&own, *kind, controllers, "");
            let err = delegate_v2(&own).unwrap_err();
            assert!(err.contains(want), "{name}: {err}");
            assert!(!own.join(RUNNER_LEAF).exists(), "{name}: moved anyway");
        }
        let err = delegate_v2(&t.path().join("missing")).unwrap_err();
        assert!(err.contains("is not a cgroup"), "{err}");
        let err = delegate_v2(Path::new("/sys/fs/cgroup/../x")).unwrap_err();
        assert!(err.contains("outside its cgroup namespace"), "{err}");
    }
}
