//! The host: [`SessionHost`], one method per session route, each reading
//! the session's record and serving only from the store.
//!
//! Invariants:
//! - a skill, section or file is found in the session's record and the
//!   stored package's index, never by looking at the file system;
//! - a route that returns content records its event first (see
//!   `Returned`): when the event cannot be appended, the content is not
//!   returned.
//!
//! Creating a session is in `freeze.rs`.

use super::delivery;
use super::disk::Sessions;
use super::records::{
    Event, EventKind, EventLog, LoadedSkill, Section, SessionDoc, SessionRecord, SessionSkill,
    SkillList,
};
use super::request::{ResourceQuery, SkillsQuery};
use super::resource::{self, Chunk, ReadRange, MAX_READ_LIMIT};
use super::SessionError;
use crate::datadir::DataDir;
use crate::package::format::{self, PackageError, PackageLimits, SKILL_MD};
use crate::package::store::{IndexEntry, Store, StoredPackage};
use crate::sandbox::paths::{self, Root};
use crate::skillhost::catalog::rank::{self, Doc, Hit, RankIndex, Rankable};
use crate::skillhost::catalog::{self, CatalogConfig};
use crate::text::single_line;

/// The skill host: sessions over one data dir's store, plus the catalog
/// to freeze names from. Immutable; share it behind an `Arc`.
#[derive(Debug, Clone)]
pub struct SessionHost {
    pub(super) store: Store,
    pub(super) sessions: Sessions,
    pub(super) catalog: CatalogConfig,
    pub(super) limits: PackageLimits,
    /// Who the files of managed workspaces belong to: the sandbox user of
    /// a root runner (`None`: the runner's own user).
    pub(super) workspace_owner: Option<(u32, u32)>,
}

/// A session skill as ranked by `list_skills` / `find_skills`.
struct Listed<'a>(&'a SessionSkill);

impl Rankable for Listed<'_> {
    fn hit(&self, score: u32) -> Hit {
        Hit {
            name: self.0.binding.id.clone(),
            description: self.0.description.clone(),
            category: self.0.category.clone(),
            score,
            explain: None,
        }
    }
}

impl SessionHost {
    /// Opens the host on an opened data dir; `catalog` says where catalog
    /// names are looked up.
    pub fn open(data: &DataDir, catalog: CatalogConfig) -> Result<SessionHost, SessionError> {
        let store = Store::open(data)?;
        let sessions = Sessions::new(data);
        Ok(SessionHost {
            store,
            sessions,
            limits: catalog.limits,
            catalog,
            workspace_owner: None,
        })
    }

    /// The host whose managed workspaces belong to `owner` (the sandbox
    /// user, `Identity::switch_to`).
    pub fn with_workspace_owner(mut self, owner: Option<(u32, u32)>) -> SessionHost {
        self.workspace_owner = owner;
        self
    }

    /// Who the files of managed workspaces belong to.
    pub fn workspace_owner(&self) -> Option<(u32, u32)> {
        self.workspace_owner
    }

    /// Opens session `id`'s managed workspace (made again if a crash left
    /// the record without it); refused when the session keeps none.
    pub fn workspace(&self, id: &str) -> Result<super::workspace::Workspace, SessionError> {
        let Some(path) = self.sessions.managed_workspace(id, self.workspace_owner)? else {
            return Err(super::workspace::WorkspaceError::NotManaged(id.to_owned()).into());
        };
        Ok(super::workspace::Workspace::open(
            id,
            &path,
            self.workspace_owner,
        )?)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub(super) fn skill_doc(
        &self,
        id: &str,
        pkg: &StoredPackage,
    ) -> Result<format::SkillDoc, SessionError> {
        let entry = pkg
            .files
            .iter()
            .find(|f| f.path == SKILL_MD)
            .ok_or_else(|| SessionError::Package {
                id: id.to_owned(),
                source: PackageError::MissingSkillMd,
            })?;
        let chunk = resource::read(
            id,
            pkg,
            entry,
            ReadRange {
                offset: None,
                limit: Some(MAX_READ_LIMIT),
            },
        )?;
        format::parse_skill_md(chunk.content.as_bytes()).map_err(|source| SessionError::Package {
            id: id.to_owned(),
            source,
        })
    }

    /// `GET /v1/sessions/{id}`: the session as created.
    pub fn show(&self, id: &str) -> Result<SessionDoc, SessionError> {
        Ok(SessionDoc::from(&self.sessions.read(id)?))
    }

    /// `GET /v1/sessions/{id}/skills`: `list_skills` without a query
    /// (every skill, by name), `find_skills` / `list_skills` with one
    /// (ranked, `limit` best, default 10, at most 100).
    pub fn skills(&self, id: &str, q: &SkillsQuery) -> Result<SkillList, SessionError> {
        let rec = self.sessions.read(id)?;
        let items: Vec<Listed<'_>> = rec
            .skills
            .iter()
            .filter(|s| {
                q.category
                    .as_deref()
                    .is_none_or(|c| s.category.as_deref() == Some(c))
            })
            .map(Listed)
            .collect();
        let index = RankIndex::new(items.iter().map(|l| Doc {
            name: &l.0.binding.id,
            description: &l.0.description,
            headings: &l.0.headings,
        }));
        let query = q.query.as_deref().unwrap_or("");
        let limit = match q.limit {
            Some(0) => {
                return Err(SessionError::BadLimit {
                    limit: 0,
                    max: rank::MAX_LIMIT as u64,
                })
            }
            Some(n) => n.min(rank::MAX_LIMIT),
            None if query.trim().is_empty() => items.len(),
            None => rank::DEFAULT_LIMIT,
        };
        Ok(SkillList {
            session: rec.id.clone(),
            delivery: rec.delivery,
            category: q.category.clone(),
            result: rank::find(&items, &index, query, limit),
        })
    }

    /// Finds a session's skill by name (validated first).
    fn skill<'a>(
        &self,
        rec: &'a SessionRecord,
        name: &str,
    ) -> Result<(&'a SessionSkill, StoredPackage), SessionError> {
        catalog::check_name(name)?;
        let s = rec
            .skills
            .iter()
            .find(|s| s.binding.id == name)
            .ok_or_else(|| SessionError::UnknownSkill {
                session: rec.id.clone(),
                name: name.to_owned(),
                known: known(rec.skills.iter().map(|s| s.binding.id.as_str())),
            })?;
        let pkg = self.store.resolve(&s.binding)?;
        Ok((s, pkg))
    }

    /// Every frozen skill of session `id` with its stored package: what
    /// an MCP client lists and reads (`skillhost::mcp`).
    pub fn frozen(&self, id: &str) -> Result<Vec<(SessionSkill, StoredPackage)>, SessionError> {
        let rec = self.sessions.read(id)?;
        rec.skills
            .iter()
            .map(|s| Ok((s.clone(), self.store.resolve(&s.binding)?)))
            .collect()
    }

    /// Appends the event of an activation that returned content.
    fn record(
        &self,
        rec: &SessionRecord,
        kind: EventKind,
        skill: &SessionSkill,
        returned: Returned<'_>,
    ) -> Result<(), SessionError> {
        self.sessions.append(
            &rec.id,
            &Event {
                at: crate::text::rfc3339(std::time::SystemTime::now()),
                kind,
                skill: skill.binding.id.clone(),
                revision: skill.binding.revision,
                package_hash: skill.binding.hash.clone(),
                file: returned.file.to_owned(),
                offset: returned.offset,
                bytes: returned.bytes,
                truncated: returned.truncated,
            },
        )
    }

    /// `GET /v1/sessions/{id}/skills/{name}`: `Skill`, `load_skill`,
    /// `read_skill`. Records a `load_skill` event.
    pub fn load(&self, id: &str, name: &str) -> Result<LoadedSkill, SessionError> {
        let rec = self.sessions.read(id)?;
        let (s, pkg) = self.skill(&rec, name)?;
        let doc = self.skill_doc(name, &pkg)?;
        let loaded = LoadedSkill {
            name: s.binding.id.clone(),
            description: s.description.clone(),
            version: s.binding.version.clone(),
            revision: s.binding.revision,
            package_hash: s.binding.hash.clone(),
            package_path: delivery::package_path(&s.binding.id),
            body: doc.body,
            sections: pkg
                .files
                .iter()
                .filter(|f| f.path != SKILL_MD)
                .map(|f| Section {
                    name: f.path.clone(),
                    size: f.size,
                })
                .collect(),
        };
        let returned = Returned {
            file: SKILL_MD,
            offset: None,
            bytes: loaded.body.len() as u64,
            truncated: false,
        };
        self.record(&rec, EventKind::LoadSkill, s, returned)?;
        Ok(loaded)
    }

    /// `GET /v1/sessions/{id}/skills/{name}/sections/{section}`:
    /// `load_skill_section`. `section` is a file's path in the package, or
    /// its file name (with or without extension) when that is unique.
    /// Records a `load_section` event.
    pub fn section(
        &self,
        id: &str,
        name: &str,
        section: &str,
        range: ReadRange,
    ) -> Result<Chunk, SessionError> {
        let rec = self.sessions.read(id)?;
        let (s, pkg) = self.skill(&rec, name)?;
        format::check_path(section).map_err(|source| SessionError::BadSection {
            section: section.to_owned(),
            source,
        })?;
        let sections: Vec<&IndexEntry> = pkg.files.iter().filter(|f| f.path != SKILL_MD).collect();
        let unknown = || SessionError::UnknownSection {
            skill: name.to_owned(),
            section: section.to_owned(),
            known: if sections.is_empty() {
                "none (SKILL.md alone; load the skill itself)".to_owned()
            } else {
                known(sections.iter().map(|f| f.path.as_str()))
            },
        };
        let entry = match sections.iter().find(|f| f.path == section) {
            Some(e) => *e,
            None => {
                let by_name: Vec<&IndexEntry> = sections
                    .iter()
                    .copied()
                    .filter(|f| {
                        let file = f.path.rsplit('/').next().unwrap_or(&f.path);
                        let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
                        file == section || stem == section
                    })
                    .collect();
                match by_name.as_slice() {
                    [one] => *one,
                    [] => return Err(unknown()),
                    many => {
                        return Err(SessionError::AmbiguousSection {
                            skill: name.to_owned(),
                            section: section.to_owned(),
                            candidates: known(many.iter().map(|f| f.path.as_str())),
                        })
                    }
                }
            }
        };
        let chunk = resource::read(name, &pkg, entry, range)?;
        self.record(&rec, EventKind::LoadSection, s, Returned::chunk(&chunk))?;
        Ok(chunk)
    }

    /// `GET /v1/sessions/{id}/resources?path=&offset=&limit=`:
    /// `read_skill_resource`. `path` is one of the three aliases of
    /// docs/formats.md and must name a file of one of the session's packages.
    /// Records a `read_resource` event.
    pub fn resource(&self, id: &str, q: &ResourceQuery) -> Result<Chunk, SessionError> {
        let rec = self.sessions.read(id)?;
        let not_package = || SessionError::NotPackagePath {
            path: q.path.clone(),
        };
        let logical = match paths::parse(&q.path) {
            None => return Err(not_package()),
            Some(r) => r?,
        };
        if logical.root != Root::Skills {
            return Err(not_package());
        }
        let (skill_id, rel) = logical
            .rel
            .split_once('/')
            .unwrap_or((logical.rel.as_str(), ""));
        if skill_id.is_empty() {
            return Err(not_package());
        }
        let (s, pkg) = self.skill(&rec, skill_id)?;
        let files = || known(pkg.files.iter().map(|f| f.path.as_str()));
        let Some(entry) = pkg.files.iter().find(|f| f.path == rel) else {
            let prefix = format!("{rel}/");
            if rel.is_empty() || pkg.files.iter().any(|f| f.path.starts_with(&prefix)) {
                return Err(SessionError::NotAFile {
                    path: q.path.clone(),
                    skill: skill_id.to_owned(),
                    files: files(),
                });
            }
            return Err(SessionError::NoSuchFile {
                path: q.path.clone(),
                skill: skill_id.to_owned(),
                files: files(),
            });
        };
        let chunk = resource::read(
            skill_id,
            &pkg,
            entry,
            ReadRange {
                offset: q.offset,
                limit: q.limit,
            },
        )?;
        self.record(&rec, EventKind::ReadResource, s, Returned::chunk(&chunk))?;
        Ok(chunk)
    }

    /// `GET /v1/sessions/{id}/events`: the activation evidence.
    pub fn events(&self, id: &str) -> Result<EventLog, SessionError> {
        Ok(EventLog {
            session: id.to_owned(),
            events: self.sessions.events(id)?,
        })
    }
}

/// What an activation returned, for its event.
struct Returned<'a> {
    file: &'a str,
    offset: Option<u64>,
    bytes: u64,
    truncated: bool,
}

impl<'a> Returned<'a> {
    fn chunk(c: &'a Chunk) -> Returned<'a> {
        Returned {
            file: &c.file,
            offset: Some(c.offset),
            bytes: c.returned,
            truncated: c.truncated,
        }
    }
}

/// A short list of names for a message (at most 20), on one line.
fn known<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        return "none".to_owned();
    }
    let mut s = names
        .iter()
        .take(20)
        .map(|n| single_line(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 20 {
        s.push_str(&format!(" and {} more", names.len() - 20));
    }
    s
}
