//! The data dir another local user could have made or changed is refused,
//! and every command makes the data dir and its folders with the modes
//! docs/data-dir.md states.
//!
//! The attacks are those of a second local user against a root runner: a
//! throwaway user is created for each test (`useradd`) and removed after
//! it (`userdel`), and acts with its own uid (`setpriv`). Without root the
//! tests are skipped (`support::skip`). Each attack is tried from every
//! command that opens the data dir, and each refusal is checked to have
//! changed nothing: no owner, group or mode, and no new entry.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;
use skill_runner_tests::*;

/// A local user made for one test and removed when it ends.
struct Intruder {
    name: String,
    uid: u32,
}

impl Intruder {
    /// `None` (after printing SKIPPED) when not root.
    fn new() -> Option<Intruder> {
        // Root of a user namespace that maps uid 0 alone cannot act as
        // another uid: skipped as a non-root host is.
        if euid() != 0 || sandbox_uid().is_none() {
            skip("needs root (with other uids mapped) to create a throwaway local user");
            return None;
        }
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sr-x{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--user-group"])
            .args(["--shell", "/usr/sbin/nologin", &name])
            .output()
            .expect("run useradd");
        assert!(out.status.success(), "useradd {name}: {}", show(&out));
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = text(&id.stdout)
            .trim()
            .parse()
            .expect("uid of the new user");
        Some(Intruder { name, uid })
    }

    /// Runs `script` with `sh -c` as this user (its own group only).
    fn sh(&self, script: &str) {
        let out = Command::new("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .args(["--clear-groups", "--", "sh", "-c", script])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "as {}: {script}: {}",
            self.name,
            show(&out)
        );
    }
}

impl Drop for Intruder {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// The effective uid, read from `/proc`.
fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Owner, group, mode and entries of a folder: what a refusal must leave.
fn state(p: &Path) -> (u32, u32, u32, Vec<PathBuf>) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(p) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    entries.sort();
    (m.uid(), m.gid(), m.mode() & 0o7777, entries)
}

/// A folder like `/tmp`: root's, everyone may write, sticky.
fn shared_tmp(w: &World) -> PathBuf {
    let p = w.path().join("shared-tmp");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777)).unwrap();
    p
}

/// A skill folder every user may read, for `store add`.
fn readable_skill(w: &World) -> PathBuf {
    w.skill("hello", &[("scripts/hi.sh", b"echo hi\n")])
}

/// Each command that opens the data dir, run with `--data-dir data`.
fn commands(w: &World, data: &Path) -> Vec<(&'static str, Output)> {
    let skill = readable_skill(w);
    let job = w.job(
        "job",
        &json!({"argv": ["true"], "skills": [skill_ref("hello", &skill)]}),
    );
    let cmd = |args: &[&str]| {
        let mut c = w.cmd();
        c.arg("--data-dir").arg(data).args(args);
        c
    };
    let skill = skill.to_str().unwrap().to_owned();
    let job = job.to_str().unwrap().to_owned();
    let store_add = [
        "store",
        "add",
        &skill,
        "--id",
        "hello",
        "--revision",
        "1",
        "--version",
        "1.0.0",
    ];
    vec![
        (
            "run",
            output_within(&mut cmd(&["run", "--json", &job]), HANG_GUARD),
        ),
        ("store add", output_within(&mut cmd(&store_add), HANG_GUARD)),
        (
            "store list",
            output_within(&mut cmd(&["store", "list"]), HANG_GUARD),
        ),
        (
            "session create",
            output_within(
                &mut cmd(&["session", "create", "--skill", "hello@1"]),
                HANG_GUARD,
            ),
        ),
        (
            "catalog list",
            output_within(&mut cmd(&["catalog", "list"]), HANG_GUARD),
        ),
        ("serve", serve_briefly(w, data)),
    ]
}

/// `serve` on its default socket: its output once it listens (then
/// stopped with SIGTERM) or exits.
fn serve_briefly(w: &World, data: &Path) -> Output {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let log = w
        .path()
        .join(format!("serve-{}.log", N.fetch_add(1, Ordering::Relaxed)));
    let mut child = w
        .cmd()
        .arg("--data-dir")
        .arg(data)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let exited = child.try_wait().unwrap().is_some();
        if !exited
            && std::fs::read_to_string(&log)
                .unwrap()
                .contains("listening on")
        {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
        } else if !exited {
            assert!(
                started.elapsed() < HANG_GUARD,
                "serve neither listened nor exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let mut out = child.wait_with_output().unwrap();
        out.stderr = std::fs::read(&log).unwrap();
        return out;
    }
}

/// Every command refuses `data` with a sentence naming `named` and what
/// to set, and leaves `watched` as it was.
fn refused_by_every_command(w: &World, data: &Path, named: &Path, watched: &[&Path]) {
    let before: Vec<_> = watched.iter().map(|p| state(p)).collect();
    for (what, out) in commands(w, data) {
        assert!(
            !out.status.success(),
            "{what} used {}: {}",
            data.display(),
            show(&out)
        );
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            said.contains(&named.display().to_string()) && said.contains("--data-dir"),
            "{what}: the refusal names {} and what to set: {said}",
            named.display()
        );
        let after: Vec<_> = watched.iter().map(|p| state(p)).collect();
        assert_eq!(before, after, "{what} changed what it refused");
    }
}

/// A root runner's data dir pre-created by another user in a shared
/// folder (0777, theirs) was used as it was: that user replaced
/// `published/` and the next job printed the forged bytes.
#[test]
fn a_data_dir_another_user_made_is_refused_by_every_command() {
    let Some(intruder) = Intruder::new() else {
        return;
    };
    let w = World::new();
    let tmp = shared_tmp(&w);
    let data = tmp.join("skill-runner");
    intruder.sh(&format!(
        "mkdir -m 777 {0} && mkdir -m 777 {0}/published {0}/store",
        data.display()
    ));
    refused_by_every_command(&w, &data, &data, &[&data, &data.join("published")]);
    assert_eq!(state(&data).0, intruder.uid);
}

/// With a planted symlink as the data dir, root ran `chown :65533` and
/// `chmod 0710` on a root-owned folder of the other user's choosing.
#[test]
fn a_symlinked_data_dir_is_refused_and_its_target_never_chowned_or_chmodded() {
    let Some(intruder) = Intruder::new() else {
        return;
    };
    let w = World::new();
    let tmp = shared_tmp(&w);
    let victim = w.path().join("roots-precious");
    std::fs::create_dir(&victim).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(victim.join("keep"), "root's").unwrap();
    let data = tmp.join("skill-runner");
    intruder.sh(&format!("ln -s {} {}", victim.display(), data.display()));
    refused_by_every_command(&w, &data, &data, &[&victim]);
    let (uid, gid, mode, _) = state(&victim);
    assert_eq!(
        (uid, gid, mode),
        (0, 0, 0o755),
        "the target kept its owner and mode"
    );

    // The same link one folder up (the data dir below it) is as refused.
    let above = tmp.join("state");
    intruder.sh(&format!("ln -s {} {}", victim.display(), above.display()));
    refused_by_every_command(&w, &above.join("skill-runner"), &above, &[&victim]);
    assert!(!victim.join("skill-runner").exists());
}

/// A folder above the data dir that others may write (no sticky bit), or
/// that another user owns, lets them swap the data dir for their own.
#[test]
fn a_folder_above_that_others_may_write_or_own_is_refused() {
    let Some(intruder) = Intruder::new() else {
        return;
    };
    let w = World::new();
    let open = w.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused_by_every_command(&w, &open.join("data"), &open, &[&open]);
    assert!(!open.join("data").exists());

    let tmp = shared_tmp(&w);
    let theirs = tmp.join("theirs");
    intruder.sh(&format!("mkdir -m 755 {}", theirs.display()));
    refused_by_every_command(&w, &theirs.join("data"), &theirs, &[&theirs]);
    assert_eq!(state(&theirs).3, Vec::<PathBuf>::new());
}

/// The modes of the table in docs/data-dir.md, for a root runner (its
/// sandbox group may pass where bubblewrap binds from).
const ROOT_LAYOUT: &[(&str, u32, bool)] = &[
    ("", 0o710, true),
    ("store", 0o700, false),
    ("published", 0o710, true),
    ("executions", 0o710, true),
    ("system-views", 0o710, true),
    ("roots", 0o710, true),
    ("cgroups", 0o700, false),
    ("sessions", 0o700, false),
    ("cache", 0o700, false),
    ("run", 0o700, false),
];

/// Nothing below `dir` may be written by others, and no file read by them.
fn nothing_open_to_others(dir: &Path, what: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let m = entry.metadata().unwrap();
        let mode = m.mode() & 0o7777;
        let p = entry.path();
        if m.is_symlink() {
            continue; // a link's own mode means nothing
        }
        assert_eq!(
            mode & 0o002,
            0,
            "{what}: {} is writable by others ({mode:o})",
            p.display()
        );
        if m.is_dir() {
            nothing_open_to_others(&p, what);
        }
    }
}

/// `session create` and `store add` made the data dir 0755 (records
/// readable by others): every command makes the whole layout with its
/// documented modes.
#[test]
fn every_command_makes_the_data_dir_with_the_documented_modes() {
    if Intruder::new().is_none() {
        return;
    }
    let sandbox_gid = sandbox_uid().map(|_| 65533);
    for (i, what) in [
        "run",
        "store add",
        "store list",
        "session create",
        "catalog list",
        "serve",
    ]
    .iter()
    .enumerate()
    {
        let w = World::new();
        let data = w.path().join(format!("data-{i}"));
        let out = commands(&w, &data)
            .into_iter()
            .find(|(name, _)| name == what)
            .unwrap()
            .1;
        assert!(data.is_dir(), "{what} made no data dir: {}", show(&out));
        for (name, mode, group) in ROOT_LAYOUT {
            let p = data.join(name);
            let m =
                std::fs::metadata(&p).unwrap_or_else(|e| panic!("{what}: {}: {e}", p.display()));
            let want = if sandbox_gid.is_some() || !group {
                *mode
            } else {
                0o700
            };
            assert_eq!(m.mode() & 0o7777, want, "{what}: {}", p.display());
            assert_eq!(m.uid(), 0, "{what}: {}", p.display());
            if let (true, Some(gid)) = (group, sandbox_gid) {
                assert_eq!(m.gid(), gid, "{what}: {}", p.display());
            }
        }
        nothing_open_to_others(&data, what);
    }
}

/// A non-root runner without HOME defaulted to a folder under /tmp, which
/// any other user could have made first.
#[test]
fn a_non_root_runner_without_home_has_no_default_and_says_what_to_set() {
    let Some(user) = Intruder::new() else {
        return;
    };
    let w = World::new();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.uid))
        .args(["--clear-groups", "--"])
        .arg(runner_bin())
        .args(["store", "list"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(w.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let said = text(&out.stderr);
    assert!(
        said.contains("HOME") && said.contains("SKILL_RUNNER_DATA_DIR"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_dir(w.path()).unwrap().count(),
        0,
        "nothing was made"
    );

    // With a home of its own, that user's data dir is private (0700 all
    // through), made where the default says.
    let home = w.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(user.uid), Some(user.uid)).unwrap();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.uid))
        .args(["--clear-groups", "--"])
        .arg(runner_bin())
        .args(["store", "list"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let data = home.join(".local/state/skill-runner");
    for (name, _, _) in ROOT_LAYOUT {
        let m = std::fs::metadata(data.join(name)).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700, "{name}");
        assert_eq!(m.uid(), user.uid, "{name}");
    }
}

/// The data dir under another name: bound elsewhere (a bind mount, made
/// in the run's own mount namespace), a folder in it named through that
/// name is refused as it is through the real one, and the other name's
/// job root is still for jobs.
#[test]
fn the_data_dir_seen_through_a_bind_mount_is_refused_as_a_job_folder() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (code, r, _) = w.run_json(&json!({"argv": ["/bin/true"]}));
    assert_eq!((code, &r["status"]), (0, &json!("exited")), "{r:#}");
    let mirror = w.path().join("mirror");
    std::fs::create_dir(&mirror).unwrap();
    let data = w.data_dir().canonicalize().unwrap();
    let named = |ws: &Path| {
        let job = w.job(
            "mirrored",
            &json!({"argv": ["ls", "/workspace"], "workspace": ws}),
        );
        let mut run = w.cmd();
        run.args(["run", "--json"]).arg(job);
        output_with_binds(&[(&data, &mirror)], &run)
    };
    let Some(out) = named(&mirror.join("store")) else {
        skip("no mount namespace can be made here");
        return;
    };
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "rejected", "{r:#}");
    let msg = r["error"]["message"].as_str().unwrap();
    let said = format!("is inside the runner's data dir {}", mirror.display());
    assert!(msg.contains(&said), "{msg}");
    // Its job root, through the same name, is a job's.
    let jobs = mirror.join("roots").join("ws");
    std::fs::create_dir_all(data.join("roots").join("ws")).unwrap();
    give_to_sandbox(&data.join("roots").join("ws"));
    let out = named(&jobs).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "exited", "{r:#}");
}

/// A folder inside the data dir bound elsewhere (its package store, as a
/// volume's sub-path would be) is part of the data dir under another
/// name: a job folder inside that name is refused, and so is one above
/// it.
#[test]
fn a_folder_of_the_data_dir_seen_through_a_bind_mount_is_refused_as_a_job_folder() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (code, r, _) = w.run_json(&json!({"argv": ["/bin/true"]}));
    assert_eq!((code, &r["status"]), (0, &json!("exited")), "{r:#}");
    let above = w.path().join("elsewhere");
    let pkgs = above.join("pkgs");
    std::fs::create_dir_all(&pkgs).unwrap();
    give_to_sandbox(&above);
    give_to_sandbox(&pkgs);
    let store = w.data_dir().canonicalize().unwrap().join("store");
    for (ws, said) in [
        (
            pkgs.clone(),
            format!("is inside the runner's data dir {}", pkgs.display()),
        ),
        (
            above.clone(),
            format!("is above the runner's data dir {}", pkgs.display()),
        ),
    ] {
        let job = w.job(
            "part",
            &json!({"argv": ["ls", "/workspace"], "workspace": ws}),
        );
        let mut run = w.cmd();
        run.args(["run", "--json"]).arg(job);
        let Some(out) = output_with_binds(&[(&store, &pkgs)], &run) else {
            skip("no mount namespace can be made here");
            return;
        };
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["status"], "rejected", "{ws:?}: {r:#}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(&said), "{msg}");
    }
}
