//! One execution, end to end: stage, plan, launch, supervise, report.
//!
//! [`Runner`] holds what is shared by every execution of a process (data
//! dir, store, published snapshot roots, what the host supports) and is
//! immutable after [`Runner::new`], so it can serve concurrent executions.
//! Each execution leases the published snapshot root of its selection
//! (staged and verified the first time it is selected; private per
//! execution on macOS, see [`crate::roots`]) and gets a private folder
//! `<data>/executions/<id>.<random>` (guarded by a lock file, see
//! [`crate::store::PrivateDir`]) that names its cgroup and holds, unless the
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

use crate::alias::{self, Spelling};
use crate::cgroup::{self, Cgroup, Support};
use crate::job::Job;
use crate::launch::{self, BwrapFeatures, Plan};
use crate::package::Limits as PackageLimits;
use crate::profile;
use crate::result::{
    rfc3339, Applied, AppliedLimits, ErrorInfo, ExecResult, SkillsInfo, Status, Usage,
    EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND,
};
use crate::roots::{Lease, Roots, KEEP_ROOTS};
use crate::stage::{Selected, SkillSource};
use crate::store::{PrivateDir, Store};
use crate::supervise::{self, Cancel, OutputPolicy, Sink, Spawn};

/// The sandbox this build launches, as named in results.
#[cfg(target_os = "macos")]
pub const SANDBOX: &str = "seatbelt";
/// The sandbox this build launches, as named in results.
#[cfg(not(target_os = "macos"))]
pub const SANDBOX: &str = "bubblewrap";

/// Settings of a runner process.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub package_limits: PackageLimits,
    /// Keep each execution's private folder after it ends (debugging).
    pub keep: bool,
    /// Keep execution cgroups for reuse (a long-running runner: the
    /// daemon), see [`crate::cgroup::Pool`].
    pub reuse_cgroups: bool,
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

/// The bubblewrap found on this host.
#[derive(Debug, Clone)]
pub struct Bwrap {
    pub path: PathBuf,
    pub version: String,
    pub features: BwrapFeatures,
}

/// Options bwrap must support for our argv.
pub const REQUIRED_BWRAP_OPTIONS: &[&str] = &[
    "--add-seccomp-fd",
    "--json-status-fd",
    "--ro-bind-data",
    "--size",
    "--perms",
    "--clearenv",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "--remount-ro",
];

impl Bwrap {
    /// Finds bwrap on PATH and checks its options by running it.
    pub fn find() -> Result<Bwrap, String> {
        Bwrap::probe(&Bwrap::locate()?)
    }

    fn locate() -> Result<PathBuf, String> {
        which::which("bwrap").map_err(|_| {
            "bubblewrap (bwrap) is not installed or not on PATH; install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)".to_owned()
        })
    }

    /// Like [`Bwrap::find`], but remembers the answer in `cache_dir` for
    /// as long as the binary at that path is the same file (inode, size,
    /// modification time): probing costs two process starts per run.
    pub fn find_cached(cache_dir: &Path) -> Result<Bwrap, String> {
        use std::os::unix::fs::MetadataExt;
        let path = Bwrap::locate()?;
        let meta =
            fs::metadata(&path).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
        let key = format!(
            "{}\n{}:{}:{}:{}",
            path.display(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        );
        let cache = cache_dir.join("bwrap-probe");
        if let Ok(text) = fs::read_to_string(&cache) {
            let mut lines = text.lines();
            let cached_key = format!(
                "{}\n{}",
                lines.next().unwrap_or(""),
                lines.next().unwrap_or("")
            );
            if cached_key == key {
                let disable_userns = lines.next() == Some("disable-userns");
                let version = lines.next().unwrap_or("").to_owned();
                return Ok(Bwrap {
                    path,
                    version,
                    features: BwrapFeatures { disable_userns },
                });
            }
        }
        let found = Bwrap::probe(&path)?;
        let text = format!(
            "{key}\n{}\n{}\n",
            if found.features.disable_userns {
                "disable-userns"
            } else {
                "-"
            },
            found.version
        );
        // Best effort: without a cache the next run probes again.
        let _ = crate::fsx::write_replace(&cache, text.as_bytes());
        Ok(found)
    }

    fn probe(path: &Path) -> Result<Bwrap, String> {
        let path = path.to_owned();
        let run = |arg: &str| -> Result<String, String> {
            let out = std::process::Command::new(&path)
                .arg(arg)
                .output()
                .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
            Ok(String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr))
        };
        let version = run("--version")?.trim().to_owned();
        let help = run("--help")?;
        let has = |opt: &str| help.split_whitespace().any(|w| w == opt);
        let missing: Vec<&str> = REQUIRED_BWRAP_OPTIONS
            .iter()
            .copied()
            .filter(|o| !has(o))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} ({version}) lacks {}; install bubblewrap 0.5 or newer",
                path.display(),
                missing.join(", ")
            ));
        }
        Ok(Bwrap {
            version,
            features: BwrapFeatures {
                disable_userns: has("--disable-userns"),
            },
            path,
        })
    }
}

/// What this host offers, probed once.
#[derive(Debug, Clone)]
pub struct Host {
    pub bwrap: Result<Bwrap, String>,
    pub cgroups: Support,
    pub userns: Result<(), String>,
}

impl Host {
    /// Probes the host; the bwrap probe is cached under `cache_dir`.
    pub fn probe(cache_dir: &Path) -> Host {
        Host {
            bwrap: Bwrap::find_cached(cache_dir),
            cgroups: Support::detect(),
            userns: userns_available(),
        }
    }
}

/// Whether this process can create user namespaces (bwrap needs one).
pub fn userns_available() -> Result<(), String> {
    let read = |p: &str| fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Err("user namespaces are disabled (user.max_user_namespaces = 0); enable them with sysctl -w user.max_user_namespaces=15000".into());
    }
    if !nix::unistd::geteuid().is_root() {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Err("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0); enable them or run as root".into());
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Err("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); allow bwrap in an AppArmor profile or run as root".into());
        }
    }
    Ok(())
}

/// Shared state of a runner process.
#[derive(Debug)]
pub struct Runner {
    pub config: Config,
    pub store: Store,
    pub roots: Roots,
    pub host: Host,
    executions: PathBuf,
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
    pub fn new(config: Config) -> Result<Runner, String> {
        let started = std::time::Instant::now();
        let store = Store::open(&config.data_dir).map_err(|e| e.to_string())?;
        let roots = Roots::open(&config.data_dir).map_err(|e| {
            format!(
                "cannot create {}: {e}",
                config.data_dir.join("roots").display()
            )
        })?;
        let executions = config.data_dir.join("executions");
        fs::create_dir_all(&executions)
            .map_err(|e| format!("cannot create {}: {e}", executions.display()))?;
        let mut host = Host::probe(&config.data_dir.join("cache"));
        // One cgroup folder per data dir, so a sweep never touches the
        // executions of a runner with another data dir.
        let canonical = config
            .data_dir
            .canonicalize()
            .unwrap_or_else(|_| config.data_dir.clone());
        let tag = crate::hash::file_hash(canonical.as_os_str().as_encoded_bytes());
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
        let removed = crate::store::sweep_locked_dirs(&self.executions).unwrap_or(0)
            + self.roots.sweep(KEEP_ROOTS);
        // An execution's cgroup is named after its folder; a pooled one
        // `<owner>+<n>` after `<data>/cgroups/<owner>`, which its runner
        // keeps locked while it lives.
        let owners = self.config.data_dir.join("cgroups");
        cgroup::sweep(&self.host.cgroups, &|name| {
            let lock = match name.split_once('+') {
                Some((owner, _)) => owners.join(format!("{owner}.lock")),
                None => self.executions.join(format!("{name}.lock")),
            };
            crate::fsx::is_locked(&lock)
        });
        removed + crate::store::sweep_locked_dirs(&owners).unwrap_or(0)
    }

    /// Runs a validated job to completion. Never panics on bad input;
    /// every failure is a result with `status` and `error`.
    pub fn run(&self, job: &Job, opts: RunOptions<'_>) -> ExecResult {
        let span = tracing::info_span!("execution", id = %job.execution_id);
        let _guard = span.enter();
        match self.prepare(job) {
            Err(error) => {
                tracing::info!(kind = %error.kind, "rejected: {}", error.message);
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
            .map_err(|m| ErrorInfo::new("sandbox_unavailable", m))?;
        self.host
            .userns
            .clone()
            .map_err(|m| ErrorInfo::new("sandbox_unavailable", m))?;
        Ok(Some(bwrap))
    }

    /// Checks that this host can start the platform's sandbox.
    #[cfg(target_os = "macos")]
    fn launcher_available(&self) -> Result<Option<Bwrap>, ErrorInfo> {
        if Path::new(seatbelt::SANDBOX_EXEC).exists() {
            Ok(None)
        } else {
            Err(ErrorInfo::new(
                "sandbox_unavailable",
                format!("{} is missing; it ships with macOS", seatbelt::SANDBOX_EXEC),
            ))
        }
    }

    /// Everything before the launch: checks, staging, folders.
    fn prepare(&self, job: &Job) -> Result<Prepared, ErrorInfo> {
        // The folders the job names exist, or nothing else is done.
        let named_workspace = job
            .workspace
            .as_deref()
            .map(|w| named_folder("workspace", w, "a fresh empty one"))
            .transpose()?;
        let named_extensions = job
            .extensions_dir
            .as_deref()
            .map(|e| named_folder("extensions_dir", e, "the default in the workspace"))
            .transpose()?;
        let bwrap = self.launcher_available()?;
        let dir = PrivateDir::create_named(&self.executions, &format!("{}.", job.execution_id))
            .map_err(|e| {
                ErrorInfo::new(
                    "staging_failed",
                    format!("cannot create the execution folder: {e}"),
                )
            })?;
        let mut dir = dir;
        dir.keep = self.config.keep;

        let selected = self.select(job)?;
        let staging_started = std::time::Instant::now();
        // Shared where a read-only mount protects it, private otherwise.
        #[cfg(not(target_os = "macos"))]
        let lease = self.roots.acquire(&selected, &self.config.package_limits);
        #[cfg(target_os = "macos")]
        let lease = crate::roots::stage_private(
            &selected,
            &dir.path.join("skills"),
            &self.config.package_limits,
        );
        let lease = lease.map_err(|e| ErrorInfo::new(e.kind(), e.to_string()))?;
        let staging = staging_started.elapsed();

        let (workspace, fresh) = match named_workspace {
            Some(w) => (w, false),
            None => {
                let w = dir.path.join("workspace");
                fs::create_dir(&w).map_err(|e| bad_path("workspace", &w, e))?;
                (w, true)
            }
        };
        let extensions = match named_extensions {
            Some(e) => e,
            // The default lives in the workspace, which earlier commands
            // could write: it must be a real folder below it, never a
            // symlink planted to get a host folder mounted writable.
            None if fresh => {
                // Our own new, empty workspace: nothing in it to check.
                let e = workspace.join(DEFAULT_EXTENSIONS);
                fs::create_dir_all(&e).map_err(|err| bad_path("extensions_dir", &e, err))?;
                e
            }
            None => default_extensions_dir(&workspace)?,
        };
        // The cwd must be a folder inside the workspace after resolving
        // symlinks: a symlink in the workspace must not lead it elsewhere.
        if !job.cwd.is_empty() {
            let cwd = workspace.join(&job.cwd);
            let real = cwd.canonicalize().map_err(|_| {
                ErrorInfo::new(
                    "bad_job",
                    format!("cwd {:?} does not exist in the workspace", job.cwd),
                )
            })?;
            if !real.starts_with(&workspace) || !real.is_dir() {
                return Err(ErrorInfo::new(
                    "bad_job",
                    format!("cwd {:?} leaves the workspace or is not a folder", job.cwd),
                ));
            }
        }
        Ok(Prepared {
            dir,
            lease,
            staging,
            workspace,
            extensions,
            bwrap,
        })
    }

    /// Resolves each skill of the job to the source of its bytes. A job
    /// naming a session gets the session's frozen bindings, from the store.
    fn select(&self, job: &Job) -> Result<Vec<Selected>, ErrorInfo> {
        if let Some(id) = &job.session {
            let bindings = crate::session::Sessions::new(&self.config.data_dir)
                .bindings(id)
                .map_err(|e| ErrorInfo::new("bad_job", e.to_string()))?;
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
                                "bad_job",
                                format!(
                                    "skill {:?}: cannot open its folder {}: {e}",
                                    s.binding.id,
                                    p.display()
                                ),
                            )
                        })?;
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
    pub fn plan_args(
        job: &Job,
        bwrap: &Bwrap,
        snapshot_root: &Path,
        workspace: &Path,
        extensions: &Path,
    ) -> Result<Vec<std::ffi::OsString>, ErrorInfo> {
        let mounts = job.profile.resolve_mounts(profile::host_entry);
        let argv = alias::rewrite_argv(&job.argv, Spelling::Sandbox)
            .map_err(|e| ErrorInfo::new("bad_job", e.to_string()))?;
        let env = launch::environment(&job.env);
        Ok(launch::bwrap_args(&Plan {
            mounts: &mounts,
            snapshot_root,
            extensions,
            workspace,
            cwd: &job.cwd,
            env: &env,
            argv: &argv,
            tmp_bytes: job.limits.tmp_bytes,
            features: bwrap.features,
        }))
    }

    /// bubblewrap: the argv, the seccomp programs and account files on fds.
    #[cfg(not(target_os = "macos"))]
    fn launcher(&self, job: &Job, p: &Prepared) -> Result<Launcher, ErrorInfo> {
        let bwrap = p
            .bwrap
            .as_ref()
            .ok_or_else(|| ErrorInfo::new("sandbox_unavailable", "bubblewrap was not found"))?;
        let args = Runner::plan_args(
            job,
            bwrap,
            &p.lease.snapshot.root,
            &p.workspace,
            &p.extensions,
        )?;
        let filters = crate::seccomp::compile(&job.profile, job.network)
            .map_err(|e| ErrorInfo::new("sandbox_unavailable", e.to_string()))?;
        let fds = sandbox_fds(&filters).map_err(|e| {
            ErrorInfo::new(
                "sandbox_unavailable",
                format!("cannot prepare the sandbox's descriptors: {e}"),
            )
        })?;
        Ok(Launcher {
            program: bwrap.path.clone(),
            args,
            env: Vec::new(),
            fds,
            status_fd: Some(launch::FD_STATUS),
            new_session: false, // bwrap --new-session
        })
    }

    /// Seatbelt: `/usr/bin/sandbox-exec` with the rendered profile; the
    /// environment holds host paths.
    #[cfg(target_os = "macos")]
    fn launcher(&self, job: &Job, p: &Prepared) -> Result<Launcher, ErrorInfo> {
        let tmp = p.dir.path.join("tmp");
        fs::create_dir_all(&tmp).map_err(|e| bad_path("tmp", &tmp, e))?;
        let folders = crate::macos::Folders {
            snapshot_root: p.lease.snapshot.root.clone(),
            workspace: p.workspace.clone(),
            extensions: p.extensions.clone(),
            tmp,
        };
        let bad =
            |e: crate::macos::MacosError| ErrorInfo::new("sandbox_unavailable", e.to_string());
        let (_, argv) = crate::macos::plan(job, &folders).map_err(bad)?;
        let env = crate::macos::environment(job, &folders).map_err(bad)?;
        let mut argv = argv.into_iter();
        let program = PathBuf::from(argv.next().unwrap_or_default());
        Ok(Launcher {
            program,
            args: argv.map(Into::into).collect(),
            env,
            fds: Vec::new(),
            status_fd: None,
            new_session: true,
        })
    }

    fn launch(&self, job: &Job, p: Prepared, opts: RunOptions<'_>) -> ExecResult {
        let rejected = |e: ErrorInfo| ExecResult::rejected(&job.execution_id, SANDBOX, e);
        let launch = match self.launcher(job, &p) {
            Ok(l) => l,
            Err(e) => return rejected(e),
        };
        let l = job.limits;
        let cg_name = p
            .dir
            .path
            .file_name()
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
                        "sandbox_unavailable",
                        format!("cannot create the execution's cgroup: {e}"),
                    ))
                }
            },
        };
        let cgroup_procs = match cgroup.as_ref().map(Cgroup::procs_files).transpose() {
            Ok(f) => f.unwrap_or_default(),
            Err(e) => {
                return rejected(ErrorInfo::new(
                    "sandbox_unavailable",
                    format!("cannot open the execution's cgroup: {e}"),
                ))
            }
        };
        let (rlimits, applied) = limits_plan(&l, cgroup.as_ref(), cg_note);

        let program = launch.program.clone();
        let spawn = Spawn {
            program: launch.program,
            args: launch.args,
            env: launch.env,
            fds: launch.fds,
            rlimits,
            cgroup_procs,
            stdin: job.stdin.clone(),
            status_fd: launch.status_fd,
            new_session: launch.new_session,
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
            opts.cancel.as_deref(),
        );
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                return rejected(ErrorInfo::new(
                    "sandbox_unavailable",
                    format!("cannot start {}: {e}", program.display()),
                ))
            }
        };
        tracing::debug!("supervised");
        let memory_hit = cgroup.as_ref().is_some_and(Cgroup::memory_exceeded);
        let pids_hit = cgroup.as_ref().is_some_and(Cgroup::pids_exceeded);
        let peak = cgroup.as_ref().and_then(Cgroup::peak_memory);
        // Kills stragglers; removes the cgroup or keeps it for reuse.
        match (cgroup, &self.cgroups) {
            (Some(cg), Some((pool, _))) => pool.give(cg),
            (cg, _) => drop(cg),
        }
        tracing::debug!("cgroup removed");
        let finished_at = outcome.started_at + outcome.duration;

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
            started_at: rfc3339(outcome.started_at),
            finished_at: rfc3339(finished_at),
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
            error: None,
            warnings: p.lease.snapshot.warnings.clone(),
        };
        classify(&mut result, &outcome, &l, memory_hit, pids_hit);
        tracing::info!(status = ?result.status, code = ?result.exit_code, ms = result.duration_ms, "finished");
        drop(p.dir);
        result
    }

    /// What `explain` prints: the bwrap argv for a job, with the
    /// per-execution folder shown as `<data-dir>/executions/<id>.<random>`
    /// and the published snapshot root as `<data-dir>/roots/<identity>`.
    /// Touches nothing: no data dir, no staging.
    pub fn explain(job: &Job) -> Result<(PathBuf, Vec<std::ffi::OsString>), ErrorInfo> {
        let bwrap = Bwrap::find().unwrap_or(Bwrap {
            path: PathBuf::from("bwrap"),
            version: String::new(),
            features: BwrapFeatures {
                disable_userns: true,
            },
        });
        let exec = PathBuf::from(format!(
            "<data-dir>/executions/{}.<random>",
            job.execution_id
        ));
        let workspace = job
            .workspace
            .clone()
            .unwrap_or_else(|| exec.join("workspace"));
        let extensions = job
            .extensions_dir
            .clone()
            .unwrap_or_else(|| workspace.join(".sciencediscovery/skill-extensions"));
        // The published root of the job's pins (a session's pins are only
        // known to a runner with a data dir).
        let identity = if job.session.is_some() {
            "<identity>".to_owned()
        } else {
            let pins: Vec<_> = job.skills.iter().map(|s| s.binding.clone()).collect();
            crate::hash::set_identity(&pins)
        };
        let root = PathBuf::from(format!("<data-dir>/roots/{identity}/skills"));
        let args = Runner::plan_args(job, &bwrap, &root, &workspace, &extensions)?;
        Ok((bwrap.path, args))
    }
}

struct Prepared {
    dir: PrivateDir,
    /// The published snapshot root, locked for this execution.
    lease: Lease,
    /// Time spent finding, or staging and publishing, the snapshot root.
    staging: Duration,
    workspace: PathBuf,
    extensions: PathBuf,
    /// The bwrap to use (Linux); `None` under Seatbelt.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    bwrap: Option<Bwrap>,
}

/// Where the extensions dir is by default, relative to the workspace.
const DEFAULT_EXTENSIONS: &str = ".sciencediscovery/skill-extensions";

/// `<workspace>/.sciencediscovery/skill-extensions`, created one component
/// at a time without following symlinks.
fn default_extensions_dir(workspace: &Path) -> Result<PathBuf, ErrorInfo> {
    let mut dir = workspace.to_owned();
    for part in [".sciencediscovery", "skill-extensions"] {
        dir.push(part);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(bad_path("extensions_dir", &dir, e)),
        }
        let meta = fs::symlink_metadata(&dir).map_err(|e| bad_path("extensions_dir", &dir, e))?;
        if !meta.is_dir() {
            return Err(ErrorInfo::new(
                "bad_job",
                format!(
                    "the default extensions dir {} is a symlink or not a folder; remove it from the workspace or name extensions_dir explicitly",
                    dir.display()
                ),
            ));
        }
    }
    Ok(dir)
}

/// A host folder the job names (`workspace`, `extensions_dir`), resolved;
/// `default` says what the job gets without it. It must exist: the runner
/// creates only the folders it chooses itself (a fresh workspace, the
/// default extensions dir), never a path from the job, where a typo would
/// otherwise become a new folder anywhere the runner's user may write.
fn named_folder(field: &str, path: &Path, default: &str) -> Result<PathBuf, ErrorInfo> {
    let real = path.canonicalize().map_err(|e| {
        let why = if e.kind() == io::ErrorKind::NotFound {
            "does not exist".to_owned()
        } else {
            format!("cannot be used ({e})")
        };
        ErrorInfo::new(
            "bad_job",
            format!(
                "{field} {} {why}; create the folder first, or leave {field} out for {default}",
                path.display()
            ),
        )
    })?;
    if !real.is_dir() {
        return Err(ErrorInfo::new(
            "bad_job",
            format!("{field} {} is not a folder; name a folder", path.display()),
        ));
    }
    Ok(real)
}

fn bad_path(field: &str, path: &Path, e: io::Error) -> ErrorInfo {
    ErrorInfo::new(
        "bad_job",
        format!("{field} {} cannot be used: {e}", path.display()),
    )
}

/// What the platform's launcher needs besides limits.
struct Launcher {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    env: Vec<(String, String)>,
    fds: Vec<(std::os::fd::OwnedFd, i32)>,
    status_fd: Option<i32>,
    new_session: bool,
}

/// The descriptors the sandbox reads at start: seccomp programs and the
/// account files, each in its own sealed memfd (nothing shared).
#[cfg(not(target_os = "macos"))]
fn sandbox_fds(filters: &crate::seccomp::Filters) -> io::Result<Vec<(std::os::fd::OwnedFd, i32)>> {
    let memfd = |name: &str, bytes: &[u8]| {
        let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
        crate::sys::sealed_memfd(&name, bytes)
    };
    Ok(vec![
        (
            memfd("seccomp-rules", &filters.rules)?,
            launch::FD_SECCOMP_RULES,
        ),
        (
            memfd("seccomp-guard", &filters.guard)?,
            launch::FD_SECCOMP_GUARD,
        ),
        (
            memfd("passwd", launch::PASSWD.as_bytes())?,
            launch::FD_PASSWD,
        ),
        (memfd("group", launch::GROUP.as_bytes())?, launch::FD_GROUP),
    ])
}

type Rlimits = Vec<(nix::sys::resource::Resource, u64, u64)>;

/// Chooses the mechanism for each limit.
fn limits_plan(
    l: &crate::job::Limits,
    cg: Option<&Cgroup>,
    cg_note: Option<String>,
) -> (Rlimits, AppliedLimits) {
    use nix::sys::resource::Resource;
    let mut r: Rlimits = vec![
        (Resource::RLIMIT_CORE, 0, 0),
        (Resource::RLIMIT_FSIZE, l.file_size_bytes, l.file_size_bytes),
        (Resource::RLIMIT_NOFILE, l.open_files, l.open_files),
    ];
    let cg_name = cg.map(|c| c.version().name());
    let memory = match cg_name.filter(|_| cg.is_some_and(Cgroup::limits_memory)) {
        Some(name) => Applied::by(Some(l.memory_bytes), name),
        // macOS accepts RLIMIT_AS but does not enforce it: say so.
        None if cfg!(target_os = "macos") => Applied {
            value: Some(l.memory_bytes),
            enforced_by: "none",
            note: Some("macOS has no cgroups and does not enforce RLIMIT_AS".into()),
        },
        None => {
            r.push((Resource::RLIMIT_AS, l.memory_bytes, l.memory_bytes));
            Applied {
                value: Some(l.memory_bytes),
                enforced_by: "rlimit",
                note: Some(format!(
                    "RLIMIT_AS per process (address space, not resident memory){}",
                    cg_note
                        .as_ref()
                        .map(|n| format!("; no cgroup: {n}"))
                        .unwrap_or_default()
                )),
            }
        }
    };
    let pids = match cg_name.filter(|_| cg.is_some_and(Cgroup::limits_pids)) {
        Some(name) => Applied::by(Some(l.pids), name),
        #[cfg(target_os = "linux")]
        None if !nix::unistd::geteuid().is_root() => {
            r.push((Resource::RLIMIT_NPROC, l.pids, l.pids));
            Applied {
                value: Some(l.pids),
                enforced_by: "rlimit",
                note: Some(
                    "RLIMIT_NPROC counts every process of this user, not only the sandbox's".into(),
                ),
            }
        }
        None => Applied {
            value: Some(l.pids),
            enforced_by: "none",
            note: Some(if cfg!(target_os = "linux") {
                "no pids cgroup, and RLIMIT_NPROC does not bind root".into()
            } else {
                "no cgroups on this OS; RLIMIT_NPROC would count every process of the user".into()
            }),
        },
    };
    let cpu = match l.cpu_ms {
        Some(ms) => {
            let secs = ms.div_ceil(1000);
            r.push((Resource::RLIMIT_CPU, secs, secs + 1));
            Applied {
                value: Some(ms),
                enforced_by: "rlimit",
                note: Some(format!("RLIMIT_CPU per process, rounded up to {secs} s")),
            }
        }
        None => Applied::by(None, "none"),
    };
    (
        r,
        AppliedLimits {
            timeout_ms: Applied::by(Some(l.timeout_ms), "supervisor"),
            output_bytes: Applied::by(Some(l.output_bytes), "supervisor"),
            memory_bytes: memory,
            pids,
            cpu_ms: cpu,
            file_size_bytes: Applied::by(Some(l.file_size_bytes), "rlimit"),
            tmp_bytes: Applied::by(Some(l.tmp_bytes), "tmpfs"),
            open_files: Applied::by(Some(l.open_files), "rlimit"),
        },
    )
}

/// Sets status, codes and error from how the launcher ended.
fn classify(
    r: &mut ExecResult,
    o: &supervise::Outcome,
    l: &crate::job::Limits,
    memory_hit: bool,
    pids_hit: bool,
) {
    // bwrap reports the command's end as an exit code: N, or 128+N when
    // the command was killed by signal N.
    let (code, signal) = match o.status {
        Ok(c) if c > 128 && c < 128 + 65 => (None, Some(c - 128)),
        Ok(c) => (Some(c), None),
        Err(sig) => (None, Some(sig)),
    };
    r.exit_code = code;
    r.signal = signal;
    let stderr_tail = String::from_utf8_lossy(&o.stderr.tail);
    if o.cancelled {
        r.status = Status::Cancelled;
        r.error = Some(ErrorInfo::new(
            "cancelled",
            "the execution was cancelled and its sandbox killed",
        ));
    } else if o.timed_out {
        r.status = Status::TimedOut;
        r.error = Some(ErrorInfo::new(
            "timed_out",
            format!(
                "the command ran past timeout_ms ({}) and its sandbox was killed",
                l.timeout_ms
            ),
        ));
    } else if !o.started {
        r.status = Status::Failed;
        r.exit_code = Some(crate::result::EXIT_RUNNER);
        r.signal = None;
        let msg = stderr_tail
            .lines()
            .rev()
            .find(|l| l.starts_with("bwrap:"))
            .unwrap_or("bwrap exited before starting the command")
            .to_owned();
        r.error = Some(ErrorInfo::new(
            "sandbox_failed",
            format!("bubblewrap could not set up the sandbox ({msg}); run skill-runner doctor"),
        ));
    } else if let Some(line) = (code == Some(1))
        .then(|| {
            stderr_tail
                .lines()
                .rev()
                .find(|l| l.starts_with("bwrap: execvp "))
                .map(str::to_owned)
        })
        .flatten()
    {
        let not_executable = line.contains("Permission denied");
        r.status = Status::Failed;
        r.exit_code = Some(if not_executable {
            EXIT_NOT_EXECUTABLE
        } else {
            EXIT_NOT_FOUND
        });
        r.error = Some(ErrorInfo::new(
            if not_executable { "not_executable" } else { "not_found" },
            format!(
                "the command could not be started ({}); argv[0] is looked up in PATH=/usr/bin:/bin inside the sandbox, and staged files are 0444, so run scripts through their interpreter",
                line.trim_start_matches("bwrap: ")
            ),
        ));
    } else {
        let mut hit: Vec<&str> = Vec::new();
        if memory_hit {
            hit.push("memory_bytes");
        }
        if pids_hit {
            hit.push("pids");
        }
        match signal {
            Some(s) if s == libc::SIGXCPU => hit.push("cpu_ms"),
            Some(s) if s == libc::SIGXFSZ => hit.push("file_size_bytes"),
            // RLIMIT_CPU's hard limit ends in SIGKILL.
            Some(s)
                if s == libc::SIGKILL
                    && !memory_hit
                    && o.cpu_ms >= l.cpu_ms.unwrap_or(u64::MAX) =>
            {
                hit.push("cpu_ms")
            }
            _ => {}
        }
        if !hit.is_empty() {
            r.status = Status::LimitExceeded;
            r.error = Some(ErrorInfo::new(
                "limit_exceeded",
                format!("the command passed its {} limit", hit.join(" and ")),
            ));
        } else if signal.is_some() {
            r.status = Status::Signaled;
        } else {
            r.status = Status::Exited;
        }
    }
}
