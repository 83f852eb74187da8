//! Sealing a result with its receipt (docs/receipts.md): what only the
//! runner knew of an execution, beside its result, made into the facts
//! of [`crate::receipt`]'s statement — the validated job's canonical
//! digest ([`job_digest`]), the resolved profile's digest and its seccomp
//! programs' digests, the runner's, bubblewrap's and the kernel's
//! versions — and the signing of the result document as it is sent.
//!
//! The job digest is of the validated job (every field; the execution id
//! apart, which the statement names on its own), so two spellings of one
//! job digest alike and a re-run of the same job file ([`crate::exec::replay`])
//! finds the same digest, while the job itself, with its `env` values,
//! never enters the receipt.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::exec::job::Job;
use crate::exec::result::ExecResult;
use crate::receipt::canonical;
use crate::receipt::statement::{Facts, JobDigest, ProfileDigest, RunnerFacts};
use crate::receipt::{KeyError, Signer};
use crate::sandbox::host::Host;

/// The runner's signing key: the file `--receipt-key` names, or the data
/// dir's own, made on first use.
pub fn signer(data: &crate::datadir::DataDir, file: Option<&Path>) -> Result<Signer, KeyError> {
    match file {
        Some(file) => Signer::load(file),
        None => Signer::load_or_create(&data.receipt_key()),
    }
}

/// The keys `verify` and `replay` trust: each `--key` file, else the
/// public half of the runner's own key (`receipt_key`, else the data
/// dir's), which must exist.
pub fn trusted_keys(
    files: &[std::path::PathBuf],
    data_dir: &Path,
    receipt_key: Option<&Path>,
) -> Result<Vec<crate::receipt::PublicKey>, KeyError> {
    if !files.is_empty() {
        return files
            .iter()
            .map(|f| crate::receipt::PublicKey::from_file(f))
            .collect();
    }
    let own = match receipt_key {
        Some(file) => file.to_owned(),
        None => crate::datadir::DataDir::unchecked(data_dir).receipt_key(),
    };
    Ok(vec![Signer::load(&own)?.public().clone()])
}

/// The job document the digest is of: every field of the validated job
/// but its execution id (destructured, so a new field of [`Job`] does
/// not compile until it is given here).
pub fn job_document(job: &Job) -> Map<String, Value> {
    let Job {
        execution_id: _,
        generated_id: _,
        argv,
        stdin,
        env,
        cwd,
        workspace,
        extensions_dir,
        skills,
        session,
        session_resolved: _,
        network,
        profile,
        limits,
        environment,
        environment_source,
        confined,
        managed_workspace,
        files,
        outputs,
    } = job;
    let path = |p: &Option<std::path::PathBuf>| match p {
        Some(p) => Value::String(p.to_string_lossy().into_owned()),
        None => Value::Null,
    };
    let env: Map<String, Value> = env
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let skills: Vec<Value> = skills
        .iter()
        .map(|s| {
            let mut skill = json!({
                "id": s.binding.id,
                "revision": s.binding.revision,
                "version": s.binding.version,
                "hash": s.binding.hash,
                "path": path(&s.path),
            });
            // Where the bytes may be pulled from is part of what the job
            // said; absent, it leaves the digest of a job without one as
            // it was.
            if let Some(source) = &s.source {
                skill["source"] = json!(source.to_string());
            }
            skill
        })
        .collect();
    let network = match network.allowlist() {
        None => json!("none"),
        Some(a) => json!({
            "allow": a.entries.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "private": a.private,
        }),
    };
    let mut doc = Map::new();
    doc.insert("argv".into(), json!(argv));
    doc.insert(
        "stdin".into(),
        match stdin {
            Some(bytes) => json!({"sha256": canonical::bytes_sha256_hex(bytes)}),
            None => Value::Null,
        },
    );
    doc.insert("env".into(), Value::Object(env));
    doc.insert("cwd".into(), json!(cwd));
    doc.insert("workspace".into(), path(workspace));
    doc.insert("extensions_dir".into(), path(extensions_dir));
    doc.insert("skills".into(), Value::Array(skills));
    doc.insert("session".into(), json!(session));
    doc.insert("network".into(), network);
    doc.insert(
        "profile".into(),
        json!({"name": profile.name, "sha256": profile_sha256(profile)}),
    );
    doc.insert("limits".into(), json!(limits));
    doc.insert("environment".into(), json!(environment));
    if let Some(source) = environment_source {
        doc.insert("environment_source".into(), json!(source.to_string()));
    }
    doc.insert("confined".into(), json!(confined));
    doc.insert("managed_workspace".into(), json!(managed_workspace));
    // Input files by their bytes' digest: the receipt names what went in
    // without carrying it.
    let files: Vec<Value> = files
        .iter()
        .map(|f| {
            json!({
                "path": f.path,
                "mode": f.mode,
                "sha256": canonical::bytes_sha256_hex(&f.bytes),
            })
        })
        .collect();
    doc.insert("files".into(), Value::Array(files));
    let outputs: Vec<&str> = outputs.iter().map(|g| g.as_str()).collect();
    doc.insert("outputs".into(), json!(outputs));
    doc
}

/// The job's digest, and each part's.
pub fn job_digest(job: &Job) -> JobDigest {
    let doc = job_document(job);
    // Each part written once: the whole document's bytes are made of them.
    let rendered = canonical::members(&doc);
    let parts = rendered
        .iter()
        .map(|(k, bytes)| ((*k).to_owned(), canonical::bytes_sha256_hex(bytes)))
        .collect();
    JobDigest {
        sha256: canonical::bytes_sha256_hex(&canonical::object_of(&rendered)),
        parts,
        execution_id_from: if job.generated_id { "runner" } else { "caller" },
    }
}

/// The canonical digest of a resolved profile (every setting, as parsed),
/// made once for each of the last few profiles used: every receipt names
/// it twice (the job's digest and the profile's).
pub fn profile_sha256(profile: &crate::sandbox::profile::Profile) -> String {
    static DIGESTS: crate::memo::Recent<crate::sandbox::profile::Profile, String> =
        crate::memo::Recent::new(8);
    DIGESTS.get_or_insert(
        |p| p == profile,
        || profile.clone(),
        || canonical::sha256_hex(&serde_json::to_value(profile).unwrap_or(Value::Null)),
    )
}

/// The profile and the seccomp programs this job's sandbox loads.
fn profile_digest(job: &Job, host: &Host) -> ProfileDigest {
    #[cfg(target_os = "linux")]
    let seccomp = {
        let mut seccomp = BTreeMap::new();
        let root_mapped = host.identity.as_ref().is_ok_and(|i| i.root_mapped);
        let compiled =
            crate::sandbox::seccomp::compiled(&job.profile, job.network.mode(), root_mapped);
        if let Ok(f) = compiled {
            // The one program loaded (the guard is part of it).
            seccomp.insert("rules".into(), canonical::bytes_sha256_hex(&f.rules));
        }
        seccomp
    };
    // No seccomp elsewhere (Seatbelt): none named.
    #[cfg(not(target_os = "linux"))]
    let seccomp = {
        let _ = host;
        BTreeMap::new()
    };
    ProfileDigest {
        name: job.profile.name.clone(),
        sha256: profile_sha256(&job.profile),
        seccomp,
    }
}

/// The runner's version, bubblewrap's and the kernel's release.
pub fn runner_facts(host: &Host) -> RunnerFacts {
    static KERNEL: OnceLock<Option<String>> = OnceLock::new();
    let kernel = KERNEL.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_owned())
    });
    RunnerFacts {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        bubblewrap: host.bwrap.as_ref().ok().map(|b| b.version.clone()),
        kernel_release: kernel.clone(),
    }
}

/// The facts of an execution of `job` (none for a job refused as
/// written).
pub fn facts(job: Option<&Job>, host: &Host) -> Facts {
    Facts {
        job: job.map(job_digest),
        profile: job.map(|j| profile_digest(j, host)),
        runner: runner_facts(host),
    }
}

/// Signs `result` as it will be sent and puts the envelope in `receipt`.
/// The output strings are moved into the document and back, never
/// copied: a result may hold 2 × `output_bytes`.
pub fn seal(result: &mut ExecResult, facts: &Facts, signer: &Signer) {
    result.receipt = None;
    let stdout = std::mem::take(&mut result.stdout);
    let stderr = std::mem::take(&mut result.stderr);
    let mut doc = match serde_json::to_value(&*result) {
        Ok(Value::Object(doc)) => doc,
        // A result always serializes to an object.
        _ => Map::new(),
    };
    doc.insert("stdout".into(), Value::String(stdout));
    doc.insert("stderr".into(), Value::String(stderr));
    let envelope = crate::receipt::seal(&doc, facts, signer);
    for (name, field) in [
        ("stdout", &mut result.stdout),
        ("stderr", &mut result.stderr),
    ] {
        if let Some(Value::String(text)) = doc.remove(name) {
            *field = text;
        }
    }
    result.receipt = Some(envelope);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::job::RawJob;

    /// The digest assembled from its parts' bytes is the digest of the
    /// whole document written at once (docs/receipts.md, "The job digest").
    #[test]
    fn the_job_digest_is_the_whole_documents_and_each_parts() {
        let raw: RawJob = serde_json::from_value(json!({
            "argv": ["/bin/sh", "-c", "echo \"quoted\"\ttab"],
            "env": {"Z": "last", "A": "first\u{1}"},
            "stdin": "input",
        }))
        .unwrap();
        let job = Job::validate(raw, None).unwrap();
        let doc = job_document(&job);
        let digest = job_digest(&job);
        assert_eq!(
            digest.sha256,
            canonical::sha256_hex(&Value::Object(doc.clone()))
        );
        assert_eq!(digest.parts.len(), doc.len());
        for (k, v) in &doc {
            assert_eq!(digest.parts[k], canonical::sha256_hex(v), "part {k}");
        }
    }
}
