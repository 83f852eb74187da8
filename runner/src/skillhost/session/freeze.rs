//! Creating a session (steps 1 to 3 of the session docs): every requested
//! skill is resolved to exact bytes, the delivery mode is decided, and
//! only then are new bytes frozen into the store and the record written.
//!
//! Invariants:
//! - a refused request (a bad tool name, a skill selected twice, a
//!   composition the tools cannot serve) publishes nothing;
//! - bytes already in the store under the same hash are frozen as the
//!   binding that holds them, revision and version included; new bytes
//!   take the skill's next revision, so a revision grows only when the
//!   bytes change;
//! - when another process publishes other bytes under the revision chosen,
//!   the freeze looks again, at most [`FREEZE_TRIES`] times.

use std::path::PathBuf;

use super::delivery;
use super::disk::new_session_id;
use super::host::SessionHost;
use super::records::{Provenance, SessionDoc, SessionRecord, SessionSkill, FORMAT};
use super::request::{SessionRequest, SkillSpec};
use super::SessionError;
use crate::package::format::{self, PackageError, SKILL_MD};
use crate::package::hash::{self, Binding};
use crate::package::store::StoreError;
use crate::skillhost::catalog::rank;
use crate::skillhost::catalog::{self, Catalog, Layer, SkillKind};

/// How many times a freeze retries when another process published a
/// different package under the revision it chose.
pub(super) const FREEZE_TRIES: usize = 8;

/// A requested skill resolved to exact bytes, not yet published.
struct Pending {
    id: String,
    description: String,
    headings: String,
    category: Option<String>,
    kind: SkillKind,
    warnings: Vec<String>,
    /// The environment its `SKILL.md` declares.
    environment: Option<crate::package::environment::EnvRef>,
    how: PendingBytes,
}

enum PendingBytes {
    /// Already in the store.
    Stored(Binding),
    /// Read from a catalog folder just now.
    Read {
        hash: String,
        version: String,
        files: Vec<(String, Vec<u8>)>,
        layer: Layer,
        path: Option<PathBuf>,
    },
}

/// The environment skill `id`'s `SKILL.md` declares, if any.
fn declared_environment(
    id: &str,
    doc: &format::SkillDoc,
) -> Result<Option<crate::package::environment::EnvRef>, SessionError> {
    crate::package::environment::declare::declared(doc.front.metadata.as_ref()).map_err(|source| {
        SessionError::Declaration {
            skill: id.to_owned(),
            source,
        }
    })
}

impl SessionHost {
    /// `POST /v1/sessions` with the raw body.
    pub fn create_json(&self, body: &[u8]) -> Result<SessionDoc, SessionError> {
        let req: SessionRequest = serde_json::from_slice(body).map_err(SessionError::Request)?;
        self.create(req)
    }

    /// `POST /v1/sessions`: freezes the skills, decides the delivery mode,
    /// writes the record.
    pub fn create(&self, req: SessionRequest) -> Result<SessionDoc, SessionError> {
        let mut tools: Vec<String> = Vec::with_capacity(req.tools.len());
        for t in req.tools {
            if t.is_empty() || t.chars().count() > 64 || t.chars().any(char::is_control) {
                return Err(SessionError::ToolName(t));
            }
            if let Some(meant) = super::delivery::near_file_tool(&t) {
                return Err(SessionError::NearFileTool { tool: t, meant });
            }
            if !tools.contains(&t) {
                tools.push(t);
            }
        }
        let mut catalog: Option<Catalog> = None;
        let mut pending: Vec<Pending> = Vec::with_capacity(req.skills.len());
        for spec in req.skills {
            let p = match spec {
                SkillSpec::Binding(b) => self.pending_binding(b)?,
                SkillSpec::Name(name) => {
                    catalog::check_name(&name)?;
                    let cat = catalog.get_or_insert_with(|| Catalog::load(&self.catalog));
                    self.pending_name(cat.lookup(&name)?)?
                }
            };
            if pending.iter().any(|q| q.id == p.id) {
                return Err(SessionError::DuplicateSkill(p.id));
            }
            pending.push(p);
        }
        let kinds: Vec<(&str, SkillKind)> =
            pending.iter().map(|p| (p.id.as_str(), p.kind)).collect();
        let delivery = delivery::decide(&tools, &kinds)?;
        let declared: Vec<_> = pending
            .iter()
            .map(|p| (p.id.clone(), p.environment.clone()))
            .collect();
        let environment = super::environment::decide(req.environment, &declared)?;

        let mut skills = Vec::with_capacity(pending.len());
        let mut warnings = Vec::new();
        for p in pending {
            warnings.extend(p.warnings.iter().map(|w| format!("skill {:?}: {w}", p.id)));
            let (binding, provenance) = match p.how {
                PendingBytes::Stored(b) => {
                    let prov = Provenance {
                        id: b.id.clone(),
                        from: "store".into(),
                        path: None,
                        published: false,
                    };
                    (b, prov)
                }
                PendingBytes::Read {
                    hash,
                    version,
                    files,
                    layer,
                    path,
                } => {
                    let (b, published) = self.freeze(&p.id, &hash, &version, &files)?;
                    let prov = Provenance {
                        id: p.id.clone(),
                        from: layer.as_str().into(),
                        path,
                        published,
                    };
                    (b, prov)
                }
            };
            skills.push(SessionSkill {
                binding,
                description: p.description,
                category: p.category,
                kind: p.kind,
                provenance,
                headings: p.headings,
            });
        }
        let bindings: Vec<Binding> = skills.iter().map(|s| s.binding.clone()).collect();
        let record = SessionRecord {
            format: FORMAT,
            id: new_session_id(),
            created_at: crate::text::rfc3339(std::time::SystemTime::now()),
            delivery,
            enabled_tools: tools,
            identity: hash::set_identity(&bindings),
            prompt: delivery::prompt(delivery, &skills),
            tools: delivery::tool_schemas(delivery, &skills),
            skills,
            warnings,
            workspace: req.workspace,
            environment,
        };
        self.sessions.create(&record)?;
        if record.workspace.is_some() {
            // The record first, then its folder: a crash between leaves a
            // record whose folder is made again on its next use.
            if let Err(e) = self
                .sessions
                .make_workspace(&record.id, self.workspace_owner)
            {
                let _ = self.sessions.delete(&record.id);
                return Err(e);
            }
        }
        tracing::info!(session = %record.id, delivery = delivery.as_str(), skills = record.skills.len(), "session created");
        Ok(SessionDoc::from(&record))
    }

    fn pending_binding(&self, b: Binding) -> Result<Pending, SessionError> {
        format::check_binding(&b).map_err(|source| SessionError::Package {
            id: b.id.clone(),
            source,
        })?;
        let pkg = self.store.resolve(&b)?;
        let doc = self.skill_doc(&b.id, &pkg)?;
        Ok(Pending {
            id: b.id.clone(),
            description: doc.front.description.trim().to_owned(),
            headings: rank::headings(&doc.body),
            category: catalog::metadata_str(&doc.front.metadata, "category"),
            kind: SkillKind::of(pkg.files.len()),
            warnings: Vec::new(),
            environment: declared_environment(&b.id, &doc)?,
            how: PendingBytes::Stored(b),
        })
    }

    fn pending_name(&self, entry: &catalog::Entry) -> Result<Pending, SessionError> {
        let files = Catalog::read_files(entry, &self.limits)?;
        let md = files
            .iter()
            .find(|f| f.0 == SKILL_MD)
            .ok_or_else(|| SessionError::Package {
                id: entry.name.clone(),
                source: PackageError::MissingSkillMd,
            })?;
        // The bytes just read are what gets frozen: describe them, not
        // what the scan saw.
        let doc = format::parse_skill_md(&md.1).map_err(|source| SessionError::Package {
            id: entry.name.clone(),
            source,
        })?;
        let hash =
            hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..]))).map_err(|e| {
                SessionError::Package {
                    id: entry.name.clone(),
                    source: e.into(),
                }
            })?;
        let version = catalog::metadata_str(&doc.front.metadata, "version").unwrap_or_else(|| {
            if entry.source == Layer::Builtin {
                env!("CARGO_PKG_VERSION").to_owned()
            } else {
                "0.0.0".to_owned()
            }
        });
        Ok(Pending {
            id: entry.name.clone(),
            description: doc.front.description.trim().to_owned(),
            headings: rank::headings(&doc.body),
            category: catalog::metadata_str(&doc.front.metadata, "category")
                .or_else(|| entry.category.clone()),
            kind: SkillKind::of(files.len()),
            warnings: doc.warnings(Some(&entry.name)),
            environment: declared_environment(&entry.name, &doc)?,
            how: PendingBytes::Read {
                hash,
                version,
                files,
                layer: entry.source,
                path: entry.path.clone(),
            },
        })
    }

    /// The binding the store holds for `id` with `hash` (the latest such
    /// revision, whatever its version); else publishes `files` as `id`'s
    /// next revision under `version`. Returns the binding and whether a
    /// revision was published.
    fn freeze(
        &self,
        id: &str,
        hash: &str,
        version: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<(Binding, bool), SessionError> {
        for _ in 0..FREEZE_TRIES {
            let mut stored = self.store.bindings_of(id)?;
            // Same bytes already published: that is the binding, even when
            // the catalog folder states no version (the store's hello
            // r1 / 1.0.0 must not become r2 / 0.0.0).
            if let Some(b) = stored.iter().rev().find(|b| b.hash == hash) {
                return Ok((b.clone(), false));
            }
            // A revision past u64::MAX would wrap (or panic in a debug
            // build) instead of growing.
            let revision = match stored.pop() {
                None => 1,
                Some(latest) => latest
                    .revision
                    .checked_add(1)
                    .ok_or_else(|| SessionError::LastRevision { id: id.to_owned() })?,
            };
            let binding = Binding {
                id: id.to_owned(),
                revision,
                version: version.to_owned(),
                hash: hash.to_owned(),
            };
            match self.store.publish_files(&binding, files, &self.limits) {
                Ok(_) => return Ok((binding, true)),
                // Someone else took this revision: look again.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::FreezeRace { id: id.to_owned() })
    }
}
