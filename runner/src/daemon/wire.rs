//! The response bodies of [`super::routes`], field by field: the wire
//! contract of docs/daemon.md and docs/openapi.json in one place.
//!
//! Invariants:
//! - fields are declared in sorted order, the order the bodies had when
//!   they were built with `json!` (serde_json without `preserve_order`
//!   sorts keys), so clients see the same bytes; a test holds every type
//!   to it;
//! - an absent optional field is left out, never `null`;
//! - these types only serialise: the handlers decide the values.
//!
//! Bodies defined elsewhere: the result document and the NDJSON events
//! ([`crate::exec::result`], [`super::events`]), the execution listing
//! ([`super::registry::Page`]), and the skill host's own documents
//! (sessions, skills, chunks: [`crate::skillhost::session`]).

use serde::Serialize;

/// The HTTP API's version (`GET /v1/version`); additions keep it.
pub const API_VERSION: &str = "1";

use crate::error::ErrorKind;
use crate::package::hash;
use crate::skillhost::session::Delivery;

/// `GET /v1/health` (schema `Health`).
#[derive(Debug, Serialize)]
pub struct Health<'a> {
    /// The data dir's file system.
    pub data_dir: DataDirSpace,
    /// Executions admitted and not finished.
    pub executions: Executions,
    /// Whether a job can be sandboxed here.
    pub sandbox: Sandbox<'a>,
    /// The verdict; anything but `ok` answers 503.
    pub status: HealthStatus,
    /// The daemon's version.
    pub version: &'static str,
}

/// `health.executions`: the registry's counts now.
#[derive(Debug, Serialize)]
pub struct Executions {
    /// Waiting for a run slot.
    pub queued: usize,
    /// Holding a run slot.
    pub running: usize,
}

/// `health.sandbox`: bubblewrap and user namespaces on this host, and the
/// cached verdict of a real job's sandbox (`super::selfcheck`).
#[derive(Debug, Serialize)]
pub struct Sandbox<'a> {
    /// Jobs can be sandboxed: bubblewrap and user namespaces work, and
    /// the last self-check passed.
    pub available: bool,
    /// bubblewrap's version, when available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bwrap: Option<&'a str>,
    /// When the self-check last ran (RFC 3339).
    pub checked_at: String,
    /// Why not, when not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
}

/// `health.data_dir`: the space left where executions, the store and
/// sessions write.
#[derive(Debug, Serialize)]
pub struct DataDirSpace {
    /// Bytes free for the daemon (`statvfs` of the data dir); absent
    /// when it cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// Why health is `disk_full`, or why the space cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `health.status`, from the most to the least pressing cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Jobs can be sandboxed and are admitted (200).
    Ok,
    /// bubblewrap or user namespaces are missing (503).
    SandboxUnavailable,
    /// They are present, but a real job's sandbox failed its self-check (503).
    SandboxFailed,
    /// The daemon is draining after a stopping signal: no new executions,
    /// reads still answered (503).
    Draining,
    /// The data dir's file system has less than the documented bound
    /// free: executions, publishing and sessions would fail (503).
    DiskFull,
}

/// `GET /v1/version` (schema `Version`): what this daemon is and can do.
#[derive(Debug, Serialize)]
pub struct Version {
    /// The HTTP API's version; additions keep it.
    pub api_version: &'static str,
    pub capabilities: Capabilities,
    /// Always `skill-runner`.
    pub name: &'static str,
    /// The daemon's version.
    pub version: &'static str,
}

/// `version.capabilities`: what a client may ask of this daemon.
#[derive(Debug, Serialize)]
pub struct Capabilities {
    /// `POST /v1/executions?wait=false` answers 202 at once.
    pub detached_runs: bool,
    /// The interval of heartbeat events in a quiet stream.
    pub heartbeat_ms: u64,
    /// The largest job document accepted, in bytes.
    pub job_body_limit: u64,
    /// How each limit of a job is enforced here.
    pub limit_mechanisms: LimitMechanisms,
    /// The largest `limits.output_bytes` a job may ask for.
    pub max_output_bytes: u64,
    /// The longest `?wait=` of a long-poll.
    pub max_wait_ms: u64,
    /// The `network.mode` values a job may use.
    pub network_modes: &'static [&'static str],
    /// Jobs may set `network.private` (reach private addresses).
    pub network_private: bool,
    /// The sandboxes that work on this host; empty when none does.
    pub sandbox_kinds: &'static [&'static str],
    /// The tools a skill-host session offers.
    pub session_tools: &'static [&'static str],
    /// The media types of an execution's event stream.
    pub stream_formats: &'static [&'static str],
}

/// `version.capabilities.limit_mechanisms`: per job limit, what enforces
/// it (`supervisor`, `rlimit`, `cgroup v1`, `cgroup v2`, `tmpfs`,
/// `tmpfs_or_watcher`).
#[derive(Debug, Serialize)]
pub struct LimitMechanisms {
    pub cpu_ms: &'static str,
    pub disk_bytes: &'static str,
    pub file_size_bytes: &'static str,
    pub memory_bytes: &'static str,
    pub open_files: &'static str,
    pub output_bytes: &'static str,
    pub pids: &'static str,
    pub timeout_ms: &'static str,
    pub tmp_bytes: &'static str,
}

/// `POST /v1/skill-packages` (schema `Published`): a verified bundle, now
/// published.
#[derive(Debug, Serialize)]
pub struct Published {
    /// The set identity of the bundle's skills: a job may name it.
    pub identity: String,
    /// How many of the skills were not in the store before.
    pub new_packages: u64,
    /// One binding per skill, sorted by id.
    pub skills: Vec<Binding>,
    /// What the package checks noticed but did not refuse.
    pub warnings: Vec<String>,
}

/// `GET /v1/skill-packages/{identity}` (schema `SkillSet`): a published
/// set.
#[derive(Debug, Serialize)]
pub struct SkillSet {
    /// The identity asked for.
    pub identity: String,
    /// Its bindings, sorted by id.
    pub skills: Vec<Binding>,
}

/// `GET /v1/skill-packages` (schema `BindingList`): every published
/// binding.
#[derive(Debug, Serialize)]
pub struct BindingList {
    /// By id, then revision.
    pub skills: Vec<Binding>,
}

/// A binding on the wire (schema `Binding`): the keys sorted, unlike the
/// field order of [`hash::Binding`], which other documents keep.
#[derive(Debug, Serialize)]
pub struct Binding {
    /// SHA-256 of the package, lowercase hex.
    pub hash: String,
    /// The skill's id.
    pub id: String,
    /// The package's revision; a published `(id, revision)` never
    /// changes.
    pub revision: u64,
    /// The skill's declared version.
    pub version: String,
}

impl From<hash::Binding> for Binding {
    fn from(b: hash::Binding) -> Binding {
        Binding {
            hash: b.hash,
            id: b.id,
            revision: b.revision,
            version: b.version,
        }
    }
}

/// Bindings for the wire, in the order given.
pub fn bindings(skills: Vec<hash::Binding>) -> Vec<Binding> {
    skills.into_iter().map(Binding::from).collect()
}

/// A 202: an execution that has not finished (schemas
/// `ExecutionProgress` and `Cancelling`); `Location` names it.
#[derive(Debug, Serialize)]
pub struct Accepted<'a> {
    pub execution_id: &'a str,
    pub status: Phase,
}

/// Where an unfinished execution is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for a run slot.
    Queued,
    /// Holding a run slot.
    Running,
    /// Cancelled by `DELETE`, not ended yet.
    Cancelling,
}

/// Every refusal (schema `Error`): `{"error": {"kind", "message"}}`.
#[derive(Debug, Serialize)]
pub struct ErrorDocument<'a> {
    pub error: ErrorBody<'a>,
}

/// What went wrong, and the one sentence that says what to change.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub kind: ErrorKind,
    pub message: &'a str,
}

/// `GET /v1/sessions` (schema `SessionList`): newest first.
#[derive(Debug, Serialize)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
}

/// One session of the list (schema `SessionSummary`).
#[derive(Debug, Serialize)]
pub struct SessionSummary {
    pub created_at: String,
    pub delivery: Delivery,
    pub id: String,
    /// When a job or a tool call last used it (idle expiry counts from here).
    pub last_used_at: String,
    /// The ids of its skills.
    pub skills: Vec<String>,
}

/// `DELETE /v1/sessions/{id}` (schema `SessionDeleted`).
#[derive(Debug, Serialize)]
pub struct SessionDeleted {
    pub deleted: bool,
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serialises `v`, checking that its keys come out sorted at every
    /// level (as a `json!` body's did).
    fn sorted<T: Serialize>(v: &T) -> String {
        let text = serde_json::to_string(v).unwrap();
        let value = serde_json::to_value(v).unwrap();
        assert_eq!(text, serde_json::to_string(&value).unwrap());
        text
    }

    fn binding() -> hash::Binding {
        hash::Binding {
            id: "pdf".into(),
            revision: 2,
            version: "1.0.0".into(),
            hash: "ab".repeat(32),
        }
    }

    #[test]
    fn health_leaves_out_what_does_not_apply() {
        let mut health = Health {
            executions: Executions {
                queued: 2,
                running: 1,
            },
            sandbox: Sandbox {
                available: true,
                bwrap: Some("0.9.0"),
                checked_at: "2026-01-01T00:00:00Z".into(),
                reason: None,
            },
            data_dir: DataDirSpace {
                free_bytes: Some(1 << 30),
                reason: None,
            },
            status: HealthStatus::Ok,
            version: "0.1.0",
        };
        assert_eq!(
            sorted(&health),
            r#"{"data_dir":{"free_bytes":1073741824},"executions":{"queued":2,"running":1},"sandbox":{"available":true,"bwrap":"0.9.0","checked_at":"2026-01-01T00:00:00Z"},"status":"ok","version":"0.1.0"}"#
        );
        health.sandbox = Sandbox {
            available: false,
            bwrap: None,
            checked_at: "2026-01-01T00:00:00Z".into(),
            reason: Some("no bwrap"),
        };
        health.status = HealthStatus::SandboxUnavailable;
        assert_eq!(
            sorted(&health),
            r#"{"data_dir":{"free_bytes":1073741824},"executions":{"queued":2,"running":1},"sandbox":{"available":false,"checked_at":"2026-01-01T00:00:00Z","reason":"no bwrap"},"status":"sandbox_unavailable","version":"0.1.0"}"#
        );
        for (status, text) in [
            (HealthStatus::SandboxFailed, r#""sandbox_failed""#),
            (HealthStatus::Draining, r#""draining""#),
            (HealthStatus::DiskFull, r#""disk_full""#),
        ] {
            assert_eq!(serde_json::to_string(&status).unwrap(), text);
        }
    }

    #[test]
    fn version_keys_are_sorted() {
        let v = Version {
            api_version: "1",
            capabilities: Capabilities {
                detached_runs: true,
                heartbeat_ms: 10_000,
                job_body_limit: 1 << 20,
                limit_mechanisms: LimitMechanisms {
                    cpu_ms: "rlimit",
                    disk_bytes: "tmpfs_or_watcher",
                    file_size_bytes: "rlimit",
                    memory_bytes: "cgroup v2",
                    open_files: "rlimit",
                    output_bytes: "supervisor",
                    pids: "cgroup v2",
                    timeout_ms: "supervisor",
                    tmp_bytes: "tmpfs",
                },
                max_output_bytes: 1 << 24,
                max_wait_ms: 60_000,
                network_modes: &["none", "allowlist"],
                network_private: false,
                sandbox_kinds: &[],
                session_tools: &["list_skills"],
                stream_formats: &["application/x-ndjson"],
            },
            name: "skill-runner",
            version: "0.1.0",
        };
        assert!(sorted(&v).contains(r#""sandbox_kinds":[],"session_tools":["list_skills"]"#));
    }

    #[test]
    fn bindings_serialise_with_sorted_keys() {
        let set = SkillSet {
            identity: "cd".repeat(32),
            skills: bindings(vec![binding()]),
        };
        assert_eq!(
            sorted(&set),
            format!(
                r#"{{"identity":"{}","skills":[{{"hash":"{}","id":"pdf","revision":2,"version":"1.0.0"}}]}}"#,
                "cd".repeat(32),
                "ab".repeat(32)
            )
        );
        let published = Published {
            identity: "cd".repeat(32),
            new_packages: 1,
            skills: bindings(vec![binding()]),
            warnings: vec!["w".into()],
        };
        sorted(&published);
        sorted(&BindingList {
            skills: bindings(vec![binding(), binding()]),
        });
    }

    #[test]
    fn errors_and_session_documents_keep_their_keys() {
        let e = ErrorDocument {
            error: ErrorBody {
                kind: ErrorKind::BadJob,
                message: "m",
            },
        };
        assert_eq!(sorted(&e), r#"{"error":{"kind":"bad_job","message":"m"}}"#);
        let list = SessionList {
            sessions: vec![SessionSummary {
                created_at: "t0".into(),
                delivery: Delivery::SemanticTools,
                id: "ses-1".into(),
                last_used_at: "t1".into(),
                skills: vec!["pdf".into()],
            }],
        };
        assert_eq!(
            sorted(&list),
            r#"{"sessions":[{"created_at":"t0","delivery":"semantic_tools","id":"ses-1","last_used_at":"t1","skills":["pdf"]}]}"#
        );
        let gone = SessionDeleted {
            deleted: true,
            id: "ses-1".into(),
        };
        assert_eq!(sorted(&gone), r#"{"deleted":true,"id":"ses-1"}"#);
    }

    #[test]
    fn accepted_names_the_execution_and_its_phase() {
        for (status, word) in [
            (Phase::Queued, "queued"),
            (Phase::Running, "running"),
            (Phase::Cancelling, "cancelling"),
        ] {
            let a = Accepted {
                execution_id: "e1",
                status,
            };
            assert_eq!(
                sorted(&a),
                format!(r#"{{"execution_id":"e1","status":"{word}"}}"#)
            );
        }
    }
}
