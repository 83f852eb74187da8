//! The integration suite: the real `skill-runner` binary under real
//! bubblewrap, one test binary for the crate (`cargo test -p
//! skill-runner-tests`; one module: `cargo test -p skill-runner-tests
//! daemon::streams`). Shared helpers, and the one daemon harness, are in
//! `support/` (the crate's library). Each module proves one area's
//! promises:

mod cli; // the command line as a user meets it: run, explain, hash, pack, store, doctor
mod daemon; // `skill-runner serve` over its socket or TCP, one file per promise
mod escape; // every isolation promise, by attempting the forbidden thing inside a sandbox
mod host; // the command is never host root; host-global state out of reach; limits hold
mod invariants; // the snapshot-root invariants of docs/packages.md, end to end
mod limits; // memory and pids limits hold for the whole sandbox and name their mechanism
mod network; // network allowlists through the runner's proxy, and nothing around it
mod sandbox_failures; // a sandbox bubblewrap cannot finish is sandbox_failed, with the fix
mod skill_host; // catalog and sessions from the command line, and a run in a session

/// Every test file is a module of this binary: a file added beside these
/// but not listed above would never run.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let main = std::fs::read_to_string(here.join("main.rs")).unwrap();
    let listed: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.split(';').next())
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(here).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let module = match name.strip_suffix(".rs") {
            Some("main") => continue,
            Some(m) => m.to_owned(),
            None if path.join("mod.rs").is_file() && name != "support" => name,
            None => continue,
        };
        if !listed.contains(&module.as_str()) {
            missing.push(module);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/{missing:?} are not modules of tests/main.rs: add `mod NAME; // what it proves` there"
    );
}
