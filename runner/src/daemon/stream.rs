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
//!   reader (and `GET`) sends [`FRAME_BYTES`] slices of the one shared
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

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body::Frame;
use serde::Serialize;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::metrics::Metrics;
use super::registry::{Encoded, Live};
use crate::supervise::{Sink, Stream};

/// Events logged freely before the average size is enforced.
pub const FREE_EVENTS: usize = 1024;
/// Output bytes an event must average past [`FREE_EVENTS`].
pub const MIN_AVERAGE: u64 = 256;
/// Held output that is logged at once, whatever the density.
pub const HOLD_BYTES: u64 = 64 * 1024;
/// How long held output may wait for a reader.
pub const HOLD_FOR: Duration = Duration::from_millis(50);
/// Output bytes one read copies out of the log at most (plus one event).
pub const PAGE_BYTES: u64 = 16 * 1024;
/// How far the command's output may run ahead of the POST's client.
pub const BACKLOG_BYTES: u64 = 256 * 1024;
/// Largest single event, in output bytes (a character is never split).
const MAX_EVENT: u64 = 16 * 1024;

/// What an event of the log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Started,
    Stdout,
    Stderr,
    Exit,
}

/// One event in the index: its output is `data[stream][start..start+len]`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u64,
    len: u32,
    kind: Kind,
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
struct HeartbeatLine {
    event: &'static str,
    seq: u64,
}

fn push_line<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    // Plain data always serializes.
    let _ = serde_json::to_writer(&mut *out, value);
    out.push(b'\n');
}

fn line<T: Serialize>(value: &T) -> Bytes {
    let mut v = Vec::new();
    push_line(&mut v, value);
    Bytes::from(v)
}

/// The line of a heartbeat after the event `seq`.
pub fn heartbeat_line(seq: u64) -> Bytes {
    line(&HeartbeatLine {
        event: "heartbeat",
        seq,
    })
}

/// What an `exit` line starts with; the result document and [`EXIT_END`]
/// follow (the same bytes `serde_json` makes of the whole line).
fn exit_head(seq: u64) -> String {
    format!("{{\"event\":\"exit\",\"seq\":{seq},\"result\":")
}

const EXIT_END: &[u8] = b"}\n";

/// The line of an `exit` event, as parts that share the result document.
pub fn exit_line(seq: u64, json: &Bytes) -> Chunks {
    Chunks::new([
        Bytes::from(exit_head(seq)),
        json.clone(),
        Bytes::from_static(EXIT_END),
    ])
}

/// Largest frame sent of a shared document: a reader holds slices of the
/// one buffer, never a copy of it.
const FRAME_BYTES: usize = 64 * 1024;

/// Takes the next frame off the front of `parts`: at most [`FRAME_BYTES`]
/// of the first part, sliced (not copied).
fn next_frame(parts: &mut VecDeque<Bytes>) -> Option<Bytes> {
    loop {
        let front = parts.front_mut()?;
        if front.is_empty() {
            parts.pop_front();
            continue;
        }
        if front.len() > FRAME_BYTES {
            return Some(front.split_to(FRAME_BYTES));
        }
        return parts.pop_front();
    }
}

/// A body of a few shared buffers, sent [`FRAME_BYTES`] at a time.
#[derive(Debug)]
pub struct Chunks {
    parts: VecDeque<Bytes>,
}

impl Chunks {
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Chunks {
        Chunks {
            parts: parts.into_iter().collect(),
        }
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(next_frame(&mut self.get_mut().parts).map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.iter().all(Bytes::is_empty)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.parts.iter().map(|b| b.len() as u64).sum())
    }
}

#[derive(Debug, Default)]
struct LogInner {
    id: String,
    /// The output of each stream, as captured.
    data: [Vec<u8>; 2],
    index: Vec<Entry>,
    /// Events up to this `seq` were given to a reader: they never change.
    sealed: u64,
    /// Per stream, where output not yet in the index starts (held back).
    held_from: [u64; 2],
    /// Which stream's held output came first, and when.
    held_first: Option<(usize, Instant)>,
    exit: Option<Encoded>,
    closed: bool,
    /// Events dropped by [`EventLog::shed`] (0 while the log is whole).
    shed_events: usize,
}

impl LogInner {
    fn output_bytes(&self) -> u64 {
        (self.data[0].len() + self.data[1].len()) as u64
    }

    fn held_bytes(&self) -> u64 {
        (0..2)
            .map(|i| self.data[i].len() as u64 - self.held_from[i])
            .sum()
    }

    /// Whether the index has as many events as its output allows freely.
    fn dense(&self) -> bool {
        self.index.len() >= FREE_EVENTS + (self.output_bytes() / MIN_AVERAGE) as usize
    }

    /// Indexes output `data[i][from..to]`: merged into the last event when
    /// that is an unsealed one of the same stream, else a new event.
    fn index_output(&mut self, i: usize, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let kind = if i == 0 { Kind::Stdout } else { Kind::Stderr };
        let sealed = self.sealed;
        let n = self.index.len() as u64;
        if let Some(last) = self.index.last_mut() {
            if last.kind == kind
                && n > sealed
                && last.start + u64::from(last.len) == from
                && u64::from(last.len) + (to - from) <= MAX_EVENT
            {
                last.len += (to - from) as u32;
                return;
            }
        }
        let mut start = from;
        while start < to {
            let len = cut(&self.data[i], start, to);
            self.index.push(Entry {
                start,
                len: len as u32,
                kind,
            });
            start += len;
        }
    }

    /// Moves held output into the index: the stream that was held first,
    /// then the other.
    fn release(&mut self) {
        let Some((first, _)) = self.held_first.take() else {
            return;
        };
        for i in [first, 1 - first] {
            let (from, to) = (self.held_from[i], self.data[i].len() as u64);
            self.index_output(i, from, to);
            self.held_from[i] = to;
        }
    }

    /// Releases held output that a reader has waited for long enough.
    fn release_ripe(&mut self) {
        if self
            .held_first
            .is_some_and(|(_, since)| since.elapsed() >= HOLD_FOR)
        {
            self.release();
        }
    }

    /// Appends one event of another kind (held output goes first).
    fn push_event(&mut self, kind: Kind) -> u64 {
        self.release();
        self.index.push(Entry {
            start: 0,
            len: 0,
            kind,
        });
        self.index.len() as u64
    }

    /// Copies events `after+1 ..= upto` out of the log (their output is
    /// bounded by the caller), so that they can be rendered without the lock.
    fn snapshot(&self, after: u64, upto: u64) -> Snapshot {
        let mut snap = Snapshot {
            events: Vec::with_capacity((upto - after) as usize),
            raw: Vec::new(),
            id: String::new(),
            exit: None,
        };
        for seq in after + 1..=upto {
            let e = self.index[(seq - 1) as usize];
            let mut piece = (seq, e.kind, 0..0);
            match e.kind {
                Kind::Started => snap.id.clone_from(&self.id),
                Kind::Stdout | Kind::Stderr => {
                    let i = usize::from(e.kind == Kind::Stderr);
                    let bytes =
                        &self.data[i][e.start as usize..(e.start + u64::from(e.len)) as usize];
                    let at = snap.raw.len();
                    snap.raw.extend_from_slice(bytes);
                    piece.2 = at..snap.raw.len();
                }
                Kind::Exit => snap.exit = self.exit.as_ref().map(|e| e.json.clone()),
            }
            snap.events.push(piece);
        }
        snap
    }
}

/// Where an event that starts at `start` ends: at most [`MAX_EVENT`] bytes
/// on, stepping back at most 3 bytes so that a character (at most 4
/// bytes) is not split; bytes that are no valid UTF-8 are cut anywhere
/// (they become U+FFFD either way). Constant work per event.
fn cut(bytes: &[u8], start: u64, to: u64) -> u64 {
    let len = (to - start).min(MAX_EVENT);
    if start + len == to {
        return len;
    }
    for back in 0..=3 {
        if bytes[(start + len - back) as usize] & 0xC0 != 0x80 {
            return len - back;
        }
    }
    len
}

/// Events copied out of the log under its lock, rendered after it is
/// released: a reader never holds the lock for work that grows with
/// anything but one page.
struct Snapshot {
    /// `(seq, kind, range of raw)` of each event.
    events: Vec<(u64, Kind, std::ops::Range<usize>)>,
    raw: Vec<u8>,
    id: String,
    /// The result document of the `exit` event (shared, not copied).
    exit: Option<Bytes>,
}

impl Snapshot {
    /// The NDJSON lines of the events; with an `exit`, the lines end with
    /// its head, to be followed by the document and [`EXIT_END`].
    fn render(&self) -> (Vec<u8>, Option<Bytes>) {
        let mut out = Vec::with_capacity(self.raw.len() + 64 * self.events.len());
        for (seq, kind, range) in &self.events {
            let seq = *seq;
            match kind {
                Kind::Started => push_line(
                    &mut out,
                    &StartedLine {
                        event: "started",
                        seq,
                        execution_id: &self.id,
                    },
                ),
                Kind::Stdout | Kind::Stderr => push_line(
                    &mut out,
                    &OutputLine {
                        event: if *kind == Kind::Stdout {
                            "stdout"
                        } else {
                            "stderr"
                        },
                        seq,
                        data: &String::from_utf8_lossy(&self.raw[range.clone()]),
                    },
                ),
                Kind::Exit => {
                    if let Some(json) = &self.exit {
                        out.extend_from_slice(exit_head(seq).as_bytes());
                        return (out, Some(json.clone()));
                    }
                }
            }
        }
        (out, None)
    }
}

/// One read of the log.
#[derive(Debug)]
pub struct Page {
    /// NDJSON lines of the events read (empty when there was none).
    pub lines: Bytes,
    /// With an `exit`: its result document, to send after `lines` and
    /// before [`EXIT_END`] (shared by every reader).
    pub doc: Option<Bytes>,
    /// The `seq` of the last event read (`after` when none).
    pub last: u64,
    /// Output bytes of the events read.
    pub output: u64,
    /// The `exit` event was read.
    pub exit: bool,
    /// The log is closed and was read to its end.
    pub ended: bool,
}

/// The events of one execution, numbered from 1, for its readers; closed
/// once the `exit` event is in (or the execution was dropped without a
/// result).
#[derive(Debug, Default)]
pub struct EventLog {
    inner: Mutex<LogInner>,
    changed: Notify,
}

impl EventLog {
    /// The log of the execution `id`.
    pub fn new(id: &str) -> EventLog {
        EventLog {
            inner: Mutex::new(LogInner {
                id: id.to_owned(),
                ..LogInner::default()
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends output of stream `i` (0 stdout, 1 stderr); nothing once
    /// closed.
    fn output(&self, i: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        let from = inner.data[i].len() as u64;
        inner.data[i].extend_from_slice(bytes);
        let to = inner.data[i].len() as u64;
        if inner.held_first.is_none() && !inner.dense() {
            inner.index_output(i, from, to);
            inner.held_from[i] = to;
        } else {
            // Too many small events already: hold this output back.
            if inner.held_first.is_none() {
                inner.held_first = Some((i, Instant::now()));
            }
            if inner.held_bytes() >= HOLD_BYTES {
                inner.release();
            }
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    fn started(&self) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.push_event(Kind::Started);
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Appends the `exit` event (which closes the log); its `seq`.
    pub fn exit(&self, result: Encoded) -> Option<u64> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        let seq = inner.push_event(Kind::Exit);
        inner.exit = Some(result);
        inner.closed = true;
        drop(inner);
        self.changed.notify_waiters();
        Some(seq)
    }

    /// Closes the log without an `exit` (the execution left no result).
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.release();
        inner.closed = true;
        drop(inner);
        self.changed.notify_waiters();
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Bytes held: the output, the index and a little for the rest.
    pub fn bytes(&self) -> u64 {
        let inner = self.lock();
        inner.output_bytes() + (inner.index.capacity() * std::mem::size_of::<Entry>()) as u64 + 256
    }

    /// Drops the output and index of a closed log, and its `exit` unless
    /// `keep_exit`: readers then get the `exit` event only (retention under
    /// pressure).
    pub fn shed(&self, keep_exit: bool) {
        let mut inner = self.lock();
        if !inner.closed {
            return;
        }
        if !keep_exit {
            inner.exit = None;
        }
        let n = inner.index.len().max(1);
        inner.data = [Vec::new(), Vec::new()];
        inner.held_from = [0, 0];
        inner.held_first = None;
        // Every event but the last becomes an empty placeholder that is
        // never sent; `seq` numbers stay as they were.
        inner.index = Vec::new();
        inner.index.shrink_to_fit();
        inner.shed_events = n;
    }

    /// The last `seq` logged (0 before the first; held output has none).
    pub fn last_seq(&self) -> u64 {
        let inner = self.lock();
        (inner.shed_events.max(inner.index.len())) as u64
    }

    /// Reads the events after `after`, at most [`PAGE_BYTES`] of output
    /// (always at least one event when there is one), and seals them.
    pub fn read(&self, after: u64) -> Page {
        let mut inner = self.lock();
        inner.release_ripe();
        if inner.shed_events > 0 {
            // Only the exit is left.
            let last = inner.shed_events as u64;
            let exit = inner.exit.clone().filter(|_| after < last);
            drop(inner);
            let (out, doc) = Snapshot {
                events: vec![(last, Kind::Exit, 0..0)],
                raw: Vec::new(),
                id: String::new(),
                exit: exit.map(|e| e.json),
            }
            .render();
            return Page {
                exit: !out.is_empty(),
                lines: Bytes::from(out),
                doc,
                last,
                output: 0,
                ended: true,
            };
        }
        let n = inner.index.len() as u64;
        let mut upto = after;
        let mut output = 0u64;
        while upto < n {
            let e = inner.index[upto as usize];
            if upto > after && output + u64::from(e.len) > PAGE_BYTES {
                break;
            }
            output += u64::from(e.len);
            upto += 1;
        }
        let snap = inner.snapshot(after, upto);
        if upto > inner.sealed {
            inner.sealed = upto;
        }
        let exit = upto > after && inner.index[(upto - 1) as usize].kind == Kind::Exit;
        let ended = inner.closed && upto >= n;
        drop(inner);
        let (lines, doc) = snap.render();
        Page {
            lines: Bytes::from(lines),
            doc,
            last: upto,
            output,
            exit,
            ended,
        }
    }

    /// The result of the `exit` event, once logged.
    pub fn exit_result(&self) -> Option<Encoded> {
        self.lock().exit.clone()
    }

    /// Resolves once the log has more than `after` events or is closed.
    pub async fn changed_after(&self, after: u64) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let held = {
                let mut inner = self.lock();
                inner.release_ripe();
                if inner.closed || inner.index.len() as u64 > after {
                    return;
                }
                inner.held_first.map(|(_, since)| since + HOLD_FOR)
            };
            match held {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at.into(), notified).await;
                }
                None => notified.await,
            }
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

    /// Logs held-back bytes and the `exit` event.
    pub fn finish(mut self, result: Encoded) {
        for i in 0..2 {
            let held = std::mem::take(&mut self.carry[i]);
            self.live.log.output(i, &held);
        }
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
        wait: None,
        heartbeat: Heartbeat::new(heartbeat),
        pending: VecDeque::new(),
        done: false,
    }
}

/// The POST's own stream of `log`, from its first event.
pub fn own_stream(
    log: Arc<EventLog>,
    guard: CancelOnDrop,
    progress: Arc<Progress>,
    heartbeat: Duration,
) -> LogBody {
    LogBody {
        guard: Some(guard),
        progress: Some(progress),
        ..attach(log, 0, heartbeat)
    }
}

impl LogBody {
    fn end(&mut self) {
        self.done = true;
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

    #[test]
    fn tiny_writes_do_not_grow_the_index() {
        let log = EventLog::new("x");
        log.started();
        // A reader seals after every byte, alternating streams: the worst
        // case for merging.
        let mut after = 0;
        for n in 0..200_000u32 {
            log.output((n % 2) as usize, b"\x01");
            let page = log.read(after);
            after = page.last;
        }
        let inner = log.lock();
        let bound = FREE_EVENTS + (inner.output_bytes() / MIN_AVERAGE) as usize + 2;
        assert!(inner.index.len() <= bound, "{} events", inner.index.len());
        drop(inner);
        // Nothing is lost: held output is logged at the end.
        log.close();
        let mut total = 0;
        let mut after = 0;
        loop {
            let page = log.read(after);
            if page.last == after {
                break;
            }
            total += page.output;
            after = page.last;
        }
        assert_eq!(total, 200_000);
    }

    #[test]
    fn the_exit_line_is_the_shared_document_in_frames() {
        let mut result = crate::exec::result::ExecResult::rejected(
            "x",
            "bubblewrap",
            crate::exec::result::ErrorInfo::new("k", "m"),
        );
        result.stdout = "\u{1}".repeat(100_000);
        let enc = Encoded::new(Arc::new(result));
        let log = EventLog::new("x");
        log.exit(enc.clone());
        let page = log.read(0);
        assert!(page.exit);
        let doc = page.doc.unwrap();
        // The same buffer, not a copy.
        assert_eq!(doc.as_ptr(), enc.json.as_ptr());
        let mut parts = VecDeque::from([page.lines, doc, Bytes::from_static(EXIT_END)]);
        let mut line = Vec::new();
        while let Some(frame) = next_frame(&mut parts) {
            assert!(frame.len() <= FRAME_BYTES);
            line.extend_from_slice(&frame);
        }
        let want = serde_json::json!({"event": "exit", "seq": 1, "result": &*enc.result});
        let mut want = serde_json::to_vec(&want).unwrap();
        want.push(b'\n');
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&line).unwrap(),
            serde_json::from_slice::<serde_json::Value>(&want).unwrap()
        );
        assert!(line.starts_with(b"{\"event\":\"exit\",\"seq\":1,\"result\":{"));
        assert!(line.ends_with(b"}}\n"));
    }

    #[test]
    fn invalid_bytes_are_cut_at_max_event() {
        // Only continuation bytes: no character boundary anywhere.
        let log = EventLog::new("x");
        log.output(0, &vec![0x80; 1 << 20]);
        let inner = log.lock();
        assert_eq!(inner.index.len(), (1 << 20) / MAX_EVENT as usize);
        assert!(inner.index.iter().all(|e| u64::from(e.len) == MAX_EVENT));
        drop(inner);
        // A character across the cut moves whole into the next event.
        let mut b = vec![b'a'; MAX_EVENT as usize - 2];
        b.extend_from_slice("😀z".as_bytes());
        assert_eq!(cut(&b, 0, b.len() as u64), MAX_EVENT - 2);
        assert_eq!(cut(&b, 0, 5), 5);
    }

    #[test]
    fn pages_are_bounded_and_events_sealed() {
        let log = EventLog::new("x");
        // Events are cut at MAX_EVENT, never inside a character.
        let text = "€".repeat(20_000);
        log.output(0, text.as_bytes());
        let mut after = 0;
        let mut back = String::new();
        while back.len() < text.len() {
            let page = log.read(after);
            assert!(page.output <= PAGE_BYTES + MAX_EVENT);
            for line in std::str::from_utf8(&page.lines).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                back.push_str(v["data"].as_str().unwrap());
            }
            after = page.last;
        }
        assert_eq!(back, text);
        // Sealed: more stdout makes a new event.
        log.output(1, b"e");
        log.output(0, b"b");
        let page = log.read(after);
        assert_eq!(page.last, after + 2);
        let want = format!("\"seq\":{}", after + 2);
        assert!(std::str::from_utf8(&page.lines).unwrap().contains(&want));
    }
}
