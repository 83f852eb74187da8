//! Path aliases (docs/formats.md, "The job").
//!
//! `$SCIENCEDISCOVERY_SKILLS_DIR/x`, `${SCIENCEDISCOVERY_SKILLS_DIR}/x` and
//! `/skills/x` all name package file `x`; the same three spellings exist for
//! the extensions dir (`/skill-extensions`). One resolver serves every place
//! the runner takes a path (argv, resource reads, explain), on both
//! platforms: it parses the alias into a [`Logical`] path, refusing anything
//! that would leave its root, and [`Logical::sandbox`] or [`Logical::host`]
//! spells it for the platform (`/skills/x` in bubblewrap, the host path
//! under Seatbelt; [`rewrite_argv`] picks one by [`Spelling`]).
//!
//! Nothing else is interpreted: an argv element that is not an alias is
//! passed through byte for byte.
//!
//! Pure code: no I/O.

use std::path::{Path, PathBuf};

/// Where the snapshot root is mounted inside the sandbox (read-only).
pub const SKILLS_DIR: &str = "/skills";
/// Where the writable extensions dir is mounted inside the sandbox.
pub const EXTENSIONS_DIR: &str = "/skill-extensions";
/// The default extensions dir, relative to the workspace: a job without
/// `extensions_dir` gets this folder of its workspace.
pub const DEFAULT_EXTENSIONS: &str = ".sciencediscovery/skill-extensions";
/// Where the workspace is mounted inside the sandbox; the command's
/// working directory.
pub const WORKSPACE_DIR: &str = "/workspace";
/// Where a job's environment appears in the sandbox (Linux), read-only;
/// the same as `package::environment::resolve::MOUNT_POINT`.
pub const ENVIRONMENT_DIR: &str = "/opt/skill-env";

/// Environment variable naming the snapshot root inside the sandbox.
pub const SKILLS_VAR: &str = "SCIENCEDISCOVERY_SKILLS_DIR";
/// Environment variable naming the extensions dir inside the sandbox.
pub const EXTENSIONS_VAR: &str = "SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR";

/// Which aliased root a path is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    Skills,
    Extensions,
}

impl Root {
    fn var(self) -> &'static str {
        match self {
            Root::Skills => SKILLS_VAR,
            Root::Extensions => EXTENSIONS_VAR,
        }
    }

    /// Where the root is mounted in the Linux sandbox.
    pub fn sandbox_path(self) -> &'static str {
        match self {
            Root::Skills => SKILLS_DIR,
            Root::Extensions => EXTENSIONS_DIR,
        }
    }
}

/// A path below an aliased root: `rel` is normalized, `/`-separated, and
/// empty for the root itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logical {
    pub root: Root,
    pub rel: String,
}

/// An alias that tries to leave its root.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{input:?} leaves {root} through '..'; paths under it must stay inside")]
pub struct AliasError {
    pub input: String,
    pub root: &'static str,
}

/// Parses `s` as an alias. `None`: not an alias (pass it through).
pub fn parse(s: &str) -> Option<Result<Logical, AliasError>> {
    for root in [Root::Skills, Root::Extensions] {
        let var = root.var();
        let prefixes = [
            format!("${{{var}}}"),
            format!("${var}"),
            root.sandbox_path().to_owned(),
        ];
        for prefix in &prefixes {
            let Some(rest) = s.strip_prefix(prefix.as_str()) else {
                continue;
            };
            // `$VAR` must end at a separator: `$SCIENCEDISCOVERY_SKILLS_DIRX`
            // is another variable, `/skillsfoo` another path.
            if !(rest.is_empty() || rest.starts_with('/')) {
                continue;
            }
            return Some(
                normalize(rest)
                    .map(|rel| Logical { root, rel })
                    .ok_or_else(|| AliasError {
                        input: s.to_owned(),
                        root: root.sandbox_path(),
                    }),
            );
        }
    }
    None
}

/// Resolves `.`, `..` and repeated `/`; `None` when `..` climbs above the
/// root.
fn normalize(rest: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for seg in rest.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

impl Logical {
    /// The path inside the Linux sandbox.
    pub fn sandbox(&self) -> String {
        join(self.root.sandbox_path(), &self.rel)
    }

    /// The path on the host, given where each root really is.
    pub fn host(&self, skills: &Path, extensions: &Path) -> PathBuf {
        let base = match self.root {
            Root::Skills => skills,
            Root::Extensions => extensions,
        };
        if self.rel.is_empty() {
            base.to_owned()
        } else {
            base.join(&self.rel)
        }
    }
}

fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        base.to_owned()
    } else {
        format!("{base}/{rel}")
    }
}

/// How argv aliases are spelled for the platform.
#[derive(Debug, Clone, Copy)]
pub enum Spelling<'a> {
    /// Linux: the sandbox's own mount points.
    Sandbox,
    /// macOS: real host paths.
    Host {
        skills: &'a Path,
        extensions: &'a Path,
    },
}

/// Rewrites every alias in `argv`; other elements pass through untouched.
pub fn rewrite_argv(argv: &[String], spelling: Spelling<'_>) -> Result<Vec<String>, AliasError> {
    argv.iter()
        .map(|arg| match parse(arg) {
            None => Ok(arg.clone()),
            Some(Err(e)) => Err(e),
            Some(Ok(logical)) => Ok(match spelling {
                Spelling::Sandbox => logical.sandbox(),
                Spelling::Host { skills, extensions } => logical
                    .host(skills, extensions)
                    .to_string_lossy()
                    .into_owned(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(root: Root, rel: &str) -> Option<Result<Logical, AliasError>> {
        Some(Ok(Logical {
            root,
            rel: rel.into(),
        }))
    }

    #[test]
    fn three_spellings_name_one_file() {
        for s in [
            "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh",
            "${SCIENCEDISCOVERY_SKILLS_DIR}/hello/scripts/greet.sh",
            "/skills/hello/scripts/greet.sh",
            "/skills//hello/./scripts/greet.sh",
        ] {
            assert_eq!(parse(s), l(Root::Skills, "hello/scripts/greet.sh"), "{s}");
        }
        assert_eq!(parse("/skills"), l(Root::Skills, ""));
        assert_eq!(
            parse("$SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/x"),
            l(Root::Extensions, "x")
        );
        assert_eq!(parse("/skill-extensions/a/b"), l(Root::Extensions, "a/b"));
    }

    #[test]
    fn non_aliases_pass_through() {
        for s in [
            "sh",
            "/skillsfoo",
            "$SCIENCEDISCOVERY_SKILLS_DIRX/a",
            "--file=/skills/x",
            "skills/x",
            "/usr/bin/python3",
            "$HOME/x",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
    }

    #[test]
    fn escapes_are_refused() {
        for s in [
            "/skills/../etc/passwd",
            "$SCIENCEDISCOVERY_SKILLS_DIR/a/../../x",
            "${SCIENCEDISCOVERY_SKILLS_DIR}/..",
            "/skill-extensions/../../etc",
        ] {
            assert!(matches!(parse(s), Some(Err(_))), "{s}");
        }
        // Climbing inside the root is fine.
        assert_eq!(parse("/skills/a/../b"), l(Root::Skills, "b"));
    }

    #[test]
    fn rewriting_per_platform() {
        let argv: Vec<String> = ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/s.sh", "world"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            rewrite_argv(&argv, Spelling::Sandbox).unwrap(),
            ["sh", "/skills/hello/s.sh", "world"]
        );
        let host = rewrite_argv(
            &argv,
            Spelling::Host {
                skills: Path::new("/private/var/x/skills"),
                extensions: Path::new("/e"),
            },
        )
        .unwrap();
        assert_eq!(host, ["sh", "/private/var/x/skills/hello/s.sh", "world"]);
    }
}
