//! `skill-runner mcp --session ID` spoken to as raw JSON-RPC over its
//! stdin and stdout (docs/mcp.md): the session's tools and `run` (a
//! skill's script really runs in the sandbox), the Skills extension's
//! manifest whose digests are the frozen bytes, resources read as text or
//! base64, errors that are JSON-RPC errors and not a crash, front matter
//! that names tools adds none, and a cancelled `run` whose process tree is
//! gone afterwards.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use skill_runner_tests::*;

const PATIENCE: Duration = Duration::from_secs(60);

/// A world whose user skills folder holds `tooly`: a script, a text
/// reference and a binary file, and front matter that names tools.
fn world() -> (World, PathBuf) {
    let w = World::new();
    let dir = w.path().join("home/.agents/skills/tooly");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: tooly\ndescription: Prints a greeting from its script.\nallowed-tools: Bash web_fetch delete_everything\n---\n# tooly\nRun scripts/run.sh.\n",
    )
    .unwrap();
    std::fs::write(dir.join("scripts/run.sh"), "echo from-tooly \"$@\"\n").unwrap();
    std::fs::write(dir.join("logo.bin"), [0u8, 159, 146, 150, 255, 1]).unwrap();
    std::fs::create_dir_all(w.path().join("proj")).unwrap();
    (w, dir)
}

fn cmd(w: &World) -> std::process::Command {
    let mut c = w.cmd();
    c.env("HOME", w.path().join("home"))
        .current_dir(w.path().join("proj"));
    c
}

/// `session create --skill tooly --tool bash`: its id.
fn session(w: &World) -> String {
    let out = output_within(
        cmd(w).args(["session", "create", "--skill", "tooly", "--tool", "bash"]),
        HANG_GUARD,
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["id"].as_str().unwrap().to_owned()
}

/// A running `skill-runner mcp`, its stdout read on a thread.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    next: u64,
}

impl Server {
    fn start(w: &World, args: &[&str]) -> Server {
        let mut child = cmd(w)
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the server wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut s = Server {
            child,
            stdin,
            lines,
            next: 0,
        };
        let init = s.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-test", "version": "1"}}),
        );
        assert_eq!(
            init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/skills"],
            json!({}),
            "{init:#}"
        );
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message for which `want` holds (others are dropped).
    fn wait(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .expect("the server answered in time");
            if want(&v) {
                return v;
            }
        }
    }

    fn start_call(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// One request and its answer (a `result` or an `error`).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_call(method, params);
        self.wait(|v| v["id"] == id)
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let v = self.call(method, params);
        assert!(v.get("error").is_none(), "{method}: {v:#}");
        v["result"].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", skill_runner::package::hash::file_hash(bytes))
}

fn file_of(dir: &Path, uri: &str) -> PathBuf {
    dir.join(uri.strip_prefix("skill://tooly/").unwrap())
}

#[test]
fn stdio_serves_the_session_tools_run_and_the_skills_extension() {
    if !require_sandbox() {
        return;
    }
    let (w, dir) = world();
    let id = session(&w);
    let mut s = Server::start(&w, &["--session", &id]);

    // The session's tools and run; the front matter's tools add nothing.
    let tools = s.result("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "find_skills",
            "load_skill",
            "load_skill_section",
            "read_skill_resource",
            "run"
        ]
    );

    // find_skills answers what the command line's tool route answers.
    let found = s.result(
        "tools/call",
        json!({"name": "find_skills", "arguments": {"query": "greeting"}}),
    );
    assert_eq!(found["isError"], false, "{found:#}");
    let text = found["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("- tooly: Prints a greeting"), "{text}");

    // run: the skill's script in the sandbox.
    let ran = s.result(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["sh", "/skills/tooly/scripts/run.sh", "hi"]}}),
    );
    assert_eq!(ran["isError"], false, "{ran:#}");
    assert_eq!(
        ran["structuredContent"]["stdout"], "from-tooly hi\n",
        "{ran:#}"
    );
    assert_eq!(ran["structuredContent"]["status"], "exited");
    let text = ran["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("status exited, exit code 0"), "{text}");
    assert!(text.contains("--- stdout ---\nfrom-tooly hi\n"), "{text}");

    // A failing command is an error result the model sees, with its code.
    let failed = s.result(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["sh", "-c", "echo oops >&2; exit 3"]}}),
    );
    assert_eq!(failed["isError"], true, "{failed:#}");
    assert_eq!(failed["structuredContent"]["exit_code"], 3);
    assert!(failed["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("--- stderr ---\noops\n"));

    // skills/list: every digest is the bytes of the file as frozen.
    let listed = s.result("skills/list", json!({}));
    let skills = listed["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1, "{listed:#}");
    assert_eq!(skills[0]["uri"], "skill://tooly/SKILL.md");
    let files = skills[0]["resources"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{listed:#}");
    for f in files {
        let uri = f["uri"].as_str().unwrap();
        let bytes = std::fs::read(file_of(&dir, uri)).unwrap();
        assert_eq!(f["digest"], sha256(&bytes), "{uri}");
        assert_eq!(f["size"], bytes.len(), "{uri}");
        // And resources/read serves exactly those bytes.
        let read = s.result("resources/read", json!({"uri": uri}));
        let c = &read["contents"][0];
        let served = match c.get("text") {
            Some(t) => t.as_str().unwrap().as_bytes().to_vec(),
            None => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(c["blob"].as_str().unwrap())
                    .unwrap()
            }
        };
        assert_eq!(served, bytes, "{uri}");
        assert_eq!(uri.ends_with(".bin"), c.get("blob").is_some(), "{c:#}");
    }
    let got = s.result("skills/get", json!({"uri": "skill://tooly/SKILL.md"}));
    assert_eq!(got["skill"]["resources"], skills[0]["resources"]);

    // The frozen bytes, not the folder: a change after freezing is not served.
    std::fs::write(dir.join("scripts/run.sh"), "echo changed\n").unwrap();
    let read = s.result(
        "resources/read",
        json!({"uri": "skill://tooly/scripts/run.sh"}),
    );
    assert_eq!(read["contents"][0]["text"], "echo from-tooly \"$@\"\n");

    // Paths outside the package, unknown tools and bad params: errors.
    for uri in [
        "skill://tooly/../../etc/passwd",
        "skill://tooly/missing.md",
        "skill://other/SKILL.md",
        "file:///etc/passwd",
    ] {
        let v = s.call("resources/read", json!({"uri": uri}));
        assert!(v["error"]["code"].is_i64(), "{uri}: {v:#}");
    }
    let v = s.call("tools/call", json!({"name": "rm_rf", "arguments": {}}));
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("has no tool \"rm_rf\"")
            && message.contains("find_skills")
            && message.contains("run"),
        "{v:#}"
    );
    let v = s.call("tools/call", json!({"name": 7}));
    assert!(v["error"]["code"].is_i64(), "{v:#}");
    let v = s.call(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["true"], "cwd": "/"}}),
    );
    assert_eq!(v["result"]["isError"], true, "{v:#}");
    let v = s.call("no/such/method", json!({}));
    assert_eq!(v["error"]["code"], -32601, "{v:#}");
    // Still serving.
    assert!(s.call("ping", json!({})).get("result").is_some());
}

/// The pids of `root` and of every process below it.
fn tree(root: u32) -> Vec<u32> {
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split(' ').nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) && !all.contains(&pid) {
                all.push(pid);
            }
        }
        i += 1;
    }
    all
}

/// The process whose command line holds `marker`, if one lives.
fn find(marker: &str) -> Option<u32> {
    std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains(marker)
            .then_some(pid)
    })
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
}

#[test]
fn a_cancelled_run_leaves_no_process() {
    if !require_sandbox() {
        return;
    }
    let (w, _) = world();
    let id = session(&w);
    let mut s = Server::start(&w, &["--session", &id]);
    let marker = format!("mcp-cancel-{}", std::process::id());
    let call = s.start_call(
        "tools/call",
        json!({"name": "run", "_meta": {"progressToken": "p1"},
               "arguments": {"argv": ["sh", "-c", format!("echo started; sleep 1000; echo {marker}")]}}),
    );
    // Output arrived as a progress notification: the command runs.
    let progress = s.wait(|v| v["method"] == "notifications/progress");
    assert_eq!(progress["params"]["progressToken"], "p1", "{progress:#}");
    let sh = find(&marker).expect("the command's shell is running");
    let pids = tree(sh);
    assert!(pids.len() >= 2, "the shell and its sleep: {pids:?}");

    s.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": call, "reason": "the user stopped it"}}),
    );
    let deadline = Instant::now() + PATIENCE;
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "still running after the cancel: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(find(&marker), None);
    // The server goes on serving.
    let ran = s.result(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["echo", "after"]}}),
    );
    assert_eq!(ran["structuredContent"]["stdout"], "after\n");
}

#[test]
fn mcp_without_a_session_says_how_to_name_one() {
    let (w, _) = world();
    let out = output_within(cmd(&w).arg("mcp"), HANG_GUARD);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("--session ID"), "{}", show(&out));
    let out = output_within(cmd(&w).args(["mcp", "--session", "ses-nope"]), HANG_GUARD);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
}

#[test]
fn mcp_with_skill_flags_creates_and_serves_a_session() {
    if !require_sandbox() {
        return;
    }
    let (w, _) = world();
    let mut s = Server::start(&w, &["--skill", "tooly", "--tool", "bash"]);
    let listed = s.result("skills/list", json!({}));
    assert_eq!(
        listed["skills"][0]["uri"], "skill://tooly/SKILL.md",
        "{listed:#}"
    );
}
