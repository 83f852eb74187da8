//! On disk: the files of `<data-dir>/sessions`, one record
//! (`<id>.json`) and one event log (`<id>.events.ndjson`) per session.
//!
//! Invariants:
//! - an id names a file only after [`valid_session_id`] accepts it, so no
//!   id reaches outside the folder;
//! - a record is written once, as a read-only file (0400) linked into place
//!   (`link(2)` never replaces a record), and never rewritten: only its
//!   modification time changes, to mark a use ([`Sessions::touch`]);
//! - an event is one line appended with one `write` (`O_APPEND`); a line
//!   torn by a crash is skipped when the log is read.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::records::{Event, SessionRecord, FORMAT};
use super::SessionError;
use crate::exec::job::valid_session_id;
use crate::package::hash::Binding;

/// A fresh session id.
pub fn new_session_id() -> String {
    format!("ses-{}", crate::fsx::random_hex())
}

/// The session records and event logs under `<data-dir>/sessions`.
#[derive(Debug, Clone)]
pub struct Sessions {
    pub(super) dir: PathBuf,
    /// `<data-dir>/workspaces`: the managed workspaces, one per session.
    workspaces: PathBuf,
}

impl Sessions {
    /// The sessions of an opened data dir.
    pub fn new(data: &crate::datadir::DataDir) -> Sessions {
        Sessions {
            dir: data.sessions(),
            workspaces: data.workspaces(),
        }
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn events_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.events.ndjson"))
    }

    /// Reads a session record.
    pub fn read(&self, id: &str) -> Result<SessionRecord, SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let path = self.record_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        let record: SessionRecord =
            serde_json::from_slice(&bytes).map_err(|e| SessionError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if record.format != FORMAT || record.id != id {
            return Err(SessionError::Corrupt {
                path,
                reason: "it is another format or another session's record".into(),
            });
        }
        Ok(record)
    }

    /// Every session record, newest first, with when it was last used.
    /// Records that cannot be read are skipped.
    pub fn list(&self) -> Result<Vec<(SessionRecord, std::time::SystemTime)>, SessionError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SessionError::Io {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if !valid_session_id(id) {
                continue;
            }
            if let (Ok(record), Some(used)) = (self.read(id), self.last_used(id)) {
                out.push((record, used));
            }
        }
        out.sort_by(|a, b| b.0.created_at.cmp(&a.0.created_at));
        Ok(out)
    }

    /// When a session was last used: the later of its record's and its
    /// event log's modification times ([`Sessions::touch`] sets the
    /// record's). `None` when there is no such session.
    pub fn last_used(&self, id: &str) -> Option<std::time::SystemTime> {
        if !valid_session_id(id) {
            return None;
        }
        let record = fs::symlink_metadata(self.record_path(id))
            .and_then(|m| m.modified())
            .ok()?;
        let events = fs::symlink_metadata(self.events_path(id))
            .and_then(|m| m.modified())
            .ok();
        Some(events.map_or(record, |e| e.max(record)))
    }

    /// Records a use of the session now (its record's modification time).
    pub fn touch(&self, id: &str) -> Result<(), SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let path = self.record_path(id);
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        file.set_modified(std::time::SystemTime::now())
            .map_err(|source| SessionError::Io { path, source })
    }

    /// Deletes a session's workspace (if it keeps one), record and event
    /// log. The workspace goes first: a crash in between leaves a record
    /// whose workspace is made again, empty, never a workspace nobody
    /// deletes (and [`Sessions::sweep_workspaces`] removes those anyway).
    pub fn delete(&self, id: &str) -> Result<(), SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let workspace = self.workspace_path(id);
        crate::fsx::remove_tree(&workspace).map_err(|source| SessionError::Io {
            path: workspace,
            source,
        })?;
        let path = self.record_path(id);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        }
        let events = self.events_path(id);
        match fs::remove_file(&events) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(SessionError::Io {
                path: events,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Where session `id`'s managed workspace is (whether or not it keeps
    /// one): `<data-dir>/workspaces/<id>`.
    pub fn workspace_path(&self, id: &str) -> PathBuf {
        super::workspace::path_of(&self.workspaces, id)
    }

    /// Makes session `id`'s workspace folder, given to `owner`.
    pub(super) fn make_workspace(
        &self,
        id: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<(), SessionError> {
        let path = self.workspace_path(id);
        super::workspace::make(&path, owner).map_err(|source| SessionError::Io { path, source })
    }

    /// The managed workspace of session `id`, made again when a crash
    /// left its record without it; `None` when the session keeps none.
    pub fn managed_workspace(
        &self,
        id: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<Option<PathBuf>, SessionError> {
        if self.read(id)?.workspace.is_none() {
            return Ok(None);
        }
        self.make_workspace(id, owner)?;
        Ok(Some(self.workspace_path(id)))
    }

    /// Removes workspace folders whose session has no record (a crash
    /// between deleting the two); returns how many.
    pub fn sweep_workspaces(&self) -> usize {
        let Ok(entries) = fs::read_dir(&self.workspaces) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str() else { continue };
            // Asked of the record store itself (never a guess at its
            // files): only a session it says does not exist loses its folder.
            let orphan =
                valid_session_id(id) && matches!(self.read(id), Err(SessionError::NotFound(_)));
            if orphan && crate::fsx::remove_tree(&entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// The frozen bindings of a session, for an execution that names it.
    pub fn bindings(&self, id: &str) -> Result<Vec<Binding>, SessionError> {
        Ok(self
            .read(id)?
            .skills
            .into_iter()
            .map(|s| s.binding)
            .collect())
    }

    /// Writes a new record: a private file, then `link(2)` into place,
    /// which never replaces an existing record.
    pub(super) fn create(&self, record: &SessionRecord) -> Result<(), SessionError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| SessionError::Io { path, source }
        };
        let path = self.record_path(&record.id);
        let mut text = serde_json::to_vec_pretty(record).map_err(|e| SessionError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        text.push(b'\n');
        crate::fsx::write_new(&path, &text, 0o400).map_err(io(&path))
    }

    /// Appends one event (one `write` of one line, `O_APPEND`).
    pub(super) fn append(&self, id: &str, event: &Event) -> Result<(), SessionError> {
        let path = self.events_path(id);
        let mut line = serde_json::to_vec(event).map_err(|e| SessionError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(&line))
            .map_err(|source| SessionError::Io { path, source })
    }

    /// The events of a session, oldest first. A line torn by a crash is
    /// skipped.
    pub fn events(&self, id: &str) -> Result<Vec<Event>, SessionError> {
        self.read(id)?;
        let path = self.events_path(id);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

impl Sessions {
    /// Resolves the session a job names into its frozen bindings, which
    /// the job then runs (a job naming none is left as it is). Both front
    /// ends call this before the job is queued, so an unknown session is
    /// [`SessionError::NotFound`] there, never a refusal after queueing.
    /// A session with an environment gives it to the job; a job naming
    /// another one is refused ([`super::environment::for_job`]).
    ///
    /// A session that keeps a managed workspace is refused here: only the
    /// daemon, which orders its jobs, runs them ([`Sessions::resolve_managed`]).
    pub fn resolve(&self, job: &mut crate::exec::job::Job) -> Result<(), SessionError> {
        self.resolve_with(job, None)
    }

    /// [`Sessions::resolve`] for the daemon: a job naming a session that
    /// keeps a managed workspace runs in it (a job naming a workspace of
    /// its own besides is refused), its files given to `owner`.
    pub fn resolve_managed(
        &self,
        job: &mut crate::exec::job::Job,
        owner: Option<(u32, u32)>,
    ) -> Result<(), SessionError> {
        self.resolve_with(job, Some(owner))
    }

    fn resolve_with(
        &self,
        job: &mut crate::exec::job::Job,
        daemon: Option<Option<(u32, u32)>>,
    ) -> Result<(), SessionError> {
        let Some(id) = job.unresolved_session().map(str::to_owned) else {
            return Ok(());
        };
        let record = self.read(&id)?;
        super::environment::for_job(&id, record.environment.as_ref(), job)?;
        if record.workspace.is_some() {
            let Some(owner) = daemon else {
                return Err(SessionError::ManagedByDaemon(id));
            };
            if job.workspace.is_some() {
                return Err(SessionError::WorkspaceGiven(id));
            }
            self.make_workspace(&id, owner)?;
            job.workspace = Some(self.workspace_path(&id));
            job.managed_workspace = true;
        }
        job.resolve_session(record.skills.into_iter().map(|s| s.binding).collect());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        let id = new_session_id();
        assert!(valid_session_id(&id), "{id}");
        for bad in [
            "",
            "ses-",
            "s1",
            "ses-ABCDEF0123456789abcdef0123456789",
            "ses-0123456789abcdef0123456789abcde",
            "ses-0123456789abcdef0123456789abcdef0",
            "ses-../../../../etc/passwd0000000000",
        ] {
            assert!(!valid_session_id(bad), "{bad}");
        }
    }
}
