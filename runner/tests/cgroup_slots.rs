//! The cgroups `run` processes of one data dir share (`cgroup::Shared`),
//! in the real cgroup hierarchy: a slot is never leased by two at once,
//! is reused with the next execution's limits and counters of its own,
//! and what a runner that died left in its slot is killed by the next
//! sweep, while a live runner's slot is left alone. Needs a host where
//! the runner can make cgroups (root here and in CI); elsewhere it is
//! skipped (a failure under `SKILL_RUNNER_MUST_WORK`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use skill_runner::supervise::cgroup::{self, Shared, Support};

const MIB: u64 = 1 << 20;

/// A cgroup folder of this test's own, and a folder for the slots' locks.
fn setup(test: &str) -> Option<(Support, tempfile::TempDir)> {
    let s = Support::detect().scoped(&format!("test-slots-{test}-{}", std::process::id()));
    if matches!(s, Support::None { .. }) {
        crate::skip(format!("no cgroup the runner can create here ({s:?})"));
        return None;
    }
    if !matches!(
        &s,
        Support::V2 { .. }
            | Support::V1 {
                memory: Some(_),
                pids: Some(_),
                ..
            }
    ) {
        crate::skip(format!(
            "this test needs memory and pids controllers: {s:?}"
        ));
        return None;
    }
    Some((s, tempfile::tempdir().unwrap()))
}

/// Slot `n`'s cgroup name.
fn slot(n: u32) -> String {
    format!("{}{n}", cgroup::SHARED_PREFIX)
}

/// Slot `n`'s folder in every hierarchy.
fn slot_dirs(s: &Support, n: u32) -> Vec<PathBuf> {
    crate::cgroups::pooled_dirs(s, &slot(n))
}

/// Slot `n`'s (memory limit, pids limit) files.
fn limit_files(s: &Support, n: u32) -> (PathBuf, PathBuf) {
    crate::cgroups::limit_files(s, &slot(n))
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap().trim().to_owned()
}

/// Puts `pid` into every folder of slot `n`.
fn join(s: &Support, n: u32, pid: u32) {
    join_dirs(&slot_dirs(s, n), pid);
}

/// Puts `pid` into each of `dirs`.
fn join_dirs(dirs: &[PathBuf], pid: u32) {
    for dir in dirs {
        let procs = if dir.join("tasks").exists() {
            "tasks"
        } else {
            "cgroup.procs"
        };
        fs::write(dir.join(procs), pid.to_string()).unwrap();
    }
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

/// Removes what a test left: its slots and its folder.
fn clean(s: &Support, slots: u32) {
    for n in 0..slots {
        for d in slot_dirs(s, n) {
            let _ = fs::remove_dir(d);
        }
    }
    for d in slot_dirs(s, 0) {
        let _ = fs::remove_dir(d.parent().unwrap());
    }
}

#[test]
fn a_slot_is_never_leased_twice_at_once_and_is_reused_with_the_next_limits() {
    let _serial = crate::serial();
    let Some((s, locks)) = setup("lease") else {
        return;
    };
    let shared = Shared::new(s.clone(), locks.path().to_owned());
    let a = shared.take(64 * MIB, 32).unwrap();
    // Held: a second lease gets another slot (so does another process:
    // the lease is a lock on a file).
    let b = shared.take(32 * MIB, 16).unwrap();
    let (m0, p0) = limit_files(&s, 0);
    let (m1, p1) = limit_files(&s, 1);
    assert_eq!(
        (read(&m0), read(&p0)),
        ((64 * MIB).to_string(), "32".into())
    );
    assert_eq!(
        (read(&m1), read(&p1)),
        ((32 * MIB).to_string(), "16".into())
    );
    shared.give(a);
    shared.give(b);
    assert!(
        slot_dirs(&s, 0).iter().all(|d| d.exists()),
        "a slot given back empty was removed instead of kept"
    );
    // The first free slot again, with this execution's limits written.
    let c = shared.take(48 * MIB, 8).unwrap();
    assert_eq!((read(&m0), read(&p0)), ((48 * MIB).to_string(), "8".into()));
    assert!(
        slot_dirs(&s, 2).iter().all(|d| !d.exists()),
        "a new slot was made while one was free"
    );
    assert!(c.procs_files().is_ok());
    drop(c);
    assert!(
        slot_dirs(&s, 0).iter().all(|d| !d.exists()),
        "a slot dropped (not given back) was kept"
    );
    drop(shared);
    clean(&s, 3);
}

#[test]
fn a_reused_slot_counts_only_its_own_execution_and_kills_what_was_left() {
    let _serial = crate::serial();
    let Some((s, locks)) = setup("own") else {
        return;
    };
    let shared = Shared::new(s.clone(), locks.path().to_owned());
    // An execution that hits its pids limit: a shell in the slot that may
    // not fork.
    let cg = shared.take(64 * MIB, 1).unwrap();
    let mut sh = Command::new("sh")
        .args(["-c", "read x; /bin/true; echo done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    join_dirs(&cg.folders(), sh.id());
    sh.stdin.take().unwrap().write_all(b"go\n").unwrap();
    sh.wait().unwrap();
    assert!(cg.pids_exceeded(), "the refused fork was not counted");
    shared.give(cg);

    // The next execution in that slot starts from a clean count.
    let cg = shared.take(64 * MIB, 32).unwrap();
    assert!(
        !cg.pids_exceeded() && !cg.memory_exceeded(),
        "a reused slot reported the previous execution's limit"
    );
    // A process left in it when it is given back is killed.
    let mut left = sleeper();
    join_dirs(&cg.folders(), left.id());
    shared.give(cg);
    assert!(
        !left.wait().unwrap().success(),
        "the process left in the slot was not killed"
    );
    drop(shared);
    clean(&s, 2);
}

#[test]
fn a_dead_runner_s_slot_is_emptied_by_the_next_sweep_and_a_live_one_left_alone() {
    let _serial = crate::serial();
    let Some((s, locks)) = setup("sweep") else {
        return;
    };
    let shared = Shared::new(s.clone(), locks.path().to_owned());
    // Slot 0 leased by a live runner, with its command running.
    let live = shared.take(64 * MIB, 32).unwrap();
    let mut running = sleeper();
    join_dirs(&live.folders(), running.id());
    // Slot 1 as a runner that died left it: a process in it, its lock
    // free (a lock dies with its process).
    for d in slot_dirs(&s, 1) {
        fs::create_dir(&d).unwrap();
    }
    let mut orphan = sleeper();
    join(&s, 1, orphan.id());

    // The runner's own sweep never removes a slot by its name.
    cgroup::sweep(&s, &|_| false);
    assert!(slot_dirs(&s, 0)
        .iter()
        .chain(&slot_dirs(&s, 1))
        .all(|d| d.exists()));
    cgroup::sweep_shared(&s, locks.path());
    assert!(
        running.try_wait().unwrap().is_none(),
        "a sweep killed the command of a live runner's slot"
    );
    assert!(
        !orphan.wait().unwrap().success(),
        "a sweep left the process of a dead runner's slot running"
    );
    shared.give(live);
    assert!(!running.wait().unwrap().success());
    drop(shared);
    clean(&s, 3);
}
