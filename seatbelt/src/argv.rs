//! The `sandbox-exec` command line for a rendered profile.
//!
//! `sandbox-exec [-f file | -n name | -p string] [-D key=value ...] command
//! [args]` parses its options with getopt(3), so `--` ends them and a command
//! whose first word starts with `-` is never taken for an option. Each
//! parameter goes as its own `-D` and `NAME=value` pair of arguments: an
//! argument vector carries any byte but NUL (which `render` refuses), and
//! `sandbox-exec` splits `NAME=value` at the first `=`, so an `=` inside a
//! value stays in the value. Were that split ever made at another `=`, the
//! named parameter would be undefined and the profile would fail to compile:
//! the failure is closed, never a rule on the wrong path.
//!
//! Invariant: the program is always `/usr/bin/sandbox-exec` by absolute path,
//! never looked up in `PATH`.

use crate::render::Rendered;

/// Absolute path of Apple's `sandbox-exec`; never resolved through `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The full argument vector that runs `argv` under `rendered`:
/// `["/usr/bin/sandbox-exec", "-p", <profile>, "-D", "NAME=value", ..., "--",
/// argv...]`, parameters in `rendered.params` order.
///
/// `argv` must not be empty (the caller validates the job); an empty one
/// yields a command line that `sandbox-exec` rejects with a usage error.
pub fn sandbox_exec_argv(rendered: &Rendered, argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(4 + 2 * rendered.params.len() + argv.len());
    out.push(SANDBOX_EXEC.to_owned());
    out.push("-p".to_owned());
    out.push(rendered.profile.clone());
    for (name, value) in &rendered.params {
        out.push("-D".to_owned());
        out.push(format!("{name}={value}"));
    }
    out.push("--".to_owned());
    out.extend(argv.iter().cloned());
    out
}
