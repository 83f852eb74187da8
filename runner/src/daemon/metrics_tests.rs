//! Unit tests of `metrics.rs` (included from there as its `tests` module).

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
    assert!(text.contains("skill_runner_network_requests_dropped_total 0\n"));
    assert!(text.ends_with("skill_runner_data_dir_free_bytes 0\n"));
}

#[test]
fn every_family_has_a_unique_name_and_fitting_labels() {
    let mut seen = std::collections::BTreeSet::new();
    for f in FAMILIES {
        assert!(seen.insert(f.name), "{} twice", f.name);
        assert!(f.name.starts_with("skill_runner_"), "{}", f.name);
        assert!(
            f.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}",
            f.name
        );
        assert!(!f.help.is_empty() && !f.help.contains('\n'), "{}", f.name);
        match f.read {
            Read::Counter(_) | Read::LabelledCounter(_) => {
                assert!(f.name.ends_with("_total"), "{}", f.name)
            }
            Read::Histogram(_) => assert!(f.name.ends_with("_seconds"), "{}", f.name),
            Read::Gauge(_) => {}
        }
        let labelled = matches!(f.read, Read::LabelledCounter(_));
        assert_eq!(labelled, !f.labels.is_empty(), "{}", f.name);
    }
}

#[test]
fn every_family_renders_help_then_type_then_its_samples() {
    let m = known();
    let text = m.render(4, 7);
    let mut lines = text.lines().peekable();
    for f in FAMILIES {
        let help = format!("# HELP {} {}", f.name, f.help);
        let kind = format!("# TYPE {} {}", f.name, f.read.kind());
        assert_eq!(lines.next(), Some(help.as_str()));
        assert_eq!(lines.next(), Some(kind.as_str()));
        while let Some(line) = lines.next_if(|l| !l.starts_with('#')) {
            let (series, _) = line.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let names: Vec<&str> = labels
                .trim_end_matches('}')
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| p.split('=').next().unwrap())
                .collect();
            if let Read::Histogram(_) = f.read {
                let suffix = name.strip_prefix(f.name).unwrap();
                assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}");
            } else {
                assert_eq!(name, f.name);
                assert_eq!(names, f.labels, "{line}");
            }
        }
    }
    assert_eq!(lines.next(), None);
}

/// The user's list of metrics names each family with its labels and type.
#[test]
fn docs_list_every_family() {
    let docs = include_str!("../../../docs/daemon.md");
    let listed: Vec<&str> = docs
        .lines()
        .filter(|l| l.starts_with("| `skill_runner_"))
        .collect();
    assert_eq!(listed.len(), FAMILIES.len(), "{listed:#?}");
    for (line, f) in listed.iter().zip(FAMILIES) {
        let labels = if f.labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", f.labels.join(","))
        };
        let row = format!("| `{}{labels}` | {} |", f.name, f.read.kind());
        assert!(line.starts_with(&row), "{line} should start with {row}");
    }
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
# HELP skill_runner_store_records_skipped_total Unreadable binding records skipped by store listings (each logged at ERROR).
# TYPE skill_runner_store_records_skipped_total counter
skill_runner_store_records_skipped_total 0
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
# HELP skill_runner_data_dir_free_bytes Bytes free on the data dir's file system (-1: cannot be read).
# TYPE skill_runner_data_dir_free_bytes gauge
skill_runner_data_dir_free_bytes 0
"#;

#[test]
fn renders_counters_and_cumulative_buckets() {
    let m = Metrics::default();
    m.execution(Status::Exited, Duration::from_millis(3));
    m.execution(Status::Exited, Duration::from_millis(700));
    m.execution(Status::Rejected, Duration::ZERO);
    m.staged(1234, Duration::from_millis(2));
    m.response(200);
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
    assert!(text
        .contains("skill_runner_network_requests_total{host=\"pypi.org\",allowed=\"true\"} 2\n"));
    assert!(text
        .contains("skill_runner_network_requests_total{host=\"evil.org\",allowed=\"false\"} 1\n"));
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
            text.contains(&format!("# TYPE {base} ")) || text.contains(&format!("# TYPE {name} ")),
            "{line}"
        );
    }
}
