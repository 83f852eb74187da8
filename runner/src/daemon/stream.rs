//! The sink an execution writes to, its event log, and its NDJSON event
//! streams.
//!
//! [`DaemonSink`] runs on the runner's threads: it records staging metrics
//! and appends every event to the execution's [`EventLog`] (numbered by
//! `seq`). Every NDJSON stream of an execution — the POST's own and any
//! re-attached reader ([`attach`]) — reads that log:
//!
//! ```text
//! {"event":"started","seq":1,"execution_id":"…"}
//! {"event":"stdout","seq":2,"data":"…"}  (and "stderr"), in the order produced
//! {"event":"heartbeat","seq":2}          after each quiet interval (not logged)
//! {"event":"exit","seq":3,"result":{…}}  the result document, as GET returns it
//! ```
//!
//! The log stores no serialised line: it keeps the raw output bytes of each
//! stream once, plus a compact index of 16 bytes per event (kind, offset,
//! length); a line is built only when a reader sends it, a bounded page at
//! a time.
//!
//! Invariants:
//! - `seq` numbers an execution's logged events 1, 2, 3, … in the order they
//!   were produced; every stream of it sends the same event with the same
//!   `seq`; a heartbeat repeats the last `seq` sent;
//! - an event, once any reader has been given it, never changes ("sealed");
//!   output that arrives while the last event is an unsealed one of the
//!   same stream is merged into it (up to 16 KiB, never splitting a valid
//!   character: the cut moves back at most 3 bytes, so output that is no
//!   UTF-8 at all costs constant work per event), so a command gains nothing by writing
//!   in tiny pieces;
//! - the index is bounded by the output: past [`FREE_EVENTS`] events, an
//!   event must average [`MIN_AVERAGE`] bytes; a flood of tiny writes beyond
//!   that is held per stream and logged as at most one event per stream
//!   once [`HOLD_BYTES`] are held, a reader has waited [`HOLD_FOR`], or the
//!   execution ends — interleaving of stdout and stderr is then kept at that
//!   grain;
//! - so the log holds at most the captured output (the supervisor hands the
//!   sink no byte past `output_bytes`), its index, one `started` and one
//!   `exit`, whose result document is serialised once and shared with the
//!   registry, not copied;
//! - a reader copies at most [`PAGE_BYTES`] of output plus one event (at
//!   most 16 KiB) out of the log at a time, however far behind it is, and
//!   builds its lines after releasing the log's lock: the lock is only
//!   ever held for work bounded by one page or one chunk of output, so a
//!   reader on a runtime worker never waits long for the runner, nor the
//!   runner for a reader;
//! - the `exit` event's result document is never copied per reader: every
//!   reader (and `GET`) sends `events::FRAME_BYTES` slices of the one shared
//!   buffer;
//! - the POST's stream pushes back: once the command's output is more than
//!   [`BACKLOG_BYTES`] ahead of what its client has taken, the runner's
//!   output thread waits (the command blocks on its pipe); a client that
//!   takes nothing for `stall_timeout`, or has gone, gets its execution
//!   cancelled, so a stalled client can never hold a sandbox past its
//!   limits. A re-attached reader never holds anything back;
//! - `data` is valid UTF-8: a multi-byte character split across two chunks
//!   is held back until it is complete; invalid bytes become U+FFFD, as in
//!   the result document;
//! - `exit` is the last event and is logged only after the result is
//!   retained, so a client that reads it can GET the same result.
//!
//! [`FREE_EVENTS`]: super::events::FREE_EVENTS
//! [`MIN_AVERAGE`]: super::events::MIN_AVERAGE
//! [`HOLD_BYTES`]: super::events::HOLD_BYTES
//! [`HOLD_FOR`]: super::events::HOLD_FOR
//! [`PAGE_BYTES`]: super::events::PAGE_BYTES

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::Frame;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::events::{
    heartbeat_line, next_frame, Encoded, EventLog, LogPin, BACKLOG_BYTES, EXIT_END,
};
use super::metrics::Metrics;
use super::registry::Live;
use crate::supervise::{Sink, Stream};

/// How much output the POST's client has taken (back-pressure).
#[derive(Debug, Default)]
pub struct Progress {
    taken: AtomicU64,
    moved: Notify,
}

/// The POST's stream, as its sink sees it.
struct PushBack {
    progress: Arc<Progress>,
    rt: Handle,
    stall: Duration,
    gone: bool,
}

impl PushBack {
    /// Waits while the output is more than [`BACKLOG_BYTES`] ahead of the
    /// client, at most `stall` without progress (then cancels). Called on
    /// the runner's threads, never on a runtime worker.
    fn wait(&mut self, written: u64, live: &Live) {
        while !self.gone && !live.is_cancelled() {
            let progress = self.progress.clone();
            let moved = self.rt.block_on(async {
                let notified = progress.moved.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if written.saturating_sub(progress.taken.load(Ordering::SeqCst)) <= BACKLOG_BYTES {
                    return None;
                }
                tokio::select! {
                    r = tokio::time::timeout(self.stall, notified) => Some(r.is_ok()),
                    _ = live.cancelled() => Some(true),
                }
            });
            match moved {
                None => return,
                Some(true) => {}
                Some(false) => {
                    self.gone = true;
                    tracing::warn!(
                        id = %live.id,
                        stall_ms = self.stall.as_millis() as u64,
                        "streaming client stopped reading; cancelling the execution"
                    );
                    live.cancel();
                }
            }
        }
    }
}

/// Length of an incomplete UTF-8 sequence at the end of `b` (0 to 3).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let need = match c {
            0xF0..=0xF7 => 4,
            0xE0..=0xEF => 3,
            0xC0..=0xDF => 2,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// What the runner writes to during a daemon execution.
#[allow(missing_debug_implementations)]
pub struct DaemonSink {
    metrics: Arc<Metrics>,
    live: Arc<Live>,
    /// Bytes of an incomplete UTF-8 character, per stream.
    carry: [Vec<u8>; 2],
    /// Output bytes logged.
    written: u64,
    push_back: Option<PushBack>,
}

impl DaemonSink {
    /// A sink that records metrics and the event log only.
    pub fn quiet(metrics: Arc<Metrics>, live: Arc<Live>) -> DaemonSink {
        DaemonSink {
            metrics,
            live,
            carry: [Vec::new(), Vec::new()],
            written: 0,
            push_back: None,
        }
    }

    /// A sink whose output waits for the POST's client (`progress`).
    pub fn streaming(
        metrics: Arc<Metrics>,
        live: Arc<Live>,
        progress: Arc<Progress>,
        rt: Handle,
        stall: Duration,
    ) -> DaemonSink {
        DaemonSink {
            push_back: Some(PushBack {
                progress,
                rt,
                stall,
                gone: false,
            }),
            ..DaemonSink::quiet(metrics, live)
        }
    }

    /// Logs held-back bytes (an incomplete character at the end).
    pub fn flush(&mut self) {
        for i in 0..2 {
            let held = std::mem::take(&mut self.carry[i]);
            self.live.log.output(i, &held);
        }
    }

    /// Logs held-back bytes and the `exit` event.
    pub fn finish(mut self, result: Encoded) {
        self.flush();
        self.live.log.exit(result);
    }
}

impl Sink for DaemonSink {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) {
        let i = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        let carry = &mut self.carry[i];
        carry.extend_from_slice(bytes);
        let keep = incomplete_tail(carry);
        let ready = carry.len() - keep;
        if ready == 0 {
            return;
        }
        self.live.log.output(i, &carry[..ready]);
        carry.drain(..ready);
        self.written += ready as u64;
        let live = self.live.clone();
        if let Some(p) = self.push_back.as_mut() {
            p.wait(self.written, &live);
        }
    }

    fn launching(&mut self, staged_bytes: u64, staging: Duration) {
        self.metrics.staged(staged_bytes, staging);
        // Durable before the command can start (docs/durability.md).
        self.live.mark_running();
        self.live.log.started();
    }
}

/// Cancels an execution when dropped while armed: the handler or response
/// body holding it was dropped because the client went away.
#[derive(Debug)]
pub struct CancelOnDrop {
    live: Option<Arc<Live>>,
}

impl CancelOnDrop {
    pub fn new(live: Arc<Live>) -> CancelOnDrop {
        CancelOnDrop { live: Some(live) }
    }

    /// The response is complete: nothing to cancel any more.
    pub fn disarm(&mut self) {
        self.live = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            tracing::info!(id = %live.id, "client went away; cancelling the execution");
            live.cancel();
        }
    }
}

/// A `heartbeat` timer: fires after each quiet `every`.
#[derive(Debug)]
struct Heartbeat {
    every: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Heartbeat {
    fn new(every: Duration) -> Heartbeat {
        Heartbeat {
            every,
            sleep: Box::pin(tokio::time::sleep(every)),
        }
    }

    fn reset(&mut self) {
        let at = tokio::time::Instant::now() + self.every;
        self.sleep.as_mut().reset(at);
    }

    /// Ready when the interval passed; re-arms itself.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.reset();
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// An NDJSON body reading an execution's log: the events after `after`, a
/// page at a time, live ones as they come, heartbeats when quiet, `exit`
/// last. The POST's own stream also cancels the execution when dropped
/// early and reports its progress to the sink (back-pressure); a
/// re-attached reader does neither: a slow one only falls behind.
#[allow(missing_debug_implementations)]
pub struct LogBody {
    log: Arc<EventLog>,
    next: u64,
    guard: Option<CancelOnDrop>,
    progress: Option<Arc<Progress>>,
    /// The own stream's hold on its record until its `exit` is sent.
    pin: Option<LogPin>,
    wait: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    heartbeat: Heartbeat,
    /// What is left of the last page to send (an `exit`'s document).
    pending: VecDeque<Bytes>,
    done: bool,
}

/// A re-attached reader of `log` from the event after `after`.
pub fn attach(log: Arc<EventLog>, after: u64, heartbeat: Duration) -> LogBody {
    LogBody {
        log,
        next: after,
        guard: None,
        progress: None,
        pin: None,
        wait: None,
        heartbeat: Heartbeat::new(heartbeat),
        pending: VecDeque::new(),
        done: false,
    }
}

/// The POST's own stream of `log`, from its first event.
/// `pin`, taken before the execution could finish, keeps its record
/// whole until the stream has sent the `exit` (or is dropped).
pub fn own_stream(
    log: Arc<EventLog>,
    guard: CancelOnDrop,
    progress: Arc<Progress>,
    pin: LogPin,
    heartbeat: Duration,
) -> LogBody {
    LogBody {
        guard: Some(guard),
        progress: Some(progress),
        pin: Some(pin),
        ..attach(log, 0, heartbeat)
    }
}

impl LogBody {
    fn end(&mut self) {
        self.done = true;
        self.pin = None;
        if let Some(g) = self.guard.as_mut() {
            g.disarm();
        }
    }
}

impl http_body::Body for LogBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(frame) = next_frame(&mut this.pending) {
                return Poll::Ready(Some(Ok(Frame::data(frame))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            let page = this.log.read(this.next);
            if let Some(doc) = page.doc {
                this.pending.extend([doc, Bytes::from_static(EXIT_END)]);
            }
            if !page.lines.is_empty() {
                this.next = page.last;
                if let Some(p) = &this.progress {
                    p.taken.fetch_add(page.output, Ordering::SeqCst);
                    p.moved.notify_waiters();
                }
                if page.exit {
                    this.end();
                }
                this.wait = None;
                this.heartbeat.reset();
                return Poll::Ready(Some(Ok(Frame::data(page.lines))));
            }
            if page.ended {
                // Closed without an exit: the execution left no result.
                this.end();
                return Poll::Ready(None);
            }
            let wait = this.wait.get_or_insert_with(|| {
                let log = this.log.clone();
                let after = this.next;
                Box::pin(async move { log.changed_after(after).await })
            });
            match wait.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.wait = None;
                    continue;
                }
                Poll::Pending => {}
            }
            return match this.heartbeat.poll_due(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Ok(Frame::data(heartbeat_line(this.next))))),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_are_held_back() {
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(&euro[..1]), 1);
        assert_eq!(incomplete_tail(&euro[..2]), 2);
        assert_eq!(incomplete_tail(euro), 0);
        let mut v = b"x".to_vec();
        v.extend_from_slice(&"😀".as_bytes()[..3]);
        assert_eq!(incomplete_tail(&v), 3);
        // Invalid bytes are not held (they become U+FFFD).
        assert_eq!(incomplete_tail(&[0xff]), 0);
        assert_eq!(incomplete_tail(&[0x80]), 0);
    }
}
