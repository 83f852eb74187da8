//! Unit tests of `config.rs` (included from there as its `tests` module).

use super::*;

fn args() -> ServeArgs {
    ServeArgs::default()
}

#[test]
fn sizes_parse_with_binary_units() {
    assert_eq!(parse_size("1024"), Ok(1024));
    assert_eq!(parse_size("4KiB"), Ok(4096));
    assert_eq!(parse_size("64MiB"), Ok(64 << 20));
    assert_eq!(parse_size("1G"), Ok(1 << 30));
    assert!(parse_size("12 parsecs").is_err());
    assert!(parse_size("MiB").is_err());
}

#[test]
fn defaults_listen_on_a_socket_under_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::build(args(), Some(dir.path().to_owned()), None).unwrap();
    assert_eq!(
        c.listen,
        Listen::Unix(dir.path().join("run/skill-runner.sock"))
    );
    assert_eq!(
        c.roots,
        vec![dir.path().join("roots").canonicalize().unwrap()]
    );
    assert!(c.token.is_none());
    assert_eq!(c.job_body_limit, 4 << 20);
    assert_eq!(c.package_body_limit, 64 << 20);
}

#[test]
fn tcp_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args();
    a.listen = Some("127.0.0.1:0".into());
    let e = Config::build(a.clone(), Some(dir.path().to_owned()), None).unwrap_err();
    assert!(matches!(e, ConfigError::TokenRequired), "{e}");
    let c = Config::build(
        a,
        Some(dir.path().to_owned()),
        Some("0123456789abcdef0123".into()),
    )
    .unwrap();
    assert!(c.token.is_some());
}

#[test]
fn file_settings_apply_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("jobs")).unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(
            &file,
            "roots = [\"jobs\"]\nmax_running = 3\njob_body_limit = \"8KiB\"\ngrace = \"2s\"\nlog_format = \"json\"\n",
        )
        .unwrap();
    let mut a = args();
    a.config = Some(file.clone());
    a.max_running = Some(5);
    let c = Config::build(a, Some(dir.path().join("data")), None).unwrap();
    assert_eq!(
        c.roots,
        vec![dir.path().join("jobs").canonicalize().unwrap()]
    );
    assert_eq!(c.max_running, 5);
    assert_eq!(c.job_body_limit, 8192);
    assert_eq!(c.grace, Duration::from_secs(2));
    assert_eq!(c.log_format, LogFormat::Json);
}

#[test]
fn bundle_cap_and_strict_limits_are_settings() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::build(args(), Some(dir.path().to_owned()), None).unwrap();
    assert_eq!(c.max_bundle_skills, 256);
    assert!(!c.strict_limits);
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, "max_bundle_skills = 10\nstrict_limits = true\n").unwrap();
    let mut a = args();
    a.config = Some(file.clone());
    let c = Config::build(a, Some(dir.path().to_owned()), None).unwrap();
    assert_eq!((c.max_bundle_skills, c.strict_limits), (10, true));
    std::fs::write(&file, "max_bundle_skills = 0\n").unwrap();
    let mut a = args();
    a.config = Some(file);
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("setting max_bundle_skills: 0 is out of range"),
        "{e}"
    );
}

#[test]
fn network_settings_cap_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let c = Config::build(args(), Some(dir.path().to_owned()), None).unwrap();
    assert!(c.network.private && c.network.allow.is_none());
    assert_eq!(
        c.network.connections.max(),
        Some(c.descriptors.proxy_connections)
    );
    let file = dir.path().join("serve.toml");
    std::fs::write(
        &file,
        "network_private = false\nnetwork_allow = [\"pypi.org\", \"*.pythonhosted.org\"]\n",
    )
    .unwrap();
    let mut a = args();
    a.config = Some(file.clone());
    let c = Config::build(a, Some(dir.path().to_owned()), None).unwrap();
    assert!(!c.network.private);
    assert_eq!(c.network.allow.as_ref().map(Vec::len), Some(2));
    let mut a = args();
    a.config = Some(file);
    a.network_allow = vec!["a..b".into()];
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(
        e.to_string().contains("setting network_allow: \"a..b\""),
        "{e}"
    );
}

#[test]
fn bad_settings_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, "max_runing = 3\n").unwrap();
    let mut a = args();
    a.config = Some(file);
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(e.to_string().contains("max_runing"), "{e}");

    let mut a = args();
    a.roots = vec![PathBuf::from("/")];
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(matches!(e, ConfigError::RootIsSlash), "{e}");

    let mut a = args();
    a.max_output_bytes = Some(1024);
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("below the built-in profiles' default output_bytes"),
        "{e}"
    );

    let mut a = args();
    a.roots = vec![dir.path().join("missing")];
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(e.to_string().contains("create the folder"), "{e}");

    let mut a = args();
    a.roots = vec![dir.path().to_owned()];
    let e = Config::build(a, Some(dir.path().join("data")), None).unwrap_err();
    assert!(matches!(e, ConfigError::RootOverlapsData { .. }), "{e}");

    let mut a = args();
    a.max_running = Some(0);
    let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
    assert!(e.to_string().contains("max_running"), "{e}");

    let mut a = args();
    a.listen = Some("localhost".into());
    let e = Config::build(a, Some(dir.path().to_owned()), Some("x".repeat(32))).unwrap_err();
    assert!(matches!(e, ConfigError::ListenAddr(_)), "{e}");

    let mut a = args();
    a.listen = Some("127.0.0.1:1".into());
    a.socket = Some(dir.path().join("s.sock"));
    let e = Config::build(a, Some(dir.path().to_owned()), Some("x".repeat(32))).unwrap_err();
    assert!(matches!(e, ConfigError::SocketAndListen), "{e}");
}

#[test]
fn every_setting_is_declared_once() {
    let (mut names, mut flags, mut envs, mut keys) = Default::default();
    let once = |seen: &mut std::collections::HashSet<&str>, word: &'static str| {
        assert!(seen.insert(word), "{word} is declared twice");
    };
    for s in SETTINGS {
        once(&mut names, s.name);
        assert!(
            s.flag.is_some() != s.global.is_some(),
            "{}: give either a serve flag or a global one",
            s.name
        );
        once(&mut flags, s.flag.or(s.global).unwrap_or_default());
        // Ours, or OpenTelemetry's standard one (the OTLP endpoint).
        assert!(
            s.env.starts_with("SKILL_RUNNER_") || s.env == "OTEL_EXPORTER_OTLP_ENDPOINT",
            "{}",
            s.env
        );
        once(&mut envs, s.env);
        if let Some(key) = s.file {
            // Errors name the setting; the file key is that name.
            assert_eq!(key, s.name);
            once(&mut keys, key);
        }
    }
    // The one setting outside the table.
    once(&mut envs, "SKILL_RUNNER_TOKEN");
}

#[test]
fn serve_help_shows_every_flag_with_its_variable() {
    let mut serve = ServeArgs::augment_args(clap::Command::new("serve"));
    let help = serve.render_help().to_string();
    for s in SETTINGS {
        let Some(flag) = s.flag else { continue };
        assert!(help.contains(&format!("--{flag} <")), "--{flag}:\n{help}");
        assert!(
            help.contains(&format!("[env: {}=", s.env)),
            "{}:\n{help}",
            s.env
        );
    }
    let at = |flag: &str| help.find(&format!("--{flag} <")).unwrap();
    assert!(at("max-output-bytes") < at("package-body-limit"), "{help}");
    let clap_flags: Vec<_> = serve
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|&long| long != "help")
        .collect();
    let table_flags: Vec<_> = SETTINGS.iter().filter_map(|s| s.flag).collect();
    assert_eq!(clap_flags, table_flags);
}

#[test]
fn the_file_takes_the_table_keys() {
    // Its "unknown field" error lists every key it takes, in order.
    let e = toml::from_str::<FileConfig>("no_such_setting = 1\n").unwrap_err();
    let keys: Vec<_> = SETTINGS
        .iter()
        .filter_map(|s| s.file)
        .map(|k| format!("`{k}`"))
        .collect();
    let expected = format!("expected one of {}", keys.join(", "));
    assert!(e.message().ends_with(&expected), "{}", e.message());
}

#[test]
fn docs_list_every_setting() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/daemon.md");
    let docs = std::fs::read_to_string(path).unwrap();
    for s in SETTINGS {
        let flag = format!("`--{} ", s.flag.or(s.global).unwrap_or_default());
        let row = docs
            .lines()
            .find(|l| l.starts_with("| ") && l.contains(&flag))
            .unwrap_or_else(|| panic!("docs/daemon.md has no row for {flag}`"));
        assert!(row.contains(&format!("`{}`", s.env)), "{row}");
        if let Some(key) = s.file {
            let listed = row.contains(&format!("`{key}`")) || row.contains(&format!("`{key} = "));
            assert!(listed, "{row}");
        } else {
            assert!(row.contains("| — |"), "{row}");
        }
    }
}

#[test]
fn a_flag_beats_the_file() {
    let dir = Path::new("/etc/skill-runner");
    let merge = |flag: Option<usize>, file| Layered::merge(flag, file, "n", dir).unwrap();
    assert_eq!(merge(Some(5), Some(3)), Some(5));
    assert_eq!(merge(None, Some(3)), Some(3));
    assert_eq!(merge(None, None), None);
    // A repeatable flag is given when it has a value.
    let given =
        |flag: Vec<String>| Layered::merge(flag, Some(vec!["file".to_owned()]), "n", dir).unwrap();
    assert_eq!(given(vec![]), Some(vec!["file".to_owned()]));
    assert_eq!(given(vec!["flag".into()]), Some(vec!["flag".to_owned()]));
    // Relative paths resolve against the file's folder, a flag's do not.
    let path = |flag: Option<PathBuf>, file: Option<PathBuf>| {
        Layered::merge(flag, file, "n", dir).unwrap()
    };
    assert_eq!(path(None, Some("roots".into())), Some(dir.join("roots")));
    assert_eq!(
        path(Some("roots".into()), None),
        Some(PathBuf::from("roots"))
    );
    // A bad value in the file is refused even when the flag wins.
    let e = Layered::merge(
        Some(8192_u64),
        Some(SizeText::Text("huge".into())),
        "job_body_limit",
        dir,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "setting job_body_limit: \"huge\" is not a size; write e.g. 1048576, 512KiB or 64MiB"
    );
}

#[test]
fn checks_name_the_setting_and_the_bounds() {
    assert_eq!(
        within(1, 64)("max_uploads", 65).unwrap_err().to_string(),
        "setting max_uploads: 65 is out of range; use 1 to 64"
    );
    assert_eq!(within(0, 10)("max_queued", 0).unwrap(), 0);
    assert_eq!(
        at_least(1024)("job_body_limit", 1000)
            .unwrap_err()
            .to_string(),
        "setting job_body_limit: 1000 bytes is too small; use at least 1024"
    );
    assert_eq!(
        longer_than_zero("grace", Duration::ZERO)
            .unwrap_err()
            .to_string(),
        "setting grace: must be longer than zero"
    );
}
