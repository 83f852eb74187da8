//! Unit tests of `bwrap.rs` (included from there as its `tests` module).

use super::*;

fn plan_args(features: BwrapFeatures, cwd: &str) -> Vec<String> {
    plan_args_with(features, cwd, Workspace::Host, Extensions::Host)
}

fn plan_args_with(
    features: BwrapFeatures,
    cwd: &str,
    workspace: Workspace,
    extensions: Extensions,
) -> Vec<String> {
    plan_args_net(features, cwd, workspace, extensions, false)
}

fn plan_args_net(
    features: BwrapFeatures,
    cwd: &str,
    workspace: Workspace,
    extensions: Extensions,
    proxy: bool,
) -> Vec<String> {
    let mounts = vec![
        Mount::RoBind {
            src: "/usr".into(),
            dest: "/usr".into(),
        },
        Mount::Symlink {
            target: "usr/bin".into(),
            dest: "/bin".into(),
        },
        Mount::RoBindTry {
            src: "/etc/ssl/certs".into(),
            dest: "/etc/ssl/certs".into(),
        },
    ];
    let mut env = environment(&[("GREETING".into(), "hi there".into())]);
    if proxy {
        env.extend(crate::sandbox::net::proxy_environment(
            crate::sandbox::net::PROXY_URL,
        ));
    }
    let argv = vec![
        "sh".to_string(),
        "/skills/hello/s.sh".into(),
        "world".into(),
    ];
    bwrap_args(&Plan {
        mounts: &mounts,
        workspace,
        extensions,
        cwd,
        env: &env,
        argv: &argv,
        tmp_bytes: 1024,
        features,
        proxy,
        nproc: None,
        etc_view: false,
        environment: false,
    })
    .into_iter()
    .map(|s| s.into_string().unwrap())
    .collect()
}

#[test]
fn whole_argv() {
    let got = plan_args(
        BwrapFeatures {
            disable_userns: true,
        },
        "sub/dir",
    );
    let want: Vec<&str> = vec![
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--ro-bind-try",
        "/etc/ssl/certs",
        "/etc/ssl/certs",
        "--perms",
        "0444",
        "--file",
        "5",
        "/etc/passwd",
        "--perms",
        "0444",
        "--file",
        "6",
        "/etc/group",
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--size",
        "1024",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--size",
        "1024",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--ro-bind-fd",
        "10",
        "/skills",
        "--bind-fd",
        "12",
        "/workspace",
        "--bind-fd",
        "11",
        "/skill-extensions",
        "--remount-ro",
        "/",
        "--chdir",
        "/workspace/sub/dir",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "SCIENCEDISCOVERY_SKILLS_DIR",
        "/skills",
        "--setenv",
        "SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR",
        "/skill-extensions",
        "--setenv",
        "GREETING",
        "hi there",
        "--add-seccomp-fd",
        "3",
        "--",
        "/proc/self/fd/8",
        "--skill-runner-exec-shim",
        "--",
        "sh",
        "/skills/hello/s.sh",
        "world",
    ];
    assert_eq!(got, want);
}

/// The same plan with a network allowlist: the proxy's
/// folder bound, the proxy variables set, the shim told to start the
/// forwarder; nothing else changes, and the network namespace is still
/// new (`--unshare-all`, never `--share-net`).
#[test]
fn whole_argv_with_an_allowlist() {
    let got = plan_args_net(
        BwrapFeatures {
            disable_userns: true,
        },
        "",
        Workspace::Fresh { bytes: 4096 },
        Extensions::InFreshWorkspace,
        true,
    );
    let want: Vec<&str> = vec![
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--ro-bind-try",
        "/etc/ssl/certs",
        "/etc/ssl/certs",
        "--perms",
        "0444",
        "--file",
        "5",
        "/etc/passwd",
        "--perms",
        "0444",
        "--file",
        "6",
        "/etc/group",
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--size",
        "1024",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--size",
        "1024",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--ro-bind-fd",
        "10",
        "/skills",
        "--size",
        "4096",
        "--perms",
        "0755",
        "--tmpfs",
        "/workspace",
        "--dir",
        "/workspace/.sciencediscovery/skill-extensions",
        "--symlink",
        "/workspace/.sciencediscovery/skill-extensions",
        "/skill-extensions",
        "--ro-bind-fd",
        "13",
        "/run/skill-runner",
        "--remount-ro",
        "/",
        "--chdir",
        "/workspace",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "SCIENCEDISCOVERY_SKILLS_DIR",
        "/skills",
        "--setenv",
        "SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR",
        "/skill-extensions",
        "--setenv",
        "GREETING",
        "hi there",
        "--setenv",
        "HTTP_PROXY",
        "http://127.0.0.1:3128",
        "--setenv",
        "HTTPS_PROXY",
        "http://127.0.0.1:3128",
        "--setenv",
        "http_proxy",
        "http://127.0.0.1:3128",
        "--setenv",
        "https_proxy",
        "http://127.0.0.1:3128",
        "--add-seccomp-fd",
        "3",
        "--",
        "/proc/self/fd/8",
        "--skill-runner-exec-shim-net",
        "--",
        "sh",
        "/skills/hello/s.sh",
        "world",
    ];
    assert_eq!(got, want);
}

#[test]
fn the_pids_rlimit_goes_to_the_shim_before_the_command() {
    let argv = vec!["sh".to_string(), "-c".into(), "--nproc".into()];
    let env = environment(&[]);
    let got: Vec<String> = bwrap_args(&Plan {
        mounts: &[],
        workspace: Workspace::Fresh { bytes: 1 << 20 },
        extensions: Extensions::InFreshWorkspace,
        cwd: "",
        env: &env,
        argv: &argv,
        tmp_bytes: 1024,
        features: BwrapFeatures::default(),
        proxy: false,
        nproc: Some(20),
        etc_view: false,
        environment: false,
    })
    .into_iter()
    .map(|s| s.into_string().unwrap())
    .collect();
    let shim = got.iter().position(|a| a == SHIM_PATH).unwrap();
    assert_eq!(
        got[shim..],
        [
            SHIM_PATH,
            "--skill-runner-exec-shim",
            "--nproc",
            "20",
            "--",
            "sh",
            "-c",
            "--nproc"
        ]
    );
}

#[test]
fn without_an_allowlist_nothing_of_the_network_appears() {
    let got = plan_args(BwrapFeatures::default(), "");
    for absent in [
        "/run/skill-runner",
        "13",
        "--skill-runner-exec-shim-net",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "--share-net",
    ] {
        assert!(!got.iter().any(|a| a == absent), "{absent}");
    }
}

#[test]
fn a_fresh_workspace_is_a_sized_tmpfs_holding_the_extensions_dir() {
    let got = plan_args_with(
        BwrapFeatures::default(),
        "",
        Workspace::Fresh { bytes: 4096 },
        Extensions::InFreshWorkspace,
    );
    let from = got.iter().position(|a| a == "/skills").unwrap() + 1;
    let to = got.iter().position(|a| a == "--chdir").unwrap();
    assert_eq!(
        got[from..to],
        [
            "--size",
            "4096",
            "--perms",
            "0755",
            "--tmpfs",
            "/workspace",
            "--dir",
            "/workspace/.sciencediscovery/skill-extensions",
            "--symlink",
            "/workspace/.sciencediscovery/skill-extensions",
            "/skill-extensions",
            "--remount-ro",
            "/",
        ]
    );
}

#[test]
fn the_prepared_etc_replaces_the_etc_pieces_and_the_account_files() {
    let mounts = vec![
        Mount::RoBind {
            src: "/usr".into(),
            dest: "/usr".into(),
        },
        Mount::RoBindTry {
            src: "/etc/ssl/certs".into(),
            dest: "/etc/ssl/certs".into(),
        },
        Mount::Symlink {
            target: "usr/lib".into(),
            dest: "/lib".into(),
        },
    ];
    let env = environment(&[]);
    let argv = vec!["true".to_string()];
    let plan = |etc_view| Plan {
        mounts: &mounts,
        workspace: Workspace::Host,
        extensions: Extensions::Host,
        cwd: "",
        env: &env,
        argv: &argv,
        tmp_bytes: 1024,
        features: BwrapFeatures::default(),
        proxy: false,
        nproc: None,
        etc_view,
        environment: false,
    };
    let strings = |args: Vec<OsString>| -> Vec<String> {
        args.into_iter().map(|s| s.into_string().unwrap()).collect()
    };
    let with = strings(bwrap_args(&plan(true)));
    let from = with.iter().position(|a| a == "--clearenv").unwrap() + 1;
    let to = with.iter().position(|a| a == "--proc").unwrap();
    assert_eq!(
        with[from..to],
        [
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib",
            "/lib",
            "--ro-bind-fd",
            "14",
            "/etc"
        ]
    );
    assert!(!with.iter().any(|a| a == "--file" || a == "--ro-bind-try"));
    // Without it, the pieces and the account files as before.
    let without = strings(bwrap_args(&plan(false)));
    let to = without.iter().position(|a| a == "--proc").unwrap();
    assert_eq!(
        without[from..to],
        [
            "--ro-bind",
            "/usr",
            "/usr",
            "--ro-bind-try",
            "/etc/ssl/certs",
            "/etc/ssl/certs",
            "--symlink",
            "usr/lib",
            "/lib",
            "--perms",
            "0444",
            "--file",
            "5",
            "/etc/passwd",
            "--perms",
            "0444",
            "--file",
            "6",
            "/etc/group"
        ]
    );
}

#[test]
fn what_must_not_appear() {
    let got = plan_args(BwrapFeatures::default(), "");
    assert!(!got.iter().any(|a| a == "--disable-userns"));
    for forbidden in ["--share-net", "--cap-add", "--dev-bind", "--bind-try"] {
        assert!(!got.iter().any(|a| a == forbidden), "{forbidden}");
    }
    // /skills only ever read-only.
    let i = got.iter().position(|a| a == "/skills").unwrap();
    assert_eq!(got[i - 2], "--ro-bind-fd");
    // /proc and /dev read-only right after they are made.
    for dir in ["/proc", "/dev"] {
        let made = got.iter().position(|a| a == dir).unwrap();
        assert_eq!(got[made + 1..made + 3], ["--remount-ro", dir]);
    }
    assert!(got.contains(&"/workspace".to_string()));
    let chdir = got.iter().position(|a| a == "--chdir").unwrap();
    assert_eq!(got[chdir + 1], "/workspace");
}

#[test]
fn quoting_for_explain() {
    let s = shell_quote(
        Path::new("/usr/bin/bwrap"),
        &[
            "--setenv".into(),
            "A".into(),
            "it's".into(),
            "--".into(),
            "--x".into(),
        ],
    );
    assert_eq!(s, "/usr/bin/bwrap \\\n  --setenv A 'it'\\''s' \\\n  -- --x");
}
