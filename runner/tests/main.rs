//! The library's integration tests: `skill_runner` used as a crate on a
//! real file system, one test binary (`cargo test -p skill-runner --test
//! library`; one module: `cargo test -p skill-runner --test library
//! packages::`). The real binary under real bubblewrap is tested in
//! `tests/` at the top of the repository. Each module proves one area's
//! promises:

mod architecture; // the rooms form a one-way ladder; unsafe only in supervise::sys
mod cgroup_slots; // cgroups shared by `run`s: leased once at a time, reused clean, swept after a crash
mod cgroups; // sweeping what runners of deleted data dirs left in the real cgroup tree
mod environment_vectors; // environment tree hashes match the independent vectors; refused trees are refused
mod find_eval; // find's ranking is at least as good as plain BM25 on the evaluation set
mod macos; // each built-in profile's macOS profile and argv, against golden files
mod packages; // bad packages are refused leaving nothing; staging keeps its invariants
mod roots; // published roots: verified once, shared read-only, never evicted in use
mod skill_host; // the skill host: delivery modes, freezing, catalog, ranking, bounded reads
mod vectors; // package hashes and set identities match the independent vectors

/// Held by each test that starts processes beside cgroups it holds: a
/// child forked by another test's thread holds a copy of every descriptor
/// until it executes its program, and so, for that instant, the locks of
/// `cgroup::Shared` slots too (a `run` forks only from the thread that
/// holds its slot).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records that the running test cannot run on this host, and why; the
/// caller returns right after. As `support::skip` of the integration
/// suite (`tests/support`): prints `SKIPPED: <test>: <reason>` and
/// appends it to `SKILL_RUNNER_SKIP_LOG` when that names a file
/// (`scripts/test` counts those lines as skipped); under
/// `SKILL_RUNNER_MUST_WORK` (CI sets it) a skip is a failure instead.
pub fn skip(reason: impl std::fmt::Display) {
    let thread = std::thread::current();
    let line = format!(
        "SKIPPED: {}: {}",
        thread.name().unwrap_or("this test"),
        reason
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    if std::env::var_os("SKILL_RUNNER_MUST_WORK").is_some() {
        panic!("{line}\n(SKILL_RUNNER_MUST_WORK is set: nothing may be skipped)");
    }
    println!("{line}");
    if let Some(log) = std::env::var_os("SKILL_RUNNER_SKIP_LOG").filter(|l| !l.is_empty()) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
        file.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
    }
}

/// Every test file is a module of this binary: a file added beside these
/// but not listed above would never run.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(here.join("main.rs")).unwrap();
    let listed: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.split(';').next())
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&here).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") {
            if !listed.contains(&module) {
                missing.push(module.to_owned());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "runner/tests/{missing:?} are not modules of runner/tests/main.rs: add `mod NAME; // what it proves` there"
    );
}
