//! Every seed of `fuzz/corpus/` through its target's invariants, as an
//! ordinary test: what the fuzzers start from is checked by every test
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

/// The names in `dir` (of its files with `ext` stripped, or of its
/// folders), sorted.
fn names(dir: &str, ext: Option<&str>) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .filter_map(|p| match ext {
            Some(ext) => (p.extension()? == ext)
                .then(|| p.file_stem())??
                .to_str()
                .map(String::from),
            None => p
                .is_dir()
                .then(|| p.file_name())??
                .to_str()
                .map(String::from),
        })
        .collect();
    names.sort();
    names
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
