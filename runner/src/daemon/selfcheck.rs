//! The daemon's own verdict on its sandbox, for `GET /v1/health`.
//!
//! The verdict comes from a real execution ([`crate::exec::doctor::trial`]: the
//! smallest job, run by the daemon's own [`Runner`], so with the argv,
//! seccomp programs, `/proc`, hostname, identity and data dir every job
//! gets). It is taken once before the daemon listens (a failure is logged
//! as a warning), then again every [`REFRESH`] on a blocking thread; health
//! answers from the cached verdict and never starts a sandbox itself, so a
//! flood of health checks costs nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::exec::Runner;

/// How often the verdict is taken again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// One verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// `Err` says what failed and what to change.
    pub result: Result<(), String>,
    pub checked_at: SystemTime,
}

impl Verdict {
    /// Runs the trial job now (blocking: a sandbox is started).
    pub fn take(runner: &Runner) -> Verdict {
        Verdict {
            result: crate::exec::doctor::trial(runner).map_err(|e| e.to_string()),
            checked_at: SystemTime::now(),
        }
    }
}

/// The cached verdict, shared by the routes and the refresher.
#[derive(Debug)]
pub struct SelfCheck {
    verdict: Mutex<Verdict>,
}

impl SelfCheck {
    pub fn new(first: Verdict) -> Arc<SelfCheck> {
        Arc::new(SelfCheck {
            verdict: Mutex::new(first),
        })
    }

    /// The latest verdict.
    pub fn verdict(&self) -> Verdict {
        self.verdict
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, v: Verdict) {
        let was_ok = self.verdict().result.is_ok();
        match (&v.result, was_ok) {
            (Err(reason), true) => {
                tracing::warn!("the sandbox stopped working, health answers 503: {reason}")
            }
            (Ok(()), false) => tracing::info!("the sandbox works again"),
            _ => {}
        }
        *self.verdict.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// Takes the verdict again every `every`, until the runtime stops.
    pub async fn refresh(self: Arc<SelfCheck>, runner: Arc<Runner>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            let r = runner.clone();
            match tokio::task::spawn_blocking(move || Verdict::take(&r)).await {
                Ok(v) => self.set(v),
                Err(e) => tracing::warn!("the sandbox self-check did not finish: {e}"),
            }
        }
    }
}
