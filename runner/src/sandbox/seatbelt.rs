//! The macOS backend: the same profile data rendered to a Seatbelt profile
//! (by the pure `seatbelt` crate) and launched with `/usr/bin/sandbox-exec`.
//!
//! On macOS there is no mount namespace: packages stay at their real host
//! path and `SCIENCEDISCOVERY_SKILLS_DIR` holds that path; argv aliases are
//! rewritten to host paths ([`crate::sandbox::paths::Spelling::Host`]). Every host
//! path is canonicalized the macOS way before it becomes a profile
//! parameter (`/tmp` → `/private/tmp`, `/var` → `/private/var`, symlinks).
//!
//! This module builds and is tested on Linux (`explain --platform macos`);
//! nothing in it has been run on a Mac (see docs/seatbelt.md).

use std::path::{Path, PathBuf};

use crate::exec::job::Job;
use crate::sandbox::paths::{self, Spelling};

/// Why a Seatbelt launch could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum MacosError {
    #[error("cannot canonicalize {path}: {source}")]
    Canonicalize {
        path: PathBuf,
        source: seatbelt::CanonicalizeError,
    },
    #[error("cannot render the Seatbelt profile: {0}")]
    Render(#[from] seatbelt::RenderError),
    #[error(transparent)]
    Alias(#[from] paths::AliasError),
}

/// Reads a symlink on this host, for [`seatbelt::canonicalize`].
fn read_link(p: &str) -> Option<String> {
    std::fs::read_link(p)
        .ok()
        .and_then(|t| t.to_str().map(str::to_owned))
}

fn canonical(path: &Path) -> Result<String, MacosError> {
    seatbelt::canonicalize(&path.to_string_lossy(), &read_link).map_err(|source| {
        MacosError::Canonicalize {
            path: path.to_owned(),
            source,
        }
    })
}

/// The host folders of one execution on macOS.
#[derive(Debug, Clone)]
pub struct Folders {
    pub snapshot_root: PathBuf,
    pub workspace: PathBuf,
    pub extensions: PathBuf,
    pub tmp: PathBuf,
    /// The loopback port of the execution's proxy, for a job with a
    /// network allowlist (see [`crate::sandbox::net`]).
    pub proxy_port: Option<u16>,
}

/// Renders the profile and the full `sandbox-exec` argv for a job whose
/// folders are `f`.
pub fn plan(job: &Job, f: &Folders) -> Result<(seatbelt::Rendered, Vec<String>), MacosError> {
    let roots = seatbelt::Roots {
        snapshot_root: canonical(&f.snapshot_root)?,
        extensions_dir: canonical(&f.extensions)?,
        workspace: canonical(&f.workspace)?,
        tmp_dir: canonical(&f.tmp)?,
    };
    let policy = seatbelt::SystemPolicy {
        read_only_subpaths: job.profile.macos.read_only_subpaths.clone(),
        read_only_literals: job.profile.macos.read_only_literals.clone(),
        network: match (job.network.allowlist(), f.proxy_port) {
            (Some(_), Some(port)) => seatbelt::Network::Proxy { port },
            _ => seatbelt::Network::None,
        },
    };
    let rendered = seatbelt::render(&policy, &roots)?;
    let argv = paths::rewrite_argv(
        &job.argv,
        Spelling::Host {
            skills: Path::new(&roots.snapshot_root),
            extensions: Path::new(&roots.extensions_dir),
        },
    )?;
    let full = seatbelt::sandbox_exec_argv(&rendered, &argv);
    Ok((rendered, full))
}

/// The environment in the sandbox (docs/formats.md) on macOS: host paths
/// for the two variables, and `HOME`/`TMPDIR` in the private temp folder
/// (`/tmp` is not writable).
pub fn environment(job: &Job, f: &Folders) -> Result<Vec<(String, String)>, MacosError> {
    let tmp = canonical(&f.tmp)?;
    let mut env = vec![
        ("HOME".to_owned(), tmp.clone()),
        ("TMPDIR".to_owned(), tmp),
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        (paths::SKILLS_VAR.to_owned(), canonical(&f.snapshot_root)?),
        (paths::EXTENSIONS_VAR.to_owned(), canonical(&f.extensions)?),
    ];
    env.extend(job.env.iter().cloned());
    if let (Some(_), Some(port)) = (job.network.allowlist(), f.proxy_port) {
        env.extend(crate::sandbox::net::proxy_environment(&format!(
            "http://127.0.0.1:{port}"
        )));
    }
    Ok(env)
}

/// `explain --platform macos`: the plan with the per-execution folder
/// shown under `<data-dir>/executions/<id>.RANDOM`.
pub fn explain(
    job: &Job,
    data_dir: &Path,
) -> Result<(seatbelt::Rendered, Vec<String>), MacosError> {
    let exec = data_dir
        .join("executions")
        .join(format!("{}.RANDOM", job.execution_id));
    let workspace = job
        .workspace
        .clone()
        .unwrap_or_else(|| exec.join("workspace"));
    let folders = Folders {
        snapshot_root: exec.join("skills"),
        extensions: job
            .extensions_dir
            .clone()
            .unwrap_or_else(|| workspace.join(".sciencediscovery/skill-extensions")),
        workspace,
        tmp: exec.join("tmp"),
        // Chosen at launch; shown as such below.
        proxy_port: job.network.allowlist().map(|_| 1),
    };
    let (mut rendered, argv) = plan(job, &folders)?;
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
