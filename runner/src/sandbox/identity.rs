//! Who the sandboxed command is on the host.
//!
//! bubblewrap maps the sandbox user (uid 1000 inside) to the uid that
//! started bubblewrap. A runner started as root would therefore give the
//! command host uid 0: no capabilities, but every check that compares the
//! caller with the global root uid or with a file's owner passes (writable
//! `/proc/sys` files, `chmod` of host device nodes, setuid-root files left
//! in a workspace). So a root runner never launches bubblewrap as root: it
//! becomes a dedicated unprivileged **sandbox user** first (default uid and
//! gid 65533, set with `SKILL_RUNNER_SANDBOX_USER=UID[:GID]`, never 0), and
//! bubblewrap creates its user namespace as that user.
//!
//! Why one uid for every execution of a host, and not one per execution
//! from a subordinate range: consecutive executions sharing a named
//! workspace must be able to write what the previous one wrote, which a
//! fresh uid per execution cannot without re-owning the tree each time.
//! Concurrent executions are kept apart by their namespaces (pid, ipc,
//! network, mount), not by uid. The price is that per-uid kernel counters
//! are shared by concurrent executions, as the inotify instance limits
//! are. `RLIMIT_NPROC` (used for `pids` only when no pids cgroup can be
//! had) is not among them on Linux 5.14 and later: the exec shim sets it
//! inside the execution's own user namespace, where the kernel counts the
//! execution's processes alone (see [`crate::sandbox::shim::NPROC_OPT`]).
//!
//! A runner that is root only inside a user namespace mapping uid 0 alone
//! (`unshare --map-root-user`, some container set-ups) cannot become
//! another uid. It then launches as itself, and the sandbox's safety rests
//! on the measures that hold whatever the identity: `/proc` and `/dev`
//! read-only, setuid and setgid bits refused by seccomp, and, when the
//! runner's uid maps to the parent namespace's root, the `chmod` and
//! extended-attribute calls refused altogether (see [`Identity::root_mapped`]).
//!
//! Pure decisions over the mapping files, so that every case is testable.

use serde::Serialize;

/// The default sandbox user and group of a root runner.
pub const DEFAULT_SANDBOX_ID: u32 = 65533;

/// The environment variable naming the sandbox user of a root runner.
pub const SANDBOX_USER_VAR: &str = "SKILL_RUNNER_SANDBOX_USER";

/// Why no safe identity can be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "{SANDBOX_USER_VAR}={text:?} is not UID or UID:GID with numbers between 1 and 4294967294"
    )]
    ParseSandboxUser { text: String },
}

/// The host identity the sandboxed command has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// The uid bubblewrap runs as (in the runner's user namespace).
    pub uid: u32,
    pub gid: u32,
    /// `sandbox_user`: a root runner switched to the dedicated user;
    /// `runner_user`: the runner's own (unprivileged) user;
    /// `runner_root_only`: a root runner that could not switch (only uid 0
    /// is mapped in its user namespace).
    pub mode: &'static str,
    /// The uid maps to root of the parent user namespace: file-mode and
    /// extended-attribute changes are refused by seccomp.
    pub root_mapped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Identity {
    /// The `(uid, gid)` to switch to before launching, if any.
    pub fn switch_to(&self) -> Option<(u32, u32)> {
        (self.mode == "sandbox_user").then_some((self.uid, self.gid))
    }
}

/// The group a root runner's data dir lets pass where bubblewrap binds
/// from (the sandbox user's, see [`crate::datadir`]); `None` when the
/// runner launches as itself.
pub fn data_dir_group() -> Option<u32> {
    detect()
        .ok()
        .and_then(|id| id.switch_to())
        .map(|(_, gid)| gid)
}

/// Parses `UID[:GID]`; the gid defaults to the uid. 0 is refused.
pub fn parse_user(text: &str) -> Result<(u32, u32), IdentityError> {
    let bad = || IdentityError::ParseSandboxUser {
        text: text.to_owned(),
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n != 0 && n != u32::MAX)
    };
    let (uid, gid) = match text.split_once(':') {
        Some((u, g)) => (num(u).ok_or_else(bad)?, num(g).ok_or_else(bad)?),
        None => {
            let u = num(text).ok_or_else(bad)?;
            (u, u)
        }
    };
    Ok((uid, gid))
}

/// One line of `/proc/self/uid_map`: `inside outside count`.
fn map_lines(map: &str) -> Vec<(u64, u64, u64)> {
    map.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().map(|w| w.parse::<u64>().ok());
            Some((it.next()??, it.next()??, it.next()??))
        })
        .collect()
}

/// What `id` maps to in the parent user namespace, if it is mapped.
pub fn outside(map: &str, id: u32) -> Option<u64> {
    let id = id as u64;
    map_lines(map)
        .into_iter()
        .find(|&(inside, _, count)| id >= inside && id < inside + count)
        .map(|(inside, out, _)| out + (id - inside))
}

/// Decides the identity from the runner's effective ids, the configured
/// sandbox user and the runner's uid and gid maps.
pub fn decide(
    euid: u32,
    egid: u32,
    configured: Option<(u32, u32)>,
    uid_map: &str,
    gid_map: &str,
) -> Identity {
    let root_mapped = |uid: u32| outside(uid_map, uid) == Some(0);
    if euid != 0 {
        return Identity {
            uid: euid,
            gid: egid,
            mode: "runner_user",
            root_mapped: root_mapped(euid),
            note: None,
        };
    }
    let (uid, gid) = configured.unwrap_or((DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID));
    if outside(uid_map, uid).is_some() && outside(gid_map, gid).is_some() {
        return Identity {
            uid,
            gid,
            mode: "sandbox_user",
            root_mapped: root_mapped(uid),
            note: None,
        };
    }
    Identity {
        uid: 0,
        gid: egid,
        mode: "runner_root_only",
        root_mapped: root_mapped(0),
        note: Some(format!(
            "the runner is root in a user namespace that does not map the sandbox user {uid}:{gid}, so the command runs as the runner's own user; mode changes are refused inside the sandbox"
        )),
    }
}

/// The identity of this process's sandboxes, or why none is safe.
pub fn detect() -> Result<Identity, IdentityError> {
    let configured = match std::env::var(SANDBOX_USER_VAR) {
        Ok(v) if !v.is_empty() => Some(parse_user(&v)?),
        _ => None,
    };
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let identity = decide(
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
        configured,
        &read("/proc/self/uid_map"),
        &read("/proc/self/gid_map"),
    );
    Ok(identity)
}

/// Whether `uid`/`gid` may write into a folder with this owner and mode
/// (owner, group and other bits; ACLs are not consulted).
pub fn may_write(uid: u32, gid: u32, owner: u32, group: u32, mode: u32) -> bool {
    if uid == 0 {
        return true;
    }
    let (w, x) = if owner == uid {
        (0o200, 0o100)
    } else if group == gid {
        (0o020, 0o010)
    } else {
        (0o002, 0o001)
    };
    mode & w != 0 && mode & x != 0
}

/// Whether `uid`/`gid` may pass through a folder with this owner and mode.
pub fn may_search(uid: u32, gid: u32, owner: u32, group: u32, mode: u32) -> bool {
    let x = if uid == 0 {
        return true;
    } else if owner == uid {
        0o100
    } else if group == gid {
        0o010
    } else {
        0o001
    };
    mode & x != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "         0          0 4294967295\n";
    const ROOT_ONLY: &str = "         0          0          1\n";
    const ROOTLESS: &str = "         0       1000          1\n         1     100000      65536\n";

    #[test]
    fn a_root_runner_switches_to_the_sandbox_user() {
        let id = decide(0, 0, None, FULL, FULL);
        assert_eq!(id.mode, "sandbox_user");
        assert_eq!((id.uid, id.gid), (65533, 65533));
        assert_eq!(id.switch_to(), Some((65533, 65533)));
        assert!(!id.root_mapped);
        let id = decide(0, 0, Some((4000, 4001)), FULL, FULL);
        assert_eq!(id.switch_to(), Some((4000, 4001)));
    }

    #[test]
    fn a_root_only_namespace_cannot_switch_and_says_so() {
        let id = decide(0, 0, None, ROOT_ONLY, ROOT_ONLY);
        assert_eq!(id.mode, "runner_root_only");
        assert_eq!(id.switch_to(), None);
        assert!(id.root_mapped, "uid 0 maps to the parent's root");
        assert!(id.note.unwrap().contains("65533"));
    }

    #[test]
    fn a_rootless_container_maps_the_sandbox_user_elsewhere() {
        let id = decide(0, 0, None, ROOTLESS, ROOTLESS);
        assert_eq!(id.mode, "sandbox_user");
        assert_eq!(outside(ROOTLESS, 65533), Some(100000 + 65532));
        assert!(!id.root_mapped);
    }

    #[test]
    fn an_unprivileged_runner_keeps_its_own_user() {
        let id = decide(1000, 1000, Some((4000, 4000)), FULL, FULL);
        assert_eq!(id.mode, "runner_user");
        assert_eq!(id.switch_to(), None);
        assert_eq!((id.uid, id.gid), (1000, 1000));
        // `unshare --map-root-user` by an ordinary user: 0 → 1000.
        let id = decide(0, 0, None, "0 1000 1\n", "0 1000 1\n");
        assert_eq!(id.mode, "runner_root_only");
        assert!(!id.root_mapped);
    }

    #[test]
    fn the_sandbox_user_is_never_root() {
        assert_eq!(parse_user("4000"), Ok((4000, 4000)));
        assert_eq!(parse_user("4000:5000"), Ok((4000, 5000)));
        for bad in ["0", "0:5", "5:0", "", "x", "-1", "4294967295", "1:2:3"] {
            assert!(parse_user(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn write_permission_follows_owner_group_other() {
        assert!(may_write(65533, 65533, 65533, 0, 0o700));
        assert!(!may_write(65533, 65533, 0, 0, 0o755));
        assert!(may_write(65533, 65533, 0, 65533, 0o770));
        assert!(may_write(65533, 65533, 0, 0, 0o777));
        assert!(!may_write(65533, 65533, 65533, 0, 0o500));
        assert!(may_write(0, 0, 1, 1, 0o000));
        assert!(may_search(65533, 65533, 0, 65533, 0o710));
        assert!(!may_search(65533, 65533, 0, 0, 0o700));
        assert!(may_search(65533, 65533, 0, 0, 0o711));
    }
}
