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
//! (docs/skill-host.md), whose frozen bindings the runner reads from the
//! data dir when it prepares the execution; giving both is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::package::format::{self, PackageError};
use crate::package::hash::Binding;
use crate::sandbox::net::policy::{self, Allowlist, Entry};
use crate::sandbox::net::Network;
use crate::sandbox::paths::{EXTENSIONS_VAR, SKILLS_VAR};
use crate::sandbox::profile::{Profile, ProfileError};

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

/// A selected skill: its pin, and optionally the host folder to package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRef {
    pub binding: Binding,
    pub path: Option<PathBuf>,
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
    /// A session whose frozen skills are used (then `skills` is empty).
    pub session: Option<String>,
    pub network: Network,
    pub profile: Profile,
    pub limits: Limits,
    /// The host paths were resolved and checked by a confinement (the
    /// daemon's roots, `run --confine`): the runner must find each one
    /// unchanged when it runs the job, never resolve it anew.
    pub confined: bool,
}

/// The most argv elements a job may have. bubblewrap refuses more than
/// 9000 arguments in all (measured with bubblewrap 0.8: its own
/// `MAX_ARGS`), and the runner's options for it take a few hundred.
pub const MAX_ARGV: usize = 8192;

/// The longest argv element or `NAME=value` env entry: the kernel's
/// `MAX_ARG_STRLEN` (32 pages of 4 KiB) less its NUL.
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Room of `ARG_MAX` kept for bubblewrap's options and the runner's
/// environment.
pub const ARG_RESERVE: usize = 64 * 1024;

/// The smallest `memory_bytes`: bubblewrap and the exec shim do not start
/// in less.
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;
/// The smallest `pids`: bubblewrap, the sandbox's init and the exec shim
/// count too.
pub const MIN_PIDS: u64 = 8;
/// The smallest `file_size_bytes`: bubblewrap writes the sandbox's
/// `/etc/passwd` and `/etc/group` under it.
pub const MIN_FILE_SIZE_BYTES: u64 = 4096;
/// The largest `pids`: Linux's `PID_MAX_LIMIT` (no `pid_max` is higher).
pub const MAX_PIDS: u64 = 4 << 20;
/// The largest `tmp_bytes` and `disk_bytes`: bubblewrap's `--size` is a
/// signed 64-bit number.
pub const MAX_TMPFS_BYTES: u64 = i64::MAX as u64;

/// Bytes `execve` may take for argv and the environment here
/// (`sysconf(_SC_ARG_MAX)`, 2 MiB when unknown).
pub fn arg_max() -> usize {
    crate::supervise::sys::arg_max().unwrap_or(2 << 20)
}

/// Checks argv and env against bubblewrap's and the kernel's limits, so
/// that a job too large for them is refused as such (a fault of the job),
/// never reported as a sandbox that cannot start.
fn check_arg_sizes(argv: &[String], env: &[(String, String)]) -> Result<(), JobError> {
    if argv.len() > MAX_ARGV {
        return Err(JobError::ArgvTooMany {
            count: argv.len(),
            max: MAX_ARGV,
        });
    }
    let ptr = std::mem::size_of::<usize>();
    let mut total = 0usize;
    for (i, a) in argv.iter().enumerate() {
        if a.len() > MAX_ARG_BYTES {
            return Err(JobError::ArgTooLong {
                what: format!("argv element {i}"),
                bytes: a.len(),
                max: MAX_ARG_BYTES,
            });
        }
        total += a.len() + 1 + ptr;
    }
    for (name, value) in env {
        let len = name.len() + 1 + value.len();
        if len > MAX_ARG_BYTES {
            return Err(JobError::ArgTooLong {
                what: format!("env {}", crate::text::single_line(name)),
                bytes: len,
                max: MAX_ARG_BYTES,
            });
        }
        total += len + 1 + ptr;
    }
    let max = arg_max().saturating_sub(ARG_RESERVE);
    if total > max {
        return Err(JobError::ArgsTooLarge { bytes: total, max });
    }
    Ok(())
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
        let mut env = Vec::with_capacity(raw.env.len());
        for (name, value) in raw.env {
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
        let network = match raw.network {
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
        let resolve = |field: &'static str, p: PathBuf| -> Result<PathBuf, JobError> {
            if p.is_absolute() {
                Ok(p)
            } else if let Some(base) = base {
                Ok(base.join(p))
            } else {
                Err(JobError::RelativePath { field, path: p })
            }
        };
        let mut skills: Vec<SkillRef> = Vec::with_capacity(raw.skills.len());
        for s in raw.skills {
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
            let path = s.path.map(|p| resolve("skill", p)).transpose()?;
            skills.push(SkillRef { binding, path });
        }
        let workspace = raw.workspace.map(|p| resolve("workspace", p)).transpose()?;
        let extensions_dir = raw
            .extensions_dir
            .map(|p| resolve("extensions_dir", p))
            .transpose()?;
        let profile_base = base.unwrap_or(Path::new("/"));
        let profile = Profile::load(raw.profile.as_deref().unwrap_or("default"), profile_base)?;
        check_arg_sizes(&raw.argv, &env)?;
        let d = profile.limits;
        let l = raw.limits;
        for (name, value, min, why) in [
            (
                "memory_bytes",
                l.memory_bytes,
                MIN_MEMORY_BYTES,
                "bubblewrap and the exec shim cannot start in less",
            ),
            (
                "pids",
                l.pids,
                MIN_PIDS,
                "the sandbox's own processes (bubblewrap, its init, the exec shim) count too",
            ),
            (
                "file_size_bytes",
                l.file_size_bytes,
                MIN_FILE_SIZE_BYTES,
                "bubblewrap writes the sandbox's /etc/passwd under it",
            ),
        ] {
            if let Some(value) = value.filter(|&v| v > 0 && v < min) {
                return Err(JobError::LimitTooSmall {
                    name,
                    value,
                    min,
                    why,
                });
            }
        }
        for (name, value, max, why) in [
            (
                "pids",
                l.pids,
                MAX_PIDS,
                "no kernel has more process ids (PID_MAX_LIMIT)",
            ),
            (
                "tmp_bytes",
                l.tmp_bytes,
                MAX_TMPFS_BYTES,
                "bubblewrap sizes a tmpfs with a signed 64-bit number",
            ),
            (
                "disk_bytes",
                l.disk_bytes,
                MAX_TMPFS_BYTES,
                "a fresh workspace is a tmpfs, which bubblewrap sizes with a signed 64-bit number",
            ),
        ] {
            if let Some(value) = value.filter(|&v| v > max) {
                return Err(JobError::LimitTooLarge {
                    name,
                    value,
                    max,
                    why,
                });
            }
        }
        let positive = |v: Option<u64>, default: u64, name| match v {
            None => Ok(default),
            Some(0) => Err(JobError::Limit { name }),
            Some(v) => Ok(v),
        };
        let limits = Limits {
            timeout_ms: positive(l.timeout_ms, d.timeout_ms, "timeout_ms")?,
            output_bytes: positive(l.output_bytes, d.output_bytes, "output_bytes")?,
            memory_bytes: positive(l.memory_bytes, d.memory_bytes, "memory_bytes")?,
            pids: positive(l.pids, d.pids, "pids")?,
            cpu_ms: match l.cpu_ms {
                Some(0) => return Err(JobError::Limit { name: "cpu_ms" }),
                v => v,
            },
            file_size_bytes: positive(l.file_size_bytes, d.file_size_bytes, "file_size_bytes")?,
            tmp_bytes: positive(l.tmp_bytes, d.tmp_bytes, "tmp_bytes")?,
            open_files: d.open_files,
            disk_bytes: positive(l.disk_bytes, d.disk_bytes, "disk_bytes")?,
        };
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
            network,
            profile,
            limits,
            confined: false,
        })
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
mod tests {
    use super::*;

    fn job(json: &str) -> Result<Job, JobError> {
        Job::from_json(json.as_bytes(), Some(Path::new("/jobs")))
    }

    const H: &str = "b5bcc438dc1139bc1aadc8ad73d72b6717577bf8b39c13207e5f9f583582227b";

    #[test]
    fn argv_over_the_kernel_or_bubblewrap_limits_is_refused() {
        let many = serde_json::json!({"argv": vec!["x"; MAX_ARGV + 1]}).to_string();
        let e = job(&many).unwrap_err().to_string();
        assert!(e.contains("at most 8192"), "{e}");
        assert!(job(&serde_json::json!({"argv": vec!["x"; MAX_ARGV]}).to_string()).is_ok());
        let long = "y".repeat(MAX_ARG_BYTES + 1);
        let e = job(&serde_json::json!({"argv": ["echo", long]}).to_string())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("argv element 1") && e.contains("per argument"),
            "{e}"
        );
        let e = job(&serde_json::json!({"argv": ["true"], "env": {"BIG": long}}).to_string())
            .unwrap_err()
            .to_string();
        assert!(e.contains("env BIG"), "{e}");
        // Many elements that each fit, but not together.
        let piece = "z".repeat(100_000);
        let n = arg_max() / 100_000 + 1;
        let e = job(&serde_json::json!({"argv": vec![piece; n]}).to_string())
            .unwrap_err()
            .to_string();
        assert!(e.contains("ARG_MAX"), "{e}");
    }

    #[test]
    fn minimal_job_gets_profile_defaults() {
        let j = job(r#"{"argv":["true"]}"#).unwrap();
        assert!(j.generated_id);
        assert_eq!(j.limits.timeout_ms, 30000);
        assert_eq!(j.limits.cpu_ms, None);
        assert_eq!(j.cwd, "");
    }

    #[test]
    fn a_session_id_is_accepted() {
        let j =
            job(r#"{"argv":["true"],"session":"ses-0123456789abcdef0123456789abcdef"}"#).unwrap();
        assert_eq!(
            j.session.as_deref(),
            Some("ses-0123456789abcdef0123456789abcdef")
        );
        assert!(j.skills.is_empty());
    }

    #[test]
    fn paths_resolve_against_the_job_folder() {
        let j = job(&format!(
            r#"{{"argv":["true"],"workspace":"ws","skills":[{{"id":"hello","revision":1,"version":"1","hash":"{H}","path":"../skills/hello"}}]}}"#
        ))
        .unwrap();
        assert_eq!(j.workspace.as_deref(), Some(Path::new("/jobs/ws")));
        assert_eq!(
            j.skills[0].path.as_deref(),
            Some(Path::new("/jobs/../skills/hello"))
        );
        let e = Job::from_json(br#"{"argv":["true"],"workspace":"ws"}"#, None).unwrap_err();
        assert!(matches!(e, JobError::RelativePath { .. }));
    }

    #[test]
    fn a_network_allowlist_parses() {
        let j = job(r#"{"argv":["true"],"network":"none"}"#).unwrap();
        assert_eq!(j.network, Network::None);
        let j = job(
            r#"{"argv":["true"],"network":{"allow":["PyPI.org","*.pythonhosted.org","10.0.0.0/8:8080"],"private":true}}"#,
        )
        .unwrap();
        let a = j.network.allowlist().unwrap();
        assert!(a.private);
        let shown: Vec<String> = a.entries.iter().map(|e| e.to_string()).collect();
        assert_eq!(shown, ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8:8080"]);
        // Without an allowlist the proxy variables are the job's own.
        assert!(job(r#"{"argv":["true"],"env":{"HTTP_PROXY":"x"}}"#).is_ok());
        let many: Vec<String> = (0..=policy::MAX_ENTRIES)
            .map(|i| format!("h{i}.org"))
            .collect();
        let e = job(&format!(
            r#"{{"argv":["true"],"network":{{"allow":{}}}}}"#,
            serde_json::to_string(&many).unwrap()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("at most 256"), "{e}");
    }

    #[test]
    fn bad_jobs_are_refused_with_a_reason() {
        let cases = [
            (r#"{"argv":["true"],"extra":1}"#, "unknown field"),
            (r#"{"argv":[]}"#, "argv is empty"),
            (r#"{"argv":"true"}"#, "invalid type"),
            (r#"{"argv":["true"],"env":{"PATH":"/x"}}"#, "reserved"),
            (r#"{"argv":["true"],"env":{"LD_PRELOAD":"/x"}}"#, "reserved"),
            (
                r#"{"argv":["true"],"env":{"BASH_FUNC_x%%":"() { :; }"}}"#,
                "not a valid",
            ),
            (
                r#"{"argv":["true"],"env":{"SCIENCEDISCOVERY_SKILLS_DIR":"/x"}}"#,
                "reserved",
            ),
            (r#"{"argv":["true"],"env":{"1X":"y"}}"#, "not a valid"),
            (r#"{"argv":["true"],"cwd":"../x"}"#, "cwd"),
            (r#"{"argv":["true"],"cwd":"/etc"}"#, "cwd"),
            (r#"{"argv":["true"],"execution_id":"a b"}"#, "execution_id"),
            (r#"{"argv":["true"],"network":"host"}"#, "network"),
            (r#"{"argv":["true"],"network":7}"#, "network must be"),
            (
                r#"{"argv":["true"],"network":{"allow":["a.org"],"privat":true}}"#,
                "network: unknown field `privat`",
            ),
            (
                r#"{"argv":["true"],"network":{"private":true}}"#,
                "network: missing field `allow`",
            ),
            (
                r#"{"argv":["true"],"network":{"allow":[]}}"#,
                "network.allow is empty",
            ),
            (
                r#"{"argv":["true"],"network":{"allow":["pypi.org","a.*.org"]}}"#,
                "network.allow[1] \"a.*.org\" has a wildcard",
            ),
            (
                r#"{"argv":["true"],"network":{"allow":["pypi.org:99999"]}}"#,
                "has port \"99999\"",
            ),
            (
                r#"{"argv":["true"],"network":{"allow":["10.0.0.1/8"]}}"#,
                "write the block's first address, 10.0.0.0/8",
            ),
            (
                r#"{"argv":["true"],"network":{"allow":["a.org"]},"env":{"https_proxy":"x"}}"#,
                "set by the runner",
            ),
            (r#"{"argv":["true"],"session":"s1"}"#, "not a session id"),
            (
                r#"{"argv":["true"],"session":"ses-0123456789abcdef0123456789abcdef","skills":[{"id":"x","revision":1,"version":"1","hash":"b5bcc438dc1139bc1aadc8ad73d72b6717577bf8b39c13207e5f9f583582227b"}]}"#,
                "one or the other",
            ),
            (r#"{"argv":["true"],"profile":"strict"}"#, "built-in"),
            (
                r#"{"argv":["true"],"limits":{"memory_bytes":1}}"#,
                "below its minimum of 16777216",
            ),
            (
                r#"{"argv":["true"],"limits":{"pids":3}}"#,
                "below its minimum of 8",
            ),
            (
                r#"{"argv":["true"],"limits":{"file_size_bytes":10}}"#,
                "below its minimum of 4096",
            ),
            (
                r#"{"argv":["true"],"limits":{"pids":18446744073709551615}}"#,
                "pids 18446744073709551615 is above its maximum of 4194304",
            ),
            (
                r#"{"argv":["true"],"limits":{"tmp_bytes":9223372036854775808}}"#,
                "tmp_bytes 9223372036854775808 is above its maximum",
            ),
            (
                r#"{"argv":["true"],"limits":{"disk_bytes":18446744073709551615}}"#,
                "disk_bytes 18446744073709551615 is above its maximum",
            ),
            (
                r#"{"argv":["true"],"limits":{"timeout_ms":0}}"#,
                "timeout_ms",
            ),
            (
                r#"{"argv":["true"],"limits":{"walltime":5}}"#,
                "unknown field",
            ),
            (
                r#"{"argv":["true"],"skills":[{"id":"x","revision":1,"version":"1","hash":"ABC"}]}"#,
                "64 lowercase hex",
            ),
            (
                r#"{"argv":["true"],"skills":[{"id":"Bad","revision":1,"version":"1","hash":"x"}]}"#,
                "ids match",
            ),
            ("{not json", "not valid JSON"),
        ];
        for (json, needle) in cases {
            let e = job(json).expect_err(json).to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
        let upper = H.to_uppercase();
        let e = job(&format!(
            r#"{{"argv":["true"],"skills":[{{"id":"x","revision":1,"version":"1","hash":"{upper}"}}]}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("lowercase"), "{e}");
        let e = job(&format!(
            r#"{{"argv":["true"],"skills":[{{"id":"x","revision":1,"version":"1","hash":"{H}"}},{{"id":"x","revision":2,"version":"1","hash":"{H}"}}]}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("selected twice"), "{e}");
    }

    /// Found by fuzzing (target `job`): a refusal that quotes the job (an
    /// unknown key, a profile path) is one line even when the job holds a
    /// newline or a carriage return there.
    #[test]
    fn refusals_that_quote_the_job_are_one_line() {
        for json in [
            r#"{"argv":["true"],"wut\n":1}"#,
            r#"{"argv":["true"],"profile":"p\rofiles/x.toml"}"#,
            r#"{"argv":["true"],"profile":"x/\n.toml"}"#,
        ] {
            let e = job(json).expect_err(json).to_string();
            assert!(!e.contains(['\n', '\r']), "{json}: {e:?}");
        }
        let e = job(r#"{"argv":["true"],"wut\n":1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `wut\\n`"), "{e}");
    }
}
