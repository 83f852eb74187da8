//! Daemon metrics, rendered in the Prometheus text format (`GET /metrics`).
//!
//! Counters and histograms are plain atomics updated where the event
//! happens; gauges that describe state (running, queued) are read from the
//! registry at render time, so they can never drift. Names:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `skill_runner_executions_total{status}` | counter | finished executions by result status |
//! | `skill_runner_execution_duration_seconds` | histogram | wall time of the sandboxed command |
//! | `skill_runner_queue_wait_seconds` | histogram | time admitted executions waited for a run slot |
//! | `skill_runner_staging_seconds` | histogram | time spent staging snapshot roots |
//! | `skill_runner_staging_bytes_total` | counter | bytes staged into snapshot roots |
//! | `skill_runner_executions_running` | gauge | executions running now |
//! | `skill_runner_executions_queued` | gauge | executions waiting for a run slot |
//! | `skill_runner_admissions_refused_total{reason}` | counter | requests refused as `busy` or `draining` |
//! | `skill_runner_packages_published_total` | counter | skills published by `POST /v1/skill-packages` |
//! | `skill_runner_http_responses_total{code}` | counter | responses by HTTP status code |
//! | `skill_runner_connections_open` | gauge | client connections open now |
//! | `skill_runner_network_requests_total{host,allowed}` | counter | requests through the proxy of jobs with a network allowlist, per host; hosts past the first 1,000 count as `host="_other"` |
//! | `skill_runner_network_requests_dropped_total` | counter | proxy requests not listed in their result (past its bound, or not understood) |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::exec::result::Status;

/// Result statuses in the order they are rendered.
const STATUSES: [(Status, &str); 7] = [
    (Status::Exited, "exited"),
    (Status::Signaled, "signaled"),
    (Status::TimedOut, "timed_out"),
    (Status::LimitExceeded, "limit_exceeded"),
    (Status::Cancelled, "cancelled"),
    (Status::Rejected, "rejected"),
    (Status::Failed, "failed"),
];

/// Distinct hosts counted by name; the rest share [`OTHER_HOST`].
const MAX_HOSTS: usize = 1000;
const OTHER_HOST: &str = "_other";

/// Bucket bounds in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// A fixed-bucket histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {}", self.count.load(Ordering::Relaxed));
    }
}

/// Why an admission was refused, for the metric label.
#[derive(Debug, Clone, Copy)]
pub enum Refusal {
    Busy,
    Draining,
}

/// Everything `/metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    executions: [AtomicU64; STATUSES.len()],
    pub duration: Histogram,
    pub queue_wait: Histogram,
    pub staging: Histogram,
    staging_bytes: AtomicU64,
    refused_busy: AtomicU64,
    refused_draining: AtomicU64,
    published: AtomicU64,
    connections: AtomicI64,
    responses: Mutex<BTreeMap<u16, u64>>,
    /// (host, allowed) → requests.
    network: Mutex<BTreeMap<(String, bool), u64>>,
    network_dropped: AtomicU64,
}

impl Metrics {
    /// Counts a finished execution.
    pub fn execution(&self, status: Status, duration: Duration) {
        if let Some(i) = STATUSES.iter().position(|(s, _)| *s == status) {
            self.executions[i].fetch_add(1, Ordering::Relaxed);
        }
        if status != Status::Rejected {
            self.duration.observe(duration);
        }
    }

    pub fn staged(&self, bytes: u64, took: Duration) {
        self.staging_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.staging.observe(took);
    }

    pub fn refused(&self, why: Refusal) {
        match why {
            Refusal::Busy => &self.refused_busy,
            Refusal::Draining => &self.refused_draining,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub fn published(&self, skills: u64) {
        self.published.fetch_add(skills, Ordering::Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts the proxy requests of a finished execution.
    pub fn network(&self, info: &crate::sandbox::net::NetworkInfo) {
        let mut map = self.network.lock().unwrap_or_else(|e| e.into_inner());
        for r in &info.requests {
            let known = map.len() < 2 * MAX_HOSTS
                || map.contains_key(&(r.host.clone(), r.allowed))
                || map.contains_key(&(r.host.clone(), !r.allowed));
            let host = if known { r.host.as_str() } else { OTHER_HOST };
            *map.entry((host.to_owned(), r.allowed)).or_default() += 1;
        }
        self.network_dropped
            .fetch_add(info.dropped, Ordering::Relaxed);
    }

    pub fn response(&self, code: u16) {
        let mut map = self.responses.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(code).or_default() += 1;
    }

    /// The Prometheus text exposition; `running` and `queued` come from the
    /// registry.
    pub fn render(&self, running: usize, queued: usize) -> String {
        let mut out = String::with_capacity(4096);
        let counter = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {v}");
        };
        counter(
            &mut out,
            "skill_runner_executions_total",
            "Finished executions by result status.",
        );
        for (i, (_, name)) in STATUSES.iter().enumerate() {
            let _ = writeln!(
                out,
                "skill_runner_executions_total{{status=\"{name}\"}} {}",
                self.executions[i].load(Ordering::Relaxed)
            );
        }
        self.duration.render(
            &mut out,
            "skill_runner_execution_duration_seconds",
            "Wall time of the sandboxed command.",
        );
        self.queue_wait.render(
            &mut out,
            "skill_runner_queue_wait_seconds",
            "Time admitted executions waited for a run slot.",
        );
        self.staging.render(
            &mut out,
            "skill_runner_staging_seconds",
            "Time spent staging snapshot roots.",
        );
        counter(
            &mut out,
            "skill_runner_staging_bytes_total",
            "Bytes staged into snapshot roots.",
        );
        let _ = writeln!(
            out,
            "skill_runner_staging_bytes_total {}",
            self.staging_bytes.load(Ordering::Relaxed)
        );
        gauge(
            &mut out,
            "skill_runner_executions_running",
            "Executions running now.",
            running as i64,
        );
        gauge(
            &mut out,
            "skill_runner_executions_queued",
            "Executions waiting for a run slot.",
            queued as i64,
        );
        counter(
            &mut out,
            "skill_runner_admissions_refused_total",
            "Execution requests refused at admission.",
        );
        let _ = writeln!(
            out,
            "skill_runner_admissions_refused_total{{reason=\"busy\"}} {}",
            self.refused_busy.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "skill_runner_admissions_refused_total{{reason=\"draining\"}} {}",
            self.refused_draining.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "skill_runner_packages_published_total",
            "Skills published through POST /v1/skill-packages.",
        );
        let _ = writeln!(
            out,
            "skill_runner_packages_published_total {}",
            self.published.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "skill_runner_http_responses_total",
            "HTTP responses by status code.",
        );
        let responses = self
            .responses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (code, n) in responses {
            let _ = writeln!(
                out,
                "skill_runner_http_responses_total{{code=\"{code}\"}} {n}"
            );
        }
        gauge(
            &mut out,
            "skill_runner_connections_open",
            "Client connections open now.",
            self.connections.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "skill_runner_network_requests_total",
            "Requests through the network proxy, per host, allowed or refused.",
        );
        let network = self
            .network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for ((host, allowed), n) in network {
            let _ = writeln!(
                out,
                "skill_runner_network_requests_total{{host=\"{}\",allowed=\"{allowed}\"}} {n}",
                label(&host)
            );
        }
        counter(
            &mut out,
            "skill_runner_network_requests_dropped_total",
            "Proxy requests not listed in their result.",
        );
        let _ = writeln!(
            out,
            "skill_runner_network_requests_dropped_total {}",
            self.network_dropped.load(Ordering::Relaxed)
        );
        out
    }
}

/// A label value escaped for the text format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state that touches every family: every status, both refusals,
    /// two response codes, an escaped host, a negative-free gauge.
    fn known() -> Metrics {
        let m = Metrics::default();
        for (status, _) in STATUSES {
            m.execution(status, Duration::from_millis(30));
        }
        m.execution(Status::Exited, Duration::from_secs(400));
        m.queue_wait.observe(Duration::from_micros(1500));
        m.staged(4096, Duration::from_millis(250));
        m.refused(Refusal::Busy);
        m.refused(Refusal::Draining);
        m.refused(Refusal::Draining);
        m.published(3);
        m.connection_opened();
        m.connection_opened();
        m.connection_closed();
        m.response(404);
        m.response(200);
        m.response(200);
        let req = |host: &str, allowed| crate::sandbox::net::RequestInfo {
            host: host.into(),
            port: 443,
            allowed,
            reason: None,
            sent_bytes: 0,
            received_bytes: 0,
        };
        m.network(&crate::sandbox::net::NetworkInfo {
            requests: vec![req("pypi.org", true), req("x\\\"\n", false)],
            dropped: 5,
        });
        m
    }

    /// `/metrics` byte for byte, as scrapers and dashboards read it.
    #[test]
    fn renders_the_same_text_for_the_same_counters() {
        assert_eq!(known().render(4, 7), PINNED);
    }

    /// A family without samples still declares itself.
    #[test]
    fn renders_empty_families_with_their_help_and_type() {
        let text = Metrics::default().render(0, 0);
        assert!(text.contains(
            "# TYPE skill_runner_http_responses_total counter\n# HELP skill_runner_connections_open "
        ));
        assert!(text.contains(
            "# TYPE skill_runner_network_requests_total counter\n# HELP skill_runner_network_requests_dropped_total "
        ));
        assert!(text.ends_with("skill_runner_network_requests_dropped_total 0\n"));
    }

    const PINNED: &str = r#"# HELP skill_runner_executions_total Finished executions by result status.
# TYPE skill_runner_executions_total counter
skill_runner_executions_total{status="exited"} 2
skill_runner_executions_total{status="signaled"} 1
skill_runner_executions_total{status="timed_out"} 1
skill_runner_executions_total{status="limit_exceeded"} 1
skill_runner_executions_total{status="cancelled"} 1
skill_runner_executions_total{status="rejected"} 1
skill_runner_executions_total{status="failed"} 1
# HELP skill_runner_execution_duration_seconds Wall time of the sandboxed command.
# TYPE skill_runner_execution_duration_seconds histogram
skill_runner_execution_duration_seconds_bucket{le="0.005"} 0
skill_runner_execution_duration_seconds_bucket{le="0.01"} 0
skill_runner_execution_duration_seconds_bucket{le="0.025"} 0
skill_runner_execution_duration_seconds_bucket{le="0.05"} 6
skill_runner_execution_duration_seconds_bucket{le="0.1"} 6
skill_runner_execution_duration_seconds_bucket{le="0.25"} 6
skill_runner_execution_duration_seconds_bucket{le="0.5"} 6
skill_runner_execution_duration_seconds_bucket{le="1"} 6
skill_runner_execution_duration_seconds_bucket{le="2.5"} 6
skill_runner_execution_duration_seconds_bucket{le="5"} 6
skill_runner_execution_duration_seconds_bucket{le="10"} 6
skill_runner_execution_duration_seconds_bucket{le="30"} 6
skill_runner_execution_duration_seconds_bucket{le="60"} 6
skill_runner_execution_duration_seconds_bucket{le="300"} 6
skill_runner_execution_duration_seconds_bucket{le="+Inf"} 7
skill_runner_execution_duration_seconds_sum 400.18
skill_runner_execution_duration_seconds_count 7
# HELP skill_runner_queue_wait_seconds Time admitted executions waited for a run slot.
# TYPE skill_runner_queue_wait_seconds histogram
skill_runner_queue_wait_seconds_bucket{le="0.005"} 1
skill_runner_queue_wait_seconds_bucket{le="0.01"} 1
skill_runner_queue_wait_seconds_bucket{le="0.025"} 1
skill_runner_queue_wait_seconds_bucket{le="0.05"} 1
skill_runner_queue_wait_seconds_bucket{le="0.1"} 1
skill_runner_queue_wait_seconds_bucket{le="0.25"} 1
skill_runner_queue_wait_seconds_bucket{le="0.5"} 1
skill_runner_queue_wait_seconds_bucket{le="1"} 1
skill_runner_queue_wait_seconds_bucket{le="2.5"} 1
skill_runner_queue_wait_seconds_bucket{le="5"} 1
skill_runner_queue_wait_seconds_bucket{le="10"} 1
skill_runner_queue_wait_seconds_bucket{le="30"} 1
skill_runner_queue_wait_seconds_bucket{le="60"} 1
skill_runner_queue_wait_seconds_bucket{le="300"} 1
skill_runner_queue_wait_seconds_bucket{le="+Inf"} 1
skill_runner_queue_wait_seconds_sum 0.0015
skill_runner_queue_wait_seconds_count 1
# HELP skill_runner_staging_seconds Time spent staging snapshot roots.
# TYPE skill_runner_staging_seconds histogram
skill_runner_staging_seconds_bucket{le="0.005"} 0
skill_runner_staging_seconds_bucket{le="0.01"} 0
skill_runner_staging_seconds_bucket{le="0.025"} 0
skill_runner_staging_seconds_bucket{le="0.05"} 0
skill_runner_staging_seconds_bucket{le="0.1"} 0
skill_runner_staging_seconds_bucket{le="0.25"} 1
skill_runner_staging_seconds_bucket{le="0.5"} 1
skill_runner_staging_seconds_bucket{le="1"} 1
skill_runner_staging_seconds_bucket{le="2.5"} 1
skill_runner_staging_seconds_bucket{le="5"} 1
skill_runner_staging_seconds_bucket{le="10"} 1
skill_runner_staging_seconds_bucket{le="30"} 1
skill_runner_staging_seconds_bucket{le="60"} 1
skill_runner_staging_seconds_bucket{le="300"} 1
skill_runner_staging_seconds_bucket{le="+Inf"} 1
skill_runner_staging_seconds_sum 0.25
skill_runner_staging_seconds_count 1
# HELP skill_runner_staging_bytes_total Bytes staged into snapshot roots.
# TYPE skill_runner_staging_bytes_total counter
skill_runner_staging_bytes_total 4096
# HELP skill_runner_executions_running Executions running now.
# TYPE skill_runner_executions_running gauge
skill_runner_executions_running 4
# HELP skill_runner_executions_queued Executions waiting for a run slot.
# TYPE skill_runner_executions_queued gauge
skill_runner_executions_queued 7
# HELP skill_runner_admissions_refused_total Execution requests refused at admission.
# TYPE skill_runner_admissions_refused_total counter
skill_runner_admissions_refused_total{reason="busy"} 1
skill_runner_admissions_refused_total{reason="draining"} 2
# HELP skill_runner_packages_published_total Skills published through POST /v1/skill-packages.
# TYPE skill_runner_packages_published_total counter
skill_runner_packages_published_total 3
# HELP skill_runner_http_responses_total HTTP responses by status code.
# TYPE skill_runner_http_responses_total counter
skill_runner_http_responses_total{code="200"} 2
skill_runner_http_responses_total{code="404"} 1
# HELP skill_runner_connections_open Client connections open now.
# TYPE skill_runner_connections_open gauge
skill_runner_connections_open 1
# HELP skill_runner_network_requests_total Requests through the network proxy, per host, allowed or refused.
# TYPE skill_runner_network_requests_total counter
skill_runner_network_requests_total{host="pypi.org",allowed="true"} 1
skill_runner_network_requests_total{host="x\\\"\n",allowed="false"} 1
# HELP skill_runner_network_requests_dropped_total Proxy requests not listed in their result.
# TYPE skill_runner_network_requests_dropped_total counter
skill_runner_network_requests_dropped_total 5
"#;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.execution(Status::Exited, Duration::from_millis(3));
        m.execution(Status::Exited, Duration::from_millis(700));
        m.execution(Status::Rejected, Duration::ZERO);
        m.staged(1234, Duration::from_millis(2));
        m.response(200);
        let req = |host: &str, allowed| crate::sandbox::net::RequestInfo {
            host: host.into(),
            port: 443,
            allowed,
            reason: None,
            sent_bytes: 0,
            received_bytes: 0,
        };
        m.network(&crate::sandbox::net::NetworkInfo {
            requests: vec![
                req("pypi.org", true),
                req("pypi.org", true),
                req("evil.org", false),
                req("a\"b", false),
            ],
            dropped: 3,
        });
        let text = m.render(1, 2);
        assert!(text.contains(
            "skill_runner_network_requests_total{host=\"pypi.org\",allowed=\"true\"} 2\n"
        ));
        assert!(text.contains(
            "skill_runner_network_requests_total{host=\"evil.org\",allowed=\"false\"} 1\n"
        ));
        assert!(text.contains("host=\"a\\\"b\""), "{text}");
        assert!(text.contains("skill_runner_network_requests_dropped_total 3\n"));
        assert!(text.contains("skill_runner_executions_total{status=\"exited\"} 2\n"));
        assert!(text.contains("skill_runner_executions_total{status=\"rejected\"} 1\n"));
        assert!(text.contains("skill_runner_execution_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("skill_runner_execution_duration_seconds_bucket{le=\"1\"} 2\n"));
        assert!(text.contains("skill_runner_execution_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("skill_runner_execution_duration_seconds_count 2\n"));
        assert!(text.contains("skill_runner_staging_bytes_total 1234\n"));
        assert!(text.contains("skill_runner_executions_running 1\n"));
        assert!(text.contains("skill_runner_executions_queued 2\n"));
        assert!(text.contains("skill_runner_http_responses_total{code=\"200\"} 1\n"));
        // Every sample line belongs to a declared metric.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {base} "))
                    || text.contains(&format!("# TYPE {name} ")),
                "{line}"
            );
        }
    }
}
