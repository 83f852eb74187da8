//! The daemon (`skill-runner serve`, docs/daemon.md) driven over its real
//! Unix socket or loopback TCP, running real bubblewrap sandboxes, through
//! the harness in `support/daemon.rs`. One file per promise:

mod auth; // TCP needs a valid bearer token; idle clients without it starve no one
mod cancellation; // a client that leaves, or DELETE, cancels and leaves no process
mod damaged_results; // a stored result file of another length than its record answers store_corrupted after a restart, never read
mod disk; // a full data-dir disk makes health 503 disk_full; /metrics shows its free bytes
mod downloads; // session file downloads past max_downloads get 429 with Retry-After until one ends
mod drain; // a SIGTERM keeps answering reads, refuses admissions, records what finishes or is cancelled
mod environments; // uploaded trees published only as claimed and imported by a job; records listed and answered; builds only when turned on; token needed
mod executions; // many at once stay isolated; detached runs; listing and paging
mod lifecycle; // start, stop, crash and restart; bad settings; a private socket and data dir
mod logged; // a job rejected at launch and a refused request are each logged once with their sentence
mod mcp; // the session MCP route over Streamable HTTP: tools as the tool route answers, run through the execution route (its refusals, its receipt), digests of the frozen bytes, errors, the token
mod memory; // memory and retention stay bounded whatever a job or client does
mod metrics; // Prometheus metrics, JSON logs, and job text that cannot forge log lines
mod notify; // systemd hears READY=1 once it listens, WATCHDOG=1 pings, STOPPING=1 at a drain
mod openapi; // docs/openapi.json matches the router and every real response
mod outputs; // files in and kept outputs out through the daemon alone: served as bytes, removed with their record, bounded
mod overload; // a full or crowded daemon answers every client: 429 read by http.client, idle sockets evicted
mod packages; // published bundles run by binding; lying hashes are refused naming the skill
mod pinned; // a live stream always ends with its exit and its output, whatever retention sheds meanwhile
mod prepared; // a session's next command in a sandbox set up ahead: a hit, isolated from the last, unreachable by it, timed from hand-over, discarded when stale
mod pull; // a missing package or environment is pulled from its source once however many jobs wait; failures, wrong pins, tags and other registries refused with a sentence
mod receipts; // every result is signed, and verifies against GET /v1/receipt-key; --receipts false turns both off
mod refusals; // a body not sent as JSON is 415; a bad session query says it is the query
mod requests; // malformed, slow, oversized or excess requests get a JSON error
mod restart; // after kill -9: the same bytes, interrupted ones say so, nothing runs twice, a damaged store or full disk said clearly
mod retries; // a retry of the same job is the same execution, never a second run
mod roots; // a job reaches only folders under the roots, never the runner's state
mod session_tools; // a file tool's name spelled differently is refused; the answer names the file tools
mod sessions; // the skill host's sessions and tools over HTTP
mod signal_sender; // a sandbox killed from outside says so; a command that kills itself claims no sender
mod signals; // SIGHUP is logged and ignored; SIGUSR1 drains like SIGTERM, with a log line
mod streams; // NDJSON events in order, re-attached readers, heartbeats, stalled readers
mod summaries; // retained results are read back from the store, byte for byte, not held in the daemon's memory
mod template; // sandboxes start in the daemon's template mount namespace where it may make one; a host mount made or removed later reaches the next sandbox
mod tracing; // each execution exported over OTLP/HTTP as spans under the caller's traceparent
mod workspaces; // managed session workspaces: files in and out over HTTP, jobs in order, attacks refused

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner_tests::daemon::Daemon;
use skill_runner_tests::*;

/// A bundle (docs/formats.md) of one skill folder, and its binding.
pub(crate) fn bundle_of(id: &str, dir: &Path) -> (Value, Value) {
    let limits = skill_runner::package::format::PackageLimits::default();
    let files = skill_runner::package::source::read_dir_files(dir, &limits).unwrap();
    let binding = skill_runner::package::hash::Binding {
        id: id.to_owned(),
        revision: 1,
        version: "1.0.0".to_owned(),
        hash: hash_of(dir),
    };
    let text = skill_runner::package::bundle::render(&[(binding.clone(), files)]);
    (
        serde_json::from_str(&text).unwrap(),
        serde_json::to_value(&binding).unwrap(),
    )
}

/// A private token file (0600) holding `token`, for `--token-file`.
pub(crate) fn token_file(w: &World, token: &str) -> PathBuf {
    let file = w.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

/// A world with a `roots` folder and its skills folder, and the `--root`
/// argument that makes both roots of the daemon.
pub(crate) fn world_with_roots() -> (World, String) {
    let w = World::new();
    let roots = w.path().join("roots");
    std::fs::create_dir_all(&roots).unwrap();
    std::fs::create_dir_all(w.path().join("skills")).unwrap();
    let arg = format!("{}:{}", roots.display(), w.path().join("skills").display());
    (w, arg)
}

/// A folder under the daemon's roots, for a job's workspace.
pub(crate) fn workspace_in(w: &World, name: &str) -> PathBuf {
    let ws = w.path().join("roots").join(name);
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&ws);
    ws
}

/// A job that waits until the host creates `go` in its workspace, then
/// prints `released`: no timing is involved in when it finishes.
pub(crate) fn gated_job(id: &str, ws: &Path) -> Value {
    json!({
        "execution_id": id,
        "workspace": ws,
        "argv": ["sh", "-c", "echo waiting; while [ ! -e go ]; do sleep 0.05; done; echo released"],
    })
}

/// Lets the jobs of [`gated_job`] in `ws` finish.
pub(crate) fn open_gate(ws: &Path) {
    std::fs::write(ws.join("go"), b"").unwrap();
}

/// A published two-skill set, one with a supplementary file.
pub(crate) fn publish_two(d: &Daemon, w: &World) -> Vec<Value> {
    let tool = w.skill(
        "tooly",
        &[
            ("scripts/run.sh", b"echo from-tooly\n"),
            ("references/api.md", b"# API\nCall it.\n"),
        ],
    );
    let plain = w.skill("plain", &[]);
    let mut bindings = Vec::new();
    for (id, dir) in [("tooly", &tool), ("plain", &plain)] {
        let (bundle, binding) = bundle_of(id, dir);
        let r = d.post("/v1/skill-packages", &bundle);
        assert_eq!(r.status, 200, "{:#}", r.json());
        bindings.push(binding);
    }
    bindings
}

/// The data dir of `w` on a 64 MiB tmpfs of its own, so that a test can
/// fill it; unmounted however the test ends. `None` (skipped) where no
/// file system can be mounted.
pub(super) struct SmallDataDisk(pub(super) PathBuf);

impl SmallDataDisk {
    pub(super) fn mount(w: &World) -> Option<SmallDataDisk> {
        let data = w.data_dir();
        std::fs::create_dir_all(&data).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs"])
            .arg(&data)
            .output()
            .unwrap();
        if !mounted.status.success() {
            skip(format!(
                "cannot mount a small file system for the data dir: {}",
                String::from_utf8_lossy(&mounted.stderr)
            ));
            return None;
        }
        Some(SmallDataDisk(data))
    }
}

impl Drop for SmallDataDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
