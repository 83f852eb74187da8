//! Replaying a receipted execution (`skill-runner replay JOB RESULT`,
//! docs/receipts.md): the result's receipt is verified, the job's digest
//! must be the one the receipt names (else the parts that differ are
//! named: argv, env, profile, …), and the job is run again with the same
//! package and environment bytes (the store's, by their pins: a re-run
//! whose bytes are gone is refused with the runner's sentence), the same
//! profile and limits. Each subject (`stdout`, `stderr`, each output
//! file) and each fact the re-run must repeat (the skills' bytes, the
//! environment, the profile's and seccomp programs' digests, the limits
//! as applied, how it ended) is then `identical` or `different`.

use serde_json::{json, Value};

use crate::exec::job::Job;
use crate::exec::result::{ExecResult, Status};
use crate::exec::{OutputMode, RunOptions, Runner};
use crate::receipt::verify::{self, VerifyError};
use crate::receipt::PublicKey;

/// Why a replay could not compare.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the result's receipt does not hold, so there is nothing to replay: {0}")]
    Verify(#[from] VerifyError),
    #[error("the receipt names no job digest (the job was refused as written), so it cannot be replayed")]
    NoJob,
    #[error("the job is not the one the receipt names: its {} {}; run replay with the job file that was run", and_list(parts), if parts.len() == 1 { "differs" } else { "differ" })]
    JobDiffers { parts: Vec<String> },
    #[error("the re-run was refused: {message}")]
    Refused { message: String },
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// One comparison of the replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compared {
    pub name: String,
    pub identical: bool,
}

/// What a replay found.
#[derive(Debug, Clone)]
pub struct Report {
    pub compared: Vec<Compared>,
    /// The re-run's result (with its own receipt, when receipts are on).
    pub rerun: ExecResult,
}

impl Report {
    pub fn identical(&self) -> bool {
        self.compared.iter().all(|c| c.identical)
    }

    /// One line per subject and fact: `stdout: identical`.
    pub fn render(&self) -> String {
        self.compared
            .iter()
            .map(|c| {
                let word = if c.identical {
                    "identical"
                } else {
                    "different"
                };
                format!("{}: {word}\n", c.name)
            })
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let compared: serde_json::Map<String, Value> = self
            .compared
            .iter()
            .map(|c| {
                let word = if c.identical {
                    "identical"
                } else {
                    "different"
                };
                (c.name.clone(), json!(word))
            })
            .collect();
        json!({"identical": self.identical(), "compared": compared, "rerun": self.rerun})
    }
}

/// The parts of `job` whose digests differ from the receipt's.
fn differing_parts(job: &Job, said: &Value) -> Vec<String> {
    let digest = crate::exec::attest::job_digest(job);
    if said.get("sha256").and_then(Value::as_str) == Some(digest.sha256.as_str()) {
        return Vec::new();
    }
    let mut parts: Vec<String> = digest
        .parts
        .iter()
        .filter(|(k, v)| said["parts"].get(k.as_str()).and_then(Value::as_str) != Some(v.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    if parts.is_empty() {
        parts.push("parts (the receipt's digest is of another job format)".into());
    }
    parts
}

/// Checks `result` (a result document's bytes) against `trusted`, checks
/// that `job` is the job it names, and runs `job` again with `runner`.
pub fn replay(
    runner: &Runner,
    job: &Job,
    result: &[u8],
    trusted: &[PublicKey],
) -> Result<Report, ReplayError> {
    let vouched = verify::verify(result, trusted)?;
    let predicate = &vouched.statement["predicate"];
    let said_job = &predicate["job"];
    if !said_job.is_object() {
        return Err(ReplayError::NoJob);
    }
    let parts = differing_parts(job, said_job);
    if !parts.is_empty() {
        return Err(ReplayError::JobDiffers { parts });
    }
    let rerun = runner.run(
        job,
        RunOptions {
            output: OutputMode::Capture,
            sink: &mut crate::supervise::NoSink,
            cancel: None,
        },
    );
    if rerun.status == Status::Rejected {
        let message = rerun.error.as_ref().map(|e| e.message.clone());
        return Err(ReplayError::Refused {
            message: message.unwrap_or_else(|| "no reason given".into()),
        });
    }
    let mut doc = serde_json::to_value(&rerun).unwrap_or(Value::Null);
    if let Some(map) = doc.as_object_mut() {
        map.remove("receipt");
    }
    let doc = doc.as_object().cloned().unwrap_or_default();
    let mut compared = Vec::new();
    // The subjects, by name.
    let again = crate::receipt::statement::subjects_of(&doc).unwrap_or_default();
    for said in vouched.statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = said["name"].as_str().unwrap_or_default().to_owned();
        let identical = again.iter().any(|s| s == said);
        compared.push(Compared { name, identical });
    }
    for s in &again {
        let name = s["name"].as_str().unwrap_or_default();
        if !compared.iter().any(|c| c.name == name) {
            compared.push(Compared {
                name: name.to_owned(),
                identical: false,
            });
        }
    }
    // What the re-run must repeat besides its output.
    let said = &predicate["result"];
    let facts = crate::exec::attest::facts(Some(job), &runner.host);
    let profile = serde_json::to_value(&facts.profile).unwrap_or(Value::Null);
    let same = |a: &Value, b: &Value| a == b;
    compared.push(Compared {
        name: "skills".into(),
        identical: same(&said["skills"]["identity"], &doc["skills"]["identity"])
            && same(&said["skills"]["manifest"], &doc["skills"]["manifest"]),
    });
    compared.push(Compared {
        name: "environment".into(),
        identical: same(
            &said["skills"]["environment"],
            &doc["skills"]["environment"],
        ),
    });
    compared.push(Compared {
        name: "profile".into(),
        identical: same(&predicate["profile"], &profile),
    });
    compared.push(Compared {
        name: "limits".into(),
        identical: same(&said["limits"], &doc["limits"]),
    });
    let ending = |r: &Value| json!([r["status"], r["exit_code"], r["signal"]]);
    compared.push(Compared {
        name: "exit".into(),
        identical: ending(said) == ending(&Value::Object(doc.clone())),
    });
    Ok(Report { compared, rerun })
}
