//! The integration suite: the real `skill-runner` binary under real
//! bubblewrap, one test binary for the crate (`cargo test -p
//! skill-runner-tests`; one module: `cargo test -p skill-runner-tests
//! daemon::streams`). Shared helpers, and the one daemon harness, are in
//! `support/` (the crate's library). To add a file: write `tests/NAME.rs`
//! (`use skill_runner_tests::*;`, and `skill_runner_tests::daemon::*` for
//! the daemon harness) and list it below as `mod NAME; // what it proves`;
//! a test here fails if a file is not listed. Each module proves one area's
//! promises:

mod admission; // a job is admitted once, alike from both front ends; an unknown session is 404 before it is queued
mod cli; // the command line as a user meets it: run, explain, hash, pack, store, doctor
mod completions; // shell completions and man pages from the clap definition: a real bash completes every subcommand, groff renders the page
mod daemon; // `skill-runner serve` over its socket or TCP, one file per promise
mod datadir; // a data dir another local user could change is refused by every command; modes of what is made
mod descriptors; // the daemon's descriptor budget: raised limit, refusal at start, nothing left by a refused admission
mod env_attacks; // hostile wheels (paths outside the target, past the byte bound), an install step writing outside its tree, a hard-linked tree: refused or confined, nothing published
mod env_skills; // real skills (skill-creator, slack-gif-creator) and our document scripts run with environments built once per run from hash-pinned locks; a built environment cannot be written from the sandbox
mod env_tamper; // a stored environment changed on disk in any way (a byte, a removed, added or renamed-over file, a mode) is refused before the command starts; a mode set back runs
mod environment_build; // env build: a one-wheel lock installed offline in the sandbox, imported by a job; a second build served from the store; the install step has no network
mod environment_fetch; // env build's fetch step: only the staging folder is writable, no runner state or home is readable, only pip's variables pass, the network is the host's; progress lines when piped
mod environment_use; // a job names an environment, or its skills declare one: imported read-only at /opt/skill-env, named in the result; a changed, unknown, stale or conflicting one refused before the command starts
mod environments; // env add/list/show/verify/gc through the real binary; tampered or escaping trees are refused
/// Read by the escape suite: this copy builds each sandbox for its command.
const PREPARED: bool = false;

mod escape; // every isolation promise, by attempting the forbidden thing inside a sandbox
mod escape_prepared; // the same escape suite, every command in a sandbox prepared ahead
mod explained_fds; // explain --fds-dir writes byte for byte what a launch loads
mod fetch_config; // pip's configuration naming the data dir (or inside it) or / is refused before env build's fetch, with a sentence
mod files; // files in before the command and outputs out after it, through the CLI; links, FIFOs, devices, races, huge and many files refused or bounded
mod host; // the command is never host root; host-global state out of reach; limits hold
mod hostlimits; // front matter bounded before parsing, skills per bundle, memory no cgroup holds is said or refused
mod integrity; // published roots and the store are re-checked before they are trusted; one bad record never breaks a listing
mod invariants; // the snapshot-root invariants of docs/packages.md, end to end
mod limits; // memory and pids limits hold for the whole sandbox and name their mechanism
mod mcp; // skill-runner mcp over stdio: session tools, run in the sandbox, Skills extension digests of the frozen bytes, errors, cancellation leaves no process
mod network; // network allowlists through the runner's proxy, and nothing around it
mod oci; // packages and environments pushed to and pulled from a real OCI registry by digest; tampered registries (a swapped layer, lying sizes, a moved tag, a 10 GB or endless blob) never get a package into the store
mod receipts; // every result is signed; verify refuses any single change; replay re-runs and compares; the key is out of every sandbox's reach
mod run_cgroups; // runs of one data dir share cgroups: one slot after another, never one for two at once
mod sandbox_failures; // a sandbox bubblewrap cannot finish is sandbox_failed, with the fix
mod secnet; // every writable mount is bounded, the proxy folder is read-only, the pool and CPU time are per execution
mod skill_host; // catalog and sessions from the command line, and a run in a session
mod telemetry; // logs: plain text when piped, values spelt as the API spells them
mod token_file; // the daemon's token file: a small regular file only its owner can read

/// Every test file is a module of this binary, and every file of a folder
/// module (`daemon/`) a module of its `mod.rs`: a file added beside these
/// but not listed would never run.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut folders = vec![(here.to_owned(), here.join("main.rs"))];
    while let Some((dir, list)) = folders.pop() {
        let text = std::fs::read_to_string(&list).unwrap();
        let listed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("mod ")?.split(';').next())
            .collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let module = match name.strip_suffix(".rs") {
                Some("main" | "mod") => continue,
                Some(m) => m.to_owned(),
                // A folder module; support/ is the crate's library, probe/ a crate.
                None if path.join("mod.rs").is_file() && path != here.join("support") => {
                    folders.push((path.clone(), path.join("mod.rs")));
                    name
                }
                None => continue,
            };
            if !listed.contains(&module.as_str()) {
                missing.push(path.strip_prefix(here).unwrap().display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tests/{missing:?} are not modules of the suite: add `mod NAME; // what it proves` to tests/main.rs (or the folder's mod.rs)"
    );
}
