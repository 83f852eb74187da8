//! One execution, end to end: stage, plan, launch, supervise, report.
//!
//! [`Runner`] holds what is shared by every execution of a process (data
//! dir, store, published snapshot roots, what the host supports) and is
//! immutable after [`Runner::new`], so it can serve concurrent executions.
//! Each execution leases the published snapshot root of its selection
//! (staged and verified the first time it is selected; private per
//! execution on macOS, see [`crate::package::published`]) and gets a private folder
//! `<data>/executions/<id>.<random>` (guarded by a lock file, see
//! [`crate::package::store::PrivateDir`]) that names its cgroup and holds, unless the
//! job names one, its workspace. The folder is removed when the execution
//! ends unless `keep` is set; leftovers of crashed runners are swept by the
//! next [`Runner::new`].
//!
//! The runner orchestrates; the concerns are elsewhere: the job's host
//! folders are checked in [`crate::exec::folders`], the launch plan is
//! [`crate::exec::plan`]'s, the platform is behind [`crate::exec::launch`],
//! what runs beside the sandbox is [`crate::exec::watch`], and how it ended
//! becomes the result in [`crate::exec::outcome`]. In order:
//! `prepare` (folders, identity, staging), then `launch` (cgroup,
//! limits, plan and descriptors, watchers, supervise, result).
//!
//! Fail closed: anything that cannot be set up as asked (bwrap missing or
//! lacking options, seccomp, a limit mechanism failing) rejects the
//! execution before anything runs, with an [`ExecError`]; [`Runner::run`]
//! turns it into the result's error, the only place that does.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::datadir::DataDir;
use crate::exec::error::ExecError;
use crate::exec::files;
use crate::exec::folders::{self, Confined, Named};
use crate::exec::job::Job;
use crate::exec::launch::{self, Prepared};
use crate::exec::limits::limits_plan;
use crate::exec::outcome::{self, classify, Ended, Finished, Hits};
use crate::exec::result::ExecResult;
use crate::exec::watch;
use crate::package::environment::store::EnvStore;
use crate::package::format::PackageLimits;
use crate::package::published::{Roots, KEEP_ROOTS};
use crate::package::stage::{Selected, SkillSource};
use crate::package::store::{PrivateDir, Store};
use crate::sandbox::host::Host;
use crate::sandbox::profile;
use crate::supervise::cgroup::{self, Cgroup, Support};
use crate::supervise::diskwatch::{DiskWatch, Verdict};
use crate::supervise::{self, Cancel, OutputPolicy, Sink};

pub use crate::datadir::JOB_ROOT;
pub use crate::exec::launch::SANDBOX;

/// Why a runner could not be set up: its data dir cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The data dir itself, or a folder above it, cannot be trusted or
    /// made (the sentence carries the fix).
    #[error(transparent)]
    DataDir(#[from] crate::datadir::DataDirError),
    #[error(transparent)]
    OpenStore(#[from] crate::package::store::StoreError),
    #[error(transparent)]
    OpenEnvironments(#[from] crate::package::environment::store::EnvError),
    #[error("cannot create {}: {source}; {}", path.display(), crate::datadir::HINT)]
    CreateFolder { path: PathBuf, source: io::Error },
    #[error("cannot create {}: {source}", path.display())]
    CreateCgroupOwners { path: PathBuf, source: io::Error },
}

/// Settings of a runner process.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub data_dir: PathBuf,
    pub package_limits: PackageLimits,
    /// Keep each execution's private folder after it ends (debugging).
    pub keep: bool,
    /// Keep execution cgroups for reuse (a long-running runner: the
    /// daemon), see [`crate::supervise::cgroup::Pool`].
    pub reuse_cgroups: bool,
    /// Refuse a job whose memory or pids limit no cgroup would hold
    /// (`--strict-limits`), instead of holding it per process by an rlimit.
    pub strict_limits: bool,
    /// The runner's own network settings: whether jobs may reach private
    /// addresses, and a cap on their allowlists (see [`crate::sandbox::net`]).
    pub network: crate::sandbox::net::RunnerNetwork,
    /// Bounds on a job's `files` and collected `outputs` (docs/files.md).
    pub files: crate::exec::files::FileBounds,
}

pub use crate::datadir::default_path as default_data_dir;

/// Shared state of a runner process.
#[derive(Debug)]
pub struct Runner {
    pub config: RunnerConfig,
    pub store: Store,
    pub roots: Roots,
    /// The environments a job may name (docs/environments.md).
    pub environments: EnvStore,
    pub host: Host,
    executions: PathBuf,
    /// The opened data dir (its real path): its state is never a job's folder.
    data: DataDir,
    /// Reused execution cgroups, and the locked folder that names them.
    cgroups: Option<(cgroup::Pool, PrivateDir)>,
    /// Without a pool of its own (`run`): the cgroups shared by the
    /// runners of this data dir, see [`cgroup::Shared`].
    shared: Option<cgroup::Shared>,
    /// The bytes of kept outputs all executions hold at once.
    kept: Arc<files::KeptBudget>,
    /// The receipt key each result is signed with; `None`: receipts off.
    signer: Option<Arc<crate::receipt::Signer>>,
    /// The environment each of the last few selections declares, by set
    /// identity: the identity pins every byte of the `SKILL.md`s it is read
    /// from, so it is read and parsed once, not for every execution.
    declared: crate::memo::Recent<String, Declared>,
}

/// The environment a selection's skills declare, with the first skill
/// declaring it ([`declared_environment`]).
type Declared = Option<(String, crate::package::environment::EnvRef)>;

/// How output is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Captured into the result (`--json`, daemon).
    Capture,
    /// Streamed to the runner's stdout/stderr, not captured.
    Forward,
}

/// Per-execution options besides the job.
#[allow(missing_debug_implementations)] // holds a `dyn Sink`
pub struct RunOptions<'a> {
    pub output: OutputMode,
    pub sink: &'a mut dyn Sink,
    pub cancel: Option<Arc<Cancel>>,
}

impl Runner {
    /// Opens the data dir, probes the host and sweeps leftovers of crashed
    /// runners.
    pub fn new(config: RunnerConfig) -> Result<Runner, RunnerError> {
        let started = std::time::Instant::now();
        // bubblewrap, started as the sandbox user, resolves the folders it
        // binds by path: that group may pass through the data dir.
        let data = DataDir::open(&config.data_dir, crate::sandbox::identity::data_dir_group())?;
        let store = Store::open(&data)?;
        let roots = Roots::open(&data).map_err(|source| RunnerError::CreateFolder {
            path: data.published(),
            source,
        })?;
        let environments = EnvStore::open(&data)?;
        let executions = data.executions();
        let mut host = Host::probe(&data.cache());
        // One cgroup folder per data dir, so a sweep never touches the
        // executions of a runner with another data dir.
        let tag = crate::package::hash::file_hash(data.path().as_os_str().as_encoded_bytes());
        host.cgroups = host.cgroups.scoped(&tag[..16]);
        let cgroups = match &host.cgroups {
            Support::None { .. } => None,
            _ if !config.reuse_cgroups => None,
            support => {
                let owners = data.cgroups();
                let dir = PrivateDir::create(&owners).map_err(|source| {
                    RunnerError::CreateCgroupOwners {
                        path: owners.clone(),
                        source,
                    }
                })?;
                let prefix = dir
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some((cgroup::Pool::new(support.clone(), prefix, 64), dir))
            }
        };
        let shared = match &host.cgroups {
            Support::None { .. } => None,
            _ if cgroups.is_some() => None,
            support => Some(cgroup::Shared::new(support.clone(), data.cgroups())),
        };
        let runner = Runner {
            kept: files::KeptBudget::new(config.files.kept_bytes),
            config,
            store,
            roots,
            environments,
            host,
            executions,
            data,
            cgroups,
            shared,
            signer: None,
            declared: crate::memo::Recent::new(64),
        };
        let probed = started.elapsed();
        runner.sweep();
        tracing::debug!(
            probe_ms = probed.as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "runner ready"
        );
        Ok(runner)
    }

    /// Signs every result with `signer` from now on (`None`: receipts
    /// off, the default).
    pub fn set_signer(&mut self, signer: Option<Arc<crate::receipt::Signer>>) {
        self.signer = signer;
    }

    /// The receipt key, when receipts are on.
    pub fn signer(&self) -> Option<&Arc<crate::receipt::Signer>> {
        self.signer.as_ref()
    }

    /// Seals a result made outside [`Runner::run`] (a job refused before
    /// it reached the runner) with its receipt, when receipts are on.
    pub fn seal(&self, result: &mut ExecResult, job: Option<&Job>) {
        if let Some(signer) = &self.signer {
            let facts = crate::exec::attest::facts(job, &self.host);
            crate::exec::attest::seal(result, &facts, signer);
        }
    }

    /// The budget of kept outputs, shared by every execution of this
    /// runner (a restarted daemon holds its recorded ones against it).
    pub fn kept_budget(&self) -> &Arc<files::KeptBudget> {
        &self.kept
    }

    /// The opened (checked) data dir.
    pub fn data_dir(&self) -> &DataDir {
        &self.data
    }

    /// Removes execution folders and cgroups whose runner died, roots
    /// whose staging was interrupted, and idle roots beyond the cap.
    pub fn sweep(&self) -> usize {
        let removed = crate::package::store::sweep_locked_dirs(&self.executions).unwrap_or(0)
            + self.roots.sweep(KEEP_ROOTS);
        // An execution's cgroup is named after its folder's name, whose
        // lock file exists (with or without the folder) while it runs; a
        // pooled one `<owner>+<n>` after `<data>/cgroups/<owner>`, which its
        // runner keeps locked while it lives.
        let owners = self.data.cgroups();
        cgroup::sweep(&self.host.cgroups, &|name| {
            let lock = match name.split_once('+') {
                Some((owner, _)) => owners.join(format!("{owner}.lock")),
                None => self.executions.join(format!("{name}.lock")),
            };
            crate::fsx::is_locked(&lock)
        });
        cgroup::sweep_shared(&self.host.cgroups, &owners);
        removed + crate::package::store::sweep_locked_dirs(&owners).unwrap_or(0)
    }

    /// Runs a validated job to completion. Never panics on bad input;
    /// every failure is a result with `status` and `error`.
    pub fn run(&self, job: &Job, opts: RunOptions<'_>) -> ExecResult {
        let span = tracing::info_span!("execution", id = %job.execution_id);
        let _guard = span.enter();
        let mut result = match self.prepare(job).and_then(|p| self.launch(job, p, opts)) {
            Ok(result) => result,
            Err(e) => {
                // The edge: the typed refusal becomes the result's error.
                let error = e.info();
                // Job text (paths, argv) is escaped: no forged log lines.
                tracing::info!(kind = %error.kind, "rejected: {}", error.message.escape_debug());
                ExecResult::rejected(&job.execution_id, SANDBOX, error)
            }
        };
        self.seal(&mut result, Some(job));
        result
    }
    /// Refuses a job folder (canonical) inside the runner's state or above
    /// it. The data dir holds the store, published roots, executions,
    /// sessions and caches; only its job root `<data>/roots` (the daemon's
    /// default) is for jobs.
    /// The receipt key's folder, or one above it, is never a job's
    /// either: a `--receipt-key` outside the data dir included.
    fn not_state(&self, field: &'static str, real: &Path) -> Result<(), ExecError> {
        folders::not_state(&self.data, field, real)?;
        for key in self.signer.iter().flat_map(|s| s.places()) {
            folders::not_key(field, real, key)?;
        }
        Ok(())
    }

    /// Everything before the launch: checks, staging, folders.
    pub(crate) fn prepare(&self, job: &Job) -> Result<Prepared, ExecError> {
        files::check_inputs(&job.files, &self.config.files)?;
        // The folders the job names exist, or nothing else is done.
        let (named_workspace, named_extensions) = self.named_folders(job)?;
        // A profile binds host folders read-only: never the runner's state.
        // Resolved once: the mounts checked here are the ones the plan
        // makes.
        let mounts = job.profile.resolve_mounts(profile::host_entry);
        for m in &mounts {
            if let profile::Mount::RoBind { src, .. } | profile::Mount::RoBindTry { src, .. } = m {
                if let Ok(real) = src.canonicalize() {
                    self.not_state("a profile mount", &real)?;
                }
            }
        }
        let bwrap = launch::available(&self.host)?;
        let identity = self.host.identity.clone()?;
        let owner = identity.switch_to();
        if let Some((uid, gid)) = owner {
            for (field, dir) in [
                ("workspace", &named_workspace),
                ("extensions_dir", &named_extensions),
            ] {
                if let Some(dir) = dir {
                    folders::writable_by(field, dir, uid, gid)?;
                }
            }
        }
        let dir = self.execution_dir(job)?;
        // A network allowlist: where the command reaches the proxy.
        let net = job
            .network
            .allowlist()
            .zip(dir.as_ref())
            .map(|(_, dir)| crate::sandbox::net::Endpoint::create(&dir.path, owner))
            .transpose()
            .map_err(|source| ExecError::PrepareNetwork { source })?;

        let selected = self.select(job)?;
        let staging_started = std::time::Instant::now();
        let limits = &self.config.package_limits;
        // TRACE spans: timed for the daemon's trace export, never in logs.
        let lease = tracing::trace_span!("stage")
            .in_scope(|| launch::lease(&self.roots, &selected, dir.as_ref(), limits))?;
        let staging = staging_started.elapsed();
        // The environment the job names or its skills declare, checked
        // and leased until the execution ends.
        let environment = self.environment(job, &lease.snapshot)?;

        let workspace = match named_workspace {
            Some(w) => Some(w),
            None => match launch::fresh_workspace(dir.as_ref())? {
                // Files in or out need the workspace on the host.
                None if files::needs_host_workspace(&job.files, &job.outputs) => {
                    let exec_dir = dir.as_ref().ok_or(ExecError::NoExecutionFolder)?;
                    Some(files::fresh_workspace(&exec_dir.path, owner)?)
                }
                fresh => fresh,
            },
        };
        if let Some(w) = &workspace {
            files::write_inputs(w, &job.files, owner)?;
        }
        let extensions = match (named_extensions, &workspace) {
            (Some(e), _) => Some(e),
            // The default lives in the workspace, which earlier commands
            // could write: it must be a real folder below it, never a
            // symlink planted to get a host folder mounted writable.
            (None, Some(w)) => Some(folders::default_extensions_dir(w, owner)?),
            (None, None) => None,
        };
        folders::check_cwd(&job.cwd, workspace.as_deref())?;
        let etc = launch::etc_view(&self.data, &mounts, &identity);
        Ok(Prepared {
            dir,
            net,
            lease,
            staging,
            workspace,
            extensions,
            bwrap,
            identity,
            mounts,
            etc,
            environment,
        })
    }

    /// The job's environment, leased and checked (its stamp, else every
    /// byte; its base against this host's interpreter): a changed,
    /// missing or unverifiable one refuses the job before it starts.
    fn environment(
        &self,
        job: &Job,
        snapshot: &crate::package::stage::Snapshot,
    ) -> Result<Option<crate::package::environment::resolve::Ready>, ExecError> {
        let declared = self.declared.get_or_try(
            |identity| *identity == snapshot.identity,
            || snapshot.identity.clone(),
            || declared_environment(snapshot),
        )?;
        let env = match (&job.environment, declared) {
            (None, None) => return Ok(None),
            (Some(named), Some((skill, declared))) if *named != declared => {
                return Err(ExecError::EnvironmentNotDeclared {
                    job: Box::new(named.clone()),
                    skill,
                    declared: Box::new(declared),
                })
            }
            (Some(named), _) => named.clone(),
            (None, Some((_, declared))) => declared,
        };
        let env = &env;
        launch::environments_supported(env)?;
        let ready = crate::package::environment::resolve::prepare(&self.environments, env)
            .map_err(|source| ExecError::UseEnvironment { source })?;
        tracing::debug!(id = %env.id, hash = %env.hash, checked = ?ready.checked, "environment ready");
        Ok(Some(ready))
    }

    /// The workspace and extensions dir the job names, resolved, and
    /// outside the runner's state.
    fn named_folders(&self, job: &Job) -> Result<(Option<PathBuf>, Option<PathBuf>), ExecError> {
        let confined = Confined::from(job.confined);
        let resolve = |field, path: &Option<PathBuf>, default| {
            path.as_deref()
                .map(|path| {
                    let named = Named {
                        field,
                        path,
                        default,
                    };
                    folders::named_folder(named, confined)
                })
                .transpose()
        };
        let workspace = resolve("workspace", &job.workspace, "a fresh empty one")?;
        let extensions = resolve(
            "extensions_dir",
            &job.extensions_dir,
            "the default in the workspace",
        )?;
        for (field, dir) in [("workspace", &workspace), ("extensions_dir", &extensions)] {
            match dir {
                // A managed session workspace: the one place of the
                // runner's state a job runs in, set by the daemon.
                Some(dir) if field == "workspace" && job.managed_workspace => {
                    folders::managed_workspace(&self.data, dir)?
                }
                Some(dir) => self.not_state(field, dir)?,
                None => {}
            }
        }
        Ok((workspace, extensions))
    }

    /// The execution's own folder, for what only some executions need:
    /// a network allowlist's socket folder, Seatbelt's folders, `--keep`.
    /// Without a cgroup pool (`run`) the execution's cgroup is named
    /// after it, and only the name and its lock, which keeps sweeps off
    /// the cgroup, are made (`PrivateDir::reserve_named`). A daemon's
    /// execution without an allowlist needs neither: making and removing
    /// a folder and its lock file was ~40% of the daemon's own CPU per
    /// execution (ext4's inode allocator, traced with perf;
    /// docs/sandbox.md).
    fn execution_dir(&self, job: &Job) -> Result<Option<PrivateDir>, ExecError> {
        let needs_dir = launch::NEEDS_FOLDER
            || job.network.allowlist().is_some()
            || self.config.keep
            || files::needs_host_workspace(&job.files, &job.outputs);
        let prefix = format!("{}.", job.execution_id);
        let dir = if needs_dir {
            Some(PrivateDir::create_named(&self.executions, &prefix))
        } else if self.cgroups.is_none() && self.shared.is_none() {
            Some(PrivateDir::reserve_named(&self.executions, &prefix))
        } else {
            None
        };
        let mut dir = dir
            .transpose()
            .map_err(|source| ExecError::CreateExecutionFolder { source })?;
        if let Some(dir) = dir.as_mut() {
            dir.keep = self.config.keep;
        }
        Ok(dir)
    }

    /// Resolves each skill of the job to the source of its bytes. A job
    /// naming a session carries the session's frozen bindings, resolved by
    /// the front end ([`Job::resolve_session`]).
    fn select(&self, job: &Job) -> Result<Vec<Selected>, ExecError> {
        if let Some(id) = job.unresolved_session() {
            return Err(ExecError::UnresolvedSession {
                session: id.to_owned(),
            });
        }
        job.skills
            .iter()
            .map(|s| {
                let source = match &s.path {
                    Some(p) => {
                        let real = p.canonicalize().map_err(|source| ExecError::OpenSkill {
                            id: s.binding.id.clone(),
                            path: p.clone(),
                            source,
                        })?;
                        if job.confined && &real != p {
                            return Err(folders::changed("skill path", p));
                        }
                        self.not_state("skill path", &real)?;
                        SkillSource::Dir(real)
                    }
                    None => SkillSource::Store(self.store.resolve(&s.binding)?),
                };
                Ok(Selected {
                    binding: s.binding.clone(),
                    source,
                })
            })
            .collect()
    }

    /// The execution's cgroup: from the pool, or made for it, named after
    /// the execution's reserved name (its lock file, and the folder where
    /// one is made); or why there is none.
    pub(crate) fn cgroup(
        &self,
        p: &Prepared,
        l: &crate::exec::job::Limits,
    ) -> Result<(Option<Cgroup>, Option<String>), ExecError> {
        let name = p
            .dir
            .as_ref()
            .and_then(|d| d.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let made = match (&self.host.cgroups, &self.cgroups) {
            (Support::None { reason }, _) => return Ok((None, Some(reason.clone()))),
            (_, Some((pool, _))) => pool.take(l.memory_bytes, l.pids),
            (_, None) if self.shared.is_some() => {
                let shared = self.shared.as_ref().expect("checked above");
                shared.take(l.memory_bytes, l.pids)
            }
            (support, None) => Cgroup::create(support, &name, l.memory_bytes, l.pids),
        };
        let cgroup = made.map_err(|source| ExecError::CreateCgroup { source })?;
        Ok((Some(cgroup), None))
    }

    /// Launches a prepared execution and supervises it to its end.
    pub(crate) fn launch(
        &self,
        job: &Job,
        mut p: Prepared,
        opts: RunOptions<'_>,
    ) -> Result<ExecResult, ExecError> {
        let l = job.limits;
        let launch_span = tracing::trace_span!("launch").entered();
        let (cgroup, cg_note) = self.cgroup(&p, &l)?;
        let cgroup_procs = cgroup.as_ref().map(Cgroup::procs_files).transpose();
        let cgroup_procs = cgroup_procs
            .map_err(|source| ExecError::OpenCgroup { source })?
            .unwrap_or_default();
        let disk = watch::disk_of(&p);
        let strict = self.config.strict_limits;
        let (rlimits, applied) =
            limits_plan(&l, cgroup.as_ref(), cg_note, &p.identity, disk, strict)
                .map_err(ExecError::Limits)?;
        let launcher = launch::launcher(job, &p, rlimits.nproc)?;
        let (cancel, disk_watch) = watch::disk(opts.cancel.as_ref(), disk, &p, job)?;
        let proxy = watch::proxy(job, &mut p, &self.config.network)?;
        let spawn = launch::spawn(job, &p, launcher, rlimits.runner, cgroup_procs);
        let program = spawn.program.clone();
        launching(&p, opts.sink);
        let output = OutputPolicy {
            cap: l.output_bytes,
            capture: opts.output == OutputMode::Capture,
        };
        let timeout = Duration::from_millis(l.timeout_ms);
        drop(launch_span);
        let outcome = tracing::trace_span!("wait").in_scope(|| {
            supervise::supervise(spawn, timeout, output, opts.sink, cancel.as_deref())
        });
        let ran = Ran {
            outcome,
            program,
            disk_watch,
            cgroup,
            applied,
            proxy,
        };
        self.conclude(job, p, ran)
    }

    /// How a supervised execution ended becomes its result: the cgroup's
    /// and the watcher's verdicts, the cgroup back to the pool, the
    /// outputs collected.
    pub(crate) fn conclude(
        &self,
        job: &Job,
        p: Prepared,
        ran: Ran,
    ) -> Result<ExecResult, ExecError> {
        let l = job.limits;
        let Ran {
            outcome,
            program,
            disk_watch,
            cgroup,
            applied,
            proxy,
        } = ran;
        let verdict = disk_watch.map(DiskWatch::stop);
        let outcome = outcome.map_err(|source| ExecError::Start { program, source })?;
        tracing::debug!("supervised");
        let hits = Hits {
            memory: cgroup.as_ref().is_some_and(Cgroup::memory_exceeded),
            pids: cgroup.as_ref().is_some_and(Cgroup::pids_exceeded),
            disk: verdict == Some(Verdict::Over),
        };
        let peak = cgroup.as_ref().and_then(Cgroup::peak_memory);
        // The whole tree's CPU time: bwrap's own rusage misses its pid 1
        // and everything below it.
        let cpu_ms = cgroup.as_ref().and_then(Cgroup::cpu_ms);
        self.give_cgroup(cgroup);
        tracing::debug!("cgroup removed");
        let ended = match verdict {
            Some(Verdict::Failed(reason)) => Ended::watcher_failed(reason),
            _ => classify(&outcome, &l, hits),
        };
        let network = proxy.map(crate::sandbox::net::proxy::Session::finish);
        let finished = Finished {
            ended,
            applied,
            peak,
            cpu_ms,
            network,
        };
        let mut result = outcome::result(job, &p, &outcome, finished);
        if let (false, Some(w)) = (job.outputs.is_empty(), &p.workspace) {
            let bounds = &self.config.files;
            let kept = &self.data.outputs();
            let reader = self.host.identity.as_ref().ok().and_then(|i| i.switch_to());
            let collected = files::collect_as(w, &job.outputs, bounds, kept, &self.kept, reader);
            result.outputs = Some(collected);
            tracing::debug!("outputs collected");
        }
        tracing::info!(
            status = result.status.as_str(),
            code = result.exit_code,
            ms = result.duration_ms,
            "finished"
        );
        drop(p);
        Ok(result)
    }
}

/// A supervised execution, for [`Runner::conclude`].
pub(crate) struct Ran {
    pub outcome: io::Result<supervise::Outcome>,
    pub program: PathBuf,
    pub disk_watch: Option<DiskWatch>,
    pub cgroup: Option<Cgroup>,
    pub applied: crate::exec::result::AppliedLimits,
    pub proxy: Option<crate::sandbox::net::proxy::Session>,
}

impl Runner {
    /// Kills stragglers; removes the cgroup or keeps it for reuse.
    pub(crate) fn give_cgroup(&self, cgroup: Option<Cgroup>) {
        match (cgroup, &self.cgroups, &self.shared) {
            (Some(cg), Some((pool, _)), _) => pool.give(cg),
            (Some(cg), None, Some(shared)) => shared.give(cg),
            (cg, _, _) => drop(cg),
        }
    }
}

/// The one environment the selected skills declare in their `SKILL.md`
/// (read from the snapshot root, the verified bytes the command sees),
/// with the first skill declaring it; two different ones refuse the job.
fn declared_environment(snapshot: &crate::package::stage::Snapshot) -> Result<Declared, ExecError> {
    use crate::package::environment::declare;
    let mut found: Option<(String, crate::package::environment::EnvRef)> = None;
    for skill in &snapshot.manifest.skills {
        let path = snapshot.root.join(&skill.id).join("SKILL.md");
        let unreadable = |reason: String| ExecError::ReadDeclaration {
            skill: skill.id.clone(),
            path: path.clone(),
            reason,
        };
        let bytes = std::fs::read(&path).map_err(|e| unreadable(e.to_string()))?;
        let doc = crate::package::format::parse_skill_md(&bytes)
            .map_err(|e| unreadable(e.to_string()))?;
        let env = declare::declared(doc.front.metadata.as_ref()).map_err(|source| {
            ExecError::DeclaredEnvironment {
                skill: skill.id.clone(),
                source,
            }
        })?;
        match (env, &found) {
            (None, _) => {}
            (Some(env), None) => found = Some((skill.id.clone(), env)),
            (Some(env), Some((first_skill, first))) if env != *first => {
                return Err(ExecError::EnvironmentsDiffer {
                    skill: first_skill.clone(),
                    first: Box::new(first.clone()),
                    other: skill.id.clone(),
                    second: Box::new(env),
                })
            }
            (Some(_), Some(_)) => {}
        }
    }
    Ok(found)
}

/// Says the launch is next: the bytes staged by this execution (none when
/// the root was published) and the time staging took.
fn launching(p: &Prepared, sink: &mut dyn Sink) {
    let snapshot = &p.lease.snapshot;
    tracing::debug!(
        skills = snapshot.manifest.skills.len(),
        bytes = snapshot.bytes,
        "launching"
    );
    let staged = if p.lease.staged { snapshot.bytes } else { 0 };
    sink.launching(staged, p.staging);
    tracing::debug!(prepare_ms = p.staging.as_secs_f64() * 1e3, "spawning");
}
