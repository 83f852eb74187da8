//! The sink an execution writes to, its event log, and its NDJSON event
//! streams.
//!
//! [`DaemonSink`] runs on the runner's threads: it records staging metrics,
//! appends every event to the execution's [`EventLog`] (numbered by `seq`)
//! and, for a streaming client, also sends it on a bounded channel that
//! [`NdjsonBody`] drains into the HTTP response:
//!
//! ```text
//! {"event":"started","seq":1,"execution_id":"…"}
//! {"event":"stdout","seq":2,"data":"…"}  (and "stderr"), in the order produced
//! {"event":"heartbeat","seq":2}          after each quiet interval (not logged)
//! {"event":"exit","seq":3,"result":{…}}  the result document, as GET returns it
//! ```
//!
//! A re-attached reader ([`attach`]) reads the log from any `seq` on.
//!
//! Invariants:
//! - `seq` numbers an execution's logged events 1, 2, 3, … in the order they
//!   were produced; every stream of it (the POST's, any re-attach) sends the
//!   same event with the same `seq`; a heartbeat repeats the last `seq`;
//! - the log holds at most the captured output (the supervisor hands the
//!   sink no byte past `output_bytes`) plus one `started` and one `exit`,
//!   whose result is shared with the registry, not copied;
//! - memory is bounded: at most [`CHANNEL_EVENTS`] events wait in the
//!   channel; a full channel blocks the runner's output thread, which stops
//!   reading the command's pipes (back-pressure), never buffers more;
//! - a client that reads nothing for `stall_timeout`, or has gone, gets its
//!   execution cancelled, and the sink drops further events, so a stalled
//!   client can never hold a sandbox past its limits;
//! - `data` is valid UTF-8: a multi-byte character split across two chunks
//!   is held back until it is complete; invalid bytes become U+FFFD, as in
//!   the result document;
//! - `exit` is the last event and is sent only after the result is
//!   retained, so a client that reads it can GET the same result;
//! - once an execution is cancelled, output chunks wait for no one: a chunk
//!   that finds the channel full is skipped (the result still holds it).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::Frame;
use serde::Serialize;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Notify};

use super::metrics::Metrics;
use super::registry::Live;
use crate::result::ExecResult;
use crate::supervise::{Sink, Stream};

/// Events that may wait between the runner and a slow client.
pub const CHANNEL_EVENTS: usize = 16;

/// One event of an execution.
#[derive(Debug, Clone)]
pub enum Event {
    /// The sandbox is being launched (its line, serialized).
    Started { seq: u64, line: Bytes },
    /// A serialized `stdout` or `stderr` line.
    Output { seq: u64, line: Bytes },
    /// The execution ended.
    Exit { seq: u64, result: Arc<ExecResult> },
}

#[derive(Serialize)]
struct StartedLine<'a> {
    event: &'static str,
    seq: u64,
    execution_id: &'a str,
}

#[derive(Serialize)]
struct OutputLine<'a> {
    event: &'static str,
    seq: u64,
    data: &'a str,
}

#[derive(Serialize)]
struct ExitLine<'a> {
    event: &'static str,
    seq: u64,
    result: &'a ExecResult,
}

#[derive(Serialize)]
struct HeartbeatLine {
    event: &'static str,
    seq: u64,
}

fn line<T: Serialize>(value: &T) -> Bytes {
    // Plain data always serializes.
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The line of a heartbeat after the event `seq`.
pub fn heartbeat_line(seq: u64) -> Bytes {
    line(&HeartbeatLine {
        event: "heartbeat",
        seq,
    })
}

impl Event {
    /// The NDJSON line of this event.
    pub fn to_line(&self) -> Bytes {
        match self {
            Event::Started { line: b, .. } | Event::Output { line: b, .. } => b.clone(),
            Event::Exit { seq, result } => line(&ExitLine {
                event: "exit",
                seq: *seq,
                result,
            }),
        }
    }

    pub fn seq(&self) -> u64 {
        match self {
            Event::Started { seq, .. } | Event::Output { seq, .. } | Event::Exit { seq, .. } => {
                *seq
            }
        }
    }

    /// Bytes this event holds in a log (an exit shares its result).
    fn weight(&self) -> u64 {
        match self {
            Event::Started { line, .. } | Event::Output { line, .. } => line.len() as u64,
            Event::Exit { .. } => 64,
        }
    }
}

#[derive(Debug, Default)]
struct LogInner {
    events: Vec<Event>,
    bytes: u64,
    closed: bool,
}

/// The events of one execution, numbered from 1, for re-attaching
/// readers; closed once the `exit` event is in (or the execution was
/// dropped without a result).
#[derive(Debug, Default)]
pub struct EventLog {
    inner: Mutex<LogInner>,
    changed: Notify,
}

impl EventLog {
    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the event `make(seq)` makes with the next `seq`; nothing
    /// once closed.
    pub fn push(&self, make: impl FnOnce(u64) -> Event) -> Option<Event> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        let event = make(inner.events.len() as u64 + 1);
        inner.bytes += event.weight();
        if matches!(event, Event::Exit { .. }) {
            inner.closed = true;
        }
        inner.events.push(event.clone());
        drop(inner);
        self.changed.notify_waiters();
        Some(event)
    }

    /// Appends the `exit` event (which closes the log).
    pub fn exit(&self, result: Arc<ExecResult>) -> Option<Event> {
        self.push(|seq| Event::Exit { seq, result })
    }

    /// Closes the log without an `exit` (the execution left no result).
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_waiters();
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Bytes held (counted in the retention budget).
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Events with a `seq` over `after`, and whether the log is closed.
    pub fn after(&self, after: u64) -> (Vec<Event>, bool) {
        let inner = self.lock();
        let from = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(inner.events.len());
        (inner.events[from..].to_vec(), inner.closed)
    }

    /// The last `seq` logged (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.lock().events.len() as u64
    }

    /// Resolves once the log has more than `after` events or is closed.
    pub async fn changed_after(&self, after: u64) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = self.lock();
                if inner.closed || inner.events.len() as u64 > after {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Resolves once the log is closed.
    pub async fn closed(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// The streaming side of a sink.
struct Events {
    tx: mpsc::Sender<Event>,
    rt: Handle,
    stall: Duration,
    gone: bool,
}

impl Events {
    /// Sends an event, waiting at most `stall` for room; an output event
    /// also stops waiting when the execution is cancelled (its output is
    /// still in the result). Called on the runner's threads, never on a
    /// runtime worker.
    fn send(&mut self, event: Event, live: &Live) {
        if self.gone {
            return;
        }
        let is_output = matches!(event, Event::Output { .. });
        let sent = self.rt.block_on(async {
            let send = tokio::time::timeout(self.stall, self.tx.send(event));
            if is_output {
                tokio::select! {
                    sent = send => Some(sent),
                    _ = live.cancelled() => None,
                }
            } else {
                Some(send.await)
            }
        });
        let Some(sent) = sent else {
            return; // cancelled while the client was behind: skip this chunk
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                // The response body was dropped: the client left (its
                // drop guard has cancelled the execution already).
                self.gone = true;
                live.cancel();
            }
            Err(_) => {
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
    events: Option<Events>,
}

impl DaemonSink {
    /// A sink that records metrics and the event log only.
    pub fn quiet(metrics: Arc<Metrics>, live: Arc<Live>) -> DaemonSink {
        DaemonSink {
            metrics,
            live,
            carry: [Vec::new(), Vec::new()],
            events: None,
        }
    }

    /// A sink that also streams events to `tx`.
    pub fn streaming(
        metrics: Arc<Metrics>,
        live: Arc<Live>,
        tx: mpsc::Sender<Event>,
        rt: Handle,
        stall: Duration,
    ) -> DaemonSink {
        DaemonSink {
            metrics,
            live,
            carry: [Vec::new(), Vec::new()],
            events: Some(Events {
                tx,
                rt,
                stall,
                gone: false,
            }),
        }
    }

    /// Logs an event and sends it to the streaming client, if any.
    fn emit(&mut self, make: impl FnOnce(u64) -> Event) {
        let Some(event) = self.live.log.push(make) else {
            return;
        };
        let live = self.live.clone();
        if let Some(ev) = self.events.as_mut() {
            ev.send(event, &live);
        }
    }

    fn output_text(&mut self, i: usize, text: &str) {
        let name = if i == 0 { "stdout" } else { "stderr" };
        self.emit(|seq| Event::Output {
            seq,
            line: line(&OutputLine {
                event: name,
                seq,
                data: text,
            }),
        });
    }

    /// Flushes held-back bytes and logs and sends the `exit` event.
    pub fn finish(mut self, result: Arc<ExecResult>) {
        for i in 0..2 {
            if !self.carry[i].is_empty() {
                let text = String::from_utf8_lossy(&self.carry[i]).into_owned();
                self.carry[i].clear();
                self.output_text(i, &text);
            }
        }
        self.emit(|seq| Event::Exit { seq, result });
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
        let text = String::from_utf8_lossy(&carry[..carry.len() - keep]).into_owned();
        carry.drain(..carry.len() - keep);
        if !text.is_empty() {
            self.output_text(i, &text);
        }
    }

    fn launching(&mut self, staged_bytes: u64, staging: Duration) {
        self.metrics.staged(staged_bytes, staging);
        let live = self.live.clone();
        self.emit(|seq| Event::Started {
            seq,
            line: line(&StartedLine {
                event: "started",
                seq,
                execution_id: &live.id,
            }),
        });
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

/// The streaming response body of a POST: the first event, then the
/// channel, with heartbeats when it is quiet.
#[derive(Debug)]
pub struct NdjsonBody {
    first: Option<Bytes>,
    rx: mpsc::Receiver<Event>,
    guard: CancelOnDrop,
    last_seq: u64,
    heartbeat: Heartbeat,
    done: bool,
}

impl NdjsonBody {
    pub fn new(
        first: Event,
        rx: mpsc::Receiver<Event>,
        guard: CancelOnDrop,
        heartbeat: Duration,
    ) -> NdjsonBody {
        NdjsonBody {
            last_seq: first.seq(),
            first: Some(first.to_line()),
            rx,
            guard,
            heartbeat: Heartbeat::new(heartbeat),
            done: false,
        }
    }
}

impl http_body::Body for NdjsonBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            this.heartbeat.reset();
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                if matches!(event, Event::Exit { .. }) {
                    this.guard.disarm();
                    this.done = true;
                }
                this.last_seq = event.seq();
                this.heartbeat.reset();
                Poll::Ready(Some(Ok(Frame::data(event.to_line()))))
            }
            Poll::Ready(None) => {
                this.guard.disarm();
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => match this.heartbeat.poll_due(cx) {
                Poll::Ready(()) => {
                    Poll::Ready(Some(Ok(Frame::data(heartbeat_line(this.last_seq)))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// The body of a re-attached reader: the log's events after `after`, live
/// ones as they come, heartbeats when quiet, `exit` last. It never cancels
/// the execution and is never waited for: a slow reader only falls behind
/// in the log.
#[allow(missing_debug_implementations)]
pub struct AttachBody {
    log: Arc<EventLog>,
    next: u64,
    ready: std::collections::VecDeque<Event>,
    wait: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    heartbeat: Heartbeat,
    done: bool,
}

/// A re-attached reader of `log` from the event after `after`.
pub fn attach(log: Arc<EventLog>, after: u64, heartbeat: Duration) -> AttachBody {
    AttachBody {
        log,
        next: after,
        ready: std::collections::VecDeque::new(),
        wait: None,
        heartbeat: Heartbeat::new(heartbeat),
        done: false,
    }
}

impl http_body::Body for AttachBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.ready.pop_front() {
                if matches!(event, Event::Exit { .. }) {
                    this.done = true;
                    this.ready.clear();
                }
                this.heartbeat.reset();
                return Poll::Ready(Some(Ok(Frame::data(event.to_line()))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            let (events, closed) = this.log.after(this.next);
            if let Some(last) = events.last() {
                this.next = last.seq();
                this.ready.extend(events);
                this.wait = None;
                continue;
            }
            if closed {
                // Closed without an exit: the execution left no result.
                this.done = true;
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
