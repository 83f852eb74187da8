//! Shell completions and man pages, generated from the clap definition in
//! [`crate::cli`] so they can never drift from the flags `--help` shows:
//! `skill-runner completions bash|zsh|fish|elvish|powershell` prints the
//! completion script, `skill-runner man` prints the roff of
//! `skill-runner(1)`, and `skill-runner man --dir DIR` writes a page per
//! subcommand (`skill-runner-run.1`, …) into an existing folder. README
//! "Install" says where each goes; nothing here reads the data dir.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Why a completion script or a man page could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CompletionsError {
    #[error("cannot write the {shell} completion script to stdout: {source}")]
    WriteCompletions {
        shell: Shell,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the man page to stdout: {0}")]
    WriteMan(#[source] std::io::Error),
    #[error("man page folder {} is not a folder; create it first (e.g. mkdir -p {})", .0.display(), .0.display())]
    ManDirMissing(PathBuf),
    #[error("cannot write man pages into {}: {source}", path.display())]
    WriteManDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Prints the completion script of `shell` for `skill-runner`.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<(), CompletionsError> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "skill-runner", &mut buf);
    quiet_on_broken_pipe(out.write_all(&buf).and_then(|()| out.flush()))
        .map_err(|source| CompletionsError::WriteCompletions { shell, source })
}

/// A reader that stopped early (`| head`) is not an error, as for every
/// other printing subcommand.
fn quiet_on_broken_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Prints `skill-runner(1)`: every global flag and the list of subcommands.
pub fn man(out: &mut dyn Write) -> Result<(), CompletionsError> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .and_then(|()| quiet_on_broken_pipe(out.write_all(&buf).and_then(|()| out.flush())))
        .map_err(CompletionsError::WriteMan)
}

/// Writes `skill-runner.1` and a page per subcommand (`skill-runner-run.1`,
/// `skill-runner-session-create.1`, …) into the existing folder `dir`.
pub fn man_dir(dir: &Path) -> Result<(), CompletionsError> {
    if !dir.is_dir() {
        return Err(CompletionsError::ManDirMissing(dir.to_path_buf()));
    }
    clap_mangen::generate_to(Cli::command(), dir).map_err(|source| CompletionsError::WriteManDir {
        path: dir.to_path_buf(),
        source,
    })
}
