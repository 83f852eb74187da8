//! The job document (runner/src/exec/job.rs), as `run` reads it from a file
//! (relative paths against its folder) and as the daemon reads it (no
//! folder), down to the bubblewrap argv it becomes.
//!
//! Invariants: no panic; a refusal is one line; an accepted job holds only
//! what validation promises (files and output patterns below the
//! workspace); the raw document survives serialize → parse
//! unchanged and validates to the same job; the argv rewrite and the
//! bubblewrap argv are built without panic and end with the command.
use std::ffi::OsString;
use std::path::Path;

use crate::one_line;
use skill_runner::exec::job::{self, Job, RawJob};
use skill_runner::exec::plan;
use skill_runner::sandbox::bwrap::BwrapFeatures;
use skill_runner::sandbox::paths::{self, Spelling};
use skill_runner::sandbox::profile;

/// A folder that does not exist: a relative profile path names no file.
const BASE: &str = "/nonexistent/skill-runner-fuzz/jobs";

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    for base in [Some(Path::new(BASE)), None] {
        match Job::from_json(data, base) {
            Err(e) => one_line("job", &e.to_string()),
            Ok(job) => {
                check(&job);
                round_trip(data, base, &job);
                plan(&job);
            }
        }
    }
}

fn check(job: &Job) {
    assert!(job::valid_execution_id(&job.execution_id));
    assert!(!job.argv.is_empty() && !job.argv[0].is_empty());
    assert!(job.argv.iter().all(|a| !a.contains('\0')));
    for (name, value) in &job.env {
        assert!(!job::env_reserved(name), "{name}");
        assert!(!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()));
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        assert!(!value.contains('\0'));
    }
    assert!(!job.cwd.starts_with('/'));
    if !job.cwd.is_empty() {
        assert!(job.cwd.split('/').all(|s| !matches!(s, "" | "." | "..")));
    }
    let l = job.limits;
    assert!(l.timeout_ms > 0 && l.output_bytes > 0 && l.memory_bytes > 0 && l.pids > 0);
    assert!(l.file_size_bytes > 0 && l.tmp_bytes > 0 && l.cpu_ms != Some(0));
    for (i, s) in job.skills.iter().enumerate() {
        skill_runner::package::format::check_binding(&s.binding).expect("validated binding");
        assert!(job.skills[..i].iter().all(|o| o.binding.id != s.binding.id));
        if let Some(p) = &s.path {
            assert!(p.is_absolute());
        }
    }
    if job.session.is_some() {
        assert!(job.skills.is_empty());
    }
    for p in [&job.workspace, &job.extensions_dir].into_iter().flatten() {
        assert!(p.is_absolute(), "{}", p.display());
    }
    // Files and output patterns stay below the workspace, each path once.
    let below = |p: &str| {
        !p.is_empty()
            && !p.starts_with('/')
            && !p.contains(['\\', '\0'])
            && p.split('/').all(|s| !matches!(s, "" | "." | ".."))
    };
    for (i, f) in job.files.iter().enumerate() {
        assert!(below(&f.path), "{:?}", f.path);
        assert!(f.mode <= 0o777, "{:o}", f.mode);
        assert!(job.files[..i].iter().all(|o| o.path != f.path));
    }
    assert!(job.outputs.len() <= skill_runner::exec::files::MAX_PATTERNS);
    for g in &job.outputs {
        assert!(below(g.as_str()), "{:?}", g.as_str());
    }
}

/// parse → serialize → parse gives the same raw document, and it
/// validates to the same job.
fn round_trip(data: &[u8], base: Option<&Path>, job: &Job) {
    let raw: RawJob = serde_json::from_slice(data).expect("validated, so it parsed");
    let text = serde_json::to_string(&raw).expect("a raw job serializes");
    let again: RawJob = serde_json::from_str(&text).expect("a serialized job parses");
    assert_eq!(text, serde_json::to_string(&again).expect("serializes"));
    let other = Job::validate(again, base).expect("the same document validates again");
    assert_eq!(other.argv, job.argv);
    assert_eq!(other.env, job.env);
    assert_eq!(other.cwd, job.cwd);
    assert_eq!(other.skills, job.skills);
    assert_eq!(other.session, job.session);
    assert_eq!(other.limits, job.limits);
    assert_eq!(other.workspace, job.workspace);
    assert_eq!(other.extensions_dir, job.extensions_dir);
    assert_eq!(other.files, job.files);
    assert_eq!(other.outputs, job.outputs);
    if !job.generated_id {
        assert_eq!(other.execution_id, job.execution_id);
    }
}

/// The argv aliases, and the whole bubblewrap argv.
fn plan(job: &Job) {
    let host = Spelling::Host {
        skills: Path::new("/private/var/fuzz/skills"),
        extensions: Path::new("/private/var/fuzz/ext"),
    };
    let rewritten = match paths::rewrite_argv(&job.argv, Spelling::Sandbox) {
        Err(e) => {
            one_line("alias", &e.to_string());
            assert!(paths::rewrite_argv(&job.argv, host).is_err());
            return;
        }
        Ok(a) => a,
    };
    assert_eq!(rewritten.len(), job.argv.len());
    paths::rewrite_argv(&job.argv, host).expect("both spellings accept the same argv");
    let mounts = job.profile.resolve_mounts(profile::host_entry);
    let folders = plan::Folders {
        skills: "/data/published/x/skills".into(),
        workspace: job.workspace.clone(),
        extensions: job.extensions_dir.clone(),
        net: None,
        etc: Some("/data/system-views/x/etc".into()),
        // A job's environment is bound from the store's sealed tree.
        environment: job.environment.as_ref().map(|e| plan::EnvMount {
            tree: format!("/data/environments/trees/{}/tree", e.hash).into(),
            variables: vec![("PYTHONPATH".into(), "/opt/skill-env/python".into())],
        }),
    };
    let args = plan::bwrap(
        job,
        plan::Sandbox {
            program: Path::new("/usr/bin/bwrap"),
            features: BwrapFeatures {
                disable_userns: true,
            },
            mounts: &mounts,
            folders: &folders,
            identity: &crate::identity(),
            nproc: Some(job.limits.pids),
        },
    )
    .expect("a valid job plans")
    .args;
    let tail: Vec<OsString> = rewritten.iter().map(OsString::from).collect();
    assert!(args.ends_with(&tail), "the command ends the argv");
    assert!(args[..args.len() - tail.len()].iter().any(|a| a == "--"));
}
