//! Daemon metrics, rendered in the Prometheus text format (`GET /metrics`).
//!
//! Counters and histograms are plain atomics updated where the event
//! happens; gauges that describe state (running, queued) are read from the
//! registry at render time, so they can never drift.
//!
//! The metric set is one table, `FAMILIES`: each family's name, labels,
//! help and reader, whose variant is its type. Rendering walks the table in
//! order, so every family has one `# HELP` and one `# TYPE` line followed by
//! its samples (none yet is fine), and a metric cannot be sampled without
//! being declared. The tests hold the table to unique names, `_total` on
//! counters, and the list in docs/daemon.md.

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

    /// The cumulative buckets, sum and count under `name`.
    fn samples(&self, out: &mut String, name: &str) {
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
    /// Bytes free for the daemon on the data dir's file system, as last
    /// read (by health or `/metrics`); -1 when unknown.
    data_dir_free: AtomicI64,
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

    /// Records the data dir's free bytes (`None`: could not be read).
    pub fn data_dir_free(&self, bytes: Option<u64>) {
        let v = bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
        self.data_dir_free.store(v, Ordering::Relaxed);
    }

    pub fn response(&self, code: u16) {
        let mut map = self.responses.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(code).or_default() += 1;
    }

    /// The Prometheus text exposition; `running` and `queued` come from the
    /// registry.
    pub fn render(&self, running: usize, queued: usize) -> String {
        let now = Counts { running, queued };
        let mut out = String::with_capacity(4096);
        for f in FAMILIES {
            let name = f.name;
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.read.kind());
            match f.read {
                Read::Counter(read) => {
                    let _ = writeln!(out, "{name} {}", read(self));
                }
                Read::LabelledCounter(read) => {
                    for (values, n) in read(self) {
                        let pairs: Vec<String> = f
                            .labels
                            .iter()
                            .zip(&values)
                            .map(|(l, v)| format!("{l}=\"{}\"", label(v)))
                            .collect();
                        let _ = writeln!(out, "{name}{{{}}} {n}", pairs.join(","));
                    }
                }
                Read::Gauge(read) => {
                    let _ = writeln!(out, "{name} {}", read(self, now));
                }
                Read::Histogram(read) => read(self).samples(&mut out, name),
            }
        }
        out
    }
}

/// One metric family of `/metrics`.
struct Family {
    name: &'static str,
    /// Label names, in the order a [`Read::LabelledCounter`] gives values.
    labels: &'static [&'static str],
    help: &'static str,
    read: Read,
}

/// How a family reads its samples at render time; the variant is the
/// family's type, so the two cannot disagree.
enum Read {
    Counter(fn(&Metrics) -> u64),
    LabelledCounter(fn(&Metrics) -> Vec<Sample>),
    Gauge(fn(&Metrics, Counts) -> i64),
    Histogram(fn(&Metrics) -> &Histogram),
}

impl Read {
    /// The `# TYPE` word.
    fn kind(&self) -> &'static str {
        match self {
            Read::Counter(_) | Read::LabelledCounter(_) => "counter",
            Read::Gauge(_) => "gauge",
            Read::Histogram(_) => "histogram",
        }
    }
}

/// One sample of a labelled counter: its label values, in the order of
/// [`Family::labels`], and its count. Samples render in the order given.
type Sample = (Vec<String>, u64);

/// The registry's counts at render time.
#[derive(Debug, Clone, Copy)]
struct Counts {
    running: usize,
    queued: usize,
}

fn load(n: &AtomicU64) -> u64 {
    n.load(Ordering::Relaxed)
}

/// Every metric, in the order `/metrics` renders them.
const FAMILIES: &[Family] = &[
    Family {
        name: "skill_runner_executions_total",
        labels: &["status"],
        help: "Finished executions by result status.",
        read: Read::LabelledCounter(|m| {
            STATUSES
                .iter()
                .zip(&m.executions)
                .map(|((_, status), n)| (vec![(*status).to_owned()], load(n)))
                .collect()
        }),
    },
    Family {
        name: "skill_runner_execution_duration_seconds",
        labels: &[],
        help: "Wall time of the sandboxed command.",
        read: Read::Histogram(|m| &m.duration),
    },
    Family {
        name: "skill_runner_queue_wait_seconds",
        labels: &[],
        help: "Time admitted executions waited for a run slot.",
        read: Read::Histogram(|m| &m.queue_wait),
    },
    Family {
        name: "skill_runner_staging_seconds",
        labels: &[],
        help: "Time spent staging snapshot roots.",
        read: Read::Histogram(|m| &m.staging),
    },
    Family {
        name: "skill_runner_staging_bytes_total",
        labels: &[],
        help: "Bytes staged into snapshot roots.",
        read: Read::Counter(|m| load(&m.staging_bytes)),
    },
    Family {
        name: "skill_runner_executions_running",
        labels: &[],
        help: "Executions running now.",
        read: Read::Gauge(|_, now| now.running as i64),
    },
    Family {
        name: "skill_runner_executions_queued",
        labels: &[],
        help: "Executions waiting for a run slot.",
        read: Read::Gauge(|_, now| now.queued as i64),
    },
    Family {
        name: "skill_runner_admissions_refused_total",
        labels: &["reason"],
        help: "Execution requests refused at admission.",
        read: Read::LabelledCounter(|m| {
            vec![
                (vec!["busy".to_owned()], load(&m.refused_busy)),
                (vec!["draining".to_owned()], load(&m.refused_draining)),
            ]
        }),
    },
    Family {
        name: "skill_runner_packages_published_total",
        labels: &[],
        help: "Skills published through POST /v1/skill-packages.",
        read: Read::Counter(|m| load(&m.published)),
    },
    Family {
        name: "skill_runner_store_records_skipped_total",
        labels: &[],
        help: "Unreadable binding records skipped by store listings (each logged at ERROR).",
        read: Read::Counter(|_| crate::package::store::skipped_records()),
    },
    Family {
        name: "skill_runner_http_responses_total",
        labels: &["code"],
        help: "HTTP responses by status code.",
        read: Read::LabelledCounter(|m| {
            let map = m.responses.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .map(|(code, n)| (vec![code.to_string()], *n))
                .collect()
        }),
    },
    Family {
        name: "skill_runner_connections_open",
        labels: &[],
        help: "Client connections open now.",
        read: Read::Gauge(|m, _| m.connections.load(Ordering::Relaxed)),
    },
    Family {
        name: "skill_runner_network_requests_total",
        labels: &["host", "allowed"],
        help: "Requests through the network proxy, per host, allowed or refused.",
        read: Read::LabelledCounter(|m| {
            let map = m.network.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .map(|((host, allowed), n)| (vec![host.clone(), allowed.to_string()], *n))
                .collect()
        }),
    },
    Family {
        name: "skill_runner_network_requests_dropped_total",
        labels: &[],
        help: "Proxy requests not listed in their result.",
        read: Read::Counter(|m| load(&m.network_dropped)),
    },
    Family {
        name: "skill_runner_data_dir_free_bytes",
        labels: &[],
        help: "Bytes free on the data dir's file system (-1: cannot be read).",
        read: Read::Gauge(|m, _| m.data_dir_free.load(Ordering::Relaxed)),
    },
];

/// A label value escaped for the text format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
