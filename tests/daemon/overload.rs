//! A full or crowded daemon still answers every client: a refused
//! request's body is read before the answer, so a client that writes its
//! whole body first sees 429 and `Retry-After` (not a broken pipe), and
//! idle connections on the Unix socket are evicted, oldest first, so they
//! cannot stall a request until the header timeout.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::{gated_job, open_gate, workspace_in, world_with_roots};

/// Python's `http.client` over the Unix socket: `n` sequential requests,
/// each a fresh connection that writes its headers and its 100-byte body
/// before reading, every other one with a pause between the two (a
/// client producing its body as it goes). An answer sent before the body
/// is read, on a connection then closed, reaches such a client as a
/// broken pipe instead of its status. Prints one JSON line per answer
/// (its status, `Retry-After` and kind, or the exception instead).
const CLIENT: &str = r#"
import http.client, json, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(path)
body = json.dumps({"argv": ["true"], "env": {"PAD": "x" * 60}}).encode()
body = body + b" " * (100 - len(body))
for i in range(n):
    c = Conn("localhost")
    try:
        if i % 2 == 0:
            c.request("POST", "/v1/executions", body, {"Content-Type": "application/json"})
        else:
            c.putrequest("POST", "/v1/executions")
            c.putheader("Content-Type", "application/json")
            c.putheader("Content-Length", str(len(body)))
            c.endheaders()
            time.sleep(0.05)
            c.send(body)
        r = c.getresponse()
        doc = json.loads(r.read() or b"null")
        kind = (doc or {}).get("error", {}).get("kind")
        print(json.dumps({"status": r.status, "retry_after": r.getheader("Retry-After"), "kind": kind}))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
    finally:
        c.close()
"#;

/// Runs [`CLIENT`] and returns its answers that are not `status` with
/// `Retry-After: retry` and `kind`.
fn lost_answers(d: &Daemon, status: u16, retry: &str, kind: &str) -> Vec<Value> {
    let out = Command::new("python3")
        .args(["-c", CLIENT, d.socket.to_str().unwrap(), "100"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 100);
    answers
        .into_iter()
        .filter(|a| !(a["status"] == status && a["retry_after"] == retry && a["kind"] == kind))
        .collect()
}

#[test]
fn a_full_daemon_answers_429_with_retry_after_to_a_client_that_writes_its_body_first() {
    let (w, root) = world_with_roots();
    let d = Daemon::start(
        &w,
        &["--root", &root, "--max-running", "1", "--max-queued", "0"],
    );
    let ws = workspace_in(&w, "full");
    // The one slot is taken until the gate opens.
    let r = d.post("/v1/executions?wait=false", &gated_job("holder", &ws));
    assert_eq!(r.status, 202, "{:#}", r.json());
    let lost = lost_answers(&d, 429, "1", "busy");
    assert!(
        lost.is_empty(),
        "{} of 100 refusals did not reach the client as 429 with Retry-After, e.g. {}",
        lost.len(),
        lost[0]
    );
    open_gate(&ws);
    let r = d.get("/v1/executions/holder?wait=30s");
    assert_eq!(r.status, 200, "{:#}", r.json());
}

#[test]
fn five_hundred_idle_socket_connections_do_not_stall_a_request() {
    let w = World::new();
    // The header timeout is far past the client's own read timeout
    // (PATIENCE): only eviction lets the request through in time.
    let d = Daemon::start(&w, &["--max-connections", "64", "--header-timeout", "60s"]);
    let mut idle: Vec<UnixStream> = Vec::new();
    for _ in 0..500 {
        idle.push(UnixStream::connect(&d.socket).unwrap());
    }
    // Some of them have sent half a request, as a slow or stuck client
    // would; the rest nothing.
    for s in idle.iter_mut().step_by(2) {
        use std::io::Write;
        let _ = s.write_all(b"GET /v1/health HTTP/1.1\r\n");
    }
    // Answered within the request's own read timeout, a third of the
    // header timeout: a hang guard, not a measurement.
    let ask = |method: &str, path: &str, body: &[u8]| {
        let mut conn = d.connect();
        conn.set_timeout(Duration::from_secs(20));
        let headers: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("Content-Type", "application/json")]
        };
        send(&mut conn, method, path, headers, body, None);
        read_response(BufReader::new(conn))
    };
    let r = ask("GET", "/v1/health", b"");
    assert_eq!(r.status, 200, "{:#}", r.json());
    let job = serde_json::to_vec(&json!({"argv": ["echo", "through"]})).unwrap();
    let r = ask("POST", "/v1/executions", &job);
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["stdout"], "through\n");
    drop(idle);
}
