//! `skill-runner doctor`: what this host supports, and what that means for
//! the isolation promises.
//!
//! The verdict is a real execution: [`trial`] runs a job through
//! [`Runner::run`], so the sandbox it tries is the one every job gets (the
//! same argv, seccomp programs, fresh `/proc`, hostname, host identity and
//! data dir). `doctor` cannot pass where every run fails, and the daemon's
//! health uses the same trial ([`crate::daemon::selfcheck`]).

use std::fmt::Write as _;
use std::path::Path;

use crate::exec::job::Job;
use crate::exec::result::Status;
use crate::exec::{OutputMode, RunOptions, Runner, RunnerConfig};
use crate::sandbox::host::{userns_available, Bwrap};
use crate::supervise::cgroup::Support;
use crate::supervise::NoSink;

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// What it means when not ok.
    pub meaning: &'static str,
    /// Whether `run` refuses without it.
    pub required: bool,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    pub checks: Vec<Check>,
}

/// The job the trial runs: the smallest command, in the sandbox of the
/// built-in profile, with no skills.
const TRIAL_JOB: &str = r#"{"argv": ["true"], "limits": {"timeout_ms": 20000}}"#;

/// Why the trial job did not run and exit 0.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    #[error(transparent)]
    Job(#[from] crate::exec::job::JobError),
    /// The result's error, which says what to change.
    #[error("{}: {}", .0.kind, .0.message)]
    Failed(crate::exec::result::ErrorInfo),
    #[error("the trial command ended {status:?} with exit code {code:?}; stderr: {stderr}")]
    Ended {
        status: Status,
        code: Option<i32>,
        stderr: String,
    },
}

/// Runs `TRIAL_JOB` through `runner`, as `run` and the daemon run jobs:
/// `Ok` when the command ran and exited 0, else the result's error.
pub fn trial(runner: &Runner) -> Result<(), TrialError> {
    let job = Job::from_json(TRIAL_JOB.as_bytes(), None)?;
    let result = runner.run(
        &job,
        RunOptions {
            output: OutputMode::Capture,
            sink: &mut NoSink,
            cancel: None,
        },
    );
    match (result.status, result.exit_code, result.error) {
        (Status::Exited, Some(0), _) => Ok(()),
        (_, _, Some(e)) => Err(TrialError::Failed(e)),
        (status, code, None) => Err(TrialError::Ended {
            status,
            code,
            stderr: result.stderr.trim().to_owned(),
        }),
    }
}

pub use crate::package::store::DATA_DIR_HINT;

impl Report {
    /// Checks the host, opens `data_dir` as `run` would, and runs a trial
    /// job in it.
    pub fn gather(data_dir: &Path) -> Report {
        let mut checks = Vec::new();
        let bwrap = Bwrap::find();
        checks.push(bubblewrap_check(&bwrap));
        let userns = userns_available();
        checks.push(Check {
            name: "user namespaces",
            ok: userns.is_ok(),
            detail: match &userns {
                Ok(()) => "available".into(),
                Err(e) => e.to_string(),
            },
            meaning: "bwrap needs a user namespace to drop privileges and build the sandbox's view",
            required: true,
        });
        let identity = crate::sandbox::identity::detect();
        checks.push(Check {
            name: "host identity",
            ok: identity.is_ok(),
            detail: match &identity {
                Ok(id) => describe_identity(id),
                Err(e) => e.to_string(),
            },
            meaning: "the sandboxed command is never host root when the runner can switch users (docs/sandbox.md, \"Host identity\")",
            required: true,
        });
        let runner = Runner::new(RunnerConfig {
            data_dir: data_dir.to_owned(),
            package_limits: Default::default(),
            keep: false,
            reuse_cgroups: false,
            strict_limits: false,
            network: Default::default(),
            files: Default::default(),
        });
        checks.push(Check {
            name: "data dir",
            ok: runner.is_ok(),
            detail: match &runner {
                Ok(_) => format!("{} is usable", data_dir.display()),
                Err(e) => e.to_string(),
            },
            meaning: "the store, snapshot roots and execution folders live there; run refuses without it",
            required: true,
        });
        if let (Ok(_), Ok(()), Ok(runner)) = (&bwrap, &userns, &runner) {
            let verdict = trial(runner);
            checks.push(Check {
                name: "trial sandbox",
                ok: verdict.is_ok(),
                detail: match verdict {
                    Ok(()) => "a job's sandbox started and ran `true`".into(),
                    Err(e) => e.to_string(),
                },
                meaning: "every job would fail the same way: fix this first",
                required: true,
            });
        }
        checks.push(seccomp_check());
        let cg = Support::detect();
        checks.push(cgroups_check(&cg));
        checks.extend(container_check(&cg));
        Report { checks }
    }

    /// True when `run` can start sandboxes here.
    pub fn can_run(&self) -> bool {
        self.checks.iter().filter(|c| c.required).all(|c| c.ok)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let mark = if c.ok {
                "ok  "
            } else if c.required {
                "FAIL"
            } else {
                "warn"
            };
            let _ = writeln!(out, "{mark} {:<16} {}", c.name, c.detail);
            if !c.ok {
                let _ = writeln!(out, "     {:<16} means: {}", "", c.meaning);
            }
        }
        let _ = writeln!(
            out,
            "{}",
            if self.can_run() {
                "skill-runner can run sandboxes on this host"
            } else {
                "skill-runner will refuse to run here until the FAIL lines are fixed"
            }
        );
        out
    }
}

/// Whether bubblewrap was found, and what it supports.
fn bubblewrap_check(bwrap: &Result<Bwrap, crate::sandbox::host::HostError>) -> Check {
    Check {
        name: "bubblewrap",
        ok: bwrap.is_ok(),
        detail: match &bwrap {
            Ok(b) => format!(
                "{} at {}{}",
                b.version,
                b.path.display(),
                if b.features.disable_userns {
                    ", --disable-userns supported"
                } else {
                    ", no --disable-userns (nested user namespaces stay possible; seccomp still refuses unshare/clone with namespace flags)"
                }
            ),
            Err(e) => e.to_string(),
        },
        meaning: "without bwrap nothing can run: skill-runner never runs a command unsandboxed",
        required: true,
    }
}

/// Whether the kernel has seccomp filters.
fn seccomp_check() -> Check {
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    Check {
        name: "seccomp",
        ok: seccomp,
        detail: if seccomp { "the kernel supports seccomp filters".into() } else { "no Seccomp field in /proc/self/status".into() },
        meaning: "without seccomp, sockets, ptrace, io_uring and friends are not refused; runs would fail when bwrap loads the filter",
        required: true,
    }
}

/// Which cgroups the limits can use.
fn cgroups_check(cg: &Support) -> Check {
    Check {
        name: "cgroups",
        ok: !matches!(cg, Support::None { .. }),
        detail: match cg {
            Support::V2 { parent } => format!("cgroup v2 under {}", parent.display()),
            Support::V1 { memory, pids, .. } => format!(
                "cgroup v1: memory {}, pids {}",
                memory.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "unavailable".into()),
                pids.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "unavailable".into()),
            ),
            Support::None { reason } => reason.clone(),
        },
        meaning: "memory falls back to RLIMIT_AS per process, and the process count is not enforced for root (the result says so)",
        required: false,
    }
}

/// In a container: whether memory is bounded for the sandboxes together
/// or per process only.
fn container_check(cg: &Support) -> Option<Check> {
    let engine = crate::exec::diagnose::container()?;
    let per_process = match cg {
        Support::V2 { .. } => false,
        Support::V1 { memory, .. } => memory.is_none(),
        Support::None { .. } => true,
    };
    Some(Check {
        name: "container",
        ok: !per_process,
        detail: if per_process {
            format!("running in a {engine} container with no writable memory cgroup: a job's memory_bytes is bounded per process only (RLIMIT_AS; memfd files and pipes are not counted), so give the container --memory and --pids-limit, which bound all its sandboxes together, or refuse such jobs with --strict-limits; see docs/containers.md")
        } else {
            format!(
                "running in a {engine} container; see docs/containers.md for the settings it needs"
            )
        },
        meaning:
            "one job can use more memory than its memory_bytes, up to what the container may use",
        required: false,
    })
}

/// Who sandboxed commands are on the host, in one line.
fn describe_identity(id: &crate::sandbox::identity::Identity) -> String {
    match id.mode {
        "sandbox_user" => format!(
            "commands run as the sandbox user, host uid {} gid {}",
            id.uid, id.gid
        ),
        "runner_user" => format!("commands run as the runner's own user, uid {}", id.uid),
        _ if id.root_mapped => format!(
            "commands run as the runner's uid {} (only uid 0 is mapped here), which is root of the parent namespace: mode changes are refused and the pids limit needs a pids cgroup",
            id.uid
        ),
        _ => format!(
            "commands run as the runner's uid {} (only uid 0 is mapped here)",
            id.uid
        ),
    }
}
