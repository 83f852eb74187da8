//! What the sandbox finds on each file descriptor: one table, read by the
//! launch plan ([`crate::exec::plan`]), by `explain` (its text and JSON),
//! by `explain --fds-dir` (the names of the files it writes) and by the
//! exec shim (`runner/exec-shim/shim.rs` carries its own copies of the
//! shim's numbers, checked against this table by a test here).
//!
//! The numbers are fixed, so the argv is the same for every execution
//! with the same plan. Three kinds of descriptor:
//! - [`Holds::File`]: bytes the runner writes into a sealed memfd (the
//!   seccomp programs, the account files) or the exec shim it hands over;
//! - [`Holds::Pipe`]: a pipe the exec shim writes and the runner reads;
//! - [`Holds::Folder`]: a host folder the runner opens at launch and
//!   bubblewrap binds (`--bind-fd`, `--ro-bind-fd`).

/// Child fd carrying the seccomp program ([`crate::sandbox::seccomp`]:
/// the rules with the guard's refusals; fd 4, which carried the guard as
/// a program of its own, is unused).
pub const FD_SECCOMP_RULES: i32 = 3;
/// Child fd carrying `/etc/passwd` (unless it is in the prepared `/etc`).
pub const FD_PASSWD: i32 = 5;
/// Child fd carrying `/etc/group` (unless it is in the prepared `/etc`).
pub const FD_GROUP: i32 = 6;
/// Child fd of the exec shim's report pipe ([`crate::sandbox::shim`]).
pub const FD_EXEC_REPORT: i32 = 7;
/// Child fd of the exec shim, which bwrap executes as `/proc/self/fd/8`.
pub const FD_SHIM: i32 = 8;
/// Child fd of the command's stderr; bwrap's own stderr is a pipe apart.
pub const FD_STDERR: i32 = 9;
/// Child fd of the snapshot root (`/skills`).
pub const FD_SKILLS: i32 = 10;
/// Child fd of a host extensions dir (`/skill-extensions`).
pub const FD_EXTENSIONS: i32 = 11;
/// Child fd of a host workspace (`/workspace`).
pub const FD_WORKSPACE: i32 = 12;
/// Child fd of the execution's network folder (`/run/skill-runner`).
pub const FD_NET: i32 = 13;
/// Child fd of the prepared `/etc` ([`crate::sandbox::etcview`]).
pub const FD_ETC: i32 = 14;
/// Child fd of the job's environment (`/opt/skill-env`,
/// docs/environments.md).
pub const FD_ENVIRONMENT: i32 = 15;
/// Child fd of a prepared sandbox's hand-over pipe: the runner writes the
/// command (argv, environment, cwd) once, the exec shim reads it
/// ([`crate::sandbox::shim`], docs/prepared.md).
pub const FD_HANDOVER: i32 = 16;

/// What kind of thing a descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// Bytes the runner hands over (a sealed memfd, or the shim's binary).
    File,
    /// A pipe the exec shim writes and the runner reads.
    Pipe,
    /// A host folder, opened by the runner at launch.
    Folder,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub fd: i32,
    pub holds: Holds,
    /// How `explain`'s first line names it (`3 seccomp BPF, …`).
    pub label: &'static str,
    /// What `explain --json` says of it under `fds`.
    pub about: &'static str,
    /// The name of its file in an `explain --fds-dir` folder, and of its
    /// memfd.
    pub file: Option<&'static str>,
}

const fn row(
    fd: i32,
    holds: Holds,
    label: &'static str,
    about: &'static str,
    file: Option<&'static str>,
) -> Descriptor {
    Descriptor {
        fd,
        holds,
        label,
        about,
        file,
    }
}

/// Every descriptor the sandbox may find, in the order of their numbers.
pub const TABLE: [Descriptor; 13] = [
    row(
        FD_SECCOMP_RULES,
        Holds::File,
        "seccomp BPF",
        "seccomp rules and guard (one BPF program)",
        Some("3-seccomp-rules.bpf"),
    ),
    row(
        FD_PASSWD,
        Holds::File,
        "/etc/passwd",
        "/etc/passwd",
        Some("5-passwd"),
    ),
    row(
        FD_GROUP,
        Holds::File,
        "/etc/group",
        "/etc/group",
        Some("6-group"),
    ),
    row(
        FD_EXEC_REPORT,
        Holds::Pipe,
        "shim report",
        "exec shim report (written by the shim: one byte, then an errno if the command cannot be executed)",
        None,
    ),
    row(
        FD_SHIM,
        Holds::File,
        "the exec shim",
        "the exec shim (\"shim\"; --fds-dir writes it as 8-shim), which bwrap executes as /proc/self/fd/8",
        Some("8-shim"),
    ),
    row(
        FD_STDERR,
        Holds::Pipe,
        "stderr",
        "the command's stderr (bwrap's own stays on 2)",
        None,
    ),
    row(FD_SKILLS, Holds::Folder, "/skills", "the snapshot root", None),
    row(
        FD_EXTENSIONS,
        Holds::Folder,
        "/skill-extensions",
        "a host extensions dir",
        None,
    ),
    row(
        FD_WORKSPACE,
        Holds::Folder,
        "/workspace",
        "a host workspace",
        None,
    ),
    row(
        FD_NET,
        Holds::Folder,
        "/run/skill-runner",
        "the execution's network folder",
        None,
    ),
    row(FD_ETC, Holds::Folder, "/etc", "the prepared /etc", None),
    row(
        FD_ENVIRONMENT,
        Holds::Folder,
        "/opt/skill-env",
        "the job's environment (a sealed tree of the store, read-only)",
        None,
    ),
    row(
        FD_HANDOVER,
        Holds::Pipe,
        "hand-over",
        "a prepared sandbox's hand-over pipe (written once by the runner: the command's argv, environment and cwd; read and closed by the exec shim)",
        None,
    ),
];

/// The row of `fd`.
///
/// # Panics
/// On a number that is not in [`TABLE`]: a programming error.
pub fn descriptor(fd: i32) -> &'static Descriptor {
    TABLE
        .iter()
        .find(|d| d.fd == fd)
        .unwrap_or_else(|| panic!("fd {fd} is not in the sandbox's table"))
}

/// The `--fds-dir` file name of `fd`.
///
/// # Panics
/// On a descriptor that is no file: a programming error.
pub fn file_name(fd: i32) -> &'static str {
    descriptor(fd)
        .file
        .unwrap_or_else(|| panic!("fd {fd} is not written as a file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_ordered_and_each_number_is_once() {
        for pair in TABLE.windows(2) {
            assert!(pair[0].fd < pair[1].fd, "{pair:?}");
        }
        assert_eq!(TABLE.first().map(|d| d.fd), Some(3), "0-2 are stdio");
        for d in TABLE {
            if let Some(file) = d.file {
                assert!(file.starts_with(&format!("{}-", d.fd)), "{d:?}");
            }
            assert_eq!(d.file.is_some(), d.holds == Holds::File, "{d:?}");
        }
    }

    /// The small exec shim is a program of its own, without this crate:
    /// its numbers must be the table's.
    #[test]
    fn the_small_exec_shim_uses_the_tables_numbers() {
        let shim = include_str!("../../exec-shim/shim.rs");
        let number = |name: &str| -> i32 {
            let line = shim
                .lines()
                .find(|l| l.starts_with(&format!("const {name}: usize = ")))
                .unwrap_or_else(|| panic!("exec-shim/shim.rs has no const {name}"));
            line.rsplit(' ')
                .next()
                .and_then(|n| n.trim_end_matches(';').parse().ok())
                .unwrap_or_else(|| panic!("not a number: {line}"))
        };
        assert_eq!(number("FD_REPORT"), FD_EXEC_REPORT);
        assert_eq!(number("FD_STDERR"), FD_STDERR);
        assert_eq!(descriptor(FD_EXEC_REPORT).holds, Holds::Pipe);
        assert_eq!(descriptor(FD_STDERR).holds, Holds::Pipe);
        assert_eq!(
            crate::sandbox::shim::SHIM_PATH,
            format!("/proc/self/fd/{FD_SHIM}")
        );
    }
}
