//! Unit tests of the job document: every refusal, table-driven, and the
//! accepted forms.

use super::*;

fn job(json: &str) -> Result<Job, JobError> {
    Job::from_json(json.as_bytes(), Some(Path::new("/jobs")))
}

const H: &str = "b5bcc438dc1139bc1aadc8ad73d72b6717577bf8b39c13207e5f9f583582227b";

#[test]
fn argv_over_the_kernel_or_bubblewrap_limits_is_refused() {
    let many = serde_json::json!({"argv": vec!["x"; MAX_ARGV + 1]}).to_string();
    let e = job(&many).unwrap_err().to_string();
    assert!(e.contains("at most 8192"), "{e}");
    assert!(job(&serde_json::json!({"argv": vec!["x"; MAX_ARGV]}).to_string()).is_ok());
    let long = "y".repeat(MAX_ARG_BYTES + 1);
    let e = job(&serde_json::json!({"argv": ["echo", long]}).to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argv element 1") && e.contains("per argument"),
        "{e}"
    );
    let e = job(&serde_json::json!({"argv": ["true"], "env": {"BIG": long}}).to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("env BIG"), "{e}");
    // Many elements that each fit, but not together.
    let piece = "z".repeat(100_000);
    let n = arg_max() / 100_000 + 1;
    let e = job(&serde_json::json!({"argv": vec![piece; n]}).to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ARG_MAX"), "{e}");
}

#[test]
fn minimal_job_gets_profile_defaults() {
    let j = job(r#"{"argv":["true"]}"#).unwrap();
    assert!(j.generated_id);
    assert_eq!(j.limits.timeout_ms, 30000);
    assert_eq!(j.limits.cpu_ms, None);
    assert_eq!(j.cwd, "");
}

#[test]
fn a_session_id_is_accepted() {
    let j = job(r#"{"argv":["true"],"session":"ses-0123456789abcdef0123456789abcdef"}"#).unwrap();
    assert_eq!(
        j.session.as_deref(),
        Some("ses-0123456789abcdef0123456789abcdef")
    );
    assert!(j.skills.is_empty());
}

#[test]
fn a_session_is_unresolved_until_its_bindings_are_given() {
    let mut j =
        job(r#"{"argv":["true"],"session":"ses-0123456789abcdef0123456789abcdef"}"#).unwrap();
    assert_eq!(
        j.unresolved_session(),
        Some("ses-0123456789abcdef0123456789abcdef")
    );
    let pin = Binding {
        id: "hello".into(),
        revision: 1,
        version: "1".into(),
        hash: H.into(),
    };
    j.resolve_session(vec![pin.clone()]);
    assert_eq!(j.unresolved_session(), None);
    assert_eq!(j.bindings(), [pin]);
    assert!(j.skills.iter().all(|s| s.path.is_none()));
    // A job naming no session has nothing to resolve.
    assert_eq!(
        job(r#"{"argv":["true"]}"#).unwrap().unresolved_session(),
        None
    );
}

#[test]
fn paths_resolve_against_the_job_folder() {
    let j = job(&format!(
        r#"{{"argv":["true"],"workspace":"ws","skills":[{{"id":"hello","revision":1,"version":"1","hash":"{H}","path":"../skills/hello"}}]}}"#
    ))
    .unwrap();
    assert_eq!(j.workspace.as_deref(), Some(Path::new("/jobs/ws")));
    assert_eq!(
        j.skills[0].path.as_deref(),
        Some(Path::new("/jobs/../skills/hello"))
    );
    let e = Job::from_json(br#"{"argv":["true"],"workspace":"ws"}"#, None).unwrap_err();
    assert!(matches!(e, JobError::RelativePath { .. }));
}

#[test]
fn a_network_allowlist_parses() {
    let j = job(r#"{"argv":["true"],"network":"none"}"#).unwrap();
    assert_eq!(j.network, Network::None);
    let j = job(
        r#"{"argv":["true"],"network":{"allow":["PyPI.org","*.pythonhosted.org","10.0.0.0/8:8080"],"private":true}}"#,
    )
    .unwrap();
    let a = j.network.allowlist().unwrap();
    assert!(a.private);
    let shown: Vec<String> = a.entries.iter().map(|e| e.to_string()).collect();
    assert_eq!(shown, ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8:8080"]);
    // Without an allowlist the proxy variables are the job's own.
    assert!(job(r#"{"argv":["true"],"env":{"HTTP_PROXY":"x"}}"#).is_ok());
    let many: Vec<String> = (0..=policy::MAX_ENTRIES)
        .map(|i| format!("h{i}.org"))
        .collect();
    let e = job(&format!(
        r#"{{"argv":["true"],"network":{{"allow":{}}}}}"#,
        serde_json::to_string(&many).unwrap()
    ))
    .unwrap_err();
    assert!(e.to_string().contains("at most 256"), "{e}");
}

#[test]
fn bad_jobs_are_refused_with_a_reason() {
    let cases = [
        (r#"{"argv":["true"],"extra":1}"#, "unknown field"),
        (r#"{"argv":[]}"#, "argv is empty"),
        (r#"{"argv":"true"}"#, "invalid type"),
        (r#"{"argv":["true"],"env":{"PATH":"/x"}}"#, "reserved"),
        (r#"{"argv":["true"],"env":{"LD_PRELOAD":"/x"}}"#, "reserved"),
        (
            r#"{"argv":["true"],"env":{"BASH_FUNC_x%%":"() { :; }"}}"#,
            "not a valid",
        ),
        (
            r#"{"argv":["true"],"env":{"SCIENCEDISCOVERY_SKILLS_DIR":"/x"}}"#,
            "reserved",
        ),
        (r#"{"argv":["true"],"env":{"1X":"y"}}"#, "not a valid"),
        (r#"{"argv":["true"],"cwd":"../x"}"#, "cwd"),
        (r#"{"argv":["true"],"cwd":"/etc"}"#, "cwd"),
        (r#"{"argv":["true"],"execution_id":"a b"}"#, "execution_id"),
        (r#"{"argv":["true"],"network":"host"}"#, "network"),
        (r#"{"argv":["true"],"network":7}"#, "network must be"),
        (
            r#"{"argv":["true"],"network":{"allow":["a.org"],"privat":true}}"#,
            "network: unknown field `privat`",
        ),
        (
            r#"{"argv":["true"],"network":{"private":true}}"#,
            "network: missing field `allow`",
        ),
        (
            r#"{"argv":["true"],"network":{"allow":[]}}"#,
            "network.allow is empty",
        ),
        (
            r#"{"argv":["true"],"network":{"allow":["pypi.org","a.*.org"]}}"#,
            "network.allow[1] \"a.*.org\" has a wildcard",
        ),
        (
            r#"{"argv":["true"],"network":{"allow":["pypi.org:99999"]}}"#,
            "has port \"99999\"",
        ),
        (
            r#"{"argv":["true"],"network":{"allow":["10.0.0.1/8"]}}"#,
            "write the block's first address, 10.0.0.0/8",
        ),
        (
            r#"{"argv":["true"],"network":{"allow":["a.org"]},"env":{"https_proxy":"x"}}"#,
            "set by the runner",
        ),
        (r#"{"argv":["true"],"session":"s1"}"#, "not a session id"),
        (
            r#"{"argv":["true"],"session":"ses-0123456789abcdef0123456789abcdef","skills":[{"id":"x","revision":1,"version":"1","hash":"b5bcc438dc1139bc1aadc8ad73d72b6717577bf8b39c13207e5f9f583582227b"}]}"#,
            "one or the other",
        ),
        (r#"{"argv":["true"],"profile":"strict"}"#, "built-in"),
        (
            r#"{"argv":["true"],"limits":{"memory_bytes":1}}"#,
            "below its minimum of 16777216",
        ),
        (
            r#"{"argv":["true"],"limits":{"pids":3}}"#,
            "below its minimum of 8",
        ),
        (
            r#"{"argv":["true"],"limits":{"file_size_bytes":10}}"#,
            "below its minimum of 4096",
        ),
        (
            r#"{"argv":["true"],"limits":{"pids":18446744073709551615}}"#,
            "pids 18446744073709551615 is above its maximum of 4194304",
        ),
        (
            r#"{"argv":["true"],"limits":{"tmp_bytes":9223372036854775808}}"#,
            "tmp_bytes 9223372036854775808 is above its maximum",
        ),
        (
            r#"{"argv":["true"],"limits":{"disk_bytes":18446744073709551615}}"#,
            "disk_bytes 18446744073709551615 is above its maximum",
        ),
        (
            r#"{"argv":["true"],"limits":{"timeout_ms":0}}"#,
            "timeout_ms",
        ),
        (
            r#"{"argv":["true"],"limits":{"walltime":5}}"#,
            "unknown field",
        ),
        (
            r#"{"argv":["true"],"skills":[{"id":"x","revision":1,"version":"1","hash":"ABC"}]}"#,
            "64 lowercase hex",
        ),
        (
            r#"{"argv":["true"],"skills":[{"id":"Bad","revision":1,"version":"1","hash":"x"}]}"#,
            "ids match",
        ),
        ("{not json", "not valid JSON"),
    ];
    for (json, needle) in cases {
        let e = job(json).expect_err(json).to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    let upper = H.to_uppercase();
    let e = job(&format!(
        r#"{{"argv":["true"],"skills":[{{"id":"x","revision":1,"version":"1","hash":"{upper}"}}]}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("lowercase"), "{e}");
    let e = job(&format!(
        r#"{{"argv":["true"],"skills":[{{"id":"x","revision":1,"version":"1","hash":"{H}"}},{{"id":"x","revision":2,"version":"1","hash":"{H}"}}]}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("selected twice"), "{e}");
}

/// Found by fuzzing (target `job`): a refusal that quotes the job (an
/// unknown key, a profile path) is one line even when the job holds a
/// newline or a carriage return there.
#[test]
fn refusals_that_quote_the_job_are_one_line() {
    for json in [
        r#"{"argv":["true"],"wut\n":1}"#,
        r#"{"argv":["true"],"profile":"p\rofiles/x.toml"}"#,
        r#"{"argv":["true"],"profile":"x/\n.toml"}"#,
    ] {
        let e = job(json).expect_err(json).to_string();
        assert!(!e.contains(['\n', '\r']), "{json}: {e:?}");
    }
    let e = job(r#"{"argv":["true"],"wut\n":1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `wut\\n`"), "{e}");
}
