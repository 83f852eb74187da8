//! Why bubblewrap could not finish a sandbox, and what to change.
//!
//! Whether the setup failed is never decided here: the exec shim decides it
//! ([`crate::sandbox::shim::ExecReport::NotReached`]: the command was never
//! executed). This module only turns bubblewrap's own message into advice:
//! a table ([`KNOWN`]) maps the messages seen inside and outside containers
//! to their cause and to the fix, which differs between a container (Docker,
//! Podman, Kubernetes: change how the container is run) and a plain host
//! (change a sysctl or the user). docs/containers.md has the same table
//! with the measured `docker run` matrix.

/// One known way for bubblewrap's setup to fail.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// A piece of bubblewrap's message (`bwrap: …` on its stderr).
    pub pattern: &'static str,
    /// What it means.
    pub cause: &'static str,
    /// What to change when the runner runs in a container.
    pub container_fix: &'static str,
    /// What to change on a plain host.
    pub host_fix: &'static str,
}

/// The docs page with the container matrix.
const DOCS: &str = "docs/containers.md";

/// bubblewrap's messages, most specific first.
pub const KNOWN: &[Known] = &[
    Known {
        pattern: "No permissions to creat",
        cause: "creating namespaces was refused",
        container_fix: "the container's seccomp profile refuses unshare and clone with namespace flags (Docker's default does): run it with --security-opt seccomp=deploy/seccomp-bwrap.json (Kubernetes: a Localhost seccompProfile with that file)",
        host_fix: "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap), or check for a seccomp filter on the runner",
    },
    Known {
        pattern: "max_*_namespaces exceeded",
        cause: "no user namespace may be created here (user.max_user_namespaces is 0 or used up)",
        container_fix: "raise user.max_user_namespaces on the host (sysctl -w user.max_user_namespaces=15000); a container cannot raise it for itself",
        host_fix: "raise it: sysctl -w user.max_user_namespaces=15000",
    },
    Known {
        pattern: "Creating new namespace failed: Resource temporarily unavailable",
        cause: "the kernel refused bubblewrap a new process (EAGAIN): the runner's user reached its process limit",
        container_fix: "raise the container's process limit (docker run --pids-limit, or the pod's pids limit) or the runner's ulimit -u",
        host_fix: "raise the runner's process limit (ulimit -u, or TasksMax= of its systemd service)",
    },
    Known {
        pattern: "Creating new namespace failed",
        cause: "creating namespaces was refused",
        container_fix: "the container's seccomp profile or security module refuses new namespaces: run it with --security-opt seccomp=deploy/seccomp-bwrap.json",
        host_fix: "allow user namespaces for this user (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)",
    },
    Known {
        pattern: "Can't mount proc",
        cause: "/proc is masked: the kernel refuses a fresh /proc for the sandbox's pid namespace while parts of the existing one are covered (container engines cover /proc/kcore, /proc/sys and others)",
        container_fix: "run the container with --security-opt systempaths=unconfined (Podman: --security-opt unmask=ALL; Kubernetes: securityContext.procMount: Unmasked, or the privileged DaemonSet in deploy/kubernetes)",
        host_fix: "something is mounted over part of /proc (for example a read-only /proc/sys); run the runner where /proc is fully visible",
    },
    Known {
        pattern: "max_user_namespaces",
        cause: "/proc/sys is read-only, so bubblewrap cannot forbid nested user namespaces (--disable-userns)",
        container_fix: "run the container with --security-opt systempaths=unconfined (Kubernetes: procMount: Unmasked)",
        host_fix: "make /proc/sys writable for the runner's user namespace",
    },
    Known {
        pattern: "setting up uid map",
        cause: "bubblewrap could not write the uid map of its user namespace (a root process without CAP_SETUID and CAP_SETGID, as with docker run --cap-drop ALL)",
        container_fix: "run the container as a non-root user (--user 1000:1000), or keep Docker's default capabilities (SETUID and SETGID at least)",
        host_fix: "run the runner as an ordinary user, or as root with its capabilities",
    },
    Known {
        pattern: "pivot_root",
        cause: "pivot_root was refused: Docker's default seccomp profile does not allow it even with --cap-add SYS_ADMIN (an AppArmor or SELinux policy can refuse it too)",
        container_fix: "do not add SYS_ADMIN; use --security-opt seccomp=deploy/seccomp-bwrap.json --security-opt systempaths=unconfined, and where AppArmor is enforced also --security-opt apparmor=unconfined",
        host_fix: "an AppArmor or SELinux policy confines the runner; allow pivot_root and mount for bwrap",
    },
    Known {
        pattern: "execvp /proc/self/fd/",
        cause: "the runner's exec shim (its own binary, which must start inside the sandbox) could not be executed there",
        container_fix: "use the static release binary (scripts/build-release; the image in deploy/ has it)",
        host_fix: "use the static release binary (scripts/build-release), or a profile that binds the libraries a dynamically linked skill-runner needs",
    },
    Known {
        pattern: "Can't find source path",
        cause: "a folder to bind is missing or cannot be reached by the user bubblewrap runs as",
        container_fix: "make the data dir, workspaces and extension dirs reachable by the runner's sandbox user",
        host_fix: "make the data dir, workspaces and extension dirs reachable by the runner's sandbox user",
    },
    Known {
        pattern: "sethostname",
        cause: "setting the sandbox's hostname was refused",
        container_fix: "the container's seccomp profile refuses sethostname: use --security-opt seccomp=deploy/seccomp-bwrap.json",
        host_fix: "check for a seccomp filter or security module on the runner",
    },
    Known {
        pattern: "Can't mount",
        cause: "a mount inside the sandbox was refused by a security policy",
        container_fix: "use --security-opt seccomp=deploy/seccomp-bwrap.json --security-opt systempaths=unconfined, and where AppArmor is enforced also --security-opt apparmor=unconfined",
        host_fix: "an AppArmor or SELinux policy confines the runner; allow mount for bwrap",
    },
];

/// The container engine this process runs under, if any can be seen.
pub fn container() -> Option<&'static str> {
    let exists = |p: &str| std::path::Path::new(p).exists();
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return Some("kubernetes");
    }
    if exists("/.dockerenv") {
        return Some("docker");
    }
    if exists("/run/.containerenv") {
        return Some("podman");
    }
    if std::env::var_os("container").is_some_and(|c| !c.is_empty()) {
        return Some("container");
    }
    None
}

/// The `bwrap: …` line that says why, or the last line written.
fn reason(stderr: &str) -> Option<&str> {
    let lines = || stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    lines()
        .rfind(|l| l.starts_with("bwrap:"))
        .or_else(|| lines().next_back())
}

/// Why bubblewrap could not finish a sandbox, and what to change: its
/// kind on the wire is `sandbox_failed` ([`crate::exec::outcome`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupFailure {
    /// A message of the table: its cause and the fix.
    #[error("bubblewrap could not set up the sandbox{}: {line}: {cause}; to fix: {fix}; see {DOCS}", in_container(*container))]
    Known {
        line: String,
        cause: &'static str,
        fix: &'static str,
        container: Option<&'static str>,
    },
    #[error(
        "bubblewrap could not set up the sandbox: {line}; run skill-runner doctor, and see {DOCS}"
    )]
    Unknown { line: String },
    #[error("bubblewrap was killed by signal {signal} before the command started; run skill-runner doctor")]
    Killed { signal: i32 },
    #[error("bubblewrap exited ({code}) before starting the command, without a message; run skill-runner doctor")]
    Silent { code: i32 },
}

fn in_container(container: Option<&str>) -> String {
    container
        .map(|c| format!(" (in a {c} container)"))
        .unwrap_or_default()
}

/// The failure of a sandbox bubblewrap could not finish: its reason, what
/// it means and what to change. `status` is bubblewrap's exit (`Err` for
/// a signal), `container` what [`container`] found.
pub fn setup_failed(
    stderr: &[u8],
    status: Result<i32, i32>,
    container: Option<&'static str>,
) -> SetupFailure {
    let text = String::from_utf8_lossy(stderr);
    match (reason(&text), status) {
        (Some(line), _) => match KNOWN.iter().find(|k| line.contains(k.pattern)) {
            Some(k) => SetupFailure::Known {
                line: line.to_owned(),
                cause: k.cause,
                fix: match container {
                    Some(_) => k.container_fix,
                    None => k.host_fix,
                },
                container,
            },
            None => SetupFailure::Unknown {
                line: line.to_owned(),
            },
        },
        (None, Err(signal)) => SetupFailure::Killed { signal },
        (None, Ok(code)) => SetupFailure::Silent { code },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages measured in containers and emulated on hosts.
    const SEEN: &[(&str, &str)] = &[
        ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.", "seccomp=deploy/seccomp-bwrap.json"),
        ("bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.", "seccomp=deploy/seccomp-bwrap.json"),
        ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", "systempaths=unconfined"),
        ("bwrap: pivot_root: Operation not permitted", "apparmor=unconfined"),
        ("bwrap: setting up uid map: Operation not permitted", "--user 1000:1000"),
        ("bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)", "user.max_user_namespaces"),
        ("bwrap: cannot open /proc/sys/user/max_user_namespaces: Read-only file system", "systempaths=unconfined"),
        ("bwrap: execvp /proc/self/fd/8: No such file or directory", "scripts/build-release"),
        ("bwrap: Creating new namespace failed: Resource temporarily unavailable", "--pids-limit"),
    ];

    #[test]
    fn every_measured_message_names_its_fix() {
        for (line, fix) in SEEN {
            let e = setup_failed(line.as_bytes(), Ok(1), Some("docker")).to_string();
            assert!(e.contains(line), "{line}: {e}");
            assert!(e.contains(fix), "{line}: {e}");
            assert!(e.contains("docs/containers.md"), "{e}");
            assert!(e.contains("(in a docker container)"), "{e}");
        }
    }

    #[test]
    fn outside_a_container_the_host_fix_is_given() {
        let e = setup_failed(
            b"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n",
            Ok(1),
            None,
        )
        .to_string();
        assert!(e.contains("fully visible"), "{e}");
        assert!(!e.contains("--security-opt"), "{e}");
    }

    #[test]
    fn the_last_bwrap_line_is_the_reason() {
        let e = setup_failed(b"noise\nbwrap: first\nbwrap: sethostname: x\n", Ok(1), None);
        assert!(e.to_string().contains("bwrap: sethostname: x"), "{e}");
    }

    #[test]
    fn silence_and_signals_still_say_what_happened() {
        let said = |e: SetupFailure| e.to_string();
        assert!(said(setup_failed(b"", Err(9), None)).contains("signal 9"));
        assert!(said(setup_failed(b"", Ok(1), None)).contains("exited (1)"));
        let unknown = said(setup_failed(b"bwrap: something new\n", Ok(1), None));
        assert!(unknown.contains("bwrap: something new"));
        assert!(unknown.contains("doctor"));
    }
}
