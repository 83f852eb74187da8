//! Fixtures and the structural checks that every rendered profile must pass.
//!
//! `check_profile` is the one place that says what a profile must be: parsed
//! by the strict S-expression reader, starting `(version 1) (deny default)`,
//! with every referenced parameter defined and every defined one referenced,
//! no `(allow default)`, no file rule without a filter, no allow of any write
//! on the snapshot root or its ancestors, and no string in a path filter that
//! is not a parameter or a constant of the static `.sbpl` files.

use std::collections::BTreeSet;

use seatbelt::sexpr::{self, Expr};
use seatbelt::{Network, Rendered, Roots, SystemPolicy, BASE_POLICY, NETWORK_HOST_POLICY};

/// The execution root used by the fixtures, in the shape the runner uses on
/// macOS (`$TMPDIR` is under /private/var/folders).
pub const EXEC_ROOT: &str = "/private/var/folders/ab/T/sr/exec1";

pub fn roots() -> Roots {
    roots_under(EXEC_ROOT)
}

pub fn roots_under(exec_root: &str) -> Roots {
    Roots {
        snapshot_root: format!("{exec_root}/skills"),
        extensions_dir: format!("{exec_root}/workspace/.sciencediscovery/skill-extensions"),
        workspace: format!("{exec_root}/workspace"),
        tmp_dir: format!("{exec_root}/tmp"),
        environment: None,
    }
}

/// A policy shaped like the default profile's `[macos]` section.
pub fn default_like_policy(network: Network) -> SystemPolicy {
    SystemPolicy {
        read_only_subpaths: [
            "/bin",
            "/usr",
            "/System",
            "/Library",
            "/private/etc",
            "/private/var/db/timezone",
            "/opt/homebrew",
        ]
        .map(String::from)
        .to_vec(),
        read_only_literals: vec!["/private/var/db/xcode_select_link".to_owned()],
        network,
    }
}

/// The `NAME=value` lines of a rendered profile's parameters.
pub fn params_text(rendered: &Rendered) -> String {
    rendered
        .params
        .iter()
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect()
}

pub fn param<'a>(rendered: &'a Rendered, name: &str) -> Option<&'a str> {
    rendered
        .params
        .iter()
        .find(|(defined, _)| defined == name)
        .map(|(_, value)| value.as_str())
}

/// The top-level `(allow ...)` / `(deny ...)` rules of a parsed profile.
pub struct Rule<'a> {
    pub action: &'a str,
    pub operations: Vec<&'a str>,
    pub filters: Vec<&'a Expr>,
}

pub fn rules(exprs: &[Expr]) -> Vec<Rule<'_>> {
    exprs
        .iter()
        .filter(|expr| matches!(expr.head(), Some("allow" | "deny")))
        .map(|expr| {
            let items = &expr.items()[1..];
            let operations = items
                .iter()
                .filter_map(|item| match item {
                    Expr::Atom(atom) => Some(atom.as_str()),
                    _ => None,
                })
                .collect();
            let filters = items
                .iter()
                .filter(|item| matches!(item, Expr::List(_)))
                .collect();
            Rule {
                action: expr.head().unwrap_or_default(),
                operations,
                filters,
            }
        })
        .collect()
}

/// The parameter names referenced by one expression.
pub fn refs(expr: &Expr) -> BTreeSet<String> {
    sexpr::param_references(std::slice::from_ref(expr))
}

/// Every string literal at any depth that is not the argument of `param`.
fn strings_outside_params(exprs: &[Expr], out: &mut BTreeSet<String>) {
    for expr in exprs {
        match expr {
            Expr::Str(value) => {
                out.insert(value.clone());
            }
            Expr::List(items) if expr.head() == Some("param") => {
                assert_eq!(items.len(), 2, "malformed param form {expr:?}");
            }
            Expr::List(items) => strings_outside_params(items, out),
            Expr::Atom(_) => {}
        }
    }
}

/// The string constants of the static policy files.
pub fn static_strings() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for text in [BASE_POLICY, NETWORK_HOST_POLICY] {
        let exprs = sexpr::parse(text).expect("static policy parses");
        strings_outside_params(&exprs, &mut out);
    }
    out
}

/// Asserts every structural promise of a rendered profile; returns its forms.
pub fn check_profile(rendered: &Rendered) -> Vec<Expr> {
    let exprs = sexpr::parse(&rendered.profile)
        .unwrap_or_else(|e| panic!("profile does not parse: {e}\n{}", rendered.profile));

    // The opening: version, then closed by default.
    assert_eq!(
        exprs.first().map(|e| format!("{e:?}")),
        Some(format!(
            "{:?}",
            Expr::List(vec![Expr::Atom("version".into()), Expr::Atom("1".into())])
        ))
    );
    assert_eq!(exprs[1].head(), Some("deny"));
    assert_eq!(exprs[1].items().len(), 2);
    assert_eq!(exprs[1].items()[1], Expr::Atom("default".into()));
    for expr in &exprs {
        assert!(
            matches!(expr.head(), Some("version" | "allow" | "deny")),
            "unexpected top-level form {expr:?}"
        );
    }

    // Parameters: referenced == defined, defined once each.
    let defined: Vec<&str> = rendered.params.iter().map(|(n, _)| n.as_str()).collect();
    let defined_set: BTreeSet<String> = defined.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        defined.len(),
        defined_set.len(),
        "a parameter is defined twice"
    );
    assert_eq!(
        sexpr::param_references(&exprs),
        defined_set,
        "referenced and defined parameters differ"
    );
    for (name, value) in &rendered.params {
        assert!(
            !value.is_empty() && !value.contains('\0'),
            "bad value for {name}"
        );
        assert!(!name.contains('='), "bad name {name}");
    }

    let statics = static_strings();
    for rule in rules(&exprs) {
        // Never open by default.
        assert!(
            !(rule.action == "allow" && rule.operations.contains(&"default")),
            "(allow default) present"
        );
        // A file rule without a filter would apply to every path.
        if rule.operations.iter().any(|op| op.starts_with("file-")) {
            assert!(
                !rule.filters.is_empty(),
                "file rule without filter: {:?}",
                rule.operations
            );
        }
        // No allowed write may reach the snapshot or its ancestors.
        if rule.action == "allow"
            && rule
                .operations
                .iter()
                .any(|op| op.starts_with("file-write") || *op == "file-link" || *op == "file*")
        {
            for filter in &rule.filters {
                for name in refs(filter) {
                    assert!(
                        !name.starts_with("SNAPSHOT_"),
                        "write rule {:?} targets {name}",
                        rule.operations
                    );
                }
            }
        }
        // Path filters name a parameter or a static constant, nothing else.
        for filter in &rule.filters {
            if let [Expr::Atom(kind), argument] = filter.items() {
                if matches!(kind.as_str(), "literal" | "subpath" | "path" | "prefix") {
                    match argument {
                        Expr::List(_) => assert_eq!(argument.head(), Some("param")),
                        Expr::Str(value) => assert!(
                            statics.contains(value),
                            "path {value:?} is written into the profile"
                        ),
                        Expr::Atom(atom) => panic!("bare atom {atom} in a path filter"),
                    }
                }
            }
        }
    }
    let mut strings = BTreeSet::new();
    strings_outside_params(&exprs, &mut strings);
    let foreign: Vec<_> = strings.difference(&statics).collect();
    assert!(
        foreign.is_empty(),
        "strings not from the static files: {foreign:?}"
    );
    exprs
}

/// Whether any rule names a network operation.
pub fn has_network_rule(exprs: &[Expr]) -> bool {
    rules(exprs).iter().any(|rule| {
        rule.operations
            .iter()
            .any(|op| op.starts_with("network") || *op == "system-socket")
    })
}
