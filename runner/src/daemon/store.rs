//! The daemon's durable state: every execution it has acknowledged (its
//! job digest, which is its idempotency record, its state, its result
//! document and its event log within retention), in one embedded
//! transactional store, `<data-dir>/state/executions.redb` (docs/durability.md).
//!
//! The store is `redb`: pure Rust, ACID transactions on copy-on-write
//! B-trees whose commits are checksummed, so a commit cut short by a
//! `kill -9` or a power cut is rolled back at the next open, never half
//! read. A finished execution's document and events are read back from
//! it when asked for ([`Store::read_result`], [`Store::read_events`]):
//! the registry keeps only a summary of each (its page cache is capped at
//! [`CACHE_BYTES`]).
//!
//! A result document and event log of more than [`INLINE`] bytes are
//! kept outside the database, as files of `state/blobs/` (written, then
//! `fsync`ed with their folder, before the commit that names them): redb
//! would hold a large value in memory two or three times while writing
//! it. The files of records that are gone (an eviction, a crash between
//! the write and the commit) are removed at the next start.
//!
//! Where a job's collected outputs go once the daemon keeps them: as more
//! files of `blobs/` named from the record's `order` (like
//! `blob(dir, order, "out-N")`), written by the same
//! [`Change::Finish`] before its commit, removed with the record, and
//! swept by `sweep_blobs` like the others, so they share the result's
//! durability and retention.
//!
//! One writer thread applies every change in order ([`Store::send`]):
//! what is queued while a commit is being made goes into the next one
//! (group commit), so a commit's `fsync` is shared by every execution
//! that waits on it. A change sent with an acknowledgement is durable
//! (the commit was `fsync`ed) before its acknowledgement resolves; one
//! sent without is committed with the next durable one, or lost with the
//! daemon, which is harmless for those changes (an eviction, a shed).
//!
//! Invariants:
//! - a record's state only moves forward: `queued`, `running`, `finished`;
//! - a `finished` record always has its result document (a [`RESULT`]
//!   row or file) unless it was shed to bound retention
//!   ([`Record::result_kept`]);
//! - an [`EVENTS`] row is that of a finished, unshed execution;
//! - a record, its result and its events are written and removed in one
//!   transaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;

use redb::{Database, Durability, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use serde_json::error::Category;
use tokio::sync::oneshot;

// One table holds everything, keyed by the execution's admission order
// ([`Record::order`], which no two stored executions share) and then by
// the part: an execution's record, result document and event log are
// neighbours, admissions and results go to the right edge of the one
// B-tree and retention's removals come off the left. A commit rewrites
// one path of pages and one table root, where a table per part rewrote
// three (docs/durability.md, "One table, keyed by admission order", has
// the page counts and the writer's CPU of each layout).

/// (admission order, part) to (the execution's id, the part's bytes);
/// the id is only in the [`RECORD`] row, the others hold `""`.
const ROWS: TableDefinition<(u64, u8), (&str, &[u8])> = TableDefinition::new("executions-by-order");
/// The part of a row of [`ROWS`]: the execution's [`Record`] (JSON) ...
const RECORD: u8 = 0;
/// ... its result document, the bytes `GET` answers ...
const RESULT: u8 = 1;
/// ... and its frozen event log (`EventLog::freeze`).
const EVENTS: u8 = 2;

/// The store's layout (`"version"`): [`LAYOUT_VERSION`], written when a
/// store is made or moved to it. A daemon refuses a store of a later
/// layout than it knows instead of writing beside tables it cannot read.
const LAYOUT: TableDefinition<&str, u64> = TableDefinition::new("layout");
/// The layout of [`ROWS`]. Stores older than the `layout` table hold one
/// of the two earlier layouts, or [`ROWS`] with no version (read as this
/// one).
const LAYOUT_VERSION: u64 = 3;

/// The tables of the store's second layout, one per part, keyed by
/// admission order: moved to [`ROWS`], once, when such a store is opened
/// ([`migrate`]).
const ORDER_RECORDS: TableDefinition<u64, (&str, &[u8])> = TableDefinition::new("records");
const ORDER_RESULTS: TableDefinition<u64, &[u8]> = TableDefinition::new("results-by-order");
const ORDER_EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events-by-order");

/// The tables of the store's first layout, keyed by execution id: moved
/// to [`ROWS`] in the same way.
const ID_RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("executions");
const ID_RESULTS: TableDefinition<&str, &[u8]> = TableDefinition::new("results");
const ID_EVENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("events");

/// The store's page cache: small, since a result is read back about once
/// (the kernel's page cache holds the file's recent pages anyway).
pub const CACHE_BYTES: usize = 256 << 10;
/// Larger results and event logs are files of `blobs/`.
pub const INLINE: u64 = 64 * 1024;
/// The longest `blobs/` file read back without a recorded length (a
/// result is bounded well below this by the daemon's output limits).
const MAX_BLOB: u64 = 1 << 30;
/// Changes one commit takes at most.
const BATCH: usize = 512;
/// How long a change nobody waits for waits for a durable commit to ride
/// with before it is committed on its own ([`write_loop`]), counted from
/// the oldest such change.
const LINGER: std::time::Duration = std::time::Duration::from_millis(50);

/// What went wrong with the store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the execution store {path}: {reason}; if the file is damaged, move it aside (mv {path} {path}.broken) and start the daemon again: it then starts with no retained executions (docs/durability.md)")]
    Open { path: PathBuf, reason: String },
    #[error("the execution store {path} has layout {found}, written by a later skill-runner than this one (which reads layouts up to {known}); run that version, or move the store aside (mv {path} {path}.newer) to start with no retained executions")]
    Newer {
        path: PathBuf,
        found: u64,
        known: u64,
    },
    #[error("another skill-runner daemon holds the execution store {0}; stop it, or give this one another --data-dir")]
    InUse(PathBuf),
    #[error("cannot read the execution store {path}: {reason}; move it aside (mv {path} {path}.broken) and start the daemon again (docs/durability.md)")]
    Read { path: PathBuf, reason: String },
    #[error("the data dir's disk is full: cannot move the execution store {0} to this version's layout, which needs about the store's size free; free space there and start the daemon again (the store is left as it was)")]
    FullToMove(PathBuf),
    #[error("the data dir's disk is full: cannot record the execution in {path}; free space there, then retry")]
    Full { path: PathBuf },
    #[error("cannot record the execution in {path}: {reason}; retry after a moment, and see the daemon's log")]
    Write { path: PathBuf, reason: String },
    #[error("the execution store {0} stopped; the daemon is ending")]
    Stopped(PathBuf),
}

/// Where an execution is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Admitted, waiting for a run slot: its command has not started.
    Queued,
    /// Its command was being launched or was running.
    Running,
    /// Its result is recorded.
    Finished,
}

/// One execution as the store keeps it (small: no output).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Digest of the job document: a retry with the same is the same job.
    pub digest: String,
    /// Admission order, for listing.
    pub order: u64,
    /// When it was admitted, in milliseconds since the epoch.
    pub submitted_ms: u64,
    pub state: State,
    /// The result's status as the document spells it (finished only).
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// When it finished, in milliseconds since the epoch (retention's age).
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Output bytes of the result (retention's weight).
    #[serde(default)]
    pub output: u64,
    /// Length of its result document (retention's weight).
    #[serde(default)]
    pub doc_len: u64,
    /// The `seq` of its last event (its `exit`).
    #[serde(default)]
    pub last_seq: u64,
    /// Its bulk (events, a large result) was dropped by retention.
    #[serde(default)]
    pub shed: bool,
    /// Whether its result document is still stored (always, unless shed).
    #[serde(default = "yes")]
    pub result_kept: bool,
    /// The error kind of its result, when it has one.
    #[serde(default)]
    pub error_kind: Option<String>,
    /// Nobody outside knew its id before its result (a blocking call
    /// whose id the daemon chose): its admission and its move to running
    /// were not waited for, so after a crash its record cannot say
    /// whether its command had started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unannounced: bool,
    /// Its result and events are files of `blobs/` (named by `order`),
    /// not values of the database.
    #[serde(default)]
    pub blobs: bool,
    /// The lengths of its `blobs/` files (result, events) as written:
    /// a file of another length is damaged and is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_lens: Option<(u64, u64)>,
    /// Its kept outputs: the folder's name under `<data-dir>/outputs/`
    /// and each output's path, SHA-256 and size, so that a restart serves
    /// them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<KeptRecord>,
}

/// Where an execution's kept outputs are ([`Record::outputs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptRecord {
    pub dir: String,
    pub files: Vec<(String, String, u64)>,
}

impl KeptRecord {
    pub fn of(store: &crate::exec::files::OutputStore) -> Option<KeptRecord> {
        let dir = store.dir().file_name()?.to_str()?.to_owned();
        let files = store
            .files()
            .map(|(p, sha, size)| (p.to_owned(), sha.to_owned(), size))
            .collect();
        Some(KeptRecord { dir, files })
    }
}

/// The error kind of a store failure that refuses an admission: a full
/// disk is `disk_full` (503), anything else `store_failed` (500); both
/// are answered with `Retry-After`.
pub fn kind(e: &StoreError) -> crate::error::ErrorKind {
    match e {
        StoreError::Full { .. } | StoreError::FullToMove(_) => crate::error::ErrorKind::DiskFull,
        _ => crate::error::ErrorKind::StoreFailed,
    }
}

fn yes() -> bool {
    true
}

/// One change to the store.
#[derive(Debug)]
pub enum Change {
    /// A record (admission, or its move to running).
    Put { id: String, record: Record },
    /// A finished execution: its record, result and events at once.
    Finish {
        id: String,
        record: Record,
        result: axum::body::Bytes,
        events: std::sync::Arc<super::events::EventLog>,
    },
    /// Retention dropped its bulk: its events, and its result unless kept.
    Shed { id: String, record: Record },
    /// Retention dropped the record (`order` is its [`Record::order`]).
    Remove { id: String, order: u64 },
    /// A record found unreadable at the start: every row of its order
    /// (its files go with the start's sweep of `blobs/`).
    Purge { order: u64 },
    /// Nothing: acknowledged once everything sent before it is durable.
    Sync,
}

struct Message {
    change: Change,
    ack: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// What the store held at start, by admission order: the records only;
/// a result document and its events are read when asked for
/// ([`Store::read_result`], [`Store::read_events`]).
#[derive(Debug)]
pub struct Stored {
    pub id: String,
    pub record: Record,
    /// Why its result could not be read back (a `blobs/` file missing or
    /// of another length than recorded): it answers `store_corrupted`.
    pub damaged: Option<String>,
}

/// The open store; its writer thread ends when it is dropped.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    /// Shared with the writer thread: a read sees every commit made.
    db: std::sync::Arc<Database>,
    blobs: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Message>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The highest admission order of any record found at the start, one
    /// this daemon could not read included.
    highest: u64,
}

/// Waits for one change to be durable.
#[derive(Debug)]
pub struct Ack {
    rx: Option<oneshot::Receiver<Result<(), StoreError>>>,
    path: PathBuf,
}

impl Ack {
    /// An acknowledgement that is already there (no store).
    pub fn done() -> Ack {
        Ack {
            rx: None,
            path: PathBuf::new(),
        }
    }

    /// Waits on a blocking thread (never inside the async runtime).
    pub fn wait(self) -> Result<(), StoreError> {
        match self.rx {
            None => Ok(()),
            Some(rx) => match rx.blocking_recv() {
                Ok(outcome) => outcome,
                Err(_) => Err(StoreError::Stopped(self.path)),
            },
        }
    }

    /// Waits inside the async runtime.
    pub async fn wait_async(self) -> Result<(), StoreError> {
        match self.rx {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(outcome) => outcome,
                Err(_) => Err(StoreError::Stopped(self.path)),
            },
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since the epoch of `t`.
pub fn epoch_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether an I/O error says the disk is full (or the quota used up).
fn full(e: &redb::StorageError) -> bool {
    matches!(e, redb::StorageError::Io(io) if matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}

impl Store {
    /// The store's file in the data dir's `state/` folder.
    pub fn file(state_dir: &Path) -> PathBuf {
        state_dir.join("executions.redb")
    }

    /// Opens (or creates) the store and reads back everything it holds.
    /// A commit cut short is rolled back here; a file that is not a store
    /// or is damaged beyond that is refused with the way out.
    pub fn open(path: &Path) -> Result<(Store, Vec<Stored>), StoreError> {
        let open_err = |reason: String| StoreError::Open {
            path: path.to_owned(),
            reason,
        };
        let mut builder = Database::builder();
        builder.set_cache_size(CACHE_BYTES);
        // `create` would write a new store over a file it cannot read:
        // an existing, non-empty file is only ever opened.
        let existing = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
        if existing {
            check_header(path).map_err(open_err)?;
        }
        // redb asserts on some damage (a file cut short) instead of
        // returning an error: that is a damaged store too, said as such.
        let opened = quietly(|| {
            if existing {
                builder.open(path)
            } else {
                builder.create(path)
            }
        })
        .map_err(|what| open_err(format!("it is damaged ({what})")))?;
        let mut db = match opened {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse(path.to_owned()))
            }
            Err(e) => return Err(open_err(e.to_string())),
        };
        match quietly(|| layout(&db)).unwrap_or_else(|what| Err(format!("it is damaged ({what})")))
        {
            Ok(Some(found)) if found > LAYOUT_VERSION => {
                return Err(StoreError::Newer {
                    path: path.to_owned(),
                    found,
                    known: LAYOUT_VERSION,
                })
            }
            Ok(_) => {}
            Err(reason) => return Err(open_err(reason)),
        }
        let blobs = path.with_file_name("blobs");
        match quietly(|| migrate(&db, &blobs)) {
            Ok(Ok(())) => {}
            Ok(Err(Failure::Full)) => return Err(StoreError::FullToMove(path.to_owned())),
            Ok(Err(Failure::Other(reason))) => return Err(open_err(reason)),
            Ok(Err(Failure::Blob(inner))) => {
                return Err(open_err(inner.into_error(path).to_string()))
            }
            Err(what) => return Err(open_err(format!("it is damaged ({what})"))),
        }
        // Freed pages are reused by later commits; compacting at start
        // also gives back what a burst of large results left (and an
        // earlier layout's tables, once moved).
        if let Ok(Err(e)) = quietly(|| db.compact()) {
            tracing::warn!(path = %path.display(), error = %e, "could not compact the execution store");
        }
        sync_dir(path);
        match std::fs::create_dir(&blobs) {
            Ok(()) => {
                let _ = std::fs::set_permissions(
                    &blobs,
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                );
                sync_dir(&blobs);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(open_err(format!("cannot create {}: {e}", blobs.display()))),
        }
        let (stored, damage) = quietly(|| read_all(&db, &blobs))
            .unwrap_or_else(|what| Err(format!("it is damaged ({what})")))
            .map_err(|reason| StoreError::Read {
                path: path.to_owned(),
                reason,
            })?;
        sweep_blobs(&blobs, &stored);
        let index: Index = stored
            .iter()
            .map(|s| (s.id.clone(), s.record.order))
            .collect();
        let db = std::sync::Arc::new(db);
        let (tx, rx) = mpsc::channel();
        let writer_path = path.to_owned();
        let writer_blobs = blobs.clone();
        let writer_db = db.clone();
        let writer = std::thread::Builder::new()
            .name("skill-runner-store".into())
            .spawn(move || write_loop(&writer_db, rx, writer_path, writer_blobs, index))
            .map_err(|e| open_err(format!("cannot start its writer thread: {e}")))?;
        let store = Store {
            path: path.to_owned(),
            db,
            blobs,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            highest: damage.highest,
        };
        if !damage.superseded.is_empty() || !damage.unreadable.is_empty() {
            // Gone for good, or a later removal of the newer record would
            // bring the older back (their files went with the sweep), and
            // a new admission under an unreadable record's order would
            // find its rows.
            for (id, order) in damage.superseded {
                store.send(Change::Remove { id, order }, false);
            }
            for order in damage.unreadable {
                store.send(Change::Purge { order }, false);
            }
            store.send(Change::Sync, true).wait()?;
        }
        Ok((store, stored))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The highest admission order of any record the start found, one it
    /// could not read included: a new admission is numbered past it, so
    /// it never shares an order with a record kept for a later daemon.
    pub fn highest_order(&self) -> u64 {
        self.highest
    }

    /// The folder of the large results and event logs.
    pub fn blobs(&self) -> &Path {
        &self.blobs
    }

    /// The result document of the finished execution `id` (`record` is
    /// its record): from the database, or from its `blobs/` file, checked
    /// against its recorded length. `None` when the store no longer holds
    /// it (retention dropped it since). Blocking: call it off the runtime.
    pub fn read_result(&self, record: &Record) -> Result<Option<Vec<u8>>, String> {
        // The daemon's own record of it knows the document's length, not
        // yet what the writer recorded.
        let len = record
            .blob_lens
            .map(|l| l.0)
            .or((record.doc_len > 0).then_some(record.doc_len));
        self.read(RESULT, record, "result", len)
    }

    /// The frozen event log of `id` (`EventLog::freeze`), as
    /// [`Store::read_result`] reads its document.
    pub fn read_events(&self, record: &Record) -> Result<Option<Vec<u8>>, String> {
        self.read(EVENTS, record, "events", record.blob_lens.map(|l| l.1))
    }

    /// The `part` of `record`'s execution (kept by its admission order,
    /// which identifies it as its id does: the listing at start matched
    /// the two).
    fn read(
        &self,
        part: u8,
        record: &Record,
        what: &str,
        len: Option<u64>,
    ) -> Result<Option<Vec<u8>>, String> {
        if record.blobs {
            let path = blob(&self.blobs, record.order, what);
            return match read_blob(&path, len) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", path.display())),
            };
        }
        let txn = self.db.begin_read().map_err(|e| e.to_string())?;
        let rows = match txn.open_table(ROWS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let value = rows.get((record.order, part)).map_err(|e| e.to_string())?;
        Ok(value.map(|v| v.value().1.to_vec()))
    }

    /// Queues a change; with `durable`, the returned [`Ack`] resolves once
    /// the commit holding it is on disk.
    pub fn send(&self, change: Change, durable: bool) -> Ack {
        let (ack, rx) = if durable {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|tx| tx.send(Message { change, ack }).is_ok())
            .unwrap_or(false);
        if !sent {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(StoreError::Stopped(self.path.clone())));
            return Ack {
                rx: Some(rx),
                path: self.path.clone(),
            };
        }
        Ack {
            rx,
            path: self.path.clone(),
        }
    }

    /// Commits what is queued, durably, and stops the writer.
    pub fn close(&self) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tx) = tx {
            let (ack, rx) = oneshot::channel();
            let _ = tx.send(Message {
                change: Change::Sync,
                ack: Some(ack),
            });
            drop(tx);
            let _ = rx.blocking_recv();
        }
        if let Some(w) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = w.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = w.join();
        }
    }
}

/// Runs `f`, turning a panic into its message, without printing it (the
/// caller says what it means). Only at start, before other threads run.
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    out.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the store's reader stopped".to_owned())
    })
}

/// The first bytes of every redb file.
const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Refuses a file that is not a store: redb would initialise a new store
/// over it, silently dropping whatever it held.
fn check_header(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(|e| format!("cannot read its header: {e}"))?;
    if head != MAGIC {
        return Err(
            "it does not start with a store's header (it is damaged, or another file)".into(),
        );
    }
    Ok(())
}

/// Makes the store file's name durable in its folder (a new file).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Whether a finished execution's result and events are kept as files of
/// `blobs/` rather than in the database: decided from its document's
/// length and its output, so that the daemon's summary and the writer
/// agree on where they are.
pub fn as_files(doc_len: u64, output: u64) -> bool {
    doc_len + output > INLINE
}

/// The file of an execution's result (`result`) or events in `blobs/`.
fn blob(dir: &Path, order: u64, what: &str) -> PathBuf {
    dir.join(format!("{order:016x}.{what}"))
}

/// The admission order a file of `blobs/` is named by ([`blob`]).
fn blob_order(name: &std::ffi::OsStr) -> Option<u64> {
    let hex = name.to_str()?.split('.').next()?;
    u64::from_str_radix(hex, 16).ok()
}

/// Removes the files of `blobs/` no record names (a crash came between
/// their write and the commit, or after the commit that dropped them).
fn sweep_blobs(dir: &Path, stored: &[Stored]) {
    let named: std::collections::HashSet<u64> = stored
        .iter()
        .filter(|s| s.record.blobs)
        .map(|s| s.record.order)
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if !blob_order(&e.file_name()).is_some_and(|o| named.contains(&o)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// What a start found damaged, removed by [`Store::open`] before
/// anything else.
#[derive(Debug, Default)]
struct Damage {
    /// The id and order of each record superseded by a newer record of
    /// its id.
    superseded: Vec<(String, u64)>,
    /// The order of each record that is not JSON or is cut short: its
    /// rows would otherwise stay for ever, named by no execution.
    unreadable: Vec<u64>,
    /// The highest order of any record, read or not.
    highest: u64,
}

/// Everything the store holds, by admission order, and what of it is
/// damaged.
fn read_all(db: &Database, blobs: &Path) -> Result<(Vec<Stored>, Damage), String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let rows = match txn.open_table(ROWS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((Vec::new(), Damage::default())),
        Err(e) => return Err(e.to_string()),
    };
    let mut all: Vec<Stored> = Vec::new();
    let mut superseded = Vec::new();
    let mut unreadable = Vec::new();
    let mut highest = 0;
    // Where each id is in `all`: an id is admitted once at a time (its
    // record is removed before it can be admitted again), so a second
    // record of an id is damage; the newer one is kept.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for entry in rows.iter().map_err(|e| e.to_string())? {
        let (k, v) = entry.map_err(|e| e.to_string())?;
        let (order, part) = k.value();
        if part != RECORD {
            continue;
        }
        let (id, json) = v.value();
        let id = id.to_owned();
        highest = highest.max(order);
        let mut record: Record = match serde_json::from_slice(json) {
            Ok(r) => r,
            // Not JSON, or cut short: damage, removed.
            Err(e)
                if matches!(
                    e.classify(),
                    Category::Syntax | Category::Eof | Category::Io
                ) =>
            {
                tracing::error!(id = %id.escape_debug(), order, error = %e, "removed an unreadable execution record from the store");
                unreadable.push(order);
                continue;
            }
            // JSON this daemon cannot read (a later version's, of the same
            // layout): kept for the daemon that can, its order never given
            // again ([`Store::highest_order`]).
            Err(e) => {
                tracing::error!(id = %id.escape_debug(), order, error = %e, "skipped an execution record this daemon cannot read; it is kept");
                continue;
            }
        };
        // The key is the record's order (they are written together).
        record.order = order;
        // A result kept as a file is looked at (not read) now: one of
        // another length than recorded answers store_corrupted.
        let mut damaged = None;
        if record.blobs && record.result_kept {
            let path = blob(blobs, record.order, "result");
            if let Err(e) = check_blob(&path, record.blob_lens.map(|l| l.0)) {
                tracing::error!(id = %id.escape_debug(), path = %path.display(), error = %e, "a stored execution's file cannot be read; its result answers store_corrupted");
                damaged = Some(format!("{}: {e}", path.display()));
            }
        }
        let stored = Stored {
            id,
            record,
            damaged,
        };
        match seen.get(&stored.id) {
            Some(&at) => {
                tracing::error!(id = %stored.id.escape_debug(), "the store holds two records of one execution; the older is removed");
                superseded.push((stored.id.clone(), all[at].record.order));
                all[at] = stored;
            }
            None => {
                seen.insert(stored.id.clone(), all.len());
                all.push(stored);
            }
        }
    }
    // By key, so by admission order, but for a record put in the place
    // of an older one of its id (sorting what is sorted is one pass).
    all.sort_by_key(|s| s.record.order);
    let damage = Damage {
        superseded,
        unreadable,
        highest,
    };
    Ok((all, damage))
}

/// An error as the reason of a [`StoreError`].
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Whether `txn` has the table `table`.
fn has_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &redb::ReadTransaction,
    table: TableDefinition<K, V>,
) -> Result<bool, String> {
    match txn.open_table(table) {
        Ok(_) => Ok(true),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
        Err(e) => Err(text(e)),
    }
}

/// Moves a store of an earlier layout (its first, tables keyed by
/// execution id; or its second, a table per part keyed by admission
/// order) to [`ROWS`], in one durable transaction: a crash during it
/// leaves the earlier layout as it was, moved again at the next open. A
/// record that cannot be read is left out with an ERROR, as [`read_all`]
/// would skip it. `blobs` is the folder of result files. A store already
/// in this layout only gets its version row, where a full disk leaves it
/// without one (written at a later start) rather than stopping the start.
fn migrate(db: &Database, blobs: &Path) -> Result<(), Failure> {
    let (by_id, by_order) = {
        let txn = db.begin_read()?;
        (
            has_table(&txn, ID_RECORDS).map_err(Failure::Other)?,
            has_table(&txn, ORDER_RECORDS).map_err(Failure::Other)?,
        )
    };
    let versioned = layout(db).map_err(Failure::Other)?.is_some();
    if !by_id && !by_order {
        if versioned {
            return Ok(());
        }
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate);
        txn.open_table(LAYOUT)?.insert("version", LAYOUT_VERSION)?;
        return match txn.commit().map_err(Failure::from) {
            Err(Failure::Full) => {
                tracing::warn!("the data dir's disk is full: the execution store's layout version is written at a later start");
                Ok(())
            }
            other => other,
        };
    }
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate);
    txn.open_table(LAYOUT)?.insert("version", LAYOUT_VERSION)?;
    let mut moved = 0usize;
    let mut renamed: Vec<(u64, u64)> = Vec::new();
    {
        let mut rows = txn.open_table(ROWS)?;
        let mut free = Free {
            next: highest_named_order(&txn, &rows, (by_id, by_order), blobs)? + 1,
            renamed: &mut renamed,
        };
        if by_order {
            let records = txn.open_table(ORDER_RECORDS)?;
            let results = txn.open_table(ORDER_RESULTS)?;
            let events = txn.open_table(ORDER_EVENTS)?;
            for entry in records.iter()? {
                let (k, v) = entry?;
                let (order, (id, json)) = (k.value(), v.value());
                let (result, log) = (results.get(order), events.get(order));
                let (result, log) = (result?, log?);
                let bulk = (
                    result.as_ref().map(|r| r.value()),
                    log.as_ref().map(|e| e.value()),
                );
                moved += usize::from(move_row(&mut rows, &mut free, Some(order), id, json, bulk)?);
            }
        }
        if by_id {
            let records = txn.open_table(ID_RECORDS)?;
            let results = txn.open_table(ID_RESULTS)?;
            let events = txn.open_table(ID_EVENTS)?;
            for entry in records.iter()? {
                let (k, v) = entry?;
                let (id, json) = (k.value(), v.value());
                let (result, log) = (results.get(id), events.get(id));
                let (result, log) = (result?, log?);
                let bulk = (
                    result.as_ref().map(|r| r.value()),
                    log.as_ref().map(|e| e.value()),
                );
                moved += usize::from(move_row(&mut rows, &mut free, None, id, json, bulk)?);
            }
        }
    }
    if by_id {
        txn.delete_table(ID_RECORDS)?;
        txn.delete_table(ID_RESULTS)?;
        txn.delete_table(ID_EVENTS)?;
    }
    if by_order {
        txn.delete_table(ORDER_RECORDS)?;
        txn.delete_table(ORDER_RESULTS)?;
        txn.delete_table(ORDER_EVENTS)?;
    }
    txn.commit()?;
    // A renumbered record's files follow it. After a rollback every file
    // of `blobs/` is the earlier daemon's (its start swept the others),
    // so the one at the old order is this record's; the record of this
    // layout there finds none and answers store_corrupted. A crash before
    // the rename leaves the moved record's files missing: the same answer.
    for (old, new) in renamed {
        for what in ["result", "events"] {
            let (from, to) = (blob(blobs, old, what), blob(blobs, new, what));
            if let Err(e) = std::fs::rename(&from, &to) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::error!(from = %from.display(), to = %to.display(), error = %e, "could not move a renumbered execution's file");
                }
            }
        }
    }
    tracing::info!(
        executions = moved,
        from = if by_id {
            "tables keyed by id"
        } else {
            "a table per part"
        },
        "moved the execution store to one table keyed by admission order"
    );
    Ok(())
}

/// The orders a move gives the records whose own order is taken, and
/// the files to rename after its commit: (old order, new order) of each
/// such record whose result is kept as files.
struct Free<'r> {
    next: u64,
    renamed: &'r mut Vec<(u64, u64)>,
}

/// The highest admission order anything of the store names: [`ROWS`],
/// the earlier layouts' records and the files of `blobs` (so an order a
/// renumbered record is given names no one's files).
/// `(by_id, by_order)` say which earlier layouts the store has (opening
/// a table in a write transaction would make one).
fn highest_named_order(
    txn: &redb::WriteTransaction,
    rows: &Rows,
    (by_id, by_order): (bool, bool),
    blobs: &Path,
) -> Result<u64, Failure> {
    let mut high = rows.last()?.map_or(0, |(k, _)| k.value().0);
    if by_order {
        let t = txn.open_table(ORDER_RECORDS)?;
        high = high.max(t.last()?.map_or(0, |(k, _)| k.value()));
    }
    if by_id {
        let t = txn.open_table(ID_RECORDS)?;
        for entry in t.iter()? {
            let (_, v) = entry?;
            if let Ok(r) = serde_json::from_slice::<Record>(v.value()) {
                high = high.max(r.order);
            }
        }
    }
    for entry in std::fs::read_dir(blobs).into_iter().flatten().flatten() {
        high = high.max(blob_order(&entry.file_name()).unwrap_or(0));
    }
    Ok(high)
}

/// The store's layout version, where it has one.
fn layout(db: &Database) -> Result<Option<u64>, String> {
    let txn = db.begin_read().map_err(text)?;
    match txn.open_table(LAYOUT) {
        Ok(t) => Ok(t.get("version").map_err(text)?.map(|v| v.value())),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(text(e)),
    }
}

/// Writes one execution of an earlier layout into [`ROWS`] under its
/// admission order (`order`, else the record's own): its record and,
/// where it had them, its result and events. A record that cannot be read
/// is skipped with an ERROR. One whose order another record holds (a
/// daemon of an earlier version ran on this store after a later one had
/// moved it, and numbered its admissions again from its own tables) is
/// given the next order `free` has, past every order the store names,
/// with a WARN: its record says its new order, and its result files, if
/// any, are renamed after the commit. Whether it was moved.
fn move_row(
    rows: &mut Rows,
    free: &mut Free,
    order: Option<u64>,
    id: &str,
    json: &[u8],
    (result, events): (Option<&[u8]>, Option<&[u8]>),
) -> Result<bool, Failure> {
    let Ok(mut record) = serde_json::from_slice::<Record>(json) else {
        tracing::error!(id = %id.escape_debug(), "skipped an unreadable execution record while moving the store to its new layout");
        return Ok(false);
    };
    let old = order.unwrap_or(record.order);
    record.order = old;
    if rows.get((old, RECORD))?.is_some() {
        record.order = free.next;
        free.next += 1;
        tracing::warn!(id = %id.escape_debug(), order = old, moved_to = record.order, "an execution record of an earlier layout has the admission order of another record; it is kept after every other");
        if record.blobs {
            free.renamed.push((old, record.order));
        }
    }
    let json = encode(&record);
    rows.insert((record.order, RECORD), (id, json.as_slice()))?;
    for (part, bytes) in [(RESULT, result), (EVENTS, events)] {
        if let Some(bytes) = bytes {
            rows.insert((record.order, part), ("", bytes))?;
        }
    }
    Ok(true)
}

/// Reads a file of `blobs/`, never more than its recorded length `len`:
/// a file that is not a regular file (no link is followed) or is of
/// another length is refused before a byte of it is read. A record of an
/// earlier version, which has no length, is read bounded by [`MAX_BLOB`].
fn read_blob(path: &Path, len: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, want) = check_blob(path, len)?;
    let mut bytes = Vec::with_capacity(want as usize);
    file.take(want + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != want {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it changed while read: {} bytes where the record says {want}",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// Opens a file of `blobs/` for [`read_blob`]: a regular file (no link
/// followed) of its recorded length `len`, at most [`MAX_BLOB`]; its
/// length.
fn check_blob(path: &Path, len: Option<u64>) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(bad("it is not a regular file".into()));
    }
    let want = len.unwrap_or(meta.len());
    if meta.len() != want {
        return Err(bad(format!(
            "it holds {} bytes where the record says {want}",
            meta.len()
        )));
    }
    if want > MAX_BLOB {
        return Err(bad(format!("it holds {want} bytes, over {MAX_BLOB}")));
    }
    Ok((file, want))
}

/// Where each execution the store holds is kept: its id to its order, as
/// committed. The writer's alone; it makes a record of an id that is
/// stored under another order replace that one, as a table keyed by id
/// did (an id's earlier record whose removal was lost with a failed
/// commit must not come back once the new one goes).
type Index = HashMap<String, u64>;
/// What a batch does to the [`Index`] (`None`: the id is gone), applied
/// once its commit is made.
type Staged = HashMap<String, Option<u64>>;

fn write_loop(
    db: &Database,
    rx: mpsc::Receiver<Message>,
    path: PathBuf,
    blobs: PathBuf,
    mut index: Index,
) {
    // Changes nobody waits for (admissions, retention's sheds and
    // evictions) ride with the next durable commit instead of taking a
    // transaction of their own: redb persists a non-durable commit only
    // with a later durable one, so a crash loses exactly what it lost
    // before, and the writer spends a third fewer transactions on a
    // blocking execution. They wait at most LINGER for one.
    let mut pending: Vec<Message> = Vec::new();
    // When the oldest change in `pending` arrived.
    let mut since = std::time::Instant::now();
    loop {
        let next = if pending.is_empty() {
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(LINGER.saturating_sub(since.elapsed()))
        };
        match next {
            Ok(m) => {
                if pending.is_empty() {
                    since = std::time::Instant::now();
                }
                pending.push(m);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                commit(db, &path, &blobs, &mut index, &mut pending, false);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        while pending.len() < BATCH {
            match rx.try_recv() {
                Ok(m) => pending.push(m),
                Err(_) => break,
            }
        }
        let durable = pending.iter().any(|m| m.ack.is_some());
        if durable || pending.len() >= BATCH || since.elapsed() >= LINGER {
            commit(db, &path, &blobs, &mut index, &mut pending, durable);
        }
    }
    // The daemon is stopping: what is left is written out for good.
    if !pending.is_empty() {
        commit(db, &path, &blobs, &mut index, &mut pending, true);
    }
}

/// Commits `batch` (emptied) in one transaction and answers whoever waits.
/// When a result's file cannot be written (a large result on a full
/// disk), each change is tried in a transaction of its own, in order: it
/// must not take the others with it, least of all a change nobody waits
/// for, whose loss no one would hear of (a later `Sync` would say all is
/// on disk).
fn commit(
    db: &Database,
    path: &Path,
    blobs: &Path,
    index: &mut Index,
    batch: &mut Vec<Message>,
    durable: bool,
) {
    let fail = |e: Failure| e.into_error(path);
    let outcome = apply(db, blobs, index, batch, durable);
    // Only a file that could not be written leaves the database able to
    // take the other changes (after a failed write of its own file, redb
    // refuses every transaction until it is opened again).
    if matches!(outcome, Err(Failure::Blob(_))) && batch.len() > 1 {
        for m in batch.drain(..) {
            let one = std::slice::from_ref(&m);
            let outcome = apply(db, blobs, index, one, m.ack.is_some()).map_err(fail);
            if let Some(ack) = m.ack {
                let _ = ack.send(outcome);
            }
        }
        return;
    }
    let outcome = outcome.map_err(fail);
    for m in batch.drain(..) {
        if let Some(ack) = m.ack {
            let _ = ack.send(outcome.clone());
        }
    }
}

enum Failure {
    Full,
    Other(String),
    /// A result's or event log's file could not be written: that change
    /// alone fails, the database is untouched (see [`commit`]).
    Blob(Box<Failure>),
}

impl Failure {
    /// What the waiters of the failed commit hear; a write that is not a
    /// full disk is logged at ERROR.
    fn into_error(self, path: &Path) -> StoreError {
        match self {
            Failure::Blob(inner) => inner.into_error(path),
            Failure::Full => StoreError::Full {
                path: path.to_owned(),
            },
            Failure::Other(reason) => {
                tracing::error!(path = %path.display(), "cannot write the execution store: {reason}");
                StoreError::Write {
                    path: path.to_owned(),
                    reason,
                }
            }
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
            Failure::Full
        } else {
            Failure::Other(e.to_string())
        }
    }
}

impl From<redb::StorageError> for Failure {
    fn from(e: redb::StorageError) -> Failure {
        if full(&e) {
            Failure::Full
        } else {
            Failure::Other(e.to_string())
        }
    }
}

macro_rules! storage_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                let e: redb::Error = e.into();
                match e {
                    redb::Error::Io(io) if matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) => Failure::Full,
                    other => Failure::Other(other.to_string()),
                }
            }
        }
    )*};
}
storage_error!(redb::TransactionError, redb::TableError, redb::CommitError);

/// Writes `bytes` (or what `fill` writes) to a new file, `fsync`ed;
/// returns its length.
fn write_blob(
    path: &Path,
    fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<u64, Failure> {
    use std::io::Write;
    let file = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, file);
    fill(&mut w)?;
    w.flush()?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

fn apply(
    db: &Database,
    dir: &Path,
    index: &mut Index,
    batch: &[Message],
    durable: bool,
) -> Result<(), Failure> {
    let mut written = Vec::new();
    let mut staged = Staged::new();
    let applied = apply_batch(db, dir, index, &mut staged, batch, durable, &mut written);
    if applied.is_ok() {
        for (id, order) in staged {
            match order {
                Some(order) => index.insert(id, order),
                None => index.remove(&id),
            };
        }
    } else {
        // No record names them: they would hold space until the next
        // start's sweep.
        for path in written {
            let _ = std::fs::remove_file(path);
        }
    }
    applied
}

/// [`apply`], naming in `written` the files it writes.
fn apply_batch(
    db: &Database,
    dir: &Path,
    index: &Index,
    staged: &mut Staged,
    batch: &[Message],
    durable: bool,
    written: &mut Vec<PathBuf>,
) -> Result<(), Failure> {
    // Files to remove once the commit that stops naming them is made.
    let mut gone: Vec<PathBuf> = Vec::new();
    let mut wrote_blobs = false;
    let mut txn = db.begin_write()?;
    txn.set_durability(if durable {
        Durability::Immediate
    } else {
        Durability::None
    });
    {
        let mut rows = txn.open_table(ROWS)?;
        // The record stored under `order`, if it is `id`'s.
        let stored = |rows: &Rows, id: &str, order: u64| -> Result<Option<Record>, Failure> {
            Ok(rows.get((order, RECORD))?.and_then(|v| {
                let (stored_id, json) = v.value();
                (stored_id == id)
                    .then(|| serde_json::from_slice::<Record>(json).ok())
                    .flatten()
                    // The key is its order, whatever the record says.
                    .map(|r| Record { order, ..r })
            }))
        };
        // Where `id` is now: as staged by this batch, else as committed.
        let at = |staged: &Staged, id: &str| match staged.get(id) {
            Some(order) => *order,
            None => index.get(id).copied(),
        };
        for m in batch {
            // A record of an id stored under another order replaces it.
            if let Change::Put { id, record } | Change::Finish { id, record, .. } = &m.change {
                if let Some(old) = at(staged, id).filter(|&o| o != record.order) {
                    if let Some(old) = stored(&rows, id, old)? {
                        drop_stored(&mut rows, dir, &old, &mut gone)?;
                    }
                }
                staged.insert(id.clone(), Some(record.order));
            }
            match &m.change {
                Change::Put { id, record } => {
                    let json = encode(record);
                    rows.insert((record.order, RECORD), (id.as_str(), json.as_slice()))?;
                }
                Change::Finish {
                    id,
                    record,
                    result,
                    events: log,
                } => {
                    let mut record = record.clone();
                    record.blobs = as_files(result.len() as u64, record.output);
                    if record.blobs {
                        let (r, e) = (
                            blob(dir, record.order, "result"),
                            blob(dir, record.order, "events"),
                        );
                        written.extend([r.clone(), e.clone()]);
                        let own = |f: Failure| Failure::Blob(Box::new(f));
                        let r = write_blob(&r, &mut |w| w.write_all(result)).map_err(own)?;
                        let e = write_blob(&e, &mut |w| log.freeze_to(w)).map_err(own)?;
                        record.blob_lens = Some((r, e));
                        wrote_blobs = true;
                        rows.remove((record.order, RESULT))?;
                        rows.remove((record.order, EVENTS))?;
                    } else {
                        rows.insert((record.order, RESULT), ("", &result[..]))?;
                        rows.insert((record.order, EVENTS), ("", log.freeze().as_slice()))?;
                    }
                    let json = encode(&record);
                    rows.insert((record.order, RECORD), (id.as_str(), json.as_slice()))?;
                }
                Change::Shed { id, record } => {
                    // Only a record that is still there.
                    if let Some(old) = stored(&rows, id, record.order)? {
                        let record = Record {
                            blobs: old.blobs,
                            blob_lens: old.blob_lens,
                            ..record.clone()
                        };
                        let order = record.order;
                        rows.insert((order, RECORD), (id.as_str(), encode(&record).as_slice()))?;
                        rows.remove((order, EVENTS))?;
                        if !record.result_kept {
                            rows.remove((order, RESULT))?;
                        }
                        if old.blobs {
                            gone.push(blob(dir, old.order, "events"));
                            if !record.result_kept {
                                gone.push(blob(dir, old.order, "result"));
                            }
                        }
                    }
                }
                Change::Remove { id, order } => {
                    if let Some(old) = stored(&rows, id, *order)? {
                        drop_stored(&mut rows, dir, &old, &mut gone)?;
                        if at(staged, id) == Some(*order) {
                            staged.insert(id.clone(), None);
                        }
                    }
                }
                Change::Purge { order } => {
                    for part in [RECORD, RESULT, EVENTS] {
                        rows.remove((*order, part))?;
                    }
                }
                Change::Sync => {}
            }
        }
    }
    if wrote_blobs {
        // The files' names, durable before the commit names them.
        std::fs::File::open(dir)?.sync_all()?;
    }
    txn.commit()?;
    for path in gone {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// [`ROWS`] in a write transaction.
type Rows<'t> = redb::Table<'t, (u64, u8), (&'static str, &'static [u8])>;

/// Removes the execution whose stored record is `old`: its rows, and its
/// `blobs/` files once the commit is made (named in `gone`).
fn drop_stored(
    rows: &mut Rows,
    dir: &Path,
    old: &Record,
    gone: &mut Vec<PathBuf>,
) -> Result<(), Failure> {
    if old.blobs {
        gone.push(blob(dir, old.order, "events"));
        gone.push(blob(dir, old.order, "result"));
    }
    for part in [RECORD, RESULT, EVENTS] {
        rows.remove((old.order, part))?;
    }
    Ok(())
}

fn encode(record: &Record) -> Vec<u8> {
    // Plain data always serialises.
    serde_json::to_vec(record).unwrap_or_default()
}

impl Record {
    /// A new record of an admitted execution.
    pub fn queued(digest: &str, order: u64, submitted: std::time::SystemTime) -> Record {
        Record {
            digest: digest.to_owned(),
            order,
            submitted_ms: epoch_ms(submitted),
            state: State::Queued,
            status: None,
            exit_code: None,
            finished_at: None,
            finished_ms: None,
            output: 0,
            doc_len: 0,
            last_seq: 0,
            shed: false,
            result_kept: true,
            error_kind: None,
            unannounced: false,
            blobs: false,
            blob_lens: None,
            outputs: None,
        }
    }

    /// The same record, finished now.
    pub fn finished(&self, status: String, exit_code: Option<i32>, finished_at: String) -> Record {
        Record {
            state: State::Finished,
            status: Some(status),
            exit_code,
            finished_at: Some(finished_at),
            finished_ms: Some(now_ms()),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(bytes: &[u8]) -> std::sync::Arc<crate::daemon::events::EventLog> {
        let log = crate::daemon::events::EventLog::new("x");
        log.started();
        log.output(0, bytes);
        std::sync::Arc::new(log)
    }

    /// Whether `id` has a committed record (what a reader sees).
    fn committed(store: &Store, id: &str) -> bool {
        let txn = store.db.begin_read().unwrap();
        let rows = txn.open_table(ROWS).unwrap();
        let found = rows.iter().unwrap().any(|e| {
            let (k, v) = e.unwrap();
            k.value().1 == RECORD && v.value().0 == id
        });
        found
    }

    /// The record of an execution admitted `order`th, as the daemon makes it.
    fn queued(order: u64) -> Record {
        Record::queued("d", order, std::time::SystemTime::now())
    }

    /// What a start found: each execution's id and order.
    fn listed(stored: &[Stored]) -> Vec<(&str, u64)> {
        stored
            .iter()
            .map(|s| (s.id.as_str(), s.record.order))
            .collect()
    }

    /// Removes `id`, kept under `order`, durably, and opens the store
    /// again: what that start finds.
    fn remove_and_reopen(store: Store, path: &Path, id: &str, order: u64) -> Vec<Stored> {
        let remove = Change::Remove {
            id: id.into(),
            order,
        };
        store.send(remove, true).wait().unwrap();
        store.close();
        drop(store);
        Store::open(path).unwrap().1
    }

    /// A change nobody waits for, now held back for the next durable
    /// commit, is still committed with it, on its own once LINGER passes
    /// without one, and when the store is dropped without a close.
    #[test]
    fn a_change_nobody_waits_for_is_committed_within_the_linger() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let (store, _) = Store::open(&path).unwrap();
        // Each admission has an order of its own, as in the daemon.
        let admitted = std::cell::Cell::new(0);
        let put = |id: &str| {
            admitted.set(admitted.get() + 1);
            Change::Put {
                id: id.into(),
                record: queued(admitted.get()),
            }
        };
        store.send(put("a"), false);
        store.send(put("b"), true).wait().unwrap();
        assert!(committed(&store, "a"), "it rode with the durable commit");
        store.send(put("c"), false);
        let deadline = std::time::Instant::now() + 20 * LINGER;
        while !committed(&store, "c") {
            assert!(
                std::time::Instant::now() < deadline,
                "not committed without a durable commit"
            );
            std::thread::sleep(LINGER / 5);
        }
        // A steady trickle of such changes does not hold the first back
        // past the linger: it is timed from the oldest one waiting.
        store.send(put("t0"), false);
        let first = std::time::Instant::now();
        let mut n = 1;
        while !committed(&store, "t0") {
            assert!(
                first.elapsed() < 20 * LINGER,
                "held back by the changes after it"
            );
            std::thread::sleep(LINGER / 4);
            store.send(put(&format!("t{n}")), false);
            n += 1;
        }
        store.send(put("d"), false);
        drop(store);
        let (_, stored) = Store::open(&path).unwrap();
        let mut ids: Vec<&str> = stored
            .iter()
            .map(|s| s.id.as_str())
            .filter(|id| !id.starts_with('t'))
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }

    /// A change that cannot be written fails alone: a change nobody
    /// waits for, held back to ride with it, is written all the same, and
    /// the `Sync` after it says the truth.
    #[test]
    fn a_change_that_cannot_be_written_does_not_take_the_held_back_ones_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let (store, _) = Store::open(&path).unwrap();
        let rec = queued(7);
        store.send(
            Change::Put {
                id: "held".into(),
                record: queued(1),
            },
            false,
        );
        // Its result goes to a file, and that path is a folder.
        std::fs::create_dir_all(blob(&dir.path().join("blobs"), 7, "result")).unwrap();
        let big = 2 * INLINE as usize;
        let failed = store
            .send(
                Change::Finish {
                    id: "broken".into(),
                    record: rec.finished("exited".into(), Some(0), "t".into()),
                    result: axum::body::Bytes::from(vec![b'r'; big]),
                    events: log_of(b"o"),
                },
                true,
            )
            .wait();
        assert!(failed.is_err(), "the result was written over a folder");
        store.send(Change::Sync, true).wait().unwrap();
        assert!(committed(&store, "held"), "the held-back change was lost");
        assert!(!committed(&store, "broken"));
    }

    #[test]
    fn what_was_acknowledged_is_read_back_and_a_shed_drops_the_bulk() {
        for size in [10, 2 * INLINE as usize] {
            read_back_and_shed(size);
        }
    }

    fn read_back_and_shed(size: usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let (store, stored) = Store::open(&path).unwrap();
        assert!(stored.is_empty());
        store
            .send(
                Change::Put {
                    id: "a".into(),
                    record: queued(1),
                },
                true,
            )
            .wait()
            .unwrap();
        let done = queued(2).finished("exited".into(), Some(0), "t".into());
        store
            .send(
                Change::Finish {
                    id: "b".into(),
                    record: done.clone(),
                    result: axum::body::Bytes::from(vec![b'r'; size]),
                    events: log_of(&vec![b'o'; size]),
                },
                true,
            )
            .wait()
            .unwrap();
        drop(store);
        let (store, stored) = Store::open(&path).unwrap();
        assert_eq!(stored.len(), 2);
        let b = stored.iter().find(|s| s.id == "b").unwrap();
        // Read when asked for, not at the open.
        type Reader = fn(&Store, &Record) -> Result<Option<Vec<u8>>, String>;
        let read = |what: Reader| what(&store, &b.record).unwrap();
        assert_eq!(read(Store::read_result), Some(vec![b'r'; size]));
        assert_eq!(
            read(Store::read_events),
            Some(log_of(&vec![b'o'; size]).freeze())
        );
        let files = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
        assert_eq!(files, if size as u64 > INLINE { 2 } else { 0 });
        assert_eq!(
            stored.iter().find(|s| s.id == "a").unwrap().record.state,
            State::Queued
        );
        let mut lean = done.clone();
        lean.shed = true;
        lean.result_kept = false;
        store.send(
            Change::Shed {
                id: "b".into(),
                record: lean,
            },
            false,
        );
        // A removal names the record by its order and its id: one that
        // names another id's order removes nothing.
        store
            .send(
                Change::Remove {
                    id: "b".into(),
                    order: 1,
                },
                true,
            )
            .wait()
            .unwrap();
        assert!(committed(&store, "a") && committed(&store, "b"));
        store.send(
            Change::Remove {
                id: "a".into(),
                order: 1,
            },
            false,
        );
        store.close();
        drop(store);
        let (store, stored) = Store::open(&path).unwrap();
        assert_eq!(stored.len(), 1);
        let rec = &stored[0].record;
        assert!(store.read_result(rec).unwrap().is_none());
        assert!(store.read_events(rec).unwrap().is_none());
        assert!(stored[0].record.shed);
        // Its files went with its bulk.
        assert_eq!(
            std::fs::read_dir(dir.path().join("blobs")).unwrap().count(),
            0
        );
    }

    /// A result file of `blobs/` longer or shorter than its record says
    /// (or replaced by a link) is not read: its execution is restored as
    /// damaged, and the others as they were.
    #[test]
    fn a_blob_of_another_length_than_recorded_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let big = 2 * INLINE as usize;
        let (store, _) = Store::open(&path).unwrap();
        for (i, id) in ["grown", "cut", "linked", "fine"].iter().enumerate() {
            let rec = queued(i as u64 + 1);
            store
                .send(
                    Change::Finish {
                        id: (*id).into(),
                        record: rec.finished("exited".into(), Some(0), "t".into()),
                        result: axum::body::Bytes::from(vec![b'r'; big]),
                        events: log_of(b"out"),
                    },
                    true,
                )
                .wait()
                .unwrap();
        }
        store.close();
        drop(store);
        let blobs = dir.path().join("blobs");
        let result = |order: u64| blob(&blobs, order, "result");
        // One more byte, one fewer, a link to a file of the right length.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(result(1))
            .unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        let cut = std::fs::File::options()
            .write(true)
            .open(result(2))
            .unwrap();
        cut.set_len(big as u64 - 1).unwrap();
        std::fs::remove_file(result(3)).unwrap();
        std::os::unix::fs::symlink(result(4), result(3)).unwrap();
        let (store, stored) = Store::open(&path).unwrap();
        let by = |id: &str| stored.iter().find(|s| s.id == id).unwrap();
        for id in ["grown", "cut", "linked"] {
            let s = by(id);
            assert!(store.read_result(&s.record).is_err(), "{id}");
            let why = s.damaged.as_deref().unwrap_or_else(|| panic!("{id}"));
            assert!(why.contains("result"), "{id}: {why}");
        }
        assert!(by("grown")
            .damaged
            .as_deref()
            .unwrap()
            .contains("the record says"));
        assert!(by("fine").damaged.is_none());
        let fine = &by("fine").record;
        assert_eq!(store.read_result(fine).unwrap(), Some(vec![b'r'; big]));
    }

    /// A store of each earlier layout (keyed by execution id; a table
    /// per part keyed by admission order) is moved to the one table when
    /// it is opened: every record, result and event log is read back as
    /// it was, the old tables are gone, and a second open finds nothing
    /// left to move.
    #[test]
    fn a_store_of_an_earlier_layout_is_moved_to_one_table_with_everything_it_held() {
        let ids = ["exec-c3", "exec-0a", "exec-ff", "exec-5e"];
        // Each execution as the earlier layouts held it: its order, id,
        // record, and result and events when finished.
        let held = || {
            ids.iter().enumerate().map(|(i, id)| {
                let order = 10 + i as u64;
                let mut rec = queued(order);
                let mut bulk = None;
                if i % 2 == 0 {
                    rec = rec.finished("exited".into(), Some(0), "t".into());
                    let result = format!("result of {id}").into_bytes();
                    bulk = Some((result, log_of(id.as_bytes()).freeze()));
                }
                (order, *id, encode(&rec), bulk)
            })
        };
        for by_id in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = Store::file(dir.path());
            {
                let db = Database::create(&path).unwrap();
                let txn = db.begin_write().unwrap();
                if by_id {
                    let mut records = txn.open_table(ID_RECORDS).unwrap();
                    let mut results = txn.open_table(ID_RESULTS).unwrap();
                    let mut events = txn.open_table(ID_EVENTS).unwrap();
                    for (_, id, json, bulk) in held() {
                        if let Some((result, log)) = bulk {
                            results.insert(id, result.as_slice()).unwrap();
                            events.insert(id, log.as_slice()).unwrap();
                        }
                        records.insert(id, json.as_slice()).unwrap();
                    }
                    // Unreadable: left out, as a start would skip it.
                    records.insert("exec-bad", &b"{"[..]).unwrap();
                } else {
                    let mut records = txn.open_table(ORDER_RECORDS).unwrap();
                    let mut results = txn.open_table(ORDER_RESULTS).unwrap();
                    let mut events = txn.open_table(ORDER_EVENTS).unwrap();
                    for (order, id, json, bulk) in held() {
                        if let Some((result, log)) = bulk {
                            results.insert(order, result.as_slice()).unwrap();
                            events.insert(order, log.as_slice()).unwrap();
                        }
                        records.insert(order, (id, json.as_slice())).unwrap();
                    }
                    // Unreadable: left out, as a start would skip it.
                    records.insert(20, ("exec-bad", &b"{"[..])).unwrap();
                }
                txn.commit().unwrap();
            }
            let (store, stored) = Store::open(&path).unwrap();
            let got = listed(&stored);
            let want = [
                ("exec-c3", 10),
                ("exec-0a", 11),
                ("exec-ff", 12),
                ("exec-5e", 13),
            ];
            assert_eq!(got, want, "by id: {by_id}");
            for (s, (_, _, _, bulk)) in stored.iter().zip(held()) {
                let (result, events) = (
                    store.read_result(&s.record).unwrap(),
                    store.read_events(&s.record).unwrap(),
                );
                match bulk {
                    Some((r, e)) => assert_eq!((result, events), (Some(r), Some(e))),
                    None => {
                        assert_eq!((result, events), (None, None), "{}", s.id);
                        assert_eq!(s.record.state, State::Queued);
                    }
                }
            }
            {
                let txn = store.db.begin_read().unwrap();
                assert!(!has_table(&txn, ID_RECORDS).unwrap());
                assert!(!has_table(&txn, ID_RESULTS).unwrap());
                assert!(!has_table(&txn, ID_EVENTS).unwrap());
                assert!(!has_table(&txn, ORDER_RECORDS).unwrap());
                assert!(!has_table(&txn, ORDER_RESULTS).unwrap());
                assert!(!has_table(&txn, ORDER_EVENTS).unwrap());
                // Four records, two results and two event logs: nothing
                // of the unreadable record came along.
                let rows = txn.open_table(ROWS).unwrap();
                let rows = redb::ReadableTableMetadata::len(&rows).unwrap();
                assert_eq!(rows, 8, "by id: {by_id}");
            }
            // What comes after goes to the new table, and survives a reopen.
            store
                .send(
                    Change::Put {
                        id: "exec-new".into(),
                        record: queued(14),
                    },
                    true,
                )
                .wait()
                .unwrap();
            store.close();
            drop(store);
            let (_, stored) = Store::open(&path).unwrap();
            assert_eq!(stored.len(), 5, "by id: {by_id}");
            assert_eq!(stored[4].id, "exec-new");
        }
    }

    /// A daemon of an earlier version run on a store a later one had
    /// moved (a rollback) writes its own tables beside the new one and
    /// numbers its admissions again: at the next upgrade, its records
    /// whose order the new table holds are kept after every other, none
    /// lost, and the store is versioned.
    #[test]
    fn records_of_a_rollback_with_orders_the_store_holds_are_kept_after_every_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        {
            let (store, _) = Store::open(&path).unwrap();
            for (id, order) in [("exec-a", 1), ("exec-b", 2)] {
                let put = Change::Put {
                    id: id.into(),
                    record: queued(order),
                };
                store.send(put, true).wait().unwrap();
            }
            store.close();
        }
        {
            // What the earlier daemons wrote, from order 1 again.
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut records = txn.open_table(ORDER_RECORDS).unwrap();
                let old = encode(&queued(1));
                records.insert(1, ("exec-old", old.as_slice())).unwrap();
                let mut results = txn.open_table(ORDER_RESULTS).unwrap();
                results.insert(1, &b"result of exec-old"[..]).unwrap();
                let mut by_id = txn.open_table(ID_RECORDS).unwrap();
                let older = encode(&queued(2));
                by_id.insert("exec-older", older.as_slice()).unwrap();
                by_id
                    .insert("exec-three", encode(&queued(3)).as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let (store, stored) = Store::open(&path).unwrap();
        assert_eq!(
            listed(&stored),
            [
                ("exec-a", 1),
                ("exec-b", 2),
                ("exec-three", 3),
                ("exec-old", 4),
                ("exec-older", 5)
            ]
        );
        let old = &stored[3].record;
        assert_eq!(
            store.read_result(old).unwrap().as_deref(),
            Some(&b"result of exec-old"[..])
        );
        assert_eq!(layout(&store.db).unwrap(), Some(LAYOUT_VERSION));
    }

    /// A record renumbered by the move after a rollback is known by its
    /// new order everywhere: its result files follow it (after a rollback
    /// every file is the earlier daemon's), no order it is given names
    /// another record's files, the record of this layout at its old order
    /// answers store_corrupted (its files were swept), and removing the
    /// renumbered record removes it alone.
    #[test]
    fn a_renumbered_record_reads_its_own_files_and_is_removed_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let blobs = dir.path().join("blobs");
        let filed = |order: u64, len: usize| {
            let mut r = queued(order).finished("exited".into(), Some(0), "t".into());
            r.blobs = true;
            r.blob_lens = Some((len as u64, 3));
            r
        };
        {
            let (store, _) = Store::open(&path).unwrap();
            store.close();
        }
        {
            // This layout's record at order 1 (its files swept by the
            // earlier daemon), and what that daemon wrote: orders 1 and 2
            // again, their results files of the same length.
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut rows = txn.open_table(ROWS).unwrap();
                let a = encode(&filed(1, 8));
                rows.insert((1, RECORD), ("exec-a", a.as_slice())).unwrap();
                let mut records = txn.open_table(ORDER_RECORDS).unwrap();
                for (order, id) in [(1, "old-1"), (2, "old-2")] {
                    let json = encode(&filed(order, 8));
                    records.insert(order, (id, json.as_slice())).unwrap();
                }
            }
            txn.commit().unwrap();
            for (order, body) in [(1, b"old-1 r."), (2, b"old-2 r.")] {
                std::fs::write(blob(&blobs, order, "result"), body).unwrap();
                std::fs::write(blob(&blobs, order, "events"), b"evt").unwrap();
            }
        }
        let (store, stored) = Store::open(&path).unwrap();
        assert_eq!(listed(&stored), [("exec-a", 1), ("old-2", 2), ("old-1", 3)]);
        let by = |id: &str| stored.iter().find(|s| s.id == id).unwrap();
        assert!(by("exec-a").damaged.is_some(), "{:?}", by("exec-a"));
        let read = |id: &str| store.read_result(&by(id).record).unwrap();
        assert_eq!(read("old-1").as_deref(), Some(&b"old-1 r."[..]));
        assert_eq!(read("old-2").as_deref(), Some(&b"old-2 r."[..]));
        assert_eq!(by("old-1").record.order, 3);
        // Retention drops the renumbered one: the others stay.
        let stored = remove_and_reopen(store, &path, "old-1", 3);
        assert_eq!(listed(&stored), [("exec-a", 1), ("old-2", 2)]);
        assert!(blob(&blobs, 2, "result").exists());
    }

    /// A store of a later layout than this daemon knows is refused with
    /// a sentence that says so, and left as it was.
    #[test]
    fn a_store_of_a_later_layout_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        {
            let (store, _) = Store::open(&path).unwrap();
            let put = Change::Put {
                id: "exec-a".into(),
                record: queued(1),
            };
            store.send(put, true).wait().unwrap();
            store.close();
        }
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(LAYOUT)
                .unwrap()
                .insert("version", LAYOUT_VERSION + 1)
                .unwrap();
            txn.commit().unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Newer { found, .. } if found == LAYOUT_VERSION + 1));
        let said = err.to_string();
        assert!(said.contains("written by a later skill-runner"), "{said}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    /// A record of an id the store keeps under another order replaces
    /// that one, with its result, events and files, as a table keyed by
    /// id did: the earlier record of an id (whose removal was lost with a
    /// failed commit) never comes back once the newer one is removed.
    #[test]
    fn a_record_of_an_id_stored_under_another_order_replaces_it() {
        for size in [10, 2 * INLINE as usize] {
            let dir = tempfile::tempdir().unwrap();
            let path = Store::file(dir.path());
            let finish = |order: u64, byte: u8| Change::Finish {
                id: "a".into(),
                record: queued(order).finished("exited".into(), Some(0), "t".into()),
                result: axum::body::Bytes::from(vec![byte; size]),
                events: log_of(b"out"),
            };
            let (store, _) = Store::open(&path).unwrap();
            store.send(finish(1, b'o'), true).wait().unwrap();
            store.close();
            drop(store);
            // Reopened, so the replacement is found from what is stored.
            let (store, _) = Store::open(&path).unwrap();
            store.send(finish(3, b'n'), true).wait().unwrap();
            store.close();
            drop(store);
            let (store, stored) = Store::open(&path).unwrap();
            let got = listed(&stored);
            assert_eq!(got, [("a", 3)], "{size}");
            assert_eq!(
                store.read_result(&stored[0].record).unwrap(),
                Some(vec![b'n'; size])
            );
            let files = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
            assert_eq!(files, if size as u64 > INLINE { 2 } else { 0 });
            let stored = remove_and_reopen(store, &path, "a", 3);
            assert!(stored.is_empty(), "{size}: the older record came back");
        }
    }

    /// Two records of one id found at the start (damage: the writer
    /// never leaves two) keep the newer, and the older is removed, so
    /// that it does not come back once the newer one goes.
    #[test]
    fn of_two_records_of_one_id_found_at_start_the_older_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut rows = txn.open_table(ROWS).unwrap();
                for (id, order) in [("a", 1), ("b", 2), ("a", 3)] {
                    let rec = queued(order).finished("exited".into(), Some(0), "t".into());
                    let json = encode(&rec);
                    rows.insert((order, RECORD), (id, json.as_slice())).unwrap();
                    rows.insert((order, RESULT), ("", &b"doc"[..])).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let (store, stored) = Store::open(&path).unwrap();
        let got = listed(&stored);
        assert_eq!(got, [("b", 2), ("a", 3)]);
        let stored = remove_and_reopen(store, &path, "a", 3);
        let got: Vec<&str> = stored.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(got, ["b"], "the older record came back");
    }

    /// A record that cannot be read is removed at the start with every
    /// row of its order: nothing of it stays for ever, and an execution
    /// admitted under that order later (the daemon numbers after the
    /// records it could read) never finds its result or events.
    #[test]
    fn an_unreadable_record_is_removed_with_its_rows_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut rows = txn.open_table(ROWS).unwrap();
                let rec = queued(1).finished("exited".into(), Some(0), "t".into());
                rows.insert((1, RECORD), ("a", encode(&rec).as_slice()))
                    .unwrap();
                rows.insert((1, RESULT), ("", &b"doc of a"[..])).unwrap();
                rows.insert((2, RECORD), ("bad", &b"{"[..])).unwrap();
                rows.insert((2, RESULT), ("", &b"doc of bad"[..])).unwrap();
                rows.insert((2, EVENTS), ("", &b"events of bad"[..]))
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let (store, stored) = Store::open(&path).unwrap();
        assert_eq!(listed(&stored), [("a", 1)]);
        {
            let txn = store.db.begin_read().unwrap();
            let rows = txn.open_table(ROWS).unwrap();
            let left: Vec<(u64, u8)> = rows.iter().unwrap().map(|e| e.unwrap().0.value()).collect();
            assert_eq!(left, [(1, RECORD), (1, RESULT)]);
        }
        // The next admission takes order 2: it has no result yet.
        let next = queued(2);
        let put = Change::Put {
            id: "c".into(),
            record: next.clone(),
        };
        store.send(put, true).wait().unwrap();
        assert_eq!(store.read_result(&next).unwrap(), None);
        assert_eq!(store.read_events(&next).unwrap(), None);
    }

    /// A record that is JSON this daemon cannot read (a later version's
    /// state, of the same layout) is kept for the daemon that can, and its
    /// order is never given to a new admission.
    #[test]
    fn a_record_of_json_this_daemon_cannot_read_is_kept_and_its_order_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let later = br#"{"digest":"d","order":2,"submitted_ms":0,"state":"paused"}"#;
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut rows = txn.open_table(ROWS).unwrap();
                rows.insert((1, RECORD), ("a", encode(&queued(1)).as_slice()))
                    .unwrap();
                rows.insert((2, RECORD), ("later", &later[..])).unwrap();
                rows.insert((2, RESULT), ("", &b"its doc"[..])).unwrap();
            }
            txn.commit().unwrap();
        }
        for _ in 0..2 {
            let (store, stored) = Store::open(&path).unwrap();
            assert_eq!(listed(&stored), [("a", 1)]);
            assert_eq!(store.highest_order(), 2);
            let txn = store.db.begin_read().unwrap();
            let rows = txn.open_table(ROWS).unwrap();
            let row = rows.get((2, RECORD)).unwrap().unwrap();
            assert_eq!(row.value().1, &later[..]);
            assert!(rows.get((2, RESULT)).unwrap().is_some());
            drop((row, rows, txn));
            store.close();
        }
    }

    #[test]
    fn a_damaged_file_is_refused_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
        let e = Store::open(&path).unwrap_err().to_string();
        assert!(e.contains("move it aside"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        // Left as it was, for whoever looks at it.
        assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 64 * 1024]);
    }

    #[test]
    fn a_store_cut_short_opens_or_is_refused_never_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = Store::file(dir.path());
        let (store, _) = Store::open(&path).unwrap();
        for i in 0..50 {
            let rec = queued(i);
            store.send(
                Change::Finish {
                    id: format!("e{i}"),
                    record: rec.finished("exited".into(), Some(0), "t".into()),
                    result: axum::body::Bytes::from(vec![b'x'; 10_000]),
                    events: log_of(b"out"),
                },
                i % 10 == 0,
            );
        }
        store.close();
        drop(store);
        let full = std::fs::read(&path).unwrap();
        for cut in [full.len() / 2, full.len() / 4, 4096, 100] {
            std::fs::write(&path, &full[..cut]).unwrap();
            match Store::open(&path) {
                Ok((_, stored)) => assert!(stored.len() <= 50),
                Err(e) => assert!(e.to_string().contains("move it aside"), "{e}"),
            }
        }
        // Bytes flipped in the middle of the file.
        let mut flipped = full.clone();
        for b in &mut flipped[full.len() / 3..full.len() / 3 + 512] {
            *b ^= 0xff;
        }
        std::fs::write(&path, &flipped).unwrap();
        if let Err(e) = Store::open(&path) {
            assert!(e.to_string().contains("move it aside"), "{e}");
        }
    }
}
