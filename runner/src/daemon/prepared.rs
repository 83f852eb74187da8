//! The daemon's prepared sandboxes (docs/prepared.md): per session, up to
//! `prepared_sandboxes` sandboxes made ahead of the session's next
//! command ([`crate::exec::prepared`]), at most `prepared_total` in all
//! holding at most `prepared_memory` of host memory (their PSS, measured
//! as each is made), each discarded after `prepared_idle` unused.
//!
//! After each execution of a session the pool refills that session on a
//! thread of its own, never on a request's path, from the job that just
//! ran (its command taken out). A request of the session takes one whose
//! key is its own (a hit); one prepared from anything else (another
//! published root, `/etc` view, environment, profile or limits) is
//! discarded then ("changed"), and the request builds its own (a miss).
//! Deleting a session, or its expiry, discards its sandboxes, and one
//! being made for it then is discarded when made; a stopping daemon
//! discards them all when its drain starts (no new command will take
//! one) and waits for the one being made before it exits.
//! A sandbox is taken out of the pool before its command is handed over,
//! so none runs two commands.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::exec::job::Job;
use crate::exec::prepared::{Key, Use, Warm};
use crate::exec::result::ExecResult;
use crate::exec::runner::{RunOptions, Runner};

use super::metrics::Metrics;

pub use super::config::PreparedBounds as Bounds;

/// The prepared sandboxes of every session.
#[derive(Debug)]
pub struct Pool {
    bounds: Bounds,
    runner: Arc<Runner>,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    /// The refill thread. One thread, living as long as the pool, spawns
    /// every prepared sandbox: a child's parent-death signal follows the
    /// *thread* that forked it, so a sandbox spawned from a short-lived
    /// thread would be killed when that thread ends.
    refills: Mutex<Option<Refills>>,
}

/// The refill thread and its queue.
#[derive(Debug)]
struct Refills {
    queue: std::sync::mpsc::Sender<(String, Job)>,
    thread: std::thread::JoinHandle<()>,
}

/// How long a stopping daemon waits for the sandbox being prepared (a
/// preparation takes milliseconds; its measurement waits at most
/// 200 ms): short, as it comes after the drain's grace.
const REFILL_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, Vec<Warm>>,
    /// Sessions being refilled now (one refill at a time each).
    refilling: std::collections::HashSet<String>,
    /// The memory of the last sandbox made: what the next will hold.
    last_memory: u64,
    /// One sandbox alone measured more than the memory bound (said once).
    warned: bool,
    /// Sandboxes counted against the total while being made.
    making: usize,
    /// Sessions ended lately, newest last: a refill of one is refused,
    /// and a sandbox made for one while it ended is discarded. Bounded
    /// (an older one forgotten leaves at worst sandboxes the idle
    /// bound discards).
    ended: std::collections::VecDeque<String>,
    closed: bool,
}

/// How many ended sessions the pool remembers.
const ENDED: usize = 1024;

impl State {
    fn ended(&self, session: &str) -> bool {
        self.ended.iter().any(|s| s == session)
    }

    fn total(&self) -> usize {
        self.sessions.values().map(Vec::len).sum::<usize>() + self.making
    }

    /// The memory the waiting sandboxes hold, as measured.
    fn memory(&self) -> u64 {
        self.sessions.values().flatten().map(Warm::memory).sum()
    }
}

impl Pool {
    /// A pool; with prepared sandboxes on, a thread discards idle ones.
    pub fn new(bounds: Bounds, runner: Arc<Runner>, metrics: Arc<Metrics>) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            bounds,
            runner,
            metrics,
            state: Mutex::new(State::default()),
            refills: Mutex::new(None),
        });
        if bounds.per_session > 0 {
            let (tx, rx) = std::sync::mpsc::channel::<(String, Job)>();
            let weak = Arc::downgrade(&pool);
            let started = std::thread::Builder::new()
                .name("prepared-refill".into())
                .spawn(move || {
                    while let Ok((session, job)) = rx.recv() {
                        let Some(pool) = weak.upgrade() else { return };
                        pool.fill(&session, &job);
                        pool.lock().refilling.remove(&session);
                        pool.metrics.prepared_waiting(pool.gauge());
                    }
                });
            if let Ok(thread) = started {
                *pool.refills.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Refills { queue: tx, thread });
            }
            let weak = Arc::downgrade(&pool);
            let every = (bounds.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
            std::thread::Builder::new()
                .name("prepared-expiry".into())
                .spawn(move || expiry(weak, every))
                .ok();
        }
        pool
    }

    /// Whether prepared sandboxes are on.
    pub fn on(&self) -> bool {
        self.bounds.per_session > 0
    }

    /// How many wait now.
    pub fn waiting(&self) -> usize {
        self.lock().sessions.values().map(Vec::len).sum()
    }

    /// How many wait now and the memory they hold (the gauges).
    fn gauge(&self) -> (usize, u64) {
        let st = self.lock();
        (st.sessions.values().map(Vec::len).sum(), st.memory())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a job: a session's through [`Runner::run_session`] with this
    /// pool (then refilled), any other as [`Runner::run`].
    pub fn run(self: &Arc<Self>, job: &Job, opts: RunOptions<'_>) -> ExecResult {
        let session = match (&job.session, self.on()) {
            (Some(s), true) => s.clone(),
            _ => return self.runner.run(job, opts),
        };
        let mut take = |key: &Key| self.take(&session, key);
        let (result, used) = self.runner.run_session(job, opts, &mut take);
        match used {
            Use::Prepared => self.metrics.prepared_use(true),
            Use::Built => self.metrics.prepared_use(false),
            Use::Died => {
                self.metrics.prepared_use(false);
                self.metrics.prepared_discarded("died", 1);
            }
            Use::Ineligible => {}
        }
        if used != Use::Ineligible && result.status != crate::exec::result::Status::Rejected {
            self.refill(&session, job);
        }
        self.metrics.prepared_waiting(self.gauge());
        result
    }

    /// Takes a sandbox of `session` prepared with `key`; those prepared
    /// with another are discarded.
    fn take(&self, session: &str, key: &Key) -> Option<Warm> {
        let (found, stale) = {
            let mut st = self.lock();
            let list = st.sessions.get_mut(session)?;
            let (same, stale): (Vec<Warm>, Vec<Warm>) = std::mem::take(list)
                .into_iter()
                .partition(|w| w.key() == key);
            let mut same = same.into_iter();
            let found = same.next();
            *list = same.collect();
            (found, stale)
        };
        self.discard(stale, "changed");
        found
    }

    /// Discards the sandboxes of a session (deleted, or ended).
    pub fn end_session(&self, session: &str) {
        let gone = {
            let mut st = self.lock();
            if !st.ended(session) {
                if st.ended.len() >= ENDED {
                    st.ended.pop_front();
                }
                st.ended.push_back(session.to_owned());
            }
            st.sessions.remove(session).unwrap_or_default()
        };
        self.discard(gone, "session_ended");
        self.metrics.prepared_waiting(self.gauge());
    }

    /// Discards every sandbox and prepares no more: at the start of a
    /// drain, when no new command will take one. Blocking (each discarded
    /// sandbox is killed and reaped).
    pub fn close(&self) {
        let gone: Vec<Warm> = {
            let mut st = self.lock();
            st.closed = true;
            st.sessions.drain().flat_map(|(_, v)| v).collect()
        };
        self.discard(gone, "shutdown");
    }

    /// [`Pool::close`], and waits for the one
    /// being prepared, which is discarded when made. Were the daemon to
    /// exit under a preparation, its bubblewrap would die with the
    /// refill thread, but not always its sandbox: a pid 1 cloned a
    /// moment before then waits for ever on a user namespace its parent
    /// never sets up, in a cgroup nobody removes.
    pub fn shutdown(&self) {
        self.close();
        let refills = self
            .refills
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(Refills { queue, thread }) = refills {
            // The thread ends once the queue is closed and drained: what
            // is still queued finds the pool closed.
            drop(queue);
            let deadline = Instant::now() + REFILL_WAIT;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                tracing::warn!(
                    waited_ms = REFILL_WAIT.as_millis() as u64,
                    "a prepared sandbox was still being made at exit; it may be left behind"
                );
            }
        }
    }

    fn discard(&self, warms: Vec<Warm>, reason: &'static str) {
        if warms.is_empty() {
            return;
        }
        // Out of the pool already: the gauge first, then the count.
        self.metrics.prepared_waiting(self.gauge());
        self.metrics.prepared_discarded(reason, warms.len() as u64);
        for w in warms {
            tracing::debug!(key = w.key().as_str(), reason, "prepared sandbox discarded");
            self.runner.discard(w);
        }
    }

    /// Prepares sandboxes for `session` up to the bounds, from `job`, on
    /// the refill thread.
    fn refill(&self, session: &str, job: &Job) {
        {
            let mut st = self.lock();
            if st.closed || st.ended(session) || !st.refilling.insert(session.to_owned()) {
                return;
            }
        }
        let queued = self
            .refills
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|r| r.queue.send((session.to_owned(), job.clone())).is_ok());
        if !queued {
            self.lock().refilling.remove(session);
        }
    }

    fn fill(&self, session: &str, job: &Job) {
        loop {
            {
                let mut st = self.lock();
                let have = st.sessions.get(session).map_or(0, Vec::len);
                if st.closed
                    || st.ended(session)
                    || have >= self.bounds.per_session
                    || st.total() >= self.bounds.total
                    || st.memory() + st.last_memory > self.bounds.memory
                {
                    return;
                }
                st.making += 1;
            }
            let mut made = self.runner.prepare_sandbox(job);
            if let Ok(Some(warm)) = &mut made {
                warm.measure();
            }
            let mut st = self.lock();
            st.making -= 1;
            if let Ok(Some(warm)) = &made {
                st.last_memory = warm.memory();
                if warm.memory() > self.bounds.memory && !st.warned {
                    st.warned = true;
                    tracing::warn!(
                        bytes = warm.memory(),
                        bound = self.bounds.memory,
                        "one prepared sandbox holds more than prepared_memory: none will be kept; raise the bound"
                    );
                }
            }
            match made {
                Ok(Some(warm)) if st.memory() + warm.memory() > self.bounds.memory => {
                    // Past the memory bound: it never joins the pool, and
                    // the refill stops (the next one tries again).
                    drop(st);
                    tracing::debug!(
                        bytes = warm.memory(),
                        "a prepared sandbox would pass prepared_memory; discarded"
                    );
                    self.discard(vec![warm], "memory");
                    return;
                }
                Ok(Some(warm)) if !st.closed && !st.ended(session) => {
                    st.sessions
                        .entry(session.to_owned())
                        .or_default()
                        .push(warm);
                }
                Ok(Some(warm)) => {
                    // Ended while it was made: it never joins the pool.
                    let reason = if st.closed {
                        "shutdown"
                    } else {
                        "session_ended"
                    };
                    drop(st);
                    self.discard(vec![warm], reason);
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("no prepared sandbox for session {session}: {e}");
                    return;
                }
            }
        }
    }

    /// Discards the sandboxes unused for longer than the idle bound.
    fn expire(&self, now: Instant) {
        let old: Vec<Warm> = {
            let mut st = self.lock();
            let mut old = Vec::new();
            for list in st.sessions.values_mut() {
                let (keep, gone): (Vec<Warm>, Vec<Warm>) = std::mem::take(list)
                    .into_iter()
                    .partition(|w| now.duration_since(w.made()) < self.bounds.idle);
                *list = keep;
                old.extend(gone);
            }
            st.sessions.retain(|_, v| !v.is_empty());
            old
        };
        if !old.is_empty() {
            self.discard(old, "idle");
            self.metrics.prepared_waiting(self.gauge());
        }
    }
}

/// The expiry thread: ends with the pool.
fn expiry(pool: Weak<Pool>, every: Duration) {
    loop {
        std::thread::sleep(every);
        match pool.upgrade() {
            Some(p) if !p.lock().closed => p.expire(Instant::now()),
            _ => return,
        }
    }
}
