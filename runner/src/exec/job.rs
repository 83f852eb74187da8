//! The job document (docs/formats.md): parsed raw, then validated.
//!
//! [`RawJob`] mirrors the JSON with unknown fields refused. [`Job::validate`]
//! turns it into a [`Job`] whose every field has been checked: the
//! execution id, argv, environment names (reserved and dangerous ones are
//! refused), cwd, skill bindings (no duplicates), host paths (absolute after
//! resolving against the job file's folder), profile and limits (profile
//! defaults filled in). Launch code accepts only a [`Job`].
//!
//! A job selects its skills either in `skills` or by naming a `session`
//! (docs/skill-host.md); giving both is an error. The front end resolves a
//! session into its frozen bindings before the job is queued (an unknown
//! or expired session is refused there, as not found), and the runner
//! refuses a job whose session nobody resolved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::package::environment::EnvRef;
use crate::package::format::{self, PackageError};
use crate::package::hash::Binding;
use crate::package::oci::{Reference, ReferenceError};
use crate::sandbox::net::policy::{self, Allowlist, Entry};
use crate::sandbox::net::Network;
use crate::sandbox::paths::{EXTENSIONS_VAR, SKILLS_VAR};
use crate::sandbox::profile::{Profile, ProfileError};

mod bounds;

pub use bounds::{
    arg_max, ARG_RESERVE, MAX_ARGV, MAX_ARG_BYTES, MAX_PIDS, MAX_TMPFS_BYTES, MIN_FILE_SIZE_BYTES,
    MIN_MEMORY_BYTES, MIN_PIDS,
};
use bounds::{check_arg_sizes, limits};

/// A skill entry of a job as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSkillRef {
    pub id: String,
    pub revision: u64,
    pub version: String,
    pub hash: String,
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Where a daemon pulls the package from when it does not hold it:
    /// `oci://HOST[:PORT]/REPO@sha256:…` (docs/daemon.md, "Pulls from registries").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The environment of a job as written: its name, and optionally where a
/// daemon pulls it from when it does not hold it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnvRef {
    pub id: String,
    pub hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Limits as written; absent ones come from the profile.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub timeout_ms: Option<u64>,
    pub output_bytes: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_ms: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub tmp_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
}

/// `network` as written: `"none"`, or `{"allow": [...], "private": false}`.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RawNetwork {
    Mode(String),
    Allow(RawAllowlist),
}

/// The allowlist form of `network` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAllowlist {
    pub allow: Vec<String>,
    #[serde(default)]
    pub private: bool,
}

impl<'de> Deserialize<'de> for RawNetwork {
    // By hand rather than `untagged`, whose error names no field.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(RawNetwork::Mode(s)),
            v @ serde_json::Value::Object(_) => serde_json::from_value(v)
                .map(RawNetwork::Allow)
                .map_err(|e| D::Error::custom(format!("network: {e}"))),
            _ => Err(D::Error::custom(
                "network must be \"none\" or {\"allow\": [...], \"private\": false}",
            )),
        }
    }
}

/// The job document as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    pub execution_id: Option<String>,
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub workspace: Option<PathBuf>,
    pub extensions_dir: Option<PathBuf>,
    #[serde(default)]
    pub skills: Vec<RawSkillRef>,
    pub session: Option<String>,
    pub network: Option<RawNetwork>,
    pub profile: Option<String>,
    #[serde(default)]
    pub limits: RawLimits,
    /// The environment the command imports from (docs/environments.md).
    pub environment: Option<RawEnvRef>,
    /// Files written into the workspace before the command starts
    /// (docs/files.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::exec::files::RawFile>,
    /// Patterns of the workspace files collected when the command ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

impl RawJob {
    /// Reads and parses a job document: from a file, whose folder relative
    /// paths resolve against, or from stdin when `path` is `-`, where they
    /// resolve against the current folder. Returns the job as written and
    /// that folder, for [`Job::validate`] or an admission.
    pub fn read(path: &Path) -> Result<(RawJob, Option<PathBuf>), JobError> {
        let (bytes, base) = if path == Path::new("-") {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map_err(JobError::ReadStdin)?;
            let cwd = std::env::current_dir()
                .and_then(|d| d.canonicalize())
                .map_err(JobError::CurrentDir)?;
            (bytes, Some(cwd))
        } else {
            let bytes = std::fs::read(path).map_err(|source| JobError::ReadFile {
                path: path.to_owned(),
                source,
            })?;
            let base = path
                .parent()
                .map(|p| match p.as_os_str().is_empty() {
                    true => Path::new("."),
                    false => p,
                })
                .and_then(|p| p.canonicalize().ok());
            (bytes, base)
        };
        Ok((serde_json::from_slice(&bytes)?, base))
    }
}

/// Limits in force for one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub timeout_ms: u64,
    pub output_bytes: u64,
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpu_ms: Option<u64>,
    pub file_size_bytes: u64,
    pub tmp_bytes: u64,
    pub open_files: u64,
    pub disk_bytes: u64,
}

/// A selected skill: its pin, and optionally the host folder to package
/// or the registry to pull it from (never both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRef {
    pub binding: Binding,
    pub path: Option<PathBuf>,
    /// A registry reference by digest: a daemon that does not hold the
    /// package pulls it from there before the job runs.
    pub source: Option<Reference>,
}

/// A validated job.
#[derive(Debug, Clone)]
pub struct Job {
    pub execution_id: String,
    /// Whether the id was generated (not given by the caller).
    pub generated_id: bool,
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub env: Vec<(String, String)>,
    /// Normalized, relative to the workspace; empty for the workspace.
    pub cwd: String,
    pub workspace: Option<PathBuf>,
    pub extensions_dir: Option<PathBuf>,
    pub skills: Vec<SkillRef>,
    /// A session whose frozen skills are used: `skills` is empty until
    /// the front end resolves the session into them
    /// ([`Job::resolve_session`]).
    pub session: Option<String>,
    /// The front end put the session's frozen bindings into `skills`.
    pub session_resolved: bool,
    /// `workspace` is the managed workspace of the job's session, which
    /// the daemon set (never the job document): the runner accepts it
    /// under `<data>/workspaces`, and `disk_bytes` bounds its whole size.
    pub managed_workspace: bool,
    pub network: Network,
    pub profile: Profile,
    pub limits: Limits,
    /// The environment bound read-only at `/opt/skill-env`, checked by
    /// the runner before the command starts.
    pub environment: Option<EnvRef>,
    /// Where a daemon pulls `environment` from when it does not hold it.
    pub environment_source: Option<Reference>,
    /// The host paths were resolved and checked by a confinement (the
    /// daemon's roots, `run --confine`): the runner must find each one
    /// unchanged when it runs the job, never resolve it anew.
    pub confined: bool,
    /// Written into the workspace before the command starts.
    pub files: Vec<crate::exec::files::InputFile>,
    /// Collected from the workspace when the command ends.
    pub outputs: Vec<crate::exec::files::Glob>,
}

/// Why a job was refused. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("the job is not valid JSON of the job format: {}", crate::text::single_line(&.0.to_string()))]
    Json(#[from] serde_json::Error),
    #[error("execution_id {0:?} is not admissible: use 1 to 160 of A-Z a-z 0-9 _ : . -")]
    ExecutionId(String),
    #[error("argv is empty: give the program and its arguments")]
    EmptyArgv,
    #[error("argv element {index} contains a NUL byte")]
    ArgvNul { index: usize },
    #[error(
        "env name {0:?} is not a valid variable name (A-Z a-z 0-9 _, not starting with a digit)"
    )]
    EnvName(String),
    #[error("env {0:?} is reserved or dangerous and may not be set by a job")]
    EnvReserved(String),
    #[error("env {0:?} has a value with a NUL byte")]
    EnvNul(String),
    #[error("cwd {0:?} must be a relative path inside the workspace, without '..'")]
    Cwd(String),
    #[error("skill {id:?}: {source}")]
    Skill { id: String, source: PackageError },
    #[error("skill {0:?} is selected twice")]
    DuplicateSkill(String),
    #[error("session {0:?} is not a session id: session ids are ses- and 32 lowercase hex digits, as POST /v1/sessions returns them")]
    SessionId(String),
    #[error("the job names a session and lists skills; give one or the other (the session's skills are frozen)")]
    SessionAndSkills,
    #[error("network {0:?} is not supported: write \"none\", or {{\"allow\": [\"pypi.org\", \"*.pythonhosted.org\"], \"private\": false}}")]
    Network(String),
    #[error("network.allow is empty: list the hosts the command may reach, or use \"none\"")]
    NetworkEmpty,
    #[error("network.allow has {0} entries; at most {max} are accepted", max = policy::MAX_ENTRIES)]
    NetworkTooMany(usize),
    #[error("network.allow[{index}] {entry:?} {source}")]
    NetworkEntry {
        index: usize,
        entry: String,
        source: policy::EntryError,
    },
    #[error("env {0:?} is set by the runner when the job has a network allowlist (it points at the proxy)")]
    EnvProxy(String),
    #[error("env {0:?} is set by the runner when the job names an environment (it points into /opt/skill-env); leave it out")]
    EnvEnvironment(String),
    #[error("environment {{id {id:?}, hash {hash:?}}} is not an environment's name: the id is lowercase letters and digits in words joined by '-', the hash 64 lowercase hex digits, as env add and env list print them")]
    EnvironmentRef { id: String, hash: String },
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("limit {name} must be a positive integer")]
    Limit { name: &'static str },
    #[error("limit {name} {value} is below its minimum of {min}: {why}; ask for at least {min}")]
    LimitTooSmall {
        name: &'static str,
        value: u64,
        min: u64,
        why: &'static str,
    },
    #[error("limit {name} {value} is above its maximum of {max}: {why}; ask for at most {max}")]
    LimitTooLarge {
        name: &'static str,
        value: u64,
        max: u64,
        why: &'static str,
    },
    #[error("argv has {count} elements; bubblewrap takes at most {max} (9000 arguments with the runner's own); pass long lists in a file or through stdin")]
    ArgvTooMany { count: usize, max: usize },
    #[error("{what} is {bytes} bytes; the kernel passes at most {max} bytes per argument; pass it in a file or through stdin")]
    ArgTooLong {
        what: String,
        bytes: usize,
        max: usize,
    },
    #[error("argv and env take {bytes} bytes; this host's ARG_MAX leaves {max} bytes for them (the runner keeps 64 KiB for its own); pass data in a file or through stdin")]
    ArgsTooLarge { bytes: usize, max: usize },
    #[error("{field} path {path:?} must be absolute when the job does not come from a file")]
    RelativePath { field: &'static str, path: PathBuf },
    #[error("cannot read job file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the job from stdin: {0}")]
    ReadStdin(std::io::Error),
    #[error("cannot read the current folder: {0}")]
    CurrentDir(std::io::Error),
    #[error(transparent)]
    Files(#[from] crate::exec::files::FilesError),
    #[error("the source of {what}: {source}")]
    Source {
        what: String,
        source: ReferenceError,
    },
    #[error("the source of {what}, {reference}, names a tag: a job's source names a digest (oci://HOST/REPO@sha256:…), so every node runs the same bytes; `skill-runner store pull --resolve-tag` prints the digest a tag names")]
    SourceTag { what: String, reference: String },
    #[error("skill {0:?} has both a path and a source; give one (path packages a host folder, source pulls from a registry)")]
    SourceAndPath(String),
}

/// Parses a job's `source`: a registry reference that names a digest.
fn source(what: impl Fn() -> String, text: Option<String>) -> Result<Option<Reference>, JobError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let reference = Reference::parse(&text).map_err(|source| JobError::Source {
        what: what(),
        source,
    })?;
    if reference.digest.is_none() {
        return Err(JobError::SourceTag {
            what: what(),
            reference: text,
        });
    }
    Ok(Some(reference))
}

/// Names a job may never set (docs/formats.md), besides the `LD_*` and
/// `BASH_FUNC_*` families.
const RESERVED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    SKILLS_VAR,
    EXTENSIONS_VAR,
    "BASH_ENV",
    "ENV",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "IFS",
    "PS4",
    "PROMPT_COMMAND",
    "CDPATH",
    "SHELLOPTS",
    "BASHOPTS",
];

/// True when a job may not set `name`.
pub fn env_reserved(name: &str) -> bool {
    RESERVED_ENV.contains(&name) || name.starts_with("LD_") || name.starts_with("BASH_FUNC_")
}

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// True for an admissible execution id: `^[A-Za-z0-9_:.-]{1,160}$`.
pub fn valid_execution_id(id: &str) -> bool {
    (1..=160).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'))
}

/// Validates the allowlist form of `network`, one entry at a time.
fn allowlist(raw: RawAllowlist) -> Result<Allowlist, JobError> {
    if raw.allow.is_empty() {
        return Err(JobError::NetworkEmpty);
    }
    if raw.allow.len() > policy::MAX_ENTRIES {
        return Err(JobError::NetworkTooMany(raw.allow.len()));
    }
    let entries = raw
        .allow
        .into_iter()
        .enumerate()
        .map(|(index, entry)| {
            Entry::parse(&entry).map_err(|source| JobError::NetworkEntry {
                index,
                entry,
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Allowlist {
        entries,
        private: raw.private,
    })
}

/// Normalizes a cwd; refuses absolute paths and `..`.
fn normalize_cwd(cwd: &str) -> Option<String> {
    if cwd.starts_with('/') || cwd.contains('\0') {
        return None;
    }
    let mut parts = Vec::new();
    for seg in cwd.split('/') {
        match seg {
            "" | "." => {}
            ".." => return None,
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// Checks the environment: names admissible and not reserved, no NUL.
fn environment(raw: BTreeMap<String, String>) -> Result<Vec<(String, String)>, JobError> {
    let mut env = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        if !valid_env_name(&name) {
            return Err(JobError::EnvName(name));
        }
        if env_reserved(&name) {
            return Err(JobError::EnvReserved(name));
        }
        if value.contains('\0') {
            return Err(JobError::EnvNul(name));
        }
        env.push((name, value));
    }
    Ok(env)
}

/// Validates `network`; with an allowlist, the job may not set the proxy
/// variables the runner sets.
fn network(raw: Option<RawNetwork>, env: &[(String, String)]) -> Result<Network, JobError> {
    let network = match raw {
        None => Network::None,
        Some(RawNetwork::Mode(m)) if m == "none" => Network::None,
        Some(RawNetwork::Mode(other)) => return Err(JobError::Network(other)),
        Some(RawNetwork::Allow(a)) => Network::Allow(allowlist(a)?),
    };
    if matches!(network, Network::Allow(_)) {
        if let Some((name, _)) = env
            .iter()
            .find(|(n, _)| crate::sandbox::net::PROXY_VARS.contains(&n.as_str()))
        {
            return Err(JobError::EnvProxy(name.clone()));
        }
    }
    Ok(network)
}

/// Variables the runner sets for a job that names an environment.
pub const ENVIRONMENT_VARS: &[&str] = &["PYTHONPATH"];

/// Checks an environment's name as the store spells them; the job may
/// not set the path variables the runner sets for it.
fn checked_environment(e: EnvRef, env: &[(String, String)]) -> Result<EnvRef, JobError> {
    let id_ok = format::check_id(&e.id).is_ok();
    let hash_ok = crate::package::hash::is_hex_digest(&e.hash);
    if !id_ok || !hash_ok {
        return Err(JobError::EnvironmentRef {
            id: e.id,
            hash: e.hash,
        });
    }
    if let Some((name, _)) = env
        .iter()
        .find(|(n, _)| ENVIRONMENT_VARS.contains(&n.as_str()))
    {
        return Err(JobError::EnvEnvironment(name.clone()));
    }
    Ok(e)
}

/// A host path of the job: absolute as written, else resolved against the
/// job file's folder; refused when there is none.
fn host_path(base: Option<&Path>, field: &'static str, p: PathBuf) -> Result<PathBuf, JobError> {
    if p.is_absolute() {
        Ok(p)
    } else if let Some(base) = base {
        Ok(base.join(p))
    } else {
        Err(JobError::RelativePath { field, path: p })
    }
}

/// Checks each skill's pin and refuses a skill selected twice.
fn skills(raw: Vec<RawSkillRef>, base: Option<&Path>) -> Result<Vec<SkillRef>, JobError> {
    let mut skills: Vec<SkillRef> = Vec::with_capacity(raw.len());
    for s in raw {
        let binding = Binding {
            id: s.id,
            revision: s.revision,
            version: s.version,
            hash: s.hash,
        };
        format::check_binding(&binding).map_err(|source| JobError::Skill {
            id: binding.id.clone(),
            source,
        })?;
        if skills.iter().any(|k| k.binding.id == binding.id) {
            return Err(JobError::DuplicateSkill(binding.id));
        }
        if s.path.is_some() && s.source.is_some() {
            return Err(JobError::SourceAndPath(binding.id));
        }
        let source = source(|| format!("skill {:?}", binding.id), s.source)?;
        let path = s.path.map(|p| host_path(base, "skill", p)).transpose()?;
        skills.push(SkillRef {
            binding,
            path,
            source,
        });
    }
    Ok(skills)
}

impl Job {
    /// What this job asks of the Seatbelt sandbox on macOS.
    pub fn seatbelt_request(&self) -> crate::sandbox::macos::Request<'_> {
        crate::sandbox::macos::Request {
            argv: &self.argv,
            env: &self.env,
            system: &self.profile.macos,
            allowlisted: self.network.allowlist().is_some(),
        }
    }

    /// Parses job JSON. `base` is the job file's folder, against which
    /// relative paths resolve; `None` (daemon) refuses relative paths.
    pub fn from_json(bytes: &[u8], base: Option<&Path>) -> Result<Job, JobError> {
        let raw: RawJob = serde_json::from_slice(bytes)?;
        Job::validate(raw, base)
    }

    /// Validates a raw job.
    pub fn validate(raw: RawJob, base: Option<&Path>) -> Result<Job, JobError> {
        let (execution_id, generated_id) = match raw.execution_id {
            Some(id) if valid_execution_id(&id) => (id, false),
            Some(id) => return Err(JobError::ExecutionId(id)),
            None => (format!("exec-{}", crate::fsx::random_hex()), true),
        };
        if raw.argv.is_empty() || raw.argv[0].is_empty() {
            return Err(JobError::EmptyArgv);
        }
        if let Some(index) = raw.argv.iter().position(|a| a.contains('\0')) {
            return Err(JobError::ArgvNul { index });
        }
        let env = environment(raw.env)?;
        let cwd = match raw.cwd {
            None => String::new(),
            Some(c) => normalize_cwd(&c).ok_or(JobError::Cwd(c))?,
        };
        if let Some(id) = &raw.session {
            if !valid_session_id(id) {
                return Err(JobError::SessionId(id.clone()));
            }
            if !raw.skills.is_empty() {
                return Err(JobError::SessionAndSkills);
            }
        }
        let network = network(raw.network, &env)?;
        let skills = skills(raw.skills, base)?;
        let workspace = raw
            .workspace
            .map(|p| host_path(base, "workspace", p))
            .transpose()?;
        let extensions_dir = raw
            .extensions_dir
            .map(|p| host_path(base, "extensions_dir", p))
            .transpose()?;
        let profile_base = base.unwrap_or(Path::new("/"));
        let profile = Profile::load(raw.profile.as_deref().unwrap_or("default"), profile_base)?;
        check_arg_sizes(&raw.argv, &env)?;
        let limits = limits(&raw.limits, &profile.limits)?;
        let (environment, environment_source) = match raw.environment {
            None => (None, None),
            Some(e) => {
                let what = || format!("environment {:?}", e.id);
                let reference = source(what, e.source.clone())?;
                let named = EnvRef {
                    id: e.id,
                    hash: e.hash,
                };
                (Some(checked_environment(named, &env)?), reference)
            }
        };
        let files = crate::exec::files::inputs(raw.files)?;
        let outputs = crate::exec::files::outputs(raw.outputs)?;
        Ok(Job {
            execution_id,
            generated_id,
            argv: raw.argv,
            stdin: raw.stdin.map(String::into_bytes),
            env,
            cwd,
            workspace,
            extensions_dir,
            skills,
            session: raw.session,
            session_resolved: false,
            managed_workspace: false,
            network,
            profile,
            limits,
            environment,
            environment_source,
            confined: false,
            files,
            outputs,
        })
    }

    /// Selects the frozen bindings of the session the job names, as the
    /// front end read them from the skill host: the job then runs exactly
    /// those, from the store.
    pub fn resolve_session(&mut self, bindings: Vec<Binding>) {
        self.skills = bindings
            .into_iter()
            .map(|binding| SkillRef {
                binding,
                path: None,
                source: None,
            })
            .collect();
        self.session_resolved = true;
    }

    /// The session the job names, if no front end has resolved it yet.
    pub fn unresolved_session(&self) -> Option<&str> {
        self.session.as_deref().filter(|_| !self.session_resolved)
    }

    /// The bindings of the selection.
    pub fn bindings(&self) -> Vec<Binding> {
        self.skills.iter().map(|s| s.binding.clone()).collect()
    }
}

/// True for a session id as `skillhost::session::new_session_id` makes them:
/// `^ses-[0-9a-f]{32}$`.
pub fn valid_session_id(id: &str) -> bool {
    id.strip_prefix("ses-").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
