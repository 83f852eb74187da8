//! The macOS backend, tested on Linux as pure code: each built-in profile's
//! `[macos]` section rendered through the `seatbelt` crate against a golden
//! file, and the argv/environment a Mac run would use.
//!
//! Re-bless the golden files with `scripts/bless-seatbelt` (BLESS=1).

use std::path::{Path, PathBuf};

use skill_runner::exec::job::Job;
use skill_runner::sandbox::macos::{self, Folders};
use skill_runner::sandbox::profile::BUILTIN;

const EXEC: &str = "/private/var/folders/ab/T/sr/executions/e1.RANDOM";

fn folders() -> Folders {
    Folders {
        snapshot_root: PathBuf::from(EXEC).join("skills"),
        workspace: PathBuf::from(EXEC).join("workspace"),
        extensions: PathBuf::from(EXEC).join("workspace/.sciencediscovery/skill-extensions"),
        tmp: PathBuf::from(EXEC).join("tmp"),
        proxy_port: None,
        environment: None,
    }
}

fn job(profile: &str) -> Job {
    let json = format!(
        r#"{{"argv":["sh","$SCIENCEDISCOVERY_SKILLS_DIR/hello/greet.sh","/skills/hello/x","${{SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR}}/log","plain"],"env":{{"A":"b"}},"profile":"{profile}"}}"#
    );
    Job::from_json(json.as_bytes(), Some(Path::new("/"))).unwrap()
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../seatbelt/tests/golden")
        .join(name);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/bless-seatbelt", path.display()));
    assert_eq!(
        actual,
        want,
        "{} differs; run scripts/bless-seatbelt and review",
        path.display()
    );
}

#[test]
fn golden_builtin_profiles() {
    for (name, _) in BUILTIN {
        let (rendered, argv) = macos::plan(&job(name).seatbelt_request(), &folders()).unwrap();
        let params: String = rendered
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        golden(&format!("builtin-{name}.sbpl"), &rendered.profile);
        golden(&format!("builtin-{name}.params"), &params);
        // What must not appear.
        assert!(!rendered.profile.contains("(allow default)"));
        let rules: String = rendered
            .profile
            .lines()
            .map(|l| l.split(';').next().unwrap_or(""))
            .collect();
        assert!(
            !rules.contains("network"),
            "offline profile has a network rule"
        );
        assert!(
            !rendered.profile.contains("/private/var/folders"),
            "a host path was pasted"
        );
        assert_eq!(argv[0], "/usr/bin/sandbox-exec");
    }
}

#[test]
fn argv_aliases_become_host_paths() {
    let (_, argv) = macos::plan(&job("default").seatbelt_request(), &folders()).unwrap();
    let tail: Vec<&str> = argv
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "sh",
            &format!("{EXEC}/skills/hello/greet.sh"),
            &format!("{EXEC}/skills/hello/x"),
            &format!("{EXEC}/workspace/.sciencediscovery/skill-extensions/log"),
            "plain",
        ]
    );
}

#[test]
fn environment_holds_host_paths() {
    let env = macos::environment(&job("default").seatbelt_request(), &folders()).unwrap();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        get("SCIENCEDISCOVERY_SKILLS_DIR"),
        Some(&*format!("{EXEC}/skills"))
    );
    assert_eq!(get("HOME"), Some(&*format!("{EXEC}/tmp")));
    assert_eq!(get("TMPDIR"), Some(&*format!("{EXEC}/tmp")));
    assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
    assert_eq!(get("A"), Some("b"));
}

#[test]
fn tmp_and_var_are_canonicalized() {
    let f = Folders {
        snapshot_root: "/tmp/sr/skills".into(),
        workspace: "/var/tmp/ws".into(),
        extensions: "/var/tmp/ws/ext".into(),
        tmp: "/tmp/sr/tmp".into(),
        proxy_port: None,
        environment: None,
    };
    let (rendered, _) = macos::plan(&job("default").seatbelt_request(), &f).unwrap();
    let p = |k: &str| {
        rendered
            .params
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        p("SNAPSHOT_ROOT").as_deref(),
        Some("/private/tmp/sr/skills")
    );
    assert_eq!(p("WORKSPACE").as_deref(), Some("/private/var/tmp/ws"));
}

#[test]
fn escaping_aliases_are_refused() {
    for bad in [
        "/skills/../etc/passwd",
        "$SCIENCEDISCOVERY_SKILLS_DIR/a/../../x",
    ] {
        let json = format!(r#"{{"argv":["cat","{bad}"]}}"#);
        let job = Job::from_json(json.as_bytes(), Some(Path::new("/"))).unwrap();
        let e = macos::plan(&job.seatbelt_request(), &folders()).unwrap_err();
        assert!(e.to_string().contains("leaves"), "{e}");
    }
}

/// A job with a network allowlist: the profile lets the command
/// reach the proxy's loopback port alone, and the proxy variables name it.
#[test]
fn golden_an_allowlist_opens_the_proxy_port_and_nothing_else() {
    let json = r#"{"argv":["curl","https://pypi.org/"],"network":{"allow":["pypi.org"]}}"#;
    let job = Job::from_json(json.as_bytes(), Some(Path::new("/"))).unwrap();
    let f = Folders {
        proxy_port: Some(41234),
        ..folders()
    };
    let (rendered, argv) = macos::plan(&job.seatbelt_request(), &f).unwrap();
    golden("builtin-default-proxy.sbpl", &rendered.profile);
    let address = rendered
        .params
        .iter()
        .find(|(n, _)| n == "PROXY_ADDRESS")
        .map(|(_, v)| v.as_str());
    assert_eq!(address, Some("localhost:41234"));
    assert!(argv.contains(&"PROXY_ADDRESS=localhost:41234".to_owned()));
    let code: Vec<&str> = rendered
        .profile
        .lines()
        .map(|l| l.split(';').next().unwrap_or(""))
        .filter(|l| l.contains("network"))
        .collect();
    assert_eq!(code, ["(allow network-outbound"], "{}", rendered.profile);
    assert!(rendered
        .profile
        .contains("(allow network-outbound\n  (remote tcp (param \"PROXY_ADDRESS\")))"));
    assert!(!rendered.profile.contains("system-socket"));
    let env = macos::environment(&job.seatbelt_request(), &f).unwrap();
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        assert!(
            env.contains(&(var.to_owned(), "http://127.0.0.1:41234".to_owned())),
            "{var}"
        );
    }
    // Without an allowlist, no port opens even when one is given.
    let (offline, _) = macos::plan(&self::job("default").seatbelt_request(), &f).unwrap();
    assert!(!offline.profile.contains("PROXY_ADDRESS"));
}

/// A job with an environment under Seatbelt: the tree's host path is one
/// read-only parameter of the profile (golden), `PATH` starts with its
/// `bin/` and `PYTHONPATH` names its `python/`, both host paths; the
/// profile differs from the one without an environment only by the
/// environment's rules and the ancestors that lead to it.
#[test]
fn golden_an_environment_is_a_read_only_parameter_with_host_paths_in_the_variables() {
    let tree = "/private/var/folders/ab/T/sr/data/environments/trees/4d46/tree";
    let f = Folders {
        environment: Some(macos::EnvFolder {
            tree: tree.into(),
            variables: vec![("PYTHONPATH".into(), "/python".into())],
        }),
        ..folders()
    };
    let job = job("default");
    let (rendered, argv) = macos::plan(&job.seatbelt_request(), &f).unwrap();
    let params: String = rendered
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    golden("builtin-default-environment.sbpl", &rendered.profile);
    golden("builtin-default-environment.params", &params);
    assert!(argv.contains(&format!("ENVIRONMENT={tree}")), "{argv:?}");
    assert!(!rendered.profile.contains(tree));
    let env = macos::environment(&job.seatbelt_request(), &f).unwrap();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        get("PATH"),
        Some(format!("{tree}/bin:/usr/bin:/bin").as_str())
    );
    assert_eq!(get("PYTHONPATH"), Some(format!("{tree}/python").as_str()));
    // Without one: no such rule, variable or parameter.
    let (plain, _) = macos::plan(&job.seatbelt_request(), &folders()).unwrap();
    assert!(!plain.profile.contains("ENVIRONMENT"));
    let env = macos::environment(&job.seatbelt_request(), &folders()).unwrap();
    assert!(!env.iter().any(|(k, _)| k == "PYTHONPATH"));
}
