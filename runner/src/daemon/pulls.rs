//! On-demand pulls (docs/daemon.md, "Pulls from registries"): a job's
//! skill or environment may carry `source: "oci://…@sha256:…"`, and a
//! daemon configured with `--registry` pulls what it does not hold before
//! the job runs.
//!
//! Invariants:
//! - only a registry named by `--registry` is ever spoken to: a job whose
//!   missing package names another is refused at admission (403
//!   `registry_not_allowed`), before anything is queued;
//! - one pull per manifest digest at a time on this daemon: jobs needing
//!   the same missing digest wait for the pull already under way (a
//!   single-flight map, [`Pulls`]), and that pull goes on when the job
//!   that started it is cancelled, for the others;
//! - a pull verifies everything ([`crate::package::oci`]: digests, sizes,
//!   then the package or environment hash through the store's own
//!   publish), and what it got must be what the job pins (its binding, or
//!   its environment's id and hash); otherwise the job is rejected with a
//!   sentence (`pull_failed`, 502, or `hash_mismatch`, 422) and nothing
//!   runs;
//! - every execution that needed a pull gets `pull` events in its event
//!   log (start, each blob's progress, done or failed with sizes);
//! - the pull runs on a blocking thread, never on the runtime's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::watch;

use super::config::PullSettings;
use super::events::EventLog;
use super::metrics::Metrics;
use crate::error::ErrorKind;
use crate::exec::job::Job;
use crate::exec::result::{ErrorInfo, ExecResult, Status};
use crate::exec::Runner;
use crate::package::environment::EnvRef;
use crate::package::hash::Binding;
use crate::package::oci::{self, Event, OciError, Reference};

/// Why a job's source was refused at admission.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{what} is not held here and its source {reference} is on registry {registry}, which this daemon does not pull from; start it with --registry {registry}, or publish the package to it first")]
    NotAllowed {
        what: String,
        reference: String,
        registry: String,
    },
}

impl PullError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            PullError::NotAllowed { .. } => ErrorKind::RegistryNotAllowed,
        }
    }
}

/// What a job needs pulled: a skill's package or its environment.
#[derive(Debug, Clone)]
enum Need {
    Package(Binding),
    Environment(EnvRef),
}

impl Need {
    fn what(&self) -> String {
        match self {
            Need::Package(b) => format!("skill {:?} (hash {})", b.id, b.hash),
            Need::Environment(e) => format!("environment {:?} (hash {})", e.id, e.hash),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Need::Package(_) => "package",
            Need::Environment(_) => "environment",
        }
    }
}

/// What the job needs that this daemon does not hold, each with its
/// source. Reads only the store's records (no network).
fn missing(runner: &Runner, job: &Job) -> Vec<(Need, Reference)> {
    let mut out = Vec::new();
    for s in &job.skills {
        if let Some(source) = &s.source {
            if runner.store.resolve(&s.binding).is_err() {
                out.push((Need::Package(s.binding.clone()), source.clone()));
            }
        }
    }
    if let (Some(env), Some(source)) = (&job.environment, &job.environment_source) {
        if runner.environments.record(env).is_err() {
            out.push((Need::Environment(env.clone()), source.clone()));
        }
    }
    out
}

/// Refuses, at admission, a job whose missing package or environment
/// names a registry this daemon does not pull from.
pub fn admit(pulls: &Pulls, job: &Job) -> Result<(), PullError> {
    for (need, reference) in missing(&pulls.runner, job) {
        if !pulls.settings.allows(&reference) {
            return Err(PullError::NotAllowed {
                what: need.what(),
                reference: reference.to_string(),
                registry: reference.registry.clone(),
            });
        }
    }
    Ok(())
}

/// What a finished pull gave every job that waited for it.
#[derive(Debug, Clone)]
enum Landed {
    Package(Binding),
    Environment(EnvRef),
}

/// A finished pull: what landed, blobs and bytes read, or why it failed.
#[derive(Debug, Clone)]
struct Outcome {
    landed: Result<Landed, (ErrorKind, String)>,
    blobs: u64,
    bytes: u64,
}

/// One pull under way: its outcome when done, and the event logs of the
/// executions waiting for it (each gets the pull's progress).
#[derive(Debug)]
struct Flight {
    done: watch::Sender<Option<Outcome>>,
    watchers: Mutex<Vec<Arc<EventLog>>>,
}

impl Flight {
    fn tell(&self, fields: &serde_json::Value) {
        let watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        for log in watchers.iter() {
            log.pull(fields);
        }
    }
}

/// The pulls under way, by kind and manifest digest, and what they need:
/// the stores, the settings, the metrics.
#[derive(Debug)]
pub struct Pulls {
    runner: Arc<Runner>,
    settings: PullSettings,
    metrics: Arc<Metrics>,
    flights: Mutex<HashMap<String, Arc<Flight>>>,
}

/// Reports a pull's blobs to every watcher, a line per blob start and end
/// and one per MiB between.
struct Reporter {
    flight: Arc<Flight>,
    source: String,
    last: Mutex<u64>,
    bytes: AtomicU64,
}

const REPORT_EVERY: u64 = 1 << 20;

impl oci::Progress for Reporter {
    fn event(&self, event: Event<'_>) {
        let fields = match event {
            Event::Start { role, digest, size } => {
                *self.last.lock().unwrap_or_else(|e| e.into_inner()) = 0;
                json!({"phase": "blob", "source": self.source, "role": role, "digest": digest, "size": size, "bytes": 0})
            }
            Event::Bytes {
                role,
                digest,
                done,
                size,
            } => {
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                if done < *last + REPORT_EVERY {
                    return;
                }
                *last = done;
                json!({"phase": "blob", "source": self.source, "role": role, "digest": digest, "size": size, "bytes": done})
            }
            Event::Done {
                role,
                digest,
                size,
                outcome,
            } => {
                if matches!(outcome, oci::Outcome::Fetched) {
                    self.bytes.fetch_add(size, Ordering::Relaxed);
                }
                json!({"phase": "blob", "source": self.source, "role": role, "digest": digest, "size": size, "bytes": size, "outcome": outcome})
            }
        };
        self.flight.tell(&fields);
    }
}

impl Pulls {
    pub fn new(runner: Arc<Runner>, settings: PullSettings, metrics: Arc<Metrics>) -> Pulls {
        Pulls {
            runner,
            settings,
            metrics,
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// Joins the pull of `reference` (starting it when none is under way)
    /// and waits for its outcome; `log` gets its events meanwhile.
    async fn join(
        self: &Arc<Self>,
        need: &Need,
        reference: &Reference,
        log: &Arc<EventLog>,
    ) -> Outcome {
        let digest = reference.digest.clone().unwrap_or_default();
        let key = format!("{}:{digest}", need.kind());
        let (flight, lead) = {
            let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
            match flights.get(&key) {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(Flight {
                        done: watch::channel(None).0,
                        watchers: Mutex::new(Vec::new()),
                    });
                    flights.insert(key.clone(), f.clone());
                    (f, true)
                }
            }
        };
        flight
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(log.clone());
        let mut done = flight.done.subscribe();
        if lead {
            // Its own task: the pull goes on for the others if this job is
            // cancelled while it waits.
            let pulls = self.clone();
            let need = need.clone();
            let reference = reference.clone();
            let flight = flight.clone();
            tokio::spawn(async move {
                let outcome = pull(&pulls, need, reference, flight.clone()).await;
                pulls
                    .metrics
                    .pulled(outcome.landed.is_ok(), outcome.blobs, outcome.bytes);
                // Out of the map first: a job that comes after finds the
                // package held, or (after a failure) starts a new pull.
                pulls
                    .flights
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
                flight.done.send_replace(Some(outcome));
            });
        }
        let outcome = done
            .wait_for(Option::is_some)
            .await
            .map(|o| o.clone())
            .ok()
            .flatten();
        outcome.unwrap_or(Outcome {
            landed: Err((
                ErrorKind::Internal,
                "the pull ended without an outcome".into(),
            )),
            blobs: 0,
            bytes: 0,
        })
    }
}

/// The pull itself, on a blocking thread.
async fn pull(pulls: &Pulls, need: Need, reference: Reference, flight: Arc<Flight>) -> Outcome {
    let source = reference.to_string();
    let runner = pulls.runner.clone();
    let cfg = pulls.settings.registry.clone();
    let reporter = Reporter {
        flight,
        source: source.clone(),
        last: Mutex::new(0),
        bytes: AtomicU64::new(0),
    };
    let task = tokio::task::spawn_blocking(move || {
        let result: Result<(Landed, usize), OciError> = match need {
            Need::Package(_) => oci::pull_package(&cfg, &reference, &runner.store, &reporter)
                .map(|p| (Landed::Package(p.binding), p.fetched.len())),
            Need::Environment(_) => {
                oci::pull_environment(&cfg, &reference, &runner.environments, &reporter).map(|p| {
                    (
                        Landed::Environment(EnvRef {
                            id: p.record.id,
                            hash: p.record.hash,
                        }),
                        p.fetched.len(),
                    )
                })
            }
        };
        (result, reporter.bytes.load(Ordering::Relaxed))
    });
    match task.await {
        Ok((Ok((landed, blobs)), bytes)) => Outcome {
            landed: Ok(landed),
            blobs: blobs as u64,
            bytes,
        },
        Ok((Err(e), bytes)) => Outcome {
            landed: Err((
                ErrorKind::PullFailed,
                format!(
                    "pulling {source} failed: {}",
                    crate::text::single_line(&e.to_string())
                ),
            )),
            blobs: 0,
            bytes,
        },
        Err(e) => Outcome {
            landed: Err((
                ErrorKind::Internal,
                format!("the pull of {source} failed: {e}"),
            )),
            blobs: 0,
            bytes: 0,
        },
    }
}

/// Pulls what the job needs and this daemon does not hold, before the
/// job waits for a run slot. `None` when everything is held now; else the
/// job's rejected result (sealed), with the sentence that says why.
pub async fn before_run(
    pulls: &Arc<Pulls>,
    job: &Job,
    log: &Arc<EventLog>,
    cancelled: impl std::future::Future<Output = ()>,
) -> Option<ExecResult> {
    let needs = missing(&pulls.runner, job);
    if needs.is_empty() {
        return None;
    }
    tokio::pin!(cancelled);
    for (need, reference) in needs {
        let source = reference.to_string();
        log.pull(&json!({"phase": "start", "source": source, "for": need.what()}));
        let outcome = tokio::select! {
            o = pulls.join(&need, &reference, log) => o,
            () = &mut cancelled => {
                let mut result = rejected(
                    &pulls.runner, job, ErrorKind::Cancelled, "the execution was cancelled while it waited for a pull; nothing ran".into());
                result.status = Status::Cancelled;
                return Some(result);
            }
        };
        let problem = match (&outcome.landed, &need) {
            (Err((kind, message)), _) => Some((*kind, message.clone())),
            (Ok(Landed::Package(got)), Need::Package(want)) if got != want => Some((
                ErrorKind::HashMismatch,
                format!(
                    "{source} holds skill {:?} revision {} version {} hash {}, not the job's {}; fix the job's source or its pin",
                    got.id, got.revision, got.version, got.hash, need.what()
                ),
            )),
            (Ok(Landed::Environment(got)), Need::Environment(want)) if got != want => Some((
                ErrorKind::HashMismatch,
                format!(
                    "{source} holds environment {:?} hash {}, not the job's {}; fix the job's source or its environment",
                    got.id, got.hash, need.what()
                ),
            )),
            _ => None,
        };
        match problem {
            Some((kind, message)) => {
                log.pull(
                    &json!({"phase": "failed", "source": source, "kind": kind, "message": message}),
                );
                return Some(rejected(&pulls.runner, job, kind, message));
            }
            None => {
                log.pull(&json!({"phase": "done", "source": source, "blobs": outcome.blobs, "bytes": outcome.bytes}));
            }
        }
    }
    None
}

fn rejected(runner: &Runner, job: &Job, kind: ErrorKind, message: String) -> ExecResult {
    let mut result = ExecResult::rejected(
        &job.execution_id,
        "bubblewrap",
        ErrorInfo::new(kind, message),
    );
    runner.seal(&mut result, Some(job));
    result
}
