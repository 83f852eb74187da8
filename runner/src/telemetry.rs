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

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

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
    init_with(default_level, format, None);
}

/// A layer installed beside the log lines, with its own filter (the
/// daemon's trace export): `SKILL_RUNNER_LOG` filters the lines only.
pub type Extra = Box<dyn Layer<Registry> + Send + Sync>;

/// [`init`], with `extra` beside the log lines.
pub fn init_with(default_level: &str, format: Format, extra: Option<Extra>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKILL_RUNNER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let lines: Extra = match format {
        Format::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        Format::Human => lines.boxed(),
    };
    let mut layers: Vec<Extra> = vec![lines.with_filter(filter).boxed()];
    layers.extend(extra);
    let _ = tracing_subscriber::registry().with(layers).try_init();
}
