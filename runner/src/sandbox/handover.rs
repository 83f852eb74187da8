//! The hand-over message of a prepared sandbox (docs/prepared.md): the
//! command the runner gives an exec shim that bubblewrap started ahead of
//! the request, and that waits for it on [`FD_HANDOVER`].
//!
//! The shim is inside the sandbox and trusts nothing but this pipe, which
//! only the runner holds the other end of (close-on-exec in the runner,
//! never in any sandbox). Still, what it reads is bounded and checked
//! before it is used: at most [`MAX_BYTES`], a fixed magic, a cwd below
//! `/`, at most [`MAX_ITEMS`] `NAME=value` entries each with a name, and
//! a non-empty argv. One message per sandbox: the runner closes its end
//! after writing it, and the shim reads to the end of file, so nothing
//! can be appended later by anyone.
//!
//! Layout, every field ended by a NUL byte: the magic, the cwd, the number
//! of environment entries in decimal, the entries, then the argv to the
//! end.

pub use crate::sandbox::fds::FD_HANDOVER;

/// The first field: which protocol this is.
pub const MAGIC: &str = "skill-runner-handover-1";
/// The most bytes a message may have (argv and environment together are
/// far below: `ARG_MAX`).
pub const MAX_BYTES: usize = 8 << 20;
/// The most environment entries, and the most argv elements.
pub const MAX_ITEMS: usize = 65_536;

/// A command as handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The absolute directory the command starts in (in the sandbox).
    pub cwd: String,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    pub argv: Vec<String>,
}

/// Why a hand-over message was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandoverError {
    #[error("the hand-over message is malformed: {why}")]
    Decode { why: &'static str },
    #[error("a command with a NUL byte cannot be handed over")]
    Encode,
}

impl Command {
    /// The message for this command; `Err` when a field holds a NUL byte
    /// or the message would pass [`MAX_BYTES`] (the caller then launches
    /// the job in a sandbox of its own).
    pub fn encode(&self) -> Result<Vec<u8>, HandoverError> {
        let mut out = Vec::new();
        let mut field = |s: &str| -> Result<(), HandoverError> {
            if s.as_bytes().contains(&0) {
                return Err(HandoverError::Encode);
            }
            out.extend_from_slice(s.as_bytes());
            out.push(0);
            Ok(())
        };
        field(MAGIC)?;
        field(&self.cwd)?;
        field(&self.env.len().to_string())?;
        for (k, v) in &self.env {
            if k.contains('=') {
                return Err(HandoverError::Encode);
            }
            field(&format!("{k}={v}"))?;
        }
        for a in &self.argv {
            field(a)?;
        }
        if out.len() > MAX_BYTES || self.argv.is_empty() || self.env.len() > MAX_ITEMS {
            return Err(HandoverError::Encode);
        }
        Ok(out)
    }

    /// The command of a message, checked.
    pub fn decode(bytes: &[u8]) -> Result<Command, HandoverError> {
        let bad = |why| HandoverError::Decode { why };
        if bytes.len() > MAX_BYTES {
            return Err(bad("too large"));
        }
        let body = bytes.strip_suffix(&[0]).ok_or(bad("not ended by NUL"))?;
        let mut fields = body.split(|b| *b == 0).map(std::str::from_utf8);
        let mut next = || -> Result<&str, HandoverError> {
            fields
                .next()
                .ok_or(bad("too short"))?
                .map_err(|_| bad("not UTF-8"))
        };
        if next()? != MAGIC {
            return Err(bad("not a hand-over message"));
        }
        let cwd = next()?.to_owned();
        if !cwd.starts_with('/') {
            return Err(bad("cwd not absolute"));
        }
        let n: usize = next()?.parse().map_err(|_| bad("bad entry count"))?;
        if n > MAX_ITEMS {
            return Err(bad("too many entries"));
        }
        let mut env = Vec::with_capacity(n);
        for _ in 0..n {
            let entry = next()?;
            match entry.split_once('=') {
                Some((k, v)) if !k.is_empty() => env.push((k.to_owned(), v.to_owned())),
                _ => return Err(bad("entry without a name")),
            }
        }
        let mut argv = Vec::new();
        for a in fields {
            if argv.len() >= MAX_ITEMS {
                return Err(bad("too many arguments"));
            }
            argv.push(a.map_err(|_| bad("not UTF-8"))?.to_owned());
        }
        if argv.is_empty() {
            return Err(bad("no argv"));
        }
        Ok(Command { cwd, env, argv })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Command {
            cwd: "/workspace/sub".into(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("E".into(), "a=b".into()),
            ],
            argv: vec!["sh".into(), "-c".into(), String::new(), "x y".into()],
        }
    }

    #[test]
    fn a_command_survives_its_message() {
        let c = command();
        assert_eq!(Command::decode(&c.encode().unwrap()), Ok(c));
    }

    #[test]
    fn a_malformed_message_is_refused() {
        let good = command().encode().unwrap();
        let bad = |b: &[u8]| {
            assert!(
                Command::decode(b).is_err(),
                "{:?}",
                String::from_utf8_lossy(b)
            )
        };
        bad(b"");
        bad(&good[..good.len() - 1]); // not ended
        bad(&good[1..]); // no magic
        bad(b"skill-runner-handover-1\0relative\x000\0true\0");
        bad(b"skill-runner-handover-1\0/\x002\0A=1\0true\0"); // entries eat argv
        bad(b"skill-runner-handover-1\0/\x001\0=1\0true\0");
        bad(b"skill-runner-handover-1\0/\x001\0NOEQ\0true\0");
        bad(b"skill-runner-handover-1\0/\x00-1\0true\0");
        bad(b"skill-runner-handover-1\0/\x000\0");
        bad(b"skill-runner-handover-1\0/\x0099999999999999999999\0true\0");
        bad(&[b'x'; MAX_BYTES + 1]);
        // What cannot be written is refused before it is.
        let mut c = command();
        c.argv.push("a\0b".into());
        assert_eq!(c.encode(), Err(HandoverError::Encode));
        let mut c = command();
        c.argv.clear();
        assert_eq!(c.encode(), Err(HandoverError::Encode));
    }
}
