//! The `skill-runner` command line (README "Using it"; formats and exit
//! codes in docs/formats.md).
//!
//! Thin: parses arguments (their surface is `cli.rs`), calls the library,
//! prints, and maps outcomes to exit codes. Errors reach the user as one
//! sentence on stderr with exit code 125 (the runner refused or failed), as
//! `docker run` does.

#![forbid(unsafe_code)]

mod cli;
mod completions;
mod distribute;
mod progress;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;

use skill_runner::datadir::DataDir;
use skill_runner::error::ErrorKind;
use skill_runner::exec::confine::{Confinement, Gate};
use skill_runner::exec::doctor;
use skill_runner::exec::job::{Job, RawJob};
use skill_runner::exec::result::{ErrorInfo, ExecResult, EXIT_RUNNER};
use skill_runner::exec::{self, OutputMode, RunOptions, Runner, RunnerConfig};
use skill_runner::package::format::PackageLimits;
use skill_runner::package::hash::Binding;
use skill_runner::package::{bundle, hash, source, verify};
use skill_runner::skillhost::catalog::{render, Catalog, CatalogConfig};
use skill_runner::skillhost::session::{
    ReadRange, ResourceQuery, SessionError, SessionHost, SessionRequest, Sessions, SkillSpec,
    SkillsQuery,
};
use skill_runner::supervise::{Cancel, ForwardSink, NoSink};

use cli::{CatalogCommand, Cli, Command, EnvCommand, SessionCommand, StoreCommand};

fn main() -> ExitCode {
    // Inside a sandbox, as bubblewrap's exec shim: becomes the command.
    skill_runner::sandbox::shim::run_if_shim();
    let cli = Cli::parse_args();
    // The daemon installs the subscriber with its own level and format.
    if !matches!(cli.command, Command::Serve(_)) {
        skill_runner::telemetry::init("warn", skill_runner::telemetry::Format::Human);
    }
    match real_main(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skill-runner: {e}");
            ExitCode::from(EXIT_RUNNER as u8)
        }
    }
}

fn config(cli_data_dir: Option<PathBuf>, keep: bool) -> RunnerConfig {
    config_strict(cli_data_dir, keep, false)
}

fn config_strict(cli_data_dir: Option<PathBuf>, keep: bool, strict_limits: bool) -> RunnerConfig {
    let data_dir = cli_data_dir.unwrap_or_else(exec::default_data_dir);
    RunnerConfig {
        data_dir,
        package_limits: PackageLimits::default(),
        keep,
        reuse_cgroups: false,
        strict_limits,
        network: Default::default(),
        files: Default::default(),
    }
}

/// The data dir of a command that uses it without a runner: checked,
/// created and made private as `run` does ([`DataDir::open`]).
fn open_data_dir(cli_data_dir: Option<PathBuf>) -> anyhow::Result<DataDir> {
    let path = cli_data_dir.unwrap_or_else(exec::default_data_dir);
    Ok(DataDir::open(
        &path,
        skill_runner::sandbox::identity::data_dir_group(),
    )?)
}

fn real_main(cli: Cli) -> anyhow::Result<i32> {
    let data_dir = cli.data_dir;
    match cli.command {
        Command::Run(cli::RunArgs {
            job,
            json,
            keep,
            confine,
            strict_limits,
            output_dir,
            receipts,
        }) => run(
            &job,
            json,
            confine.as_deref(),
            output_dir.as_deref(),
            config_strict(data_dir, keep, strict_limits),
            &receipts,
        ),
        Command::Explain {
            job,
            json,
            platform,
            fds_dir,
        } => explain(
            &job,
            json,
            &platform,
            fds_dir.as_deref(),
            config(data_dir, false),
        ),
        Command::Hash { dir } => {
            let h = verify::hash_dir(&dir, &PackageLimits::default())?;
            emit(&format!("{h}\n"))?;
            Ok(0)
        }
        Command::Pack { dir, meta } => pack(&dir, meta),
        Command::Store(cmd) => store_cmd(cmd, &open_data_dir(data_dir)?),
        Command::Doctor => {
            // The data dir `run` and `serve` would use, and a real job in it.
            let report = doctor::Report::gather(&config(data_dir, false).data_dir);
            print!("{}", report.render());
            Ok(if report.can_run() { 0 } else { EXIT_RUNNER })
        }
        Command::Serve(args) => {
            skill_runner::daemon::serve(*args, data_dir)?;
            Ok(0)
        }
        Command::Catalog(cmd) => catalog_cmd(cmd, &open_data_dir(data_dir)?),
        Command::Session(cmd) => session_cmd(cmd, &open_data_dir(data_dir)?),
        Command::Mcp(args) => mcp_cmd(args, data_dir),
        Command::Env(cmd) => env_cmd(cmd, data_dir),
        Command::Verify {
            result,
            keys,
            receipt_key,
            json,
        } => verify_cmd(&result, &keys, receipt_key.as_deref(), json, data_dir),
        Command::Replay {
            job,
            result,
            keys,
            confine,
            json,
            receipts,
        } => replay_cmd(
            &job,
            &result,
            &keys,
            confine.as_deref(),
            json,
            &receipts,
            data_dir,
        ),
        Command::Completions { shell } => {
            completions::completions(shell, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Command::Man { dir: None } => {
            completions::man(&mut std::io::stdout().lock())?;
            Ok(0)
        }
        Command::Man { dir: Some(dir) } => {
            completions::man_dir(&dir)?;
            Ok(0)
        }
        Command::ReceiptKey { json, receipt_key } => {
            receipt_key_cmd(json, receipt_key.as_deref(), data_dir)
        }
    }
}

/// `pack`: a folder as a one-skill bundle, verified as it is printed.
fn pack(dir: &Path, meta: cli::BindingArgs) -> anyhow::Result<i32> {
    let limits = PackageLimits::default();
    let files = source::read_dir_files(dir, &limits)?;
    let hash = hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..])))?;
    let binding = Binding {
        id: meta.id,
        revision: meta.revision,
        version: meta.version,
        hash,
    };
    let text = bundle::render(&[(binding, files)]);
    // Verify what is printed: ids, paths, limits, SKILL.md, hashes.
    let parsed = bundle::parse(text.as_bytes(), &limits)?;
    for skill in &parsed {
        for w in skill.doc.warnings(Some(&skill.binding.id)) {
            eprintln!("skill-runner: warning: {w}");
        }
    }
    emit(&format!("{text}\n"))?;
    Ok(0)
}

/// `store add` and `store list`.
fn store_cmd(cmd: StoreCommand, data_dir: &DataDir) -> anyhow::Result<i32> {
    let store = skill_runner::package::store::Store::open(data_dir)?;
    match cmd {
        StoreCommand::Push { .. } | StoreCommand::Pull { .. } => {
            return distribute::store(cmd, &store);
        }
        StoreCommand::Add { dir, meta } => {
            let p = store.publish_dir(
                &dir,
                &meta.id,
                meta.revision,
                &meta.version,
                &PackageLimits::default(),
            )?;
            for w in &p.warnings {
                eprintln!("skill-runner: warning: {w}");
            }
            emit(&format!("{}\n", serde_json::to_string(&p.binding)?))?;
        }
        StoreCommand::List => {
            for b in store.bindings()? {
                emit(&format!("{}\n", serde_json::to_string(&b)?))?;
            }
        }
    }
    Ok(0)
}

/// Reads and validates a job (`explain`): from a file, whose folder
/// relative paths resolve against, or from stdin when `path` is `-`.
fn load_job(path: &Path) -> Result<Job, ErrorInfo> {
    let (raw, base) = RawJob::read(path).map_err(bad_job)?;
    Job::validate(raw, base.as_deref()).map_err(bad_job)
}

/// Admits a job for `run`: with `--confine DIR`, through the admission
/// the daemon uses too (`exec::confine`).
fn admit(path: &Path, confine: Option<&Path>) -> Result<Job, ErrorInfo> {
    let (raw, base) = RawJob::read(path).map_err(bad_job)?;
    match confine {
        None => Job::validate(raw, base.as_deref()).map_err(bad_job),
        Some(dir) => Confinement::under(dir, Gate::Cli)
            .and_then(|roots| roots.admit(raw, base.as_deref()))
            .map_err(bad_job),
    }
}

/// A session the job names, resolved into its frozen bindings from the
/// opened (checked) data dir, so an unknown one is refused as not found
/// before anything is staged.
fn resolve_session(job: &mut Job, data_dir: &DataDir) -> Result<(), ErrorInfo> {
    Sessions::new(data_dir)
        .resolve(job)
        .map_err(|e| ErrorInfo::new(e.kind(), e.to_string()))
}

/// A refused job, as the CLI reports every refusal of one.
fn bad_job(e: impl std::fmt::Display) -> ErrorInfo {
    ErrorInfo::new(ErrorKind::BadJob, e.to_string())
}

fn run(
    job_path: &Path,
    json: bool,
    confine: Option<&Path>,
    output_dir: Option<&Path>,
    cfg: RunnerConfig,
    receipts: &cli::ReceiptArgs,
) -> anyhow::Result<i32> {
    let mut job = match admit(job_path, confine) {
        Ok(j) => j,
        Err(e) => return Ok(report_rejected("", e, json)),
    };
    if let Some(dir) = output_dir {
        if let Err(e) = exec::files::check_output_dir(dir, &job.outputs) {
            let info = ErrorInfo::new(ErrorKind::BadJob, e.to_string());
            return Ok(report_rejected(&job.execution_id, info, json));
        }
    }
    // Only a printed result carries its receipt: streamed output has none.
    let runner = match Runner::new(cfg)
        .map_err(|e| e.to_string())
        .and_then(|mut r| {
            if json {
                set_signer(&mut r, receipts)?;
            }
            Ok(r)
        }) {
        Ok(r) => r,
        Err(m) => {
            return Ok(report_rejected(
                &job.execution_id,
                ErrorInfo::new(ErrorKind::RunnerFailed, m),
                json,
            ))
        }
    };
    if let Err(e) = resolve_session(&mut job, runner.data_dir()) {
        let mut result = ExecResult::rejected(&job.execution_id, "bubblewrap", e);
        runner.seal(&mut result, Some(&job));
        return Ok(report_result(&result, json));
    }
    let cancel = Cancel::new()?;
    spawn_signal_thread(cancel.clone());
    let result = if json {
        run_job(
            &runner,
            &job,
            RunOptions {
                output: OutputMode::Capture,
                sink: &mut NoSink,
                cancel: Some(cancel),
            },
        )
    } else {
        run_job(
            &runner,
            &job,
            RunOptions {
                output: OutputMode::Forward,
                sink: &mut ForwardSink,
                cancel: Some(cancel),
            },
        )
    };
    let store = result.outputs.as_ref().and_then(|c| c.store.clone());
    if let (Some(dir), Some(store)) = (output_dir, &store) {
        if let Err(e) = exec::files::write_outputs(store, dir) {
            eprintln!("skill-runner: {e}");
            return Ok(exec::result::EXIT_RUNNER);
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        for w in &result.warnings {
            eprintln!("skill-runner: warning: {w}");
        }
        if let Some(e) = &result.error {
            eprintln!("skill-runner: {}: {}", e.kind, e.message);
        }
    }
    Ok(result.cli_exit_code())
}

fn report_rejected(id: &str, e: ErrorInfo, json: bool) -> i32 {
    report_result(&ExecResult::rejected(id, "bubblewrap", e), json)
}

/// Gives the runner its receipt key, unless `--no-receipt`.
fn set_signer(runner: &mut Runner, receipts: &cli::ReceiptArgs) -> Result<(), String> {
    if receipts.no_receipt {
        return Ok(());
    }
    let key = receipts.receipt_key.as_deref();
    let signer = exec::attest::signer(runner.data_dir(), key).map_err(|e| e.to_string())?;
    runner.set_signer(Some(std::sync::Arc::new(signer)));
    Ok(())
}

/// `verify`: exit 0 and what the receipt vouches for, or 1 and why not.
fn verify_cmd(
    result: &Path,
    keys: &[PathBuf],
    receipt_key: Option<&Path>,
    json: bool,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<i32> {
    let data_dir = data_dir.unwrap_or_else(exec::default_data_dir);
    let trusted = exec::attest::trusted_keys(keys, &data_dir, receipt_key)?;
    let checked = std::fs::read(result)
        .map_err(|e| format!("cannot read {}: {e}", result.display()))
        .and_then(|bytes| {
            skill_runner::receipt::verify::verify(&bytes, &trusted).map_err(|e| e.to_string())
        });
    match checked {
        Ok(vouched) if json => emit(&format!("{:#}\n", vouched.statement))?,
        Ok(vouched) => emit(&vouched.render())?,
        Err(why) => {
            eprintln!("skill-runner: verify: {why}");
            return Ok(1);
        }
    }
    Ok(0)
}

/// `replay`: exit 0 when the re-run is identical in everything.
fn replay_cmd(
    job_path: &Path,
    result: &Path,
    keys: &[PathBuf],
    confine: Option<&Path>,
    json: bool,
    receipts: &cli::ReceiptArgs,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<i32> {
    let bytes = std::fs::read(result)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", result.display()))?;
    let job = admit(job_path, confine).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let cfg = config(data_dir, false);
    let trusted = exec::attest::trusted_keys(keys, &cfg.data_dir, receipts.receipt_key.as_deref())?;
    let mut runner = Runner::new(cfg)?;
    set_signer(&mut runner, receipts).map_err(anyhow::Error::msg)?;
    match exec::replay::replay(&runner, &job, &bytes, &trusted) {
        Ok(report) => {
            if json {
                emit(&format!("{:#}\n", report.to_json()))?;
            } else {
                emit(&report.render())?;
            }
            Ok(if report.identical() { 0 } else { 1 })
        }
        Err(why) => {
            eprintln!("skill-runner: replay: {why}");
            Ok(1)
        }
    }
}

/// `receipt-key`: the public key receipts are signed with.
fn receipt_key_cmd(
    json: bool,
    receipt_key: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<i32> {
    let signer = exec::attest::signer(&open_data_dir(data_dir)?, receipt_key)?;
    let public = signer.public();
    if json {
        emit(&format!("{}\n", public.document()))?;
    } else {
        emit(&public.pem())?;
    }
    Ok(0)
}

/// Prints a result (`--json`) or its warnings and error; its exit code.
fn report_result(result: &ExecResult, json: bool) -> i32 {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
    } else if let Some(e) = &result.error {
        eprintln!("skill-runner: {}", e.message);
    }
    result.cli_exit_code()
}

/// SIGINT/SIGTERM/SIGHUP cancel the execution (the sandbox is killed and
/// the folder removed) instead of killing the runner mid-way.
fn spawn_signal_thread(cancel: std::sync::Arc<Cancel>) {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    // Blocked in this thread and every thread started after it; the
    // sandboxed command gets an empty mask (sys::ChildSetup resets it).
    if set.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        while set.wait().is_ok() {
            cancel.cancel();
        }
    });
}

fn explain(
    job_path: &Path,
    json: bool,
    platform: &str,
    fds_dir: Option<&Path>,
    cfg: RunnerConfig,
) -> anyhow::Result<i32> {
    use skill_runner::exec::explain::{self, Platform};
    let job = load_job(job_path).map_err(|e| anyhow::anyhow!(e.message))?;
    if fds_dir.is_some() && platform != "linux" {
        anyhow::bail!("{}", explain::ExplainError::FdsDirPlatform);
    }
    let platform = match platform {
        "linux" => Platform::Linux,
        "macos" => Platform::Macos,
        other => bail!("unknown platform {other:?}; use linux or macos"),
    };
    let explanation = explain::explain(&job, &cfg.data_dir, platform, fds_dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&explanation)?);
    } else {
        print!("{explanation}");
    }
    Ok(0)
}

/// The catalog sources of this process: the current folder, `$HOME`, the
/// data dir (docs/skill-host.md).
fn catalog_config(data_dir: &DataDir) -> anyhow::Result<CatalogConfig> {
    let cwd = std::env::current_dir()
        .map_err(|e| anyhow::anyhow!("cannot read the current folder: {e}"))?;
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    Ok(CatalogConfig::from_env(&cwd, home.as_deref(), data_dir))
}

fn catalog_cmd(cmd: CatalogCommand, data_dir: &DataDir) -> anyhow::Result<i32> {
    let catalog = Catalog::load(&catalog_config(data_dir)?);
    for w in catalog.warnings() {
        eprintln!("skill-runner: warning: {w}");
    }
    let out = match cmd {
        CatalogCommand::List { json: true } => pretty(catalog.entries())?,
        CatalogCommand::List { json: false } => render::listing(catalog.entries()),
        CatalogCommand::Find {
            query,
            limit,
            json,
            explain,
        } => {
            let found = if explain {
                catalog.find_explained(&query, limit)
            } else {
                catalog.find(&query, limit)
            };
            match json {
                true => pretty(&found)?,
                false => render::search(&found),
            }
        }
        CatalogCommand::Show { name, json } => {
            let shown = render::Shown::read(catalog.lookup(&name)?, &PackageLimits::default())?;
            match json {
                true => pretty(&shown)?,
                false => shown.text(),
            }
        }
    };
    emit(&out)?;
    Ok(0)
}

/// A session error as one line with its kind, e.g.
/// `composition_rejected: skill "x" needs files …`.
fn host_err(e: SessionError) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", e.kind())
}

/// `skill-runner mcp`: one session (named, or created from the flags of
/// `session create`) served over MCP on stdio until the client hangs up.
fn mcp_cmd(args: cli::McpArgs, data_dir: Option<PathBuf>) -> anyhow::Result<i32> {
    use skill_runner::skillhost::mcp::{self, local::LocalExec, Fixed, McpServer};
    let cfg = config(data_dir.clone(), false);
    let dir = open_data_dir(data_dir)?;
    let host = SessionHost::open(&dir, catalog_config(&dir)?).map_err(host_err)?;
    let id = match args.session {
        Some(id) => {
            host.show(&id).map_err(host_err)?;
            id
        }
        None if args.skills.is_empty() => {
            bail!("name the session to serve with --session ID, or give --skill SKILL (as for session create) to create one")
        }
        None => {
            let skills = args
                .skills
                .iter()
                .map(|s| SkillSpec::from_arg(s, host.store()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(host_err)?;
            let environment = args
                .environment
                .as_deref()
                .map(skill_runner::package::environment::declare::parse)
                .transpose()?;
            let created = host
                .create(SessionRequest {
                    skills,
                    tools: args.tools,
                    workspace: None,
                    environment,
                })
                .map_err(host_err)?;
            eprintln!("skill-runner: serving new session {}", created.id);
            created.id
        }
    };
    let runner = Runner::new(cfg)?;
    let server = McpServer::new(
        std::sync::Arc::new(host),
        std::sync::Arc::new(LocalExec::new(runner)),
        std::sync::Arc::new(Fixed(id)),
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(mcp::serve_stdio(server))?;
    Ok(0)
}

fn session_cmd(cmd: SessionCommand, data_dir: &DataDir) -> anyhow::Result<i32> {
    let host = SessionHost::open(data_dir, catalog_config(data_dir)?).map_err(host_err)?;
    let doc = match cmd {
        SessionCommand::Create {
            skills,
            tools,
            environment,
        } => {
            let skills = skills
                .iter()
                .map(|s| SkillSpec::from_arg(s, host.store()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(host_err)?;
            let environment = environment
                .as_deref()
                .map(skill_runner::package::environment::declare::parse)
                .transpose()?;
            let created = host
                .create(SessionRequest {
                    skills,
                    tools,
                    workspace: None,
                    environment,
                })
                .map_err(host_err)?;
            for w in &created.warnings {
                eprintln!("skill-runner: warning: {w}");
            }
            pretty(&created)?
        }
        SessionCommand::Show { id } => pretty(&host.show(&id).map_err(host_err)?)?,
        SessionCommand::Skills {
            id,
            query,
            limit,
            category,
        } => {
            let q = SkillsQuery {
                query,
                limit,
                category,
            };
            pretty(&host.skills(&id, &q).map_err(host_err)?)?
        }
        SessionCommand::Load { id, name } => pretty(&host.load(&id, &name).map_err(host_err)?)?,
        SessionCommand::Section {
            id,
            name,
            section,
            offset,
            limit,
        } => {
            let range = ReadRange { offset, limit };
            pretty(
                &host
                    .section(&id, &name, &section, range)
                    .map_err(host_err)?,
            )?
        }
        SessionCommand::Resource {
            id,
            path,
            offset,
            limit,
        } => {
            let q = ResourceQuery {
                path,
                offset,
                limit,
            };
            pretty(&host.resource(&id, &q).map_err(host_err)?)?
        }
        SessionCommand::Events { id } => pretty(&host.events(&id).map_err(host_err)?)?,
    };
    emit(&doc)?;
    Ok(0)
}

fn pretty<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an
/// error.
/// `skill-runner env …`: the environment store (docs/environments.md).
/// `env build`: the fetch step in a sandbox sharing only the host's
/// network, the install step as a job of a runner on this data dir (no
/// network); progress goes to stderr (a bar on a terminal), the record to
/// stdout.
fn env_build(
    cfg: RunnerConfig,
    lock: &Path,
    id: &str,
    interpreter: Option<&str>,
    timeouts: (u64, u64),
    limits: &cli::EnvLimitArgs,
) -> anyhow::Result<i32> {
    use skill_runner::exec::envfetch::{build, BuildRequest};
    use skill_runner::package::environment::{base, lock::parse_python, store::EnvLimits};
    use std::time::Duration;
    // A loose lock is refused before anything else is looked at.
    let bytes =
        std::fs::read(lock).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", lock.display()))?;
    parse_python(&bytes).map_err(|e| anyhow::anyhow!("lock {}: {e}", lock.display()))?;
    let runner = Runner::new(cfg)?;
    let req = BuildRequest {
        lock,
        id,
        python: interpreter.unwrap_or(base::DEFAULT_PYTHON),
        fetch_timeout: Duration::from_secs(timeouts.0.max(1)),
        install_timeout: Duration::from_secs(timeouts.1.max(1)),
        limits: EnvLimits {
            max_entries: limits.max_entries,
            max_file_bytes: limits.max_file_bytes,
            max_bytes: limits.max_bytes,
        },
    };
    let mut shown = progress::BuildProgress::new(id);
    let built = build(&runner, &req, &mut |step| shown.step(step));
    shown.finish();
    let built = built?;
    emit(&format!(
        "{}\n",
        serde_json::to_string(&built.published.record)?
    ))?;
    Ok(0)
}

fn env_cmd(cmd: EnvCommand, data_dir: Option<PathBuf>) -> anyhow::Result<i32> {
    use skill_runner::package::environment::store::{EnvLimits, EnvStore};
    use skill_runner::package::environment::{base, lock, EnvRef, LockRef};
    // A build runs its install step as a job: it needs a runner.
    if let EnvCommand::Build {
        python,
        id,
        interpreter,
        install_timeout,
        fetch_timeout,
        limits,
    } = cmd
    {
        return env_build(
            config(data_dir, false),
            &python,
            &id,
            interpreter.as_deref(),
            (fetch_timeout, install_timeout),
            &limits,
        );
    }
    let store = EnvStore::open(&open_data_dir(data_dir)?)?;
    match cmd {
        EnvCommand::Push { .. } | EnvCommand::Pull { .. } => {
            return distribute::env(cmd, &store);
        }
        EnvCommand::Add {
            dir,
            id,
            python,
            interpreter,
            limits,
        } => {
            let mut locks = Vec::new();
            if let Some(path) = &python {
                let bytes = std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                let parsed = lock::parse_python(&bytes)
                    .map_err(|e| anyhow::anyhow!("lock {}: {e}", path.display()))?;
                locks.push(LockRef {
                    kind: lock::PYTHON_REQUIREMENTS.into(),
                    sha256: parsed.sha256,
                });
            }
            let interpreter =
                interpreter.or_else(|| python.as_ref().map(|_| base::DEFAULT_PYTHON.into()));
            let base = match interpreter {
                Some(path) => vec![base::probe_python(&path)?],
                None => Vec::new(),
            };
            let limits = EnvLimits {
                max_entries: limits.max_entries,
                max_file_bytes: limits.max_file_bytes,
                max_bytes: limits.max_bytes,
            };
            let published = store.add(&dir, &id, base, locks, &limits)?;
            emit(&format!("{}\n", serde_json::to_string(&published.record)?))?;
        }
        EnvCommand::List { json } => {
            let records = store.list()?;
            if json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&records)?))?;
            } else {
                for r in records {
                    emit(&format!(
                        "{}\t{}\t{} files\t{} bytes\t{}\n",
                        r.id, r.hash, r.files, r.bytes, r.created
                    ))?;
                }
            }
        }
        EnvCommand::Show { id, json } => {
            let records = store.show(&id)?;
            if json {
                emit(&format!("{}\n", serde_json::to_string_pretty(&records)?))?;
            } else {
                for r in records {
                    let mut text = format!(
                        "{} {}\n  files {}, symlinks {}, bytes {}\n  created {}\n",
                        r.id, r.hash, r.files, r.symlinks, r.bytes, r.created
                    );
                    for b in &r.base {
                        text.push_str(&format!(
                            "  base {} {} (sha256 {})\n",
                            b.path, b.version, b.sha256
                        ));
                    }
                    for l in &r.locks {
                        text.push_str(&format!("  lock {} sha256 {}\n", l.kind, l.sha256));
                    }
                    text.push_str(&format!("  tree {}\n", store.tree_path(&r.hash).display()));
                    emit(&text)?;
                }
            }
        }
        EnvCommand::Verify { target } => {
            let hashes: Vec<String> = if hash::is_hex_digest(&target) {
                vec![target]
            } else {
                store.show(&target)?.into_iter().map(|r| r.hash).collect()
            };
            for h in hashes {
                let manifest = store.verify(&h)?;
                emit(&format!("ok {h} ({} entries)\n", manifest.entries.len()))?;
            }
        }
        EnvCommand::Remove { id, hash } => {
            let record = store.remove(&EnvRef { id, hash })?;
            emit(&format!("{}\n", serde_json::to_string(&record)?))?;
        }
        EnvCommand::Gc => {
            let report = store.gc()?;
            emit(&format!("{}\n", serde_json::to_string(&report)?))?;
        }
        EnvCommand::Build { .. } => {}
    }
    Ok(0)
}

pub(crate) fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Runs the job; with `SKILL_RUNNER_RUN_PREPARED=1`, in a sandbox prepared
/// first and handed the command, as the daemon runs a session's next
/// command (docs/prepared.md).
///
/// With `SKILL_RUNNER_RUN_TEMPLATE=1`, bubblewrap starts in a template
/// mount namespace, as the daemon starts it (docs/template.md), and where
/// each launch started is said on stderr: how the escape suite runs every
/// attempt through the daemon's path.
fn run_job(runner: &Runner, job: &Job, opts: RunOptions<'_>) -> ExecResult {
    #[cfg(target_os = "linux")]
    {
        let template = std::env::var_os("SKILL_RUNNER_RUN_TEMPLATE").is_some_and(|v| v == "1");
        if template {
            // The job's own folders are roots too: a template holds no
            // folder outside its roots.
            let mut roots = vec![runner.config.data_dir.clone()];
            roots.extend(job.workspace.iter().chain(&job.extensions_dir).cloned());
            if let Err(e) = skill_runner::sandbox::template::enable(&roots) {
                eprintln!("skill-runner: no template mount namespace can be made here: {e}");
            }
        }
        let result = if std::env::var_os("SKILL_RUNNER_RUN_PREPARED").is_some_and(|v| v == "1") {
            runner.run_in_prepared(job, opts)
        } else {
            runner.run(job, opts)
        };
        if template {
            let (inside, own, _) = skill_runner::sandbox::template::counts();
            eprintln!("skill-runner: sandboxes started in the template mount namespace: {inside}, in the runner's own: {own}");
        }
        result
    }
    #[cfg(not(target_os = "linux"))]
    runner.run(job, opts)
}
