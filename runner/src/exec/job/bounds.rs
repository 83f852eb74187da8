//! The bounds of a job: the sizes of argv and the environment that
//! bubblewrap and the kernel take, and the smallest and largest limits a
//! sandbox can be started with. A job outside them is refused as such (a
//! fault of the job), never reported as a sandbox that cannot start.

use super::{JobError, Limits, RawLimits};
use crate::sandbox::profile::DefaultLimits;

/// The most argv elements a job may have. bubblewrap refuses more than
/// 9000 arguments in all (measured with bubblewrap 0.8: its own
/// `MAX_ARGS`), and the runner's options for it take a few hundred.
pub const MAX_ARGV: usize = 8192;

/// The longest argv element or `NAME=value` env entry: the kernel's
/// `MAX_ARG_STRLEN` (32 pages of 4 KiB) less its NUL.
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Room of `ARG_MAX` kept for bubblewrap's options and the runner's
/// environment.
pub const ARG_RESERVE: usize = 64 * 1024;

/// The smallest `memory_bytes`: bubblewrap and the exec shim do not start
/// in less.
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;
/// The smallest `pids`: bubblewrap, the sandbox's init and the exec shim
/// count too.
pub const MIN_PIDS: u64 = 8;
/// The smallest `file_size_bytes`: bubblewrap writes the sandbox's
/// `/etc/passwd` and `/etc/group` under it.
pub const MIN_FILE_SIZE_BYTES: u64 = 4096;
/// The largest `pids`: Linux's `PID_MAX_LIMIT` (no `pid_max` is higher).
pub const MAX_PIDS: u64 = 4 << 20;
/// The largest `tmp_bytes` and `disk_bytes`: bubblewrap's `--size` is a
/// signed 64-bit number.
pub const MAX_TMPFS_BYTES: u64 = i64::MAX as u64;

/// Bytes `execve` may take for argv and the environment here
/// (`sysconf(_SC_ARG_MAX)`, 2 MiB when unknown).
pub fn arg_max() -> usize {
    crate::supervise::sys::arg_max().unwrap_or(2 << 20)
}

/// Checks argv and env against bubblewrap's and the kernel's limits, so
/// that a job too large for them is refused as such (a fault of the job),
/// never reported as a sandbox that cannot start.
pub(super) fn check_arg_sizes(argv: &[String], env: &[(String, String)]) -> Result<(), JobError> {
    if argv.len() > MAX_ARGV {
        return Err(JobError::ArgvTooMany {
            count: argv.len(),
            max: MAX_ARGV,
        });
    }
    let ptr = std::mem::size_of::<usize>();
    let mut total = 0usize;
    for (i, a) in argv.iter().enumerate() {
        if a.len() > MAX_ARG_BYTES {
            return Err(JobError::ArgTooLong {
                what: format!("argv element {i}"),
                bytes: a.len(),
                max: MAX_ARG_BYTES,
            });
        }
        total += a.len() + 1 + ptr;
    }
    for (name, value) in env {
        let len = name.len() + 1 + value.len();
        if len > MAX_ARG_BYTES {
            return Err(JobError::ArgTooLong {
                what: format!("env {}", crate::text::single_line(name)),
                bytes: len,
                max: MAX_ARG_BYTES,
            });
        }
        total += len + 1 + ptr;
    }
    let max = arg_max().saturating_sub(ARG_RESERVE);
    if total > max {
        return Err(JobError::ArgsTooLarge { bytes: total, max });
    }
    Ok(())
}

/// The smallest limits a sandbox starts in, and why.
const LIMIT_MINIMA: [(&str, u64, &str); 3] = [
    (
        "memory_bytes",
        MIN_MEMORY_BYTES,
        "bubblewrap and the exec shim cannot start in less",
    ),
    (
        "pids",
        MIN_PIDS,
        "the sandbox's own processes (bubblewrap, its init, the exec shim) count too",
    ),
    (
        "file_size_bytes",
        MIN_FILE_SIZE_BYTES,
        "bubblewrap writes the sandbox's /etc/passwd under it",
    ),
];

/// The largest limits the kernel and bubblewrap take, and why.
const LIMIT_MAXIMA: [(&str, u64, &str); 3] = [
    (
        "pids",
        MAX_PIDS,
        "no kernel has more process ids (PID_MAX_LIMIT)",
    ),
    (
        "tmp_bytes",
        MAX_TMPFS_BYTES,
        "bubblewrap sizes a tmpfs with a signed 64-bit number",
    ),
    (
        "disk_bytes",
        MAX_TMPFS_BYTES,
        "a fresh workspace is a tmpfs, which bubblewrap sizes with a signed 64-bit number",
    ),
];

/// The limits in force: those asked for, within their bounds, else the
/// profile's defaults.
pub(super) fn limits(l: &RawLimits, d: &DefaultLimits) -> Result<Limits, JobError> {
    let asked = |name: &str| match name {
        "memory_bytes" => l.memory_bytes,
        "pids" => l.pids,
        "file_size_bytes" => l.file_size_bytes,
        "tmp_bytes" => l.tmp_bytes,
        "disk_bytes" => l.disk_bytes,
        _ => None,
    };
    for (name, min, why) in LIMIT_MINIMA {
        if let Some(value) = asked(name).filter(|&v| v > 0 && v < min) {
            return Err(JobError::LimitTooSmall {
                name,
                value,
                min,
                why,
            });
        }
    }
    for (name, max, why) in LIMIT_MAXIMA {
        if let Some(value) = asked(name).filter(|&v| v > max) {
            return Err(JobError::LimitTooLarge {
                name,
                value,
                max,
                why,
            });
        }
    }
    let positive = |v: Option<u64>, default: u64, name| match v {
        None => Ok(default),
        Some(0) => Err(JobError::Limit { name }),
        Some(v) => Ok(v),
    };
    Ok(Limits {
        timeout_ms: positive(l.timeout_ms, d.timeout_ms, "timeout_ms")?,
        output_bytes: positive(l.output_bytes, d.output_bytes, "output_bytes")?,
        memory_bytes: positive(l.memory_bytes, d.memory_bytes, "memory_bytes")?,
        pids: positive(l.pids, d.pids, "pids")?,
        cpu_ms: match l.cpu_ms {
            Some(0) => return Err(JobError::Limit { name: "cpu_ms" }),
            v => v,
        },
        file_size_bytes: positive(l.file_size_bytes, d.file_size_bytes, "file_size_bytes")?,
        tmp_bytes: positive(l.tmp_bytes, d.tmp_bytes, "tmp_bytes")?,
        open_files: d.open_files,
        disk_bytes: positive(l.disk_bytes, d.disk_bytes, "disk_bytes")?,
    })
}
