//! Rendering a Seatbelt profile from data.
//!
//! The profile is the static `base.sbpl`, then generated rules in a fixed
//! order (later rules win in Seatbelt, so the order is part of the policy):
//!
//! 1. metadata-only access to the ancestors of every allowed path, so that
//!    realpath(3) and getcwd can walk down to them;
//! 2. read access to the read-only system folders and files of the profile
//!    data;
//! 3. read access to the snapshot root (the skill packages), and to the
//!    job's environment (its libraries) when it names one;
//! 4. read and write access to the extensions dir, the workspace and the
//!    private temp folder;
//! 5. `network_host.sbpl`, only when the profile data asks for the network;
//!    or, for a job's network allowlist, one rule letting the command open
//!    TCP connections to the runner's proxy on loopback and nowhere else;
//! 6. last, the snapshot protection: no write, unlink, rename or hard link
//!    inside the snapshot root, and no write (so no rename or unlink) of any of
//!    its ancestors; and no write or hard link inside the environment.
//!
//! Invariants:
//! - No host path is ever written into the profile text. Each is a
//!   `(param "NAME")` reference and travels as `-D NAME=value`, so quotes,
//!   parentheses, newlines, `;` or any Unicode in a path cannot change the
//!   profile's structure. The profile text depends only on the *number* of
//!   paths of each kind and on the network setting.
//! - Every parameter referenced is defined, every one defined is referenced,
//!   and their order is fixed (see [`Rendered::params`]).
//! - No rule is emitted with an empty filter list: in SBPL a rule without a
//!   filter applies to everything.
//! - A profile is only rendered for canonical-looking paths, for read-only
//!   system paths that are not `/` (subpath) and not inside `/dev`, and when
//!   neither the snapshot root nor any writable root contains the other.

use std::collections::BTreeSet;

use crate::path::{ancestors, check_host_path, is_within};

/// The static head of every profile (`seatbelt/base.sbpl`).
pub const BASE_POLICY: &str = include_str!("../base.sbpl");

/// The rules appended when the network is allowed
/// (`seatbelt/network_host.sbpl`).
pub const NETWORK_HOST_POLICY: &str = include_str!("../network_host.sbpl");

/// Parameter holding the snapshot root (read-only).
pub const PARAM_SNAPSHOT_ROOT: &str = "SNAPSHOT_ROOT";
/// Parameter holding the extensions dir (writable).
pub const PARAM_EXTENSIONS_DIR: &str = "EXTENSIONS_DIR";
/// Parameter holding the workspace (writable).
pub const PARAM_WORKSPACE: &str = "WORKSPACE";
/// Parameter holding the private temp folder (writable).
pub const PARAM_TMPDIR: &str = "TMPDIR";
/// Parameter holding the job's environment tree (read-only), when it
/// names one.
pub const PARAM_ENVIRONMENT: &str = "ENVIRONMENT";

/// Prefix of the parameters naming the snapshot root's ancestors, top down
/// (`SNAPSHOT_ANCESTOR_0` is the one just below `/`).
const PARAM_SNAPSHOT_ANCESTOR: &str = "SNAPSHOT_ANCESTOR_";
/// Prefix of the parameters naming the ancestors of every allowed path, in
/// byte order, deduplicated (metadata access only).
const PARAM_ANCESTOR: &str = "ANCESTOR_";
/// Prefix of the parameters naming read-only system folders, in input order.
const PARAM_RO_SUBPATH: &str = "RO_SUBPATH_";
/// Prefix of the parameters naming read-only system files, in input order.
const PARAM_RO_LITERAL: &str = "RO_LITERAL_";
/// Parameter holding the proxy's address, `localhost:PORT` (network proxy).
pub const PARAM_PROXY_ADDRESS: &str = "PROXY_ADDRESS";

/// Whether the sandboxed command may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// No network rule at all: `(deny default)` refuses every socket.
    #[default]
    None,
    /// IP networking as the host has it (`network_host.sbpl`). Not used by the
    /// default profile.
    Host,
    /// A job's network allowlist: outbound TCP to the runner's proxy on this
    /// loopback port only (the proxy decides every request; names are
    /// resolved by the runner, so no DNS either).
    Proxy {
        /// The proxy's port on 127.0.0.1.
        port: u16,
    },
}

/// The macOS part of a sandbox profile, from the profile data file's `[macos]`
/// section. Paths must be canonical (`/private/etc`, not `/etc`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SystemPolicy {
    /// System folders readable with everything below them, e.g. `/usr`,
    /// `/bin`, `/System`, `/private/etc`, `/opt/homebrew`.
    pub read_only_subpaths: Vec<String>,
    /// Single system files readable.
    pub read_only_literals: Vec<String>,
    /// Network access.
    pub network: Network,
}

/// The per-execution host folders. All must already be canonical (pass each
/// through [`crate::canonicalize`]); `render` refuses anything that does not
/// look canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The snapshot root holding the staged skill packages: read-only.
    pub snapshot_root: String,
    /// The extensions dir: writable.
    pub extensions_dir: String,
    /// The workspace: writable.
    pub workspace: String,
    /// The private temp folder of this execution: writable.
    pub tmp_dir: String,
    /// The job's environment (the sealed tree of its libraries in the
    /// runner's store), when it names one: read-only, like the snapshot.
    pub environment: Option<String>,
}

/// A rendered profile and the values of the parameters it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The SBPL text: `base.sbpl` followed by the generated rules.
    pub profile: String,
    /// `(name, value)` for every `(param "name")` in the profile, in this
    /// fixed order: `SNAPSHOT_ROOT`, `EXTENSIONS_DIR`, `WORKSPACE`, `TMPDIR`,
    /// `ENVIRONMENT` (when [`Roots::environment`] is set),
    /// `SNAPSHOT_ANCESTOR_0..`, `ANCESTOR_0..`, `RO_SUBPATH_0..`,
    /// `RO_LITERAL_0..`, and `PROXY_ADDRESS` with [`Network::Proxy`].
    pub params: Vec<(String, String)>,
}

/// Why a profile could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A root is not an absolute canonical path.
    #[error("the {root} {path:?} is not canonical ({reason}): pass it through seatbelt::canonicalize first")]
    RootNotCanonical {
        /// Which root: `snapshot root`, `extensions dir`, `workspace`,
        /// `temp dir`, `environment`.
        root: &'static str,
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A read-only system path from the profile data is not canonical.
    #[error("the read-only system path {path:?} is not canonical ({reason}): fix the [macos] section of the profile")]
    SystemPathNotCanonical {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A read-only system path would open far more than system files.
    #[error("the read-only system path {path:?} is refused ({reason}): name narrower folders in the [macos] section of the profile")]
    SystemPathTooBroad {
        /// The path as given.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The snapshot root and a writable root contain one another (or are
    /// equal), so the packages would be writable, or renameable.
    #[error("the snapshot root {snapshot_root:?} and the writable {root} {path:?} overlap: neither may contain the other; use separate folders")]
    SnapshotOverlapsWritable {
        /// The snapshot root.
        snapshot_root: String,
        /// Which writable root: `extensions dir`, `workspace`, `temp dir`.
        root: &'static str,
        /// Its path.
        path: String,
    },
    /// The environment and a writable root contain one another (or are
    /// equal), so the libraries would be writable.
    #[error("the environment {environment:?} and the writable {root} {path:?} overlap: neither may contain the other")]
    EnvironmentOverlapsWritable {
        /// The environment's tree.
        environment: String,
        /// Which writable root: `extensions dir`, `workspace`, `temp dir`.
        root: &'static str,
        /// Its path.
        path: String,
    },
    /// A parameter cannot travel as one `-D NAME=value` argument.
    #[error("parameter {name} cannot be passed to sandbox-exec as -D {name}=value ({reason})")]
    ParamNotPassable {
        /// The parameter name.
        name: String,
        /// Why not.
        reason: &'static str,
    },
}

/// Renders the profile for `policy` and `roots`.
///
/// # Errors
///
/// See [`RenderError`]: a root or system path that is not canonical, a
/// read-only system path that is `/` (as a subpath) or inside `/dev`, a
/// snapshot root that overlaps a writable root, or a parameter that cannot be
/// passed on a command line.
pub fn render(policy: &SystemPolicy, roots: &Roots) -> Result<Rendered, RenderError> {
    let writable: [(&'static str, &'static str, &str); 3] = [
        (
            "extensions dir",
            PARAM_EXTENSIONS_DIR,
            &roots.extensions_dir,
        ),
        ("workspace", PARAM_WORKSPACE, &roots.workspace),
        ("temp dir", PARAM_TMPDIR, &roots.tmp_dir),
    ];
    check_roots(roots, &writable)?;
    let subpaths = dedup(&policy.read_only_subpaths);
    let literals = dedup(&policy.read_only_literals);
    check_system_paths(&subpaths, &literals)?;

    let mut params = Params::default();
    let snapshot = params.define(PARAM_SNAPSHOT_ROOT, &roots.snapshot_root)?;
    let mut writable_refs = Vec::with_capacity(writable.len());
    for (_, name, path) in writable {
        writable_refs.push(params.define(name, path)?);
    }
    let environment: Vec<String> = match &roots.environment {
        Some(path) => vec![params.define(PARAM_ENVIRONMENT, path)?],
        None => Vec::new(),
    };
    let snapshot_ancestors =
        params.define_list(PARAM_SNAPSHOT_ANCESTOR, &ancestors(&roots.snapshot_root))?;
    let mut traversed = BTreeSet::new();
    let all_paths = [roots.snapshot_root.as_str()]
        .into_iter()
        .chain(roots.environment.as_deref())
        .chain(writable.iter().map(|(_, _, path)| *path))
        .chain(subpaths.iter().copied())
        .chain(literals.iter().copied());
    for path in all_paths {
        traversed.extend(ancestors(path));
    }
    let traversed: Vec<String> = traversed.into_iter().collect();
    let traversed = params.define_list(PARAM_ANCESTOR, &traversed)?;
    let subpaths = params.define_list(PARAM_RO_SUBPATH, &subpaths)?;
    let literals = params.define_list(PARAM_RO_LITERAL, &literals)?;
    let proxy = match policy.network {
        Network::Proxy { port } => {
            Some(params.define(PARAM_PROXY_ADDRESS, &format!("localhost:{port}"))?)
        }
        _ => None,
    };

    let mut profile = String::with_capacity(BASE_POLICY.len() + NETWORK_HOST_POLICY.len() + 4096);
    profile.push_str(BASE_POLICY);
    profile.push_str(concat!(
        "\n",
        "; ---- generated by skill-runner-seatbelt (seatbelt/src/render.rs) ----\n",
        "; Every host path below is a (param \"NAME\") whose value is passed as\n",
        "; `-D NAME=value`; no path is ever written into this text.\n",
        "\n",
    ));
    push_rule(
        &mut profile,
        &[
            "Ancestors of every allowed path: stat only (no listing, no reading),",
            "so that realpath(3), getcwd and Python can walk down to them.",
        ],
        "allow",
        &["file-read-metadata", "file-test-existence"],
        &filters("literal", &traversed),
    );
    push_rule(
        &mut profile,
        &[
            "Read-only system folders from the profile data: interpreters, libraries,",
            "configuration. file-map-executable lets dyld and Python map the dylibs",
            "and extension modules found there.",
        ],
        "allow",
        &["file-read*", "file-test-existence", "file-map-executable"],
        &filters("subpath", &subpaths),
    );
    push_rule(
        &mut profile,
        &["Read-only single system files from the profile data."],
        "allow",
        &["file-read*", "file-test-existence"],
        &filters("literal", &literals),
    );
    push_rule(
        &mut profile,
        &[
            "The skill packages (snapshot root): readable, never writable. Compiled",
            "modules shipped in a package may be mapped executable, as they may be",
            "exec'd.",
        ],
        "allow",
        &["file-read*", "file-test-existence", "file-map-executable"],
        &filters("subpath", std::slice::from_ref(&snapshot)),
    );
    push_rule(
        &mut profile,
        &[
            "The job's environment (the sealed tree of its libraries): readable,",
            "never writable. Its compiled modules (numpy, Pillow) are mapped",
            "executable, its programs (bin/) may be exec'd.",
        ],
        "allow",
        &["file-read*", "file-test-existence", "file-map-executable"],
        &filters("subpath", &environment),
    );
    push_rule(
        &mut profile,
        &[
            "Writable roots: the extensions dir, the workspace and the private temp",
            "folder. file-map-executable because anything written here may be exec'd",
            "anyway (process-exec is allowed, inside this sandbox). Hard links",
            "(file-link) and clones (file-clone) are not allowed anywhere.",
        ],
        "allow",
        &[
            "file-read*",
            "file-test-existence",
            "file-map-executable",
            "file-write*",
        ],
        &filters("subpath", &writable_refs),
    );
    if policy.network == Network::Host {
        profile.push_str("; ---- network = host: network_host.sbpl ----\n");
        profile.push_str(NETWORK_HOST_POLICY);
        profile.push('\n');
    }
    if let Some(proxy) = &proxy {
        push_rule(
            &mut profile,
            &[
                "network = proxy: TCP to the runner's proxy on loopback, nothing else.",
                "The proxy resolves names and decides every request by the job's",
                "allowlist; no other socket, no DNS, no Unix socket is reachable.",
            ],
            "allow",
            &["network-outbound"],
            &filters("remote tcp", std::slice::from_ref(proxy)),
        );
    }
    push_rule(
        &mut profile,
        &[
            "Snapshot protection, last so that it overrides every allow above.",
            "render() already refuses a writable root inside or around the snapshot,",
            "so no allow above reaches it; these denials keep that true if a rule is",
            "ever added. file-write* covers write, create, unlink, rename, chmod,",
            "chflags, xattrs and times; file-link refuses hard links, which would give",
            "a package file a second name outside these rules.",
        ],
        "deny",
        &["file-write*", "file-link"],
        &filters("subpath", &[snapshot]),
    );
    push_rule(
        &mut profile,
        &[
            "Move-the-folder bypass: renaming an ancestor of the snapshot root away and",
            "putting a look-alike in its place would leave the rules above pointing at",
            "the look-alike. Deny writes (file-write-unlink is what rename and rmdir",
            "check) on each ancestor itself, as a literal, so the folders beside the",
            "snapshot stay usable. `/` is not listed: it cannot be renamed or removed.",
        ],
        "deny",
        &["file-write*"],
        &filters("literal", &snapshot_ancestors),
    );
    push_rule(
        &mut profile,
        &[
            "Environment protection, last for the same reason: no write, unlink,",
            "rename or hard link inside the environment's tree. render() refuses a",
            "writable root inside or around it.",
        ],
        "deny",
        &["file-write*", "file-link"],
        &filters("subpath", &environment),
    );
    // Each rule ends with a blank line; the profile ends with one newline.
    while profile.ends_with("\n\n") {
        profile.pop();
    }
    Ok(Rendered {
        profile,
        params: params.values,
    })
}

fn check_roots(
    roots: &Roots,
    writable: &[(&'static str, &'static str, &str)],
) -> Result<(), RenderError> {
    let all = [("snapshot root", roots.snapshot_root.as_str())]
        .into_iter()
        .chain(writable.iter().map(|(root, _, path)| (*root, *path)));
    for (root, path) in all {
        check_host_path(path).map_err(|reason| RenderError::RootNotCanonical {
            root,
            path: path.to_owned(),
            reason,
        })?;
        if is_within(path, "/dev") {
            return Err(RenderError::RootNotCanonical {
                root,
                path: path.to_owned(),
                reason: "it is inside /dev, which holds devices, not folders",
            });
        }
    }
    if let Some(env) = &roots.environment {
        check_host_path(env).map_err(|reason| RenderError::RootNotCanonical {
            root: "environment",
            path: env.clone(),
            reason,
        })?;
        for (root, _, path) in writable {
            if is_within(path, env) || is_within(env, path) {
                return Err(RenderError::EnvironmentOverlapsWritable {
                    environment: env.clone(),
                    root,
                    path: (*path).to_owned(),
                });
            }
        }
    }
    for (root, _, path) in writable {
        if is_within(path, &roots.snapshot_root) || is_within(&roots.snapshot_root, path) {
            return Err(RenderError::SnapshotOverlapsWritable {
                snapshot_root: roots.snapshot_root.clone(),
                root,
                path: (*path).to_owned(),
            });
        }
    }
    Ok(())
}

fn check_system_paths(subpaths: &[&str], literals: &[&str]) -> Result<(), RenderError> {
    for path in subpaths.iter().chain(literals) {
        check_host_path(path).map_err(|reason| RenderError::SystemPathNotCanonical {
            path: (*path).to_owned(),
            reason,
        })?;
        if is_within(path, "/dev") {
            return Err(RenderError::SystemPathTooBroad {
                path: (*path).to_owned(),
                reason: "/dev holds the terminals and disks; base.sbpl grants the few devices a command needs",
            });
        }
    }
    if subpaths.contains(&"/") {
        return Err(RenderError::SystemPathTooBroad {
            path: "/".to_owned(),
            reason: "the whole file system would be readable, every host file included",
        });
    }
    Ok(())
}

/// The distinct entries of `paths`, first occurrence first.
fn dedup(paths: &[String]) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    paths
        .iter()
        .map(String::as_str)
        .filter(|path| seen.insert(*path))
        .collect()
}

/// The parameters defined so far, in definition order.
#[derive(Debug, Default)]
struct Params {
    values: Vec<(String, String)>,
}

impl Params {
    /// Defines `name = value` and returns the SBPL text that references it.
    fn define(&mut self, name: &str, value: &str) -> Result<String, RenderError> {
        check_param(name, value)?;
        debug_assert!(
            self.values.iter().all(|(defined, _)| defined != name),
            "parameter {name} defined twice"
        );
        self.values.push((name.to_owned(), value.to_owned()));
        Ok(format!("(param \"{name}\")"))
    }

    /// Defines `<prefix>0`, `<prefix>1`, ... for `values`, in order.
    fn define_list<S: AsRef<str>>(
        &mut self,
        prefix: &str,
        values: &[S],
    ) -> Result<Vec<String>, RenderError> {
        values
            .iter()
            .enumerate()
            .map(|(index, value)| self.define(&format!("{prefix}{index}"), value.as_ref()))
            .collect()
    }
}

/// Refuses what one `-D NAME=value` argument cannot carry. Names are ours and
/// are `[A-Z][A-Z0-9_]*`, so they need no quoting inside `(param "...")` and
/// contain no `=`. Values may hold any byte but NUL; `=` is fine because
/// `sandbox-exec` splits at the first one, which ends the name.
fn check_param(name: &str, value: &str) -> Result<(), RenderError> {
    let fail = |reason| {
        Err(RenderError::ParamNotPassable {
            name: name.to_owned(),
            reason,
        })
    };
    let mut chars = name.chars();
    let name_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !name_ok {
        return fail("the name is not [A-Z][A-Z0-9_]*");
    }
    if value.is_empty() {
        return fail("the value is empty");
    }
    if value.contains('\0') {
        return fail("the value contains a NUL byte");
    }
    Ok(())
}

/// `(<kind> <reference>)` for each reference.
fn filters(kind: &str, references: &[String]) -> Vec<String> {
    references
        .iter()
        .map(|reference| format!("({kind} {reference})"))
        .collect()
}

/// Appends one commented rule, or nothing when `filters` is empty: a rule
/// without a filter would apply to every path.
fn push_rule(
    out: &mut String,
    comment: &[&str],
    action: &str,
    operations: &[&str],
    filters: &[String],
) {
    if filters.is_empty() {
        return;
    }
    for line in comment {
        out.push_str("; ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('(');
    out.push_str(action);
    for operation in operations {
        out.push(' ');
        out.push_str(operation);
    }
    for filter in filters {
        out.push_str("\n  ");
        out.push_str(filter);
    }
    out.push_str(")\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_names_and_values() {
        assert!(check_param("RO_SUBPATH_10", "/a=b").is_ok());
        assert!(check_param("ro", "/a").is_err());
        assert!(check_param("A=B", "/a").is_err());
        assert!(check_param("", "/a").is_err());
        assert!(check_param("A", "").is_err());
        assert!(check_param("A", "/a\0b").is_err());
    }

    #[test]
    fn empty_filter_list_emits_nothing() {
        let mut out = String::new();
        push_rule(&mut out, &["c"], "allow", &["file-read*"], &[]);
        assert_eq!(out, "");
    }

    #[test]
    fn dedup_keeps_first_occurrence_order() {
        let paths = ["/b", "/a", "/b", "/c", "/a"].map(String::from);
        assert_eq!(dedup(&paths), vec!["/b", "/a", "/c"]);
    }
}
