//! The `skill-runner` command line (README "Using it"; formats and exit
//! codes in docs/formats.md).
//!
//! Thin: parses arguments (their surface is `cli.rs`), calls the library,
//! prints, and maps outcomes to exit codes. Errors reach the user as one
//! sentence on stderr with exit code 125 (the runner refused or failed), as
//! `docker run` does.

#![forbid(unsafe_code)]

mod cli;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;

use skill_runner::error::ErrorKind;
use skill_runner::exec::doctor;
use skill_runner::exec::job::Job;
use skill_runner::exec::result::{ErrorInfo, ExecResult, EXIT_RUNNER};
use skill_runner::exec::{self, OutputMode, RunOptions, Runner, RunnerConfig};
use skill_runner::package::format::{self, PackageLimits};
use skill_runner::package::hash::Binding;
use skill_runner::package::{bundle, hash, source, verify};
use skill_runner::skillhost::catalog::{Catalog, CatalogConfig};
use skill_runner::skillhost::session::{
    ReadRange, ResourceQuery, SessionError, SessionHost, SessionRequest, Sessions, SkillSpec,
    SkillsQuery,
};
use skill_runner::supervise::{Cancel, ForwardSink, NoSink};

use cli::{CatalogCommand, Cli, Command, EnvCommand, SessionCommand, StoreCommand};

fn main() -> ExitCode {
    // Inside a sandbox, as bubblewrap's exec shim: becomes the command.
    skill_runner::sandbox::shim::run_if_shim();
    let cli = Cli::parse();
    // The daemon installs its own subscriber (level, --log-format).
    if !matches!(cli.command, Command::Serve(_)) {
        init_tracing();
    }
    match real_main(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skill-runner: {e}");
            ExitCode::from(EXIT_RUNNER as u8)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKILL_RUNNER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn config(cli_data_dir: Option<PathBuf>, keep: bool) -> RunnerConfig {
    let data_dir = cli_data_dir.unwrap_or_else(exec::default_data_dir);
    RunnerConfig {
        sessions: Some(std::sync::Arc::new(Sessions::new(&data_dir))),
        data_dir,
        package_limits: PackageLimits::default(),
        keep,
        reuse_cgroups: false,
        network: Default::default(),
    }
}

fn real_main(cli: Cli) -> anyhow::Result<i32> {
    let data_dir = cli.data_dir;
    match cli.command {
        Command::Run {
            job,
            json,
            keep,
            confine,
        } => run(&job, json, confine.as_deref(), config(data_dir, keep)),
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
            emit(&format!(
                "{h}
"
            ))?;
            Ok(0)
        }
        Command::Pack { dir, meta } => {
            let limits = PackageLimits::default();
            let files = source::read_dir_files(&dir, &limits)?;
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
            emit(&format!(
                "{text}
"
            ))?;
            Ok(0)
        }
        Command::Store(cmd) => {
            let cfg = config(data_dir, false);
            let store = skill_runner::package::store::Store::open(&cfg.data_dir)?;
            match cmd {
                StoreCommand::Add { dir, meta } => {
                    let p = store.publish_dir(
                        &dir,
                        &meta.id,
                        meta.revision,
                        &meta.version,
                        &cfg.package_limits,
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
        Command::Catalog(cmd) => catalog_cmd(cmd, &config(data_dir, false).data_dir),
        Command::Session(cmd) => session_cmd(cmd, &config(data_dir, false).data_dir),
        Command::Env(cmd) => env_cmd(cmd, &config(data_dir, false).data_dir),
    }
}

/// Reads and validates a job: from a file, whose folder relative paths
/// resolve against, or from stdin when `path` is `-`, where they resolve
/// against the current folder.
/// With `--confine DIR`: the job's host paths must lie under DIR (the
/// daemon's rule, see `daemon::confine`).
fn confined(mut job: Job, confine: Option<&Path>) -> Result<Job, ErrorInfo> {
    if let Some(roots) = confine_roots(confine)? {
        roots
            .confine(&mut job)
            .map_err(|e| confine_error(e.to_string()))?;
    }
    Ok(job)
}

fn confine_roots(
    confine: Option<&Path>,
) -> Result<Option<skill_runner::daemon::confine::Confinement>, ErrorInfo> {
    let Some(dir) = confine else {
        return Ok(None);
    };
    let dir = dir.canonicalize().map_err(|e| {
        ErrorInfo::new(
            ErrorKind::BadJob,
            format!("--confine {}: {e}", dir.display()),
        )
    })?;
    Ok(Some(skill_runner::daemon::confine::Confinement::new(vec![
        dir,
    ])))
}

fn confine_error(message: String) -> ErrorInfo {
    ErrorInfo::new(
        ErrorKind::BadJob,
        message.replace("(skill-runner serve --root)", "(--confine)"),
    )
}

fn load_job(path: &Path) -> Result<Job, ErrorInfo> {
    load_job_confined(path, None)
}

/// Reads and parses a job; with `confine`, a profile file it names must lie
/// under that folder, checked before the file is read.
fn load_job_confined(path: &Path, confine: Option<&Path>) -> Result<Job, ErrorInfo> {
    let bad = |message: String| ErrorInfo::new(ErrorKind::BadJob, message);
    let (bytes, base) = if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("cannot read the job from stdin: {e}")))?;
        let cwd = std::env::current_dir()
            .and_then(|d| d.canonicalize())
            .map_err(|e| bad(format!("cannot read the current folder: {e}")))?;
        (bytes, Some(cwd))
    } else {
        let bytes = std::fs::read(path)
            .map_err(|e| bad(format!("cannot read job file {}: {e}", path.display())))?;
        let base = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .and_then(|p| p.canonicalize().ok());
        (bytes, base)
    };
    if let Some(roots) = confine_roots(confine)? {
        let raw: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        // As for the daemon: a profile file can bind any host path
        // read-only, so a confined job names built-in profiles only.
        let _ = roots;
        if let Some(spec) = raw["profile"].as_str().filter(|s| s.contains('/')) {
            return Err(ErrorInfo::new(
                ErrorKind::BadJob,
                format!("profile {spec:?} is a file; with --confine a job may name only built-in profiles (a profile file can bind any host path into the sandbox)"),
            ));
        }
    }
    Job::from_json(&bytes, base.as_deref()).map_err(|e| bad(e.to_string()))
}

fn run(
    job_path: &Path,
    json: bool,
    confine: Option<&Path>,
    cfg: RunnerConfig,
) -> anyhow::Result<i32> {
    let job = match load_job_confined(job_path, confine).and_then(|job| confined(job, confine)) {
        Ok(j) => j,
        Err(e) => return Ok(report_rejected("", e, json)),
    };
    let runner = match Runner::new(cfg) {
        Ok(r) => r,
        Err(m) => {
            return Ok(report_rejected(
                &job.execution_id,
                ErrorInfo::new(ErrorKind::RunnerFailed, m),
                json,
            ))
        }
    };
    let cancel = Cancel::new()?;
    spawn_signal_thread(cancel.clone());
    let result = if json {
        runner.run(
            &job,
            RunOptions {
                output: OutputMode::Capture,
                sink: &mut NoSink,
                cancel: Some(cancel),
            },
        )
    } else {
        runner.run(
            &job,
            RunOptions {
                output: OutputMode::Forward,
                sink: &mut ForwardSink,
                cancel: Some(cancel),
            },
        )
    };
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
    let result = ExecResult::rejected(id, "bubblewrap", e);
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
    let job = load_job(job_path).map_err(|e| anyhow::anyhow!(e.message))?;
    if fds_dir.is_some() && platform != "linux" {
        anyhow::bail!("--fds-dir is for --platform linux (Seatbelt reads no descriptors)");
    }
    match platform {
        "linux" => {
            let (program, args, folders) =
                Runner::explain(&job, &cfg.data_dir).map_err(|e| anyhow::anyhow!(e.message))?;
            // The account files reach bwrap on fds 5 and 6 unless they are
            // in the prepared /etc (fd 14).
            let accounts = args.iter().any(|a| a == "--file");
            let shim = match fds_dir {
                Some(dir) => Some(write_sandbox_fds(&job, dir, accounts)?),
                None => explained_shim(&job),
            };
            if json {
                let mut fds = serde_json::json!({
                    "3": "seccomp rules (BPF)",
                    "4": "seccomp guard (BPF)",
                    "7": "exec shim report (written by the shim: one byte, then an errno if the command cannot be executed)",
                    "8": "the exec shim (\"shim\"; --fds-dir writes it as 8-shim), which bwrap executes as /proc/self/fd/8",
                    "9": "the command's stderr (bwrap's own stays on 2)",
                });
                if accounts {
                    fds["5"] = "/etc/passwd".into();
                    fds["6"] = "/etc/group".into();
                }
                let doc = serde_json::json!({
                    "sandbox": "bubblewrap",
                    "program": program,
                    "shim": shim,
                    "argv": args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
                    "folders": folders.iter().map(|(fd, path)| (fd.to_string(), serde_json::Value::from(path.clone()))).collect::<serde_json::Map<_, _>>(),
                    "fds": fds,
                    "network": job.network.allowlist().map(|a| serde_json::json!({
                        "allow": a.entries.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
                        "private": a.private,
                        "proxy": skill_runner::sandbox::net::PROXY_URL,
                        "socket": skill_runner::sandbox::net::SANDBOX_SOCKET,
                    })),
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                let accounts = if accounts {
                    " 5 /etc/passwd, 6 /etc/group,"
                } else {
                    ""
                };
                println!(
                    "# bubblewrap; fds: 3,4 seccomp BPF,{accounts} 7 shim report, 8 the exec shim, 9 stderr"
                );
                match &shim {
                    Some(path) => println!("# fd 8: the exec shim {}", path.display()),
                    None => println!("# fd 8: the small exec shim the runner carries (--fds-dir DIR writes it as DIR/8-shim)"),
                }
                for (fd, path) in &folders {
                    println!("# fd {fd}: the folder {path}, opened by the runner at launch");
                }
                match job.network.allowlist() {
                    None => println!("# network: none (an empty network namespace)"),
                    Some(a) => {
                        println!("# network: {}", skill_runner::sandbox::net::describe(a));
                        println!(
                            "# network: the proxy variables point at {}, where the shim's forwarder relays to the runner's proxy over {} (fd {})",
                            skill_runner::sandbox::net::PROXY_URL,
                            skill_runner::sandbox::net::SANDBOX_SOCKET,
                            skill_runner::sandbox::bwrap::FD_NET
                        );
                    }
                }
                println!(
                    "{}",
                    skill_runner::sandbox::bwrap::shell_quote(&program, &args)
                );
            }
            Ok(0)
        }
        "macos" => {
            let (profile, argv) = skill_runner::exec::runner::explain_macos(&job, &cfg.data_dir)?;
            if json {
                let doc = serde_json::json!({
                    "sandbox": "seatbelt",
                    "profile": profile.profile,
                    "params": profile.params.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect::<Vec<_>>(),
                    "argv": argv,
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                println!(";; Seatbelt profile (pass with sandbox-exec -p)");
                print!("{}", profile.profile);
                println!(";; parameters (-D NAME=value)");
                for (k, v) in &profile.params {
                    println!(";; {k}={v}");
                }
            }
            Ok(0)
        }
        other => bail!("unknown platform {other:?}; use linux or macos"),
    }
}

/// The exec shim of an explained job, as a file: the runner's own binary
/// for a job with a network allowlist or where there is no small shim;
/// `None` for the small shim, which is no file until `--fds-dir` writes it.
fn explained_shim(job: &skill_runner::exec::job::Job) -> Option<PathBuf> {
    match skill_runner::sandbox::shim::small_shim() {
        Some(_) if job.network.allowlist().is_none() => None,
        _ => std::env::current_exe().ok(),
    }
}

/// Writes the contents of fds 3-6 of the explained command into `dir`,
/// and the small exec shim as `8-shim` where the job uses it; returns the
/// shim's path.
#[cfg(target_os = "linux")]
fn write_sandbox_fds(
    job: &skill_runner::exec::job::Job,
    dir: &Path,
    accounts: bool,
) -> anyhow::Result<PathBuf> {
    let filters = skill_runner::sandbox::seccomp::compile(&job.profile, job.network.mode())?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let programs: [(&str, &[u8]); 2] = [
        ("3-seccomp-rules.bpf", &filters.rules),
        ("4-seccomp-guard.bpf", &filters.guard),
    ];
    let account_files: [(&str, &[u8]); 2] = [
        ("5-passwd", skill_runner::sandbox::bwrap::PASSWD.as_bytes()),
        ("6-group", skill_runner::sandbox::bwrap::GROUP.as_bytes()),
    ];
    for (name, bytes) in programs {
        write_fresh(&dir.join(name), bytes, 0o644)?;
    }
    for (name, bytes) in account_files {
        let path = dir.join(name);
        if accounts {
            write_fresh(&path, bytes, 0o644)?;
        } else {
            // In the prepared /etc instead: none left from an earlier
            // explanation that used them.
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    anyhow::bail!("cannot remove {}: {e}", path.display())
                }
                _ => {}
            }
        }
    }
    if let Some(shim) = explained_shim(job) {
        return Ok(shim);
    }
    let bytes = skill_runner::sandbox::shim::small_shim().unwrap_or_default();
    let path = dir.join("8-shim");
    write_fresh(&path, bytes, 0o755)?;
    Ok(path)
}

/// Writes `bytes` as a new file at `path`: whatever was there is removed
/// first (never rewritten: a running sandbox may execute the old shim),
/// and the new file is created exclusively, so a symlink planted at
/// `path` is refused, not followed.
#[cfg(target_os = "linux")]
fn write_fresh(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let fail = |e: std::io::Error| anyhow::anyhow!("cannot write {}: {e}", path.display());
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e)),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)
}

#[cfg(not(target_os = "linux"))]
fn write_sandbox_fds(
    _job: &skill_runner::exec::job::Job,
    _dir: &Path,
    _accounts: bool,
) -> anyhow::Result<PathBuf> {
    anyhow::bail!("--fds-dir needs a Linux build (the seccomp programs are compiled for it)")
}

/// The catalog sources of this process: the current folder, `$HOME`, the
/// data dir (docs/skill-host.md).
fn catalog_config(data_dir: &Path) -> anyhow::Result<CatalogConfig> {
    let cwd = std::env::current_dir()
        .map_err(|e| anyhow::anyhow!("cannot read the current folder: {e}"))?;
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    Ok(CatalogConfig::from_env(&cwd, home.as_deref(), data_dir))
}

fn catalog_cmd(cmd: CatalogCommand, data_dir: &Path) -> anyhow::Result<i32> {
    use std::fmt::Write as _;
    let catalog = Catalog::load(&catalog_config(data_dir)?);
    for w in catalog.warnings() {
        eprintln!("skill-runner: warning: {w}");
    }
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    match cmd {
        CatalogCommand::List { json: true } => out = pretty(catalog.entries())?,
        CatalogCommand::List { json: false } => {
            for e in catalog.entries() {
                let desc = one_line(&e.description);
                let (name, source, kind) = (&e.name, e.source.as_str(), e.kind.as_str());
                writeln!(out, "{name:<28} {source:<8} {kind:<17} {desc}")?;
            }
        }
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
            if json {
                out = pretty(&found)?;
            } else {
                if let Some(e) = &found.explain {
                    writeln!(out, "{}", e.text())?;
                }
                for h in &found.hits {
                    let desc = one_line(&h.description);
                    writeln!(out, "{:>4}  {:<28} {desc}", h.score, h.name)?;
                    if let (Some(e), Some(q)) = (&h.explain, &found.explain) {
                        writeln!(out, "      {}", e.text(q.name_bonus))?;
                    }
                }
                if let Some(m) = &found.message {
                    writeln!(out, "{m}")?;
                }
            }
        }
        CatalogCommand::Show { name, json } => {
            let entry = catalog.lookup(&name)?;
            let files = Catalog::read_files(entry, &PackageLimits::default())?;
            let md = files
                .iter()
                .find(|f| f.0 == format::SKILL_MD)
                .map(|f| String::from_utf8_lossy(&f.1).into_owned())
                .unwrap_or_default();
            if json {
                #[derive(serde::Serialize)]
                struct Shown<'a> {
                    #[serde(flatten)]
                    entry: &'a skill_runner::skillhost::catalog::Entry,
                    file_list: Vec<&'a str>,
                    skill_md: String,
                }
                out = pretty(&Shown {
                    entry,
                    file_list: files.iter().map(|f| f.0.as_str()).collect(),
                    skill_md: md,
                })?;
            } else {
                let at = |p: &Option<PathBuf>| {
                    p.as_ref()
                        .map(|p| format!(" {}", p.display()))
                        .unwrap_or_default()
                };
                writeln!(out, "name: {}", entry.name)?;
                writeln!(out, "description: {}", one_line(&entry.description))?;
                writeln!(out, "source: {}{}", entry.source.as_str(), at(&entry.path))?;
                for s in &entry.shadows {
                    writeln!(out, "shadows: {}{}", s.source.as_str(), at(&s.path))?;
                }
                for f in &files {
                    writeln!(out, "file: {}", f.0)?;
                }
                write!(out, "\n{md}")?;
            }
        }
    }
    emit(&out)?;
    Ok(0)
}

/// A session error as one line with its kind, e.g.
/// `composition_rejected: skill "x" needs files …`.
fn host_err(e: SessionError) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", e.kind())
}

fn session_cmd(cmd: SessionCommand, data_dir: &Path) -> anyhow::Result<i32> {
    let host = SessionHost::open(data_dir, catalog_config(data_dir)?).map_err(host_err)?;
    let doc = match cmd {
        SessionCommand::Create { skills, tools } => {
            let skills = skills
                .iter()
                .map(|s| SkillSpec::from_arg(s, host.store()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(host_err)?;
            let created = host
                .create(SessionRequest { skills, tools })
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
fn env_cmd(cmd: EnvCommand, data_dir: &Path) -> anyhow::Result<i32> {
    use skill_runner::package::environment::store::{EnvLimits, EnvStore};
    use skill_runner::package::environment::{base, lock, EnvRef, LockRef};
    let store = EnvStore::open(data_dir)?;
    match cmd {
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
    }
    Ok(0)
}

fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
