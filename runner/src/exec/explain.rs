//! `skill-runner explain`: the launch a job would get, without launching
//! it. One [`Explanation`] per platform, printed as text ([`Display`](std::fmt::Display)) or
//! JSON (`Serialize`).
//!
//! The bubblewrap explanation is the launch plan itself
//! ([`crate::exec::plan::bwrap`]), made with this host's bwrap and
//! identity; only the folders made per execution are shown as
//! `<data-dir>/executions/<id>.<random>` and the published snapshot root
//! as `<data-dir>/published/<identity>`. Of the data dir it only reads
//! which prepared `/etc` is current ([`crate::sandbox::etcview::expected`]).
//! `--fds-dir DIR` writes what the sandbox finds on its descriptors (the
//! names of [`crate::sandbox::fds`]): the same bytes a launch hands over,
//! the seccomp programs compiled for the same identity.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::datadir::DataDir;
use crate::exec::error::ExecError;
use crate::exec::folders::etc_extra;
use crate::exec::job::Job;
use crate::exec::plan::{self, Content, EnvMount, Folders, Plan, Sandbox};
use crate::package::environment::store::EnvStore;
use crate::sandbox::bwrap::BwrapFeatures;
use crate::sandbox::fds;
use crate::sandbox::host::Bwrap;
use crate::sandbox::paths::DEFAULT_EXTENSIONS;
use crate::sandbox::profile;
use crate::sandbox::shim::ShimKind;

/// The platform to explain a launch for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    Macos,
}

/// Why a job cannot be explained.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Plan(#[from] ExecError),
    #[error("--fds-dir is for --platform linux (Seatbelt reads no descriptors)")]
    FdsDirPlatform,
    #[error("--fds-dir needs a Linux build (the seccomp programs are compiled for it)")]
    FdsDirBuild,
    #[error("cannot create {}: {source}", path.display())]
    CreateFdsDir { path: PathBuf, source: io::Error },
    #[error("cannot write {}: {source}", path.display())]
    WriteFd { path: PathBuf, source: io::Error },
    #[error("cannot remove {}: {source}", path.display())]
    RemoveFd { path: PathBuf, source: io::Error },
}

/// What `explain` prints.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Explanation {
    Bubblewrap(Box<Bubblewrap>),
    Seatbelt(Seatbelt),
}

/// A bubblewrap launch. Fields in the order of the JSON document.
#[derive(Debug, Serialize)]
pub struct Bubblewrap {
    argv: Vec<String>,
    /// What the sandbox finds on each descriptor that is no folder.
    fds: BTreeMap<String, &'static str>,
    /// The host folders the runner opens at launch, by descriptor.
    folders: BTreeMap<String, String>,
    network: Option<Network>,
    program: PathBuf,
    sandbox: &'static str,
    /// The exec shim as a file, where it is one.
    shim: Option<PathBuf>,
    #[serde(skip)]
    plan: Plan,
    #[serde(skip)]
    allowlist: Option<String>,
    /// `memory_bytes`, for what a prepared sandbox needs.
    #[serde(skip)]
    memory_bytes: u64,
}

/// A job's network allowlist, as explained.
#[derive(Debug, Serialize)]
struct Network {
    allow: Vec<String>,
    private: bool,
    proxy: &'static str,
    socket: &'static str,
}

/// A Seatbelt launch. Fields in the order of the JSON document.
#[derive(Debug, Serialize)]
pub struct Seatbelt {
    argv: Vec<String>,
    params: Vec<Param>,
    profile: String,
    sandbox: &'static str,
}

#[derive(Debug, Serialize)]
struct Param {
    name: String,
    value: String,
}

/// Explains `job` for `platform`; with `fds_dir` (Linux), also writes what
/// the sandbox finds on its descriptors there.
pub fn explain(
    job: &Job,
    data_dir: &Path,
    platform: Platform,
    fds_dir: Option<&Path>,
) -> Result<Explanation, ExplainError> {
    match (platform, fds_dir) {
        (Platform::Macos, Some(_)) => Err(ExplainError::FdsDirPlatform),
        (Platform::Macos, None) => Ok(Explanation::Seatbelt(seatbelt(job, data_dir)?)),
        (Platform::Linux, _) => Ok(Explanation::Bubblewrap(Box::new(bubblewrap(
            job, data_dir, fds_dir,
        )?))),
    }
}

/// The bubblewrap plan of `job` on this host.
fn bubblewrap(
    job: &Job,
    data_dir: &Path,
    fds_dir: Option<&Path>,
) -> Result<Bubblewrap, ExplainError> {
    let bwrap = Bwrap::find().unwrap_or(Bwrap {
        path: PathBuf::from("bwrap"),
        version: String::new(),
        features: BwrapFeatures {
            disable_userns: true,
        },
    });
    // The identity a launch here would have: the seccomp programs depend
    // on it.
    let identity = crate::sandbox::identity::detect().map_err(ExecError::from)?;
    let mounts = job.profile.resolve_mounts(profile::host_entry);
    let folders = shown_folders(job, data_dir, &mounts);
    let plan = plan::bwrap(
        job,
        Sandbox {
            program: &bwrap.path,
            features: bwrap.features,
            mounts: &mounts,
            folders: &folders,
            identity: &identity,
            nproc: None,
        },
    )?;
    let shim = match fds_dir {
        Some(dir) => Some(write_fds(&plan, dir)?),
        None => shim_file(&plan),
    };
    let mut fds: Vec<i32> = plan.files.iter().map(|(fd, _)| *fd).collect();
    fds.extend(plan.report_fd.into_iter().chain(plan.stderr_fd));
    fds.sort_unstable();
    let allow = job.network.allowlist();
    Ok(Bubblewrap {
        argv: plan
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        fds: fds
            .iter()
            .map(|&fd| (fd.to_string(), fds::descriptor(fd).about))
            .collect(),
        folders: plan
            .folders
            .iter()
            .map(|(fd, path)| (fd.to_string(), path.display().to_string()))
            .collect(),
        network: allow.map(|a| Network {
            allow: a.entries.iter().map(|e| e.to_string()).collect(),
            private: a.private,
            proxy: crate::sandbox::net::PROXY_URL,
            socket: crate::sandbox::net::SANDBOX_SOCKET,
        }),
        program: plan.program.clone(),
        sandbox: "bubblewrap",
        shim,
        allowlist: allow.map(crate::sandbox::net::describe),
        memory_bytes: job.limits.memory_bytes,
        plan,
    })
}

/// The host folders of `job`, with those made per execution shown by
/// where they would be.
fn shown_folders(job: &Job, data_dir: &Path, mounts: &[profile::Mount]) -> Folders {
    // The published root of the job's pins (a session's pins are only
    // known to a runner with a data dir).
    let identity = if job.session.is_some() {
        "<identity>".to_owned()
    } else {
        let pins: Vec<_> = job.skills.iter().map(|s| s.binding.clone()).collect();
        crate::package::hash::set_identity(&pins)
    };
    // Paths in the data dir are shown below `<data-dir>`.
    let shown = DataDir::unchecked(Path::new("<data-dir>"));
    let exec = shown
        .executions()
        .join(format!("{}.<random>", job.execution_id));
    // Files in or out put a fresh workspace on the host (exec::files).
    let workspace = job.workspace.clone().or_else(|| {
        crate::exec::files::needs_host_workspace(&job.files, &job.outputs)
            .then(|| exec.join("workspace"))
    });
    let extensions = match (&job.extensions_dir, &workspace) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(w)) => Some(w.join(DEFAULT_EXTENSIONS)),
        (None, None) => None,
    };
    // The prepared /etc the host's files give now (the first execution
    // makes it; see crate::sandbox::etcview).
    let views = DataDir::unchecked(data_dir).system_views();
    let etc = crate::sandbox::etcview::pieces(mounts)
        .and_then(|pieces| crate::sandbox::etcview::expected(&views, &pieces, &etc_extra()).ok());
    Folders {
        skills: shown.published().join(identity).join("skills"),
        workspace,
        extensions,
        net: job.network.allowlist().map(|_| exec.join("net")),
        etc: etc.map(|rel| shown.system_views().join(rel)),
        environment: job.environment.as_ref().map(|env| {
            // The record tells the path variables; the tree is checked
            // at launch, not here.
            let record = EnvStore::at(&DataDir::unchecked(data_dir)).record(env);
            let tree = EnvStore::at(&shown).tree_path(&env.hash);
            match record {
                Ok(record) => EnvMount::of(&record, tree),
                Err(_) => EnvMount {
                    tree,
                    variables: Vec::new(),
                },
            }
        }),
    }
}

/// The exec shim of a plan, as a file: the runner's own binary; `None`
/// for the small shim, which is no file until `--fds-dir` writes it.
fn shim_file(plan: &Plan) -> Option<PathBuf> {
    match plan.files.iter().find_map(|(_, c)| match c {
        Content::Shim(kind) => Some(*kind),
        Content::Bytes(_) => None,
    }) {
        Some(ShimKind::Small) => None,
        _ => std::env::current_exe().ok(),
    }
}

/// Writes the plan's files into `dir` under their names of the table
/// ([`crate::sandbox::fds`]), and the small exec shim as `8-shim` where
/// the job uses it; removes the files of an earlier explanation the plan
/// has none of (the account files in a prepared /etc). Returns the
/// shim's path.
#[cfg(target_os = "linux")]
fn write_fds(plan: &Plan, dir: &Path) -> Result<PathBuf, ExplainError> {
    std::fs::create_dir_all(dir).map_err(|source| ExplainError::CreateFdsDir {
        path: dir.to_owned(),
        source,
    })?;
    let mut shim = None;
    for row in fds::TABLE.iter().filter(|d| d.holds == fds::Holds::File) {
        let path = dir.join(fds::file_name(row.fd));
        let content = plan.files.iter().find(|(fd, _)| *fd == row.fd);
        match content.map(|(_, c)| c) {
            Some(Content::Bytes(bytes)) => write_fresh(&path, bytes, 0o644)?,
            Some(Content::Shim(ShimKind::Small)) => {
                let bytes = crate::sandbox::shim::small_shim().unwrap_or_default();
                write_fresh(&path, bytes, 0o755)?;
                shim = Some(path);
            }
            Some(Content::Shim(ShimKind::Runner)) => shim = std::env::current_exe().ok(),
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(ExplainError::RemoveFd { path, source: e })
                }
                _ => {}
            },
        }
    }
    shim.ok_or_else(|| ExplainError::WriteFd {
        path: dir.join(fds::file_name(fds::FD_SHIM)),
        source: io::Error::other("the runner's own binary cannot be found"),
    })
}

#[cfg(not(target_os = "linux"))]
fn write_fds(_plan: &Plan, _dir: &Path) -> Result<PathBuf, ExplainError> {
    Err(ExplainError::FdsDirBuild)
}

/// Writes `bytes` as a new file at `path`: whatever was there is removed
/// first (never rewritten: a running sandbox may execute the old shim),
/// and the new file is created exclusively, so a symlink planted at
/// `path` is refused, not followed.
#[cfg(target_os = "linux")]
fn write_fresh(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ExplainError> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let fail = |source| ExplainError::WriteFd {
        path: path.to_owned(),
        source,
    };
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(fail(e)),
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

impl fmt::Display for Bubblewrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `3 seccomp BPF, 7 shim report, …`: one entry per label.
        let mut listed: Vec<(String, &str)> = Vec::new();
        for fd in self.fds.keys().filter_map(|k| k.parse::<i32>().ok()) {
            let label = fds::descriptor(fd).label;
            match listed.last_mut() {
                Some((numbers, last)) if *last == label => numbers.push_str(&format!(",{fd}")),
                _ => listed.push((fd.to_string(), label)),
            }
        }
        let listed: Vec<String> = listed.iter().map(|(n, l)| format!("{n} {l}")).collect();
        writeln!(f, "# bubblewrap; fds: {}", listed.join(", "))?;
        let shim = fds::FD_SHIM;
        match &self.shim {
            Some(path) => writeln!(f, "# fd {shim}: the exec shim {}", path.display())?,
            None => writeln!(
                f,
                "# fd {shim}: the small exec shim the runner carries (--fds-dir DIR writes it as DIR/{})",
                fds::file_name(shim)
            )?,
        }
        for (fd, path) in &self.plan.folders {
            writeln!(
                f,
                "# fd {fd}: the folder {}, opened by the runner at launch",
                path.display()
            )?;
        }
        match &self.allowlist {
            None => writeln!(f, "# network: none (an empty network namespace)")?,
            Some(described) => {
                writeln!(f, "# network: {described}")?;
                writeln!(
                    f,
                    "# network: the proxy variables point at {}, where the shim's forwarder relays to the runner's proxy over {} (fd {})",
                    crate::sandbox::net::PROXY_URL,
                    crate::sandbox::net::SANDBOX_SOCKET,
                    fds::FD_NET
                )?;
            }
        }
        match &self.allowlist {
            None => writeln!(
                f,
                "# prepared: a session's command through a daemon with --prepared-sandboxes gets this sandbox prepared ahead, its shim started with {} and waiting on fd {} for this argv, environment and cwd{} (docs/prepared.md)",
                crate::sandbox::shim::HANDOVER_OPT,
                fds::FD_HANDOVER,
                if crate::sandbox::shim::shim_fits(self.memory_bytes, false) {
                    ""
                } else {
                    "; only where a memory cgroup holds memory_bytes (under RLIMIT_AS this little leaves the runner's binary, the prepared shim, too little to start)"
                }
            )?,
            Some(_) => writeln!(
                f,
                "# prepared: never (a network allowlist needs a sandbox and a proxy of its own)"
            )?,
        }
        writeln!(
            f,
            "{}",
            crate::sandbox::bwrap::shell_quote(&self.program, &self.plan.args)
        )
    }
}

/// `explain --platform macos`: the plan with the per-execution folder
/// shown under `<data-dir>/executions/<id>.RANDOM`.
fn seatbelt(job: &Job, data_dir: &Path) -> Result<Seatbelt, ExecError> {
    let exec = DataDir::unchecked(data_dir)
        .executions()
        .join(format!("{}.RANDOM", job.execution_id));
    let workspace = job
        .workspace
        .clone()
        .unwrap_or_else(|| exec.join("workspace"));
    let folders = crate::sandbox::macos::Folders {
        snapshot_root: exec.join("skills"),
        extensions: job
            .extensions_dir
            .clone()
            .unwrap_or_else(|| workspace.join(DEFAULT_EXTENSIONS)),
        workspace,
        tmp: exec.join("tmp"),
        // Chosen at launch; shown as such below.
        proxy_port: job.network.allowlist().map(|_| 1),
        // The record tells the path variables; the tree is checked at
        // launch, not here.
        environment: job.environment.as_ref().map(|env| {
            let store = EnvStore::at(&DataDir::unchecked(data_dir));
            let tree = store.tree_path(&env.hash);
            match store.record(env) {
                Ok(record) => plan::seatbelt_environment(&record, tree),
                Err(_) => crate::sandbox::macos::EnvFolder {
                    tree,
                    variables: Vec::new(),
                },
            }
        }),
    };
    let (rendered, argv) = plan::seatbelt(job, &folders)?;
    let shown = "localhost:<port chosen at launch>";
    let params = rendered
        .params
        .into_iter()
        .map(|(name, value)| Param {
            value: if name == seatbelt::PARAM_PROXY_ADDRESS {
                shown.to_owned()
            } else {
                value
            },
            name,
        })
        .collect();
    let argv = argv
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some((name, _)) if name == seatbelt::PARAM_PROXY_ADDRESS => format!("{name}={shown}"),
            _ => a,
        })
        .collect();
    Ok(Seatbelt {
        argv,
        params,
        profile: rendered.profile,
        sandbox: "seatbelt",
    })
}

impl fmt::Display for Seatbelt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, ";; Seatbelt profile (pass with sandbox-exec -p)")?;
        write!(f, "{}", self.profile)?;
        writeln!(f, ";; parameters (-D NAME=value)")?;
        for p in &self.params {
            writeln!(f, ";; {}={}", p.name, p.value)?;
        }
        Ok(())
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Explanation::Bubblewrap(b) => b.fmt(f),
            Explanation::Seatbelt(s) => s.fmt(f),
        }
    }
}
