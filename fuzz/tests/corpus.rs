//! Every seed of `fuzz/corpus/` through its target's invariants, as an
//! ordinary test: what the fuzzers start from is checked by every test
//! run, without the instrumented build a fuzz run needs (docs/fuzzing.md).

use std::path::{Path, PathBuf};

use skill_runner_fuzz::targets;

/// The entries of `dir` (below the fuzz crate), sorted by name.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect();
    found.sort();
    found
}

/// The seeds of one target; fails if there are none (a renamed folder
/// must not make its replay pass by replaying nothing).
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new("corpus").join(target);
    let files: Vec<PathBuf> = entries(&dir).into_iter().filter(|p| p.is_file()).collect();
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

/// A target's body: one input.
type Target = fn(&[u8]);

/// Every target and its body: each has a folder of seeds and a libFuzzer
/// binary (checked below).
const TARGETS: [(&str, Target); 7] = [
    ("bundle", targets::bundle::run),
    ("http", targets::http::run),
    ("job", targets::job::run),
    ("profile", targets::profile::run),
    ("python_lock", targets::python_lock::run),
    ("session", targets::session::run),
    ("skill_md", targets::skill_md::run),
];

/// The names of the folders in `dir`, or with `ext`, of its files of
/// that extension without it.
fn names(dir: &str, ext: Option<&str>) -> Vec<String> {
    let name = |p: &Path| -> Option<String> {
        let name = match ext {
            Some(ext) if p.extension()? == ext => p.file_stem(),
            None if p.is_dir() => p.file_name(),
            _ => None,
        };
        Some(name?.to_str()?.to_owned())
    };
    entries(Path::new(dir))
        .iter()
        .filter_map(|p| name(p))
        .collect()
}

/// A target added without a replay here (or a seed folder without a
/// target) fails, not silently.
#[test]
fn every_target_and_seed_folder_is_replayed() {
    let targets: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
    assert_eq!(names("corpus", None), targets);
    assert_eq!(names("fuzz_targets", Some("rs")), targets);
}

#[test]
fn every_seed_keeps_its_targets_invariants() {
    for (target, run) in TARGETS {
        replay(target, run);
    }
}

/// The targets' scratch folders: one whose lock nobody holds (its
/// process is gone) is swept by the next `scratch_dir`, with its lock; one
/// whose lock is held (a live process) is left alone.
#[test]
fn a_scratch_folder_is_swept_only_once_nobody_holds_its_lock() {
    let base = std::env::temp_dir().join("skill-runner-fuzz");
    std::fs::create_dir_all(&base).unwrap();
    let (dead, live) = (base.join("sweep-dead-1"), base.join("sweep-live-1"));
    for dir in [&dead, &live] {
        std::fs::create_dir_all(dir.join("inside")).unwrap();
    }
    std::fs::write(dead.with_extension("lock"), b"").unwrap();
    let held = skill_runner::fsx::LockFile::acquire(&live.with_extension("lock")).unwrap();
    let mine = skill_runner_fuzz::scratch_dir("sweep-test");
    assert!(mine.is_dir());
    assert!(!dead.exists() && !dead.with_extension("lock").exists());
    assert!(live.join("inside").is_dir(), "a held folder was swept");
    drop(held);
    let _ = skill_runner::fsx::remove_tree(&live);
    let _ = std::fs::remove_file(live.with_extension("lock"));
}
