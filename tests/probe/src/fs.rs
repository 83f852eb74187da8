//! Filesystem attempts: change or read a path the sandbox should protect.
//!
//! Each subcommand makes one system call (two for `write-file`/`append`:
//! open, then write) on the path it is given, and any error is a denial
//! ([`Rule::AnyError`]): the change did not happen. The errno is printed so
//! the test can tell `EROFS` (read-only mount, what `/skills` should give)
//! from `ENOENT` (a path the test got wrong).
//!
//! `read-file` is the one that reads: `ALLOWED <first line>` (at most 200
//! characters, control characters replaced by `?`), `DENIED` if the open or
//! the read fails.

use std::os::fd::AsFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, AT_FDCWD};
use nix::sys::stat::{FchmodatFlags, Mode};
use nix::unistd::UnlinkatFlags;

use crate::verdict::{verdict, Attempt, Outcome, Rule};

/// What `write-file` and `append` write.
const PAYLOAD: &[u8] = b"written by probe\n";

/// The longest first line `read-file` prints.
const MAX_LINE_CHARS: usize = 200;

fn one(label: &str, result: Result<String, Errno>) -> Outcome {
    verdict(&[Attempt::new(label, result, Rule::AnyError)])
}

/// `write-file PATH`: create (or truncate) PATH and write a line to it.
pub fn write_file(path: &Path) -> Outcome {
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC;
    open_and_write(path, flags, "created")
}

/// `append PATH`: open an existing PATH for append and write a line to it.
pub fn append(path: &Path) -> Outcome {
    let flags = OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CLOEXEC;
    open_and_write(path, flags, "appended to")
}

fn open_and_write(path: &Path, flags: OFlag, verb: &str) -> Outcome {
    let fd = match nix::fcntl::open(path, flags, Mode::from_bits_truncate(0o644)) {
        Ok(fd) => fd,
        Err(errno) => return one("open", Err(errno)),
    };
    let result = write_all(fd.as_fd(), PAYLOAD).map(|()| {
        format!(
            "{verb} {} and wrote {} bytes",
            path.display(),
            PAYLOAD.len()
        )
    });
    one("write", result)
}

fn write_all(fd: std::os::fd::BorrowedFd<'_>, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

/// `rename FROM TO`.
pub fn rename(from: &Path, to: &Path) -> Outcome {
    let result = nix::fcntl::renameat(AT_FDCWD, from, AT_FDCWD, to)
        .map(|()| format!("renamed {} to {}", from.display(), to.display()));
    one("rename", result)
}

/// `chmod PATH MODE_OCTAL`.
pub fn chmod(path: &Path, mode: u32) -> Outcome {
    let result = nix::sys::stat::fchmodat(
        AT_FDCWD,
        path,
        Mode::from_bits_truncate(mode as libc::mode_t),
        FchmodatFlags::FollowSymlink,
    )
    .map(|()| format!("set mode {mode:o} on {}", path.display()));
    one("chmod", result)
}

/// `unlink PATH`.
pub fn unlink(path: &Path) -> Outcome {
    let result = nix::unistd::unlink(path).map(|()| format!("removed {}", path.display()));
    one("unlink", result)
}

/// `rmdir PATH`.
pub fn rmdir(path: &Path) -> Outcome {
    let result = nix::unistd::unlinkat(AT_FDCWD, path, UnlinkatFlags::RemoveDir)
        .map(|()| format!("removed directory {}", path.display()));
    one("rmdir", result)
}

/// `mkdir PATH` (mode 0755).
pub fn mkdir(path: &Path) -> Outcome {
    let result = nix::unistd::mkdir(path, Mode::from_bits_truncate(0o755))
        .map(|()| format!("created directory {}", path.display()));
    one("mkdir", result)
}

/// `symlink TARGET LINKPATH`.
pub fn symlink(target: &Path, link: &Path) -> Outcome {
    let result = nix::unistd::symlinkat(target, AT_FDCWD, link)
        .map(|()| format!("linked {} -> {}", link.display(), target.display()));
    one("symlink", result)
}

/// `read-file PATH`: `ALLOWED <first line>` or `DENIED open|read: ERRNO`.
pub fn read_file(path: &Path) -> Outcome {
    let fd = match nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(errno) => return one("open", Err(errno)),
    };
    let mut buf = [0u8; 4096];
    let n = loop {
        match nix::unistd::read(fd.as_fd(), &mut buf) {
            Ok(n) => break n,
            Err(Errno::EINTR) => {}
            Err(errno) => return one("read", Err(errno)),
        }
    };
    Outcome::allowed(first_line(&buf[..n]))
}

/// The first line of `bytes` as printable text: lossy UTF-8, control
/// characters as `?`, at most [`MAX_LINE_CHARS`]; `<empty file>` for none.
fn first_line(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty file>".to_owned();
    }
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line)
        .chars()
        .take(MAX_LINE_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_stops_at_the_newline_and_cleans_up() {
        assert_eq!(
            first_line(b"root:x:0:0:root:/root:/bin/bash\nnext"),
            "root:x:0:0:root:/root:/bin/bash"
        );
        assert_eq!(first_line(b"a\tb\r\n"), "a?b?");
        assert_eq!(first_line(b""), "<empty file>");
        assert_eq!(first_line(b"\n"), "");
        assert_eq!(first_line(&[b'y'; 500]).len(), MAX_LINE_CHARS);
        assert_eq!(first_line(&[0xff, b'a']), "\u{fffd}a");
    }
}
