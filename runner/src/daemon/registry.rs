//! The daemon's executions: admission, the queue, cancellation by id, and
//! the bounded retention of finished results.
//!
//! An execution moves through three states: it holds a [`Slot`] while its
//! request body is read, a [`Ticket`] once its id is admitted (queued, then
//! running once it holds a run permit), and finally a retained result.
//!
//! Invariants:
//! - at most `max_running + max_queued` requests hold a slot; past that,
//!   [`Registry::slot`] refuses at once (429), so memory stays bounded
//!   however many clients knock;
//! - at most `max_running` executions hold a run permit; the rest wait in
//!   FIFO order;
//! - an execution id is unique among live (queued or running) and retained
//!   executions: reusing one with the same job (the same digest of its
//!   parsed document) is answered with that execution, with another job
//!   refused (409);
//! - every execution has an [`EventLog`], closed when the execution ends,
//!   with or without a result; with the store on, a finished execution's
//!   log and document are in the store only, and memory keeps its
//!   summary ([`Done`]): `GET` and re-attach read them back
//!   ([`Registry::result`], [`Registry::events`]), sharing one copy among
//!   readers who send it at the same time; without a store they move
//!   into retention in memory;
//! - a ticket dropped before it finished (its client left while queued)
//!   removes its live entry; a finished one moves to the retained results;
//! - a result is serialised once, when its execution finishes ([`Encoded`]),
//!   and every reader is sent that shared buffer;
//! - a retained execution is a small record (id, job digest, status, exit
//!   code, times, and the result when it is at most [`SMALL_RESULT`] of
//!   output) plus its bulk (its event log's output and a larger result with
//!   its document, counted at its encoded size, up to 6 bytes per output
//!   byte). Over `retain_bytes`, the bulk of the oldest is dropped first,
//!   never that of the newest result; a record stays for `retain_for`,
//!   bounded by `retain` (count), so its id can not be reused while it is
//!   retained. The bulk is where the documents are (the store, or memory
//!   without one), and `retain_bytes` bounds it there; memory is thus
//!   bounded by `retain` summaries plus what is running or being sent
//!   (without a store: plus `retain_bytes` and one execution's bulk);
//! - once draining, no new id is admitted;
//! - with a store ([`Registry::with_store`]), every change of state is
//!   sent to it in the order it happens here: an admission (not waited
//!   for, except by [`Ticket::recorded`] before a 202), the move to
//!   running (waited for before the command is launched,
//!   [`Live::mark_running`]), and a result (waited for before anyone can
//!   see it, [`Ticket::finish`]); retention's sheds and evictions follow.
//!   So every acknowledged execution is in the store, and no command can
//!   start without its execution being there as running
//!   (docs/durability.md);
//! - except an unannounced execution ([`Slot::unannounced`]): a blocking,
//!   unstreamed call whose id the daemon chose. Nobody outside the daemon
//!   learns that id before its result is answered, so nobody can hold it
//!   to a promise: it is recorded once, as running, at its admission, and
//!   that record is committed with the next durable commit (its result's
//!   at the latest) instead of waiting for a `fsync` of its own; after a
//!   crash it says that whether its command had started is not known;
//! - a change nobody waits for (an admission, retention's sheds and
//!   evictions) is committed with the next durable one, or on its own
//!   after 50 ms without one ([`store`]'s writer).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Instant, SystemTime};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::config::Retention;
use super::events::{Encoded, EventLog};
use super::store::{self, Ack, Change, Record, State, Store, StoreError, Stored};
use crate::error::ErrorKind;
use crate::exec::result::Status;
use crate::exec::result::{ErrorInfo, ExecResult};
use crate::supervise::Cancel;

/// Why an execution was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "the daemon is at its limit of {cap} running and queued executions; retry after a moment"
    )]
    Busy { cap: usize },
    #[error("the daemon is shutting down; retry against its successor")]
    Draining,
    #[error("execution id {id:?} already names a different job (the same id with the same job document is answered with that execution); use a new id for a new job, or GET /v1/executions/{id}")]
    InUse { id: String },
    #[error("the daemon cannot take another execution now: cannot create its cancellation switch ({0}); retry after a moment")]
    Switch(std::io::Error),
    #[error(transparent)]
    Record(StoreError),
}

/// One queued or running execution.
#[derive(Debug)]
pub struct Live {
    pub id: String,
    /// The execution's events, for re-attaching readers.
    pub log: Arc<EventLog>,
    /// Digest of the job document (idempotent retry).
    pub digest: String,
    /// Admission order (newest = highest), for listing.
    order: u64,
    submitted_at: SystemTime,
    cancel: Arc<Cancel>,
    cancelled: AtomicBool,
    running: AtomicBool,
    /// Wakes the queue waiter (stores a permit if nobody waits yet).
    wake: Notify,
    /// Wakes everyone waiting in [`Live::cancelled`].
    on_cancel: Notify,
    store: Option<Arc<Store>>,
    /// The commit of its move to running, sent when it took its run slot
    /// ([`Live::start_running`]) and waited for before the launch.
    starting: Mutex<Option<Ack>>,
    /// Its id is known to no one outside until its result is answered
    /// ([`Slot::unannounced`]): its records wait for no `fsync`. Cleared
    /// when an answer is about to show the id ([`Live::announce`]).
    unannounced: AtomicBool,
    /// Its move to running was sent to the store ([`Live::start_running`]).
    sent_running: AtomicBool,
}

impl Live {
    /// Stops the execution: kills its sandbox, or takes it out of the queue.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        self.wake.notify_one();
        self.on_cancel.notify_waiters();
    }

    /// Resolves once the execution is cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.on_cancel.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// The switch the supervisor polls.
    pub fn switch(&self) -> Arc<Cancel> {
        self.cancel.clone()
    }

    /// Its record in the store, in `state`.
    fn record(&self, state: State) -> Record {
        let unannounced = self.unannounced.load(Ordering::SeqCst);
        Record {
            // An unannounced one is stored as running from its admission:
            // what only reaches the disk with another's commit may be
            // older than the truth, and a reader that does not know the
            // flag (an older build) then errs towards "had started".
            state: if unannounced { State::Running } else { state },
            unannounced,
            ..Record::queued(&self.digest, self.order, self.submitted_at)
        }
    }

    /// Makes an unannounced execution an ordinary one because an answer
    /// is about to show its id (the listing, `GET`, its events, a
    /// `DELETE`): its record as it stands is sent durably, and the
    /// answer waits for the returned commit, so that nothing a client was
    /// shown is forgotten by a crash. `None` when there is nothing to
    /// wait for.
    pub fn announce(&self) -> Option<Ack> {
        let store = self.store.as_ref()?;
        // Under the lock its move to running is sent with: the store
        // gets the two in the order they happen here.
        let _order = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        if !self.unannounced.swap(false, Ordering::SeqCst) {
            return None;
        }
        let state = if self.sent_running.load(Ordering::SeqCst) {
            State::Running
        } else {
            State::Queued
        };
        let change = Change::Put {
            id: self.id.clone(),
            record: self.record(state),
        };
        Some(store.send(change, true))
    }

    /// Sends the record of its move to running, durably, as soon as it has
    /// its run slot (before its sandbox is prepared); [`Live::mark_running`]
    /// waits for it before the launch. A crash in between says the command
    /// had started or was about to, never that it had not when it had.
    pub fn start_running(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let mut starting = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        self.sent_running.store(true, Ordering::SeqCst);
        if self.unannounced.load(Ordering::SeqCst) {
            // Recorded as running since its admission ([`Live::record`]):
            // there is nothing new to send.
            return;
        }
        let change = Change::Put {
            id: self.id.clone(),
            record: self.record(State::Running),
        };
        *starting = Some(store.send(change, true));
    }

    /// Records, durably, that its command is about to start: called on
    /// its blocking thread just before the launch, so that after a crash
    /// the store says whether the command had started, and a retry never
    /// runs it again. A failure cancels the execution (nothing starts that
    /// is not recorded).
    ///
    /// The commit was sent already when the execution took its run slot
    /// ([`Live::start_running`]): its `fsync` overlaps the sandbox's
    /// preparation instead of adding to every execution's latency.
    pub fn mark_running(&self) {
        let Some(store) = &self.store else {
            return;
        };
        if self.unannounced.load(Ordering::SeqCst) {
            // Its record says running since its admission and goes with
            // the next durable commit; nobody holds its id to wait for.
            // (Announced since, it gets a durable commit of its own below.)
            return;
        }
        let sent = self
            .starting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let ack = sent.unwrap_or_else(|| {
            let change = Change::Put {
                id: self.id.clone(),
                record: self.record(State::Running),
            };
            store.send(change, true)
        });
        if let Err(e) = ack.wait() {
            tracing::error!(id = %self.id, "cancelling the execution before its command starts: {e}");
            self.cancel();
        }
    }
}

/// Output (stdout plus stderr) of a result document kept with its record.
pub const SMALL_RESULT: usize = 16 * 1024;
/// Bytes counted for a record without its result document.
const RECORD_BYTES: u64 = 1024;

/// A finished execution, retained.
///
/// With the store on, this is a summary (its record: id, job digest,
/// status, exit code, times, sizes, kept outputs): its result document
/// and event log live in the store only, and are read back when asked
/// for ([`Registry::result`], [`Registry::events`]). Without a store, or
/// when its result could not be recorded, they are held here ([`Held`]).
#[derive(Debug)]
pub struct Done {
    pub id: String,
    /// Its record in the store.
    record: Record,
    /// The result and log, when held in memory (no store).
    held: Option<Held>,
    /// With the store: the log of its own stream, while that stream still
    /// holds it (a pin: retention keeps the record until its `exit` is
    /// sent).
    own: Option<Weak<EventLog>>,
    /// The kept outputs, for as long as the record lives (also when its
    /// result was dropped).
    pub outputs: Option<Arc<crate::exec::files::OutputStore>>,
    /// Its result could not be read back from the store (a damaged
    /// file): `GET` answers `store_corrupted` with this reason.
    pub damaged: Option<String>,
    pub status: Status,
    submitted_at: SystemTime,
    /// Length of its result document.
    doc_len: u64,
}

/// A result and its events held in memory.
#[derive(Debug, Clone)]
struct Held {
    /// `None` once dropped to bound memory.
    result: Option<Encoded>,
    log: Arc<EventLog>,
}

/// Why a retained execution's result cannot be answered.
#[derive(Debug)]
pub enum Unread {
    /// Retention dropped it (its record stays).
    Dropped,
    /// What the store holds of it is damaged.
    Damaged(String),
}

impl Done {
    pub fn exit_code(&self) -> Option<i32> {
        self.record.exit_code
    }

    fn finished_at(&self) -> String {
        self.record.finished_at.clone().unwrap_or_default()
    }

    /// Whether its own stream has not yet sent its `exit`.
    fn pinned(&self) -> bool {
        match (&self.held, &self.own) {
            (Some(h), _) => h.log.is_pinned(),
            (None, Some(own)) => own.upgrade().is_some_and(|l| l.is_pinned()),
            (None, None) => false,
        }
    }

    /// Whether it still has a result document (in memory or stored).
    fn has_result(&self) -> bool {
        match &self.held {
            Some(h) => h.result.is_some(),
            None => self.record.result_kept,
        }
    }

    /// Bytes of memory it holds: the summary, plus what is [`Held`].
    fn memory_bytes(&self) -> u64 {
        let r = &self.record;
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        // Its id three times (the map's key, the record, retention's
        // order), the strings of its record, the map's entry.
        let summary = std::mem::size_of::<Done>()
            + std::mem::size_of::<Retained>()
            + 3 * self.id.len()
            + r.digest.len()
            + text(&r.status)
            + text(&r.finished_at)
            + text(&r.error_kind)
            + r.outputs.as_ref().map_or(0, |o| {
                o.dir.len()
                    + o.files
                        .iter()
                        .map(|f| f.0.len() + f.1.len() + 40)
                        .sum::<usize>()
            })
            + 64;
        let held = self.held.as_ref().map_or(0, |h| {
            h.result.as_ref().map_or(0, Encoded::bytes) + h.log.bytes()
        });
        summary as u64 + held
    }

    /// The same record without its bulk, and the bulk it still counts
    /// (its record, and a small result it keeps).
    fn shed(&self) -> (Done, u64) {
        let keep = self.has_result() && self.record.output <= SMALL_RESULT as u64;
        let held = self.held.as_ref().map(|h| {
            h.log.shed(keep);
            Held {
                result: h.result.clone().filter(|_| keep),
                log: h.log.clone(),
            }
        });
        let weight = RECORD_BYTES
            + if keep {
                self.record.output + self.doc_len
            } else {
                0
            };
        let done = Done {
            id: self.id.clone(),
            record: Record {
                shed: true,
                result_kept: keep,
                ..self.record.clone()
            },
            held,
            own: self.own.clone(),
            outputs: self.outputs.clone(),
            damaged: self.damaged.clone(),
            status: self.status,
            submitted_at: self.submitted_at,
            doc_len: self.doc_len,
        };
        (done, weight)
    }
}

/// What the daemon reads of a stored result (status, exit code, finish
/// time, error kind), standing in for the document it sends as stored.
fn stand_in(id: &str, status: Status, record: &Record) -> ExecResult {
    let mut r = ExecResult::rejected(
        id,
        "bubblewrap",
        ErrorInfo::new(ErrorKind::Internal, String::new()),
    );
    r.status = status;
    r.exit_code = record.exit_code;
    r.finished_at = record.finished_at.clone().unwrap_or_default();
    r.error = record.error_kind.as_deref().and_then(|k| {
        ErrorKind::ALL
            .iter()
            .find(|e| e.as_str() == k)
            .map(|kind| ErrorInfo::new(*kind, String::new()))
    });
    r
}

/// One line of `GET /v1/executions`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub execution_id: String,
    pub status: String,
    pub submitted_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip)]
    order: u64,
}

/// Which executions `GET /v1/executions` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    Any,
    Queued,
    Running,
    Finished,
    Result(crate::exec::result::Status),
}

/// A page of [`Registry::list`]: newest first, and the cursor of the next.
#[derive(Debug, serde::Serialize)]
pub struct Page {
    pub executions: Vec<Summary>,
    pub next_cursor: Option<String>,
}

struct Retained {
    id: String,
    /// Its admission order, which the store keeps it by.
    order: u64,
    at: Instant,
    /// Its bulk: its result and events, wherever they are (memory, or
    /// the store), which `retain_bytes` bounds.
    bytes: u64,
    /// Memory its [`Done`] holds ([`Done::memory_bytes`]).
    memory: u64,
    /// Its bulk was dropped already.
    shed: bool,
}

#[derive(Default)]
struct Inner {
    live: HashMap<String, Arc<Live>>,
    done: HashMap<String, Arc<Done>>,
    order: VecDeque<Retained>,
    /// Bulk of the retained executions.
    done_bytes: u64,
    /// Memory the retained executions hold.
    done_memory: u64,
    admitted: u64,
}

impl Inner {
    /// Whether the record `id` is pinned by its own stream, which has not
    /// yet sent its `exit`.
    fn pinned(&self, id: &str) -> bool {
        self.done.get(id).is_some_and(|d| d.pinned())
    }

    fn evict(&mut self, keep: &Retention, store: Option<&Store>) {
        // Records go by count and age only, oldest first; a pinned one
        // stays (and may hold the count over for as long as its stream
        // lasts), the next oldest goes in its place.
        let mut i = 0;
        while let Some(r) = self.order.get(i) {
            if self.order.len() <= keep.count && r.at.elapsed() <= keep.age {
                break;
            }
            if self.pinned(&r.id) {
                i += 1;
                continue;
            }
            if let Some(old) = self.order.remove(i) {
                self.done_bytes -= old.bytes;
                self.done_memory -= old.memory;
                self.done.remove(&old.id);
                if let Some(store) = store {
                    let change = Change::Remove {
                        id: old.id,
                        order: old.order,
                    };
                    store.send(change, false);
                }
            }
        }
        // Bulk goes oldest first, never the newest result's.
        let newest = self.order.len().saturating_sub(1);
        let mut i = 0;
        while self.done_bytes > keep.bytes && i < newest {
            let r = &mut self.order[i];
            i += 1;
            if r.shed {
                continue;
            }
            let Some(done) = self.done.get(&r.id) else {
                continue;
            };
            if done.pinned() {
                continue;
            }
            let (lean, weight) = done.shed();
            let memory = lean.memory_bytes();
            self.done_bytes = self.done_bytes - r.bytes + weight;
            self.done_memory = self.done_memory - r.memory + memory;
            r.bytes = weight;
            r.memory = memory;
            r.shed = true;
            if let Some(store) = store {
                let change = Change::Shed {
                    id: lean.id.clone(),
                    record: lean.record.clone(),
                };
                store.send(change, false);
            }
            self.done.insert(lean.id.clone(), Arc::new(lean));
        }
    }
}

/// What the registry knows about an id.
#[derive(Debug)]
pub enum Lookup {
    Live(Arc<Live>),
    Done(Arc<Done>),
    Unknown,
}

/// The snake_case name of a result status, as the result document says it.
pub fn status_name(status: crate::exec::result::Status) -> String {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{status:?}"),
    }
}

/// What admitting an id gave.
#[derive(Debug)]
pub enum Admitted {
    /// A new execution.
    New(Ticket),
    /// The id names an execution of the same job: answer with it.
    Existing(Lookup),
}

/// All executions of a daemon.
#[derive(Debug)]
pub struct Registry {
    cap: usize,
    retention: Retention,
    permits: Arc<Semaphore>,
    slots: AtomicUsize,
    draining: AtomicBool,
    inner: Mutex<Inner>,
    /// Signalled whenever a live entry goes away.
    changed: Notify,
    /// Where every change is recorded (none in unit tests).
    store: Option<Arc<Store>>,
    /// Documents and logs read back from the store (or just finished)
    /// while someone still sends them: a second reader shares them.
    shared: Mutex<Shared>,
    /// Taken to read a large result or log from the store, so that
    /// readers who come at once read it once.
    loading: tokio::sync::Mutex<()>,
}

/// Weak handles on documents and logs that are being sent.
#[derive(Debug, Default)]
struct Shared {
    docs: HashMap<String, Weak<Box<[u8]>>>,
    logs: HashMap<String, Weak<EventLog>>,
    /// Entries after the last sweep of dead ones.
    swept: usize,
}

impl Shared {
    /// Forgets the handles nobody holds any more, once the maps have
    /// doubled since the last sweep (amortised constant work).
    fn sweep(&mut self) {
        let n = self.docs.len() + self.logs.len();
        if n > 2 * self.swept + 64 {
            self.docs.retain(|_, w| w.strong_count() > 0);
            self.logs.retain(|_, w| w.strong_count() > 0);
            self.swept = self.docs.len() + self.logs.len();
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("live", &self.live.len())
            .field("done", &self.done.len())
            .finish()
    }
}

impl Registry {
    pub fn new(max_running: usize, max_queued: usize, retention: Retention) -> Arc<Registry> {
        Arc::new(Registry {
            cap: max_running + max_queued,
            retention,
            permits: Arc::new(Semaphore::new(max_running)),
            slots: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
            store: None,
            shared: Mutex::default(),
            loading: tokio::sync::Mutex::new(()),
        })
    }

    /// A registry that records every execution in `store` and starts with
    /// what it held (`stored`, by admission order): finished executions
    /// are retained as they were; those that were queued or running when
    /// the daemon stopped are finished now as `failed`, `interrupted`.
    /// Returns how many were interrupted.
    pub fn with_store(
        max_running: usize,
        max_queued: usize,
        retention: Retention,
        store: Store,
        stored: Vec<Stored>,
        kept: &Kept,
    ) -> Result<(Arc<Registry>, usize), StoreError> {
        let store = Arc::new(store);
        let mut inner = Inner {
            admitted: store.highest_order(),
            ..Inner::default()
        };
        let mut interrupted = 0;
        for s in stored {
            inner.admitted = inner.admitted.max(s.record.order);
            let (done, change) = restore(s, kept);
            if let Some(change) = change {
                store.send(change, false);
                interrupted += 1;
            }
            // Its bulk as counted when it finished: the document, the
            // output (the log's; its index is not known here) and, once
            // shed, only a small result.
            let r = &done.record;
            let bytes = RECORD_BYTES
                + if !r.result_kept {
                    0
                } else if r.shed {
                    r.output + done.doc_len
                } else {
                    2 * r.output + done.doc_len + 256
                };
            let memory = done.memory_bytes();
            let age = std::time::Duration::from_millis(store_age_ms(
                done.record.finished_ms.unwrap_or(0),
            ));
            inner.order.push_back(Retained {
                id: done.id.clone(),
                order: done.record.order,
                at: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
                bytes,
                memory,
                shed: done.record.shed,
            });
            inner.done_bytes += bytes;
            inner.done_memory += memory;
            inner.done.insert(done.id.clone(), Arc::new(done));
        }
        // The oldest first, so that the age order holds.
        inner
            .order
            .make_contiguous()
            .sort_by_key(|r| std::cmp::Reverse(r.at.elapsed()));
        inner.evict(&retention, Some(&store));
        store.send(super::store::Change::Sync, true).wait()?;
        Ok((
            Arc::new(Registry {
                cap: max_running + max_queued,
                retention,
                permits: Arc::new(Semaphore::new(max_running)),
                slots: AtomicUsize::new(0),
                draining: AtomicBool::new(false),
                inner: Mutex::new(inner),
                changed: Notify::new(),
                store: Some(store),
                shared: Mutex::default(),
                loading: tokio::sync::Mutex::new(()),
            }),
            interrupted,
        ))
    }

    /// Commits what is still queued for the store, and stops it: the last
    /// step of a drain.
    pub fn close_store(&self) {
        if let Some(store) = &self.store {
            store.close();
        }
    }

    /// The folders of the kept outputs the records hold now.
    pub fn kept_dirs(&self) -> std::collections::HashSet<std::path::PathBuf> {
        self.lock()
            .done
            .values()
            .filter_map(|d| d.outputs.as_ref().map(|o| o.dir().to_owned()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain maps behind; keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a place for a new execution request, before its body is read,
    /// with what the execution will need (its cancellation switch): a
    /// request that cannot have one is refused before any id is known, so
    /// a refused admission leaves nothing behind.
    pub fn slot(self: &Arc<Self>) -> Result<Slot, RegistryError> {
        if self.is_draining() {
            return Err(RegistryError::Draining);
        }
        let taken = self
            .slots
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.cap).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(RegistryError::Busy { cap: self.cap });
        }
        match Cancel::new() {
            Ok(cancel) => Ok(Slot {
                registry: self.clone(),
                cancel,
                unannounced: false,
            }),
            Err(e) => {
                self.slots.fetch_sub(1, Ordering::SeqCst);
                Err(RegistryError::Switch(e))
            }
        }
    }

    /// Finds an id.
    pub fn lookup(&self, id: &str) -> Lookup {
        let mut inner = self.lock();
        inner.evict(&self.retention, self.store.as_deref());
        if let Some(l) = inner.live.get(id) {
            return Lookup::Live(l.clone());
        }
        match inner.done.get(id) {
            Some(r) => Lookup::Done(r.clone()),
            None => Lookup::Unknown,
        }
    }

    /// A page of executions, newest admitted first: those matching
    /// `filter`, admitted before `cursor` (a previous page's
    /// `next_cursor`), at most `limit`.
    /// Announces the live executions among `ids` ([`Live::announce`]):
    /// the commits to wait for before answering with them.
    pub fn announce<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<Ack> {
        let lives: Vec<Arc<Live>> = {
            let inner = self.lock();
            ids.filter_map(|id| inner.live.get(id).cloned()).collect()
        };
        lives.iter().filter_map(|l| l.announce()).collect()
    }

    pub fn list(&self, filter: StatusFilter, limit: usize, cursor: Option<u64>) -> Page {
        let mut inner = self.lock();
        inner.evict(&self.retention, self.store.as_deref());
        let time = crate::text::rfc3339;
        let mut all: Vec<Summary> = inner
            .live
            .values()
            .map(|l| Summary {
                execution_id: l.id.clone(),
                status: if l.is_running() { "running" } else { "queued" }.to_owned(),
                submitted_at: time(l.submitted_at),
                finished_at: None,
                exit_code: None,
                order: l.order,
            })
            .filter(|s| match filter {
                StatusFilter::Any => true,
                StatusFilter::Queued => s.status == "queued",
                StatusFilter::Running => s.status == "running",
                _ => false,
            })
            .collect();
        all.extend(
            inner
                .done
                .values()
                .filter(|d| match filter {
                    StatusFilter::Any | StatusFilter::Finished => true,
                    StatusFilter::Result(st) => d.status == st,
                    _ => false,
                })
                .map(|d| Summary {
                    execution_id: d.id.clone(),
                    status: status_name(d.status),
                    submitted_at: time(d.submitted_at),
                    finished_at: Some(d.finished_at()),
                    exit_code: d.exit_code(),
                    order: d.record.order,
                }),
        );
        drop(inner);
        all.retain(|s| cursor.is_none_or(|c| s.order < c));
        all.sort_by_key(|s| std::cmp::Reverse(s.order));
        let more = all.len() > limit;
        all.truncate(limit);
        let next_cursor = if more {
            all.last().map(|s| s.order.to_string())
        } else {
            None
        };
        Page {
            executions: all,
            next_cursor,
        }
    }

    /// The result document of a retained execution: held in memory
    /// (no store), shared with a reader that is sending it now, or read
    /// from the store.
    pub async fn result(&self, done: &Done) -> Result<Encoded, Unread> {
        if let Some(reason) = &done.damaged {
            return Err(Unread::Damaged(reason.clone()));
        }
        if let Some(held) = &done.held {
            return held.result.clone().ok_or(Unread::Dropped);
        }
        let Some(store) = self.store.clone().filter(|_| done.record.result_kept) else {
            return Err(Unread::Dropped);
        };
        if let Some(doc) = self.shared_doc(done) {
            return Ok(doc);
        }
        let _turn = match done.record.blobs {
            true => Some(self.loading.lock().await),
            false => None,
        };
        if let Some(doc) = self.shared_doc(done) {
            return Ok(doc);
        }
        let record = done.record.clone();
        let read = tokio::task::spawn_blocking(move || store.read_result(&record))
            .await
            .unwrap_or_else(|e| Err(format!("its reader failed: {e}")));
        match read {
            Ok(Some(json)) => {
                let result = Arc::new(stand_in(&done.id, done.status, &done.record));
                let doc = Encoded::restored(result, json, done.record.output);
                self.share_doc(&done.id, &doc);
                Ok(doc)
            }
            Ok(None) => Err(Unread::Dropped),
            Err(reason) if self.still_whole(&done.id) => {
                tracing::error!(id = %done.id, error = %reason, "a stored result cannot be read; it answers store_corrupted");
                Err(Unread::Damaged(reason))
            }
            Err(_) => Err(Unread::Dropped),
        }
    }

    /// The event log of a retained execution, for a re-attached reader:
    /// held in memory (no store), its own stream's, shared with another
    /// reader, or read from the store with its result as the `exit`.
    pub async fn events(&self, done: &Done) -> Result<Arc<EventLog>, Unread> {
        if let Some(held) = &done.held {
            return Ok(held.log.clone());
        }
        if let Some(log) = done.own.as_ref().and_then(Weak::upgrade) {
            return Ok(log);
        }
        let result = self.result(done).await?;
        if let Some(log) = self.shared_log(&done.id) {
            return Ok(log);
        }
        let Some(store) = self.store.clone().filter(|_| !done.record.shed) else {
            let log = EventLog::restore_shed(&done.id, done.record.last_seq, Some(result));
            return Ok(Arc::new(log));
        };
        let _turn = match done.record.blobs {
            true => Some(self.loading.lock().await),
            false => None,
        };
        if let Some(log) = self.shared_log(&done.id) {
            return Ok(log);
        }
        let record = done.record.clone();
        let read = tokio::task::spawn_blocking(move || store.read_events(&record))
            .await
            .unwrap_or_else(|e| Err(format!("its reader failed: {e}")));
        let restored = match read {
            Ok(Some(frozen)) => EventLog::restore(&done.id, &frozen, result.clone()),
            Ok(None) => None,
            Err(reason) => {
                tracing::warn!(id = %done.id, error = %reason, "stored events cannot be read; a re-attached reader gets the exit event only");
                None
            }
        };
        // Shed meanwhile, or events that do not read back: the `exit` alone.
        let log = Arc::new(restored.unwrap_or_else(|| {
            EventLog::restore_shed(&done.id, done.record.last_seq, Some(result))
        }));
        let mut shared = self.shared_lock();
        shared.sweep();
        shared.logs.insert(done.id.clone(), Arc::downgrade(&log));
        Ok(log)
    }

    fn shared_lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The document of `done` while a reader still sends it.
    fn shared_doc(&self, done: &Done) -> Option<Encoded> {
        let weak = self.shared_lock().docs.get(&done.id)?.clone();
        let result = Arc::new(stand_in(&done.id, done.status, &done.record));
        Encoded::revive(&weak, result, done.record.output)
    }

    fn share_doc(&self, id: &str, doc: &Encoded) {
        let mut shared = self.shared_lock();
        shared.sweep();
        shared.docs.insert(id.to_owned(), doc.weak());
    }

    fn shared_log(&self, id: &str) -> Option<Arc<EventLog>> {
        self.shared_lock().logs.get(id).and_then(Weak::upgrade)
    }

    /// Whether `id` is still retained with its result (not dropped since).
    fn still_whole(&self, id: &str) -> bool {
        self.lock().done.get(id).is_some_and(|d| d.has_result())
    }

    /// Memory the retained executions hold, in bytes.
    pub fn retained_memory(&self) -> u64 {
        self.lock().done_memory
    }

    /// Bulk of the retained executions (`retain_bytes` bounds it).
    pub fn retained_bytes(&self) -> u64 {
        self.lock().done_bytes
    }

    /// `(running, queued)` executions.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let running = inner.live.values().filter(|l| l.is_running()).count();
        (running, inner.live.len() - running)
    }

    /// Stops admitting new executions.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Cancels every live execution; returns how many.
    pub fn cancel_all(&self) -> usize {
        let live: Vec<Arc<Live>> = self.lock().live.values().cloned().collect();
        for l in &live {
            l.cancel();
        }
        live.len()
    }

    /// Waits until no execution is queued or running.
    pub async fn idle(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().live.is_empty() {
                return;
            }
            notified.await;
        }
    }

    fn remove_live(&self, live: &Arc<Live>) {
        let mut inner = self.lock();
        if inner
            .live
            .get(&live.id)
            .is_some_and(|l| Arc::ptr_eq(l, live))
        {
            inner.live.remove(&live.id);
            if let Some(store) = &self.store {
                store.send(
                    Change::Remove {
                        id: live.id.clone(),
                        order: live.order,
                    },
                    false,
                );
            }
        }
        drop(inner);
        self.changed.notify_waiters();
    }
}

/// Milliseconds from `finished_ms` (since the epoch) to now.
fn store_age_ms(finished_ms: u64) -> u64 {
    super::store::epoch_ms(SystemTime::now()).saturating_sub(finished_ms)
}

/// The status a result document spells `name`.
fn status_named(name: &str) -> Option<Status> {
    Status::ALL.into_iter().find(|s| status_name(*s) == name)
}

/// A retained execution from what the store held (its record: the
/// document and events stay in the store); for one that had not
/// finished, also the change that records it as interrupted.
fn restore(s: Stored, kept: &Kept) -> (Done, Option<Change>) {
    let Stored {
        id,
        record,
        damaged,
    } = s;
    let submitted_at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(record.submitted_ms);
    if record.state != State::Finished {
        let message = if record.unannounced {
            "the daemon stopped before answering this execution, and whether its command had started was not recorded (the call that submitted it got no answer, so its id was never given out): nothing of it is left running. Check what the command may have done before resubmitting it"
        } else if record.state == State::Running {
            "the daemon stopped while this execution was running: its command had started (or was about to), and was ended with the daemon; nothing of it is left running. Check what the command may have done before resubmitting it under a new execution_id"
        } else {
            "the daemon stopped while this execution was queued: its command never started. Resubmit the job under a new execution_id to run it"
        };
        let mut r = ExecResult::rejected(
            &id,
            "bubblewrap",
            ErrorInfo::new(ErrorKind::Interrupted, message),
        );
        r.status = Status::Failed;
        let encoded = Encoded::new(Arc::new(r));
        let log = EventLog::new(&id);
        let last = log.exit(encoded.clone()).unwrap_or(1);
        let mut done_record = record.finished(
            status_name(Status::Failed),
            None,
            encoded.result.finished_at.clone(),
        );
        done_record.last_seq = last;
        done_record.doc_len = encoded.json.len() as u64;
        done_record.blobs = store::as_files(done_record.doc_len, 0);
        done_record.error_kind = Some(ErrorKind::Interrupted.as_str().to_owned());
        let change = Change::Finish {
            id: id.clone(),
            record: done_record.clone(),
            result: encoded.json.clone(),
            events: Arc::new(log),
        };
        let done = Done {
            id,
            doc_len: done_record.doc_len,
            record: done_record,
            held: None,
            own: None,
            outputs: None,
            damaged: None,
            status: Status::Failed,
            submitted_at,
        };
        return (done, Some(change));
    }
    let status = record
        .status
        .as_deref()
        .and_then(status_named)
        .unwrap_or(Status::Failed);
    let outputs = record.outputs.as_ref().and_then(|k| {
        let mut taken = kept.taken.lock().unwrap_or_else(|e| e.into_inner());
        if !taken.insert(k.dir.clone()) {
            return None;
        }
        crate::exec::files::OutputStore::restore(&kept.root, &k.dir, &k.files, &kept.budget)
    });
    let doc_len = match (record.doc_len, record.blob_lens) {
        (0, Some((len, _))) => len,
        (len, _) => len,
    };
    let done = Done {
        id,
        held: None,
        own: None,
        outputs,
        damaged,
        status,
        submitted_at,
        doc_len,
        record,
    };
    (done, None)
}

/// Where kept outputs live, and the budget they count against: what a
/// restart needs to serve the outputs an earlier daemon kept.
#[derive(Debug)]
pub struct Kept {
    pub root: std::path::PathBuf,
    pub budget: Arc<crate::exec::files::KeptBudget>,
    /// The folders restored so far: two records naming one folder (a
    /// tampered store) give it to the first only.
    pub taken: Mutex<std::collections::HashSet<String>>,
}

impl Kept {
    /// Removes the folders of `root` no record holds (`held`), left by a
    /// daemon that stopped before their record went; one touched in the
    /// last ten minutes is left alone, as a command-line run sharing the
    /// data dir may be filling it.
    pub fn sweep(&self, held: &std::collections::HashSet<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let recent = std::time::Duration::from_secs(600);
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let fresh = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age < recent);
            if !meta.is_dir() || held.contains(&path) || fresh {
                continue;
            }
            match crate::fsx::remove_tree(&path) {
                Ok(()) => {
                    tracing::info!(folder = %path.display(), "swept kept outputs no record holds")
                }
                Err(e) => tracing::warn!("cannot sweep {}: {e}", path.display()),
            }
        }
    }
}

/// A place held by one request until its execution ends.
#[derive(Debug)]
pub struct Slot {
    registry: Arc<Registry>,
    /// The execution's cancellation switch, made with the slot.
    cancel: Arc<Cancel>,
    unannounced: bool,
}

impl Slot {
    /// Marks the execution about to be admitted as unannounced: a
    /// blocking, unstreamed call whose id the daemon chose, so that no
    /// one outside learns the id before the result is answered (the
    /// module's docs say what it changes).
    pub fn unannounced(mut self, yes: bool) -> Slot {
        self.unannounced = yes;
        self
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.slots.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slot {
    /// Admits the execution under `id`: it is now queued. When `id`
    /// already names an execution, one of the same job (`digest`) is
    /// answered with it, another is refused.
    pub fn admit(self, id: &str, digest: &str) -> Result<Admitted, RegistryError> {
        let registry = self.registry.clone();
        if registry.is_draining() {
            return Err(RegistryError::Draining);
        }
        let cancel = self.cancel.clone();
        let mut inner = registry.lock();
        inner.evict(&registry.retention, registry.store.as_deref());
        let existing = match (inner.live.get(id), inner.done.get(id)) {
            (Some(l), _) => Some((l.digest == digest, Lookup::Live(l.clone()))),
            (None, Some(d)) => Some((d.record.digest == digest, Lookup::Done(d.clone()))),
            (None, None) => None,
        };
        match existing {
            Some((true, found)) => return Ok(Admitted::Existing(found)),
            Some((false, _)) => return Err(RegistryError::InUse { id: id.to_owned() }),
            None => {}
        }
        inner.admitted += 1;
        let live = Arc::new(Live {
            id: id.to_owned(),
            log: Arc::new(EventLog::new(id)),
            digest: digest.to_owned(),
            order: inner.admitted,
            submitted_at: SystemTime::now(),
            cancel,
            cancelled: AtomicBool::new(false),
            running: AtomicBool::new(false),
            wake: Notify::new(),
            on_cancel: Notify::new(),
            store: registry.store.clone(),
            starting: Mutex::new(None),
            unannounced: AtomicBool::new(self.unannounced),
            sent_running: AtomicBool::new(false),
        });
        inner.live.insert(id.to_owned(), live.clone());
        if let Some(store) = &registry.store {
            // Under the lock: the store sees the changes of an id in order.
            store.send(
                Change::Put {
                    id: id.to_owned(),
                    record: live.record(State::Queued),
                },
                false,
            );
        }
        drop(inner);
        Ok(Admitted::New(Ticket {
            _slot: self,
            registry,
            live,
            finished: false,
        }))
    }
}

/// An admitted execution; finish it with its result.
#[derive(Debug)]
pub struct Ticket {
    _slot: Slot,
    registry: Arc<Registry>,
    live: Arc<Live>,
    finished: bool,
}

impl Ticket {
    pub fn live(&self) -> Arc<Live> {
        self.live.clone()
    }

    /// Waits for a run permit; `None` when cancelled first.
    pub async fn wait_turn(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            if self.live.is_cancelled() {
                return None;
            }
            tokio::select! {
                permit = self.registry.permits.clone().acquire_owned() => {
                    let permit = permit.ok()?;
                    if self.live.is_cancelled() {
                        return None;
                    }
                    self.live.running.store(true, Ordering::SeqCst);
                    return Some(permit);
                }
                _ = self.live.wake.notified() => {}
            }
        }
    }

    /// Waits until its admission is durable: before a 202 acknowledges
    /// it. A failure (a full disk) refuses the execution, which is then
    /// cancelled and leaves nothing behind.
    pub async fn recorded(&self) -> Result<(), RegistryError> {
        let Some(store) = &self.registry.store else {
            return Ok(());
        };
        store
            .send(Change::Sync, true)
            .wait_async()
            .await
            .map_err(RegistryError::Record)
    }

    /// Records the result, serialised once, durably (on a blocking
    /// thread): the id now names a retained result.
    pub fn finish(mut self, result: ExecResult) -> Encoded {
        let (encoded, ack) = self.record_finish(result);
        let recorded = ack.wait().inspect_err(|e| {
            tracing::error!(id = %self.live.id, "the result is answered but could not be recorded: {e}");
        });
        self.retain(encoded, recorded.is_ok())
    }

    /// [`Ticket::finish`] inside the async runtime.
    pub async fn finish_async(mut self, result: ExecResult) -> Encoded {
        let (encoded, ack) = self.record_finish(result);
        let recorded = ack.wait_async().await.inspect_err(|e| {
            tracing::error!(id = %self.live.id, "the result is answered but could not be recorded: {e}");
        });
        self.retain(encoded, recorded.is_ok())
    }

    /// Encodes the result and sends it to the store with the events
    /// logged so far (every event but the `exit`, which is the result).
    fn record_finish(&mut self, result: ExecResult) -> (Encoded, Ack) {
        self.finished = true;
        let encoded = Encoded::new(Arc::new(result));
        let Some(store) = &self.registry.store else {
            return (encoded, Ack::done());
        };
        let record = self.finished_record(&encoded);
        let change = Change::Finish {
            id: self.live.id.clone(),
            record,
            result: encoded.json.clone(),
            events: self.live.log.clone(),
        };
        let ack = store.send(change, true);
        (encoded, ack)
    }

    /// The record of this execution finished with `encoded`: its status,
    /// output weight, last `seq` (its `exit`), error kind and kept outputs.
    fn finished_record(&self, encoded: &Encoded) -> Record {
        let r = &encoded.result;
        let mut record = self.live.record(State::Running).finished(
            status_name(r.status),
            r.exit_code,
            r.finished_at.clone(),
        );
        record.output = encoded.output();
        record.doc_len = encoded.json.len() as u64;
        record.blobs = store::as_files(record.doc_len, record.output);
        record.last_seq = self.live.log.last_seq() + 1;
        record.error_kind = r.error.as_ref().map(|e| e.kind.as_str().to_owned());
        record.outputs = r
            .outputs
            .as_ref()
            .and_then(|c| c.store.as_ref())
            .and_then(|store| store::KeptRecord::of(store));
        record
    }

    /// Moves the execution into retention. With the store on and its
    /// result `recorded` there, only its summary stays in memory; else
    /// (no store, or a failed commit) its result and log are held.
    fn retain(self, result: Encoded, recorded: bool) -> Encoded {
        let result = slim(&result);
        let registry = self.registry.clone();
        let in_store = recorded && registry.store.is_some();
        let mut inner = registry.lock();
        inner.live.remove(&self.live.id);
        if registry.retention.count > 0 {
            // The log's output is counted once more: it is held twice. The
            // document counts at its encoded size (up to 6 bytes per
            // output byte: `\u0001`); the log's `exit` shares it.
            let bytes = result.bytes() + RECORD_BYTES + self.live.log.bytes();
            let log = &self.live.log;
            let done = Done {
                id: self.live.id.clone(),
                record: self.finished_record(&result),
                held: (!in_store).then(|| Held {
                    result: Some(result.clone()),
                    log: log.clone(),
                }),
                own: (in_store && log.is_pinned()).then(|| Arc::downgrade(log)),
                outputs: result.result.outputs.as_ref().and_then(|c| c.store.clone()),
                damaged: None,
                status: result.result.status,
                submitted_at: self.live.submitted_at,
                doc_len: result.json.len() as u64,
            };
            if in_store {
                // Whoever is sent this document now shares it with a
                // reader who comes meanwhile.
                registry.share_doc(&done.id, &result);
            }
            let memory = done.memory_bytes();
            inner.done.insert(self.live.id.clone(), Arc::new(done));
            inner.order.push_back(Retained {
                id: self.live.id.clone(),
                order: self.live.order,
                at: Instant::now(),
                bytes,
                memory,
                shed: false,
            });
            inner.done_bytes += bytes;
            inner.done_memory += memory;
            inner.evict(&registry.retention, registry.store.as_deref());
        } else if let Some(store) = &registry.store {
            store.send(
                Change::Remove {
                    id: self.live.id.clone(),
                    order: self.live.order,
                },
                false,
            );
        }
        drop(inner);
        registry.changed.notify_waiters();
        trim_now_and_then();
        result
    }
}

/// Finished executions between two trims of the allocator.
const TRIM_EVERY: u64 = 256;

/// Gives the allocator's free pages back to the kernel after every
/// [`TRIM_EVERY`] finished executions: each leaves freed memory spread
/// over the heaps (its result, its log, its buffers) that glibc would
/// otherwise keep. The first time, also the code pages that the first
/// executions mapped around what they ran (from a page cache that command
/// line runs filled): what stays resident after is what executions use.
fn trim_now_and_then() {
    static FINISHED: AtomicU64 = AtomicU64::new(0);
    let n = FINISHED.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_multiple_of(TRIM_EVERY) {
        crate::supervise::sys::trim_malloc();
    }
    if n == TRIM_EVERY {
        crate::supervise::sys::release_program_pages();
    }
}

/// The same document, with only what the daemon still reads of its
/// result kept beside it (status, exit code, signal, finish time, error,
/// kept outputs). The rest (receipt, skills, limits, usage, identity,
/// output) is in the document already: a retained result held both, and
/// a receipt is most of a small result (about 5 of 6.5 KiB).
fn slim(enc: &Encoded) -> Encoded {
    let r = &enc.result;
    let mut stand_in = ExecResult::rejected(
        &r.execution_id,
        r.sandbox,
        ErrorInfo::new(ErrorKind::Internal, String::new()),
    );
    stand_in.status = r.status;
    stand_in.exit_code = r.exit_code;
    stand_in.signal = r.signal;
    stand_in.started_at.clone_from(&r.started_at);
    stand_in.finished_at.clone_from(&r.finished_at);
    stand_in.duration_ms = r.duration_ms;
    stand_in.error.clone_from(&r.error);
    stand_in.outputs.clone_from(&r.outputs);
    enc.with_result(Arc::new(stand_in))
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.finished {
            self.registry.remove_live(&self.live);
            self.live.log.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::result::{ErrorInfo, Status};
    use std::time::Duration;

    fn keep(count: usize) -> Retention {
        Retention {
            count,
            bytes: 1 << 30,
            age: Duration::from_secs(3600),
        }
    }

    /// A registry with a store in `dir` (outputs kept below it).
    fn stored(dir: &std::path::Path, retention: Retention) -> Arc<Registry> {
        let (store, stored) = Store::open(&Store::file(dir)).unwrap();
        let kept = Kept {
            root: dir.join("outputs"),
            budget: crate::exec::files::KeptBudget::new(0),
            taken: Default::default(),
        };
        Registry::with_store(2, 2, retention, store, stored, &kept)
            .unwrap()
            .0
    }

    fn result(id: &str) -> ExecResult {
        let mut r = ExecResult::rejected(
            id,
            "bubblewrap",
            ErrorInfo::new(crate::error::ErrorKind::Internal, "m"),
        );
        r.status = Status::Exited;
        r
    }

    #[tokio::test]
    async fn admission_is_bounded_and_ids_are_unique() {
        let reg = Registry::new(1, 1, keep(10));
        let a = reg.slot().unwrap();
        let b = reg.slot().unwrap();
        assert!(matches!(reg.slot(), Err(RegistryError::Busy { cap: 2 })));
        let ta = a.admit("a", "d").unwrap().new_ticket();
        assert!(matches!(
            b.admit("a", "other"),
            Err(RegistryError::InUse { .. })
        ));
        // The same job under the same id is answered with the execution.
        assert!(matches!(
            reg.slot().unwrap().admit("a", "d"),
            Ok(Admitted::Existing(Lookup::Live(_)))
        ));
        // The refused admission gave its slot back.
        let tb = reg.slot().unwrap().admit("b", "d").unwrap().new_ticket();
        let permit = ta.wait_turn().await.unwrap();
        assert_eq!(reg.counts(), (1, 1));
        // b waits for the permit; cancelling it takes it out of the queue.
        tb.live().cancel();
        assert!(tb.wait_turn().await.is_none());
        drop(tb);
        assert!(matches!(reg.lookup("b"), Lookup::Unknown));
        ta.finish(result("a"));
        drop(permit);
        assert!(matches!(reg.lookup("a"), Lookup::Done(_)));
        assert!(matches!(
            reg.slot().unwrap().admit("a", "other"),
            Err(RegistryError::InUse { .. })
        ));
        assert!(matches!(
            reg.slot().unwrap().admit("a", "d"),
            Ok(Admitted::Existing(Lookup::Done(_)))
        ));
        reg.idle().await;
    }

    impl Admitted {
        fn new_ticket(self) -> Ticket {
            match self {
                Admitted::New(t) => t,
                Admitted::Existing(_) => panic!("expected a new execution"),
            }
        }
    }

    #[tokio::test]
    async fn listing_is_newest_first_filtered_and_paged() {
        let reg = Registry::new(4, 4, keep(10));
        for id in ["p", "q", "r"] {
            let t = reg.slot().unwrap().admit(id, "d").unwrap().new_ticket();
            t.finish(result(id));
        }
        let queued = reg.slot().unwrap().admit("s", "d").unwrap().new_ticket();
        let ids = |p: &Page| -> Vec<String> {
            p.executions
                .iter()
                .map(|s| s.execution_id.clone())
                .collect()
        };
        let all = reg.list(StatusFilter::Any, 10, None);
        assert_eq!(ids(&all), ["s", "r", "q", "p"]);
        assert_eq!(all.next_cursor, None);
        let first = reg.list(StatusFilter::Finished, 2, None);
        assert_eq!(ids(&first), ["r", "q"]);
        let cursor = first.next_cursor.as_deref().unwrap().parse().unwrap();
        let second = reg.list(StatusFilter::Finished, 2, Some(cursor));
        assert_eq!(ids(&second), ["p"]);
        assert_eq!(second.next_cursor, None);
        assert_eq!(ids(&reg.list(StatusFilter::Queued, 10, None)), ["s"]);
        assert!(reg
            .list(StatusFilter::Running, 10, None)
            .executions
            .is_empty());
        let exited = reg.list(
            StatusFilter::Result(crate::exec::result::Status::Exited),
            10,
            None,
        );
        assert_eq!(ids(&exited), ["r", "q", "p"]);
        drop(queued);
    }

    #[tokio::test]
    async fn retention_evicts_the_oldest() {
        let reg = Registry::new(4, 0, keep(2));
        for id in ["x", "y", "z"] {
            let t = reg.slot().unwrap().admit(id, "d").unwrap().new_ticket();
            t.finish(result(id));
        }
        assert!(matches!(reg.lookup("x"), Lookup::Unknown));
        assert!(matches!(reg.lookup("y"), Lookup::Done(_)));
        assert!(matches!(reg.lookup("z"), Lookup::Done(_)));
    }

    /// With the store on, a retained execution costs memory for its
    /// summary only, whatever the size of its document: the document is
    /// read back from the store, byte for byte, and `retain_bytes` still
    /// bounds what the store keeps (the older result's files go).
    #[test]
    fn an_unannounced_execution_is_recorded_as_running_until_shown() {
        // What reaches the disk only with another's commit may be older
        // than the truth: it must never say "queued" (never started).
        let dir = tempfile::tempdir().unwrap();
        let reg = stored(dir.path(), keep(10));
        let quiet = reg
            .slot()
            .unwrap()
            .unannounced(true)
            .admit("q", "d")
            .unwrap();
        let Admitted::New(t) = quiet else {
            panic!("q is new")
        };
        let live = t.live();
        let record = live.record(State::Queued);
        assert_eq!(record.state, State::Running);
        assert!(record.unannounced);
        // Shown: an ordinary record of what it is, sent durably.
        assert!(live.announce().is_some());
        let record = live.record(State::Queued);
        assert_eq!(record.state, State::Queued);
        assert!(!record.unannounced);
        assert!(live.announce().is_none(), "announced twice");
        // An ordinary execution is never unannounced.
        let Admitted::New(t) = reg.slot().unwrap().admit("n", "d").unwrap() else {
            panic!("n is new")
        };
        assert!(t.live().announce().is_none());
        assert_eq!(t.live().record(State::Queued).state, State::Queued);
    }

    #[test]
    fn with_the_store_a_retained_execution_holds_its_summary_not_its_document() {
        let dir = tempfile::tempdir().unwrap();
        let retention = Retention {
            bytes: 600_000,
            ..keep(10)
        };
        let reg = stored(dir.path(), retention);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let big = |id: &str| {
            let mut r = result(id);
            r.stdout = "x".repeat(200_000);
            r
        };
        let t = reg.slot().unwrap().admit("a", "d").unwrap().new_ticket();
        let doc = t.finish(big("a")).json.to_vec();
        let Lookup::Done(done) = reg.lookup("a") else {
            panic!("a is retained")
        };
        assert!(done.held.is_none());
        let summary = done.memory_bytes();
        assert_eq!(reg.retained_memory(), summary);
        assert!(summary < 2048, "a summary of {summary} bytes");
        // The bulk is counted where it is: in the store.
        assert!(reg.retained_bytes() > doc.len() as u64);
        let back = rt.block_on(reg.result(&done)).unwrap();
        assert_eq!(&back.json[..], &doc[..]);
        assert_eq!(back.result.status, Status::Exited);
        drop((back, done));

        // A second large result takes the store over retain_bytes: the
        // first one's bulk goes, from memory's count and from the disk.
        let t = reg.slot().unwrap().admit("b", "d").unwrap().new_ticket();
        drop(t.finish(big("b")));
        let Lookup::Done(first) = reg.lookup("a") else {
            panic!("a's record stays")
        };
        assert!(matches!(
            rt.block_on(reg.result(&first)),
            Err(Unread::Dropped)
        ));
        assert!(reg.retained_memory() < 4096);
        reg.close_store();
        let files = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
        assert_eq!(files, 2, "the newest result and its events only");

        // Without a store, the document is held (and counted).
        let plain = Registry::new(1, 1, keep(10));
        let t = plain.slot().unwrap().admit("a", "d").unwrap().new_ticket();
        drop(t.finish(big("a")));
        assert!(plain.retained_memory() > doc.len() as u64);
    }

    #[tokio::test]
    async fn draining_refuses_new_work() {
        let reg = Registry::new(1, 0, keep(2));
        let slot = reg.slot().unwrap();
        reg.start_draining();
        assert!(matches!(slot.admit("a", "d"), Err(RegistryError::Draining)));
        assert!(matches!(reg.slot(), Err(RegistryError::Draining)));
    }
}
