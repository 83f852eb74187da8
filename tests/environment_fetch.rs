//! The fetch step of `env build` (docs/environments.md, "The fetch
//! sandbox"): it runs in a bubblewrap sandbox that shares the host's
//! network and nothing else. A program of our own stands in for pip
//! (`SKILL_RUNNER_FETCH_PROGRAM`, test-only) and attempts what a fetch
//! must not do: write outside its staging folder, read the runner's data
//! dir or the home folder, see a variable that is not pip's. The staging
//! folder is the positive control (written), and the host's network
//! interfaces are visible (the network is shared). A build shows its steps
//! as plain lines when stderr is not a terminal, and stdout carries only
//! the record.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use skill_runner_tests::envs::{env_build, skipped_without_index, SIX};
use skill_runner_tests::*;

/// What a fetch attempts, reported on one line of stderr: `name=result`
/// pairs; then it fails, so that the build says what it reported.
const ATTEMPTS: &str = r#"#!/bin/sh
for last; do :; done
wheels="$last"
out=""
try_write() {
    if ( : > "$1" ) 2>/dev/null; then out="$out $2=written"; else out="$out $2=denied"; fi
}
try_write "$wheels/control.txt" staging
try_write "$PIP_TEST_DATA_DIR/planted" data-dir
try_write "$PIP_TEST_HOME/planted" home
try_write /usr/planted usr
try_write /tmp/planted tmp
try_write /planted root
if ls "$PIP_TEST_DATA_DIR" >/dev/null 2>&1; then out="$out data-dir-read=listed"; else out="$out data-dir-read=denied"; fi
if [ -n "$NOT_PIPS" ]; then out="$out other-var=seen"; else out="$out other-var=absent"; fi
ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)
echo "REPORT$out ifaces=$ifaces" >&2
exit 3
"#;

fn report(out: &Output) -> String {
    let err = text(&out.stderr);
    let Some(at) = err.find("REPORT") else {
        panic!("no report: {}", show(out));
    };
    err[at..].lines().next().unwrap().to_owned()
}

/// The host's network interfaces other than loopback.
fn host_interfaces() -> Vec<String> {
    fs::read_to_string("/proc/net/dev")
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|n| n.trim().to_owned())
        .filter(|n| n != "lo")
        .collect()
}

#[test]
fn a_fetch_writes_only_its_staging_folder_reads_no_runner_state_and_shares_the_network() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    let home = world.sandbox_folder("home");
    let program = world.path().join("fake-pip");
    fs::write(&program, ATTEMPTS).unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    // The data dir exists before the build (a runner made it).
    let data = world.data_dir();
    let _ = world.cmd().args(["env", "list"]).output().unwrap();
    let out = env_build(
        &world,
        &lock,
        "fetch-probe",
        &[
            ("SKILL_RUNNER_FETCH_PROGRAM", program.to_str().unwrap()),
            ("PIP_TEST_DATA_DIR", data.to_str().unwrap()),
            ("PIP_TEST_HOME", home.to_str().unwrap()),
            ("HOME", home.to_str().unwrap()),
            ("NOT_PIPS", "the runner's own variable"),
        ],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("pip download failed (exit status: 3)"),
        "{}",
        show(&out)
    );
    let line = report(&out);
    for want in [
        "staging=written",
        "data-dir=denied",
        "home=denied",
        "usr=denied",
        "tmp=denied",
        "root=denied",
        "data-dir-read=denied",
        "other-var=absent",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    // The network namespace is the host's: its interfaces are there.
    let ifaces = host_interfaces();
    if let Some(first) = ifaces.first() {
        assert!(line.contains(&format!("{first},")), "{first}: {line}");
    }
    for planted in [data.join("planted"), home.join("planted")] {
        assert!(!planted.exists(), "{} was written", planted.display());
    }
    assert!(!Path::new("/usr/planted").exists());
    // Nothing was published, and the staging folder is gone.
    let list = world
        .cmd()
        .args(["env", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(text(&list.stdout).trim(), "[]", "{}", show(&list));
    assert!(out.stdout.is_empty(), "stdout carries only a record");
}

/// A wheel the fetch left that the lock does not pin (here: the right
/// name, other bytes) is refused before anything is installed.
#[test]
fn a_fetch_that_leaves_other_bytes_than_the_lock_pins_publishes_nothing() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    let program = world.path().join("fake-pip");
    fs::write(
        &program,
        "#!/bin/sh\nfor last; do :; done\necho not-a-wheel > \"$last/six-1.17.0-py2.py3-none-any.whl\"\n",
    )
    .unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let out = env_build(
        &world,
        &lock,
        "six",
        &[("SKILL_RUNNER_FETCH_PROGRAM", program.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("its SHA-256 is not among the lock's hashes"),
        "{err}"
    );
    // The steps so far, one plain line each (stderr is a pipe here).
    let steps: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("skill-runner: env build six: "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(steps, ["lock", "fetch"], "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no terminal codes when piped: {err:?}"
    );
    assert!(out.stdout.is_empty());
}

/// Where bubblewrap cannot make the fetch sandbox as planned (here: the
/// program it must execute is a folder), the build says the fetch sandbox
/// cannot be built, with what to do, and publishes nothing.
#[test]
fn a_fetch_sandbox_bubblewrap_cannot_finish_is_said_in_one_sentence() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    let folder = world.sandbox_folder("not-a-program");
    let out = env_build(
        &world,
        &lock,
        "six",
        &[("SKILL_RUNNER_FETCH_PROGRAM", folder.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("skill-runner: the fetch step's sandbox cannot be built here: bwrap:"),
        "{err}"
    );
    assert!(last.contains("build elsewhere"), "{err}");
    let list = world
        .cmd()
        .args(["env", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(text(&list.stdout).trim(), "[]");
}

/// A real build prints its steps as plain lines on a pipe, and the record
/// alone on stdout, which parses as JSON. Needs pip's index (its own
/// configuration), skipped without it.
#[test]
fn a_piped_build_prints_one_line_per_step_and_only_the_record_on_stdout() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    let out = env_build(&world, &lock, "six-env", &[]);
    if skipped_without_index(&out) {
        return;
    }
    assert!(out.status.success(), "{}", show(&out));
    let rec: Value = serde_json::from_slice(&out.stdout).expect("stdout is the record");
    assert_eq!(rec["id"], "six-env");
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 5, "{err}");
    for (line, step) in lines
        .iter()
        .zip(["lock", "fetch", "install", "hash", "publish"])
    {
        let rest = line
            .strip_prefix(&format!("skill-runner: env build six-env: {step}: "))
            .unwrap_or_else(|| panic!("{line:?} is not the {step} line"));
        assert!(rest.ends_with(" s)"), "{line:?} ends with the time so far");
    }
    assert!(
        !err.contains('\u{1b}'),
        "no terminal codes when piped: {err:?}"
    );
}
