//! On-demand pulls (docs/daemon.md, "Pulls from registries"): a daemon
//! started with `--registry` pulls a job's missing package from its
//! `source` once, however many jobs wait for it (counted in the real
//! registry's own access log), shows the pull in the execution's events,
//! and rejects with a sentence a pull that fails, a package that is not
//! the job's pin, a tag, or a registry it was not given.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::registry::{http, REGISTRY_BIN};
use skill_runner_tests::*;

/// Debian's docker-registry on a free loopback port, logging each request
/// it completed (method, path, status) to stderr, which goes to `log`.
struct LoggedRegistry {
    child: Option<Child>,
    host: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoggedRegistry {
    fn start() -> Option<LoggedRegistry> {
        if !Path::new(REGISTRY_BIN).exists() {
            skip(format!(
                "{REGISTRY_BIN} is not installed (apt-get install docker-registry)"
            ));
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("sr-pull-registry-")
            .tempdir()
            .unwrap();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let host = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
                    dir.path().join("storage").display()
                ),
            )
            .unwrap();
            let log = dir.path().join("access.log");
            let child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start docker-registry");
            let mut reg = LoggedRegistry {
                child: Some(child),
                host,
                log,
                _dir: tempfile::tempdir().unwrap(),
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok((200, _, _)) = http(&reg.host, "GET", "/v2/", &[], b"") {
                    reg._dir = dir;
                    return Some(reg);
                }
                if let Some(Ok(Some(_))) = reg.child.as_mut().map(Child::try_wait) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            reg.stop();
        }
        panic!("docker-registry did not start on a free loopback port");
    }

    /// Requests the registry logged as completed `GET`s of a path that
    /// starts with `prefix` (its "response completed" lines).
    fn gets(&self, prefix: &str) -> usize {
        let (quoted, bare) = (
            format!("http.request.uri=\"{prefix}"),
            format!("http.request.uri={prefix}"),
        );
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("msg=\"response completed"))
            .filter(|l| l.contains("http.request.method=GET "))
            .filter(|l| l.contains(&quoted) || l.contains(&bare))
            .count()
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LoggedRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Publishes skill `id` into the data dir `data` and pushes it to
/// `oci://HOST/skills/ID:v1`; its binding and the digest reference.
fn pushed(w: &World, data: &Path, host: &str, id: &str, script: &str) -> (Value, String) {
    let dir = w.skill(id, &[("scripts/run.sh", script.as_bytes())]);
    let out = runner_command()
        .arg("--data-dir")
        .arg(data)
        .args(["store", "add"])
        .arg(&dir)
        .args(["--id", id, "--revision", "1", "--version", "1.0.0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let binding: Value = serde_json::from_slice(&out.stdout).unwrap();
    let out = runner_command()
        .arg("--data-dir")
        .arg(data)
        .args(["store", "push", &format!("{id}@1")])
        .arg(format!("oci://{host}/skills/{id}:v1"))
        .args(["--insecure-registry", host])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let reference = text(&out.stdout).lines().last().unwrap().to_owned();
    assert!(reference.contains("@sha256:"), "{}", show(&out));
    (binding, reference)
}

/// A job running skill `id`'s script, its binding carrying `source`.
fn job(binding: &Value, id: &str, source: &str) -> Value {
    let mut skill = binding.clone();
    skill["source"] = json!(source);
    json!({
        "argv": ["sh", format!("$SCIENCEDISCOVERY_SKILLS_DIR/{id}/scripts/run.sh")],
        "skills": [skill],
    })
}

#[test]
fn eight_jobs_needing_one_missing_package_make_one_pull_and_an_outage_refuses_only_what_is_missing()
{
    if !require_sandbox() {
        return;
    }
    let Some(mut reg) = LoggedRegistry::start() else {
        return;
    };
    let w = World::new();
    let publisher = w.path().join("publisher");
    let host = reg.host.clone();
    let (binding, source) = pushed(&w, &publisher, &host, "fleet", "echo pulled and ran\n");
    let (other, other_source) = pushed(&w, &publisher, &host, "later", "echo later\n");
    let before = reg.gets("/v2/skills/fleet/");

    let d = Daemon::start(
        &w,
        &[
            "--registry",
            &host,
            "--insecure-registry",
            &host,
            "--max-running",
            "8",
        ],
    );
    let results: Vec<Value> = std::thread::scope(|s| {
        let jobs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| d.post("/v1/executions", &job(&binding, "fleet", &source))))
            .collect();
        jobs.into_iter()
            .map(|j| {
                let r = j.join().unwrap();
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                r.json()
            })
            .collect()
    });
    for r in &results {
        assert_eq!(r["status"], "exited", "{r:#}");
        assert_eq!(r["stdout"], "pulled and ran\n");
    }
    // The registry saw one manifest read and one read of each blob
    // (config and layer) from the daemon, for all eight jobs.
    let manifests = reg.gets("/v2/skills/fleet/manifests/");
    let blobs = reg.gets("/v2/skills/fleet/blobs/");
    assert_eq!(
        (manifests, blobs),
        (1, 2),
        "registry GETs after {before} from the push; its log:\n{}",
        std::fs::read_to_string(&reg.log).unwrap_or_default()
    );
    assert_eq!(
        d.metric("skill_runner_pulls_total{outcome=\"landed\"}"),
        1.0
    );
    assert_eq!(d.metric("skill_runner_pulled_blobs_total"), 3.0);
    assert!(d.metric("skill_runner_pulled_bytes_total") > 0.0);

    // Held now: more jobs make no request.
    let r = d.post("/v1/executions", &job(&binding, "fleet", &source));
    assert_eq!(r.json()["stdout"], "pulled and ran\n");
    assert_eq!(reg.gets("/v2/skills/fleet/"), manifests + blobs);

    // The registry goes away: what is missing is refused with a sentence,
    // what is held keeps running.
    reg.stop();
    let msg = d
        .post("/v1/executions", &job(&other, "later", &other_source))
        .assert_error(502, "pull_failed");
    assert!(
        msg.contains(&format!("pulling {other_source} failed"))
            && msg.contains(&format!("cannot reach registry {host}")),
        "{msg}"
    );
    let r = d.post("/v1/executions", &job(&binding, "fleet", &source));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["stdout"], "pulled and ran\n");
    assert_eq!(
        d.metric("skill_runner_pulls_total{outcome=\"failed\"}"),
        1.0
    );
}

#[test]
fn a_detached_jobs_events_show_its_pull_with_sizes_before_it_starts() {
    if !require_sandbox() {
        return;
    }
    let Some(reg) = LoggedRegistry::start() else {
        return;
    };
    let w = World::new();
    let host = reg.host.clone();
    let (binding, source) = pushed(
        &w,
        &w.path().join("publisher"),
        &host,
        "shown",
        "echo shown\n",
    );
    let d = Daemon::start(&w, &["--registry", &host, "--insecure-registry", &host]);
    let r = d.post(
        "/v1/executions?wait=false",
        &job(&binding, "shown", &source),
    );
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["execution_id"].as_str().unwrap().to_owned();
    let mut lines = Lines::open(&d, "GET", &format!("/v1/executions/{id}/events"), &[], b"");
    let events = lines.rest();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    let started = kinds.iter().position(|k| *k == "started").expect("started");
    assert!(kinds[..started].iter().all(|k| *k == "pull"), "{kinds:?}");
    let pulls = &events[..started];
    assert_eq!(pulls[0]["phase"], "start");
    assert_eq!(pulls[0]["source"], source.as_str());
    let layer = pulls
        .iter()
        .find(|e| e["role"] == "layer" && e["outcome"] == "fetched")
        .unwrap_or_else(|| panic!("no fetched layer in {pulls:#?}"));
    assert!(layer["size"].as_u64().unwrap() > 0);
    assert_eq!(layer["bytes"], layer["size"]);
    let done = pulls.last().unwrap();
    assert_eq!(done["phase"], "done", "{pulls:#?}");
    assert_eq!(done["blobs"], 3);
    assert!(done["bytes"].as_u64().unwrap() >= layer["size"].as_u64().unwrap());
    assert_eq!(events.last().unwrap()["result"]["stdout"], "shown\n");
}

#[test]
fn a_source_holding_another_package_than_the_pin_is_refused_and_nothing_runs() {
    if !require_sandbox() {
        return;
    }
    let Some(reg) = LoggedRegistry::start() else {
        return;
    };
    let w = World::new();
    let host = reg.host.clone();
    let publisher = w.path().join("publisher");
    let (binding, _) = pushed(&w, &publisher, &host, "wanted", "echo wanted\n");
    let (_, elsewhere) = pushed(&w, &publisher, &host, "other", "echo other\n");
    let d = Daemon::start(&w, &["--registry", &host, "--insecure-registry", &host]);
    let msg = d
        .post("/v1/executions", &job(&binding, "wanted", &elsewhere))
        .assert_error(422, "hash_mismatch");
    assert!(
        msg.contains(&format!("{elsewhere} holds skill \"other\"")) && msg.contains("wanted"),
        "{msg}"
    );
}

#[test]
fn sources_on_registries_not_given_or_by_tag_are_refused_at_admission() {
    let w = World::new();
    let d = Daemon::start(&w, &["--registry", "127.0.0.1:1"]);
    let binding =
        json!({"id": "absent", "revision": 1, "version": "1.0.0", "hash": "a".repeat(64)});
    let digest = format!("sha256:{}", "b".repeat(64));
    // Not a --registry of this daemon: 403, naming the registry and the fix.
    let source = format!("oci://registry.invalid:5000/skills/absent@{digest}");
    let msg = d
        .post("/v1/executions", &job(&binding, "absent", &source))
        .assert_error(403, "registry_not_allowed");
    assert!(
        msg.contains("registry registry.invalid:5000") && msg.contains("--registry"),
        "{msg}"
    );
    // A tag is not a pin.
    let msg = d
        .post(
            "/v1/executions",
            &job(&binding, "absent", "oci://127.0.0.1:1/skills/absent:v1"),
        )
        .assert_error(400, "bad_job");
    assert!(
        msg.contains("names a tag") && msg.contains("--resolve-tag"),
        "{msg}"
    );
    // Not a reference at all.
    let msg = d
        .post(
            "/v1/executions",
            &job(&binding, "absent", "https://example/x"),
        )
        .assert_error(400, "bad_job");
    assert!(msg.contains("oci://"), "{msg}");
    // Nothing was queued or run.
    let list = d.get("/v1/executions").json();
    assert_eq!(list["executions"], json!([]), "{list:#}");
}

#[test]
fn a_jobs_missing_environment_is_pulled_from_its_source_and_imported() {
    if !require_sandbox() {
        return;
    }
    let Some(reg) = LoggedRegistry::start() else {
        return;
    };
    let w = World::new();
    let host = reg.host.clone();
    let publisher = w.path().join("publisher");
    let tree = w.path().join("tree");
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    std::fs::write(tree.join("bin/fleet-tool"), b"#!/bin/sh\necho env tool\n").unwrap();
    std::fs::set_permissions(
        tree.join("bin/fleet-tool"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = runner_command()
        .arg("--data-dir")
        .arg(&publisher)
        .args(["env", "add"])
        .arg(&tree)
        .args(["--id", "fleet-tools"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hash = record["hash"].as_str().unwrap().to_owned();
    let out = runner_command()
        .arg("--data-dir")
        .arg(&publisher)
        .args(["env", "push", &format!("fleet-tools@{hash}")])
        .arg(format!("oci://{host}/envs/fleet-tools:v1"))
        .args(["--insecure-registry", &host])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let source = text(&out.stdout).lines().last().unwrap().to_owned();

    let d = Daemon::start(&w, &["--registry", &host, "--insecure-registry", &host]);
    let job = json!({
        "argv": ["fleet-tool"],
        "environment": {"id": "fleet-tools", "hash": hash, "source": source},
    });
    let r = d.post("/v1/executions", &job);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let result = r.json();
    assert_eq!(result["status"], "exited", "{result:#}");
    assert_eq!(result["stdout"], "env tool\n");
    assert_eq!(reg.gets("/v2/envs/fleet-tools/manifests/"), 1);
    // Held now: the next job reads nothing from the registry.
    let r = d.post("/v1/executions", &job);
    assert_eq!(r.json()["stdout"], "env tool\n");
    assert_eq!(reg.gets("/v2/envs/fleet-tools/"), 3);
}
