//! Reports: print what the sandbox looks like from inside, exit 0.
//!
//! These make no attempt; the test reads the output and asserts on it (no
//! host processes visible, no capabilities, a seccomp filter in place, the
//! baseline environment, no inherited fds, an unprivileged uid).
//!
//! | subcommand | output |
//! |---|---|
//! | `procs` | `PIDS n`, then `pid comm` per numeric `/proc` entry, by pid |
//! | `caps` | the `CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs Seccomp` lines of `/proc/self/status`, as they are there |
//! | `env` | `KEY=VALUE` per variable, sorted by key (bytes that are not UTF-8 shown as U+FFFD) |
//! | `fds` | `fd -> target` per open fd but the one used for listing, by fd |
//! | `uid` | `uid=N gid=N euid=N` |

use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::verdict::{errno_of, errno_text, Outcome};

/// The `/proc/self/status` keys `caps` prints.
const STATUS_KEYS: &[&str] = &[
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
];

/// `procs`.
pub fn procs() -> Outcome {
    let entries = match std::fs::read_dir("/proc") {
        Ok(entries) => entries,
        Err(error) => return Outcome::no_verdict(format!("probe: cannot list /proc: {error}")),
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut text = format!("PIDS {}", pids.len());
    for pid in pids {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"));
        let comm = comm.as_deref().map_or("?", str::trim_end);
        text.push_str(&format!("\n{pid} {comm}"));
    }
    Outcome::report(text)
}

/// `caps`.
pub fn caps() -> Outcome {
    match std::fs::read_to_string("/proc/self/status") {
        Ok(status) => Outcome::report(status_lines(&status, STATUS_KEYS)),
        Err(error) => Outcome::no_verdict(format!("probe: cannot read /proc/self/status: {error}")),
    }
}

/// The lines of a `/proc/<pid>/status` text whose key is one of `keys`, in
/// the file's order.
fn status_lines(status: &str, keys: &[&str]) -> String {
    status
        .lines()
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(key, _)| keys.contains(&key))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `env`.
pub fn env() -> Outcome {
    let mut vars: Vec<_> = std::env::vars_os().collect();
    vars.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let lines: Vec<String> = vars
        .iter()
        .map(|(key, value)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(key.as_bytes()),
                String::from_utf8_lossy(value.as_bytes())
            )
        })
        .collect();
    Outcome::report(lines.join("\n"))
}

/// `fds`.
pub fn fds() -> Outcome {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = match nix::dir::Dir::open("/proc/self/fd", flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(errno) => {
            return Outcome::no_verdict(format!(
                "probe: cannot list /proc/self/fd: {}",
                errno_text(errno)
            ))
        }
    };
    let listing = dir.as_raw_fd();
    let mut fds: Vec<i32> = dir
        .iter()
        .filter_map(|entry| entry.ok()?.file_name().to_str().ok()?.parse().ok())
        .filter(|fd| *fd != listing)
        .collect();
    drop(dir);
    fds.sort_unstable();
    let lines: Vec<String> = fds
        .iter()
        .map(|fd| {
            let target = match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                Ok(target) => target.display().to_string(),
                Err(error) => format!("? ({})", errno_text(errno_of(&error))),
            };
            format!("{fd} -> {target}")
        })
        .collect();
    Outcome::report(lines.join("\n"))
}

/// `uid`.
pub fn uid() -> Outcome {
    Outcome::report(format!(
        "uid={} gid={} euid={}",
        nix::unistd::getuid(),
        nix::unistd::getgid(),
        nix::unistd::geteuid()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_keep_only_the_asked_keys_in_file_order() {
        let status = "Name:\tprobe\nCapInh:\t0\nCapPrm:\t0\nSeccomp:\t2\n\
                      Seccomp_filters:\t1\nNoNewPrivs:\t1\nCapEff:\t0";
        assert_eq!(
            status_lines(status, STATUS_KEYS),
            "CapInh:\t0\nCapPrm:\t0\nSeccomp:\t2\nNoNewPrivs:\t1\nCapEff:\t0"
        );
    }
}
