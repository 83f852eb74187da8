//! Files in and out of an execution (docs/files.md): the job's `files`,
//! written into the workspace before the command starts, and its
//! `outputs`, collected from the workspace after it ends.
//!
//! The workspace is the command's: anything in it may be a symlink, a
//! FIFO, a hard link or a folder swapped for one while the runner looks.
//! So the runner reaches it only through [`crate::fsx::beneath`], from a
//! descriptor of the workspace, one component at a time, never following
//! a link.
//!
//! Invariants:
//! - a job's files are checked whole before any byte is written (paths,
//!   base64, modes, duplicates, and the runner's bounds); the workspace is
//!   then looked at before it is written (a symlink or a file where a
//!   folder must go refuses the job), each file is written under a private
//!   name, and only when all are written are they renamed into place: a
//!   refused job leaves nothing behind, not even the folders it made;
//! - what is collected is a regular file with one link, read through a
//!   descriptor opened without following links and checked to be the file
//!   that was listed: a symlink, FIFO, socket, device or hard-linked file is
//!   listed with a sentence and never read;
//! - collection is bounded: the workspace listing in entries, the files
//!   collected in count, each file's bytes and the total; a file that does
//!   not fit is listed with `truncated` and never read in full;
//! - `sha256` is the SHA-256 of exactly the bytes kept, which are the bytes
//!   `GET /v1/executions/{id}/outputs/{path}` serves and `--output-dir`
//!   writes; the kept bytes live in one folder per execution
//!   ([`OutputStore`]), removed when the last holder of the store drops it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fsx::beneath::{self, BeneathError, Create, Kind};

/// A file of the job as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    pub path: String,
    /// The bytes, in standard base64.
    pub content: String,
    /// Octal permission bits, `"0644"` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// A file the runner writes into the workspace before the command starts.
#[derive(Clone, PartialEq, Eq)]
pub struct InputFile {
    pub path: String,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl std::fmt::Debug for InputFile {
    // The bytes may be megabytes: a log line gets their length.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// The mode of a file the job gives without one.
pub const DEFAULT_MODE: u32 = 0o644;
/// The most patterns a job's `outputs` may hold.
pub const MAX_PATTERNS: usize = 64;
/// The longest pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Folders a `**` descends at most.
pub const MAX_DEPTH: usize = 64;

/// The runner's bounds on files in and out (docs/files.md has the
/// defaults; the daemon's flags set them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBounds {
    /// Files a job may carry.
    pub input_files: usize,
    /// Bytes of one input file.
    pub input_file_bytes: u64,
    /// Bytes of all input files of a job.
    pub input_bytes: u64,
    /// Files collected from one execution.
    pub output_files: usize,
    /// Bytes of one collected file.
    pub output_file_bytes: u64,
    /// Bytes collected from one execution.
    pub output_bytes: u64,
    /// Bytes of one file carried in the result as `content`.
    pub inline_file_bytes: u64,
    /// Bytes of all files carried in the result as `content`.
    pub inline_bytes: u64,
    /// Workspace entries looked at to match the patterns.
    pub scan_entries: usize,
    /// Bytes of kept outputs the runner holds at once, all executions
    /// together: a daemon retains results for a while, and their outputs
    /// must not fill its disk.
    pub kept_bytes: u64,
}

impl Default for FileBounds {
    fn default() -> FileBounds {
        FileBounds {
            input_files: 1000,
            input_file_bytes: 16 << 20,
            input_bytes: 64 << 20,
            output_files: 1000,
            output_file_bytes: 256 << 20,
            output_bytes: 1 << 30,
            inline_file_bytes: 64 << 10,
            inline_bytes: 1 << 20,
            scan_entries: 100_000,
            kept_bytes: 4 << 30,
        }
    }
}

/// Why files could not be taken in or handed out.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("files[{index}].path {path:?} is not admissible: {why}; give a relative path such as in/data.csv")]
    Path {
        index: usize,
        path: String,
        why: String,
    },
    #[error("files[{index}] ({path:?}) content is not canonical standard base64 (A-Z a-z 0-9 + /, = padding, no line breaks)")]
    Base64 { index: usize, path: String },
    #[error("files[{index}] ({path:?}) mode {mode:?} is not admissible: give 1 to 4 octal digits of permission bits, at most 0777 (no setuid, setgid or sticky bit)")]
    Mode {
        index: usize,
        path: String,
        mode: String,
    },
    #[error("files lists {path:?} twice; give each path once")]
    Duplicate { path: String },
    #[error("files lists {file:?} and {below:?}, which needs {file:?} to be a folder; give one or the other")]
    Overlap { file: String, below: String },
    #[error("files holds {count} files; this runner takes at most {max}; pack many small files into one archive")]
    TooManyFiles { count: usize, max: usize },
    #[error(
        "files entry {path:?} is {bytes} bytes; this runner takes at most {max} bytes per file"
    )]
    FileTooLarge { path: String, bytes: u64, max: u64 },
    #[error("files hold {bytes} bytes in all; this runner takes at most {max} bytes per job")]
    TooLarge { bytes: u64, max: u64 },
    #[error("outputs has {count} patterns; at most {MAX_PATTERNS} are accepted")]
    TooManyPatterns { count: usize },
    #[error("outputs[{index}] {pattern:?} is not admissible: {why}; give a relative pattern such as out/*.png or report.json")]
    Pattern {
        index: usize,
        pattern: String,
        why: String,
    },
    #[error("the workspace {} cannot be opened: {source}", path.display())]
    OpenWorkspace { path: PathBuf, source: io::Error },
    #[error("the fresh workspace {} cannot be made: {source}", path.display())]
    CreateWorkspace { path: PathBuf, source: io::Error },
    #[error("files entry {path:?} cannot be written into the workspace: {source}")]
    Write { path: String, source: BeneathError },
}

impl FilesError {
    /// The error kind: the job's fault, or the host's.
    pub fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            FilesError::OpenWorkspace { .. } | FilesError::CreateWorkspace { .. } => {
                ErrorKind::StagingFailed
            }
            FilesError::Write {
                source: BeneathError::Io { .. },
                ..
            } => ErrorKind::StagingFailed,
            _ => ErrorKind::BadJob,
        }
    }
}

/// Folders an input file may be below at most (the package rule).
pub const MAX_INPUT_DEPTH: usize = 32;
/// The longest name of one path segment (the common file system limit).
pub const MAX_NAME_BYTES: usize = 255;

/// Checks a relative path by the package path rules, or says why not.
fn path_rule(path: &str) -> Result<(), String> {
    crate::package::format::check_path(path).map_err(|e| match e {
        crate::package::format::PackageError::BadPath { reason, .. } => reason.to_string(),
        other => other.to_string(),
    })?;
    if path.split('/').any(|s| s.len() > MAX_NAME_BYTES) {
        return Err(format!("a segment is longer than {MAX_NAME_BYTES} bytes"));
    }
    Ok(())
}

/// Validates the job's `files`: admissible paths, canonical base64, modes,
/// no path twice and none below another. The runner's bounds are checked
/// when it runs the job ([`check_inputs`]).
pub fn inputs(raw: Vec<RawFile>) -> Result<Vec<InputFile>, FilesError> {
    let mut files = Vec::with_capacity(raw.len());
    let mut seen = BTreeSet::new();
    for (index, f) in raw.into_iter().enumerate() {
        path_rule(&f.path)
            .and_then(|()| match f.path.split('/').count() > MAX_INPUT_DEPTH + 1 {
                true => Err(format!("it is below more than {MAX_INPUT_DEPTH} folders")),
                false => Ok(()),
            })
            .map_err(|why| FilesError::Path {
                index,
                path: f.path.clone(),
                why,
            })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(f.content.as_bytes())
            .map_err(|_| FilesError::Base64 {
                index,
                path: f.path.clone(),
            })?;
        let mode = match f.mode.as_deref() {
            None => DEFAULT_MODE,
            Some(m) => parse_mode(m).ok_or_else(|| FilesError::Mode {
                index,
                path: f.path.clone(),
                mode: m.to_owned(),
            })?,
        };
        if !seen.insert(f.path.clone()) {
            return Err(FilesError::Duplicate { path: f.path });
        }
        files.push(InputFile {
            path: f.path,
            bytes,
            mode,
        });
    }
    // A path that is a folder of another: sorted, "a" is followed by its
    // children ("a/…") before any sibling that sorts after '/'.
    let paths: Vec<&String> = seen.iter().collect();
    for (i, p) in paths.iter().enumerate() {
        let folder = format!("{p}/");
        if let Some(below) = paths[i + 1..].iter().find(|q| q.starts_with(&folder)) {
            return Err(FilesError::Overlap {
                file: (*p).clone(),
                below: (*below).clone(),
            });
        }
    }
    Ok(files)
}

/// `"0644"`, `"755"`: 1 to 4 octal digits, permission bits only.
fn parse_mode(m: &str) -> Option<u32> {
    if m.is_empty() || m.len() > 4 || !m.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u32::from_str_radix(m, 8).ok().filter(|v| *v <= 0o777)
}

/// Checks a job's files against the runner's bounds.
pub fn check_inputs(files: &[InputFile], bounds: &FileBounds) -> Result<(), FilesError> {
    if files.len() > bounds.input_files {
        return Err(FilesError::TooManyFiles {
            count: files.len(),
            max: bounds.input_files,
        });
    }
    let mut total = 0u64;
    for f in files {
        let bytes = f.bytes.len() as u64;
        if bytes > bounds.input_file_bytes {
            return Err(FilesError::FileTooLarge {
                path: f.path.clone(),
                bytes,
                max: bounds.input_file_bytes,
            });
        }
        total += bytes;
    }
    if total > bounds.input_bytes {
        return Err(FilesError::TooLarge {
            bytes: total,
            max: bounds.input_bytes,
        });
    }
    Ok(())
}

/// One segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A name without wildcards.
    Literal(String),
    /// A name with `*` (any run of characters but `/`) or `?` (one).
    Wild(String),
    /// `**`: any number of folders, none included.
    Any,
}

/// A validated `outputs` pattern: relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    text: String,
    segments: Vec<Segment>,
}

impl Glob {
    /// The pattern as the job wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The folder to list: the literal segments before the first wildcard.
    fn base(&self) -> Vec<&str> {
        self.segments
            .iter()
            .map_while(|s| match s {
                Segment::Literal(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The whole pattern, when it has no wildcard.
    fn literal(&self) -> Option<&str> {
        (self.base().len() == self.segments.len()).then_some(self.text.as_str())
    }

    /// Folders below the base a match may be in.
    fn depth(&self) -> usize {
        if self.segments.contains(&Segment::Any) {
            MAX_DEPTH
        } else {
            self.segments.len() - self.base().len() - 1
        }
    }

    /// Whether the workspace path `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        let (p, s) = (&self.segments, &parts);
        // m[i][j]: segments[i..] match parts[j..].
        let mut m = vec![vec![false; s.len() + 1]; p.len() + 1];
        m[p.len()][s.len()] = true;
        for i in (0..p.len()).rev() {
            for j in (0..=s.len()).rev() {
                m[i][j] = match &p[i] {
                    Segment::Any => m[i + 1][j] || (j < s.len() && m[i][j + 1]),
                    Segment::Literal(l) => j < s.len() && l == s[j] && m[i + 1][j + 1],
                    Segment::Wild(w) => j < s.len() && wild(w, s[j]) && m[i + 1][j + 1],
                };
            }
        }
        m[0][0]
    }
}

/// `*` and `?` matching of one name, in linear time (the usual greedy
/// match with one backtrack point).
fn wild(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// Validates the job's `outputs` patterns.
pub fn outputs(raw: Vec<String>) -> Result<Vec<Glob>, FilesError> {
    if raw.len() > MAX_PATTERNS {
        return Err(FilesError::TooManyPatterns { count: raw.len() });
    }
    raw.into_iter()
        .enumerate()
        .map(|(index, text)| {
            let bad = |why: String| FilesError::Pattern {
                index,
                pattern: text.clone(),
                why,
            };
            if text.len() > MAX_PATTERN_BYTES {
                return Err(bad(format!("it is longer than {MAX_PATTERN_BYTES} bytes")));
            }
            path_rule(&text).map_err(bad)?;
            let segments = text
                .split('/')
                .map(|s| {
                    if s == "**" {
                        Ok(Segment::Any)
                    } else if s.contains("**") {
                        Err(bad("** stands alone between slashes (a/**/b)".into()))
                    } else if s.contains(['*', '?']) {
                        Ok(Segment::Wild(s.to_owned()))
                    } else {
                        Ok(Segment::Literal(s.to_owned()))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            if segments.last() == Some(&Segment::Any) {
                return Err(bad("it ends in **; say which files (a/**/*)".into()));
            }
            Ok(Glob { text, segments })
        })
        .collect()
}

/// Whether a job needs its workspace on the host: a fresh one is otherwise
/// a tmpfs inside the sandbox, which the runner can neither write into
/// before nor read after.
pub fn needs_host_workspace(files: &[InputFile], outputs: &[Glob]) -> bool {
    !files.is_empty() || !outputs.is_empty()
}

/// Makes `<exec_dir>/workspace` for a job with files or outputs and no
/// workspace of its own. Made 0700 through its descriptor, then given to
/// `owner` (the sandbox user of a root runner), whose group may pass the
/// execution folder (0710), as bubblewrap binds it by path.
pub fn fresh_workspace(exec_dir: &Path, owner: Option<(u32, u32)>) -> Result<PathBuf, FilesError> {
    use std::os::fd::AsFd;
    let path = exec_dir.join("workspace");
    let made = || -> io::Result<()> {
        std::fs::create_dir(&path)?;
        let dir = crate::fsx::open_dir_no_symlinks(&path)?;
        nix::sys::stat::fchmod(dir.as_fd(), nix::sys::stat::Mode::from_bits_truncate(0o700))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(exec_dir, None, Some(gid))?;
            crate::fsx::chmod(exec_dir, 0o710)?;
            nix::unistd::fchown(
                dir.as_fd(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )?;
        }
        Ok(())
    };
    made().map_err(|source| FilesError::CreateWorkspace {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Writes the job's files into the workspace (module docs: all or none).
pub fn write_inputs(
    workspace: &Path,
    files: &[InputFile],
    owner: Option<(u32, u32)>,
) -> Result<(), FilesError> {
    if files.is_empty() {
        return Ok(());
    }
    let root = crate::fsx::open_dir_no_symlinks(workspace).map_err(|source| {
        FilesError::OpenWorkspace {
            path: workspace.to_owned(),
            source,
        }
    })?;
    let failed = |f: &InputFile| {
        let path = f.path.clone();
        move |source| FilesError::Write { path, source }
    };
    // Look before writing: what would refuse a file refuses the job now.
    for f in files {
        beneath::check_writable(&root, &f.path).map_err(failed(f))?;
        // A root runner writes for the sandbox user: never where that
        // user could not write itself (a named workspace may hold files
        // and folders of others).
        if let Some(user) = owner {
            beneath::check_user_may(&root, &f.path, user, true).map_err(failed(f))?;
        }
    }
    // Not synced: the command reads them at once, and a crash ends the
    // execution with them (a sync per file was most of the cost of
    // 100 files; docs/benchmarks.md).
    let create = Create {
        mode: 0o644,
        dir_mode: 0o755,
        owner,
        durable: false,
    };
    let mut made: Vec<String> = Vec::new();
    let mut pending = Vec::with_capacity(files.len());
    let written = files.iter().try_for_each(|f| {
        made.extend(beneath::missing_folders(&root, &f.path).map_err(failed(f))?);
        let mut file = beneath::AtomicFile::create(
            &root,
            &f.path,
            &Create {
                mode: f.mode,
                ..create
            },
        )
        .map_err(failed(f))?;
        file.file()
            .write_all(&f.bytes)
            .map_err(|e| failed(f)(BeneathError::from_write(&f.path, e)))?;
        pending.push(file);
        Ok(())
    });
    if let Err(e) = written {
        drop(pending); // removes the private names
        for dir in made.iter().rev() {
            let _ = beneath::remove_empty_dir(&root, dir);
        }
        return Err(e);
    }
    for (file, f) in pending.into_iter().zip(files) {
        file.commit().map_err(failed(f))?;
    }
    Ok(())
}

/// One collected output, as the result lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Output {
    pub path: String,
    pub size: u64,
    /// SHA-256 of the bytes kept; absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The bytes, in standard base64, when they fit the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The bytes are not in the result: served by the daemon when kept
    /// (`sha256` given), else over a bound (`error` says which).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Why the file was not kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The bytes of kept outputs a runner holds at once, across executions
/// ([`FileBounds::kept_bytes`]): taken as outputs are kept, given back
/// when their [`OutputStore`] goes.
#[derive(Debug)]
pub struct KeptBudget {
    used: AtomicU64,
    max: u64,
}

impl KeptBudget {
    pub fn new(max: u64) -> Arc<KeptBudget> {
        Arc::new(KeptBudget {
            used: AtomicU64::new(0),
            max,
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    fn take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(n).filter(|t| *t <= self.max)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::SeqCst);
    }

    /// Takes `n` bytes whatever the bound: outputs kept before a restart
    /// are already on disk, and count until they go.
    fn force(&self, n: u64) {
        self.used.fetch_add(n, Ordering::SeqCst);
    }
}

/// The kept bytes of one execution's outputs: a folder of files named by
/// their SHA-256. Dropping the last holder removes the folder and gives
/// its bytes back to the budget; a download under way keeps its open file.
#[derive(Debug)]
pub struct OutputStore {
    dir: PathBuf,
    files: BTreeMap<String, (String, u64)>,
    budget: Arc<KeptBudget>,
    held: u64,
}

impl OutputStore {
    /// The folder of the kept bytes.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kept file of output `path`, opened, and its size.
    pub fn open(&self, path: &str) -> Option<io::Result<(File, u64)>> {
        let (sha, size) = self.files.get(path)?;
        Some(File::open(self.dir.join(sha)).map(|f| (f, *size)))
    }

    /// Each kept output: its path, SHA-256 and size.
    pub fn files(&self) -> impl Iterator<Item = (&str, &str, u64)> {
        self.files
            .iter()
            .map(|(p, (sha, size))| (p.as_str(), sha.as_str(), *size))
    }
}

impl OutputStore {
    /// The kept outputs an earlier daemon recorded (`dir` under `root`, a
    /// folder of files named by SHA-256), held again after a restart:
    /// `None` when the folder is not one of `root`'s, or a file is missing
    /// or not its recorded size (then nothing of it is served).
    pub fn restore(
        root: &Path,
        dir: &str,
        files: &[(String, String, u64)],
        budget: &Arc<KeptBudget>,
    ) -> Option<Arc<OutputStore>> {
        let name_ok = !dir.is_empty() && !dir.contains('/') && dir != "." && dir != "..";
        if !name_ok {
            return None;
        }
        let dir = root.join(dir);
        // A real folder of `root`, never a link planted in its place.
        let is_folder = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir());
        if !is_folder {
            return None;
        }
        let mut held = 0u64;
        let mut map = BTreeMap::new();
        for (path, sha, size) in files {
            let sound = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
            let meta = sound
                .then(|| std::fs::symlink_metadata(dir.join(sha)).ok())
                .flatten()?;
            if !meta.file_type().is_file() || meta.len() != *size {
                return None;
            }
            if map.insert(path.clone(), (sha.clone(), *size)).is_none() {
                held = held.saturating_add(*size);
            }
        }
        budget.force(held);
        Some(Arc::new(OutputStore {
            dir,
            files: map,
            budget: budget.clone(),
            held,
        }))
    }
}

impl Drop for OutputStore {
    fn drop(&mut self) {
        self.budget.give(self.held);
        if let Err(e) = crate::fsx::remove_tree(&self.dir) {
            tracing::warn!(
                "cannot remove the outputs folder {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// What the result says of the outputs: `outputs`, and `outputs_note`
/// when a bound stopped the listing.
#[derive(Debug, Clone, Serialize)]
pub struct Collected {
    pub outputs: Vec<Output>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs_note: Option<String>,
    /// The kept bytes (none kept: `None`).
    #[serde(skip)]
    pub store: Option<Arc<OutputStore>>,
}

/// A path that matched, and what the listing saw there (`None`: a
/// literal pattern, not listed).
type Candidate = (String, Option<Kind>);

/// Collects the outputs the patterns name from the workspace into a new
/// folder below `store_parent` (module docs).
pub fn collect(
    workspace: &Path,
    globs: &[Glob],
    bounds: &FileBounds,
    store_parent: &Path,
    budget: &Arc<KeptBudget>,
) -> Collected {
    collect_as(workspace, globs, bounds, store_parent, budget, None)
}

/// [`collect`], reading only what `reader` (the sandbox user, when the
/// runner is another: root) could read itself: a file of the workspace
/// its owner and mode keep from the command is listed with an `error`,
/// never read with the runner's rights.
pub fn collect_as(
    workspace: &Path,
    globs: &[Glob],
    bounds: &FileBounds,
    store_parent: &Path,
    budget: &Arc<KeptBudget>,
    reader: Option<(u32, u32)>,
) -> Collected {
    let mut collected = Collected {
        outputs: Vec::new(),
        outputs_note: None,
        store: None,
    };
    let root = match crate::fsx::open_dir_no_symlinks(workspace) {
        Ok(r) => r,
        Err(e) => {
            collected.outputs_note = Some(format!("the workspace cannot be opened: {e}"));
            return collected;
        }
    };
    let (candidates, note) = candidates(&root, globs, bounds.scan_entries);
    let mut notes: Vec<String> = note.into_iter().collect();
    let mut keeper = Keeper::new(bounds, store_parent, budget.clone());
    keeper.reader = reader;
    let listed_max = bounds.output_files.saturating_mul(2).max(16);
    let mut unlisted = 0usize;
    for (path, kind) in candidates {
        if collected.outputs.len() >= listed_max {
            unlisted += 1;
            continue;
        }
        if let Some(out) = keeper.take(&root, path, kind) {
            collected.outputs.push(out);
        }
    }
    if unlisted > 0 {
        notes.push(format!(
            "{unlisted} more matching paths are not listed: the result lists at most {listed_max}"
        ));
    }
    if let Some(e) = keeper.failed.take() {
        notes.push(e);
    }
    collected.outputs_note = (!notes.is_empty()).then(|| notes.join("; "));
    collected.store = keeper.finish();
    collected
}

/// The workspace paths the patterns match, sorted, and a note when the
/// listing stopped at `scan` entries.
fn candidates(root: &File, globs: &[Glob], scan: usize) -> (Vec<Candidate>, Option<String>) {
    let mut found: BTreeMap<String, Option<Kind>> = BTreeMap::new();
    let mut budget = scan;
    let mut stopped = false;
    for glob in globs {
        if let Some(lit) = glob.literal() {
            found.entry(lit.to_owned()).or_insert(None);
            continue;
        }
        let base = glob.base().join("/");
        let bounds = beneath::Bounds {
            entries: budget,
            depth: glob.depth(),
        };
        let listing = match beneath::list(root, &base, bounds) {
            Ok(l) => l,
            // No such folder (or not one): nothing matches.
            Err(_) => continue,
        };
        budget = budget.saturating_sub(listing.entries.len());
        // A listing cut by depth alone is the pattern's own reach.
        stopped |= listing.truncated && budget == 0;
        for e in listing.entries {
            let path = if base.is_empty() {
                e.path
            } else {
                format!("{base}/{}", e.path)
            };
            if e.kind != Kind::Folder && glob.matches(&path) {
                found.insert(path, Some(e.kind));
            }
        }
    }
    let note = stopped.then(|| {
        format!("the workspace listing stopped after {scan} entries: files beyond were not looked at; name outputs by narrower patterns")
    });
    (found.into_iter().collect(), note)
}

/// A kept file: its SHA-256, its size and, when small enough to be
/// inlined, its bytes.
type Kept = (String, u64, Option<Vec<u8>>);

/// Keeps collected bytes within the bounds, in a folder made on first use.
struct Keeper<'a> {
    bounds: &'a FileBounds,
    parent: &'a Path,
    budget: Arc<KeptBudget>,
    /// Bytes taken from the budget for what is kept.
    held: u64,
    dir: Option<PathBuf>,
    files: BTreeMap<String, (String, u64)>,
    kept_bytes: u64,
    inline_bytes: u64,
    /// Why nothing more can be kept (the store folder failed).
    failed: Option<String>,
    /// The user whose rights reading is bounded by ([`collect_as`]).
    reader: Option<(u32, u32)>,
}

impl<'a> Keeper<'a> {
    fn new(bounds: &'a FileBounds, parent: &'a Path, budget: Arc<KeptBudget>) -> Keeper<'a> {
        Keeper {
            bounds,
            parent,
            budget,
            held: 0,
            dir: None,
            files: BTreeMap::new(),
            kept_bytes: 0,
            inline_bytes: 0,
            failed: None,
            reader: None,
        }
    }

    /// The entry of one matched path: kept, or why not.
    fn take(&mut self, root: &File, path: String, kind: Option<Kind>) -> Option<Output> {
        let refused = |path: String, size: u64, why: String| Output {
            path,
            size,
            sha256: None,
            content: None,
            truncated: false,
            error: Some(why),
        };
        match kind {
            Some(Kind::Symlink) => {
                let why = format!(
                    "{path} is a symlink; outputs are never followed: write the file itself"
                );
                return Some(refused(path, 0, why));
            }
            Some(Kind::Special) => {
                let why = format!("{path} is not a regular file (a FIFO, socket or device); only regular files are outputs");
                return Some(refused(path, 0, why));
            }
            Some(Kind::Folder) => return None,
            _ => {}
        }
        if let Some(user) = self.reader {
            if let Err(e @ BeneathError::Denied { .. }) =
                beneath::check_user_may(root, &path, user, false)
            {
                return Some(refused(path, 0, e.to_string()));
            }
        }
        let reg = match beneath::open_regular(root, &path) {
            Ok(r) => r,
            Err(BeneathError::NotRegular { kind: "folder", .. }) if kind.is_none() => {
                let why =
                    format!("{path} is a folder; name the files in it (for example {path}/*)");
                return Some(refused(path, 0, why));
            }
            Err(BeneathError::Missing { .. }) => {
                let why = format!("{path} was not written by the command");
                return Some(refused(path, 0, why));
            }
            Err(e) => {
                return Some(refused(
                    path,
                    0,
                    format!("{e}; outputs are regular files reached without links"),
                ))
            }
        };
        if reg.nlink > 1 {
            let why = format!("{path} has {} hard links: its bytes may be another file's, so it is not collected; copy it (cp) instead of linking it", reg.nlink);
            return Some(refused(path, reg.size, why));
        }
        let count = self.files.len();
        let b = self.bounds;
        let over = if count >= b.output_files {
            Some(format!(
                "more than {} outputs; the rest are not kept",
                b.output_files
            ))
        } else if reg.size > b.output_file_bytes {
            Some(format!(
                "{} bytes, over the bound of {} bytes per output",
                reg.size, b.output_file_bytes
            ))
        } else if self.kept_bytes + reg.size > b.output_bytes {
            Some(format!(
                "over the bound of {} bytes of outputs per execution",
                b.output_bytes
            ))
        } else if self.failed.is_some() {
            self.failed.clone()
        } else if !self.budget.take(reg.size) {
            Some(format!(
                "the runner holds {} bytes of kept outputs, near its bound of {} bytes for all retained executions; fetch outputs and let older results expire, or raise the bound",
                self.budget.used(),
                self.budget.max
            ))
        } else {
            None
        };
        if let Some(why) = over {
            return Some(Output {
                truncated: true,
                ..refused(path, reg.size, why)
            });
        }
        // At most the size fstat said (taken from the budget): a file that
        // grows while it is read is refused, not kept past its bounds.
        let kept = self.keep(reg.file, reg.size);
        let got = match &kept {
            Ok(Some((_, size, _))) => *size,
            _ => 0,
        };
        self.budget.give(reg.size - got);
        self.held += got;
        match kept {
            Ok(Some((sha, size, bytes))) => {
                self.kept_bytes += size;
                let inline =
                    size <= b.inline_file_bytes && self.inline_bytes + size <= b.inline_bytes;
                let content = bytes.filter(|_| inline).map(|b| {
                    self.inline_bytes += size;
                    base64::engine::general_purpose::STANDARD.encode(b)
                });
                self.files.insert(path.clone(), (sha.clone(), size));
                Some(Output {
                    path,
                    size,
                    sha256: Some(sha),
                    truncated: content.is_none(),
                    content,
                    error: None,
                })
            }
            Ok(None) => Some(Output {
                truncated: true,
                ..refused(
                    path.clone(),
                    reg.size,
                    format!("{path} grew past the bounds while it was read"),
                )
            }),
            Err(e) => Some(refused(path, reg.size, format!("cannot keep it: {e}"))),
        }
    }

    /// Copies at most `room` bytes of `file` into the store while hashing
    /// them: their SHA-256, count and (when small enough to be inlined)
    /// the bytes; `None` when the file holds more than `room`.
    fn keep(&mut self, mut file: File, room: u64) -> io::Result<Option<Kept>> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let d = self.parent.join(crate::fsx::random_hex());
                crate::fsx::create_private_dir(&d).inspect_err(|e| {
                    self.failed = Some(format!("the outputs folder cannot be made: {e}"));
                })?;
                self.dir = Some(d.clone());
                d
            }
        };
        let tmp = dir.join(format!(".{}.part", crate::fsx::random_hex()));
        let mut out = File::create(&tmp)?;
        let mut sha = Sha256::new();
        let mut small: Option<Vec<u8>> = Some(Vec::new());
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        let copied = (|| -> io::Result<bool> {
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    return Ok(true);
                }
                total += n as u64;
                if total > room {
                    return Ok(false);
                }
                sha.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                if let Some(s) = small.as_mut() {
                    if total <= self.bounds.inline_file_bytes {
                        s.extend_from_slice(&buf[..n]);
                    } else {
                        small = None;
                    }
                }
            }
        })();
        drop(out);
        match copied {
            Ok(true) => {
                let hex = crate::text::to_hex(&sha.finalize());
                std::fs::rename(&tmp, dir.join(&hex))?;
                Ok(Some((hex, total, small)))
            }
            Ok(false) => {
                let _ = std::fs::remove_file(&tmp);
                Ok(None)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn finish(self) -> Option<Arc<OutputStore>> {
        let Some(dir) = self.dir else {
            self.budget.give(self.held);
            return None;
        };
        Some(Arc::new(OutputStore {
            dir,
            files: self.files,
            budget: self.budget,
            held: self.held,
        }))
    }
}

/// Checks `--output-dir` before the job runs: the job names outputs, and
/// the folder is missing or an empty folder (not a symlink).
pub fn check_output_dir(dest: &Path, outputs: &[Glob]) -> Result<(), WriteOutputsError> {
    if outputs.is_empty() {
        return Err(WriteOutputsError::NoOutputs);
    }
    match crate::fsx::open_dir_nofollow(dest) {
        // Made after the run: its parent must be there now.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match parent.is_dir() {
                true => Ok(()),
                false => Err(WriteOutputsError::Open {
                    path: dest.to_owned(),
                    source: e,
                }),
            }
        }
        Err(source) => Err(WriteOutputsError::Open {
            path: dest.to_owned(),
            source,
        }),
        Ok(root) => {
            let bounds = beneath::Bounds {
                entries: 1,
                depth: 0,
            };
            match beneath::list(&root, "", bounds) {
                Ok(l) if l.entries.is_empty() => Ok(()),
                Ok(_) => Err(WriteOutputsError::NotEmpty {
                    path: dest.to_owned(),
                }),
                Err(e) => Err(WriteOutputsError::Open {
                    path: dest.to_owned(),
                    source: io::Error::other(e.to_string()),
                }),
            }
        }
    }
}

/// Writes every kept output of `store` below the folder `dest` (made if
/// missing, refused when it holds anything: nothing is overwritten),
/// at its path, never following a link. Returns the number written.
pub fn write_outputs(store: &OutputStore, dest: &Path) -> Result<usize, WriteOutputsError> {
    let refuse = |source: io::Error| WriteOutputsError::Open {
        path: dest.to_owned(),
        source,
    };
    match std::fs::create_dir(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refuse(e)),
    }
    let root = crate::fsx::open_dir_nofollow(dest).map_err(refuse)?;
    let listing = beneath::list(
        &root,
        "",
        beneath::Bounds {
            entries: 1,
            depth: 0,
        },
    )
    .map_err(|e| refuse(io::Error::other(e.to_string())))?;
    if !listing.entries.is_empty() {
        return Err(WriteOutputsError::NotEmpty {
            path: dest.to_owned(),
        });
    }
    let mut n = 0;
    for (path, _, _) in store.files() {
        let mut from = match store.open(path) {
            Some(Ok((f, _))) => f,
            Some(Err(source)) => {
                return Err(WriteOutputsError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
            None => continue, // listed by the store itself
        };
        beneath::write_atomic_from(&root, path, &mut from, u64::MAX - 1, &Create::default())
            .map_err(|source| WriteOutputsError::Write {
                path: path.to_owned(),
                source,
            })?;
        n += 1;
    }
    Ok(n)
}

/// Why `--output-dir` could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteOutputsError {
    #[error("--output-dir is given but the job names no outputs; list the files to collect in the job's outputs (e.g. [\"out/*\"])")]
    NoOutputs,
    #[error("cannot use the output folder {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("the output folder {} is not empty; name a new or empty folder, so nothing in it is overwritten", path.display())]
    NotEmpty { path: PathBuf },
    #[error("cannot read the kept output {path:?}: {source}")]
    Read { path: String, source: io::Error },
    #[error("cannot write output {path:?}: {source}")]
    Write { path: String, source: BeneathError },
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
