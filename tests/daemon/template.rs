//! Where the daemon may make mount namespaces, every sandbox starts in
//! its template one (docs/template.md), and sees the host's mounts as
//! they are at its start: one made on the host after the template is seen
//! by the next command, one removed is gone from it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

const IN_TEMPLATE: &str = "skill_runner_sandbox_starts_total{namespace=\"template\"}";
const IN_OWN: &str = "skill_runner_sandbox_starts_total{namespace=\"own\"}";
const MADE: &str = "skill_runner_template_namespaces_total";

#[test]
fn sandboxes_start_in_the_template_where_the_daemon_may_make_one() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let r = d.post("/v1/executions", &json!({"argv": ["echo", "hi"]}));
    assert_eq!(r.json()["stdout"], "hi\n", "{:#}", r.json());
    let (daemon_ns, bwrap_ns) = namespaces(&d, &w);
    // The self-check's sandbox and these.
    if may_make_mount_namespaces() {
        assert_ne!(
            daemon_ns, bwrap_ns,
            "bubblewrap started in the daemon's own mount namespace"
        );
        assert!(d.metric(IN_TEMPLATE) >= 3.0, "{}", d.log());
        assert_eq!(d.metric(IN_OWN), 0.0, "{}", d.log());
        assert!(d.metric(MADE) >= 1.0);
    } else {
        assert_eq!(daemon_ns, bwrap_ns);
        assert_eq!(d.metric(IN_TEMPLATE), 0.0);
        assert!(d.metric(IN_OWN) >= 3.0);
        assert!(
            d.log().contains("no template namespace can be made here"),
            "{}",
            d.log()
        );
    }

    // Turned off: the daemon's own namespace, with the same result.
    let (w, roots) = world_with_roots();
    let mut c = Daemon::command(&w, &["--root", &roots]);
    c.env("SKILL_RUNNER_NO_TEMPLATE", "1");
    let d = Daemon::spawn(c).unwrap();
    let r = d.post("/v1/executions", &json!({"argv": ["echo", "hi"]}));
    assert_eq!(r.json()["stdout"], "hi\n", "{:#}", r.json());
    let (daemon_ns, bwrap_ns) = namespaces(&d, &w);
    assert_eq!(daemon_ns, bwrap_ns);
    assert_eq!(d.metric(IN_TEMPLATE), 0.0);
    assert!(d.metric(IN_OWN) >= 3.0);
    assert_eq!(d.metric(MADE), 0.0);
}

/// The mount namespaces of the daemon and of the bubblewrap it started
/// for a command (bubblewrap's first process stays in the namespace it
/// was started in while its sandbox runs), read while the command runs.
fn namespaces(d: &Daemon, w: &World) -> (String, String) {
    let ws = w.path().join("roots/gate");
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&ws);
    let conn = d.post_unanswered("/v1/executions", &gated_job("gated", &ws));
    let mut bwrap = None;
    wait_until("bubblewrap started by the daemon", || {
        // Children of any of the daemon's threads.
        let tasks = std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap();
        bwrap = tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .flat_map(|kids| {
                kids.split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "bwrap")
            });
        bwrap.is_some()
    });
    let ns = |pid: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
            .unwrap()
            .display()
            .to_string()
    };
    let got = (ns(&d.pid().to_string()), ns(bwrap.as_deref().unwrap()));
    std::fs::write(ws.join("go"), "").unwrap();
    let res = read_response(std::io::BufReader::new(conn)).json();
    assert_eq!(res["stdout"], "waiting\nreleased\n", "{res:#}");
    got
}

/// A tmpfs mounted on the host, unmounted (lazily) when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path) -> Mounted {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {}", text(&out.stderr));
        Mounted(at.to_owned())
    }

    fn unmount(self) {
        let out = Command::new("umount").arg(&self.0).output().unwrap();
        assert!(out.status.success(), "umount: {}", text(&out.stderr));
        std::mem::forget(self);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_host_mount_made_or_removed_after_the_template_reaches_the_next_sandbox() {
    if !require_sandbox() || !may_make_mount_namespaces() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "ws");
    std::fs::create_dir(ws.join("m")).unwrap();
    give_to_sandbox(&ws);
    let look = json!({"argv": ["sh", "-c", "cat /workspace/m/f 2>&1 || true"], "workspace": ws});
    // The next sandbox finds no f in m (the folder as it is under no mount).
    let missing = || {
        let doc = d.post("/v1/executions", &look).json();
        let out = doc["stdout"].as_str().unwrap_or_default();
        assert!(out.contains("No such file"), "{doc:#}");
    };
    missing();
    let made = d.metric(MADE);

    // A mount on the host after the template was made: the template
    // holds a private copy of the host's mounts, so only a new one has it.
    let mounted = Mounted::tmpfs(&ws.join("m"));
    std::fs::write(ws.join("m/f"), "on the new mount\n").unwrap();
    let r = d.post("/v1/executions", &look);
    assert_eq!(r.json()["stdout"], "on the new mount\n", "{:#}", r.json());
    assert!(d.metric(MADE) > made);
    let made = d.metric(MADE);

    // Removed on the host: gone from the next sandbox too.
    mounted.unmount();
    missing();
    assert!(d.metric(MADE) > made);
    assert_eq!(d.metric(IN_OWN), 0.0, "{}", d.log());
}

#[test]
fn a_daemon_that_may_make_a_template_but_not_join_one_runs_in_its_own() {
    if !require_sandbox() || !may_make_mount_namespaces() {
        return;
    }
    // CAP_SYS_ADMIN makes a namespace; joining one takes CAP_SYS_CHROOT
    // too, which a service's bounding set may leave out.
    let w = World::new();
    let daemon = Daemon::command(&w, &[]);
    let mut c = Command::new("setpriv");
    c.args([
        "--bounding-set",
        "-sys_chroot",
        "--inh-caps",
        "-sys_chroot",
        "--",
    ])
    .arg(daemon.get_program())
    .args(daemon.get_args())
    .envs(daemon.get_envs().filter_map(|(k, v)| Some((k, v?))))
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let d = Daemon::spawn(c).unwrap();
    let r = d.post("/v1/executions", &json!({"argv": ["echo", "hi"]}));
    assert_eq!(r.json()["stdout"], "hi\n", "{:#}", r.json());
    assert_eq!(d.metric(IN_TEMPLATE), 0.0, "{}", d.log());
    assert!(d.metric(IN_OWN) >= 2.0);
    assert!(d.log().contains("joining it"), "{}", d.log());
}

#[test]
fn a_root_replaced_on_the_host_is_bound_as_it_is_now() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "ws");
    std::fs::write(ws.join("f"), "first\n").unwrap();
    let cat = json!({"argv": ["cat", "/workspace/f"], "workspace": ws});
    assert_eq!(d.post("/v1/executions", &cat).json()["stdout"], "first\n");
    // The whole root moved aside and made again: no mount changed, so
    // only the launch's own check can see that the template's copy of the
    // root is another folder now.
    let root = w.path().join("roots");
    std::fs::rename(&root, w.path().join("roots.old")).unwrap();
    let ws = workspace_in(&w, "ws");
    std::fs::write(ws.join("f"), "second\n").unwrap();
    give_to_sandbox(&ws);
    let r = d.post("/v1/executions", &cat);
    assert_eq!(r.json()["stdout"], "second\n", "{:#}", r.json());
    if may_make_mount_namespaces() {
        assert_eq!(d.metric(IN_OWN), 0.0, "{}", d.log());
    }
}
