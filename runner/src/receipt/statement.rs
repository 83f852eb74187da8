//! The in-toto Statement v1 a receipt signs (docs/receipts.md): its
//! subjects are the result's outputs by SHA-256 of their exact bytes in
//! the result (`stdout`, `stderr`, and `outputs/<path>` for each collected
//! file), and its predicate ([`PREDICATE_TYPE`]) holds what the result
//! says about the execution, copied member by member (a member too large
//! to copy, such as a long network log, by its canonical digest), and
//! what only the runner knew: the job's digest, the profile's and seccomp
//! programs' digests, the runner's version, bubblewrap's version and the
//! kernel release.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::receipt::canonical;

/// `_type` of an in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The project's predicate type.
pub const PREDICATE_TYPE: &str = "https://skill-runner.dev/receipt/v1";

/// Result members that are subjects, not copied into the predicate (and
/// `receipt`, the envelope itself).
pub const NOT_COPIED: &[&str] = &["stdout", "stderr", "receipt"];

/// A result member whose canonical JSON is longer than this is in the
/// predicate by its digest (`result_digests`), not copied.
pub const COPY_LIMIT: usize = 64 * 1024;

/// What the runner knew of an execution that the result does not say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    /// The validated job's digest; `None` when no job was validated (a
    /// job document refused as written).
    pub job: Option<JobDigest>,
    /// The resolved profile; `None` without a validated job.
    pub profile: Option<ProfileDigest>,
    pub runner: RunnerFacts,
}

/// The canonical digest of a validated job (docs/receipts.md, "The job
/// digest"), and of each of its parts, so a replay can say which differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobDigest {
    pub sha256: String,
    pub parts: BTreeMap<String, String>,
    /// `caller` when the job named its execution id, `runner` when the
    /// runner made it.
    pub execution_id_from: &'static str,
}

/// The resolved profile and its compiled seccomp programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileDigest {
    pub name: String,
    pub sha256: String,
    /// Program name (`rules`, `guard`) → SHA-256 of its bytes as loaded;
    /// empty where there are none (macOS, or a profile that did not
    /// compile).
    pub seccomp: BTreeMap<String, String>,
}

/// The runner and the host it ran on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunnerFacts {
    pub version: String,
    pub bubblewrap: Option<String>,
    pub kernel_release: Option<String>,
}

/// A subject: `{name, digest: {sha256}}`.
pub fn subject(name: &str, sha256: &str) -> Value {
    json!({"name": name, "digest": {"sha256": sha256}})
}

/// The subjects a result has: `stdout`, `stderr` (their UTF-8 bytes in
/// the result) and `outputs/<path>` for each entry of `outputs` that
/// names a `path` and a `sha256`, in that order. `None` when `stdout` or
/// `stderr` is not a string.
pub fn subjects_of(result: &Map<String, Value>) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    for name in ["stdout", "stderr"] {
        let text = result.get(name)?.as_str()?;
        out.push(subject(name, &canonical::bytes_sha256_hex(text.as_bytes())));
    }
    if let Some(Value::Array(files)) = result.get("outputs") {
        for f in files {
            if let (Some(path), Some(sha)) = (
                f.get("path").and_then(Value::as_str),
                f.get("sha256").and_then(Value::as_str),
            ) {
                out.push(subject(&format!("outputs/{path}"), sha));
            }
        }
    }
    Some(out)
}

/// `{stdout: {bytes, truncated}, stderr: …}`: the streams' lengths in the
/// result and whether the output cap cut them.
pub fn streams_of(result: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for name in ["stdout", "stderr"] {
        let bytes = result.get(name).and_then(Value::as_str).map(str::len);
        let truncated = result.get(&format!("{name}_truncated")).cloned();
        out.insert(
            name.to_owned(),
            json!({"bytes": bytes, "truncated": truncated.unwrap_or(Value::Null)}),
        );
    }
    Value::Object(out)
}

/// The canonical bytes of the statement about `result` (its members,
/// `receipt` aside): what the envelope carries and the signature covers.
/// `invocation` is fresh per signature: two executions never share one,
/// whatever execution id their jobs named.
///
/// Written from the parts up, so each result member is written once: its
/// canonical bytes decide whether it is copied (at most [`COPY_LIMIT`])
/// and are then the copy itself.
pub fn payload(result: &Map<String, Value>, facts: &Facts, invocation: &str) -> Vec<u8> {
    let mut copied: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut digests = Map::new();
    for (k, v) in result {
        if NOT_COPIED.contains(&k.as_str()) {
            continue;
        }
        let bytes = canonical::to_vec(v);
        if bytes.len() > COPY_LIMIT {
            let sha = canonical::bytes_sha256_hex(&bytes);
            digests.insert(k.clone(), json!({ "sha256": sha }));
        } else {
            copied.push((k.as_str(), bytes));
        }
    }
    let host_identity = result
        .get("identity")
        .and_then(|i| i.get("mode"))
        .cloned()
        .unwrap_or(Value::Null);
    let predicate = json!({
        "execution_id": result.get("execution_id").cloned().unwrap_or(Value::Null),
        "invocation_id": invocation,
        "job": facts.job,
        "profile": facts.profile,
        "runner": {
            "version": facts.runner.version,
            "bubblewrap": facts.runner.bubblewrap,
            "kernel_release": facts.runner.kernel_release,
            "host_identity_mode": host_identity,
        },
        "streams": streams_of(result),
        "result_digests": digests,
    });
    let predicate = with_member(&predicate, "result", canonical::object_of(&copied));
    let statement = json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects_of(result).unwrap_or_default(),
        "predicateType": PREDICATE_TYPE,
    });
    with_member(&statement, "predicate", predicate)
}

/// The canonical bytes of the object `doc` with one more member, `name`,
/// given as its canonical bytes.
fn with_member(doc: &Value, name: &'static str, bytes: Vec<u8>) -> Vec<u8> {
    let mut members = match doc {
        Value::Object(map) => canonical::members(map),
        _ => Vec::new(),
    };
    members.push((name, bytes));
    canonical::object_of(&members)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statement as docs/receipts.md describes it, built whole and
    /// then written: the oracle [`payload`] must agree with byte for byte.
    fn whole(result: &Map<String, Value>, facts: &Facts, invocation: &str) -> Vec<u8> {
        let mut copied = Map::new();
        let mut digests = Map::new();
        for (k, v) in result {
            if NOT_COPIED.contains(&k.as_str()) {
                continue;
            }
            let bytes = canonical::to_vec(v);
            if bytes.len() > COPY_LIMIT {
                digests.insert(
                    k.clone(),
                    json!({"sha256": canonical::bytes_sha256_hex(&bytes)}),
                );
            } else {
                copied.insert(k.clone(), v.clone());
            }
        }
        canonical::to_vec(&json!({
            "_type": STATEMENT_TYPE,
            "subject": subjects_of(result).unwrap_or_default(),
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "execution_id": result.get("execution_id").cloned().unwrap_or(Value::Null),
                "invocation_id": invocation,
                "job": facts.job,
                "profile": facts.profile,
                "runner": {
                    "version": facts.runner.version,
                    "bubblewrap": facts.runner.bubblewrap,
                    "kernel_release": facts.runner.kernel_release,
                    "host_identity_mode": result.get("identity").and_then(|i| i.get("mode")).cloned(),
                },
                "streams": streams_of(result),
                "result": copied,
                "result_digests": digests,
            },
        }))
    }

    #[test]
    fn the_payload_is_the_whole_statement_written_at_once() {
        let facts = Facts {
            job: Some(JobDigest {
                sha256: "ab".repeat(32),
                parts: BTreeMap::from([("argv".to_owned(), "cd".repeat(32))]),
                execution_id_from: "caller",
            }),
            profile: None,
            runner: RunnerFacts {
                version: "1.2.3".into(),
                bubblewrap: Some("0.8.0".into()),
                kernel_release: None,
            },
        };
        let result = json!({
            "execution_id": "e-1",
            "status": "exited",
            "exit_code": 0,
            "stdout": "hi\n",
            "stderr": "",
            "stdout_truncated": false,
            "identity": {"mode": "mapped"},
            "outputs": [{"path": "a/b.txt", "sha256": "ef".repeat(32)}],
            "network": {"log": "x".repeat(COPY_LIMIT + 1)},
            "note": "tab\t\u{1}\u{10000}",
            "receipt": {"ignored": true},
        });
        let Value::Object(result) = result else {
            unreachable!()
        };
        let bytes = payload(&result, &facts, "inv-1");
        assert_eq!(bytes, whole(&result, &facts, "inv-1"));
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(doc["predicate"]["result_digests"]["network"]["sha256"].is_string());
        assert!(doc["predicate"]["result"].get("network").is_none());
        assert_eq!(doc["predicate"]["result"]["note"], result["note"]);
    }
}
