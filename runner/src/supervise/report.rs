//! The exec shim's report, read by the supervisor: whether the command
//! itself was executed (the protocol is described in
//! [`crate::sandbox::shim`], which writes it).

/// The byte the shim writes once it runs.
pub const STARTED: u8 = b'S';

/// What the report pipe said, read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecReport {
    /// The launcher has no shim (Seatbelt): reaching `exec` is all we know.
    Unknown,
    /// Nothing was written: bubblewrap ended before the sandbox was
    /// finished, so nothing of the command ran.
    NotReached,
    /// The command was executed.
    Executed,
    /// The sandbox was finished but `execvp` failed with this errno.
    ExecFailed(i32),
}

impl ExecReport {
    /// Reads the bytes of the report pipe (everything up to its end).
    pub fn parse(bytes: &[u8]) -> ExecReport {
        match bytes {
            [] => ExecReport::NotReached,
            [STARTED] => ExecReport::Executed,
            [STARTED, a, b, c, d] => ExecReport::ExecFailed(i32::from_le_bytes([*a, *b, *c, *d])),
            // Only the shim holds the pipe; anything else is not ours to
            // trust, and the shim did write its first byte.
            _ => ExecReport::Executed,
        }
    }

    /// Whether the command's own `execve` happened (or may have: without
    /// a shim there is no way to know otherwise).
    pub fn executed(self) -> bool {
        matches!(self, ExecReport::Executed | ExecReport::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_without_ambiguity() {
        assert_eq!(ExecReport::parse(b""), ExecReport::NotReached);
        assert_eq!(ExecReport::parse(b"S"), ExecReport::Executed);
        let mut failed = vec![STARTED];
        failed.extend_from_slice(&libc::ENOENT.to_le_bytes());
        assert_eq!(
            ExecReport::parse(&failed),
            ExecReport::ExecFailed(libc::ENOENT)
        );
        assert!(!ExecReport::NotReached.executed());
        assert!(!ExecReport::ExecFailed(2).executed());
        assert!(ExecReport::Executed.executed());
        assert!(ExecReport::Unknown.executed());
    }
}
