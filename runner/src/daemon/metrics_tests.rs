//! Unit tests of `metrics.rs` (included from there as its `tests` module).

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// One proxied request to port 443, for the network counters.
fn req(host: &str, allowed: bool) -> crate::sandbox::net::RequestInfo {
    crate::sandbox::net::RequestInfo {
        host: host.into(),
        port: 443,
        allowed,
        reason: None,
        sent_bytes: 0,
        received_bytes: 0,
    }
}

/// A state that touches every family: every status, both refusals,
/// two response codes, a host that needs escaping.
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
    m.network(&crate::sandbox::net::NetworkInfo {
        requests: vec![req("pypi.org", true), req("x\\\"\n", false)],
        dropped: 5,
    });
    m.data_dir_free(Some(1 << 30));
    m
}

/// One sample: its name, labels (in order) and value.
type Sample = (String, Vec<(String, String)>, f64);

/// One family as a strict reader of the text format 0.0.4 finds it.
#[derive(Debug, Default)]
struct Parsed {
    help: String,
    kind: String,
    samples: Vec<Sample>,
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || (colon && c == b':'))
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || (colon && c == b':'))
}

/// Reads the exposition as Prometheus' strict text parser does and fails
/// on anything it would refuse: a sample before its family's `# TYPE`, a
/// family declared twice, a sample name the type does not allow, a bad
/// name, label, escape or value, a series twice, buckets that are not
/// cumulative or whose `+Inf` is not the count, a missing final newline.
fn parse(text: &str) -> Result<BTreeMap<String, Parsed>, String> {
    if !text.ends_with('\n') {
        return Err("no final newline".into());
    }
    let mut families: BTreeMap<String, Parsed> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut series = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let (word, rest) = rest.split_once(' ').ok_or(format!("bad comment {line}"))?;
            let (name, value) = rest.split_once(' ').ok_or(format!("bad comment {line}"))?;
            if !is_name(name, true) {
                return Err(format!("bad name {name}"));
            }
            match word {
                "HELP" => {
                    if families.contains_key(name) && current.as_deref() != Some(name) {
                        return Err(format!("{name} declared twice"));
                    }
                    let f = families.entry(name.into()).or_default();
                    if !f.help.is_empty() {
                        return Err(format!("two HELP lines for {name}"));
                    }
                    f.help = value.into();
                }
                "TYPE" => {
                    let f = families.entry(name.into()).or_default();
                    if !f.kind.is_empty() || !f.samples.is_empty() {
                        return Err(format!("TYPE of {name} twice or after its samples"));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&value) {
                        return Err(format!("bad type {value}"));
                    }
                    f.kind = value.into();
                }
                _ => return Err(format!("unknown comment {line}")),
            }
            current = Some(name.into());
            continue;
        }
        let (series_text, value) = line.rsplit_once(' ').ok_or(format!("no value: {line}"))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| format!("bad value {v}"))?,
        };
        let (name, labels) = match series_text.split_once('{') {
            Some((n, rest)) => (
                n,
                rest.strip_suffix('}')
                    .ok_or(format!("unclosed labels: {line}"))?,
            ),
            None => (series_text, ""),
        };
        if !is_name(name, true) {
            return Err(format!("bad sample name {name}"));
        }
        let mut pairs = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (label, after) = rest
                .split_once("=\"")
                .ok_or(format!("bad labels: {line}"))?;
            if !is_name(label, false) || label.starts_with("__") {
                return Err(format!("bad label name {label}"));
            }
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("bad escape {other:?}: {line}")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unclosed label value: {line}")),
                }
            };
            pairs.push((label.to_owned(), value));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        let family = current
            .clone()
            .ok_or(format!("sample before any TYPE: {line}"))?;
        let f = families.get_mut(&family).unwrap();
        let allowed: &[&str] = match f.kind.as_str() {
            "histogram" => &["_bucket", "_sum", "_count"],
            "" => return Err(format!("sample before its TYPE: {line}")),
            _ => &[""],
        };
        if !allowed
            .iter()
            .any(|s| name.strip_prefix(family.as_str()) == Some(*s))
        {
            return Err(format!("sample {name} does not belong to {family}"));
        }
        if !series.insert(series_text.to_owned()) {
            return Err(format!("series twice: {series_text}"));
        }
        f.samples.push((name.to_owned(), pairs, value));
    }
    for (name, f) in &families {
        if f.kind == "histogram" {
            let buckets: Vec<f64> = f
                .samples
                .iter()
                .filter(|(n, ..)| n.ends_with("_bucket"))
                .map(|(.., v)| *v)
                .collect();
            if buckets.windows(2).any(|w| w[0] > w[1]) {
                return Err(format!("{name}: buckets are not cumulative"));
            }
            let count = f.samples.iter().find(|(n, ..)| n.ends_with("_count"));
            if buckets.last().copied() != count.map(|(.., v)| *v) {
                return Err(format!("{name}: +Inf is not the count"));
            }
        }
    }
    Ok(families)
}

/// The whole exposition is valid for a strict reader, and that reader
/// finds every family of the table with its type, help and labels, in
/// the table's order.
#[test]
fn the_exposition_is_valid_text_format_with_every_family() {
    let text = known().render(4, 7);
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let declared: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let table: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
    assert_eq!(declared, table);
    for f in FAMILIES {
        let p = &parsed[f.name];
        assert_eq!(p.kind, f.kind.as_str(), "{}", f.name);
        assert_eq!(p.help, f.help, "{}", f.name);
        for (name, labels, _) in &p.samples {
            let names: Vec<&str> = labels
                .iter()
                .map(|(l, _)| l.as_str())
                .filter(|l| *l != "le")
                .collect();
            assert_eq!(names, f.labels, "{name}");
        }
    }
}

/// A strict reader refuses what the text format forbids (so the test
/// above can fail).
#[test]
fn the_strict_reader_refuses_broken_text() {
    for bad in [
        "x 1\n",
        "# TYPE x counter\nx 1",
        "# TYPE x counter\ny 1\n",
        "# TYPE x counter\nx{a=\"\\q\"} 1\n",
        "# TYPE x counter\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",
        "# TYPE x gauge\nx one\n",
        "# TYPE x histogram\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"+Inf\"} 1\nx_count 1\n",
        "# TYPE x gauge\n# TYPE x gauge\nx 1\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

fn value(families: &BTreeMap<String, Parsed>, family: &str, labels: &[(&str, &str)]) -> f64 {
    let f = &families[family];
    f.samples
        .iter()
        .find(|(n, l, _)| {
            n == family
                && l.len() == labels.len()
                && l.iter().zip(labels).all(|(a, b)| a.0 == b.0 && a.1 == b.1)
        })
        .unwrap_or_else(|| panic!("{family} {labels:?} in {:?}", f.samples))
        .2
}

/// What each event counts, read back by the strict reader (label values
/// unescaped).
#[test]
fn counts_what_happened() {
    let p = parse(&known().render(4, 7)).unwrap();
    let total = "skill_runner_executions_total";
    assert_eq!(value(&p, total, &[("status", "exited")]), 2.0);
    assert_eq!(value(&p, total, &[("status", "failed")]), 1.0);
    let refused = "skill_runner_admissions_refused_total";
    assert_eq!(value(&p, refused, &[("reason", "draining")]), 2.0);
    let codes = "skill_runner_http_responses_total";
    assert_eq!(value(&p, codes, &[("code", "200")]), 2.0);
    assert_eq!(value(&p, codes, &[("code", "404")]), 1.0);
    let net = "skill_runner_network_requests_total";
    assert_eq!(
        value(&p, net, &[("host", "x\\\"\n"), ("allowed", "false")]),
        1.0
    );
    assert_eq!(
        value(&p, net, &[("host", "pypi.org"), ("allowed", "true")]),
        1.0
    );
    for (family, v) in [
        ("skill_runner_network_requests_dropped_total", 5.0),
        ("skill_runner_staging_bytes_total", 4096.0),
        ("skill_runner_executions_running", 4.0),
        ("skill_runner_executions_queued", 7.0),
        ("skill_runner_packages_published_total", 3.0),
        ("skill_runner_connections_open", 1.0),
        ("skill_runner_data_dir_free_bytes", (1u64 << 30) as f64),
        ("skill_runner_execution_duration_seconds_count", 7.0),
        ("skill_runner_execution_duration_seconds_sum", 400.18),
        ("skill_runner_queue_wait_seconds_sum", 0.0015),
        ("skill_runner_staging_seconds_count", 1.0),
    ] {
        let base = family
            .strip_suffix("_count")
            .or(family.strip_suffix("_sum"))
            .unwrap_or(family);
        let s = p[base].samples.iter().find(|(n, ..)| n == family).unwrap();
        assert!((s.2 - v).abs() < 1e-9, "{family} = {} not {v}", s.2);
    }
    let d = &p["skill_runner_execution_duration_seconds"].samples;
    let bucket = |le: &str| {
        d.iter()
            .find(|(_, l, _)| l[0].1 == le)
            .map(|(.., v)| *v)
            .unwrap()
    };
    assert_eq!(bucket("0.025"), 0.0);
    assert_eq!(bucket("0.05"), 6.0);
    assert_eq!(bucket("300"), 6.0);
    assert_eq!(bucket("+Inf"), 7.0);
    // Rejected executions are counted, but never ran: no duration.
    let m = Metrics::default();
    m.execution(Status::Rejected, Duration::from_secs(1));
    let p = parse(&m.render(0, 0)).unwrap();
    assert_eq!(value(&p, total, &[("status", "rejected")]), 1.0);
    assert_eq!(value(&p, total, &[("status", "exited")]), 0.0);
}

/// The build and the process's own figures: the standard `process_*`
/// metrics as Prometheus' client libraries name them, read from this
/// process.
#[test]
fn reports_the_build_and_the_process() {
    let p = parse(&Metrics::default().render(0, 0)).unwrap();
    let build = &p["skill_runner_build_info"].samples[0];
    assert_eq!(
        build.1[0],
        ("version".into(), env!("CARGO_PKG_VERSION").into())
    );
    assert_eq!(build.2, 1.0);
    let read = |f: &str| p[f].samples[0].2;
    assert!(read("process_cpu_seconds_total") > 0.0);
    if cfg!(target_os = "linux") {
        let rss = read("process_resident_memory_bytes");
        assert!(
            rss > 1e6 && read("process_virtual_memory_bytes") >= rss,
            "{rss}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = read("process_start_time_seconds");
        // This test process started before now, and today.
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} {now}"
        );
        // At least stdin, stdout and stderr.
        assert!(read("process_open_fds") >= 3.0);
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .unwrap()
            .0;
        assert_eq!(read("process_max_fds"), limit as f64);
    }
}

/// Past the cap on distinct hosts, new hosts share one label; hosts
/// already counted keep theirs.
#[test]
fn hosts_past_the_cap_share_one_label() {
    let m = Metrics::default();
    let many: Vec<_> = (0..2 * MAX_HOSTS)
        .map(|i| req(&format!("h{i}.org"), true))
        .collect();
    m.network(&crate::sandbox::net::NetworkInfo {
        requests: many,
        dropped: 0,
    });
    m.network(&crate::sandbox::net::NetworkInfo {
        requests: vec![req("new.org", true), req("h1.org", true)],
        dropped: 0,
    });
    let p = parse(&m.render(0, 0)).unwrap();
    let net = "skill_runner_network_requests_total";
    assert_eq!(
        value(&p, net, &[("host", OTHER_HOST), ("allowed", "true")]),
        1.0
    );
    assert_eq!(
        value(&p, net, &[("host", "h1.org"), ("allowed", "true")]),
        2.0
    );
}

/// The user's list of metrics names each family with its labels and type,
/// in the order `/metrics` renders them.
#[test]
fn docs_list_every_family() {
    let docs = include_str!("../../../docs/daemon.md");
    let listed: Vec<&str> = docs
        .lines()
        .filter(|l| l.starts_with("| `skill_runner_") || l.starts_with("| `process_"))
        .collect();
    assert_eq!(listed.len(), FAMILIES.len(), "{listed:#?}");
    for (line, f) in listed.iter().zip(FAMILIES) {
        let labels = if f.labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", f.labels.join(","))
        };
        let row = format!("| `{}{labels}` | {} |", f.name, f.kind.as_str());
        assert!(line.starts_with(&row), "{line} should start with {row}");
    }
}
