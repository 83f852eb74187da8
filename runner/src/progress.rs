//! What `env build` shows while it works (docs/environments.md, "Building
//! from a lock"): on a terminal, one progress bar on stderr (the step, how
//! many of the four long steps are done, the time so far); otherwise one
//! plain line per step, `skill-runner: env build ID: STEP: what (N.N s)`,
//! which scripts and logs can read. stdout is never written here: it
//! carries only the record.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use skill_runner::package::environment::build::Step;

/// The steps a bar counts (the lock check is instant; from-store ends it).
const LONG_STEPS: u64 = 4;

/// The words of a step, as both forms show them.
fn words(step: Step) -> &'static str {
    match step {
        Step::Lock => "lock: checked; interpreter named",
        Step::Fetch => {
            "fetch: the pinned wheels, with pip's own index configuration, in a sandbox sharing only the host's network"
        }
        Step::Install => "install: offline, in the sandbox (no network)",
        Step::Hash => "hash: the tree, sealed while copied into the store",
        Step::Publish => "publish: recorded",
        Step::FromStore => {
            "publish: this lock was built for this interpreter before: served from the store, nothing fetched"
        }
    }
}

/// How far along a step is, for the bar.
fn position(step: Step) -> u64 {
    match step {
        Step::Lock | Step::Fetch => 0,
        Step::Install => 1,
        Step::Hash => 2,
        Step::Publish | Step::FromStore => LONG_STEPS,
    }
}

/// The progress of one build.
pub enum BuildProgress {
    Bar(ProgressBar),
    Lines { id: String, started: Instant },
}

impl BuildProgress {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new(id: &str) -> BuildProgress {
        if !std::io::stderr().is_terminal() {
            return BuildProgress::Lines {
                id: id.to_owned(),
                started: Instant::now(),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(LONG_STEPS), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} env build {id} [{{elapsed}}] {{bar:20}} {{pos}}/{{len}} {{wide_msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(120));
        BuildProgress::Bar(bar)
    }

    pub fn step(&mut self, step: Step) {
        match self {
            BuildProgress::Bar(bar) => {
                bar.set_position(position(step));
                bar.set_message(words(step));
            }
            BuildProgress::Lines { id, started } => {
                let _ = writeln!(
                    std::io::stderr(),
                    "skill-runner: env build {id}: {} ({:.1} s)",
                    words(step),
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }

    /// Leaves the last step on the terminal (a refusal follows on its own
    /// line).
    pub fn finish(&mut self) {
        if let BuildProgress::Bar(bar) = self {
            bar.abandon();
        }
    }
}

/// What `store push|pull` and `env push|pull` show (docs/distribution.md):
/// on a terminal, one bar per blob counting its bytes; otherwise one plain
/// line per blob when it starts and ends,
/// `skill-runner: pull layer sha256:…: 10485760 bytes fetched`.
pub struct BlobProgress {
    verb: &'static str,
    bar: Option<std::sync::Mutex<Option<ProgressBar>>>,
}

impl BlobProgress {
    pub fn new(verb: &'static str) -> BlobProgress {
        BlobProgress {
            verb,
            bar: std::io::stderr()
                .is_terminal()
                .then(|| std::sync::Mutex::new(None)),
        }
    }

    fn short(digest: &str) -> &str {
        digest.get(..19).unwrap_or(digest)
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            if let Some(b) = bar.lock().ok().and_then(|mut b| b.take()) {
                b.abandon();
            }
        }
    }
}

impl skill_runner::package::oci::Progress for BlobProgress {
    fn event(&self, event: skill_runner::package::oci::Event<'_>) {
        use skill_runner::package::oci::{Event, Outcome, Role};
        let role = |r: Role| match r {
            Role::Manifest => "manifest",
            Role::Config => "config",
            Role::Layer => "layer",
        };
        let how = |o: Outcome| match o {
            Outcome::Fetched => "fetched and verified",
            Outcome::Held => "held already, not fetched",
            Outcome::Pushed => "pushed",
            Outcome::Present => "in the registry already, not sent",
        };
        match (&self.bar, event) {
            (
                Some(bar),
                Event::Start {
                    role: r,
                    digest,
                    size,
                },
            ) => {
                let b = ProgressBar::with_draw_target(Some(size), ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template(&format!(
                    "{} {} {} {{bar:30}} {{bytes}}/{{total_bytes}}",
                    self.verb,
                    role(r),
                    Self::short(digest)
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                b.set_style(style);
                if let Ok(mut slot) = bar.lock() {
                    if let Some(old) = slot.replace(b) {
                        old.finish();
                    }
                }
            }
            (Some(bar), Event::Bytes { done, .. }) => {
                if let Ok(slot) = bar.lock() {
                    if let Some(b) = slot.as_ref() {
                        b.set_position(done);
                    }
                }
            }
            (
                Some(bar),
                Event::Done {
                    role: r,
                    digest,
                    size,
                    outcome,
                },
            ) => {
                if let Ok(mut slot) = bar.lock() {
                    if let Some(b) = slot.take() {
                        b.finish_and_clear();
                    }
                }
                let _ = writeln!(
                    std::io::stderr(),
                    "{} {} {}: {size} bytes {}",
                    self.verb,
                    role(r),
                    Self::short(digest),
                    how(outcome)
                );
            }
            (None, Event::Start { .. } | Event::Bytes { .. }) => {}
            (
                None,
                Event::Done {
                    role: r,
                    digest,
                    size,
                    outcome,
                },
            ) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "skill-runner: {} {} {digest}: {size} bytes {}",
                    self.verb,
                    role(r),
                    how(outcome)
                );
            }
        }
    }
}
