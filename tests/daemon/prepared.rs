//! Prepared sandboxes (docs/prepared.md), through a real daemon with
//! `--prepared-sandboxes`: a session's command is handed to a sandbox set
//! up ahead (the result says so and `/metrics` counts the hit), nothing of
//! one command reaches the next, a running command cannot reach or signal
//! the sandbox waiting for the next, the clock starts at the hand-over,
//! and sandboxes are discarded when idle, when their session is deleted
//! or expires, and when what they were prepared from changes.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::bundle_of;

/// A daemon with prepared sandboxes on (`extra` added to its options), a
/// published skill and a managed session of it: the session id.
pub fn prepared_session(w: &World, extra: &[&str]) -> (Daemon, String) {
    let mut args = extra.to_vec();
    if !args.contains(&"--prepared-sandboxes") {
        args.extend(["--prepared-sandboxes", "1"]);
    }
    let d = Daemon::start(w, &args);
    let id = session_of(w, &d);
    (d, id)
}

/// Publishes a small skill `probe` to `d` and makes a managed session of
/// it: the session id.
fn session_of(w: &World, d: &Daemon) -> String {
    session_with(w, d, json!({"workspace": "managed"}))
}

/// [`session_of`], the session request's other members from `extra`.
fn session_with(w: &World, d: &Daemon, extra: Value) -> String {
    let dir = w.skill("probe", &[("scripts/hello.sh", b"echo hello\n")]);
    let (bundle, binding) = bundle_of("probe", &dir);
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    let mut req = json!({"skills": [binding], "tools": ["bash"]});
    if let (Some(r), Some(e)) = (req.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    let r = d.post("/v1/sessions", &req);
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    doc["id"].as_str().unwrap().to_owned()
}

/// Runs a command of the session; the result.
pub fn exec(d: &Daemon, id: &str, argv: &[&str], extra: Value) -> Value {
    let mut job = json!({"session": id, "argv": argv});
    if let (Some(j), Some(e)) = (job.as_object_mut(), extra.as_object()) {
        j.extend(e.clone());
    }
    let r = d.post("/v1/executions", &job);
    let res = r.json();
    assert_eq!(r.status, 200, "{res:#}");
    res
}

/// The value of a `/metrics` sample (its name with labels, as rendered).
pub fn sample(d: &Daemon, name: &str) -> f64 {
    let text = String::from_utf8_lossy(&d.get("/metrics").body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Waits until the session has a prepared sandbox waiting.
pub fn ready(d: &Daemon) {
    ready_n(d, 1);
}

/// Waits until at least `n` prepared sandboxes wait.
pub fn ready_n(d: &Daemon, n: u32) {
    wait_until(&format!("{n} prepared sandboxes"), || {
        sample(d, "skill_runner_prepared_sandboxes") >= f64::from(n)
    });
}

/// Runs a command after its sandbox was prepared; asserts it was handed
/// to a prepared one.
pub fn exec_prepared(d: &Daemon, id: &str, argv: &[&str], extra: Value) -> Value {
    ready(d);
    let hits = sample(
        d,
        "skill_runner_prepared_sandbox_uses_total{outcome=\"hit\"}",
    );
    let res = exec(d, id, argv, extra);
    assert_eq!(res["prepared_sandbox"], true, "{res:#}\n{}", d.log());
    let after = sample(
        d,
        "skill_runner_prepared_sandbox_uses_total{outcome=\"hit\"}",
    );
    assert_eq!(after, hits + 1.0);
    res
}

fn skip_without_sandbox() -> bool {
    !require_sandbox()
}

#[test]
fn a_sessions_next_command_runs_in_a_prepared_sandbox() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    // The first call builds its own sandbox: nothing was prepared yet.
    let first = exec(&d, &id, &["sh", "-c", "echo first"], json!({}));
    assert_eq!(first["status"], "exited", "{first:#}");
    assert!(first.get("prepared_sandbox").is_none(), "{first:#}");
    // The next one gets the sandbox prepared after it: its argv, env,
    // cwd and stdin are the request's.
    std::fs::create_dir_all(w.data_dir().join("workspaces").join(&id).join("sub")).ok();
    let res = exec_prepared(
        &d,
        &id,
        &[
            "sh",
            "-c",
            "pwd; echo $GREETING; cat; id -u; ls /skills; exit 3",
        ],
        json!({"env": {"GREETING": "hi there"}, "stdin": "from stdin\n"}),
    );
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["exit_code"], 3, "{res:#}");
    let out = res["stdout"].as_str().unwrap();
    assert!(
        out.starts_with("/workspace\nhi there\nfrom stdin\n"),
        "{out}"
    );
    assert!(out.contains("probe"), "{out}");
    // A missing command is 127, as in a sandbox built for it.
    let res = exec_prepared(&d, &id, &["no-such-command-anywhere"], json!({}));
    assert_eq!(res["exit_code"], 127, "{res:#}");
    // Without stdin, the command reads an end of file at once.
    let res = exec_prepared(&d, &id, &["cat"], json!({}));
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["stdout"], "", "{res:#}");
}

#[test]
fn the_timeout_starts_at_the_hand_over() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    // Prepared well before: the time it waited is not the command's.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let res = exec_prepared(
        &d,
        &id,
        &["sh", "-c", "echo started; sleep 0.2; echo done"],
        json!({"limits": {"timeout_ms": 1500}}),
    );
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["stdout"], "started\ndone\n", "{res:#}");
    let res = exec_prepared(
        &d,
        &id,
        &["sh", "-c", "echo started; sleep 5"],
        json!({"limits": {"timeout_ms": 1000}}),
    );
    assert_eq!(res["status"], "timed_out", "{res:#}");
    assert_eq!(res["stdout"], "started\n", "{res:#}");
}

#[test]
fn nothing_of_one_command_is_seen_by_the_next() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    let marker = marker(7);
    let leave = format!(
        "echo x > /tmp/left; echo x > /dev/shm/left; \
         (sleep {marker} &) ; (setsid sleep {marker} &); echo left"
    );
    let res = exec_prepared(&d, &id, &["sh", "-c", &leave], json!({}));
    assert_eq!(res["stdout"], "left\n", "{res:#}");
    // The host has none of them either: the sandbox went with its command.
    wait_until("the left processes gone", || {
        processes_with(&marker).is_empty()
    });
    let look = "ls -A /tmp /dev/shm; ps -eo pid=,args= 2>/dev/null || ls /proc | grep -c '^[0-9]'";
    let res = exec_prepared(&d, &id, &["sh", "-c", look], json!({}));
    let out = res["stdout"].as_str().unwrap();
    assert!(!out.contains("left"), "{out}");
    assert!(!out.contains(&marker), "{out}");
}

#[test]
fn a_session_without_a_workspace_keeps_nothing_from_one_command_to_the_next() {
    if skip_without_sandbox() {
        return;
    }
    // Each command of such a session gets a fresh workspace, and in it
    // the extensions dir: a prepared sandbox has its own, never the last
    // command's.
    let w = World::new();
    let d = Daemon::start(&w, &["--prepared-sandboxes", "1"]);
    let id = session_with(&w, &d, json!({}));
    exec(&d, &id, &["true"], json!({}));
    let leave = "echo x > /workspace/left && echo x > /skill-extensions/left && echo left";
    let res = exec_prepared(&d, &id, &["sh", "-c", leave], json!({}));
    assert_eq!(res["stdout"], "left\n", "{res:#}");
    let look = "ls -A /workspace /skill-extensions/";
    let res = exec_prepared(&d, &id, &["sh", "-c", look], json!({}));
    let out = res["stdout"].as_str().unwrap();
    assert!(!out.contains("left"), "{res:#}");
    assert!(out.contains(".sciencediscovery"), "{res:#}");
}

#[test]
fn a_running_command_cannot_reach_the_sandbox_prepared_for_the_next() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &["--prepared-sandboxes", "2"]);
    exec(&d, &id, &["true"], json!({}));
    ready_n(&d, 2);
    // Every signal to every process it can name, every /proc entry, and
    // ptrace of every pid below 400000: none reaches the other sandbox.
    let attack = r#"
        kill -9 -1 2>/dev/null
        for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" = "$$" ] && continue; kill -9 "$n" 2>/dev/null; done
        seen=$(ls -d /proc/[0-9]* | wc -l)
        echo "seen $seen"
        x=handove; n=0
        for p in /proc/[0-9]*; do
            [ "$p" = /proc/1 ] && continue  # this sandbox's own bubblewrap
            c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)
            case "$c" in *"--${x}r"*) n=$((n+1));; esac
        done
        echo "shims $n"
        cat /proc/1/cmdline | tr '\0' ' '; echo
    "#;
    let res = exec_prepared(&d, &id, &["sh", "-c", attack], json!({}));
    let out = res["stdout"].as_str().unwrap();
    assert!(
        out.contains("shims 0"),
        "another sandbox's shim is visible: {out}"
    );
    // The other prepared sandbox survived and runs the next command.
    let res = exec_prepared(&d, &id, &["sh", "-c", "echo alive"], json!({}));
    assert_eq!(res["stdout"], "alive\n", "{res:#}");
    assert_eq!(
        sample(
            &d,
            "skill_runner_prepared_sandboxes_discarded_total{reason=\"died\"}"
        ),
        0.0
    );
}

/// The daemon's open descriptors.
fn open_fds(d: &Daemon) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .count()
}

#[test]
fn a_prepared_sandbox_holds_no_more_descriptors_than_its_budget() {
    if skip_without_sandbox() {
        return;
    }
    // The descriptor budget checked at start counts PER_PREPARED for each
    // sandbox the pool may hold; four waiting, then none.
    let w = World::new();
    let (d, id) = prepared_session(&w, &["--prepared-sandboxes", "4"]);
    exec(&d, &id, &["true"], json!({}));
    ready_n(&d, 4);
    let with = open_fds(&d);
    let r = d.delete(&format!("/v1/sessions/{id}"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    wait_until("no prepared sandbox", || {
        sample(&d, "skill_runner_prepared_sandboxes") == 0.0
    });
    let without = open_fds(&d);
    let each = (with - without) as f64 / 4.0;
    let budget = skill_runner::daemon::descriptors::PER_PREPARED as f64;
    assert!(
        each > 0.0 && each < budget,
        "{each} descriptors a prepared sandbox, budget {budget}"
    );
}

#[test]
fn idle_prepared_sandboxes_are_discarded() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &["--prepared-idle", "1s"]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    let daemon = d.pid();
    assert!(children_named(daemon, "bwrap") >= 1, "its bubblewrap");
    wait_until("an idle discard", || {
        sample(
            &d,
            "skill_runner_prepared_sandboxes_discarded_total{reason=\"idle\"}",
        ) >= 1.0
    });
    assert_eq!(sample(&d, "skill_runner_prepared_sandboxes"), 0.0);
    // Its bubblewrap is gone from the host.
    wait_until("no bwrap below the daemon", || {
        children_named(daemon, "bwrap") == 0
    });
    // The next call is a miss, and builds its own.
    let res = exec(&d, &id, &["echo", "built"], json!({}));
    assert_eq!(res["stdout"], "built\n");
    assert!(res.get("prepared_sandbox").is_none(), "{res:#}");
}

#[test]
fn deleting_the_session_discards_its_prepared_sandboxes() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    let daemon = d.pid();
    assert!(children_named(daemon, "bwrap") >= 1, "its bubblewrap");
    let r = d.delete(&format!("/v1/sessions/{id}"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(
        sample(
            &d,
            "skill_runner_prepared_sandboxes_discarded_total{reason=\"session_ended\"}"
        ),
        1.0
    );
    assert_eq!(sample(&d, "skill_runner_prepared_sandboxes"), 0.0);
    wait_until("no bwrap below the daemon", || {
        children_named(daemon, "bwrap") == 0
    });
}

#[test]
fn an_expired_session_discards_its_prepared_sandboxes() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    // Sandboxes outlive the session by far unless its expiry ends them.
    let (d, id) = prepared_session(&w, &["--session-idle", "3s", "--prepared-idle", "600s"]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    let daemon = d.pid();
    // Nothing touches the session meanwhile: the sweep expires it.
    wait_until("the expired session's sandbox discarded", || {
        sample(
            &d,
            "skill_runner_prepared_sandboxes_discarded_total{reason=\"session_ended\"}",
        ) >= 1.0
            && sample(&d, "skill_runner_prepared_sandboxes") == 0.0
    });
    assert_eq!(d.get(&format!("/v1/sessions/{id}")).status, 404);
    wait_until("no bwrap below the daemon", || {
        children_named(daemon, "bwrap") == 0
    });
}

#[test]
fn a_cancelled_command_in_a_prepared_sandbox_leaves_nothing() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    let marker = marker(9);
    let script = format!("(setsid sleep {marker} &); exec sleep {marker}");
    let job = json!({"session": id, "argv": ["sh", "-c", script], "execution_id": "cancel-me"});
    let d = std::sync::Arc::new(d);
    let handle = {
        let d = d.clone();
        std::thread::spawn(move || d.post("/v1/executions", &job).json())
    };
    wait_until("the command running", || {
        !processes_with(&marker).is_empty()
    });
    let r = d.delete("/v1/executions/cancel-me");
    assert!(r.status == 200 || r.status == 202, "{}", r.status);
    let res = handle.join().unwrap();
    assert_eq!(res["status"], "cancelled", "{res:#}");
    assert_eq!(res["prepared_sandbox"], true, "{res:#}");
    wait_until("nothing of it left", || processes_with(&marker).is_empty());
}

/// Processes named `name` among the descendants of `pid` (children of
/// any of its threads: the daemon's refill thread spawns the sandboxes).
fn children_named(pid: u32, name: &str) -> usize {
    let mut count = 0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let mut kids = String::new();
        let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            kids += &std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            kids.push(' ');
        }
        for k in kids
            .split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{k}/comm")).unwrap_or_default();
            if comm.trim() == name {
                count += 1;
            }
            stack.push(k);
        }
    }
    count
}

/// Asserts that `res` ran in a sandbox built for it, and that the
/// prepared sandboxes discarded as prepared from something else now
/// number `changed`.
fn assert_built_after_changed(d: &Daemon, res: &Value, changed: f64) {
    assert!(res.get("prepared_sandbox").is_none(), "{res:#}");
    assert_eq!(
        sample(
            d,
            "skill_runner_prepared_sandboxes_discarded_total{reason=\"changed\"}"
        ),
        changed
    );
}

#[test]
fn a_sandbox_prepared_from_anything_else_is_discarded_and_never_used() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    // Other limits make another sandbox (another cgroup limit, tmpfs
    // size): the one prepared is discarded, the command gets its own.
    let other = json!({"limits": {"tmp_bytes": 1 << 20}});
    let res = exec(
        &d,
        &id,
        &["sh", "-c", "df -k /tmp | tail -1"],
        other.clone(),
    );
    assert_built_after_changed(&d, &res, 1.0);
    // The one prepared after it has the new limits, and holds them.
    let res = exec_prepared(
        &d,
        &id,
        &["sh", "-c", "head -c 2000000 /dev/zero > /tmp/f"],
        other,
    );
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_ne!(res["exit_code"], 0, "a 1 MiB /tmp took 2 MB: {res:#}");
}

/// The published root of the session's skill (`published/<identity>`).
fn probe_root(w: &World) -> std::path::PathBuf {
    let roots: Vec<_> = std::fs::read_dir(w.data_dir().join("published"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("skills/probe/scripts/hello.sh").exists())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    roots.into_iter().next().unwrap()
}

#[test]
fn a_published_root_changed_on_disk_is_not_served_by_the_sandbox_prepared_with_it() {
    if skip_without_sandbox() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(&d, &id, &["true"], json!({}));
    ready(&d);
    // A byte flipped from outside in the root the prepared sandbox has
    // bound: the next request finds the root changed and rebuilds it from
    // the store at the same path. The sandbox prepared with the old one
    // still holds the flipped byte, and must not run the command.
    let script = probe_root(&w).join("skills/probe/scripts/hello.sh");
    let mode = |m| std::fs::set_permissions(&script, std::fs::Permissions::from_mode(m)).unwrap();
    mode(0o644);
    std::fs::write(&script, "Echo hello\n").unwrap();
    mode(0o444);
    let res = exec(
        &d,
        &id,
        &["cat", "/skills/probe/scripts/hello.sh"],
        json!({}),
    );
    assert_eq!(res["stdout"], "echo hello\n", "{res:#}");
    assert_built_after_changed(&d, &res, 1.0);
    // The one prepared next holds the rebuilt root.
    let res = exec_prepared(
        &d,
        &id,
        &["cat", "/skills/probe/scripts/hello.sh"],
        json!({}),
    );
    assert_eq!(res["stdout"], "echo hello\n", "{res:#}");
}

#[test]
fn a_workspace_replaced_on_the_host_is_not_served_by_the_sandbox_prepared_with_it() {
    if skip_without_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = prepared_session(&w, &[]);
    exec(
        &d,
        &id,
        &["sh", "-c", "echo old > /workspace/mark"],
        json!({}),
    );
    ready(&d);
    // From outside, the session's workspace folder is moved aside and
    // another made at its path: the prepared sandbox has the old one bound.
    let ws = w.data_dir().join("workspaces").join(&id);
    let aside = ws.with_extension("aside");
    std::fs::rename(&ws, &aside).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("mark"), "new\n").unwrap();
    copy_owner(&aside, &ws);
    copy_owner(&aside, &ws.join("mark"));
    let res = exec(&d, &id, &["cat", "/workspace/mark"], json!({}));
    assert_eq!(res["stdout"], "new\n", "{res:#}");
    assert!(res.get("prepared_sandbox").is_none(), "{res:#}");
}

#[test]
fn an_extensions_dir_a_command_moved_aside_is_not_the_next_command_s() {
    if skip_without_sandbox() {
        return;
    }
    // Two prepared: the second was set up with the extensions dir the
    // first command then moves aside and makes again. The next command
    // must get the one at the path now, as a sandbox built for it would.
    let w = World::new();
    let (d, id) = prepared_session(&w, &["--prepared-sandboxes", "2"]);
    exec(&d, &id, &["true"], json!({}));
    ready_n(&d, 2);
    let swap = "cd /workspace/.sciencediscovery && mv skill-extensions moved-away && \
                mkdir skill-extensions && echo old > moved-away/marker && echo swapped";
    let res = exec_prepared(&d, &id, &["sh", "-c", swap], json!({}));
    assert_eq!(res["stdout"], "swapped\n", "{res:#}");
    let look = "ls -A /skill-extensions; echo new > /skill-extensions/written";
    let res = exec(&d, &id, &["sh", "-c", look], json!({}));
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["stdout"], "", "the moved folder was bound: {res:#}");
    let dot = w
        .data_dir()
        .join("workspaces")
        .join(&id)
        .join(".sciencediscovery");
    assert!(dot.join("skill-extensions/written").exists());
    assert!(!dot.join("moved-away/written").exists());
}

/// Gives `to` the owner and mode of `from`.
fn copy_owner(from: &std::path::Path, to: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(from).unwrap();
    std::os::unix::fs::chown(to, Some(m.uid()), Some(m.gid())).unwrap();
    if to.is_dir() {
        std::fs::set_permissions(to, m.permissions()).unwrap();
    }
}

#[test]
fn a_change_of_the_etc_view_discards_the_sandbox_prepared_with_the_old_one() {
    if skip_without_sandbox() {
        return;
    }
    let alternatives = std::path::Path::new("/etc/alternatives");
    if !alternatives.is_dir() {
        skip("no /etc/alternatives to stand in for");
        return;
    }
    // The daemon in a mount namespace of its own, where a copy of
    // /etc/alternatives (a piece of the default profile's /etc view)
    // stands in for the host's, so the test can change it.
    let w = World::new();
    let copy = w.path().join("alternatives");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(alternatives)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(cp.status.success(), "{}", show(&cp));
    let daemon = Daemon::command(&w, &["--prepared-sandboxes", "1"]);
    let d = match Daemon::spawn_unshared(&daemon) {
        Ok(d) => d,
        Err(log) => {
            skip(format!("no mount namespace for the daemon here: {log}"));
            return;
        }
    };
    d.bind_in_its_namespace(&copy, alternatives);
    let id = session_of(&w, &d);
    exec(&d, &id, &["true"], json!({}));
    let look = [
        "sh",
        "-c",
        "cat /etc/alternatives/marker 2>/dev/null || echo none",
    ];
    let res = exec_prepared(&d, &id, &look, json!({}));
    assert_eq!(res["stdout"], "none\n", "{res:#}");
    // An entry added to a piece of the view: the next request's view is a
    // new generation, and the sandbox prepared with the old one is
    // discarded, never handed the command.
    ready(&d);
    std::fs::write(copy.join("marker"), "added\n").unwrap();
    let res = exec(&d, &id, &look, json!({}));
    assert_eq!(res["stdout"], "added\n", "{res:#}");
    assert_built_after_changed(&d, &res, 1.0);
}

#[test]
fn the_runner_starts_as_a_shim_in_the_address_space_prepared_sandboxes_ask_for() {
    // Where RLIMIT_AS holds memory_bytes (no memory cgroup), a sandbox is
    // prepared only for a job that leaves the runner's own binary this
    // much to start in as its shim.
    if std::env::var_os("SKILL_RUNNER_TEST_LAUNCHER").is_some_and(|l| !l.is_empty()) {
        skip("the runner runs through a launcher, which the limit would hold too");
        return;
    }
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("no prlimit (util-linux)");
        return;
    }
    let limit = format!("--as={}", skill_runner::sandbox::shim::SHIM_ADDRESS_SPACE);
    let mut shim = runner_command();
    shim.args(["--skill-runner-exec-shim", "--", "/bin/true"]);
    let out = wrapped("prlimit", &[std::ffi::OsStr::new(&limit)], &shim)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn the_pool_holds_no_more_memory_than_prepared_memory() {
    if skip_without_sandbox() {
        return;
    }
    // A sandbox's PSS depends on how many processes share its pages at
    // the moment it is measured: in a debug build 7.4 MB with no other
    // daemon running, 2.3 MB with six, as the suite's parallel tests come
    // and go. A bound made from a measurement taken while many shared can
    // be below what the next one measures when few do, and then rightly
    // keeps none; only that precondition is tried again (the bound's own
    // promises are asserted on every try).
    const OVER: &str = "skill_runner_prepared_sandboxes_discarded_total{reason=\"memory\"}";
    let mut kept = None;
    for _ in 0..3 {
        // Unbounded but for the count: one waits, and the gauge says
        // what it holds.
        let w = World::new();
        let (d, id) = prepared_session(&w, &["--prepared-sandboxes", "1"]);
        exec(&d, &id, &["true"], json!({}));
        ready_n(&d, 1);
        let one = sample(&d, "skill_runner_prepared_sandboxes_bytes");
        assert!(one > 0.0, "no memory measured for a prepared sandbox");
        drop(d);

        // A bound of one and a half of one: the first waits, and the
        // refill stops short of four without building one only to
        // discard it.
        let w = World::new();
        let bound = format!("{}", (one * 1.5).max((1 << 20) as f64) as u64);
        let (d, id) = prepared_session(
            &w,
            &["--prepared-sandboxes", "4", "--prepared-memory", &bound],
        );
        exec(&d, &id, &["true"], json!({}));
        wait_until("a prepared sandbox kept or discarded", || {
            sample(&d, "skill_runner_prepared_sandboxes") >= 1.0 || sample(&d, OVER) >= 1.0
        });
        // The refill runs on; give it the time four would take.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let waiting = sample(&d, "skill_runner_prepared_sandboxes");
        let held = sample(&d, "skill_runner_prepared_sandboxes_bytes");
        assert!(waiting < 4.0, "{waiting} waiting");
        assert!(
            held <= bound.parse::<f64>().unwrap(),
            "{held} bytes held, bound {bound}"
        );
        if waiting >= 1.0 {
            kept = Some((w, d, id));
            break;
        }
    }
    let (_w, d, id) =
        kept.expect("no prepared sandbox kept under 1.5 times one's measured size in 3 tries");
    // A second session finds the pool full: its refills make nothing.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [], "tools": ["bash"], "workspace": "managed"}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    let other = r.json()["id"].as_str().unwrap().to_owned();
    for _ in 0..5 {
        exec(&d, &other, &["true"], json!({}));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let wasted = sample(&d, OVER);
    assert!(
        wasted <= 1.0,
        "{wasted} sandboxes built only to be discarded"
    );
    // What waits is still used.
    let res = exec(&d, &id, &["true"], json!({}));
    assert_eq!(res["prepared_sandbox"], true, "{res:#}");
}

#[test]
fn a_daemon_stopped_while_it_prepares_a_sandbox_leaves_nothing_behind() {
    if skip_without_sandbox() {
        return;
    }
    // A command of the session runs when the daemon is told to stop: the
    // drain lets it finish, and its end starts a refill just as the
    // daemon goes on to exit. The daemon must wait for the sandbox being
    // built and discard it, not exit under it and leave its cgroup (or a
    // half set-up sandbox waiting for ever on a hand-over that never
    // comes).
    let w = World::new();
    let (d, id) = prepared_session(&w, &["--prepared-sandboxes", "8"]);
    let marker = marker(7);
    let owners = cgroup_owners(&w);
    let mut d = d;
    let script = format!("sleep 1; : {marker}");
    let conn = d.post_unanswered(
        "/v1/executions",
        &json!({"session": id, "argv": ["sh", "-c", script]}),
    );
    wait_until("the command running", || {
        !processes_with(&marker).is_empty()
    });
    let pooled = pooled_cgroups(&owners).len();
    kill(d.pid() as i32, libc::SIGTERM);
    let res = read_response(std::io::BufReader::new(conn)).json();
    assert_eq!(res["status"], "exited", "{res:#}");
    let status = d.wait();
    assert!(status.success(), "{status:?}\n{}", d.log());
    let data = w.data_dir().display().to_string();
    assert_eq!(
        processes_with(&data),
        Vec::<i32>::new(),
        "processes of the stopped daemon"
    );
    let left = pooled_cgroups(&owners);
    assert!(left.is_empty(), "cgroups of the stopped daemon: {left:?}");
    if pooled == 0 {
        skip("no pooled cgroups here: only the processes were checked");
    }
}
