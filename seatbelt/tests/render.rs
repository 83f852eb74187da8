//! Whole-output and structural tests of `render` and `sandbox_exec_argv`.
//!
//! The golden files in `tests/golden/` hold the entire profile text and the
//! entire parameter list for fixed roots; `BLESS=1` (see
//! `scripts/bless-seatbelt`) rewrites them instead of comparing. The other
//! tests assert what must hold for any input, and what must never appear.

use std::fs;
use std::path::PathBuf;

use crate::common::{
    check_profile, default_like_policy, has_network_rule, param, params_text, refs, roots,
    roots_under, rules,
};
use seatbelt::{render, sandbox_exec_argv, sexpr, Network, Rendered, Roots, SystemPolicy};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `actual` with the golden file `name`, or rewrites it under BLESS=1.
fn assert_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var("BLESS").as_deref() == Ok("1") {
        fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e}; run scripts/bless-seatbelt to create it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the rendered output, first at line {}:\n  golden: {:?}\n  actual: {:?}\n\
             if the change is intended, run scripts/bless-seatbelt and review the diff",
            path.display(),
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line),
        );
    }
}

fn rendered(network: Network) -> Rendered {
    render(&default_like_policy(network), &roots()).expect("fixture renders")
}

#[test]
fn golden_offline_profile_and_params() {
    let out = rendered(Network::None);
    check_profile(&out);
    assert_golden("offline.sbpl", &out.profile);
    assert_golden("offline.params", &params_text(&out));
}

#[test]
fn golden_network_host_profile_and_params() {
    let out = rendered(Network::Host);
    check_profile(&out);
    assert_golden("network_host.sbpl", &out.profile);
    assert_golden("network_host.params", &params_text(&out));
}

#[test]
fn golden_network_proxy_profile_and_params() {
    let out = rendered(Network::Proxy { port: 41234 });
    check_profile(&out);
    assert_golden("network_proxy.sbpl", &out.profile);
    assert_golden("network_proxy.params", &params_text(&out));
}

/// A job's allowlist on macOS: one rule, outbound TCP to the
/// proxy's loopback address (a parameter), nothing else of the network;
/// the rest of the profile is the offline one.
#[test]
fn network_proxy_reaches_the_proxy_port_only() {
    let out = rendered(Network::Proxy { port: 41234 });
    let exprs = check_profile(&out);
    let network: Vec<_> = rules(&exprs)
        .into_iter()
        .filter(|r| {
            r.operations
                .iter()
                .any(|op| op.starts_with("network") || *op == "system-socket")
        })
        .collect();
    assert_eq!(network.len(), 1);
    assert_eq!(network[0].action, "allow");
    assert_eq!(network[0].operations, ["network-outbound"]);
    assert_eq!(network[0].filters.len(), 1);
    assert_eq!(network[0].filters[0].head(), Some("remote"));
    assert_eq!(
        refs(network[0].filters[0]).into_iter().collect::<Vec<_>>(),
        ["PROXY_ADDRESS"]
    );
    assert_eq!(param(&out, "PROXY_ADDRESS"), Some("localhost:41234"));
    // The port is a parameter: the text does not depend on it.
    let other = rendered(Network::Proxy { port: 1 });
    assert_eq!(other.profile, out.profile);
    // Everything else is the offline profile's.
    let offline = rendered(Network::None);
    assert_eq!(&out.params[..out.params.len() - 1], &offline.params[..]);
    let block = out.profile.find("; network = proxy").expect("proxy block");
    assert!(offline.profile.starts_with(&out.profile[..block]));
}

#[test]
fn offline_profile_has_no_network_rule_at_all() {
    let out = rendered(Network::None);
    let exprs = check_profile(&out);
    assert!(!has_network_rule(&exprs));
    // Not even in a form the parser would miss: no network operation name
    // outside comments.
    let code: String = out
        .profile
        .lines()
        .map(|line| line.split(';').next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!code.contains("network"), "network in offline profile code");
    assert!(!code.contains("system-socket"));
}

#[test]
fn network_host_rules_are_ip_only() {
    let out = rendered(Network::Host);
    let exprs = check_profile(&out);
    assert!(has_network_rule(&exprs));
    for rule in rules(&exprs) {
        if rule.operations.iter().any(|op| op.starts_with("network")) {
            assert_eq!(rule.action, "allow");
            // An unfiltered network rule would reach every Unix socket on
            // the host (docker.sock, the runner's daemon socket).
            assert!(!rule.filters.is_empty(), "unfiltered {:?}", rule.operations);
        }
    }
    // Host adds rules, removes none: the offline profile is a prefix of the
    // host one up to the network block, and the tails are equal.
    let offline = rendered(Network::None);
    assert_eq!(out.params, offline.params);
    let marker = "; ---- network = host";
    let at = out.profile.find(marker).expect("network block marker");
    assert!(offline.profile.starts_with(&out.profile[..at]));
    assert!(out.profile.len() > offline.profile.len());
}

#[test]
fn never_allow_default() {
    for network in [Network::None, Network::Host] {
        let out = rendered(network);
        check_profile(&out);
        assert!(!out.profile.contains("(allow default"));
        assert!(out.profile.contains("\n(deny default)\n"));
    }
}

#[test]
fn no_host_path_text_in_the_profile() {
    let out = rendered(Network::Host);
    check_profile(&out);
    // The execution root and every root below it are unique strings.
    assert!(!out.profile.contains("/private/var/folders"));
    assert!(!out.profile.contains("exec1"));
    // Each system path appears only as a parameter value.
    let policy = default_like_policy(Network::Host);
    for path in policy
        .read_only_subpaths
        .iter()
        .chain(&policy.read_only_literals)
    {
        assert!(
            !out.profile.contains(&format!("\"{path}\"")),
            "{path} pasted"
        );
        assert!(
            out.params.iter().any(|(_, value)| value == path),
            "{path} lost"
        );
    }
}

#[test]
fn no_rule_allows_writing_the_snapshot_and_the_denials_come_last() {
    let out = rendered(Network::Host);
    let exprs = check_profile(&out);
    let all = rules(&exprs);
    // The last two rules are the snapshot protection.
    let [.., subtree, ancestors] = all.as_slice() else {
        panic!("too few rules")
    };
    assert_eq!(subtree.action, "deny");
    assert_eq!(subtree.operations, ["file-write*", "file-link"]);
    assert_eq!(subtree.filters.len(), 1);
    assert_eq!(subtree.filters[0].head(), Some("subpath"));
    assert_eq!(
        refs(subtree.filters[0]).into_iter().collect::<Vec<_>>(),
        ["SNAPSHOT_ROOT"]
    );
    assert_eq!(ancestors.action, "deny");
    assert_eq!(ancestors.operations, ["file-write*"]);
    // The snapshot root is read-allowed by exactly one rule, never writable.
    let readers: Vec<_> = all
        .iter()
        .filter(|rule| rule.action == "allow")
        .filter(|rule| {
            rule.filters
                .iter()
                .any(|f| refs(f).contains("SNAPSHOT_ROOT"))
        })
        .collect();
    assert_eq!(readers.len(), 1);
    assert!(readers[0].operations.contains(&"file-read*"));
    assert!(readers[0]
        .operations
        .iter()
        .all(|op| !op.starts_with("file-write")));
}

#[test]
fn ancestor_denial_covers_every_ancestor_of_the_snapshot_root() {
    let out = rendered(Network::None);
    assert_eq!(
        param(&out, "SNAPSHOT_ROOT"),
        Some("/private/var/folders/ab/T/sr/exec1/skills")
    );
    let expected = [
        "/private",
        "/private/var",
        "/private/var/folders",
        "/private/var/folders/ab",
        "/private/var/folders/ab/T",
        "/private/var/folders/ab/T/sr",
        "/private/var/folders/ab/T/sr/exec1",
    ];
    let got: Vec<(&str, &str)> = out
        .params
        .iter()
        .filter(|(name, _)| name.starts_with("SNAPSHOT_ANCESTOR_"))
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let want: Vec<(String, &str)> = expected
        .iter()
        .enumerate()
        .map(|(i, path)| (format!("SNAPSHOT_ANCESTOR_{i}"), *path))
        .collect();
    assert_eq!(
        got,
        want.iter()
            .map(|(n, v)| (n.as_str(), *v))
            .collect::<Vec<_>>()
    );
    // One deny rule, file-write* (which includes file-write-unlink, the
    // operation rename and rmdir check), with one literal per ancestor.
    let exprs = check_profile(&out);
    let all = rules(&exprs);
    let denial = all
        .iter()
        .find(|rule| {
            rule.filters
                .iter()
                .any(|f| refs(f).contains("SNAPSHOT_ANCESTOR_0"))
        })
        .expect("ancestor denial");
    assert_eq!(denial.action, "deny");
    assert_eq!(denial.operations, ["file-write*"]);
    assert_eq!(denial.filters.len(), expected.len());
    for (i, filter) in denial.filters.iter().enumerate() {
        assert_eq!(filter.head(), Some("literal"), "ancestors are literals");
        assert_eq!(
            refs(filter).into_iter().collect::<Vec<_>>(),
            [format!("SNAPSHOT_ANCESTOR_{i}")]
        );
    }
}

#[test]
fn snapshot_just_below_root_has_no_ancestor_rule() {
    let roots = Roots {
        snapshot_root: "/skills".into(),
        extensions_dir: "/private/var/ext".into(),
        workspace: "/private/var/ws".into(),
        tmp_dir: "/private/var/tmp1".into(),
        environment: None,
    };
    let out = render(&SystemPolicy::default(), &roots).expect("renders");
    let exprs = check_profile(&out);
    assert!(out
        .params
        .iter()
        .all(|(name, _)| !name.starts_with("SNAPSHOT_ANCESTOR_")));
    // Still protected as a subtree.
    assert!(rules(&exprs)
        .iter()
        .any(|rule| rule.action == "deny" && rule.operations.contains(&"file-link")));
    // With no system paths, no empty read-only rule is emitted either.
    assert!(out.params.iter().all(|(name, _)| !name.starts_with("RO_")));
}

#[test]
fn metadata_access_to_ancestors_of_every_allowed_path() {
    let out = rendered(Network::None);
    check_profile(&out);
    let ancestors: Vec<&str> = out
        .params
        .iter()
        .filter(|(name, _)| name.starts_with("ANCESTOR_"))
        .map(|(_, value)| value.as_str())
        .collect();
    let mut sorted = ancestors.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(ancestors, sorted, "byte order, no duplicates");
    for needed in [
        "/private",
        "/private/var/folders/ab/T/sr/exec1",
        "/private/var/folders/ab/T/sr/exec1/workspace/.sciencediscovery",
        "/private/var/db",
        "/opt",
    ] {
        assert!(ancestors.contains(&needed), "{needed} missing");
    }
    assert!(!ancestors.contains(&"/"));
}

#[test]
fn hostile_path_characters_cannot_change_the_structure() {
    let policy = default_like_policy(Network::None);
    let plain = render(&policy, &roots_under("/private/var/folders/ab/T/sr/plain")).unwrap();
    check_profile(&plain);
    let hostile = [
        "quote\"d",
        "paren(s)",
        "new\nline",
        "semi;colon",
        "back\\slash",
        "equals=sign",
        "é",
        "日本",
        "🦀",
        "\")) (allow default) ((\"",
        "#\"regex\"",
        "$(rm -rf ~)",
        "tab\tand\rcr",
        " leading space",
    ];
    for name in hostile {
        let exec_root = format!("/private/var/folders/ab/T/sr/{name}");
        let out = render(&policy, &roots_under(&exec_root))
            .unwrap_or_else(|e| panic!("{name:?} refused: {e}"));
        check_profile(&out);
        assert_eq!(out.profile, plain.profile, "structure changed for {name:?}");
        assert_eq!(
            out.params.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            plain.params.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        assert_ne!(out.params, plain.params);
        assert_eq!(
            param(&out, "WORKSPACE"),
            Some(format!("{exec_root}/workspace").as_str())
        );
        assert!(!out.profile.contains(name));
    }
    // The same for a hostile read-only system path.
    let mut odd = policy.clone();
    odd.read_only_subpaths[0] = "/opt/we\"ird) (allow default".into();
    let mut even = policy;
    even.read_only_subpaths[0] = "/opt/plain".into();
    let a = render(&odd, &roots()).unwrap();
    let b = render(&even, &roots()).unwrap();
    check_profile(&a);
    assert_eq!(a.profile, b.profile);
}

#[test]
fn rendering_is_deterministic_and_keeps_input_order() {
    let policy = default_like_policy(Network::Host);
    let first = render(&policy, &roots()).unwrap();
    for _ in 0..5 {
        assert_eq!(render(&policy, &roots()).unwrap(), first);
    }
    let subpaths: Vec<&str> = first
        .params
        .iter()
        .filter(|(name, _)| name.starts_with("RO_SUBPATH_"))
        .map(|(_, value)| value.as_str())
        .collect();
    assert_eq!(subpaths, policy.read_only_subpaths);
    // Fixed parameter order: the roots, then the lists.
    let names: Vec<&str> = first.params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..5],
        [
            "SNAPSHOT_ROOT",
            "EXTENSIONS_DIR",
            "WORKSPACE",
            "TMPDIR",
            "SNAPSHOT_ANCESTOR_0"
        ]
    );
    let kinds: Vec<&str> = names
        .iter()
        .map(|n| n.trim_end_matches(|c: char| c.is_ascii_digit()))
        .collect();
    let mut collapsed = kinds.clone();
    collapsed.dedup();
    assert_eq!(
        collapsed,
        [
            "SNAPSHOT_ROOT",
            "EXTENSIONS_DIR",
            "WORKSPACE",
            "TMPDIR",
            "SNAPSHOT_ANCESTOR_",
            "ANCESTOR_",
            "RO_SUBPATH_",
            "RO_LITERAL_"
        ]
    );
}

#[test]
fn duplicate_system_paths_are_rendered_once() {
    let mut policy = default_like_policy(Network::None);
    policy.read_only_subpaths.push("/usr".into());
    policy
        .read_only_literals
        .push("/private/var/db/xcode_select_link".into());
    assert_eq!(
        render(&policy, &roots()).unwrap(),
        render(&default_like_policy(Network::None), &roots()).unwrap()
    );
}

#[test]
fn sandbox_exec_argv_is_absolute_and_ends_options() {
    let out = rendered(Network::None);
    let argv = ["-weird-program".to_owned(), "a b".to_owned()];
    let full = sandbox_exec_argv(&out, &argv);
    let mut expected = vec![
        "/usr/bin/sandbox-exec".to_owned(),
        "-p".to_owned(),
        out.profile.clone(),
    ];
    for (name, value) in &out.params {
        expected.push("-D".to_owned());
        expected.push(format!("{name}={value}"));
    }
    expected.push("--".to_owned());
    expected.extend(argv.iter().cloned());
    assert_eq!(full, expected);
    assert_eq!(full[0], seatbelt::SANDBOX_EXEC);
}

#[test]
fn sandbox_exec_argv_keeps_equals_and_newlines_in_values() {
    let out = render(
        &SystemPolicy::default(),
        &roots_under("/private/var/folders/ab/T/sr/a=b\nc"),
    )
    .unwrap();
    let full = sandbox_exec_argv(&out, &["true".to_owned()]);
    let index = full
        .iter()
        .position(|arg| arg.starts_with("SNAPSHOT_ROOT="))
        .unwrap();
    assert_eq!(full[index - 1], "-D");
    // sandbox-exec splits at the first '=': the name, then the whole value.
    let (name, value) = full[index].split_once('=').unwrap();
    assert_eq!(name, "SNAPSHOT_ROOT");
    assert_eq!(value, "/private/var/folders/ab/T/sr/a=b\nc/skills");
}

#[test]
fn static_policy_files_parse_and_every_rule_has_a_reason() {
    for (file, text) in [
        ("base.sbpl", seatbelt::BASE_POLICY),
        ("network_host.sbpl", seatbelt::NETWORK_HOST_POLICY),
    ] {
        sexpr::parse(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        // Every rule sits in a block (lines up to the previous blank line)
        // that opens with a comment saying why.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with('(') {
                let block_start = lines[..i]
                    .iter()
                    .rposition(|l| l.trim().is_empty())
                    .map_or(0, |blank| blank + 1);
                assert!(
                    lines[block_start].starts_with(';'),
                    "{file}:{}: rule {line:?} has no comment opening its block",
                    i + 1
                );
            }
        }
        // No terminal, no ioctl, no pty, in the rules (comments may say why).
        let code: String = text
            .lines()
            .map(|line| line.split(';').next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for banned in [
            "/dev/tty",
            "/dev/ptmx",
            "pseudo-tty",
            "file-ioctl",
            "(allow default",
        ] {
            assert!(!code.contains(banned), "{file} has {banned} in a rule");
        }
    }
}

/// Roots with an environment: the store's tree, outside the execution's
/// folders, as the runner passes it.
fn roots_with_environment() -> Roots {
    Roots {
        environment: Some(
            "/Users/alice/Library/Application Support/skill-runner/environments/trees/4d46/tree"
                .into(),
        ),
        ..roots()
    }
}

#[test]
fn golden_environment_profile_and_params() {
    let out = render(
        &default_like_policy(Network::None),
        &roots_with_environment(),
    )
    .expect("renders");
    check_profile(&out);
    assert_golden("environment.sbpl", &out.profile);
    assert_golden("environment.params", &params_text(&out));
}

/// A job's environment is one read-only parameter: readable and mappable
/// (compiled modules), never written, unlinked, renamed or linked; its
/// path is in no rule's text; and a profile without one is unchanged.
#[test]
fn an_environment_is_a_read_only_parameter_and_nothing_else_changes() {
    let out = render(
        &default_like_policy(Network::None),
        &roots_with_environment(),
    )
    .unwrap();
    let exprs = check_profile(&out);
    assert!(!out.profile.contains("skill-runner/environments"));
    assert_eq!(
        param(&out, "ENVIRONMENT"),
        Some("/Users/alice/Library/Application Support/skill-runner/environments/trees/4d46/tree")
    );
    let on_env: Vec<_> = rules(&exprs)
        .into_iter()
        .filter(|r| r.filters.iter().any(|f| refs(f).contains("ENVIRONMENT")))
        .collect();
    assert_eq!(on_env.len(), 2, "one allow, one deny");
    let allow = on_env.iter().find(|r| r.action == "allow").unwrap();
    assert_eq!(
        allow.operations,
        ["file-read*", "file-test-existence", "file-map-executable"]
    );
    assert!(!allow
        .operations
        .iter()
        .any(|op| op.starts_with("file-write")));
    let deny = on_env.iter().find(|r| r.action == "deny").unwrap();
    assert_eq!(deny.operations, ["file-write*", "file-link"]);
    // The deny is the last rule: nothing after it can re-open a write.
    let all = rules(&exprs);
    let last = all.last().unwrap();
    assert_eq!(last.action, "deny");
    assert!(last.filters.iter().any(|f| refs(f).contains("ENVIRONMENT")));
    // The environment's ancestors are walkable (stat only).
    assert!(out
        .params
        .iter()
        .any(|(n, v)| n.starts_with("ANCESTOR_") && v == "/Users/alice/Library"));
    // Without an environment: the offline profile, byte for byte.
    let offline = rendered(Network::None);
    assert!(!offline.profile.contains("ENVIRONMENT"));
}

#[test]
fn an_environment_inside_or_around_a_writable_root_is_refused() {
    for env in [
        format!("{}/workspace/env", crate::common::EXEC_ROOT),
        crate::common::EXEC_ROOT.to_owned(),
    ] {
        let roots = Roots {
            environment: Some(env.clone()),
            ..roots()
        };
        let err = render(&default_like_policy(Network::None), &roots).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{env}: {err}");
    }
}
