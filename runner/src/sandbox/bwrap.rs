//! Rendering a launch plan to a bubblewrap argv.
//!
//! [`bwrap_args`] is a pure function from a [`Plan`] (profile mounts, the
//! execution's host folders, environment, argv) to the argument vector of
//! `bwrap`. Nothing here spawns; [`crate::supervise`] does. The data the
//! sandbox reads at start (seccomp programs, `/etc/passwd`, `/etc/group`)
//! reaches bwrap on file descriptors with fixed numbers, so the argv is the
//! same for every execution with the same plan, and no file is shared or
//! rewritten between concurrent executions.
//!
//! The host folders of an execution (the snapshot root, a named workspace
//! or extensions dir) are opened by the runner at launch and reach bwrap as
//! descriptors too (`--bind-fd`): nothing can swap a path for a symlink
//! between the runner's checks and the mount, and bwrap, which a root
//! runner starts as the unprivileged sandbox user ([`crate::sandbox::identity`]),
//! needs no search permission on the runner's private data dir.
//!
//! Order of operations (bwrap applies them in order; later ones win):
//! namespaces and process flags, the profile's system mounts, the synthetic
//! account files, `/proc` (read-only: `/proc/sys`, `/proc/sysrq-trigger`
//! and every other host-global knob), `/dev` (read-only but for a sized
//! `/dev/shm`), the private `/tmp`, then `/skills` (read-only),
//! `/workspace` (a host folder, or a fresh tmpfs of `disk_bytes`) and
//! `/skill-extensions` (writable), the job's environment read-only at
//! `/opt/skill-env` when it names one, with a network allowlist the execution's
//! network folder read-only at `/run/skill-runner` (the runner's proxy socket, see
//! [`crate::sandbox::net`]), and last `--remount-ro /` so the sandbox cannot create
//! files at its root. The network namespace is always new (`--unshare-all`):
//! with an allowlist it still has only loopback.
//!
//! bwrap does not execute the command itself: it executes the runner's own
//! binary as the exec shim ([`SHIM_PATH`], through [`FD_SHIM`]), which
//! tells the runner that the sandbox was finished and then executes the
//! command (see [`crate::sandbox::shim`]).
//!
//! [`FD_SHIM`]: crate::sandbox::shim::FD_SHIM

use std::ffi::OsString;
use std::path::Path;

use crate::sandbox::paths::{
    DEFAULT_EXTENSIONS, ENVIRONMENT_DIR, EXTENSIONS_DIR, EXTENSIONS_VAR, SKILLS_DIR, SKILLS_VAR,
    WORKSPACE_DIR,
};
use crate::sandbox::profile::Mount;
use crate::sandbox::shim::SHIM_PATH;

// The descriptor numbers are the sandbox's table (crate::sandbox::fds).
pub use crate::sandbox::fds::{
    FD_ENVIRONMENT, FD_ETC, FD_EXTENSIONS, FD_GROUP, FD_NET, FD_PASSWD, FD_SECCOMP_RULES,
    FD_SKILLS, FD_WORKSPACE,
};
/// The user the command runs as inside the sandbox.
pub const SANDBOX_UID: u32 = 1000;
pub const SANDBOX_GID: u32 = 1000;

/// `/etc/passwd` inside the sandbox.
pub const PASSWD: &str = "sandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
/// `/etc/group` inside the sandbox.
pub const GROUP: &str = "sandbox:x:1000:\nnogroup:x:65534:\n";

/// What the installed bwrap can do (probed once, see [`crate::exec::doctor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BwrapFeatures {
    /// `--disable-userns` (bubblewrap ≥ 0.8).
    pub disable_userns: bool,
}

/// Where `/workspace` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workspace {
    /// A host folder, on [`FD_WORKSPACE`].
    Host,
    /// A fresh, empty tmpfs of this many bytes: what a command writes there
    /// never reaches the host disk, and the size bounds it.
    Fresh { bytes: u64 },
}

/// Where `/skill-extensions` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extensions {
    /// A host folder, on [`FD_EXTENSIONS`].
    Host,
    /// `.sciencediscovery/skill-extensions` of a fresh workspace, created
    /// there and linked at `/skill-extensions`.
    InFreshWorkspace,
}

/// Everything the argv depends on.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub mounts: &'a [Mount],
    pub workspace: Workspace,
    pub extensions: Extensions,
    /// Relative to the workspace; empty for the workspace itself.
    pub cwd: &'a str,
    /// The complete environment (see [`environment`]).
    pub env: &'a [(String, String)],
    /// The command, aliases already rewritten.
    pub argv: &'a [String],
    pub tmp_bytes: u64,
    pub features: BwrapFeatures,
    /// A network allowlist: the proxy's folder is bound on [`FD_NET`] and
    /// the shim starts the forwarder ([`crate::sandbox::shim::SHIM_NET_ARG`]). The
    /// proxy variables are in `env`.
    pub proxy: bool,
    /// The `pids` limit as `RLIMIT_NPROC`, which the shim sets inside the
    /// sandbox's user namespace (see [`crate::sandbox::shim`]); `None` when a
    /// cgroup enforces it.
    pub nproc: Option<u64>,
    /// `/etc` is the prepared copy on [`FD_ETC`] ([`crate::sandbox::etcview`]):
    /// the profile's mounts below `/etc` and the account files are in it.
    pub etc_view: bool,
    /// The job's environment is bound read-only at `/opt/skill-env` from
    /// [`FD_ENVIRONMENT`] (docs/environments.md); its variables are in `env`.
    pub environment: bool,
}

/// The environment in the sandbox (docs/formats.md): the fixed baseline,
/// then the job's variables (already validated not to touch a reserved
/// name).
pub fn environment(job_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("HOME", "/tmp"),
        ("PATH", "/usr/bin:/bin"),
        ("LANG", "C.UTF-8"),
        (SKILLS_VAR, SKILLS_DIR),
        (EXTENSIONS_VAR, EXTENSIONS_DIR),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    env.extend(job_env.iter().cloned());
    env
}

/// Renders the bwrap argv (without the program name).
pub fn bwrap_args(plan: &Plan<'_>) -> Vec<OsString> {
    let mut a = Args::default();
    // Namespaces and process: every namespace new (user, pid, net, ipc, uts,
    // cgroup, mount); no nested user namespaces; killed with the runner; no
    // controlling terminal; no capabilities; nothing of the runner's env.
    a.flag("--unshare-all");
    a.flag("--unshare-user");
    if plan.features.disable_userns {
        a.flag("--disable-userns");
    }
    a.flag("--die-with-parent");
    a.flag("--new-session");
    a.opt("--cap-drop", "ALL");
    a.opt("--uid", SANDBOX_UID.to_string());
    a.opt("--gid", SANDBOX_GID.to_string());
    a.opt("--hostname", "sandbox");
    a.flag("--clearenv");
    // System view from the profile, in order (its `/etc` pieces are in the
    // prepared copy when there is one).
    for m in plan.mounts {
        if plan.etc_view && crate::sandbox::etcview::folded(m) {
            continue;
        }
        match m {
            Mount::RoBind { src, dest } => a.pair("--ro-bind", src, dest),
            Mount::RoBindTry { src, dest } => a.pair("--ro-bind-try", src, dest),
            Mount::Symlink { target, dest } => a.pair("--symlink", target, dest),
        }
    }
    if plan.etc_view {
        // One read-only bind of a copy of those pieces and the account
        // files, instead of a bind, a mount-table read and a remount each.
        a.pair("--ro-bind-fd", FD_ETC.to_string(), "/etc");
    } else {
        // The account files are copied into the sandbox's root tmpfs, which
        // `--remount-ro /` below makes read-only with everything else in
        // it: no bind and no remount of their own (a `--ro-bind-data` costs
        // bwrap a temporary file, a bind, a read of the mount table and a
        // remount).
        a.opt("--perms", "0444");
        a.pair("--file", FD_PASSWD.to_string(), "/etc/passwd");
        a.opt("--perms", "0444");
        a.pair("--file", FD_GROUP.to_string(), "/etc/group");
    }
    // A fresh /proc, read-only as a whole: /proc/sys, /proc/sysrq-trigger
    // and the other host-global files must not be writable whatever uid
    // the sandbox has (one remount; bwrap's own cover skips /proc/sys
    // when the folder itself is not writable, though files in it are).
    a.opt("--proc", "/proc");
    a.opt("--remount-ro", "/proc");
    // A fresh /dev, read-only (no files planted in it), with a sized
    // /dev/shm. Its device nodes are binds of the host's: only the owner
    // check keeps their modes, see crate::sandbox::identity and crate::sandbox::seccomp.
    a.opt("--dev", "/dev");
    a.opt("--remount-ro", "/dev");
    a.opt("--size", plan.tmp_bytes.to_string());
    a.opt("--perms", "1777");
    a.opt("--tmpfs", "/dev/shm");
    a.opt("--size", plan.tmp_bytes.to_string());
    a.opt("--perms", "1777");
    a.opt("--tmpfs", "/tmp");
    // The execution's folders.
    a.pair("--ro-bind-fd", FD_SKILLS.to_string(), SKILLS_DIR);
    if plan.environment {
        // The sealed tree itself, never a copy: read-only, whatever its
        // modes say.
        a.pair("--ro-bind-fd", FD_ENVIRONMENT.to_string(), ENVIRONMENT_DIR);
    }
    match plan.workspace {
        Workspace::Host => a.pair("--bind-fd", FD_WORKSPACE.to_string(), WORKSPACE_DIR),
        Workspace::Fresh { bytes } => {
            a.opt("--size", bytes.to_string());
            a.opt("--perms", "0755");
            a.opt("--tmpfs", WORKSPACE_DIR);
        }
    }
    match plan.extensions {
        Extensions::Host => a.pair("--bind-fd", FD_EXTENSIONS.to_string(), EXTENSIONS_DIR),
        Extensions::InFreshWorkspace => {
            let inside = format!("{WORKSPACE_DIR}/{DEFAULT_EXTENSIONS}");
            a.opt("--dir", &inside);
            a.pair("--symlink", &inside, EXTENSIONS_DIR);
        }
    }
    if plan.proxy {
        // Read-only: connecting to the socket needs no write to the
        // folder (a socket's write check ignores a read-only mount), and
        // the folder is on the data dir's disk, which `disk_bytes` does
        // not watch, so the command must not be able to fill it.
        a.pair(
            "--ro-bind-fd",
            FD_NET.to_string(),
            crate::sandbox::net::SANDBOX_SOCKET_DIR,
        );
    }
    a.opt("--remount-ro", "/");
    let cwd = if plan.cwd.is_empty() {
        WORKSPACE_DIR.to_owned()
    } else {
        format!("{WORKSPACE_DIR}/{}", plan.cwd)
    };
    a.opt("--chdir", &cwd);
    for (k, v) in plan.env {
        a.pair("--setenv", k, v);
    }
    // One program (rules and guard merged): bwrap loads each program it
    // is given twice, into its pid 1 and into the command's process.
    a.opt("--add-seccomp-fd", FD_SECCOMP_RULES.to_string());
    // bwrap executes the shim, which reports that the sandbox is finished
    // and executes the command (see crate::sandbox::shim).
    a.flag("--");
    a.flag(SHIM_PATH);
    a.flag(if plan.proxy {
        crate::sandbox::shim::SHIM_NET_ARG
    } else {
        crate::sandbox::shim::SHIM_ARG
    });
    if let Some(n) = plan.nproc {
        a.opt(crate::sandbox::shim::NPROC_OPT, n.to_string());
    }
    a.flag("--");
    for arg in plan.argv {
        a.flag(arg);
    }
    a.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, f: impl AsRef<std::ffi::OsStr>) {
        self.0.push(f.as_ref().to_owned());
    }
    fn opt(&mut self, f: &str, v: impl AsRef<std::ffi::OsStr>) {
        self.flag(f);
        self.flag(v);
    }
    fn pair(&mut self, f: &str, a: impl AsRef<std::ffi::OsStr>, b: impl AsRef<std::ffi::OsStr>) {
        self.flag(f);
        self.flag(a);
        self.flag(b);
    }
}

/// Quotes an argv for a POSIX shell, one option group per line, for
/// `explain`.
pub fn shell_quote(program: &Path, args: &[OsString]) -> String {
    fn q(s: &str) -> String {
        if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-=:,+@%".contains(&b))
        {
            s.to_owned()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    }
    let mut out = q(&program.to_string_lossy());
    let mut after_dashdash = false;
    for arg in args {
        let s = arg.to_string_lossy();
        if !after_dashdash && s.starts_with("--") {
            out.push_str(" \\\n  ");
        } else {
            out.push(' ');
        }
        if s == "--" {
            after_dashdash = true;
        }
        out.push_str(&q(&s));
    }
    out
}

#[cfg(test)]
#[path = "bwrap_tests.rs"]
mod tests;
