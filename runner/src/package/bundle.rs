//! Bundles: the transport JSON of docs/formats.md.
//!
//! `{"skills":[{"id","revision","version","hash","files":[{"path","size","hash","content"}]}]}`
//! with `content` in standard base64 that must round-trip exactly. A parsed
//! bundle is trusted only after every check passed: admissible paths and
//! ids, no duplicate path or id, `SKILL.md` with valid front matter, limits,
//! each file's size and hash, and finally the package hash recomputed from
//! the decoded bytes — so a bundle whose per-file hashes were rewritten to
//! match tampered bytes is still refused.
//!
//! Pure code over bytes in memory.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::ErrorKind;
use crate::package::format::{self, LimitTally, PackageError, PackageLimits, SkillDoc, SKILL_MD};
use crate::package::hash::{self, Binding};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawBundle {
    skills: Vec<RawSkill>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawSkill {
    id: String,
    revision: u64,
    version: String,
    hash: String,
    files: Vec<RawFile>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    path: String,
    size: u64,
    hash: String,
    content: String,
}

/// One file of a verified bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    pub path: String,
    pub hash: String,
    pub bytes: Vec<u8>,
}

/// One verified skill of a bundle; files in package-hash order.
#[derive(Debug, Clone)]
pub struct BundleSkill {
    pub binding: Binding,
    pub files: Vec<BundleFile>,
    pub doc: SkillDoc,
}

impl BundleSkill {
    /// `(path, file hash)` in package-hash order.
    pub fn file_hashes(&self) -> Vec<(String, String)> {
        self.files
            .iter()
            .map(|f| (f.path.clone(), f.hash.clone()))
            .collect()
    }
}

/// Why a bundle was refused. Each names the skill (and file) at fault.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("the bundle is not valid JSON of the bundle format: {}", crate::text::single_line(&.0.to_string()))]
    Json(#[from] serde_json::Error),
    #[error("skill {id:?}: {source}")]
    Package { id: String, source: PackageError },
    #[error("skill {id:?} appears twice in the bundle")]
    DuplicateId { id: String },
    #[error("skill {id:?}, file {path:?}: content is not canonical standard base64")]
    Base64 { id: String, path: String },
    #[error("skill {id:?}, file {path:?}: content is {actual} bytes, but size says {declared}")]
    Size {
        id: String,
        path: String,
        declared: u64,
        actual: u64,
    },
    #[error("skill {id:?}, file {path:?}: content hashes to {actual}, but hash says {declared}")]
    FileHash {
        id: String,
        path: String,
        declared: String,
        actual: String,
    },
    #[error("skill {id:?}: files hash to package hash {actual}, but the bundle pins {declared}")]
    PackageHash {
        id: String,
        declared: String,
        actual: String,
    },
    #[error("the bundle holds no skill")]
    Empty,
    #[error("the bundle holds {count} skills, over the limit of {limit}; upload them in bundles of at most {limit}")]
    TooManySkills { count: usize, limit: usize },
}

impl BundleError {
    /// Machine-readable kind for results and HTTP errors.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BundleError::FileHash { .. } | BundleError::PackageHash { .. } => {
                ErrorKind::HashMismatch
            }
            _ => ErrorKind::BadBundle,
        }
    }
}

/// Parses and verifies a bundle.
pub fn parse(json: &[u8], limits: &PackageLimits) -> Result<Vec<BundleSkill>, BundleError> {
    let raw: RawBundle = serde_json::from_slice(json)?;
    if raw.skills.is_empty() {
        return Err(BundleError::Empty);
    }
    if raw.skills.len() > limits.max_bundle_skills {
        return Err(BundleError::TooManySkills {
            count: raw.skills.len(),
            limit: limits.max_bundle_skills,
        });
    }
    let mut out: Vec<BundleSkill> = Vec::with_capacity(raw.skills.len());
    for skill in raw.skills {
        if out.iter().any(|s| s.binding.id == skill.id) {
            return Err(BundleError::DuplicateId { id: skill.id });
        }
        out.push(verify_skill(skill, limits)?);
    }
    Ok(out)
}

fn verify_skill(raw: RawSkill, limits: &PackageLimits) -> Result<BundleSkill, BundleError> {
    let binding = Binding {
        id: raw.id,
        revision: raw.revision,
        version: raw.version,
        hash: raw.hash,
    };
    let id = binding.id.clone();
    let pkg = |source| BundleError::Package {
        id: id.clone(),
        source,
    };
    format::check_binding(&binding).map_err(pkg)?;
    let mut tally = LimitTally::new(*limits);
    let mut files: Vec<BundleFile> = Vec::with_capacity(raw.files.len());
    for f in raw.files {
        format::check_path(&f.path).map_err(pkg)?;
        tally.add(&f.path, f.size).map_err(pkg)?;
        if !hash::is_hex_digest(&f.hash) {
            return Err(pkg(PackageError::BadHash { hash: f.hash }));
        }
        let engine = base64::engine::general_purpose::STANDARD;
        let bytes = engine
            .decode(f.content.as_bytes())
            .ok()
            .filter(|b| engine.encode(b) == f.content)
            .ok_or_else(|| BundleError::Base64 {
                id: id.clone(),
                path: f.path.clone(),
            })?;
        if bytes.len() as u64 != f.size {
            return Err(BundleError::Size {
                id: id.clone(),
                path: f.path,
                declared: f.size,
                actual: bytes.len() as u64,
            });
        }
        let actual = hash::file_hash(&bytes);
        if actual != f.hash {
            return Err(BundleError::FileHash {
                id: id.clone(),
                path: f.path,
                declared: f.hash,
                actual,
            });
        }
        files.push(BundleFile {
            path: f.path,
            hash: f.hash,
            bytes,
        });
    }
    hash::sort_utf16(&mut files, |f| &f.path);
    if let Some(w) = files.windows(2).find(|w| w[0].path == w[1].path) {
        return Err(pkg(PackageError::DuplicatePath {
            path: w[0].path.clone(),
        }));
    }
    let md = files
        .iter()
        .find(|f| f.path == SKILL_MD)
        .ok_or_else(|| pkg(PackageError::MissingSkillMd))?;
    let doc = format::parse_skill_md(&md.bytes).map_err(pkg)?;
    let actual = hash::package_hash(files.iter().map(|f| (&f.path[..], &f.bytes[..])))
        .map_err(|e| pkg(PackageError::Hash(e)))?;
    if actual != binding.hash {
        return Err(BundleError::PackageHash {
            id,
            declared: binding.hash,
            actual,
        });
    }
    Ok(BundleSkill {
        binding,
        files,
        doc,
    })
}

/// In-memory files of one package: `(path, bytes)`.
pub type Files = Vec<(String, Vec<u8>)>;

/// Renders skills (files already in memory, any order) as bundle JSON.
/// The package hash is computed here, so the bundle is consistent.
pub fn render(skills: &[(Binding, Files)]) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let raw = RawBundle {
        skills: skills
            .iter()
            .map(|(b, files)| {
                let mut files: Vec<&(String, Vec<u8>)> = files.iter().collect();
                hash::sort_utf16(&mut files, |f| &f.0);
                RawSkill {
                    id: b.id.clone(),
                    revision: b.revision,
                    version: b.version.clone(),
                    hash: b.hash.clone(),
                    files: files
                        .into_iter()
                        .map(|(path, bytes)| RawFile {
                            path: path.clone(),
                            size: bytes.len() as u64,
                            hash: hash::file_hash(bytes),
                            content: engine.encode(bytes),
                        })
                        .collect(),
                }
            })
            .collect(),
    };
    // Plain data always serializes.
    serde_json::to_string(&raw).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle of `n` one-file skills `s0`, `s1`, …
    fn bundle_of(n: usize) -> String {
        let skills: Vec<(Binding, Files)> = (0..n)
            .map(|i| {
                let id = format!("s{i}");
                let md = format!("---\nname: {id}\ndescription: d\n---\n").into_bytes();
                let files = vec![(SKILL_MD.to_owned(), md)];
                let hash = hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..]))).unwrap();
                let binding = Binding {
                    id,
                    revision: 1,
                    version: "1.0.0".into(),
                    hash,
                };
                (binding, files)
            })
            .collect();
        render(&skills)
    }

    #[test]
    fn a_bundle_over_the_skill_cap_is_refused_before_any_skill_is_verified() {
        let limits = PackageLimits {
            max_bundle_skills: 3,
            ..PackageLimits::default()
        };
        assert_eq!(parse(bundle_of(3).as_bytes(), &limits).unwrap().len(), 3);
        let e = parse(bundle_of(4).as_bytes(), &limits).unwrap_err();
        assert!(
            matches!(e, BundleError::TooManySkills { count: 4, limit: 3 }),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::BadBundle);
        assert_eq!(
            e.to_string(),
            "the bundle holds 4 skills, over the limit of 3; upload them in bundles of at most 3"
        );
    }

    #[test]
    fn the_default_skill_cap_admits_a_bundle_of_its_size_and_no_more() {
        let limits = PackageLimits::default();
        let cap = limits.max_bundle_skills;
        assert!(parse(bundle_of(cap).as_bytes(), &limits).is_ok());
        assert!(matches!(
            parse(bundle_of(cap + 1).as_bytes(), &limits),
            Err(BundleError::TooManySkills { .. })
        ));
    }
}
