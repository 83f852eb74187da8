//! `run` for `skill-runner mcp` (stdio): each job runs in this process
//! with a [`Runner`], admitted as `skill-runner run` admits a job file
//! (`Job::validate`, the session resolved into its frozen bindings), its
//! output captured; a client's cancellation trips the job's cancel switch.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Execute, Execution, ProgressFn, RunProgress};
use crate::exec::job::{Job, RawJob};
use crate::exec::result::ExecResult;
use crate::exec::{OutputMode, RunOptions, Runner};
use crate::skillhost::session::Sessions;
use crate::supervise::process::{Sink, Stream};
use crate::supervise::Cancel;

/// Runs jobs with a runner of this process.
#[derive(Debug)]
pub struct LocalExec {
    runner: Arc<Runner>,
}

impl LocalExec {
    pub fn new(runner: Runner) -> LocalExec {
        LocalExec {
            runner: Arc::new(runner),
        }
    }
}

/// Counts output for progress, at most one report every 100 ms.
struct Counting {
    progress: Option<ProgressFn>,
    seen: RunProgress,
    last: Option<std::time::Instant>,
}

impl Sink for Counting {
    fn chunk(&mut self, _: Stream, bytes: &[u8]) {
        self.seen.bytes += bytes.len() as u64;
        self.seen.events += 1;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
        if let Some(progress) = self.progress.as_ref().filter(|_| due) {
            self.last = Some(std::time::Instant::now());
            progress(self.seen);
        }
    }
}

/// Admits and runs `job`; a refusal is a rejected result document.
fn run(runner: &Runner, job: Value, sink: &mut Counting, cancel: Arc<Cancel>) -> ExecResult {
    let admitted = serde_json::from_value::<RawJob>(job)
        .map_err(|e| e.to_string())
        .and_then(|raw| Job::validate(raw, None).map_err(|e| e.to_string()));
    let mut job = match admitted {
        Ok(j) => j,
        Err(m) => {
            let info = crate::exec::result::ErrorInfo::new(crate::error::ErrorKind::BadJob, m);
            return ExecResult::rejected("", "bubblewrap", info);
        }
    };
    if let Err(e) = Sessions::new(runner.data_dir()).resolve(&mut job) {
        let info = crate::exec::result::ErrorInfo::new(e.kind(), e.to_string());
        let mut result = ExecResult::rejected(&job.execution_id, "bubblewrap", info);
        runner.seal(&mut result, Some(&job));
        return result;
    }
    runner.run(
        &job,
        RunOptions {
            output: OutputMode::Capture,
            sink,
            cancel: Some(cancel),
        },
    )
}

impl Execute for LocalExec {
    fn execute(
        &self,
        job: Value,
        progress: Option<ProgressFn>,
        cancel: CancellationToken,
    ) -> Execution {
        let runner = self.runner.clone();
        Box::pin(async move {
            let switch = Cancel::new().map_err(|e| format!("making a cancel switch: {e}"))?;
            let trip = switch.clone();
            let watcher = tokio::spawn(async move {
                cancel.cancelled().await;
                trip.cancel();
            });
            let result = tokio::task::spawn_blocking(move || {
                let mut sink = Counting {
                    progress,
                    seen: RunProgress {
                        bytes: 0,
                        events: 0,
                    },
                    last: None,
                };
                run(&runner, job, &mut sink, switch)
            })
            .await;
            watcher.abort();
            let result = result.map_err(|e| format!("the execution thread failed: {e}"))?;
            serde_json::to_value(&result).map_err(|e| format!("encoding the result: {e}"))
        })
    }
}
