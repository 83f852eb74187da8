//! `/v1/sessions/{id}/mcp` spoken to as raw Streamable HTTP (docs/mcp.md):
//! initialize, the session's tools with the tool route's answers, `run`
//! through the daemon's own admission (a limit over the daemon's maximum
//! is refused with the sentence `POST /v1/executions` gives, a result
//! carries its receipt), `skills/list` digests of the frozen bytes,
//! `resources/read`, JSON-RPC errors for unknown tools and bad params,
//! transport refusals as the daemon's error document, the bearer token
//! required on TCP, and a cancelled `run` that is a cancelled execution
//! whose process is gone; MCP sessions bounded in all and per session,
//! their places freed by an MCP `DELETE`, by their session's deletion and
//! after the session idle bound.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::{bundle_of, token_file};

/// An MCP client of one session's route.
struct Client<'a> {
    d: &'a Daemon,
    path: String,
    session: Option<String>,
    next: u64,
}

/// The JSON-RPC message of an answer: JSON, or the `data:` lines of an
/// event stream, the one with `id`.
fn message(r: &Resp, id: u64) -> Value {
    let body = String::from_utf8_lossy(&r.body);
    if r.header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        return r.json();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {id} (status {}): {body}", r.status))
}

impl<'a> Client<'a> {
    fn new(d: &'a Daemon, session: &str) -> Client<'a> {
        let mut c = Client {
            d,
            path: format!("/v1/sessions/{session}/mcp"),
            session: None,
            next: 0,
        };
        let (r, init) = c.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw-http", "version": "1"}}}));
        assert_eq!(r.status, 200, "{init:#}");
        assert_eq!(
            init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/skills"],
            json!({}),
            "{init:#}"
        );
        c.session = Some(
            r.header("mcp-session-id")
                .expect("an MCP session id")
                .to_owned(),
        );
        let (r, _) = c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(r.status, 202);
        c
    }

    /// Posts `msg` and answers the response as it came.
    fn post(&self, msg: &Value) -> Resp {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        if let Some(s) = &self.session {
            headers.push(("Mcp-Session-Id", s));
        }
        self.d
            .request("POST", &self.path, &headers, msg.to_string().as_bytes())
    }

    fn send(&self, msg: Value) -> (Resp, Value) {
        let r = self.post(&msg);
        let v = match msg["id"].as_u64() {
            Some(id) if r.status == 200 => message(&r, id),
            _ => Value::Null,
        };
        (r, v)
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (r, v) = self
            .send(json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        assert_eq!(
            r.status,
            200,
            "{method}: {}",
            String::from_utf8_lossy(&r.body)
        );
        v
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let v = self.call(method, params);
        assert!(v.get("error").is_none(), "{method}: {v:#}");
        v["result"].clone()
    }
}

/// A published `tooly` and a session of it with `bash` enabled.
fn session(d: &Daemon, w: &World) -> (String, std::path::PathBuf) {
    let dir = w.skill(
        "tooly",
        &[
            ("scripts/run.sh", b"echo from-tooly \"$@\"\n"),
            ("data.bin", &[0, 200, 201, 255]),
        ],
    );
    let (bundle, binding) = bundle_of("tooly", &dir);
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [binding], "tools": ["bash"]}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    (r.json()["id"].as_str().unwrap().to_owned(), dir)
}

#[test]
fn the_mcp_route_serves_tools_run_skills_and_resources() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (id, dir) = session(&d, &w);
    let mut c = Client::new(&d, &id);

    let tools = c.result("tools/list", json!({}));
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

    // The same answers as the tool route.
    for (tool, input) in [
        ("find_skills", json!({"query": "tooly"})),
        ("load_skill", json!({"name": "tooly"})),
        ("load_skill", json!({"name": "nope"})),
    ] {
        let via_route = d
            .post(&format!("/v1/sessions/{id}/tools/{tool}"), &input)
            .json();
        let via_mcp = c.result("tools/call", json!({"name": tool, "arguments": input}));
        assert_eq!(
            via_mcp["content"][0]["text"], via_route["content"],
            "{tool}"
        );
        assert_eq!(via_mcp["isError"], via_route["is_error"], "{tool}");
    }

    // run: the skill's script, through the daemon's execution route.
    let ran = c.result(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["sh", "/skills/tooly/scripts/run.sh", "x"]}}),
    );
    assert_eq!(ran["isError"], false, "{ran:#}");
    let result = &ran["structuredContent"];
    assert_eq!(result["stdout"], "from-tooly x\n", "{ran:#}");
    assert!(result["receipt"].is_object(), "no receipt: {result:#}");
    // The daemon knows it as any execution.
    let exec_id = result["execution_id"].as_str().unwrap();
    let kept = d.get(&format!("/v1/executions/{exec_id}"));
    assert_eq!(kept.status, 200);
    assert_eq!(kept.json()["stdout"], "from-tooly x\n");

    // A widening limit is refused as POST /v1/executions refuses it.
    let limits = json!({"output_bytes": 1u64 << 40});
    let direct = d.post(
        "/v1/executions",
        &json!({"session": id, "argv": ["true"], "limits": limits}),
    );
    assert_eq!(direct.status, 400);
    let sentence = direct.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = c.result(
        "tools/call",
        json!({"name": "run", "arguments": {"argv": ["true"], "limits": limits}}),
    );
    assert_eq!(refused["isError"], true, "{refused:#}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&sentence), "{text} / {sentence}");

    // skills/list: digests of the frozen bytes; resources/read serves them.
    let listed = c.result("skills/list", json!({}));
    let files = listed["skills"][0]["resources"].as_array().unwrap().clone();
    assert_eq!(files.len(), 3, "{listed:#}");
    for f in &files {
        let uri = f["uri"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(uri.strip_prefix("skill://tooly/").unwrap())).unwrap();
        assert_eq!(
            f["digest"],
            format!("sha256:{}", skill_runner::package::hash::file_hash(&bytes))
        );
        let read = c.result("resources/read", json!({"uri": uri}));
        let content = &read["contents"][0];
        let served = match content.get("text") {
            Some(t) => t.as_str().unwrap().as_bytes().to_vec(),
            None => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(content["blob"].as_str().unwrap())
                    .unwrap()
            }
        };
        assert_eq!(served, bytes, "{uri}");
    }
    let all = c.result("resources/list", json!({}));
    assert_eq!(all["resources"].as_array().unwrap().len(), 3, "{all:#}");

    // Errors are JSON-RPC errors, and the server goes on.
    let v = c.call("tools/call", json!({"name": "shell", "arguments": {}}));
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("has no tool \"shell\"") && m.contains("run"),
        "{v:#}"
    );
    let v = c.call(
        "resources/read",
        json!({"uri": "skill://tooly/../../../etc/passwd"}),
    );
    assert!(v["error"]["code"].is_i64(), "{v:#}");
    let v = c.call("skills/get", json!({"uri": 5}));
    assert!(v["error"]["code"].is_i64(), "{v:#}");
    assert!(c.call("ping", json!({})).get("result").is_some());

    // Transport refusals are the daemon's error document.
    let r = d.request(
        "POST",
        &c.path,
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(r.status, 406);
    assert_eq!(r.json()["error"]["kind"], "bad_request");
    let r = d.request(
        "POST",
        &c.path,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        b"not json",
    );
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["error"]["kind"], "unsupported_media_type");
    // An unknown session is 404 before any MCP.
    let r = d.request(
        "POST",
        "/v1/sessions/ses-00000000000000000000000000000000/mcp",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    r.assert_error(404, "not_found");
}

#[test]
fn the_mcp_route_needs_the_bearer_token() {
    let w = World::new();
    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
        ],
    );
    d.token = Some(token.into());
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [], "tools": ["web_search"]}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    d.token = None;
    let r = d.request(
        "POST",
        &format!("/v1/sessions/{id}/mcp"),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "x", "version": "1"}}})
        .to_string()
        .as_bytes(),
    );
    r.assert_error(401, "unauthorized");
    d.token = Some(token.into());
    let mut c = Client::new(&d, &id);
    let tools = c.result("tools/list", json!({}));
    assert!(tools["tools"].to_string().contains("\"run\""), "{tools:#}");
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

#[test]
fn a_cancelled_run_on_the_route_is_cancelled_as_an_execution() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (id, _) = session(&d, &w);
    let c = Client::new(&d, &id);
    let marker = format!("route-cancel-{}", std::process::id());
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run", "arguments": {"argv": ["sh", "-c", format!("sleep 1000; echo {marker}")]}}});
    std::thread::scope(|s| {
        // No progressToken: the job is posted for its result document alone.
        // A cancelled call is answered by no message: its stream just ends.
        let waiting = s.spawn(|| c.post(&call));
        let deadline = std::time::Instant::now() + PATIENCE;
        let shell = loop {
            if let Some(pid) = find(&marker) {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the run never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let (r, _) = c.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": 7}}),
        );
        assert_eq!(r.status, 202);
        while std::path::Path::new(&format!("/proc/{shell}")).exists()
            && !std::fs::read_to_string(format!("/proc/{shell}/stat"))
                .unwrap_or_default()
                .contains(") Z")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the run outlived its cancel"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The daemon recorded it as a cancelled execution.
        let listed = d.get("/v1/executions").json();
        let ours: Vec<&Value> = listed["executions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["execution_id"].as_str().unwrap().starts_with("mcp-"))
            .collect();
        assert_eq!(ours.len(), 1, "{listed:#}");
        let exec = ours[0]["execution_id"].as_str().unwrap();
        let result = loop {
            let r = d.get(&format!("/v1/executions/{exec}?wait=30s"));
            if r.status == 200 {
                break r.json();
            }
        };
        assert_eq!(result["status"], "cancelled", "{result:#}");
        drop(waiting);
    });
}

/// Posts an `initialize` to session `id`'s MCP route.
fn initialize(d: &Daemon, id: &str) -> Resp {
    let msg = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-http", "version": "1"}}});
    d.request(
        "POST",
        &format!("/v1/sessions/{id}/mcp"),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        msg.to_string().as_bytes(),
    )
}

/// The MCP session an `initialize` opened.
fn opened(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.header("mcp-session-id")
        .expect("an MCP session id")
        .to_owned()
}

/// Answers the 429 `busy` of an `initialize` beyond a cap.
fn refused(r: &Resp, cap: &str) {
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("retry-after"), Some("1"));
    let e = &r.json()["error"];
    assert_eq!(e["kind"], "busy", "{e:#}");
    assert!(
        e["message"].as_str().unwrap().contains(cap),
        "the refusal names {cap}: {e:#}"
    );
}

#[test]
fn mcp_sessions_are_bounded_in_all_and_per_session_and_freed_when_closed() {
    let w = World::new();
    let d = Daemon::start(
        &w,
        &["--mcp-sessions", "3", "--mcp-sessions-per-session", "2"],
    );
    let (a, _) = session(&d, &w);
    let b = d.post("/v1/sessions", &json!({"skills": [], "tools": []}));
    assert_eq!(b.status, 200, "{:#}", b.json());
    let b = b.json()["id"].as_str().unwrap().to_owned();

    // Per session: two, the third refused.
    let a1 = opened(&initialize(&d, &a));
    let _a2 = opened(&initialize(&d, &a));
    refused(&initialize(&d, &a), "mcp_sessions_per_session 2");
    // In all: three, the fourth refused, whichever session asks.
    let _b1 = opened(&initialize(&d, &b));
    refused(&initialize(&d, &b), "mcp_sessions 3");

    // An MCP DELETE frees its place.
    let r = d.request(
        "DELETE",
        &format!("/v1/sessions/{a}/mcp"),
        &[
            ("Mcp-Session-Id", &a1),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        b"",
    );
    // 204, as MCP's clients expect of a session ended (not the
    // transport's 202).
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    let _b2 = opened(&initialize(&d, &b));
    refused(&initialize(&d, &b), "mcp_sessions 3");

    // Deleting a daemon session closes its MCP sessions, freeing theirs.
    assert_eq!(d.call("DELETE", &format!("/v1/sessions/{a}"), None).0, 200);
    let c = d.post("/v1/sessions", &json!({"skills": [], "tools": []}));
    assert_eq!(c.status, 200, "{:#}", c.json());
    let c = c.json()["id"].as_str().unwrap().to_owned();
    opened(&initialize(&d, &c));
    refused(&initialize(&d, &c), "mcp_sessions 3");
}

#[test]
fn an_idle_mcp_session_frees_its_place_within_the_session_idle_bound() {
    let w = World::new();
    let d = Daemon::start(&w, &["--mcp-sessions", "1", "--session-idle", "2s"]);
    let new_session = || {
        let r = d.post("/v1/sessions", &json!({"skills": [], "tools": []}));
        assert_eq!(r.status, 200, "{:#}", r.json());
        r.json()["id"].as_str().unwrap().to_owned()
    };
    let a = new_session();
    opened(&initialize(&d, &a));
    let b = new_session();
    refused(&initialize(&d, &b), "mcp_sessions 1");
    // Each refusal is a use of b, none of a: a's MCP session ends after
    // the session idle bound (its keep-alive, not rmcp's five minutes)
    // and a expires; the place comes free.
    wait_until("an initialize of b admitted", || {
        let r = initialize(&d, &b);
        assert!(matches!(r.status, 200 | 429), "{}", r.status);
        r.status == 200
    });
    assert_eq!(d.get(&format!("/v1/sessions/{a}")).status, 404);
}
