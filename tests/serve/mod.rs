//! A daemon started for one test and spoken to over its Unix socket, one
//! request a connection: the few calls the admission and telemetry tests
//! make. (The daemon suites keep their fuller harness.)

// Each test binary that includes this uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use skill_runner_tests::{http_reply, runner_command, World};

/// Hang protection for every wait.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct Serve {
    child: Child,
    socket: PathBuf,
    log: Arc<Mutex<String>>,
}

impl Serve {
    /// `skill-runner serve` on a socket in `world`, with `args`; returns
    /// once it answers.
    pub fn start(world: &World, args: &[&str]) -> Serve {
        // The default socket, in a folder the daemon makes private.
        let socket = world.data_dir().join("run/skill-runner.sock");
        let mut child = runner_command()
            .arg("--data-dir")
            .arg(world.data_dir())
            .arg("serve")
            .args(args)
            .env("SKILL_RUNNER_LOG", "info")
            .env_remove("SKILL_RUNNER_TOKEN")
            .env_remove("SKILL_RUNNER_LISTEN")
            .env_remove("SKILL_RUNNER_CONFIG")
            .env_remove("SKILL_RUNNER_ROOTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn skill-runner serve");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut serve = Serve { child, socket, log };
        let start = Instant::now();
        while !serve.log().contains("listening on") {
            if let Ok(Some(status)) = serve.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("the daemon exited ({status}):\n{}", serve.log());
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the daemon never listened:\n{}",
                serve.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        serve
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// One request; the status and the JSON body (`null` when empty).
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut conn = UnixStream::connect(&self.socket).expect("connect to the daemon");
        conn.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = Vec::new();
        conn.read_to_end(&mut reply).unwrap();
        let (status, body) = http_reply(&reply);
        let doc = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or_else(|e| {
                panic!(
                    "{method} {path}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&body)
                )
            })
        };
        (status, doc)
    }

    /// Waits until the log has a line for which `found` holds; returns it.
    pub fn wait_for_line(&self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(line) = self.log().lines().find(|l| found(l)) {
                return line.to_owned();
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no log line with {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
