//! Sweeping what runners of deleted data dirs left in the real cgroup
//! hierarchy: old empty execution cgroups go, young or busy ones stay.
//! Needs a host where the runner can make cgroups (root here and in CI);
//! elsewhere it says so and returns, unless `SKILL_RUNNER_MUST_WORK` is set.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use skill_runner::supervise::cgroup::{self, Support};

fn support() -> Option<Support> {
    let s = Support::detect().scoped("test-sweep-ours");
    if matches!(s, Support::None { .. }) {
        assert!(
            std::env::var_os("SKILL_RUNNER_MUST_WORK").is_none(),
            "no cgroups here but SKILL_RUNNER_MUST_WORK is set: {s:?}"
        );
        eprintln!("SKIPPED: no cgroup the runner can create here ({s:?})");
        return None;
    }
    Some(s)
}

fn parents(s: &Support) -> Vec<PathBuf> {
    match s {
        Support::V2 { parent } => vec![parent.clone()],
        Support::V1 { memory, pids } => memory.iter().chain(pids.iter()).cloned().collect(),
        Support::None { .. } => vec![],
    }
}

#[test]
fn abandoned_cgroups_of_other_data_dirs_are_swept_and_live_ones_kept() {
    let Some(s) = support() else { return };
    let parent = parents(&s)[0].clone();
    let shared = parent.parent().unwrap().to_owned();
    let other = shared.join(format!("test-sweep-{}", std::process::id()));
    let old = other.join("exec-old");
    let young = other.join("exec-young");
    let busy = other.join("exec-busy");
    for d in [&old, &young, &busy] {
        fs::create_dir_all(d).unwrap();
    }
    let long_ago = SystemTime::now() - Duration::from_secs(3600);
    for d in [&old, &busy] {
        fs::File::open(d).unwrap().set_modified(long_ago).unwrap();
    }
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let procs = if busy.join("tasks").exists() {
        "tasks"
    } else {
        "cgroup.procs"
    };
    fs::write(busy.join(procs), sleeper.id().to_string()).unwrap();

    cgroup::sweep_others(&s);
    let (old_gone, young_kept, busy_kept) = (!old.exists(), young.exists(), busy.exists());

    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    for d in [&young, &busy, &other] {
        for _ in 0..100 {
            if fs::remove_dir(d).is_ok() || !d.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert!(old_gone, "an old empty cgroup of another data dir was kept");
    assert!(young_kept, "a cgroup created just now was removed");
    assert!(busy_kept, "a cgroup holding a process was removed");
}
