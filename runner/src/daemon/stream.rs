//! The sink an execution writes to, and its NDJSON event stream.
//!
//! [`DaemonSink`] runs on the runner's threads: it records staging metrics
//! and, for a streaming client, turns output into events on a bounded
//! channel that [`NdjsonBody`] drains into the HTTP response:
//!
//! ```text
//! {"event":"started","execution_id":"…"}
//! {"event":"stdout","data":"…"}      (and "stderr"), in the order produced
//! {"event":"exit","result":{…}}      the result document, as GET returns it
//! ```
//!
//! Invariants:
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
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::Frame;
use serde::Serialize;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::metrics::Metrics;
use super::registry::Live;
use crate::result::ExecResult;
use crate::supervise::{Sink, Stream};

/// Events that may wait between the runner and a slow client.
pub const CHANNEL_EVENTS: usize = 16;

/// One message from the runner to the response body.
#[derive(Debug)]
pub enum Event {
    /// The sandbox is being launched (its line, serialized).
    Started(Bytes),
    /// A serialized `stdout` or `stderr` line.
    Output(Bytes),
    /// The execution ended.
    Exit(Arc<ExecResult>),
}

#[derive(Serialize)]
struct StartedLine<'a> {
    event: &'static str,
    execution_id: &'a str,
}

#[derive(Serialize)]
struct OutputLine<'a> {
    event: &'static str,
    data: &'a str,
}

#[derive(Serialize)]
struct ExitLine<'a> {
    event: &'static str,
    result: &'a ExecResult,
}

fn line<T: Serialize>(value: &T) -> Bytes {
    // Plain data always serializes.
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

impl Event {
    /// The NDJSON line of this event.
    pub fn to_line(&self) -> Bytes {
        match self {
            Event::Started(b) | Event::Output(b) => b.clone(),
            Event::Exit(result) => line(&ExitLine {
                event: "exit",
                result,
            }),
        }
    }
}

/// The streaming side of a sink.
struct Events {
    tx: mpsc::Sender<Event>,
    rt: Handle,
    stall: Duration,
    /// Bytes of an incomplete UTF-8 character, per stream.
    carry: [Vec<u8>; 2],
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
        let is_output = matches!(event, Event::Output(_));
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

    fn output(&mut self, stream: Stream, bytes: &[u8], live: &Live) {
        let (i, name) = match stream {
            Stream::Stdout => (0, "stdout"),
            Stream::Stderr => (1, "stderr"),
        };
        let carry = &mut self.carry[i];
        carry.extend_from_slice(bytes);
        let keep = incomplete_tail(carry);
        let text = String::from_utf8_lossy(&carry[..carry.len() - keep]).into_owned();
        carry.drain(..carry.len() - keep);
        if !text.is_empty() {
            let ev = Event::Output(line(&OutputLine {
                event: name,
                data: &text,
            }));
            self.send(ev, live);
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
    events: Option<Events>,
}

impl DaemonSink {
    /// A sink that records metrics only.
    pub fn quiet(metrics: Arc<Metrics>, live: Arc<Live>) -> DaemonSink {
        DaemonSink {
            metrics,
            live,
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
            events: Some(Events {
                tx,
                rt,
                stall,
                carry: [Vec::new(), Vec::new()],
                gone: false,
            }),
        }
    }

    /// Flushes held-back bytes and sends the `exit` event.
    pub fn finish(mut self, result: Arc<ExecResult>) {
        let live = self.live.clone();
        if let Some(ev) = self.events.as_mut() {
            for (i, name) in [(0, "stdout"), (1, "stderr")] {
                if !ev.carry[i].is_empty() {
                    let text = String::from_utf8_lossy(&ev.carry[i]).into_owned();
                    ev.carry[i].clear();
                    let out = Event::Output(line(&OutputLine {
                        event: name,
                        data: &text,
                    }));
                    ev.send(out, &live);
                }
            }
            ev.send(Event::Exit(result), &live);
        }
    }
}

impl Sink for DaemonSink {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) {
        let live = self.live.clone();
        if let Some(ev) = self.events.as_mut() {
            ev.output(stream, bytes, &live);
        }
    }

    fn launching(&mut self, staged_bytes: u64, staging: Duration) {
        self.metrics.staged(staged_bytes, staging);
        let live = self.live.clone();
        if let Some(ev) = self.events.as_mut() {
            let started = Event::Started(line(&StartedLine {
                event: "started",
                execution_id: &live.id,
            }));
            ev.send(started, &live);
        }
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

/// The streaming response body: the first event, then the channel.
#[derive(Debug)]
pub struct NdjsonBody {
    first: Option<Bytes>,
    rx: mpsc::Receiver<Event>,
    guard: CancelOnDrop,
}

impl NdjsonBody {
    pub fn new(first: Bytes, rx: mpsc::Receiver<Event>, guard: CancelOnDrop) -> NdjsonBody {
        NdjsonBody {
            first: Some(first),
            rx,
            guard,
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
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                if matches!(event, Event::Exit(_)) {
                    this.guard.disarm();
                }
                Poll::Ready(Some(Ok(Frame::data(event.to_line()))))
            }
            Poll::Ready(None) => {
                this.guard.disarm();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
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
