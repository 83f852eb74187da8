//! The one `tracing` set-up of the process, for the CLI and the daemon
//! alike: lines go to stderr, `SKILL_RUNNER_LOG` filters them (an
//! `EnvFilter` directive, e.g. `debug` or `skill_runner::daemon=debug`),
//! and the front end gives only its default level and the line format.
//!
//! Invariants:
//! - colours (ANSI escape codes) only when stderr is a terminal: a log
//!   piped to a file or a collector carries plain text;
//! - values are logged as the API spells them (`status = "exited"`,
//!   `code = 0`), never as Rust `Debug` text: a JSON log line can be read
//!   with the same vocabulary as a result document.
//!
//! Installing twice keeps the first subscriber (the second call is a
//! no-op), so a library caller that installed its own is left alone.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One human-readable line per event.
    Human,
    /// One JSON object per line, with the event's fields under `fields`
    /// and its innermost span (an execution's id) under `span`.
    Json,
}

/// Installs the global subscriber: `default_level` applies when
/// `SKILL_RUNNER_LOG` is unset or not a valid filter.
pub fn init(default_level: &str, format: Format) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKILL_RUNNER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        Format::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        Format::Human => builder.try_init(),
    };
}
