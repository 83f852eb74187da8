//! Daemon metrics, rendered in the Prometheus text format 0.0.4
//! (`GET /metrics`) by the `prometheus-client` crate.
//!
//! Counters, gauges and histograms are the crate's types, updated where
//! the event happens and registered once, in the order `/metrics` renders
//! them (`FAMILIES` names them, their labels and types, for the tests and
//! docs/daemon.md). Values that describe state are read at render time so
//! they can never drift: running and queued come from the registry, the
//! store's skipped records from the store, and the standard `process_*`
//! metrics from `/proc/self` ([`Process`]), which the crate has no
//! collector for. `skill_runner_build_info` says which build answers.
//!
//! The crate does the encoding: names (a counter's `_total`), label
//! escaping, float spelling and the `# HELP`/`# TYPE` lines, so the text
//! stays valid for every scraper.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::exec::result::Status;

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Result statuses in the order they are created (all of them exist from
/// the start, at 0).
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

/// A metric's type, as its `# TYPE` line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family of `/metrics`: its full name (a counter's with `_total`),
/// label names, type and help, in render order.
#[derive(Debug)]
pub struct FamilyInfo {
    pub name: &'static str,
    pub labels: &'static [&'static str],
    pub kind: Kind,
    pub help: &'static str,
}

const fn family(
    name: &'static str,
    labels: &'static [&'static str],
    kind: Kind,
    help: &'static str,
) -> FamilyInfo {
    FamilyInfo {
        name,
        labels,
        kind,
        help,
    }
}

/// Every family `/metrics` renders, in order. [`Metrics::default`]
/// registers them from this table (a counter's name without `_total`,
/// which the crate adds), so the two cannot disagree.
pub const FAMILIES: &[FamilyInfo] = &[
    family(
        "skill_runner_executions_total",
        &["status"],
        Kind::Counter,
        "Finished executions by result status.",
    ),
    family(
        "skill_runner_execution_duration_seconds",
        &[],
        Kind::Histogram,
        "Wall time of the sandboxed command.",
    ),
    family(
        "skill_runner_queue_wait_seconds",
        &[],
        Kind::Histogram,
        "Time admitted executions waited for a run slot.",
    ),
    family(
        "skill_runner_staging_seconds",
        &[],
        Kind::Histogram,
        "Time spent staging snapshot roots.",
    ),
    family(
        "skill_runner_staging_bytes_total",
        &[],
        Kind::Counter,
        "Bytes staged into snapshot roots.",
    ),
    family(
        "skill_runner_executions_running",
        &[],
        Kind::Gauge,
        "Executions running now.",
    ),
    family(
        "skill_runner_executions_queued",
        &[],
        Kind::Gauge,
        "Executions waiting for a run slot.",
    ),
    family(
        "skill_runner_admissions_refused_total",
        &["reason"],
        Kind::Counter,
        "Execution requests refused at admission.",
    ),
    family(
        "skill_runner_packages_published_total",
        &[],
        Kind::Counter,
        "Skills published through POST /v1/skill-packages.",
    ),
    family(
        "skill_runner_pulls_total",
        &["outcome"],
        Kind::Counter,
        "Pulls from registries for jobs' sources, one per digest however many jobs waited, landed or failed.",
    ),
    family(
        "skill_runner_pulled_blobs_total",
        &[],
        Kind::Counter,
        "Blobs read from registries by pulls (manifests included).",
    ),
    family(
        "skill_runner_pulled_bytes_total",
        &[],
        Kind::Counter,
        "Bytes of the blobs read from registries by pulls.",
    ),
    family(
        "skill_runner_http_responses_total",
        &["code"],
        Kind::Counter,
        "HTTP responses by status code.",
    ),
    family(
        "skill_runner_connections_open",
        &[],
        Kind::Gauge,
        "Client connections open now.",
    ),
    family(
        "skill_runner_network_requests_total",
        &["host", "allowed"],
        Kind::Counter,
        "Requests through the network proxy, per host, allowed or refused.",
    ),
    family(
        "skill_runner_network_requests_dropped_total",
        &[],
        Kind::Counter,
        "Proxy requests not listed in their result.",
    ),
    family(
        "skill_runner_data_dir_free_bytes",
        &[],
        Kind::Gauge,
        "Bytes free on the data dir's file system (-1: cannot be read).",
    ),
    family(
        "skill_runner_prepared_sandbox_uses_total",
        &["outcome"],
        Kind::Counter,
        "Session executions by how they got their sandbox: hit (a prepared one) or miss (built for it).",
    ),
    family(
        "skill_runner_prepared_sandboxes_discarded_total",
        &["reason"],
        Kind::Counter,
        "Prepared sandboxes discarded unused, by reason.",
    ),
    family(
        "skill_runner_prepared_sandboxes",
        &[],
        Kind::Gauge,
        "Prepared sandboxes waiting for a command now.",
    ),
    family(
        "skill_runner_prepared_sandboxes_bytes",
        &[],
        Kind::Gauge,
        "Host memory (PSS) the waiting prepared sandboxes held when each was made.",
    ),
    family(
        "skill_runner_build_info",
        &["version", "api_version", "os", "arch"],
        Kind::Gauge,
        "The build answering: always 1, its facts in the labels.",
    ),
    // Read at render time, by the collector.
    family(
        "skill_runner_store_records_skipped_total",
        &[],
        Kind::Counter,
        "Unreadable binding records skipped by store listings (each logged at ERROR).",
    ),
    family(
        "skill_runner_sandbox_starts_total",
        &["namespace"],
        Kind::Counter,
        "Sandboxes started, by the mount namespace bubblewrap started in: template (the daemon's, holding only what sandboxes bind) or own (the daemon's own).",
    ),
    family(
        "skill_runner_template_namespaces_total",
        &[],
        Kind::Counter,
        "Template mount namespaces made (one at start, then one after each change of the host's mount table that a launch saw).",
    ),
    family(
        "process_cpu_seconds_total",
        &[],
        Kind::Counter,
        "Total user and system CPU time spent in seconds.",
    ),
    family(
        "process_resident_memory_bytes",
        &[],
        Kind::Gauge,
        "Resident memory size in bytes.",
    ),
    family(
        "process_virtual_memory_bytes",
        &[],
        Kind::Gauge,
        "Virtual memory size in bytes.",
    ),
    family(
        "process_open_fds",
        &[],
        Kind::Gauge,
        "Number of open file descriptors.",
    ),
    family(
        "process_max_fds",
        &[],
        Kind::Gauge,
        "Maximum number of open file descriptors.",
    ),
    family(
        "process_start_time_seconds",
        &[],
        Kind::Gauge,
        "Start time of the process since unix epoch in seconds.",
    ),
];

/// A fixed-bucket histogram of durations, in seconds.
#[derive(Debug, Clone)]
pub struct Histogram(prometheus_client::metrics::histogram::Histogram);

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram(prometheus_client::metrics::histogram::Histogram::new(
            BUCKETS,
        ))
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// Why an admission was refused, for the metric label.
#[derive(Debug, Clone, Copy)]
pub enum Refusal {
    Busy,
    Draining,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabel {
    host: String,
    allowed: bool,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: &'static str,
    api_version: &'static str,
    os: &'static str,
    arch: &'static str,
}

/// Everything `/metrics` reports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    executions: Family<StatusLabel, Counter>,
    pub duration: Histogram,
    pub queue_wait: Histogram,
    pub staging: Histogram,
    staging_bytes: Counter,
    running: Gauge,
    queued: Gauge,
    refused: Family<ReasonLabel, Counter>,
    published: Counter,
    pulls: Family<OutcomeLabel, Counter>,
    pulled_blobs: Counter,
    pulled_bytes: Counter,
    responses: Family<CodeLabel, Counter>,
    connections: Gauge,
    network: Family<HostLabel, Counter>,
    /// Distinct (host, allowed) pairs counted by name, for the cap.
    hosts: Mutex<usize>,
    network_dropped: Counter,
    /// Bytes free for the daemon on the data dir's file system, as last
    /// read (by health or `/metrics`); -1 when unknown.
    data_dir_free: Gauge,
    prepared_uses: Family<OutcomeLabel, Counter>,
    prepared_discarded: Family<ReasonLabel, Counter>,
    prepared_waiting: Gauge,
    prepared_bytes: Gauge,
    /// Renders, one at a time: the registry's gauges are set, then read.
    render: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            executions: Family::default(),
            duration: Histogram::default(),
            queue_wait: Histogram::default(),
            staging: Histogram::default(),
            staging_bytes: Counter::default(),
            running: Gauge::default(),
            queued: Gauge::default(),
            refused: Family::default(),
            published: Counter::default(),
            pulls: Family::default(),
            pulled_blobs: Counter::default(),
            pulled_bytes: Counter::default(),
            responses: Family::default(),
            connections: Gauge::default(),
            network: Family::default(),
            hosts: Mutex::new(0),
            network_dropped: Counter::default(),
            data_dir_free: Gauge::default(),
            prepared_uses: Family::default(),
            prepared_discarded: Family::default(),
            prepared_waiting: Gauge::default(),
            prepared_bytes: Gauge::default(),
            render: Mutex::new(()),
        };
        for (_, status) in STATUSES {
            let _ = m.executions.get_or_create(&StatusLabel { status });
        }
        for reason in ["busy", "draining"] {
            let _ = m.refused.get_or_create(&ReasonLabel { reason });
        }
        for outcome in ["hit", "miss"] {
            let _ = m.prepared_uses.get_or_create(&OutcomeLabel { outcome });
        }
        for reason in PREPARED_DISCARDS {
            let _ = m.prepared_discarded.get_or_create(&ReasonLabel { reason });
        }
        for outcome in ["landed", "failed"] {
            let _ = m.pulls.get_or_create(&OutcomeLabel { outcome });
        }
        let build = Info::new(BuildLabel {
            version: env!("CARGO_PKG_VERSION"),
            api_version: super::wire::API_VERSION,
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        });
        let mut registry = m.registry;
        let mut names = FAMILIES
            .iter()
            .map(|f| (registered_name(f), strip_period(f.help)));
        // In the table's order; the collector's families are its last.
        macro_rules! register {
            ($($metric:expr),* $(,)?) => {
                $(if let Some((name, help)) = names.next() {
                    registry.register(name, help, $metric);
                })*
            };
        }
        register!(
            m.executions.clone(),
            m.duration.0.clone(),
            m.queue_wait.0.clone(),
            m.staging.0.clone(),
            m.staging_bytes.clone(),
            m.running.clone(),
            m.queued.clone(),
            m.refused.clone(),
            m.published.clone(),
            m.pulls.clone(),
            m.pulled_blobs.clone(),
            m.pulled_bytes.clone(),
            m.responses.clone(),
            m.connections.clone(),
            m.network.clone(),
            m.network_dropped.clone(),
            m.data_dir_free.clone(),
            m.prepared_uses.clone(),
            m.prepared_discarded.clone(),
            m.prepared_waiting.clone(),
            m.prepared_bytes.clone(),
            build,
        );
        registry.register_collector(Box::new(Process));
        Metrics { registry, ..m }
    }
}

/// The name a family is registered under: the crate adds `_total` to a
/// counter's and `_info` to an info's.
fn registered_name(f: &FamilyInfo) -> &'static str {
    match f.kind {
        Kind::Counter => f.name.strip_suffix("_total").unwrap_or(f.name),
        _ => f.name.strip_suffix("_info").unwrap_or(f.name),
    }
}

/// The help as given to the crate, which adds the final period.
fn strip_period(help: &'static str) -> &'static str {
    help.strip_suffix('.').unwrap_or(help)
}

/// Why prepared sandboxes are discarded unused (each exists from the
/// start, at 0): what they were prepared from changed (the published root,
/// the `/etc` view, the environment, the profile or limits), they idled
/// past the bound, their session ended, their bubblewrap died, the
/// daemon stops, or one just made took the pool past its memory bound.
pub const PREPARED_DISCARDS: [&str; 6] = [
    "changed",
    "idle",
    "session_ended",
    "died",
    "shutdown",
    "memory",
];

impl Metrics {
    /// Counts a session execution's use of a prepared sandbox.
    pub fn prepared_use(&self, hit: bool) {
        let outcome = if hit { "hit" } else { "miss" };
        self.prepared_uses
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Counts prepared sandboxes discarded unused (`reason` one of
    /// [`PREPARED_DISCARDS`]).
    pub fn prepared_discarded(&self, reason: &'static str, n: u64) {
        self.prepared_discarded
            .get_or_create(&ReasonLabel { reason })
            .inc_by(n);
    }

    /// How many prepared sandboxes wait now, and the memory they hold.
    pub fn prepared_waiting(&self, (n, bytes): (usize, u64)) {
        self.prepared_waiting.set(n as i64);
        self.prepared_bytes.set(bytes as i64);
    }

    /// Counts a finished execution.
    pub fn execution(&self, status: Status, duration: Duration) {
        if let Some((_, status)) = STATUSES.iter().find(|(s, _)| *s == status) {
            self.executions.get_or_create(&StatusLabel { status }).inc();
        }
        if status != Status::Rejected {
            self.duration.observe(duration);
        }
    }

    pub fn staged(&self, bytes: u64, took: Duration) {
        self.staging_bytes.inc_by(bytes);
        self.staging.observe(took);
    }

    pub fn refused(&self, why: Refusal) {
        let reason = match why {
            Refusal::Busy => "busy",
            Refusal::Draining => "draining",
        };
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub fn published(&self, skills: u64) {
        self.published.inc_by(skills);
    }

    /// Counts one pull from a registry: landed or not, and what it read.
    pub fn pulled(&self, landed: bool, blobs: u64, bytes: u64) {
        let outcome = if landed { "landed" } else { "failed" };
        self.pulls.get_or_create(&OutcomeLabel { outcome }).inc();
        self.pulled_blobs.inc_by(blobs);
        self.pulled_bytes.inc_by(bytes);
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    /// Counts the proxy requests of a finished execution.
    pub fn network(&self, info: &crate::sandbox::net::NetworkInfo) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        for r in &info.requests {
            let known = *hosts < 2 * MAX_HOSTS
                || [r.allowed, !r.allowed].iter().any(|&allowed| {
                    self.network
                        .get(&HostLabel {
                            host: r.host.clone(),
                            allowed,
                        })
                        .is_some()
                });
            let label = HostLabel {
                host: if known {
                    r.host.clone()
                } else {
                    OTHER_HOST.into()
                },
                allowed: r.allowed,
            };
            if self.network.get(&label).is_none() {
                *hosts += 1;
            }
            self.network.get_or_create(&label).inc();
        }
        self.network_dropped.inc_by(info.dropped);
    }

    /// Records the data dir's free bytes (`None`: could not be read).
    pub fn data_dir_free(&self, bytes: Option<u64>) {
        let v = bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
        self.data_dir_free.set(v);
    }

    pub fn response(&self, code: u16) {
        self.responses.get_or_create(&CodeLabel { code }).inc();
    }

    /// The Prometheus text exposition; `running` and `queued` come from the
    /// registry.
    pub fn render(&self, running: usize, queued: usize) -> String {
        let _one = self.render.lock().unwrap_or_else(|e| e.into_inner());
        self.running.set(running as i64);
        self.queued.set(queued as i64);
        let mut out = String::with_capacity(8192);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// The families read at render time: the store's skipped records and the
/// daemon process's own figures (Linux: `/proc/self`; elsewhere only CPU
/// time and the descriptor limit).
#[derive(Debug)]
struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = ProcessStats::read();
        let skipped = ConstCounter::new(crate::package::store::skipped_records());
        let families = &FAMILIES[FAMILIES.len() - 9..];
        let mut put =
            |i: usize, series: &[Series<'_>]| put_series(&mut encoder, &families[i], series);
        put(0, &[(None, &skipped)])?;
        #[cfg(target_os = "linux")]
        {
            let (template, own, made) = crate::sandbox::template::counts();
            let (template, own) = (ConstCounter::new(template), ConstCounter::new(own));
            put(
                1,
                &[
                    (Some(("namespace", "template")), &template),
                    (Some(("namespace", "own")), &own),
                ],
            )?;
            put(2, &[(None, &ConstCounter::new(made))])?;
        }
        put(3, &[(None, &ConstCounter::new(p.cpu_seconds))])?;
        for (i, v) in [
            (4, p.resident_bytes),
            (5, p.virtual_bytes),
            (6, p.open_fds),
            (7, p.max_fds),
        ] {
            if let Some(v) = v {
                put(i, &[(None, &ConstGauge::new(v))])?;
            }
        }
        if let Some(start) = p.start_time {
            put(8, &[(None, &ConstGauge::new(start))])?;
        }
        Ok(())
    }
}

/// One series of a family read at render time: its one label, if any,
/// and its value.
type Series<'a> = (Option<(&'a str, &'a str)>, &'a dyn EncodeMetric);

/// One family read at render time: its series, each with one label (or
/// one series without). The help is written as given, period included.
fn put_series(
    encoder: &mut DescriptorEncoder,
    f: &FamilyInfo,
    series: &[Series<'_>],
) -> Result<(), std::fmt::Error> {
    let Some((_, first)) = series.first() else {
        return Ok(());
    };
    let mut e = encoder.encode_descriptor(registered_name(f), f.help, None, first.metric_type())?;
    if let [(None, m)] = series {
        return m.encode(e);
    }
    for (label, m) in series {
        let label = label.ok_or(std::fmt::Error)?;
        m.encode(e.encode_family(&[label])?)?;
    }
    Ok(())
}

/// The daemon process's figures, as the standard `process_*` metrics give
/// them; `None` where this host cannot say.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: Option<i64>,
    pub virtual_bytes: Option<i64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
    pub start_time: Option<f64>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        use nix::sys::resource::{getrlimit, getrusage, Resource, UsageWho};
        let mut p = ProcessStats::default();
        if let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            p.cpu_seconds = secs(u.user_time()) + secs(u.system_time());
        }
        if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) {
            p.max_fds = Some(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        #[cfg(target_os = "linux")]
        linux::read(&mut p);
        p
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::ProcessStats;
    use nix::unistd::{sysconf, SysconfVar};

    /// Reads `/proc/self/stat` (sizes, start), `/proc/self/fd` and
    /// `/proc/stat` (boot time).
    pub fn read(p: &mut ProcessStats) {
        p.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as i64 - 1); // less the one read_dir holds
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return;
        };
        // The fields after the command name, which is in parentheses and
        // may hold anything: field 3 (state) is the first of them.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let page = sysconf(SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096) as u64;
        let ticks = sysconf(SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
        p.virtual_bytes = field(23).map(|v| v as i64);
        p.resident_bytes = field(24).map(|pages| (pages * page) as i64);
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        if let (Some(start), Some(boot)) = (field(22), boot) {
            p.start_time = Some(boot as f64 + start as f64 / ticks);
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
