//! The daemon's file descriptors: a configuration that cannot fit the
//! limit is refused at start, and an admission refused for want of a
//! descriptor leaves nothing behind.
//!
//! One tenant's executions filled a daemon left at 1024 descriptors (64
//! proxy tunnels each); another admission then failed with "cannot create
//! the cancellation switch: Too many open files" as an internal error.

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use skill_runner_tests::*;

/// `skill-runner serve` under `prlimit --nofile=N:N` (when given).
fn serve(w: &World, nofile: Option<u64>, args: &[&str]) -> (Child, PathBuf) {
    let log = w.path().join("serve.log");
    let mut c = match nofile {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(runner_bin());
            c
        }
        None => Command::new(runner_bin()),
    };
    c.env("SKILL_RUNNER_DATA_DIR", w.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    (c.spawn().expect("start serve"), log)
}

/// Waits until the daemon listens (`true`) or exits (`false`).
fn listening(child: &mut Child, log: &Path) -> bool {
    let started = std::time::Instant::now();
    loop {
        if std::fs::read_to_string(log)
            .unwrap()
            .contains("listening on")
        {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "serve neither listened nor exited"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

/// A configuration that cannot fit the descriptor limit would have
/// failed in some tenant's admission: it is refused at start, naming the
/// settings and the limit; one that fits starts with the proxy cap the
/// limit leaves.
#[test]
fn a_configuration_that_cannot_fit_the_descriptor_limit_is_refused_at_start() {
    let w = World::new();
    let (mut child, log) = serve(&w, Some(512), &["--max-running", "4"]);
    assert!(
        !listening(&mut child, &log),
        "started under 512 descriptors"
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(125));
    let said = std::fs::read_to_string(&log).unwrap();
    for part in [
        "512",
        "RLIMIT_NOFILE",
        "max_running 4",
        "max_queued 64",
        "max_connections 256",
        "LimitNOFILE",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }

    let w = World::new();
    let small = [
        "--max-running",
        "2",
        "--max-queued",
        "8",
        "--max-connections",
        "64",
    ];
    let (mut child, log) = serve(&w, Some(512), &small);
    assert!(
        listening(&mut child, &log),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    stop(child);
    assert!(said.contains("nofile=512"), "{said}");
    // 512 - (128 reserve + 64 connections + 10 x 2 switches + 2 x 48) = 204, halved.
    assert!(said.contains("max_proxy_connections=102"), "{said}");

    let (mut child, log) = serve(
        &w,
        Some(512),
        &[&small[..], &["--max-proxy-connections", "500"]].concat(),
    );
    assert!(!listening(&mut child, &log));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("max_proxy_connections 500") && said.contains("at most 102"),
        "{said}"
    );
}

/// The soft limit is raised to the hard one at start.
#[test]
fn the_daemon_raises_its_soft_descriptor_limit_to_the_hard_one() {
    let w = World::new();
    let log = w.path().join("serve.log");
    let mut child = Command::new("prlimit")
        .args(["--nofile=1024:4096", "--"])
        .arg(runner_bin())
        .env("SKILL_RUNNER_DATA_DIR", w.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    assert!(
        listening(&mut child, &log),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    stop(child);
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(nums, ["4096", "4096"], "{line}");
}

/// One HTTP/1.1 exchange on a kept-alive connection.
fn exchange(
    r: &mut BufReader<UnixStream>,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let s = r.get_mut();
    s.write_all(head.as_bytes()).unwrap();
    // A refusal may come before the body is read, and close the connection.
    let _ = s.write_all(body);
    let (status, headers) = read_head(r);
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut out = vec![0; len];
    r.read_exact(&mut out).unwrap();
    (status, headers, out)
}

/// The lowest descriptor number `pid` has free: with its soft limit
/// there, it can open nothing more.
fn lowest_free_fd(pid: u32) -> u64 {
    let open: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !open.contains(n)).unwrap()
}

/// An admission that could not have its descriptor answered 500 and then
/// its id 404: it is refused as busy (retry), before the job is read, and
/// leaves nothing behind: the id is unknown, no execution folder exists,
/// and a retry of the same job with the same id runs it.
#[test]
fn an_admission_refused_for_a_descriptor_leaves_nothing_behind() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let skill = w.skill("hello", &[]);
    let root = skill.parent().unwrap().to_str().unwrap().to_owned();
    let (mut child, log) = serve(&w, None, &["--root", &root]);
    assert!(
        listening(&mut child, &log),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let pid = child.id();
    let socket = w.data_dir().join("run/skill-runner.sock");
    let mut conn = BufReader::new(UnixStream::connect(&socket).unwrap());
    let (status, _, _) = exchange(&mut conn, "GET", "/v1/health", b"");
    assert_eq!(status, 200);

    let id = "exec-descriptor-refusal";
    let job = json!({
        "execution_id": id,
        "argv": ["true"],
        "skills": [skill_ref("hello", &skill)],
    });
    let body = serde_json::to_vec(&job).unwrap();
    // No descriptor left for the daemon: the connection is already open.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let hard: u64 = line.split_whitespace().nth(4).unwrap().parse().unwrap();
    let set = |soft: u64| {
        let out = Command::new("prlimit")
            .arg(format!("--pid={pid}"))
            .arg(format!("--nofile={soft}:{hard}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
    };
    set(lowest_free_fd(pid));
    let (status, headers, answer) = exchange(&mut conn, "POST", "/v1/executions", &body);
    set(hard);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["kind"], "busy", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry"),
        "{answer}"
    );
    assert!(
        headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("retry-after")),
        "{headers:?}"
    );

    // The refusal came before the body was read: that connection is closed.
    let mut conn = BufReader::new(UnixStream::connect(&socket).unwrap());
    let (status, _, _) = exchange(&mut conn, "GET", &format!("/v1/executions/{id}"), b"");
    assert_eq!(status, 404, "a refused admission registered its id");
    let left: Vec<_> = std::fs::read_dir(w.data_dir().join("executions"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "execution folders left: {left:?}");

    let (status, _, answer) = exchange(&mut conn, "POST", "/v1/executions", &body);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "exited", "{answer}");
    let (status, _, _) = exchange(&mut conn, "GET", &format!("/v1/executions/{id}"), b"");
    assert_eq!(status, 200);
    drop(conn);
    stop(child);
}

/// The shipped systemd unit raises the limit (systemd's default soft limit
/// is 1024), enough for the defaults of a large host.
#[test]
fn the_systemd_unit_sets_a_descriptor_limit_the_defaults_fit() {
    use skill_runner::daemon::descriptors::{Budget, Demand};
    let unit =
        std::fs::read_to_string(project_dir().join("deploy/systemd/skill-runner.service")).unwrap();
    let limit: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE")
        .trim()
        .parse()
        .unwrap();
    // Defaults on a 64-CPU host: max_running 128, max_queued 64,
    // max_connections 256; every running execution may fill its proxy cap.
    let demand = Demand {
        max_running: 128,
        max_queued: 64,
        max_connections: 256,
        max_proxy_connections: None,
        prepared: 0,
    };
    let b = Budget::fit(demand, limit).unwrap();
    assert_eq!(b.proxy_connections, 128 * 64);
}
