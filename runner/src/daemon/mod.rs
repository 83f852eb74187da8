//! The daemon: `skill-runner serve`, the HTTP API of docs/daemon.md.
//!
//! One process, one [`Runner`] shared by every execution (it is immutable
//! and thread-safe). Each execution runs [`Runner::run`] on a blocking
//! thread of its own for its whole life: bubblewrap's `--die-with-parent`
//! is tied to the thread that forked it, so that thread must outlive the
//! sandbox, and it does, because `run` returns only when the sandbox is
//! gone. If the daemon itself dies (even SIGKILL), every sandbox dies with
//! it, and the next start sweeps the per-execution folders left behind
//! ([`Runner::new`]).
//!
//! | module | concept |
//! |---|---|
//! | [`config`] | settings: flags, environment, file; validated once |
//! | [`auth`] | bearer token, constant-time check |
//! | [`app`] | shared state, the API error and its one status mapping, request readers |
//! | [`registry`] | admission, queue, cancel by id, retained results |
//! | [`events`] | an execution's event log and its shared result document |
//! | [`stream`] | the output sink and the NDJSON event streams |
//! | [`metrics`] | Prometheus text, from one table of families |
//! | [`notify`] | systemd readiness, watchdog and stopping notices |
//! | [`wire`] | the response bodies, field by field |
//! | [`routes`] | the execution and package routes |
//! | [`selfcheck`] | the sandbox verdict health answers from |
//! | [`sessions`] | the skill-host routes, tool calls, session expiry |
//! | [`workspace`] | the order of managed session workspaces: one job at a time, in order of admission |
//! | [`session_files`] | the file routes of managed session workspaces |
//! | [`store`] | the durable record of every execution (docs/durability.md) |
//! | [`server`] | listening, connections, signals, graceful shutdown |
//! | [`trace`] | OpenTelemetry spans of executions, exported over OTLP/HTTP |
//!
//! See `docs/daemon.md` for the user's view.

pub mod app;
pub mod auth;
pub mod config;
pub mod descriptors;
pub mod env_error;
pub mod environments;
pub mod events;
pub mod mcp;
pub mod mcp_sessions;
pub mod metrics;
pub mod notify;
pub mod outputs;
#[cfg(target_os = "linux")]
pub mod prepared;
pub mod pulls;
pub mod receipts;
pub mod registry;
pub mod routes;
pub mod selfcheck;
pub mod server;
pub mod session_files;
pub mod sessions;
pub mod store;
pub mod stream;
pub mod trace;
pub mod wire;
pub mod workspace;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

/// Session requests (creation, tool calls) whose bodies, each up to the
/// job body limit, are read at once; more wait, then get 429.
pub const SESSION_BODIES: usize = 4;

pub use config::{Config, ConfigError, LogFormat, ServeArgs};

use crate::exec::{self, Runner};
use crate::package::format::PackageLimits;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the data dir: {0}")]
    Runner(String),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Runs the daemon until SIGTERM or SIGINT. `data_dir` is the global
/// `--data-dir` flag (or `SKILL_RUNNER_DATA_DIR`). Installs the global
/// `tracing` subscriber.
pub fn serve(args: ServeArgs, data_dir: Option<PathBuf>) -> Result<(), DaemonError> {
    limit_malloc_arenas();
    // Before the settings are sized from it (descriptors.rs).
    let nofile = descriptors::raise();
    let early_format = args.log_format;
    let config = match Config::build(args, data_dir, std::env::var("SKILL_RUNNER_TOKEN").ok()) {
        Ok(c) => c,
        Err(e) => {
            init_logging(early_format.unwrap_or_default(), None);
            return Err(e.into());
        }
    };
    init_logging(config.log_format, config.otlp.clone());
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let runner = Runner::new(exec::RunnerConfig {
        data_dir: config.data.path().to_owned(),
        package_limits: PackageLimits {
            max_bundle_skills: config.max_bundle_skills,
            ..PackageLimits::default()
        },
        keep: false,
        reuse_cgroups: true,
        strict_limits: config.strict_limits,
        network: config.network.clone(),
        files: config.files,
    })
    .map_err(|e| DaemonError::Runner(e.to_string()))?;
    let mut runner = runner;
    receipts::sign_with(&mut runner, &config).map_err(|e| DaemonError::Runner(e.to_string()))?;
    // Leftovers of deleted data dirs: once per daemon start, not per run.
    crate::supervise::cgroup::sweep_others(&runner.host.cgroups);
    if let Err(m) = runner.host.bwrap.as_ref().and(runner.host.userns.as_ref()) {
        tracing::warn!("the sandbox is unavailable, executions will be refused (503): {m}");
    }
    // bubblewrap starts in a namespace holding only what sandboxes bind
    // (docs/template.md); before the self-check, which then tries it.
    #[cfg(target_os = "linux")]
    if std::env::var_os("SKILL_RUNNER_NO_TEMPLATE").is_none_or(|v| v.is_empty()) {
        let mut roots = vec![config.data.path().to_owned()];
        roots.extend(config.roots.iter().cloned());
        match crate::sandbox::template::enable(&roots) {
            Ok(()) => tracing::debug!("bubblewrap starts in the daemon's template mount namespace"),
            Err(e) => tracing::info!("bubblewrap starts in the daemon's own mount namespace: no template namespace can be made here ({e})"),
        }
    }
    // A real job's sandbox, before listening: health answers from this
    // verdict (refreshed every minute), and a failure is said now.
    let verdict = selfcheck::Verdict::take(&runner);
    if let Err(reason) = &verdict.result {
        tracing::warn!("the sandbox a job gets cannot be set up here; every execution will fail and health answers 503: {reason}");
    }
    let selfcheck = selfcheck::SelfCheck::new(verdict);
    tracing::info!(
        data_dir = %config.data.path().display(),
        roots = ?config.roots,
        max_running = config.max_running,
        max_queued = config.max_queued,
        nofile,
        max_proxy_connections = config.descriptors.proxy_connections,
        token = config.token.is_some(),
        "starting"
    );

    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut catalog =
        crate::skillhost::catalog::CatalogConfig::from_env(&cwd, home.as_deref(), &config.data);
    // A catalog folder a sandbox could write (inside a job root, where
    // workspaces live, or holding one) would let a command plant skills
    // that later sessions load: such folders are not read.
    for dirs in [&mut catalog.user_dirs, &mut catalog.project_dirs] {
        dirs.retain(|dir| {
            let real = dir.canonicalize().unwrap_or_else(|_| dir.clone());
            let writable = config
                .roots
                .iter()
                .any(|r| real.starts_with(r) || r.starts_with(&real));
            if writable {
                tracing::warn!(
                    folder = %dir.display(),
                    "not reading this catalog folder: jobs may write there (it overlaps a job root); start the daemon elsewhere or move the root"
                );
            }
            !writable
        });
    }
    // Managed workspaces belong to the sandbox user (docs/workspaces.md).
    let owner = runner
        .host
        .identity
        .as_ref()
        .ok()
        .and_then(|i| i.switch_to());
    let sessions = Arc::new(
        crate::skillhost::session::SessionHost::open(&config.data, catalog)
            .map_err(|e| DaemonError::Runner(e.to_string()))?
            .with_workspace_owner(owner),
    );
    let lanes = workspace::Lanes::new();
    let registry = open_registry(&config, &runner)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("skill-runner-daemon")
        .build()
        .map_err(DaemonError::Runtime)?;
    let result = rt.block_on(async {
        let (listener, socket) = server::bind(&config.listen)?;
        trace::spawn_exporter();
        let runner = Arc::new(runner);
        tokio::spawn(
            selfcheck
                .clone()
                .refresh(runner.clone(), selfcheck::REFRESH),
        );
        let metrics = Arc::new(metrics::Metrics::default());
        #[cfg(target_os = "linux")]
        let prepared = prepared::Pool::new(config.prepared, runner.clone(), metrics.clone());
        let pulls = Arc::new(pulls::Pulls::new(
            runner.clone(),
            config.pulls.clone(),
            metrics.clone(),
        ));
        let app = app::App::new(app::AppInner {
            runner,
            selfcheck,
            registry,
            metrics,
            #[cfg(target_os = "linux")]
            prepared,
            roots: crate::exec::confine::Confinement::new(
                config.roots.clone(),
                crate::exec::confine::Gate::Daemon,
            ),
            uploads: Arc::new(Semaphore::new(config.max_uploads)),
            session_bodies: Arc::new(Semaphore::new(SESSION_BODIES)),
            sessions,
            lanes,
            downloads: Arc::new(Semaphore::new(config.max_downloads)),
            pulls,
            mcp: mcp_sessions::Sessions::new(config.mcp_sessions, mcp::keep_alive(&config)),
            config,
        });
        sessions::spawn_sweep(app.clone());
        if let Some(interval) = notify::watchdog_interval() {
            tokio::spawn(notify::watchdog(
                interval,
                watchdog_check(app.registry.clone()),
            ));
        }
        #[cfg(target_os = "linux")]
        let pool = app.prepared.clone();
        let served = server::run(listener, app).await;
        #[cfg(target_os = "linux")]
        pool.shutdown();
        drop(socket);
        served
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    if result.is_ok() {
        tracing::info!("stopped");
    }
    result.map_err(DaemonError::from)
}

/// The watchdog's health check: the registry answers from a blocking
/// thread (its lock is a plain mutex), so a lock that never comes free
/// or a runtime that runs nothing more stops the pings.
fn watchdog_check(
    registry: Arc<registry::Registry>,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    move || {
        let registry = registry.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let _ = registry.counts();
            })
            .await
            .is_ok()
        })
    }
}

/// The registry of executions, with what the store held: finished ones
/// answer as before the restart, unfinished ones become `interrupted`
/// (docs/durability.md).
fn open_registry(config: &Config, runner: &Runner) -> Result<Arc<registry::Registry>, DaemonError> {
    let path = store::Store::file(&config.data.state());
    let (store, stored) = store::Store::open(&path)?;
    let held = stored.len();
    let kept = registry::Kept {
        root: config.data.outputs(),
        budget: runner.kept_budget().clone(),
        taken: Default::default(),
    };
    let (registry, interrupted) = registry::Registry::with_store(
        config.max_running,
        config.max_queued,
        config.retention,
        store,
        stored,
        &kept,
    )?;
    kept.sweep(&registry.kept_dirs());
    tracing::info!(
        path = %path.display(),
        executions = held,
        interrupted,
        "opened the execution store"
    );
    Ok(registry)
}

/// Installs the global subscriber ([`crate::telemetry`]), at `info`
/// unless `SKILL_RUNNER_LOG` says otherwise; with an OTLP endpoint, the
/// layer that times executions for it ([`trace`]).
fn init_logging(format: LogFormat, otlp: Option<trace::Endpoint>) {
    use tracing_subscriber::Layer as _;
    let extra = otlp.map(|endpoint| {
        trace::enable(endpoint)
            .with_filter(tracing_subscriber::filter::filter_fn(
                trace::SpanLayer::wants,
            ))
            .boxed()
    });
    crate::telemetry::init_with(
        "info",
        match format {
            LogFormat::Human => crate::telemetry::Format::Human,
            LogFormat::Json => crate::telemetry::Format::Json,
        },
        extra,
    );
}

/// Caps glibc's malloc at two arenas. By default every thread that
/// allocates may get an arena of its own (up to 8 per core), and the
/// blocking threads that run executions each kept one at its high-water
/// mark: the daemon's RSS grew ~10% between its first 1,000 and 5,000
/// executions. The allocation rate here is low, so contention on two arenas
/// costs nothing measurable.
///
/// Also: large allocations are mapped on their own and freed memory is
/// returned past 128 KiB (glibc raised both thresholds after each large
/// free, and kept what a burst had used), and the code the command line
/// ran before `serve` is dropped from memory, to be read back as used.
fn limit_malloc_arenas() {
    crate::supervise::sys::limit_malloc_arenas(2);
    crate::supervise::sys::return_freed_memory(128 * 1024);
    crate::supervise::sys::release_program_pages();
}
