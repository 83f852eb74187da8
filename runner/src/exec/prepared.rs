//! Prepared sandboxes (docs/prepared.md): a bubblewrap sandbox started
//! ahead of the request that will use it, with every mount made, the
//! seccomp programs loaded and its cgroup joined, whose exec shim waits
//! on the hand-over pipe ([`crate::sandbox::handover`]) for the command.
//!
//! A sandbox is prepared from a job with its command taken out (the
//! *canonical* job: argv `true`, no environment of its own, the
//! workspace as cwd, no stdin, files or outputs); its [`Key`] is a digest
//! of everything the launch of that canonical job would be given: the
//! bwrap argv (every mount, the folders by path: the published root of
//! its generation, the `/etc` view of its stamp, the workspace, the
//! environment's tree), what those paths lead to ([`Objects`]: a root
//! rebuilt at its path is another folder), the seccomp programs and
//! account files, and the limits but the timeout and output cap. A request takes a prepared
//! sandbox only when its own canonical job has the same key, so it gets
//! exactly the sandbox it would have been built; only its command (argv,
//! environment, cwd: what the plan would have passed as `--setenv`,
//! `--chdir` and after `--`) and its stdin are handed over, and its
//! clock starts then ([`crate::supervise::Started::hand_over`]).
//!
//! A prepared sandbox runs one command and is never used again; the
//! caller (the daemon's pool) bounds how many wait, for how long, and
//! discards them ([`Runner::discard`]): killing bubblewrap kills its pid
//! namespace, and the cgroup goes back to the pool as after any run.

use std::fs::File;
use std::io::Write;
use std::time::Instant;

use crate::exec::error::ExecError;
use crate::exec::job::Job;
use crate::exec::launch::{self, Prepared};
use crate::exec::limits::limits_plan;
use crate::exec::result::ExecResult;
use crate::exec::runner::{Ran, RunOptions, Runner, SANDBOX};
use crate::exec::{plan, watch};
use crate::sandbox::fds::FD_SHIM;
use crate::sandbox::handover::{Command, FD_HANDOVER};
use crate::sandbox::paths::{self, Spelling, WORKSPACE_DIR};
use crate::sandbox::shim::{self, shim_fits, ShimKind, HANDOVER_OPT};
use crate::supervise::cgroup::Cgroup;
use crate::supervise::{self, OutputPolicy, Started};

/// What a prepared sandbox was prepared from (a digest): a request whose
/// canonical job has the same key gets exactly that sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// The digest, for logs.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A sandbox prepared ahead, waiting for its command.
#[derive(Debug)]
pub struct Warm {
    key: Key,
    // Dropped first: killing bubblewrap before its cgroup goes.
    started: Started,
    handover: File,
    cgroup: Option<Cgroup>,
    cg_note: Option<String>,
    /// Its lease of the published root, its `/etc` view, its folders.
    prepared: Prepared,
    made: Instant,
    /// Its memory as last measured ([`Warm::measure`]); 0 before.
    memory: u64,
}

impl Warm {
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// When it was prepared (idle expiry counts from here).
    pub fn made(&self) -> Instant {
        self.made
    }

    /// bubblewrap's pid on the host.
    pub fn pid(&self) -> libc::pid_t {
        self.started.pid()
    }

    /// Whether its bubblewrap still waits (it did not die meanwhile).
    pub fn alive(&self) -> bool {
        self.started.alive()
    }

    /// Measures the host memory it holds: the PSS of its processes
    /// (bubblewrap, its pid 1, the waiting shim), read once the shim
    /// waits. Where `/proc` does not tell (no `children` lists, no
    /// `smaps_rollup`), or the shim does not wait within [`SETTLE`], it
    /// counts at least [`ESTIMATE`].
    pub fn measure(&mut self) -> u64 {
        let deadline = Instant::now() + SETTLE;
        self.memory = loop {
            let Some(tree) = process_tree(self.pid()) else {
                break ESTIMATE;
            };
            let settled = tree.len() >= 3 && tree.last().is_some_and(|&p| waiting(p));
            if settled || Instant::now() >= deadline {
                break counted(tree.iter().map(|&p| pss_bytes(p)).sum(), settled);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        self.memory
    }

    /// Its memory as [`Warm::measure`] found it.
    pub fn memory(&self) -> u64 {
        self.memory
    }
}

/// What a sandbox counts at: its PSS once its shim waits; at least
/// [`ESTIMATE`] when a process's PSS is unknown or the tree is not whole.
fn counted(pss: Option<u64>, settled: bool) -> u64 {
    match pss {
        Some(b) if settled && b > 0 => b,
        Some(b) => b.max(ESTIMATE),
        None => ESTIMATE,
    }
}

/// How long [`Warm::memory`] waits for the shim to block on its pipe.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);
/// What a prepared sandbox is counted at when its PSS cannot be read
/// (measured: 0.6–0.8 MiB; docs/benchmarks.md).
pub const ESTIMATE: u64 = 2 << 20;

/// `pid` and its descendants, parents first (children of every thread);
/// `None` where the kernel keeps no `children` lists.
fn process_tree(pid: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    if !std::path::Path::new(&format!("/proc/{pid}/task/{pid}/children")).exists() {
        return None;
    }
    let mut out = vec![pid];
    let mut next = 0;
    while next < out.len() {
        let p = out[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let path = task.path().join("children");
            if let Ok(text) = std::fs::read_to_string(path) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<libc::pid_t>().ok()),
                );
            }
        }
    }
    Some(out)
}

/// Whether `pid` is the handed-over shim asleep (on its pipe).
fn waiting(pid: libc::pid_t) -> bool {
    let shim = std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == HANDOVER_OPT.as_bytes()));
    let asleep = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // `pid (comm) S …`: the state follows the last `)`.
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    });
    shim && asleep
}

/// The proportional set size of `pid`, in bytes.
fn pss_bytes(pid: libc::pid_t) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How a session's execution got its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A prepared one was handed the command.
    Prepared,
    /// None was ready with its key: built for it.
    Built,
    /// The job cannot run in a prepared sandbox (a network allowlist).
    Ineligible,
    /// A prepared one had died while it waited: built for it.
    Died,
}

/// The job with its command taken out: what a sandbox is prepared from.
pub fn canonical(job: &Job) -> Job {
    let mut c = job.clone();
    c.argv = vec!["true".into()];
    c.env = Vec::new();
    c.cwd = String::new();
    c.stdin = None;
    c.files = Vec::new();
    c.outputs = Vec::new();
    c
}

/// Whether a job may run in a prepared sandbox: a network allowlist
/// needs an execution folder and a proxy of its own.
pub fn eligible(job: &Job) -> bool {
    job.network.allowlist().is_none()
}

/// The command a plan of `job` in these folders would run, as handed
/// over: its cwd below the workspace, its whole environment, its argv.
pub fn command(job: &Job, p: &Prepared) -> Result<Command, ExecError> {
    let cwd = if job.cwd.is_empty() {
        WORKSPACE_DIR.to_owned()
    } else {
        format!("{WORKSPACE_DIR}/{}", job.cwd)
    };
    Ok(Command {
        cwd,
        env: plan::command_env(job, &launch::folders(p)),
        argv: paths::rewrite_argv(&job.argv, Spelling::Sandbox)?,
    })
}

/// What each host folder and bound source of a sandbox is: the device
/// and inode of each folder in the plan's order, then of each profile
/// source bubblewrap binds by path; `None` where there is none to open.
/// Part of the key: a path that leads to another object than when the
/// sandbox was prepared (a published root found changed and rebuilt at
/// its path, a workspace or a host file replaced) gives another key, and
/// that sandbox is never handed the command.
type Objects = Vec<Option<(u64, u64)>>;

/// The key of a sandbox: a digest of the plan of `canon` (a canonical
/// job) in `p`, what its paths lead to (`objects`), its limits but the
/// timeout and output cap, and the host identity.
fn key(plan: &plan::Plan, canon: &Job, p: &Prepared, objects: &Objects) -> Key {
    let mut limits = canon.limits;
    limits.timeout_ms = 0;
    limits.output_bytes = 0;
    // Every byte, each field length-prefixed: no two plans hash alike
    // by a shifted boundary.
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(plan.program.as_os_str().as_encoded_bytes());
    for a in &plan.args {
        field(a.as_encoded_bytes());
    }
    for (fd, content) in &plan.files {
        field(&fd.to_le_bytes());
        match content {
            plan::Content::Bytes(b) => field(b),
            plan::Content::Shim(kind) => field(format!("{kind:?}").as_bytes()),
        }
    }
    for (fd, path) in &plan.folders {
        field(&fd.to_le_bytes());
        field(path.as_os_str().as_encoded_bytes());
    }
    for object in objects {
        match object {
            Some((dev, ino)) => field(&[dev.to_le_bytes(), ino.to_le_bytes()].concat()),
            None => field(b"none"),
        }
    }
    field(format!("{limits:?}\n{:?}", p.identity).as_bytes());
    Key(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The device and inode of an open file.
fn object_of(file: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// What the plan's folders lead to now, each opened as a launch opens it
/// (one component at a time, no symlink followed), then the sources.
fn objects_now(plan: &plan::Plan, p: &Prepared) -> Objects {
    let mut out: Objects = plan
        .folders
        .iter()
        .map(|(_, path)| {
            crate::fsx::open_dir_no_symlinks(path)
                .ok()
                .and_then(|f| object_of(&f))
        })
        .collect();
    out.extend(sources_now(p));
    out
}

/// What the profile's sources bubblewrap binds by path lead to now.
fn sources_now(p: &Prepared) -> Objects {
    use std::os::unix::fs::MetadataExt;
    launch::bound_sources(p)
        .map(|src| std::fs::metadata(src).ok().map(|m| (m.dev(), m.ino())))
        .collect()
}

impl Runner {
    /// Whether jobs like `job` get prepared sandboxes here: [`eligible`],
    /// and a shim that can start under its memory limit ([`shim_fits`]).
    pub fn may_prepare(&self, job: &Job) -> bool {
        eligible(job) && shim_fits(job.limits.memory_bytes, self.host.cgroups.limits_memory())
    }

    /// The plan the key of a sandbox of `canon` (a canonical job) in `p`
    /// is made from.
    fn key_plan(&self, canon: &Job, p: &Prepared) -> Result<plan::Plan, ExecError> {
        let bwrap = p.bwrap.as_ref().ok_or(ExecError::FindBwrap)?;
        let folders = launch::folders(p);
        plan::bwrap(
            canon,
            plan::Sandbox {
                program: &bwrap.path,
                features: bwrap.features,
                mounts: &p.mounts,
                folders: &folders,
                identity: &p.identity,
                nproc: None,
            },
        )
    }

    /// Prepares a sandbox for the next command of jobs like `job`, or
    /// `None` for a job that cannot use one ([`eligible`]). Everything
    /// but the command is done now; the shim then waits on its pipe.
    pub fn prepare_sandbox(&self, job: &Job) -> Result<Option<Warm>, ExecError> {
        if !self.may_prepare(job) {
            return Ok(None);
        }
        let canon = canonical(job);
        let p = self.prepare(&canon)?;
        let plan = self.key_plan(&canon, &p)?;
        let l = canon.limits;
        let (cgroup, cg_note) = self.cgroup(&p, &l)?;
        let held_by_cgroup = cgroup.as_ref().is_some_and(Cgroup::limits_memory);
        if !shim_fits(l.memory_bytes, held_by_cgroup) {
            tracing::debug!(
                memory_bytes = l.memory_bytes,
                "no sandbox prepared: RLIMIT_AS holds memory_bytes, too little for the runner's binary as its shim"
            );
            self.give_cgroup(cgroup);
            return Ok(None);
        }
        let started = self.start_waiting(&canon, &p, cgroup.as_ref(), cg_note.clone());
        match started {
            Ok((started, handover, bound)) => Ok(Some(Warm {
                key: key(&plan, &canon, &p, &bound),
                started,
                handover,
                cgroup,
                cg_note,
                prepared: p,
                made: Instant::now(),
                memory: 0,
            })),
            Err(e) => {
                self.give_cgroup(cgroup);
                Err(e)
            }
        }
    }

    /// Spawns bubblewrap with the canonical job's plan, its shim told to
    /// wait for the hand-over: the runner's own binary (the small shim
    /// takes its command from its argv only). With it, what it was given
    /// to bind ([`Objects`]): the folders on the descriptors it gets, the
    /// sources as their paths lead just before it starts.
    fn start_waiting(
        &self,
        canon: &Job,
        p: &Prepared,
        cgroup: Option<&Cgroup>,
        cg_note: Option<String>,
    ) -> Result<(Started, File, Objects), ExecError> {
        let procs = cgroup.map(Cgroup::procs_files).transpose();
        let procs = procs
            .map_err(|source| ExecError::OpenCgroup { source })?
            .unwrap_or_default();
        let disk = watch::disk_of(p);
        let strict = self.config.strict_limits;
        let (rlimits, _) = limits_plan(&canon.limits, cgroup, cg_note, &p.identity, disk, strict)
            .map_err(ExecError::Limits)?;
        let mut launcher = launch::launcher(canon, p, rlimits.nproc)?;
        // `… -- SHIM MODE [--nproc N] -- true` becomes `… MODE [--nproc N] --handover --`.
        let args = &mut launcher.plan.args;
        let n = args.len();
        if n < 2 || args[n - 1] != "true" || args[n - 2] != "--" {
            return Err(ExecError::PrepareDescriptors {
                source: std::io::Error::other("the plan does not end with its command"),
            });
        }
        args.pop();
        args.insert(n - 2, HANDOVER_OPT.into());
        let io = |source| ExecError::PrepareDescriptors { source };
        for (fd, number) in launcher.fds.iter_mut() {
            if *number == FD_SHIM {
                *fd = shim::executable(ShimKind::Runner).map_err(io)?;
            }
        }
        let mut bound = launch::folder_objects(&launcher.plan, &launcher.fds);
        bound.extend(sources_now(p));
        let (read, write) = crate::supervise::sys::pipe_cloexec().map_err(io)?;
        launcher.fds.push((read, FD_HANDOVER));
        let mut spawn = launch::spawn(canon, p, launcher, rlimits.runner, procs);
        // Always a pipe: the command's stdin is known only at hand-over.
        spawn.stdin = Some(Vec::new());
        let program = spawn.program.clone();
        let started =
            supervise::start(spawn).map_err(|source| ExecError::Start { program, source })?;
        Ok((started, File::from(write), bound))
    }

    /// Discards a prepared sandbox that will not be used: bubblewrap is
    /// killed (and with it its pid namespace) and reaped, its cgroup goes
    /// back to the pool.
    pub fn discard(&self, warm: Warm) {
        let Warm {
            started, cgroup, ..
        } = warm;
        drop(started);
        self.give_cgroup(cgroup);
    }

    /// Runs a session's job: in a prepared sandbox with its key when
    /// `take` has one, else in one built for it as [`Runner::run`] does.
    pub fn run_session(
        &self,
        job: &Job,
        opts: RunOptions<'_>,
        take: &mut dyn FnMut(&Key) -> Option<Warm>,
    ) -> (ExecResult, Use) {
        let span = tracing::info_span!("execution", id = %job.execution_id);
        let _guard = span.enter();
        let mut used = Use::Ineligible;
        let run = self.prepare(job).and_then(|p| {
            if !self.may_prepare(job) {
                return self.launch(job, p, opts);
            }
            // A command that cannot be handed over (a NUL byte, which job
            // validation refuses first) runs in a sandbox built for it.
            let message = match command(job, &p).map(|c| c.encode()) {
                Ok(Ok(message)) => message,
                _ => {
                    used = Use::Built;
                    return self.launch(job, p, opts);
                }
            };
            let canon = canonical(job);
            let plan = self.key_plan(&canon, &p)?;
            match take(&key(&plan, &canon, &p, &objects_now(&plan, &p))) {
                Some(warm) if warm.alive() => {
                    used = Use::Prepared;
                    self.hand_over(job, p, warm, message, opts)
                }
                Some(dead) => {
                    tracing::warn!("a prepared sandbox had died while it waited; building one");
                    self.discard(dead);
                    used = Use::Died;
                    self.launch(job, p, opts)
                }
                None => {
                    used = Use::Built;
                    self.launch(job, p, opts)
                }
            }
        });
        let mut result = match run {
            Ok(result) => result,
            Err(e) => {
                let error = e.info();
                tracing::info!(kind = %error.kind, "rejected: {}", error.message.escape_debug());
                ExecResult::rejected(&job.execution_id, SANDBOX, error)
            }
        };
        result.prepared_sandbox = used == Use::Prepared && result.identity.is_some();
        self.seal(&mut result, Some(job));
        (result, used)
    }

    /// Runs `job` as a session's command would with a sandbox prepared
    /// for it: prepares one from the job, then hands the command over
    /// (`run` with `SKILL_RUNNER_RUN_PREPARED=1`: how the escape suite
    /// runs every attempt in a prepared sandbox too). A job that cannot
    /// use one runs as [`Runner::run`]; the result's `prepared_sandbox`
    /// says which it was.
    pub fn run_in_prepared(&self, job: &Job, opts: RunOptions<'_>) -> ExecResult {
        let mut slot = match self.prepare_sandbox(job) {
            Ok(Some(warm)) => Some(warm),
            Ok(None) | Err(_) => return self.run(job, opts),
        };
        let (result, _) = self.run_session(job, opts, &mut |key| slot.take_if(|w| w.key() == key));
        if let Some(unused) = slot {
            self.discard(unused);
        }
        result
    }

    /// Hands `job`'s command to a prepared sandbox and supervises it.
    fn hand_over(
        &self,
        job: &Job,
        p: Prepared,
        warm: Warm,
        message: Vec<u8>,
        opts: RunOptions<'_>,
    ) -> Result<ExecResult, ExecError> {
        let Warm {
            mut started,
            mut handover,
            mut cgroup,
            cg_note,
            prepared,
            ..
        } = warm;
        let l = job.limits;
        let disk = watch::disk_of(&p);
        let limits = limits_plan(
            &l,
            cgroup.as_ref(),
            cg_note,
            &p.identity,
            disk,
            self.config.strict_limits,
        );
        let applied = match limits {
            Ok((_, applied)) => applied,
            Err(e) => {
                drop(started);
                self.give_cgroup(cgroup);
                return Err(ExecError::Limits(e));
            }
        };
        let (cancel, disk_watch) = match watch::disk(opts.cancel.as_ref(), disk, &p, job) {
            Ok(watching) => watching,
            Err(e) => {
                drop(started);
                self.give_cgroup(cgroup);
                return Err(e);
            }
        };
        let program = p.bwrap.as_ref().map(|b| b.path.clone()).unwrap_or_default();
        crate::supervise::Sink::launching(opts.sink, 0, p.staging);
        // Its usage is counted from here, as its clock is.
        if let Some(cg) = cgroup.as_mut() {
            cg.rebase();
        }
        started.hand_over(job.stdin.clone());
        // Cancelled at the launch (its running record could not be
        // written): the command is never handed over; the shim reads the
        // end of its pipe and the watch ends the sandbox as cancelled.
        let cancelled = cancel
            .as_deref()
            .is_some_and(crate::supervise::Cancel::is_set);
        // A pipe holds 64 KiB: a longer command is written beside the
        // watch, which ends the writer by ending the sandbox (EPIPE).
        let writer = if cancelled {
            drop(handover);
            None
        } else if message.len() <= 64 * 1024 {
            let _ = handover.write_all(&message);
            drop(handover);
            None
        } else {
            Some(std::thread::spawn(move || {
                let _ = handover.write_all(&message);
            }))
        };
        let output = OutputPolicy {
            cap: l.output_bytes,
            capture: opts.output == crate::exec::runner::OutputMode::Capture,
        };
        let timeout = std::time::Duration::from_millis(l.timeout_ms);
        let outcome = started.watch(timeout, output, opts.sink, cancel.as_deref());
        if let Some(w) = writer {
            let _ = w.join();
        }
        let ran = Ran {
            outcome,
            program,
            disk_watch,
            cgroup,
            applied,
            proxy: None,
        };
        let result = self.conclude(job, p, ran);
        drop(prepared);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_counts_its_pss_only_when_whole_and_known() {
        assert_eq!(counted(Some(700 << 10), true), 700 << 10);
        // Not settled (the shim never waited, or no children lists): at
        // least the estimate, never the partial sum alone.
        assert_eq!(counted(Some(220 << 10), false), ESTIMATE);
        assert_eq!(counted(Some(9 << 20), false), 9 << 20);
        assert_eq!(counted(None, true), ESTIMATE);
        assert_eq!(counted(Some(0), true), ESTIMATE);
    }

    #[test]
    fn a_shim_under_rlimit_as_needs_its_address_space() {
        assert!(shim_fits(16 << 20, true));
        assert!(!shim_fits(16 << 20, false));
        assert!(!shim_fits(shim::SHIM_ADDRESS_SPACE - 1, false));
        assert!(shim_fits(shim::SHIM_ADDRESS_SPACE, false));
    }

    #[test]
    fn this_process_is_found_and_measured() {
        let me = std::process::id() as libc::pid_t;
        if let Some(tree) = process_tree(me) {
            assert_eq!(tree[0], me);
        }
        assert!(pss_bytes(me).is_some_and(|b| b > 0));
    }
}
