//! Memory and process limits hold for the whole sandbox, and the result
//! names what enforced them (on a cgroup v2 host, a runner
//! outside the root cgroup fell back to `RLIMIT_AS` and no process limit,
//! and a 300 MiB allocation under 64 MiB ended as plain `exited`).
//!
//! Which mechanism can enforce them depends on where the runner's cgroup
//! is, so the environment says what must come out, in
//! `SKILL_RUNNER_EXPECT_CGROUP` (see [`expected_cgroup`]). Unset, these
//! tests check only that the limit holds. `scripts/test-cgroup2` runs them
//! in a cgroup v2 guest with the runner in the root cgroup, alone in a
//! systemd scope with `Delegate=yes`, and alone in a container-like cgroup
//! namespace (`v2` each time), and sharing its cgroup with another process
//! (`none`).

use serde_json::{json, Value};
use skill_runner_tests::*;

/// One `run --json` of `/workspace/probe`-style argv with `limits`.
struct Run {
    code: i32,
    doc: Value,
}

impl Run {
    fn start(world: &World, argv: &[&str], limits: Value) -> Run {
        let workspace = world.workspace_with_probe();
        let job = json!({"argv": argv, "workspace": workspace, "limits": limits});
        let (code, doc, _) = world.run_json_env(&job, &[]);
        Run { code, doc }
    }

    fn status(&self) -> &str {
        self.doc["status"].as_str().unwrap_or_default()
    }

    fn stdout(&self) -> &str {
        self.doc["stdout"].as_str().unwrap_or_default()
    }

    fn error(&self) -> &str {
        self.doc["error"]["message"].as_str().unwrap_or_default()
    }

    fn enforced_by(&self, limit: &str) -> &str {
        self.doc["limits"][limit]["enforced_by"]
            .as_str()
            .unwrap_or_default()
    }

    fn note(&self, limit: &str) -> &str {
        self.doc["limits"][limit]["note"]
            .as_str()
            .unwrap_or_default()
    }

    /// Refused before anything ran (no `limits` in the result).
    fn refused(&self) -> bool {
        self.doc["limits"].is_null()
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\n  runner exit {}; result: {:#}", self.code, self.doc)
    }
}

/// Without a usable cgroup a job may be refused, but only with an error
/// that says the limit cannot be enforced; returns true when it was.
fn refused_for_want_of_a_cgroup(run: &Run) -> bool {
    if !run.refused() {
        return false;
    }
    assert_ne!(
        expected_cgroup().as_deref(),
        Some("v2"),
        "refused where cgroup v2 must work:{run}"
    );
    assert!(
        run.error().contains("cannot be enforced"),
        "refused without saying the limit cannot be enforced:{run}"
    );
    true
}

#[test]
fn a_300_mib_allocation_under_64_mib_is_stopped() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let run = Run::start(
        &world,
        &["/workspace/probe", "mem-bomb", "300"],
        json!({"memory_bytes": 64 << 20, "timeout_ms": 60000}),
    );
    if refused_for_want_of_a_cgroup(&run) {
        return;
    }
    let by = run.enforced_by("memory_bytes");
    assert_cgroup_mechanism(by, &run);
    assert!(!run.stdout().contains("ALLOCATED"), "{run}");
    if by.starts_with("cgroup") {
        // The memory cgroup's OOM killer ends it: SIGKILL, limit_exceeded.
        assert_eq!(run.status(), "limit_exceeded", "{run}");
        assert!(run.error().contains("memory_bytes"), "{run}");
        assert_eq!(run.doc["signal"], 9, "{run}");
    } else {
        // RLIMIT_AS: the allocation fails inside the process instead.
        assert_eq!(by, "rlimit", "{run}");
        assert!(run.stdout().contains("DENIED allocation failed"), "{run}");
    }
}

#[test]
fn two_hundred_sleeps_under_pids_32_are_refused_forks() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    // Prints how many sleeps it started; the shell dies at the first fork
    // the kernel refuses. The sleeps die with the sandbox when it exits.
    let script = "n=0; while [ $n -lt 200 ]; do sleep 5 & n=$((n + 1)); echo $n; done";
    let run = Run::start(
        &world,
        &["sh", "-c", script],
        json!({"pids": 32, "timeout_ms": 60000}),
    );
    if refused_for_want_of_a_cgroup(&run) {
        return;
    }
    let by = run.enforced_by("pids");
    assert_cgroup_mechanism(by, &run);
    let started: u32 = run
        .stdout()
        .lines()
        .last()
        .unwrap_or("0")
        .parse()
        .unwrap_or_else(|_| panic!("no count:{run}"));
    if by.starts_with("cgroup") {
        // bwrap, the sandbox's init and the shell count too.
        assert!(started < 32, "{started} sleeps under pids = 32:{run}");
        assert_eq!(run.status(), "limit_exceeded", "{run}");
        assert!(run.error().contains("pids"), "{run}");
    } else {
        // RLIMIT_NPROC, set in the sandbox's user namespace by the shim.
        assert_eq!(by, "rlimit", "{run}");
        assert!(started < 200, "{started} sleeps under pids = 32:{run}");
    }
}

/// Where cgroups cannot be used (`SKILL_RUNNER_EXPECT_CGROUP=none`), every
/// memory and pids limit is refused or enforced otherwise, and the result
/// says why no cgroup did; none is dropped.
#[test]
fn limits_without_a_usable_cgroup_are_never_dropped_silently() {
    if expected_cgroup().as_deref() != Some("none") {
        skip("only where no cgroup can be used (SKILL_RUNNER_EXPECT_CGROUP=none)");
        return;
    }
    let world = World::new();
    let run = Run::start(
        &world,
        &["/workspace/probe", "exit", "0"],
        json!({"memory_bytes": 64 << 20, "pids": 32}),
    );
    if refused_for_want_of_a_cgroup(&run) {
        assert!(run.error().contains("cgroup"), "{run}");
        return;
    }
    assert_eq!(run.status(), "exited", "{run}");
    for limit in ["memory_bytes", "pids"] {
        assert_cgroup_mechanism(run.enforced_by(limit), &run);
        assert!(
            run.note(limit).contains("no cgroup: "),
            "{limit}: the note does not say why no cgroup enforced it:{run}"
        );
    }
}
