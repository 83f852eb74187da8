//! macOS Seatbelt (SBPL) profile generation for skill-runner.
//!
//! On macOS the skill packages are not mounted anywhere: they stay at their
//! real host path (the snapshot root), which the sandboxed command may read
//! but never write, rename or unlink, nor any of its ancestors. The command may
//! write only the extensions dir, the workspace, a private temp folder and
//! `/dev/null`. With network off there is no network rule at all:
//! `(deny default)` refuses it.
//!
//! This crate is pure: it does no I/O, spawns nothing and holds no `unsafe`.
//! It turns data into data, so it builds and is tested on Linux:
//!
//! - [`canonicalize`] makes a host path canonical the macOS way (symlinks via
//!   a caller-supplied callback, the `/tmp`, `/var`, `/etc` firmlinks), because
//!   Seatbelt matches rules against canonical paths only.
//! - [`render`] turns a [`SystemPolicy`] and canonical [`Roots`] into a
//!   [`Rendered`] profile: the static `base.sbpl` followed by generated rules.
//!   No host path is ever pasted into the profile text; each one is a
//!   `(param "NAME")` whose value travels separately as `-D NAME=value`.
//! - [`sandbox_exec_argv`] builds the `/usr/bin/sandbox-exec` command line.
//! - [`sexpr`] reads the S-expression subset the profile uses; the tests use it
//!   to prove every profile well-formed and its parameters complete.
//!
//! Invariants: output is deterministic (same input, same bytes); a profile is
//! produced only for roots that are canonical-looking and where the snapshot
//! root and the writable roots do not overlap.
//!
//! ```
//! use seatbelt::{canonicalize, render, sandbox_exec_argv, Network, Roots, SystemPolicy};
//!
//! // On macOS, back the callback with the real disk:
//! // let read_link = |p: &str| std::fs::read_link(p).ok().and_then(|t| t.to_str().map(String::from));
//! let read_link = |_: &str| None;
//! let canon = |p: &str| canonicalize(p, &read_link);
//! let roots = Roots {
//!     snapshot_root: canon("/var/folders/ab/T/sr/exec1/skills")?,
//!     extensions_dir: canon("/var/folders/ab/T/sr/exec1/workspace/.sciencediscovery/skill-extensions")?,
//!     workspace: canon("/var/folders/ab/T/sr/exec1/workspace")?,
//!     tmp_dir: canon("/var/folders/ab/T/sr/exec1/tmp")?,
//!     environment: None,
//! };
//! let policy = SystemPolicy {
//!     read_only_subpaths: vec!["/usr".into(), "/bin".into(), "/System".into()],
//!     read_only_literals: vec![],
//!     network: Network::None,
//! };
//! let rendered = render(&policy, &roots)?;
//! let argv = sandbox_exec_argv(&rendered, &["/bin/sh".into(), "-c".into(), "echo hi".into()]);
//! assert_eq!(argv[0], "/usr/bin/sandbox-exec");
//! assert!(argv.contains(&"SNAPSHOT_ROOT=/private/var/folders/ab/T/sr/exec1/skills".to_string()));
//! assert!(!rendered.profile.contains("/private/var/folders"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod argv;
mod path;
mod render;
pub mod sexpr;

pub use argv::{sandbox_exec_argv, SANDBOX_EXEC};
pub use path::{canonicalize, CanonicalizeError, MAX_SYMLINK_FOLLOWS};
pub use render::{
    render, Network, RenderError, Rendered, Roots, SystemPolicy, BASE_POLICY, NETWORK_HOST_POLICY,
    PARAM_ENVIRONMENT, PARAM_EXTENSIONS_DIR, PARAM_PROXY_ADDRESS, PARAM_SNAPSHOT_ROOT,
    PARAM_TMPDIR, PARAM_WORKSPACE,
};
