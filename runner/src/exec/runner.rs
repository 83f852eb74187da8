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
//! Fail closed: anything that cannot be set up as asked (bwrap missing or
//! lacking options, seccomp, a limit mechanism failing) rejects the
//! execution before anything runs.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorKind;
use crate::exec::job::Job;
use crate::exec::limits::{limits_plan, Disk};
use crate::exec::outcome::{classify, Hits};
use crate::exec::result::{ErrorInfo, ExecResult, SkillsInfo, Status, Usage};
use crate::package::format::PackageLimits;
use crate::package::published::{Lease, Roots, KEEP_ROOTS};
use crate::package::stage::{Selected, SkillSource};
use crate::package::store::{PrivateDir, Store};
use crate::sandbox::bwrap::{self, BwrapFeatures, Plan};
use crate::sandbox::host::{Bwrap, Host};
use crate::sandbox::identity::Identity;
use crate::sandbox::macos;
use crate::sandbox::paths::{self, Spelling};
use crate::sandbox::profile;
use crate::supervise::cgroup::{self, Cgroup, Support};
use crate::supervise::{self, Cancel, OutputPolicy, Sink, Spawn};

/// The folder of a data dir that is for jobs' own folders (the daemon's
/// default root); everything else in a data dir is the runner's state.
pub const JOB_ROOT: &str = "roots";

/// The sandbox this build launches, as named in results.
#[cfg(target_os = "macos")]
pub const SANDBOX: &str = "seatbelt";
/// The sandbox this build launches, as named in results.
#[cfg(not(target_os = "macos"))]
pub const SANDBOX: &str = "bubblewrap";

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
    /// Where a job naming a session gets that session's frozen bindings:
    /// the skill host, wired in by the front end (`None`: such jobs are
    /// refused).
    pub sessions: Option<Arc<dyn SessionBindings>>,
}

/// The frozen bindings of a session, as the skill host keeps them
/// ([`crate::skillhost::session::Sessions`] implements this). The front
/// ends hand it to the runner, so this room never reaches up into the
/// skill host.
pub trait SessionBindings: std::fmt::Debug + Send + Sync {
    /// The session's frozen bindings, or one sentence saying why not.
    fn bindings(&self, session: &str) -> Result<Vec<crate::package::hash::Binding>, String>;
}

/// The default data dir: `SKILL_RUNNER_DATA_DIR`, else
/// `$XDG_STATE_HOME/skill-runner`, else `/var/lib/skill-runner` for root and
/// `~/.local/state/skill-runner` for others.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("skill-runner");
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/skill-runner");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".local/state/skill-runner")
}

/// Shared state of a runner process.
#[derive(Debug)]
pub struct Runner {
    pub config: RunnerConfig,
    pub store: Store,
    pub roots: Roots,
    pub host: Host,
    executions: PathBuf,
    /// The canonical data dir: its state is never a job's folder.
    data_real: PathBuf,
    /// Reused execution cgroups, and the locked folder that names them.
    cgroups: Option<(cgroup::Pool, PrivateDir)>,
}

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
    pub fn new(config: RunnerConfig) -> Result<Runner, String> {
        let started = std::time::Instant::now();
        // bubblewrap, started as the sandbox user, resolves the folders it
        // binds by path: that group may pass through the data dir.
        let through = crate::sandbox::identity::detect()
            .ok()
            .and_then(|id| id.switch_to())
            .map(|(_, gid)| gid);
        private_data_dir(&config.data_dir, through)?;
        let store = Store::open(&config.data_dir).map_err(|e| e.to_string())?;
        let roots = Roots::open(&config.data_dir).map_err(|e| {
            format!(
                "cannot create {}: {e}; {}",
                config
                    .data_dir
                    .join(crate::package::published::PUBLISHED)
                    .display(),
                crate::package::store::DATA_DIR_HINT
            )
        })?;
        let executions = config.data_dir.join("executions");
        fs::create_dir_all(&executions).map_err(|e| {
            format!(
                "cannot create {}: {e}; {}",
                executions.display(),
                crate::package::store::DATA_DIR_HINT
            )
        })?;
        let mut host = Host::probe(&config.data_dir.join("cache"));
        // One cgroup folder per data dir, so a sweep never touches the
        // executions of a runner with another data dir.
        let canonical = config
            .data_dir
            .canonicalize()
            .unwrap_or_else(|_| config.data_dir.clone());
        let tag = crate::package::hash::file_hash(canonical.as_os_str().as_encoded_bytes());
        host.cgroups = host.cgroups.scoped(&tag[..16]);
        let cgroups = match &host.cgroups {
            Support::None { .. } => None,
            _ if !config.reuse_cgroups => None,
            support => {
                let owners = config.data_dir.join("cgroups");
                let dir = PrivateDir::create(&owners)
                    .map_err(|e| format!("cannot create {}: {e}", owners.display()))?;
                let prefix = dir
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some((cgroup::Pool::new(support.clone(), prefix, 64), dir))
            }
        };
        let runner = Runner {
            config,
            store,
            roots,
            host,
            executions,
            data_real: canonical,
            cgroups,
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

    /// Removes execution folders and cgroups whose runner died, roots
    /// whose staging was interrupted, and idle roots beyond the cap.
    pub fn sweep(&self) -> usize {
        let removed = crate::package::store::sweep_locked_dirs(&self.executions).unwrap_or(0)
            + self.roots.sweep(KEEP_ROOTS);
        // An execution's cgroup is named after its folder's name, whose
        // lock file exists (with or without the folder) while it runs; a
        // pooled one `<owner>+<n>` after `<data>/cgroups/<owner>`, which its
        // runner keeps locked while it lives.
        let owners = self.config.data_dir.join("cgroups");
        cgroup::sweep(&self.host.cgroups, &|name| {
            let lock = match name.split_once('+') {
                Some((owner, _)) => owners.join(format!("{owner}.lock")),
                None => self.executions.join(format!("{name}.lock")),
            };
            crate::fsx::is_locked(&lock)
        });
        removed + crate::package::store::sweep_locked_dirs(&owners).unwrap_or(0)
    }

    /// Runs a validated job to completion. Never panics on bad input;
    /// every failure is a result with `status` and `error`.
    pub fn run(&self, job: &Job, opts: RunOptions<'_>) -> ExecResult {
        let span = tracing::info_span!("execution", id = %job.execution_id);
        let _guard = span.enter();
        match self.prepare(job) {
            Err(error) => {
                // Job text (paths, argv) is escaped: no forged log lines.
                tracing::info!(kind = %error.kind, "rejected: {}", error.message.escape_debug());
                ExecResult::rejected(&job.execution_id, SANDBOX, error)
            }
            Ok(prepared) => self.launch(job, prepared, opts),
        }
    }

    /// Checks that this host can start the platform's sandbox.
    #[cfg(not(target_os = "macos"))]
    fn launcher_available(&self) -> Result<Option<Bwrap>, ErrorInfo> {
        let bwrap = self
            .host
            .bwrap
            .clone()
            .map_err(|m| ErrorInfo::new(ErrorKind::SandboxUnavailable, m))?;
        self.host
            .userns
            .clone()
            .map_err(|m| ErrorInfo::new(ErrorKind::SandboxUnavailable, m))?;
        Ok(Some(bwrap))
    }

    /// Checks that this host can start the platform's sandbox.
    #[cfg(target_os = "macos")]
    fn launcher_available(&self) -> Result<Option<Bwrap>, ErrorInfo> {
        if Path::new(seatbelt::SANDBOX_EXEC).exists() {
            Ok(None)
        } else {
            Err(ErrorInfo::new(
                ErrorKind::SandboxUnavailable,
                format!("{} is missing; it ships with macOS", seatbelt::SANDBOX_EXEC),
            ))
        }
    }

    /// Refuses a job folder (canonical) inside the runner's state or above
    /// it. The data dir holds the store, published roots, executions,
    /// sessions and caches; only its job root `<data>/roots` (the daemon's
    /// default) is for jobs.
    fn not_state(&self, field: &str, real: &Path) -> Result<(), ErrorInfo> {
        let data = &self.data_real;
        let jobs = data.join(JOB_ROOT);
        let inside = real.starts_with(data) && !real.starts_with(&jobs);
        if inside || data.starts_with(real) {
            return Err(ErrorInfo::new(
                ErrorKind::BadJob,
                format!(
                    "{field} {} is {} the runner's data dir {}, which holds the store and published snapshot roots; name a folder outside it{}",
                    real.display(),
                    if inside { "inside" } else { "above" },
                    data.display(),
                    if inside {
                        format!(" (or under {})", jobs.display())
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        Ok(())
    }

    /// The host identity of this runner's sandboxes.
    fn identity(&self) -> Result<Identity, ErrorInfo> {
        self.host
            .identity
            .clone()
            .map_err(|m| ErrorInfo::new(ErrorKind::SandboxUnavailable, m))
    }

    /// Everything before the launch: checks, staging, folders.
    fn prepare(&self, job: &Job) -> Result<Prepared, ErrorInfo> {
        // The folders the job names exist, or nothing else is done.
        let named_workspace = job
            .workspace
            .as_deref()
            .map(|w| named_folder("workspace", w, "a fresh empty one", job.confined))
            .transpose()?;
        let named_extensions = job
            .extensions_dir
            .as_deref()
            .map(|e| {
                named_folder(
                    "extensions_dir",
                    e,
                    "the default in the workspace",
                    job.confined,
                )
            })
            .transpose()?;
        for (field, dir) in [
            ("workspace", &named_workspace),
            ("extensions_dir", &named_extensions),
        ] {
            if let Some(dir) = dir {
                self.not_state(field, dir)?;
            }
        }
        // A profile binds host folders read-only: never the runner's state.
        // Resolved once: the mounts checked here are the ones the argv
        // makes (`launcher`).
        let mounts = job.profile.resolve_mounts(profile::host_entry);
        for m in &mounts {
            if let profile::Mount::RoBind { src, .. } | profile::Mount::RoBindTry { src, .. } = m {
                if let Ok(real) = src.canonicalize() {
                    self.not_state("a profile mount", &real)?;
                }
            }
        }
        let bwrap = self.launcher_available()?;
        let identity = self.identity()?;
        let owner = identity.switch_to();
        if let Some((uid, gid)) = owner {
            for (field, dir) in [
                ("workspace", &named_workspace),
                ("extensions_dir", &named_extensions),
            ] {
                if let Some(dir) = dir {
                    writable_by(field, dir, uid, gid)?;
                }
            }
        }
        // The execution's own folder, for what only some executions need:
        // a network allowlist's socket folder, Seatbelt's folders, `--keep`.
        // Without a cgroup pool (`run`) the execution's cgroup is named
        // after it, and only the name and its lock, which keeps sweeps off
        // the cgroup, are made (`PrivateDir::reserve_named`). A daemon's
        // execution without an allowlist needs neither: making and removing
        // a folder and its lock file was ~40% of the daemon's own CPU per
        // execution (ext4's inode allocator, traced with perf;
        // docs/sandbox.md).
        let needs_dir =
            cfg!(target_os = "macos") || job.network.allowlist().is_some() || self.config.keep;
        let prefix = format!("{}.", job.execution_id);
        let dir = if needs_dir {
            Some(PrivateDir::create_named(&self.executions, &prefix))
        } else if self.cgroups.is_none() {
            Some(PrivateDir::reserve_named(&self.executions, &prefix))
        } else {
            None
        };
        let dir = dir.transpose().map_err(|e| {
            ErrorInfo::new(
                ErrorKind::StagingFailed,
                format!("cannot create the execution folder: {e}"),
            )
        })?;
        let mut dir = dir;
        if let Some(dir) = dir.as_mut() {
            dir.keep = self.config.keep;
        }
        // A network allowlist: where the command reaches the proxy.
        let net = job
            .network
            .allowlist()
            .zip(dir.as_ref())
            .map(|(_, dir)| crate::sandbox::net::Endpoint::create(&dir.path, owner))
            .transpose()
            .map_err(|e| {
                ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    format!("cannot prepare the execution's network folder: {e}"),
                )
            })?;

        let selected = self.select(job)?;
        let staging_started = std::time::Instant::now();
        // Shared where a read-only mount protects it, private otherwise.
        #[cfg(not(target_os = "macos"))]
        let lease = self.roots.acquire(&selected, &self.config.package_limits);
        #[cfg(target_os = "macos")]
        let lease = crate::package::published::stage_private(
            &selected,
            &execution_folder(&dir)?.join("skills"),
            &self.config.package_limits,
        );
        let lease = lease.map_err(|e| ErrorInfo::new(e.kind(), e.to_string()))?;
        let staging = staging_started.elapsed();

        // A fresh workspace is a tmpfs made by bwrap on Linux (bounded by
        // disk_bytes, never on the host disk); Seatbelt needs a folder.
        let workspace = match named_workspace {
            Some(w) => Some(w),
            None if cfg!(target_os = "macos") => {
                let w = execution_folder(&dir)?.join("workspace");
                fs::create_dir(&w).map_err(|e| bad_path("workspace", &w, e))?;
                Some(w)
            }
            None => None,
        };
        let extensions = match (named_extensions, &workspace) {
            (Some(e), _) => Some(e),
            // The default lives in the workspace, which earlier commands
            // could write: it must be a real folder below it, never a
            // symlink planted to get a host folder mounted writable.
            (None, Some(w)) => Some(default_extensions_dir(w, owner)?),
            (None, None) => None,
        };
        // The cwd must be a folder inside the workspace after resolving
        // symlinks: a symlink in the workspace must not lead it elsewhere.
        if !job.cwd.is_empty() {
            let Some(workspace) = &workspace else {
                return Err(ErrorInfo::new(
                    ErrorKind::BadJob,
                    format!(
                        "cwd {:?} does not exist in the workspace (a fresh workspace is empty)",
                        job.cwd
                    ),
                ));
            };
            let cwd = workspace.join(&job.cwd);
            let real = cwd.canonicalize().map_err(|_| {
                ErrorInfo::new(
                    ErrorKind::BadJob,
                    format!("cwd {:?} does not exist in the workspace", job.cwd),
                )
            })?;
            if !real.starts_with(workspace) || !real.is_dir() {
                return Err(ErrorInfo::new(
                    ErrorKind::BadJob,
                    format!("cwd {:?} leaves the workspace or is not a folder", job.cwd),
                ));
            }
        }
        let etc = if cfg!(target_os = "macos") {
            None
        } else {
            self.etc_view(&mounts, &identity)
        };
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
        })
    }

    /// The prepared `/etc` for these mounts ([`crate::sandbox::etcview`]),
    /// or `None`, and the pieces are bound one by one as before, when the
    /// profile's `/etc` cannot be one folder or the copy cannot be made
    /// (said in the log: it costs time, not isolation).
    fn etc_view(&self, mounts: &[profile::Mount], identity: &Identity) -> Option<PathBuf> {
        let pieces = crate::sandbox::etcview::pieces(mounts)?;
        let root = self.config.data_dir.join(ETC_VIEWS);
        let made = crate::sandbox::etcview::prepare(&root, &pieces, &etc_extra());
        let etc = match made {
            Ok(etc) => etc,
            Err(e) => {
                tracing::warn!("binding the profile's /etc pieces one by one: cannot prepare a copy of them: {e}");
                return None;
            }
        };
        if let Some((uid, gid)) = identity.switch_to() {
            if let Err(e) = reachable_by("the prepared /etc", &etc, uid, gid) {
                tracing::warn!(
                    "binding the profile's /etc pieces one by one: {}",
                    e.message
                );
                return None;
            }
        }
        Some(etc)
    }

    /// Resolves each skill of the job to the source of its bytes. A job
    /// naming a session gets the session's frozen bindings, from the store.
    fn select(&self, job: &Job) -> Result<Vec<Selected>, ErrorInfo> {
        if let Some(id) = &job.session {
            let sessions = self.config.sessions.as_ref().ok_or_else(|| {
                ErrorInfo::new(
                    ErrorKind::BadJob,
                    format!("the job names session {id:?}, but this runner has no skill host"),
                )
            })?;
            let bindings = sessions
                .bindings(id)
                .map_err(|e| ErrorInfo::new(ErrorKind::BadJob, e))?;
            return bindings
                .into_iter()
                .map(|binding| {
                    let pkg = self
                        .store
                        .resolve(&binding)
                        .map_err(|e| ErrorInfo::new(e.kind(), e.to_string()))?;
                    Ok(Selected {
                        binding,
                        source: SkillSource::Store(pkg),
                    })
                })
                .collect();
        }
        job.skills
            .iter()
            .map(|s| {
                let source = match &s.path {
                    Some(p) => {
                        let real = p.canonicalize().map_err(|e| {
                            ErrorInfo::new(
                                ErrorKind::BadJob,
                                format!(
                                    "skill {:?}: cannot open its folder {}: {e}",
                                    s.binding.id,
                                    p.display()
                                ),
                            )
                        })?;
                        if job.confined && &real != p {
                            return Err(changed("skill path", p));
                        }
                        self.not_state("skill path", &real)?;
                        SkillSource::Dir(real)
                    }
                    None => SkillSource::Store(
                        self.store
                            .resolve(&s.binding)
                            .map_err(|e| ErrorInfo::new(e.kind(), e.to_string()))?,
                    ),
                };
                Ok(Selected {
                    binding: s.binding.clone(),
                    source,
                })
            })
            .collect()
    }

    /// Builds the bwrap argv for a prepared execution.
    /// `named_workspace`: whether the workspace is a host folder (handed
    /// over on a descriptor) or a fresh tmpfs; `named_extensions`: whether
    /// the job names an extensions dir (else the default inside the
    /// workspace: bound on its own descriptor for a host workspace, linked
    /// inside a fresh one).
    pub fn plan_args(
        job: &Job,
        bwrap: &Bwrap,
        named_workspace: bool,
        named_extensions: bool,
        nproc: Option<u64>,
        etc_view: bool,
    ) -> Result<Vec<std::ffi::OsString>, ErrorInfo> {
        let mounts = job.profile.resolve_mounts(profile::host_entry);
        Runner::plan_args_with(
            job,
            bwrap,
            &mounts,
            named_workspace,
            named_extensions,
            nproc,
            etc_view,
        )
    }

    /// [`Runner::plan_args`] with the profile's mounts already resolved.
    #[allow(clippy::too_many_arguments)]
    fn plan_args_with(
        job: &Job,
        bwrap: &Bwrap,
        mounts: &[profile::Mount],
        named_workspace: bool,
        named_extensions: bool,
        nproc: Option<u64>,
        etc_view: bool,
    ) -> Result<Vec<std::ffi::OsString>, ErrorInfo> {
        let argv = paths::rewrite_argv(&job.argv, Spelling::Sandbox)
            .map_err(|e| ErrorInfo::new(ErrorKind::BadJob, e.to_string()))?;
        let mut env = bwrap::environment(&job.env);
        let proxy = job.network.allowlist().is_some();
        if proxy {
            env.extend(crate::sandbox::net::proxy_environment(
                crate::sandbox::net::PROXY_URL,
            ));
        }
        let workspace = if named_workspace {
            bwrap::Workspace::Host
        } else {
            bwrap::Workspace::Fresh {
                bytes: job.limits.disk_bytes,
            }
        };
        let extensions = match (named_extensions, named_workspace) {
            (false, false) => bwrap::Extensions::InFreshWorkspace,
            _ => bwrap::Extensions::Host,
        };
        Ok(bwrap::bwrap_args(&Plan {
            mounts,
            workspace,
            extensions,
            cwd: &job.cwd,
            env: &env,
            argv: &argv,
            tmp_bytes: job.limits.tmp_bytes,
            features: bwrap.features,
            proxy,
            nproc,
            etc_view,
        }))
    }

    /// bubblewrap: the argv, the seccomp programs and account files on fds.
    #[cfg(not(target_os = "macos"))]
    fn launcher(&self, job: &Job, p: &Prepared, nproc: Option<u64>) -> Result<Launcher, ErrorInfo> {
        let bwrap = p.bwrap.as_ref().ok_or_else(|| {
            ErrorInfo::new(ErrorKind::SandboxUnavailable, "bubblewrap was not found")
        })?;
        let args = Runner::plan_args_with(
            job,
            bwrap,
            &p.mounts,
            p.workspace.is_some(),
            p.extensions.is_some(),
            nproc,
            p.etc.is_some(),
        )?;
        let filters = crate::sandbox::seccomp::compile_for(
            &job.profile,
            job.network.mode(),
            p.identity.root_mapped,
        )
        .map_err(|e| ErrorInfo::new(ErrorKind::SandboxUnavailable, e.to_string()))?;
        let network = job.network.allowlist().is_some();
        let mut fds = sandbox_fds(&filters, network, p.etc.is_none()).map_err(|e| {
            ErrorInfo::new(
                ErrorKind::SandboxUnavailable,
                format!("cannot prepare the sandbox's descriptors: {e}"),
            )
        })?;
        // bwrap resolves what it binds by path, as the sandbox user.
        if let Some((uid, gid)) = p.identity.switch_to() {
            reachable_by("the snapshot root", &p.lease.snapshot.root, uid, gid)?;
            for (field, dir) in [
                ("workspace", &p.workspace),
                ("extensions_dir", &p.extensions),
            ] {
                if let Some(dir) = dir {
                    reachable_by(field, dir, uid, gid)?;
                }
            }
            if let Some((path, _)) = p.net.as_ref().and_then(|n| n.dir.as_ref()) {
                reachable_by("the execution's network folder", path, uid, gid)?;
            }
        }
        // The host folders, opened now, at launch: what bwrap mounts is
        // what was checked, whatever happens to the paths meanwhile.
        let folders = [
            ("skills", Some(&p.lease.snapshot.root), bwrap::FD_SKILLS),
            ("workspace", p.workspace.as_ref(), bwrap::FD_WORKSPACE),
            // The default one of a host workspace too: a folder fixed for
            // the whole run, which no concurrent job on the same workspace
            // can redirect by renaming it (a link would be looked up anew
            // at each use).
            (
                "extensions_dir",
                p.extensions.as_ref(),
                bwrap::FD_EXTENSIONS,
            ),
        ];
        for (field, path, target) in folders {
            if let Some(path) = path {
                let dir = crate::fsx::open_dir_no_symlinks(path).map_err(|e| {
                    ErrorInfo::new(
                        ErrorKind::BadJob,
                        format!(
                            "{field} {} changed since it was checked or cannot be opened without following a symlink ({e}); name a folder no running command can rename",
                            path.display()
                        ),
                    )
                })?;
                fds.push((dir.into(), target));
            }
        }
        if let Some(etc) = &p.etc {
            let dir = crate::fsx::open_dir_no_symlinks(etc).map_err(|e| {
                ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    format!("cannot open the prepared /etc {}: {e}", etc.display()),
                )
            })?;
            fds.push((dir.into(), bwrap::FD_ETC));
        }
        if let Some((path, dir)) = p.net.as_ref().and_then(|n| n.dir.as_ref()) {
            let dir = dir.try_clone().map_err(|e| {
                ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    format!("cannot hand over {}: {e}", path.display()),
                )
            })?;
            fds.push((dir.into(), bwrap::FD_NET));
        }
        Ok(Launcher {
            program: bwrap.path.clone(),
            args,
            env: Vec::new(),
            fds,
            report_fd: Some(crate::sandbox::shim::FD_EXEC_REPORT),
            stderr_fd: Some(crate::sandbox::shim::FD_STDERR),
            new_session: false, // bwrap --new-session
        })
    }

    /// Seatbelt: `/usr/bin/sandbox-exec` with the rendered profile; the
    /// environment holds host paths.
    #[cfg(target_os = "macos")]
    fn launcher(&self, job: &Job, p: &Prepared, nproc: Option<u64>) -> Result<Launcher, ErrorInfo> {
        debug_assert!(nproc.is_none(), "macOS applies no pids rlimit");
        let tmp = execution_folder(&p.dir)?.join("tmp");
        fs::create_dir_all(&tmp).map_err(|e| bad_path("tmp", &tmp, e))?;
        let folders = crate::sandbox::macos::Folders {
            snapshot_root: p.lease.snapshot.root.clone(),
            // Always folders under Seatbelt (prepare makes a fresh one).
            workspace: p.workspace.clone().ok_or_else(|| {
                ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    "Seatbelt needs a workspace folder",
                )
            })?,
            extensions: p.extensions.clone().ok_or_else(|| {
                ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    "Seatbelt needs an extensions folder",
                )
            })?,
            tmp,
            proxy_port: p.net.as_ref().and_then(|n| n.port),
        };
        let bad = |e: crate::sandbox::macos::MacosError| {
            ErrorInfo::new(ErrorKind::SandboxUnavailable, e.to_string())
        };
        let (_, argv) =
            crate::sandbox::macos::plan(&job.seatbelt_request(), &folders).map_err(bad)?;
        let env =
            crate::sandbox::macos::environment(&job.seatbelt_request(), &folders).map_err(bad)?;
        let mut argv = argv.into_iter();
        let program = PathBuf::from(argv.next().unwrap_or_default());
        Ok(Launcher {
            program,
            args: argv.map(Into::into).collect(),
            env,
            fds: Vec::new(),
            report_fd: None,
            stderr_fd: None,
            new_session: true,
        })
    }

    fn launch(&self, job: &Job, mut p: Prepared, opts: RunOptions<'_>) -> ExecResult {
        let rejected = |e: ErrorInfo| ExecResult::rejected(&job.execution_id, SANDBOX, e);
        let l = job.limits;
        // Without a pool, named after the execution's reserved name (its
        // lock file, and the folder where one is made).
        let cg_name = p
            .dir
            .as_ref()
            .and_then(|d| d.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (cgroup, cg_note) = match &self.host.cgroups {
            Support::None { reason } => (None, Some(reason.clone())),
            support => match match &self.cgroups {
                Some((pool, _)) => pool.take(l.memory_bytes, l.pids),
                None => Cgroup::create(support, &cg_name, l.memory_bytes, l.pids),
            } {
                Ok(cg) => (Some(cg), None),
                Err(e) => {
                    return rejected(ErrorInfo::new(
                        ErrorKind::SandboxUnavailable,
                        format!("cannot create the execution's cgroup: {e}"),
                    ))
                }
            },
        };
        let cgroup_procs = match cgroup.as_ref().map(Cgroup::procs_files).transpose() {
            Ok(f) => f.unwrap_or_default(),
            Err(e) => {
                return rejected(ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    format!("cannot open the execution's cgroup: {e}"),
                ))
            }
        };
        // Any host folder the command writes is watched; only a fresh
        // workspace holding its own extensions dir is a tmpfs alone.
        let disk = if p.workspace.is_some() || p.extensions.is_some() {
            Disk::Watcher
        } else {
            Disk::Tmpfs
        };
        let (rlimits, applied) = match limits_plan(
            &l,
            cgroup.as_ref(),
            cg_note,
            &p.identity,
            disk,
            self.config.strict_limits,
        ) {
            Ok(plan) => plan,
            Err(e) => return rejected(e),
        };
        let launch = match self.launcher(job, &p, rlimits.nproc) {
            Ok(l) => l,
            Err(e) => return rejected(e),
        };
        // A host workspace is watched: past disk_bytes the run is ended.
        let cancel = match (&opts.cancel, disk) {
            (Some(c), _) => Some(c.clone()),
            (None, Disk::Watcher) => match Cancel::new() {
                Ok(c) => Some(c),
                Err(e) => {
                    return rejected(ErrorInfo::new(
                        ErrorKind::SandboxUnavailable,
                        format!("cannot make the execution's cancel switch: {e}"),
                    ))
                }
            },
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
                Some(crate::supervise::diskwatch::DiskWatch::start(
                    dirs,
                    l.disk_bytes,
                    cancel.clone(),
                ))
            }
            _ => None,
        };

        // The proxy of a job with an allowlist, serving this execution's
        // endpoint with this execution's policy alone.
        let proxy = match (p.net.as_mut(), job.network.allowlist()) {
            (Some(net), Some(allow)) => {
                let policy = crate::sandbox::net::Policy {
                    job: allow.clone(),
                    runner: self.config.network.clone(),
                };
                match net.start(policy, &job.execution_id) {
                    Ok(session) => Some(session),
                    Err(e) => {
                        return rejected(ErrorInfo::new(
                            ErrorKind::SandboxUnavailable,
                            format!("cannot start the network proxy: {e}"),
                        ))
                    }
                }
            }
            _ => None,
        };
        let program = launch.program.clone();
        let spawn = Spawn {
            program: launch.program,
            args: launch.args,
            env: launch.env,
            fds: launch.fds,
            rlimits: rlimits.runner,
            cgroup_procs,
            stdin: job.stdin.clone(),
            report_fd: launch.report_fd,
            stderr_fd: launch.stderr_fd,
            new_session: launch.new_session,
            identity: p.identity.switch_to(),
        };
        tracing::debug!(
            skills = p.lease.snapshot.manifest.skills.len(),
            bytes = p.lease.snapshot.bytes,
            "launching"
        );
        // Bytes staged by this execution: none when the root was published.
        let staged = if p.lease.staged {
            p.lease.snapshot.bytes
        } else {
            0
        };
        opts.sink.launching(staged, p.staging);
        tracing::debug!(prepare_ms = p.staging.as_secs_f64() * 1e3, "spawning");
        let outcome = supervise::supervise(
            spawn,
            Duration::from_millis(l.timeout_ms),
            OutputPolicy {
                cap: l.output_bytes,
                capture: opts.output == OutputMode::Capture,
            },
            opts.sink,
            cancel.as_deref(),
        );
        let disk_hit = watch.is_some_and(crate::supervise::diskwatch::DiskWatch::stop);
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                return rejected(ErrorInfo::new(
                    ErrorKind::SandboxUnavailable,
                    format!("cannot start {}: {e}", program.display()),
                ))
            }
        };
        tracing::debug!("supervised");
        let hits = Hits {
            memory: cgroup.as_ref().is_some_and(Cgroup::memory_exceeded),
            pids: cgroup.as_ref().is_some_and(Cgroup::pids_exceeded),
            disk: disk_hit,
        };
        let peak = cgroup.as_ref().and_then(Cgroup::peak_memory);
        // Kills stragglers; removes the cgroup or keeps it for reuse.
        match (cgroup, &self.cgroups) {
            (Some(cg), Some((pool, _))) => pool.give(cg),
            (cg, _) => drop(cg),
        }
        tracing::debug!("cgroup removed");
        let network = proxy.map(crate::sandbox::net::proxy::Session::finish);
        let finished_at = outcome.started_at + outcome.duration;

        let mut warnings = p.lease.snapshot.warnings.clone();
        warnings.extend(applied.warnings());
        let mut result = ExecResult {
            execution_id: job.execution_id.clone(),
            status: Status::Exited,
            exit_code: None,
            signal: None,
            stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
            stderr: String::from_utf8_lossy(&outcome.stderr.bytes).into_owned(),
            stdout_truncated: outcome.stdout.truncated,
            stderr_truncated: outcome.stderr.truncated,
            duration_ms: outcome.duration.as_millis() as u64,
            started_at: crate::text::rfc3339(outcome.started_at),
            finished_at: crate::text::rfc3339(finished_at),
            sandbox: SANDBOX,
            skills: Some(SkillsInfo {
                identity: p.lease.snapshot.identity.clone(),
                manifest: p.lease.snapshot.manifest.clone(),
            }),
            limits: Some(applied),
            usage: Some(Usage {
                cpu_ms: outcome.cpu_ms,
                max_rss_bytes: peak
                    .unwrap_or(outcome.max_rss_bytes)
                    .max(outcome.max_rss_bytes),
            }),
            network,
            error: None,
            warnings,
            identity: Some(p.identity.clone()),
        };
        classify(&mut result, &outcome, &l, hits);
        tracing::info!(status = ?result.status, code = ?result.exit_code, ms = result.duration_ms, "finished");
        drop(p.dir);
        result
    }

    /// What `explain` prints: the bwrap argv for a job, with the
    /// per-execution folder shown as `<data-dir>/executions/<id>.<random>`
    /// and the published snapshot root as `<data-dir>/published/<identity>`.
    /// Touches nothing: no staging; of the data dir it only reads which
    /// prepared `/etc` is current (`data_dir`, see
    /// [`crate::sandbox::etcview::expected`]).
    /// Also returns the host folders the runner would open on fds 10-14.
    #[allow(clippy::type_complexity)]
    pub fn explain(
        job: &Job,
        data_dir: &Path,
    ) -> Result<(PathBuf, Vec<std::ffi::OsString>, Vec<(i32, String)>), ErrorInfo> {
        let bwrap = Bwrap::find().unwrap_or(Bwrap {
            path: PathBuf::from("bwrap"),
            version: String::new(),
            features: BwrapFeatures {
                disable_userns: true,
            },
        });
        // The published root of the job's pins (a session's pins are only
        // known to a runner with a data dir).
        let identity = if job.session.is_some() {
            "<identity>".to_owned()
        } else {
            let pins: Vec<_> = job.skills.iter().map(|s| s.binding.clone()).collect();
            crate::package::hash::set_identity(&pins)
        };
        let mut folders = vec![(
            bwrap::FD_SKILLS,
            format!("<data-dir>/published/{identity}/skills"),
        )];
        if let Some(w) = &job.workspace {
            folders.push((bwrap::FD_WORKSPACE, w.display().to_string()));
        }
        match (&job.extensions_dir, &job.workspace) {
            (Some(e), _) => folders.push((bwrap::FD_EXTENSIONS, e.display().to_string())),
            (None, Some(w)) => folders.push((
                bwrap::FD_EXTENSIONS,
                w.join(bwrap::DEFAULT_EXTENSIONS).display().to_string(),
            )),
            (None, None) => {}
        }
        if job.network.allowlist().is_some() {
            folders.push((
                bwrap::FD_NET,
                format!("<data-dir>/executions/{}.<random>/net", job.execution_id),
            ));
        }
        // The prepared /etc the host's files give now (the first execution
        // makes it; see crate::sandbox::etcview).
        let mounts = job.profile.resolve_mounts(profile::host_entry);
        let views = data_dir.join(ETC_VIEWS);
        let etc = crate::sandbox::etcview::pieces(&mounts).and_then(|pieces| {
            crate::sandbox::etcview::expected(&views, &pieces, &etc_extra()).ok()
        });
        if let Some(rel) = &etc {
            folders.push((
                bwrap::FD_ETC,
                format!("<data-dir>/{ETC_VIEWS}/{}", rel.display()),
            ));
        }
        let args = Runner::plan_args_with(
            job,
            &bwrap,
            &mounts,
            job.workspace.is_some(),
            job.extensions_dir.is_some() || job.workspace.is_some(),
            None,
            etc.is_some(),
        )?;
        Ok((bwrap.path, args, folders))
    }
}

/// Where the prepared copies of `/etc` live, in the data dir.
const ETC_VIEWS: &str = "system-views";

/// What the runner adds to `/etc`: the account files.
fn etc_extra() -> [crate::sandbox::etcview::Extra<'static>; 2] {
    [
        ("passwd", bwrap::PASSWD.as_bytes()),
        ("group", bwrap::GROUP.as_bytes()),
    ]
}

struct Prepared {
    /// The execution's folder, where it needs one (see `prepare`).
    dir: Option<PrivateDir>,
    /// The published snapshot root, locked for this execution.
    lease: Lease,
    /// Time spent finding, or staging and publishing, the snapshot root.
    staging: Duration,
    /// The host workspace; `None`: a fresh tmpfs (Linux).
    workspace: Option<PathBuf>,
    /// The host extensions dir; `None`: inside the fresh workspace.
    extensions: Option<PathBuf>,
    identity: Identity,
    /// The bwrap to use (Linux); `None` under Seatbelt.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    bwrap: Option<Bwrap>,
    /// Where the command reaches the proxy (a job with an allowlist).
    net: Option<crate::sandbox::net::Endpoint>,
    /// The profile's mounts as resolved on the host, checked in `prepare`.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    mounts: Vec<profile::Mount>,
    /// The prepared `/etc` (Linux), when the profile's `/etc` can be one.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    etc: Option<PathBuf>,
}

/// The execution's folder, which every execution that uses it has.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn execution_folder(dir: &Option<PrivateDir>) -> Result<&Path, ErrorInfo> {
    dir.as_ref().map(|d| d.path.as_path()).ok_or_else(|| {
        ErrorInfo::new(
            ErrorKind::SandboxUnavailable,
            "the execution has no folder of its own",
        )
    })
}

/// `<workspace>/.sciencediscovery/skill-extensions`, made one component at
/// a time relative to the open parent (`mkdirat`, then `openat` with
/// `O_NOFOLLOW`), so a component swapped for a symlink meanwhile is refused
/// rather than followed; what the runner makes is given to `owner` (the
/// sandbox user) through its descriptor.
fn default_extensions_dir(
    workspace: &Path,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, ErrorInfo> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    use std::os::fd::AsFd;
    let mut parent = crate::fsx::open_dir_no_symlinks(workspace)
        .map_err(|e| bad_path("workspace", workspace, e))?;
    let mut path = workspace.to_owned();
    for part in [".sciencediscovery", "skill-extensions"] {
        path.push(part);
        let made = match mkdirat(parent.as_fd(), part, Mode::from_bits_truncate(0o755)) {
            Ok(()) => true,
            Err(nix::errno::Errno::EEXIST) => false,
            Err(e) => return Err(bad_path("extensions_dir", &path, e.into())),
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir = match openat(parent.as_fd(), part, flags, Mode::empty()) {
            Ok(fd) => fs::File::from(fd),
            Err(nix::errno::Errno::ELOOP) | Err(nix::errno::Errno::ENOTDIR) => {
                return Err(ErrorInfo::new(
                    ErrorKind::BadJob,
                    format!(
                        "the default extensions dir {} is a symlink or not a folder; remove it from the workspace or name extensions_dir explicitly",
                        path.display()
                    ),
                ))
            }
            Err(e) => return Err(bad_path("extensions_dir", &path, e.into())),
        };
        if let (true, Some((uid, gid))) = (made, owner) {
            nix::unistd::fchown(
                dir.as_fd(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(|e| bad_path("extensions_dir", &path, e.into()))?;
        }
        parent = dir;
    }
    Ok(path)
}

/// A host folder the job names (`workspace`, `extensions_dir`), resolved;
/// `default` says what the job gets without it. It must exist: the runner
/// creates only the folders it chooses itself (a fresh workspace, the
/// default extensions dir), never a path from the job, where a typo would
/// otherwise become a new folder anywhere the runner's user may write.
fn named_folder(
    field: &str,
    path: &Path,
    default: &str,
    confined: bool,
) -> Result<PathBuf, ErrorInfo> {
    let real = path.canonicalize().map_err(|e| {
        let why = if e.kind() == io::ErrorKind::NotFound {
            "does not exist".to_owned()
        } else {
            format!("cannot be used ({e})")
        };
        ErrorInfo::new(
            ErrorKind::BadJob,
            format!(
                "{field} {} {why}; create the folder first, or leave {field} out for {default}",
                path.display()
            ),
        )
    })?;
    if confined && real != path {
        return Err(changed(field, path));
    }
    if !real.is_dir() {
        return Err(ErrorInfo::new(
            ErrorKind::BadJob,
            format!("{field} {} is not a folder; name a folder", path.display()),
        ));
    }
    Ok(real)
}

/// A confined path that no longer resolves to itself: a folder on the way
/// was swapped (for a symlink) after the check.
fn changed(field: &str, path: &Path) -> ErrorInfo {
    ErrorInfo::new(
        ErrorKind::BadJob,
        format!(
            "{field} {} changed since it was checked (a folder on the way is now a symlink); name a folder no running command can rename",
            path.display()
        ),
    )
}

/// Creates the data dir private to this user (0700), or makes an existing
/// one of ours private: it holds workspaces, session records and the
/// store, which other local users have no business reading. Everything the
/// runner creates inside is then out of their reach whatever its own mode.
/// With `through` (the sandbox user's group of a root runner), that group
/// may pass through it but not list it (0710): bubblewrap resolves the
/// folders it binds by path, as the sandbox user.
fn private_data_dir(dir: &Path, through: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let hint = "set --data-dir or SKILL_RUNNER_DATA_DIR to a folder this user may create";
    let mode = if through.is_some() { 0o710 } else { 0o700 };
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}; {hint}", parent.display()))?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(format!(
                "cannot create the data dir {}: {e}; {hint}",
                dir.display()
            ))
        }
    }
    let meta = fs::metadata(dir)
        .map_err(|e| format!("cannot use the data dir {}: {e}; {hint}", dir.display()))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(()); // not ours to change
    }
    if let Some(gid) = through.filter(|&g| g != meta.gid()) {
        std::os::unix::fs::chown(dir, None, Some(gid)).map_err(|e| {
            format!(
                "cannot give the data dir {} to group {gid}: {e}; {}",
                dir.display(),
                data_dir_fix(&e)
            )
        })?;
    }
    if meta.mode() & 0o777 != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode)).map_err(|e| {
            format!(
                "cannot make the data dir {} private: {e}; {}",
                dir.display(),
                data_dir_fix(&e)
            )
        })?;
    }
    Ok(())
}

/// What to change when the data dir cannot be given its owner and mode:
/// a read-only file system needs another folder; a root without
/// CAP_CHOWN (a container started with `--cap-drop ALL`) cannot launch as
/// the sandbox user at all.
fn data_dir_fix(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EPERM) {
        "a root runner needs its capabilities (CHOWN, SETUID, SETGID) to launch as the sandbox user: keep the container's default capabilities, or run the runner as a non-root user (docker run --user 1000:1000 with SKILL_RUNNER_DATA_DIR on a folder it owns)"
    } else {
        crate::package::store::DATA_DIR_HINT
    }
}

/// Refuses a folder the sandbox user cannot reach: bubblewrap, started as
/// that user, resolves what it binds by path, so every folder above must
/// let it pass.
#[cfg_attr(target_os = "macos", allow(dead_code))]
fn reachable_by(field: &str, dir: &Path, uid: u32, gid: u32) -> Result<(), ErrorInfo> {
    use std::os::unix::fs::MetadataExt;
    for above in dir.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(above) else {
            continue;
        };
        if !crate::sandbox::identity::may_search(uid, gid, meta.uid(), meta.gid(), meta.mode()) {
            return Err(ErrorInfo::new(
                ErrorKind::SandboxUnavailable,
                format!(
                    "{field} {} cannot be reached by the sandbox user (host uid {uid}, gid {gid}), which a root runner launches bubblewrap as: {} does not let it pass; allow it (chmod o+x {}, or give the folder's group to gid {gid} with g+x), or use folders below ones it may pass",
                    dir.display(),
                    above.display(),
                    above.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a named folder the sandbox user could not write, naming the
/// user and the fix (a root runner launches as that user).
fn writable_by(field: &str, dir: &Path, uid: u32, gid: u32) -> Result<(), ErrorInfo> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).map_err(|e| bad_path(field, dir, e))?;
    if crate::sandbox::identity::may_write(uid, gid, meta.uid(), meta.gid(), meta.mode()) {
        return Ok(());
    }
    Err(ErrorInfo::new(
        ErrorKind::BadJob,
        format!(
            "{field} {} is not writable by the sandbox user (host uid {uid}, gid {gid}), which a root runner launches commands as; give the folder to it (chown -R {uid}:{gid} {}) or set {} to the folder's owner",
            dir.display(),
            dir.display(),
            crate::sandbox::identity::SANDBOX_USER_VAR
        ),
    ))
}

fn bad_path(field: &str, path: &Path, e: io::Error) -> ErrorInfo {
    ErrorInfo::new(
        ErrorKind::BadJob,
        format!("{field} {} cannot be used: {e}", path.display()),
    )
}

/// What the platform's launcher needs besides limits.
struct Launcher {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    env: Vec<(String, String)>,
    fds: Vec<(std::os::fd::OwnedFd, i32)>,
    /// Child fd of the exec shim's report, when the launcher runs it.
    report_fd: Option<i32>,
    /// Child fd of the command's stderr, when apart from the launcher's.
    stderr_fd: Option<i32>,
    new_session: bool,
}

/// The descriptors the sandbox reads at start: seccomp programs and the
/// account files, each in its own sealed memfd (nothing shared).
#[cfg(not(target_os = "macos"))]
fn sandbox_fds(
    filters: &crate::sandbox::seccomp::Filters,
    network: bool,
    accounts: bool,
) -> io::Result<Vec<(std::os::fd::OwnedFd, i32)>> {
    let memfd = |name: &str, bytes: &[u8]| {
        let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
        crate::supervise::sys::sealed_memfd(&name, bytes)
    };
    let mut fds = vec![
        (
            memfd("seccomp-rules", &filters.rules)?,
            bwrap::FD_SECCOMP_RULES,
        ),
        (
            memfd("seccomp-guard", &filters.guard)?,
            bwrap::FD_SECCOMP_GUARD,
        ),
        // What bwrap executes as the exec shim: the small shim, or with a
        // network allowlist the runner's own binary (crate::sandbox::shim).
        (
            crate::sandbox::shim::executable(network)?,
            crate::sandbox::shim::FD_SHIM,
        ),
    ];
    // The account files, unless they are in the prepared /etc.
    if accounts {
        fds.push((memfd("passwd", bwrap::PASSWD.as_bytes())?, bwrap::FD_PASSWD));
        fds.push((memfd("group", bwrap::GROUP.as_bytes())?, bwrap::FD_GROUP));
    }
    Ok(fds)
}

/// `explain --platform macos`: the plan with the per-execution folder
/// shown under `<data-dir>/executions/<id>.RANDOM`.
pub fn explain_macos(
    job: &Job,
    data_dir: &Path,
) -> Result<(seatbelt::Rendered, Vec<String>), macos::MacosError> {
    let exec = data_dir
        .join("executions")
        .join(format!("{}.RANDOM", job.execution_id));
    let workspace = job
        .workspace
        .clone()
        .unwrap_or_else(|| exec.join("workspace"));
    let folders = macos::Folders {
        snapshot_root: exec.join("skills"),
        extensions: job
            .extensions_dir
            .clone()
            .unwrap_or_else(|| workspace.join(bwrap::DEFAULT_EXTENSIONS)),
        workspace,
        tmp: exec.join("tmp"),
        // Chosen at launch; shown as such below.
        proxy_port: job.network.allowlist().map(|_| 1),
    };
    let (mut rendered, argv) = macos::plan(&job.seatbelt_request(), &folders)?;
    let shown = "localhost:<port chosen at launch>";
    for (name, value) in &mut rendered.params {
        if name == seatbelt::PARAM_PROXY_ADDRESS {
            *value = shown.to_owned();
        }
    }
    let argv = argv
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some((name, _)) if name == seatbelt::PARAM_PROXY_ADDRESS => format!("{name}={shown}"),
            _ => a,
        })
        .collect();
    Ok((rendered, argv))
}
