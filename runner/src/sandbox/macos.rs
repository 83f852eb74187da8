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

use crate::sandbox::paths::{self, Spelling};
use crate::sandbox::profile::MacosSection;

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
    /// The job's environment, when it names one.
    pub environment: Option<EnvFolder>,
}

/// A job's environment under Seatbelt: no mount namespace, so its sealed
/// tree stays at its host path, a read-only parameter of the profile
/// (`ENVIRONMENT`), and the variables name host paths.
#[derive(Debug, Clone)]
pub struct EnvFolder {
    /// The sealed tree in the runner's store.
    pub tree: PathBuf,
    /// The interpreters' path variables as suffixes of the tree's
    /// canonical path (`("PYTHONPATH", "/python")`).
    pub variables: Vec<(String, String)>,
}

/// The folder of a tree whose programs go first on `PATH` (its `bin/`).
const ENV_BIN: &str = "/bin";

/// What one execution asks of Seatbelt.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The command, aliases unrewritten.
    pub argv: &'a [String],
    /// The job's own environment, added after the runner's.
    pub env: &'a [(String, String)],
    /// The profile's macOS section (system paths readable).
    pub system: &'a MacosSection,
    /// Whether the job has a network allowlist (then it reaches the
    /// proxy at [`Folders::proxy_port`], and nothing else).
    pub allowlisted: bool,
}

/// Renders the profile and the full `sandbox-exec` argv for a request
/// whose folders are `f`.
pub fn plan(job: &Request, f: &Folders) -> Result<(seatbelt::Rendered, Vec<String>), MacosError> {
    let roots = seatbelt::Roots {
        snapshot_root: canonical(&f.snapshot_root)?,
        extensions_dir: canonical(&f.extensions)?,
        workspace: canonical(&f.workspace)?,
        tmp_dir: canonical(&f.tmp)?,
        environment: f
            .environment
            .as_ref()
            .map(|e| canonical(&e.tree))
            .transpose()?,
    };
    let policy = seatbelt::SystemPolicy {
        read_only_subpaths: job.system.read_only_subpaths.clone(),
        read_only_literals: job.system.read_only_literals.clone(),
        network: match (job.allowlisted, f.proxy_port) {
            (true, Some(port)) => seatbelt::Network::Proxy { port },
            _ => seatbelt::Network::None,
        },
    };
    let rendered = seatbelt::render(&policy, &roots)?;
    let argv = paths::rewrite_argv(
        job.argv,
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
pub fn environment(job: &Request, f: &Folders) -> Result<Vec<(String, String)>, MacosError> {
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
    if let (true, Some(port)) = (job.allowlisted, f.proxy_port) {
        env.extend(crate::sandbox::net::proxy_environment(&format!(
            "http://127.0.0.1:{port}"
        )));
    }
    if let Some(e) = &f.environment {
        // As under bubblewrap: its bin/ first on PATH, then its variables,
        // with the tree's host path where Linux has /opt/skill-env.
        let tree = canonical(&e.tree)?;
        for (k, v) in env.iter_mut() {
            if k == "PATH" {
                *v = format!("{tree}{ENV_BIN}:{v}");
            }
        }
        env.extend(
            e.variables
                .iter()
                .map(|(k, suffix)| (k.clone(), format!("{tree}{suffix}"))),
        );
    }
    Ok(env)
}
