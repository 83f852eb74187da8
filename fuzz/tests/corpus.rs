//! Every seed of `fuzz/corpus/` through its target's invariants, as an
//! ordinary test: what the fuzzers were started from (and every input a
//! crash was found with, kept there as a seed) is checked by every test
//! run, without the instrumented build a fuzz run needs (docs/fuzzing.md).

use std::path::{Path, PathBuf};

use skill_runner_fuzz::targets;

/// The seeds of one target, sorted by name; fails if there are none (a
/// renamed folder must not make its replay pass by replaying nothing).
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no seeds", dir.display());
    files
}

/// Runs each seed of `target` through `run`; a seed that breaks an
/// invariant fails the test naming the seed.
fn replay(target: &str, run: fn(&[u8])) {
    for seed in seeds(target) {
        let data = std::fs::read(&seed).expect("read a seed");
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!(
                "{target}: the seed {} breaks an invariant: {why}",
                seed.display()
            );
        }
    }
}

#[test]
fn bundle_seeds() {
    replay("bundle", targets::bundle::run);
}

#[test]
fn http_seeds() {
    replay("http", targets::http::run);
}

#[test]
fn job_seeds() {
    replay("job", targets::job::run);
}

#[test]
fn profile_seeds() {
    replay("profile", targets::profile::run);
}

#[test]
fn python_lock_seeds() {
    replay("python_lock", targets::python_lock::run);
}

#[test]
fn session_seeds() {
    replay("session", targets::session::run);
}

#[test]
fn skill_md_seeds() {
    replay("skill_md", targets::skill_md::run);
}
