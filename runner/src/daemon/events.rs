//! An execution's event log: the events of docs/daemon.md ("Event
//! stream"), numbered by `seq`, stored compactly and read a page at a time
//! by every stream of the execution ([`super::stream`]); and the result
//! document, encoded once and shared ([`Encoded`]).
//!
//! See [`super::stream`] for the invariants the log keeps (sealed events,
//! bounded index, pages, the shared `exit` document).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body::Frame;
use serde::Serialize;
use tokio::sync::Notify;

use crate::exec::result::ExecResult;

/// A result and its JSON document, serialised once when the execution
/// finishes: every reader (`GET`, the `exit` event) is sent slices of the
/// same shared buffer, never a copy of its own.
///
/// The buffer can be found again while anyone still sends a slice of it
/// ([`Encoded::weak`], [`Encoded::revive`]): with the store on, the
/// registry keeps no document, and a reader that comes while another is
/// sending it shares that one instead of reading a second copy.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub result: Arc<ExecResult>,
    /// The result document as `GET /v1/executions/{id}` answers it.
    pub json: Bytes,
    /// The buffer `json` slices (every slice of it holds it too).
    buf: Arc<Box<[u8]>>,
    /// Output bytes of the result (both streams).
    output: u64,
}

/// The owner of a shared document buffer inside a [`Bytes`].
struct Doc(Arc<Box<[u8]>>);

impl AsRef<[u8]> for Doc {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Encoded {
    pub fn new(result: Arc<ExecResult>) -> Encoded {
        // Plain data always serialises; the boxed slice has no spare
        // capacity, so `json.len()` is what it holds.
        let json = serde_json::to_vec(&*result).unwrap_or_default();
        let output = (result.stdout.len() + result.stderr.len()) as u64;
        Encoded::shared(result, Arc::new(json.into_boxed_slice()), output)
    }

    /// A document read back from the store: `json` is sent as it was
    /// stored, `result` stands in for what the daemon reads of it (its
    /// status, exit code and error), and `output` is what it held.
    pub fn restored(result: Arc<ExecResult>, json: Vec<u8>, output: u64) -> Encoded {
        Encoded::shared(result, Arc::new(json.into_boxed_slice()), output)
    }

    fn shared(result: Arc<ExecResult>, buf: Arc<Box<[u8]>>, output: u64) -> Encoded {
        Encoded {
            json: Bytes::from_owner(Doc(buf.clone())),
            result,
            buf,
            output,
        }
    }

    /// The same document (the same buffer) with another stand-in result.
    pub fn with_result(&self, result: Arc<ExecResult>) -> Encoded {
        Encoded {
            result,
            ..self.clone()
        }
    }

    /// A handle on the document's buffer that does not keep it.
    pub fn weak(&self) -> std::sync::Weak<Box<[u8]>> {
        Arc::downgrade(&self.buf)
    }

    /// The document of `weak` while anyone still holds it, with `result`
    /// standing in for it.
    pub fn revive(
        weak: &std::sync::Weak<Box<[u8]>>,
        result: Arc<ExecResult>,
        output: u64,
    ) -> Option<Encoded> {
        Some(Encoded::shared(result, weak.upgrade()?, output))
    }

    /// Output bytes of the result (both streams).
    pub(super) fn output(&self) -> u64 {
        self.output
    }

    /// Bytes held for it: the result's output and its document.
    pub(super) fn bytes(&self) -> u64 {
        self.output() + self.json.len() as u64
    }
}

/// Reads [`EventLog::freeze`]'s bytes front to back.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn word(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// What [`EventLog::freeze`]'s bytes start with (a format version).
const FROZEN: &[u8] = b"skill-runner events 1\n";
/// The same with a third buffer, the `pull` events' fields, and kind 4
/// for them: written only by a log that has such events.
const FROZEN_NOTES: &[u8] = b"skill-runner events 2\n";

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
    /// A pull of a package or environment the job needs (daemon::pulls):
    /// its fields are `notes[start..start+len]`, a JSON object.
    Pull,
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
pub(super) fn exit_head(seq: u64) -> String {
    format!("{{\"event\":\"exit\",\"seq\":{seq},\"result\":")
}

pub(super) const EXIT_END: &[u8] = b"}\n";

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
pub(super) fn next_frame(parts: &mut VecDeque<Bytes>) -> Option<Bytes> {
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

/// A body of a few shared buffers, sent `FRAME_BYTES` at a time.
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
    /// The fields of the `pull` events, each a JSON object.
    notes: Vec<u8>,
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
                Kind::Pull => {
                    let bytes =
                        &self.notes[e.start as usize..(e.start + u64::from(e.len)) as usize];
                    let at = snap.raw.len();
                    snap.raw.extend_from_slice(bytes);
                    piece.2 = at..snap.raw.len();
                }
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
                Kind::Pull => {
                    // `{"event":"pull","seq":N,` and the fields' object
                    // without its opening brace.
                    let fields = &self.raw[range.clone()];
                    out.extend_from_slice(
                        format!("{{\"event\":\"pull\",\"seq\":{seq},").as_bytes(),
                    );
                    out.extend_from_slice(fields.get(1..).unwrap_or(b"}"));
                    out.push(b'\n');
                }
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
    /// before `EXIT_END` (shared by every reader).
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
    /// Own streams (the POST that ran it) that have not yet sent its
    /// `exit`: while any is attached, retention keeps the whole record.
    pins: AtomicUsize,
}

/// Keeps an [`EventLog`]'s record whole (see [`EventLog::pin`]) until
/// dropped.
#[derive(Debug)]
pub struct LogPin(Arc<EventLog>);

impl Drop for LogPin {
    fn drop(&mut self) {
        self.0.pins.fetch_sub(1, Ordering::SeqCst);
    }
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
            pins: AtomicUsize::new(0),
        }
    }

    /// Pins the execution's record for its own stream: retention neither
    /// sheds nor drops it (so the stream always ends with its `exit`, and
    /// a `GET` by that client finds the result) until the pin is dropped.
    pub fn pin(self: &Arc<Self>) -> LogPin {
        self.pins.fetch_add(1, Ordering::SeqCst);
        LogPin(self.clone())
    }

    /// Whether an own stream still holds a [`LogPin`].
    pub fn is_pinned(&self) -> bool {
        self.pins.load(Ordering::SeqCst) > 0
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends output of stream `i` (0 stdout, 1 stderr); nothing once
    /// closed.
    pub(super) fn output(&self, i: usize, bytes: &[u8]) {
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

    pub(super) fn started(&self) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.push_event(Kind::Started);
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Appends a `pull` event with `fields` (a JSON object of at least one
    /// field, docs/daemon.md "Event stream"); nothing once closed.
    pub(super) fn pull(&self, fields: &serde_json::Value) {
        let Ok(bytes) = serde_json::to_vec(fields) else {
            return;
        };
        if bytes.len() < 3 || bytes[0] != b'{' {
            return;
        }
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        let start = inner.notes.len() as u64;
        inner.notes.extend_from_slice(&bytes);
        inner.release();
        inner.index.push(Entry {
            start,
            len: bytes.len() as u32,
            kind: Kind::Pull,
        });
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

    /// The log's output and index, for the store: held output is indexed
    /// first, so the bytes are every event before the `exit` (which is
    /// left out: it is the result, stored on its own).
    /// [`EventLog::restore`] reads them back.
    pub fn freeze(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.freeze_to(&mut out);
        out
    }

    /// [`EventLog::freeze`] into `w`, without a copy of the output.
    pub fn freeze_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut inner = self.lock();
        inner.release();
        let notes = !inner.notes.is_empty();
        w.write_all(if notes { FROZEN_NOTES } else { FROZEN })?;
        for d in &inner.data {
            w.write_all(&(d.len() as u64).to_le_bytes())?;
            w.write_all(d)?;
        }
        if notes {
            w.write_all(&(inner.notes.len() as u64).to_le_bytes())?;
            w.write_all(&inner.notes)?;
        }
        let events: Vec<&Entry> = inner
            .index
            .iter()
            .filter(|e| e.kind != Kind::Exit)
            .collect();
        w.write_all(&(events.len() as u64).to_le_bytes())?;
        let mut index = Vec::with_capacity(13 * events.len());
        for e in events {
            index.extend_from_slice(&e.start.to_le_bytes());
            index.extend_from_slice(&e.len.to_le_bytes());
            index.push(match e.kind {
                Kind::Started => 0,
                Kind::Stdout => 1,
                Kind::Stderr => 2,
                Kind::Exit => 3,
                Kind::Pull => 4,
            });
        }
        w.write_all(&index)
    }

    /// The closed log of a finished execution from [`EventLog::freeze`]'s
    /// bytes and its result (the `exit` event); `None` when the bytes are
    /// not such a log.
    pub fn restore(id: &str, frozen: &[u8], exit: Encoded) -> Option<EventLog> {
        let (rest, with_notes) = match frozen.strip_prefix(FROZEN) {
            Some(rest) => (rest, false),
            None => (frozen.strip_prefix(FROZEN_NOTES)?, true),
        };
        let mut r = Cursor(rest);
        let mut data = [Vec::new(), Vec::new()];
        for d in &mut data {
            let n = usize::try_from(r.word()?).ok()?;
            *d = r.take(n)?.to_vec();
        }
        let mut notes = Vec::new();
        if with_notes {
            let n = usize::try_from(r.word()?).ok()?;
            notes = r.take(n)?.to_vec();
        }
        let n = usize::try_from(r.word()?).ok()?;
        let mut index = Vec::with_capacity(n.min(frozen.len() / 13));
        for _ in 0..n {
            let e = r.take(13)?;
            let start = u64::from_le_bytes(e[..8].try_into().ok()?);
            let len = u32::from_le_bytes(e[8..12].try_into().ok()?);
            let kind = match e[12] {
                0 => Kind::Started,
                1 => Kind::Stdout,
                2 => Kind::Stderr,
                4 if with_notes => Kind::Pull,
                _ => return None,
            };
            if kind == Kind::Pull {
                if start + u64::from(len) > notes.len() as u64 {
                    return None;
                }
            } else if kind != Kind::Started {
                let i = usize::from(kind == Kind::Stderr);
                if start + u64::from(len) > data[i].len() as u64 {
                    return None;
                }
            }
            index.push(Entry { start, len, kind });
        }
        let held_from = [data[0].len() as u64, data[1].len() as u64];
        let log = EventLog::new(id);
        {
            let mut inner = log.lock();
            inner.data = data;
            inner.notes = notes;
            inner.index = index;
            inner.held_from = held_from;
        }
        log.exit(exit);
        Some(log)
    }

    /// The closed log of a finished execution whose events were shed
    /// ([`EventLog::shed`]) before it was stored: `last` events, of which
    /// only the `exit` is left, and only when `exit` is given.
    pub fn restore_shed(id: &str, last: u64, exit: Option<Encoded>) -> EventLog {
        let log = EventLog::new(id);
        let mut inner = log.lock();
        inner.closed = true;
        inner.exit = exit;
        inner.shed_events = usize::try_from(last.max(1)).unwrap_or(usize::MAX);
        drop(inner);
        log
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
        inner.output_bytes()
            + inner.notes.len() as u64
            + (inner.index.capacity() * std::mem::size_of::<Entry>()) as u64
            + 256
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
        inner.notes = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;

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
            crate::exec::result::ErrorInfo::new(crate::error::ErrorKind::Internal, "m"),
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
    fn pull_events_render_and_survive_freeze_and_restore() {
        let log = EventLog::new("x");
        log.pull(&serde_json::json!({"phase": "start", "source": "oci://h/r@sha256:00"}));
        log.started();
        log.output(0, b"hi");
        let lines = |log: &EventLog| {
            let page = log.read(0);
            String::from_utf8(page.lines.to_vec()).unwrap()
        };
        let before = lines(&log);
        let first: serde_json::Value =
            serde_json::from_str(before.lines().next().unwrap()).unwrap();
        assert_eq!(
            first,
            serde_json::json!({"event": "pull", "seq": 1, "phase": "start", "source": "oci://h/r@sha256:00"})
        );
        let frozen = log.freeze();
        assert!(frozen.starts_with(FROZEN_NOTES));
        let mut result = crate::exec::result::ExecResult::rejected(
            "x",
            "bubblewrap",
            crate::exec::result::ErrorInfo::new(crate::error::ErrorKind::Internal, "m"),
        );
        result.stdout = "hi".into();
        let back = EventLog::restore("x", &frozen, Encoded::new(Arc::new(result))).unwrap();
        assert!(lines(&back).starts_with(&before));
        // A log without pull events keeps the first format.
        let plain = EventLog::new("y");
        plain.started();
        assert!(plain.freeze().starts_with(FROZEN));
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
