//! Network allowlists: a job's `network` may be
//! `{"allow": [...], "private": false}`, served by the runner's proxy
//! through a forwarder inside the sandbox's own (loopback-only) network
//! namespace.
//!
//! Nothing here leaves the machine: the origins are HTTP servers on the
//! host's loopback, reached as `localhost:PORT` with `"private": true`;
//! refused requests name hosts that are never resolved or connected. The
//! probe (`tests/probe`) makes the requests from inside the sandbox and
//! reports the proxy's answer: `HTTP <status> <reason> <last body line>`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use skill_runner_tests::daemon::Daemon;
use skill_runner_tests::*;

/// An HTTP origin on the host's loopback: answers every request with
/// `origin <name> <request line>` and closes; counts its connections.
struct Origin {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Origin {
    fn start(name: &'static str) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                seen.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut line = String::new();
                    if r.read_line(&mut line).is_err() {
                        return;
                    }
                    let mut h = String::new();
                    while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                        h.clear();
                    }
                    let body = format!("origin {name} {}\n", line.trim_end());
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Origin { port, connections }
    }

    fn seen(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A world with the probe in its workspace.
struct Fixture {
    world: World,
    workspace: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let world = World::new();
        let workspace = world.workspace_with_probe();
        Fixture { world, workspace }
    }

    /// A job running the shell `script` (the probe is `/workspace/probe`)
    /// with `network`.
    fn job(&self, script: &str, network: Value) -> Value {
        json!({
            "argv": ["sh", "-c", script],
            "workspace": self.workspace,
            "network": network,
            "limits": {"timeout_ms": 60000},
        })
    }

    /// Runs the job; returns the result document.
    fn run(&self, script: &str, network: Value) -> Value {
        let (code, doc, out) = self.world.run_json_env(&self.job(script, network), &[]);
        assert_eq!(code, 0, "{doc:#}{}", show(&out));
        doc
    }
}

fn lines(doc: &Value) -> Vec<String> {
    doc["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// (host, port, allowed, reason) of each listed request.
fn requests(doc: &Value) -> Vec<(String, u64, bool, Option<String>)> {
    doc["network"]["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("no network.requests: {doc:#}"))
        .iter()
        .map(|r| {
            (
                r["host"].as_str().unwrap().to_owned(),
                r["port"].as_u64().unwrap(),
                r["allowed"].as_bool().unwrap(),
                r["reason"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn req(
    host: &str,
    port: u16,
    allowed: bool,
    reason: Option<&str>,
) -> (String, u64, bool, Option<String>) {
    (
        host.to_owned(),
        u64::from(port),
        allowed,
        reason.map(str::to_owned),
    )
}

#[test]
fn an_allowed_name_works_plain_and_through_a_tunnel() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let origin = Origin::start("a");
    let p = origin.port;
    let doc = fx.run(
        &format!(
            "/workspace/probe proxy-get http://localhost:{p}/plain; /workspace/probe proxy-connect localhost:{p} /tunnel"
        ),
        json!({"allow": [format!("localhost:{p}")], "private": true}),
    );
    assert_eq!(
        lines(&doc),
        [
            "HTTP 200 - origin a GET /plain HTTP/1.1",
            "HTTP 200 - origin a GET /tunnel HTTP/1.1"
        ],
        "{doc:#}"
    );
    assert_eq!(
        requests(&doc),
        [
            req("localhost", p, true, None),
            req("localhost", p, true, None)
        ]
    );
    for r in doc["network"]["requests"].as_array().unwrap() {
        assert!(r["sent_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["received_bytes"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(doc["network"]["dropped"], 0);
    assert_eq!(origin.seen(), 2);
}

#[test]
fn tools_that_honour_the_proxy_variables_work() {
    if !require_sandbox() {
        return;
    }
    let tools: Vec<&str> = ["/usr/bin/curl", "/usr/bin/python3"]
        .into_iter()
        .filter(|t| Path::new(t).exists())
        .collect();
    if tools.is_empty() {
        skip("neither curl nor python3 in /usr/bin");
        return;
    }
    let fx = Fixture::new();
    let origin = Origin::start("t");
    let p = origin.port;
    let mut script = String::new();
    let mut want = Vec::new();
    if tools.contains(&"/usr/bin/curl") {
        // -p: a CONNECT tunnel even for http://.
        script.push_str(&format!(
            "curl -fsS http://localhost:{p}/curl; curl -fsS -p http://localhost:{p}/curl-tunnel; "
        ));
        want.push("origin t GET /curl HTTP/1.1".to_owned());
        want.push("origin t GET /curl-tunnel HTTP/1.1".to_owned());
    }
    if tools.contains(&"/usr/bin/python3") {
        script.push_str(&format!(
            "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://localhost:{p}/python\").read().decode().strip())'"
        ));
        want.push("origin t GET /python HTTP/1.1".to_owned());
    }
    let doc = fx.run(
        &script,
        json!({"allow": [format!("localhost:{p}")], "private": true}),
    );
    assert_eq!(lines(&doc), want, "{doc:#}");
}

#[test]
fn refusals_name_their_reason() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let origin = Origin::start("r");
    let p = origin.port;
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let q = other.local_addr().unwrap().port();
    // A name not listed, an IP literal not listed, a port not listed.
    let doc = fx.run(
        &format!(
            "/workspace/probe proxy-get http://not-listed.invalid:{p}/; \
             /workspace/probe proxy-get http://192.0.2.1:{p}/; \
             /workspace/probe proxy-connect localhost:{q} /"
        ),
        json!({"allow": [format!("localhost:{p}")], "private": true}),
    );
    assert_eq!(
        lines(&doc),
        [
            "HTTP 403 host_not_allowed not-listed.invalid is not in the job's network allowlist",
            "HTTP 403 host_not_allowed 192.0.2.1 is not in the job's network allowlist",
            &format!("HTTP 403 port_not_allowed localhost is in the job's network allowlist, but not with port {q} (an entry without a port allows 80 and 443)"),
        ],
        "{doc:#}"
    );
    assert_eq!(
        requests(&doc),
        [
            req("not-listed.invalid", p, false, Some("host_not_allowed")),
            req("192.0.2.1", p, false, Some("host_not_allowed")),
            req("localhost", q, false, Some("port_not_allowed")),
        ]
    );
    // A listed name that resolves to loopback, without "private".
    let doc = fx.run(
        &format!(
            "/workspace/probe proxy-get http://localhost:{p}/; /workspace/probe proxy-connect localhost:{p} /"
        ),
        json!({"allow": [format!("localhost:{p}")]}),
    );
    for line in lines(&doc) {
        assert!(
            line.starts_with("HTTP 403 private_address localhost is ")
                && line.contains("a loopback address"),
            "{line}\n{doc:#}"
        );
    }
    assert_eq!(
        requests(&doc),
        [
            req("localhost", p, false, Some("private_address")),
            req("localhost", p, false, Some("private_address")),
        ]
    );
    // *.suffix against the bare suffix.
    let doc = fx.run(
        &format!("/workspace/probe proxy-get http://localhost:{p}/"),
        json!({"allow": [format!("*.localhost:{p}")], "private": true}),
    );
    assert_eq!(
        lines(&doc),
        ["HTTP 403 host_not_allowed localhost is not in the job's network allowlist"]
    );
    // Nothing refused ever reached an origin.
    assert_eq!(origin.seen(), 0);
    other.set_nonblocking(true).unwrap();
    assert!(
        other.accept().is_err(),
        "the unlisted port saw a connection"
    );
}

#[test]
fn direct_connections_that_bypass_the_proxy_fail() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let origin = Origin::start("d");
    let p = origin.port;
    // The origin is allowed: only the way around the proxy is tested.
    let doc = fx.run(
        &format!(
            "/workspace/probe connect 127.0.0.1:{p}; /workspace/probe connect 192.0.2.1:80; \
             /workspace/probe connect [::1]:{p}; /workspace/probe socket-outside"
        ),
        json!({"allow": [format!("localhost:{p}")], "private": true}),
    );
    let got = lines(&doc);
    assert_eq!(got.len(), 4, "{doc:#}");
    // The host's loopback is not the sandbox's: nothing listens there.
    assert!(
        got[0].starts_with("DENIED connect: ECONNREFUSED"),
        "{doc:#}"
    );
    // No route out of a namespace that has only loopback.
    assert!(got[1].starts_with("DENIED connect: ENETUNREACH"), "{doc:#}");
    assert!(got[2].starts_with("DENIED connect:"), "{doc:#}");
    // UDP, raw, netlink and packet sockets stay refused (seccomp).
    assert!(got[3].starts_with("DENIED "), "{doc:#}");
    for kind in [
        "inet-udp=EPERM",
        "inet-raw=EPERM",
        "netlink=EPERM",
        "packet=EPERM",
    ] {
        assert!(got[3].contains(kind), "{kind}: {doc:#}");
    }
    assert_eq!(origin.seen(), 0);
    assert_eq!(requests(&doc), []);
}

#[test]
fn network_none_adds_no_proxy_variables() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let proxy_vars = |doc: &Value| -> Vec<String> {
        lines(doc)
            .into_iter()
            .filter(|l| l.to_ascii_lowercase().contains("_proxy="))
            .collect()
    };
    for network in [Value::Null, json!("none")] {
        let mut job = fx.job("env; ls /run/skill-runner 2>&1 || true", json!(null));
        match &network {
            Value::Null => {
                job.as_object_mut().unwrap().remove("network");
            }
            n => job["network"] = n.clone(),
        }
        let (code, doc, out) = fx.world.run_json_env(&job, &[]);
        assert_eq!(code, 0, "{}", show(&out));
        assert_eq!(proxy_vars(&doc), Vec::<String>::new(), "{doc:#}");
        assert!(doc.get("network").is_none(), "{doc:#}");
        assert!(
            doc["stdout"].as_str().unwrap().contains("No such file"),
            "{doc:#}"
        );
    }
    let doc = fx.run("env", json!({"allow": ["pypi.org"]}));
    let mut got = proxy_vars(&doc);
    got.sort();
    assert_eq!(
        got,
        [
            "HTTPS_PROXY=http://127.0.0.1:3128",
            "HTTP_PROXY=http://127.0.0.1:3128",
            "http_proxy=http://127.0.0.1:3128",
            "https_proxy=http://127.0.0.1:3128",
        ]
    );
    assert_eq!(doc["network"], json!({"requests": [], "dropped": 0}));
}

#[test]
fn the_result_lists_every_request() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let origin = Origin::start("l");
    let p = origin.port;
    let doc = fx.run(
        &format!(
            "for i in 1 2 3; do /workspace/probe proxy-get http://localhost:{p}/$i; done; \
             /workspace/probe proxy-connect localhost:{p} /4; \
             /workspace/probe proxy-get http://elsewhere.invalid/; \
             /workspace/probe proxy-connect 203.0.113.9:443 /"
        ),
        json!({"allow": [format!("localhost:{p}")], "private": true}),
    );
    assert_eq!(lines(&doc).len(), 6, "{doc:#}");
    assert_eq!(
        requests(&doc),
        [
            req("localhost", p, true, None),
            req("localhost", p, true, None),
            req("localhost", p, true, None),
            req("localhost", p, true, None),
            req("elsewhere.invalid", 80, false, Some("host_not_allowed")),
            req("203.0.113.9", 443, false, Some("host_not_allowed")),
        ]
    );
    let list = doc["network"]["requests"].as_array().unwrap();
    for r in &list[..4] {
        // What the origin answered, whole.
        let body = "origin l GET /1 HTTP/1.1\n".len() as u64;
        assert!(r["received_bytes"].as_u64().unwrap() > body, "{r}");
    }
    for r in &list[4..] {
        assert_eq!(
            (r["sent_bytes"].as_u64(), r["received_bytes"].as_u64()),
            (Some(0), Some(0))
        );
    }
    assert_eq!(origin.seen(), 4);
}

// ---------------------------------------------------------------------------
// The daemon: one proxy runtime, a policy per execution

/// A daemon with `root` as its root and `args`.
fn start_daemon(world: &World, root: &Path, args: &[&str]) -> Daemon {
    let mut all = vec!["--root", root.to_str().unwrap()];
    all.extend_from_slice(args);
    Daemon::start(world, &all)
}

/// `POST /v1/executions` of `job`: the status and the result document.
fn run(daemon: &Daemon, job: &Value) -> (u16, Value) {
    let r = daemon.post("/v1/executions", job);
    (r.status, r.json())
}

/// A fixture whose workspace lies under a daemon root.
fn daemon_fixture() -> (Fixture, PathBuf) {
    let world = World::new();
    let root = world.path().join("roots");
    std::fs::create_dir_all(&root).unwrap();
    let workspace = root.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::copy(probe_bin(), workspace.join("probe")).unwrap();
    give_to_sandbox(&workspace);
    let root = root.canonicalize().unwrap();
    let workspace = root.join("ws");
    (Fixture { world, workspace }, root)
}

#[test]
fn concurrent_executions_keep_their_own_allowlists() {
    if !require_sandbox() {
        return;
    }
    let (fx, root) = daemon_fixture();
    let daemon = Arc::new(start_daemon(&fx.world, &root, &[]));
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (pa, pb) = (a.port, b.port);
    // Each execution asks for both origins, twice, a second apart: the two
    // run at the same time, each allowed one origin.
    let script = format!(
        "for i in 1 2; do /workspace/probe proxy-get http://localhost:{pa}/; \
         /workspace/probe proxy-connect localhost:{pb} /; sleep 1; done"
    );
    let started = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = [pa, pb]
        .into_iter()
        .map(|allowed| {
            let job = fx.job(
                &script,
                json!({"allow": [format!("localhost:{allowed}")], "private": true}),
            );
            let daemon = daemon.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                started.lock().unwrap().push(Instant::now());
                run(&daemon, &job)
            })
        })
        .collect();
    let results: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for ((status, doc), (allowed, refused)) in results.iter().zip([(pa, pb), (pb, pa)]) {
        assert_eq!(*status, 200, "{doc:#}");
        assert_eq!(doc["status"], "exited", "{doc:#}");
        let list = requests(doc);
        assert_eq!(list.len(), 4, "{doc:#}");
        for (host, port, ok, reason) in list {
            assert_eq!(host, "localhost");
            if port == u64::from(allowed) {
                assert!(ok && reason.is_none(), "{doc:#}");
            } else {
                assert_eq!(port, u64::from(refused));
                assert_eq!(
                    (ok, reason.as_deref()),
                    (false, Some("port_not_allowed")),
                    "{doc:#}"
                );
            }
        }
        let out = lines(doc);
        let served = out.iter().filter(|l| l.starts_with("HTTP 200")).count();
        let denied = out
            .iter()
            .filter(|l| l.starts_with("HTTP 403 port_not_allowed"))
            .count();
        assert_eq!((served, denied), (2, 2), "{doc:#}");
    }
    // Each origin served only the execution that allowed it.
    assert_eq!((a.seen(), b.seen()), (2, 2));
    // The executions overlapped (each takes two seconds).
    let d0 = results[0].1["duration_ms"].as_u64().unwrap();
    assert!(d0 >= 2000, "{d0}");
    // And /metrics counts requests per host.
    let r = daemon.get("/metrics");
    assert_eq!(r.status, 200);
    let metrics = String::from_utf8(r.body).unwrap();
    assert!(
        metrics.contains(
            "skill_runner_network_requests_total{host=\"localhost\",allowed=\"true\"} 4\n"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "skill_runner_network_requests_total{host=\"localhost\",allowed=\"false\"} 4\n"
        ),
        "{metrics}"
    );
}

#[test]
fn a_daemon_can_forbid_private_addresses_and_cap_allowlists() {
    if !require_sandbox() {
        return;
    }
    let (fx, root) = daemon_fixture();
    let origin = Origin::start("c");
    let p = origin.port;
    let cap = format!("pypi.org,127.0.0.0/8:{p}");
    let daemon = start_daemon(
        &fx.world,
        &root,
        &["--network-private", "false", "--network-allow", &cap],
    );
    let (status, doc) = run(
        &daemon,
        &fx.job(
            "true",
            json!({"allow": [format!("localhost:{p}")], "private": true}),
        ),
    );
    assert_eq!(status, 400, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "bad_job");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("network_private = false"),
        "{doc:#}"
    );
    // Private forbidden even when the job names the address itself; and
    // the cap refuses what the job allows but the daemon does not.
    let (status, doc) = run(&daemon, &fx.job(
        &format!(
            "/workspace/probe proxy-get http://127.0.0.1:{p}/; /workspace/probe proxy-get http://example.org/"
        ),
        json!({"allow": [format!("127.0.0.1:{p}"), "example.org"]}),
    ));
    assert_eq!(status, 200, "{doc:#}");
    assert_eq!(
        requests(&doc),
        [
            req("127.0.0.1", p, false, Some("private_address")),
            req("example.org", 80, false, Some("not_allowed_by_runner")),
        ]
    );
    assert_eq!(origin.seen(), 0);
}

#[test]
fn explain_shows_the_allowlist() {
    let world = World::new();
    let job = world.job(
        "job",
        &json!({"argv": ["curl", "https://pypi.org/"],
                "network": {"allow": ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8:8080"]}}),
    );
    let out = world.cmd().arg("explain").arg(&job).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let said = text(&out.stdout);
    assert!(
        said.contains("# network: allow pypi.org, *.pythonhosted.org, 10.0.0.0/8:8080 (ports 80 and 443 where none is given); private addresses refused unless named as an IP or block\n"),
        "{said}"
    );
    assert!(said.contains("--ro-bind-fd 13 /run/skill-runner"), "{said}");
    assert!(
        said.contains("--setenv HTTPS_PROXY http://127.0.0.1:3128"),
        "{said}"
    );
    assert!(
        said.contains("--skill-runner-exec-shim-net -- curl"),
        "{said}"
    );
    let out = world
        .cmd()
        .args(["explain", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["network"]["allow"],
        json!(["pypi.org", "*.pythonhosted.org", "10.0.0.0/8:8080"])
    );
    assert_eq!(doc["network"]["private"], false);
    assert!(doc["folders"]["13"].as_str().unwrap().ends_with("/net"));
    // Without one, the explanation says so and binds nothing.
    let none = world.job("none", &json!({"argv": ["true"]}));
    let out = world.cmd().arg("explain").arg(&none).output().unwrap();
    let said = text(&out.stdout);
    assert!(said.contains("# network: none"), "{said}");
    assert!(!said.contains("/run/skill-runner"), "{said}");
}
