//! `skill-runner doctor`: what this host supports, and what that means for
//! the isolation promises.

use std::fmt::Write as _;

use crate::cgroup::Support;
use crate::exec::{userns_available, Bwrap};

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

impl Report {
    pub fn gather() -> Report {
        let mut checks = Vec::new();
        let bwrap = Bwrap::find();
        checks.push(Check {
            name: "bubblewrap",
            ok: bwrap.is_ok(),
            detail: match &bwrap {
                Ok(b) => format!(
                    "{} at {}{}",
                    b.version,
                    b.path.display(),
                    if b.features.disable_userns { ", --disable-userns supported" } else { ", no --disable-userns (nested user namespaces stay possible; seccomp still refuses unshare/clone with namespace flags)" }
                ),
                Err(e) => e.clone(),
            },
            meaning: "without bwrap nothing can run: skill-runner never runs a command unsandboxed",
            required: true,
        });
        let userns = userns_available();
        checks.push(Check {
            name: "user namespaces",
            ok: userns.is_ok(),
            detail: userns.clone().err().unwrap_or_else(|| "available".into()),
            meaning: "bwrap needs a user namespace to drop privileges and build the sandbox's view",
            required: true,
        });
        if let Ok(b) = &bwrap {
            let live = std::process::Command::new(&b.path)
                .args([
                    "--unshare-all",
                    "--unshare-user",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "--",
                    "/bin/true",
                ])
                .output();
            let (ok, detail) = match live {
                Ok(o) if o.status.success() => (true, "a trial sandbox started".to_owned()),
                Ok(o) => (false, String::from_utf8_lossy(&o.stderr).trim().to_owned()),
                Err(e) => (false, e.to_string()),
            };
            checks.push(Check {
                name: "trial sandbox",
                ok,
                detail,
                meaning: "bwrap is installed but cannot create namespaces here (inside a container, allow nested user namespaces)",
                required: true,
            });
        }
        let seccomp = std::fs::read_to_string("/proc/self/status")
            .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
            .unwrap_or(false);
        checks.push(Check {
            name: "seccomp",
            ok: seccomp,
            detail: if seccomp { "the kernel supports seccomp filters".into() } else { "no Seccomp field in /proc/self/status".into() },
            meaning: "without seccomp, sockets, ptrace, io_uring and friends are not refused; runs would fail when bwrap loads the filter",
            required: true,
        });
        let cg = Support::detect();
        checks.push(Check {
            name: "cgroups",
            ok: !matches!(cg, Support::None { .. }),
            detail: match &cg {
                Support::V2 { parent } => format!("cgroup v2 under {}", parent.display()),
                Support::V1 { memory, pids } => format!(
                    "cgroup v1: memory {}, pids {}",
                    memory.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "unavailable".into()),
                    pids.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "unavailable".into()),
                ),
                Support::None { reason } => reason.clone(),
            },
            meaning: "memory falls back to RLIMIT_AS per process, and the process count is not enforced for root (the result says so)",
            required: false,
        });
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
