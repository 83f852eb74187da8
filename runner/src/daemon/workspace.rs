//! The order of a managed session workspace: one lane per session, in
//! which its jobs run one at a time in order of admission, and which file
//! writes and the session's deletion may enter only when it is empty
//! (docs/workspaces.md).
//!
//! Invariants:
//! - a place in a lane is taken synchronously when the job is admitted
//!   (before anything is spawned or awaited), so the order of the lane is
//!   the order of admission; the head of the lane alone holds the
//!   workspace;
//! - a place leaves its lane when it is dropped, whether its holder ran,
//!   was cancelled while waiting, or its request was refused, and every
//!   waiter then looks again: a lane never stalls behind a holder that is
//!   gone;
//! - [`Lanes::try_join`] enters only an empty lane, so an upload, a
//!   deletion of a file or of the session never meets a running job, and
//!   a job that asked not to wait (`session_wait=false`) is refused (409)
//!   rather than queued behind another;
//! - a session whose lane is not empty neither expires nor is deleted.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Who holds or waits for a place in a workspace's lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// An execution, by id.
    Job(String),
    /// A blocking execution whose id is not given out before its answer.
    Unannounced,
    /// A file upload or deletion.
    Files,
    /// The session's deletion.
    Delete,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Job(id) => write!(f, "execution {id:?}"),
            Holder::Unannounced => f.write_str("a blocking execution of this session"),
            Holder::Files => f.write_str("a file upload or deletion"),
            Holder::Delete => f.write_str("its deletion"),
        }
    }
}

/// Why a place was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("the workspace of session {session} is in use by {}; {}", list(.holders), until(.holders))]
    Busy {
        session: String,
        holders: Vec<Holder>,
    },
}

/// How to wait for the first holder (the one using the workspace now):
/// an execution whose id is given out can be waited for by it; the
/// others (a blocking call whose id its caller learns with the answer, a
/// file transfer, a deletion) only by trying again.
fn until(holders: &[Holder]) -> String {
    match holders.first() {
        Some(Holder::Job(id)) => {
            format!("wait until it ends (GET /v1/executions/{id}?wait=30s) and send this again")
        }
        _ => "send this again once it has ended".to_owned(),
    }
}

fn list(holders: &[Holder]) -> String {
    let mut s: Vec<String> = holders.iter().take(5).map(Holder::to_string).collect();
    if holders.len() > 5 {
        s.push(format!("{} more", holders.len() - 5));
    }
    s.join(", ")
}

#[derive(Debug, Default)]
struct Lane {
    queue: VecDeque<(u64, Holder)>,
    notify: Arc<Notify>,
}

/// The lanes of every managed workspace, by session id.
#[derive(Debug, Default)]
pub struct Lanes {
    lanes: Mutex<HashMap<String, Lane>>,
    next: AtomicU64,
}

impl Lanes {
    pub fn new() -> Arc<Lanes> {
        Arc::new(Lanes::default())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Lane>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the last place of `session`'s lane.
    pub fn join(self: &Arc<Self>, session: &str, holder: Holder) -> Place {
        let mut lanes = self.lock();
        self.enter(&mut lanes, session, holder)
    }

    /// Takes a place only in an empty lane: it holds the workspace at once.
    pub fn try_join(self: &Arc<Self>, session: &str, holder: Holder) -> Result<Place, LaneError> {
        let mut lanes = self.lock();
        if let Some(lane) = lanes.get(session).filter(|l| !l.queue.is_empty()) {
            return Err(LaneError::Busy {
                session: session.to_owned(),
                holders: lane.queue.iter().map(|(_, h)| h.clone()).collect(),
            });
        }
        Ok(self.enter(&mut lanes, session, holder))
    }

    fn enter(
        self: &Arc<Self>,
        lanes: &mut HashMap<String, Lane>,
        session: &str,
        holder: Holder,
    ) -> Place {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let lane = lanes.entry(session.to_owned()).or_default();
        lane.queue.push_back((id, holder));
        Place {
            lanes: self.clone(),
            session: session.to_owned(),
            id,
            notify: lane.notify.clone(),
        }
    }

    /// Whether anyone holds or waits for `session`'s workspace.
    pub fn busy(&self, session: &str) -> bool {
        self.lock()
            .get(session)
            .is_some_and(|l| !l.queue.is_empty())
    }

    fn is_head(&self, session: &str, id: u64) -> bool {
        self.lock()
            .get(session)
            .and_then(|l| l.queue.front())
            .is_some_and(|(head, _)| *head == id)
    }

    fn leave(&self, session: &str, id: u64) {
        let mut lanes = self.lock();
        let Some(lane) = lanes.get_mut(session) else {
            return;
        };
        lane.queue.retain(|(i, _)| *i != id);
        lane.notify.notify_waiters();
        if lane.queue.is_empty() {
            lanes.remove(session);
        }
    }
}

/// A place in a lane, left when dropped.
#[derive(Debug)]
pub struct Place {
    lanes: Arc<Lanes>,
    session: String,
    id: u64,
    notify: Arc<Notify>,
}

impl Place {
    /// Resolves once this place is the head of its lane: its holder has
    /// the workspace to itself.
    pub async fn turn(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lanes.is_head(&self.session, self.id) {
                return;
            }
            notified.await;
        }
    }

    /// Whether it is this place's turn now.
    pub fn is_turn(&self) -> bool {
        self.lanes.is_head(&self.session, self.id)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.lanes.leave(&self.session, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_about_the_holder_using_the_workspace_now() {
        let job = || Holder::Job("x".into());
        assert!(until(&[job(), Holder::Files]).contains("GET /v1/executions/x?wait=30s"));
        for holders in [
            vec![Holder::Files, job()],
            vec![Holder::Unannounced, job()],
            vec![],
        ] {
            let hint = until(&holders);
            assert!(!hint.contains("GET"), "{holders:?}: {hint}");
        }
    }

    #[tokio::test]
    async fn places_take_turns_in_order_of_admission() {
        let lanes = Lanes::new();
        let a = lanes.join("s", Holder::Job("a".into()));
        let b = lanes.join("s", Holder::Job("b".into()));
        let c = lanes.join("s", Holder::Job("c".into()));
        let other = lanes.join("t", Holder::Job("x".into()));
        assert!(a.is_turn() && other.is_turn());
        assert!(!b.is_turn() && !c.is_turn());
        // Only an empty lane may be entered without waiting.
        let e = lanes.try_join("s", Holder::Files).unwrap_err();
        assert!(e.to_string().contains("execution \"a\""), "{e}");
        // A waiter that leaves (cancelled) does not hold up the next.
        drop(b);
        assert!(!c.is_turn());
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(10), c.turn())
            .await
            .expect("the next place gets its turn");
        drop(c);
        assert!(!lanes.busy("s"));
        let files = lanes.try_join("s", Holder::Files).unwrap();
        assert!(files.is_turn());
    }
}
