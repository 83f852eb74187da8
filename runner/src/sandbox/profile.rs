//! Sandbox profiles as data (`profiles/*.toml`).
//!
//! A profile says which host paths a command sees, whether it has a
//! network, which syscalls are refused, and the default limits. It is
//! parsed with unknown fields refused, validated, and then rendered by
//! [`crate::sandbox::bwrap`] (bubblewrap) or the `seatbelt` crate (macOS). Built-in
//! profiles are compiled into the binary from `profiles/`; a job may also
//! name a profile file by path.
//!
//! Mount operations are an ordered list: later operations win. `mirror`
//! depends on the host (symlink or folder), so [`Profile::resolve_mounts`]
//! turns the list into concrete [`Mount`]s given a view of the host; the
//! rendering itself stays pure.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Built-in profiles: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[("default", include_str!("../../../profiles/default.toml"))];

/// The same profiles, in [`BUILTIN`]'s order, as JSON converted from that
/// TOML by `runner/build.rs`: what a process loads them from. (Parsing
/// the TOML at every start cost `run` a tenth of a millisecond, most of it
/// faulting in the TOML parser's code; the JSON reader is used anyway.)
const BUILTIN_JSON: &[&str] = &[include_str!(concat!(
    env!("OUT_DIR"),
    "/profile-default.json"
))];

/// Network policy of a profile or job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Empty network namespace; sockets other than AF_UNIX refused.
    None,
    /// A network namespace with loopback only, TCP sockets allowed (to
    /// reach the proxy's forwarder there): what a job's allowlist gives
    /// (see [`crate::sandbox::net`]). Never a profile's own setting.
    #[serde(skip)]
    Proxy,
}

/// Default limits of a profile; a job overrides each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultLimits {
    pub timeout_ms: u64,
    pub output_bytes: u64,
    pub memory_bytes: u64,
    pub pids: u64,
    pub file_size_bytes: u64,
    pub tmp_bytes: u64,
    pub open_files: u64,
    /// What a command may add to the host disk (workspace and extensions
    /// together); absent in older profile files, which get 1 GiB.
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
}

fn default_disk_bytes() -> u64 {
    1 << 30
}

/// One mount operation as written in a profile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MountRule {
    /// Bind `src` read-only at `dest`; `src` must exist.
    RoBind { src: PathBuf, dest: PathBuf },
    /// Like `ro-bind`, skipped when `src` is missing.
    RoBindTry { src: PathBuf, dest: PathBuf },
    /// A host symlink becomes the same symlink; a folder is bound
    /// read-only; a missing path is skipped.
    Mirror { src: PathBuf, dest: PathBuf },
}

/// A concrete mount after looking at the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    RoBind { src: PathBuf, dest: PathBuf },
    RoBindTry { src: PathBuf, dest: PathBuf },
    Symlink { target: PathBuf, dest: PathBuf },
}

/// What a host path is, as far as `mirror` cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEntry {
    Missing,
    Symlink(PathBuf),
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxSection {
    pub mounts: Vec<MountRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SeccompSection {
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MacosSection {
    pub read_only_subpaths: Vec<String>,
    pub read_only_literals: Vec<String>,
}

/// A validated profile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub network: Network,
    pub limits: DefaultLimits,
    pub linux: LinuxSection,
    pub seccomp: SeccompSection,
    pub macos: MacosSection,
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("no built-in profile is named {name:?}; built-in profiles: {known}")]
    Unknown { name: String, known: String },
    #[error("cannot read profile {}: {source}", crate::text::single_line(&path.display().to_string()))]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {origin} is not valid: {reason}")]
    Invalid { origin: String, reason: String },
}

/// Paths the runner itself places in the sandbox; a profile may not mount
/// over them.
pub const RESERVED_DESTS: &[&str] = &[
    "/",
    "/skills",
    "/skill-extensions",
    "/workspace",
    "/tmp",
    "/proc",
    "/dev",
    "/etc/passwd",
    "/etc/group",
    "/run/skill-runner",
];

impl Profile {
    /// Loads a built-in profile by name, or a profile file when `spec`
    /// contains a `/` (relative paths resolve against `base`).
    pub fn load(spec: &str, base: &Path) -> Result<Profile, ProfileError> {
        const PROFILE_LIMIT: u64 = 1 << 20;
        if spec.contains('/') {
            let path = base.join(spec);
            let read_err = |source| ProfileError::Read {
                path: path.clone(),
                source,
            };
            // A regular file of bounded size: never a device or a FIFO
            // (`/dev/zero` would be read until memory runs out).
            let meta = std::fs::metadata(&path).map_err(read_err)?;
            if !meta.is_file() || meta.len() > PROFILE_LIMIT {
                return Err(read_err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file of at most 1 MiB",
                )));
            }
            let text = std::fs::read_to_string(&path).map_err(read_err)?;
            return Profile::parse(&text, &path.display().to_string());
        }
        let Some(i) = BUILTIN.iter().position(|(name, _)| *name == spec) else {
            return Err(ProfileError::Unknown {
                name: spec.to_owned(),
                known: BUILTIN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        // Built-in profiles are parsed once per process (a daemon loads one
        // per job).
        static PARSED: std::sync::OnceLock<Vec<Result<Profile, String>>> =
            std::sync::OnceLock::new();
        let parsed = PARSED.get_or_init(|| {
            BUILTIN
                .iter()
                .zip(BUILTIN_JSON)
                .map(|((name, _), json)| {
                    Profile::parse_json(json, &format!("built-in {name:?}")).map_err(|e| match e {
                        ProfileError::Invalid { reason, .. } => reason,
                        other => other.to_string(),
                    })
                })
                .collect()
        });
        parsed[i].clone().map_err(|reason| ProfileError::Invalid {
            origin: format!("built-in {spec:?}"),
            reason,
        })
    }

    /// Parses and validates profile TOML.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        let invalid = |reason: String| ProfileError::Invalid {
            origin: origin.to_owned(),
            reason,
        };
        let p: Profile = toml::from_str(text).map_err(|e| {
            // TOML messages run over several lines; keep one.
            let lines: Vec<&str> = e.message().lines().map(str::trim).collect();
            invalid(crate::text::single_line(&lines.join("; ")))
        })?;
        p.validate(origin)
    }

    /// A built-in profile from its JSON form ([`BUILTIN_JSON`]), validated
    /// as [`Profile::parse`] validates one.
    fn parse_json(json: &str, origin: &str) -> Result<Profile, ProfileError> {
        let p: Profile = serde_json::from_str(json).map_err(|e| ProfileError::Invalid {
            origin: origin.to_owned(),
            reason: e.to_string(),
        })?;
        p.validate(origin)
    }

    /// The checks every profile passes, however it was read.
    fn validate(self, origin: &str) -> Result<Profile, ProfileError> {
        let invalid = |reason: String| ProfileError::Invalid {
            origin: origin.to_owned(),
            reason,
        };
        let p = self;
        for rule in &p.linux.mounts {
            let (MountRule::RoBind { src, dest }
            | MountRule::RoBindTry { src, dest }
            | MountRule::Mirror { src, dest }) = rule;
            for path in [src, dest] {
                if !path.is_absolute()
                    || path
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
                {
                    return Err(invalid(format!(
                        "mount path {} must be absolute, without '..'",
                        crate::text::single_line(&path.display().to_string())
                    )));
                }
            }
            let reserved = RESERVED_DESTS.iter().any(|r| {
                let r = Path::new(r);
                dest == r || (r != Path::new("/") && dest.starts_with(r))
            });
            if reserved {
                return Err(invalid(format!(
                    "mount destination {} is reserved for the runner",
                    crate::text::single_line(&dest.display().to_string())
                )));
            }
        }
        #[cfg(target_os = "linux")]
        for name in &p.seccomp.deny {
            if crate::sandbox::syscalls::syscall_number(name).is_none() {
                return Err(invalid(format!("unknown syscall {name:?} in seccomp.deny")));
            }
        }
        let l = &p.limits;
        if l.timeout_ms == 0
            || l.pids == 0
            || l.memory_bytes == 0
            || l.tmp_bytes == 0
            || l.disk_bytes == 0
        {
            return Err(invalid("limits must be positive".into()));
        }
        Ok(p)
    }

    /// Turns mount rules into concrete mounts, asking `host` what each
    /// `mirror` source is. Order is kept.
    ///
    /// Two kinds of bind are left out, since each costs bubblewrap a mount,
    /// a read of the mount table and a read-only remount, and neither shows
    /// the sandbox anything it would not see anyway:
    /// - a `ro-bind-try` whose source is missing now (bubblewrap would skip
    ///   it, so the argv would name a mount that is not made);
    /// - a bind of a path onto itself inside an earlier read-only bind of
    ///   an ancestor onto itself (`/usr/share/zoneinfo` within `/usr`),
    ///   when no component in between is a symlink and no mount in between
    ///   covers it: bubblewrap binds recursively and remounts every
    ///   submount read-only, so the path is already there, read-only, with
    ///   whatever is mounted below it on the host.
    pub fn resolve_mounts(&self, host: impl Fn(&Path) -> HostEntry) -> Vec<Mount> {
        let mut out = Vec::with_capacity(self.linux.mounts.len());
        for rule in &self.linux.mounts {
            match rule.clone() {
                MountRule::RoBind { src, dest } => {
                    if !covered(&out, &src, &dest, &host) {
                        out.push(Mount::RoBind { src, dest });
                    }
                }
                MountRule::RoBindTry { src, dest } => {
                    if host(&src) != HostEntry::Missing && !covered(&out, &src, &dest, &host) {
                        out.push(Mount::RoBindTry { src, dest });
                    }
                }
                MountRule::Mirror { src, dest } => match host(&src) {
                    HostEntry::Missing => {}
                    HostEntry::Symlink(target) => out.push(Mount::Symlink { target, dest }),
                    HostEntry::Other => out.push(Mount::RoBind { src, dest }),
                },
            }
        }
        out
    }
}

/// Whether a bind of `src` onto `dest` adds nothing to `earlier`: `src`
/// is `dest`, lies below the source of an earlier read-only bind of a
/// folder onto itself, every component between them is a real entry (no
/// symlink, nothing missing), and no later mount lands on or above it.
fn covered(earlier: &[Mount], src: &Path, dest: &Path, host: &impl Fn(&Path) -> HostEntry) -> bool {
    if src != dest {
        return false;
    }
    let Some(outer) = earlier.iter().rposition(|m| match m {
        Mount::RoBind { src: s, dest: d } | Mount::RoBindTry { src: s, dest: d } => {
            s == d && src != s.as_path() && src.starts_with(s)
        }
        Mount::Symlink { .. } => false,
    }) else {
        return false;
    };
    let base = match &earlier[outer] {
        Mount::RoBind { src, .. } | Mount::RoBindTry { src, .. } => src,
        Mount::Symlink { .. } => return false,
    };
    let later_covers = earlier[outer + 1..].iter().any(|m| {
        let d = match m {
            Mount::RoBind { dest, .. } | Mount::RoBindTry { dest, .. } => dest,
            Mount::Symlink { dest, .. } => dest,
        };
        dest.starts_with(d) || d.starts_with(dest)
    });
    if later_covers {
        return false;
    }
    let mut path = base.clone();
    for part in src
        .strip_prefix(base)
        .into_iter()
        .flat_map(Path::components)
    {
        path.push(part);
        if host(&path) != HostEntry::Other {
            return false;
        }
    }
    true
}

/// Looks at the real host for [`Profile::resolve_mounts`].
pub fn host_entry(path: &Path) -> HostEntry {
    match std::fs::symlink_metadata(path) {
        Err(_) => HostEntry::Missing,
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(path) {
            Ok(target) => HostEntry::Symlink(target),
            Err(_) => HostEntry::Missing,
        },
        Ok(_) => HostEntry::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_load_as_their_toml_reads() {
        assert_eq!(BUILTIN.len(), BUILTIN_JSON.len());
        for (&(name, text), json) in BUILTIN.iter().zip(BUILTIN_JSON) {
            let from_toml = Profile::parse(text, "t").unwrap();
            assert_eq!(Profile::parse_json(json, "t").unwrap(), from_toml, "{name}");
            assert_eq!(
                Profile::load(name, Path::new("/")).unwrap(),
                from_toml,
                "{name}"
            );
        }
    }

    #[test]
    fn builtin_default_parses() {
        let p = Profile::load("default", Path::new("/")).unwrap();
        assert_eq!(p.name, "default");
        assert_eq!(p.network, Network::None);
        assert!(p.seccomp.deny.iter().any(|s| s == "ptrace"));
    }

    #[test]
    fn unknown_builtin_is_named() {
        let e = Profile::load("nope", Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("built-in profiles: default"), "{e}");
    }

    fn with_mounts(mounts: &str) -> String {
        let base = BUILTIN[0].1;
        let start = base.find("mounts = [").unwrap();
        let end = start + base[start..].find("\n]\n").unwrap() + 3;
        format!("{}mounts = [{mounts}]\n{}", &base[..start], &base[end..])
    }

    #[test]
    fn reserved_and_relative_destinations_are_refused() {
        for bad in [
            r#"{ op = "ro-bind", src = "/etc", dest = "/skills" }"#,
            r#"{ op = "ro-bind", src = "/etc", dest = "/skills/x" }"#,
            r#"{ op = "ro-bind", src = "/etc", dest = "/etc/passwd" }"#,
            r#"{ op = "ro-bind", src = "etc", dest = "/etc" }"#,
            r#"{ op = "ro-bind", src = "/etc", dest = "/x/../skills" }"#,
            r#"{ op = "bind", src = "/etc", dest = "/etc" }"#,
        ] {
            assert!(Profile::parse(&with_mounts(bad), "t").is_err(), "{bad}");
        }
        assert!(Profile::parse(
            &with_mounts(r#"{ op = "ro-bind", src = "/opt", dest = "/opt" }"#),
            "t"
        )
        .is_ok());
    }

    #[test]
    fn unknown_fields_and_syscalls_are_refused() {
        let base = BUILTIN[0].1;
        assert!(Profile::parse(&format!("{base}\nextra = 1\n"), "t").is_err());
        let bad = base.replace("\"ptrace\",", "\"no_such_call\",");
        let e = Profile::parse(&bad, "t").unwrap_err();
        assert!(e.to_string().contains("no_such_call"), "{e}");
    }

    #[test]
    fn mirror_follows_the_host() {
        let p = Profile::parse(
            &with_mounts(
                r#"{ op = "mirror", src = "/bin", dest = "/bin" }, { op = "mirror", src = "/lib", dest = "/lib" }, { op = "mirror", src = "/gone", dest = "/gone" }"#,
            ),
            "t",
        )
        .unwrap();
        let mounts = p.resolve_mounts(|path| match path.to_str().unwrap() {
            "/bin" => HostEntry::Symlink("usr/bin".into()),
            "/lib" => HostEntry::Other,
            _ => HostEntry::Missing,
        });
        assert_eq!(
            mounts,
            vec![
                Mount::Symlink {
                    target: "usr/bin".into(),
                    dest: "/bin".into()
                },
                Mount::RoBind {
                    src: "/lib".into(),
                    dest: "/lib".into()
                },
            ]
        );
    }

    /// Binds that add nothing are left out: a `ro-bind-try`
    /// of a missing path, and a path bound onto itself inside an earlier
    /// read-only bind of its ancestor, unless a symlink lies between them
    /// or a mount in between covers it.
    #[test]
    fn binds_that_add_nothing_are_left_out() {
        let p = Profile::parse(
            &with_mounts(
                r#"{ op = "ro-bind", src = "/usr", dest = "/usr" },
                   { op = "ro-bind-try", src = "/etc/gone", dest = "/etc/gone" },
                   { op = "ro-bind-try", src = "/etc/ssl/certs", dest = "/etc/ssl/certs" },
                   { op = "ro-bind-try", src = "/usr/share/zoneinfo", dest = "/usr/share/zoneinfo" },
                   { op = "ro-bind", src = "/usr/lib/locale", dest = "/usr/lib/locale" },
                   { op = "ro-bind-try", src = "/usr/linked/x", dest = "/usr/linked/x" },
                   { op = "ro-bind-try", src = "/usr/share/zoneinfo", dest = "/usr/tz" }"#,
            ),
            "t",
        )
        .unwrap();
        let host = |path: &Path| match path.to_str().unwrap() {
            "/etc/gone" => HostEntry::Missing,
            "/usr/linked" => HostEntry::Symlink("/opt/elsewhere".into()),
            _ => HostEntry::Other,
        };
        let bind = |s: &str, d: &str| Mount::RoBind {
            src: s.into(),
            dest: d.into(),
        };
        let bind_try = |s: &str, d: &str| Mount::RoBindTry {
            src: s.into(),
            dest: d.into(),
        };
        assert_eq!(
            p.resolve_mounts(host),
            vec![
                bind("/usr", "/usr"),
                bind_try("/etc/ssl/certs", "/etc/ssl/certs"),
                bind_try("/usr/linked/x", "/usr/linked/x"),
                bind_try("/usr/share/zoneinfo", "/usr/tz"),
            ]
        );
        // A mount onto /usr/share after /usr: the nested bind is needed.
        let p = Profile::parse(
            &with_mounts(
                r#"{ op = "ro-bind", src = "/usr", dest = "/usr" },
                   { op = "ro-bind", src = "/opt/share", dest = "/usr/share" },
                   { op = "ro-bind-try", src = "/usr/share/zoneinfo", dest = "/usr/share/zoneinfo" }"#,
            ),
            "t",
        )
        .unwrap();
        assert_eq!(p.resolve_mounts(host).len(), 3);
    }

    /// Found by fuzzing (target `profile`): TOML messages span lines, and
    /// a mount path may hold a newline; the refusal is one line either way.
    #[test]
    fn refusals_are_one_line() {
        let base = BUILTIN[0].1;
        let broken_header = base.replacen("[linux]", "[lin ux", 1);
        let reserved = with_mounts(r#"{ op = "ro-bind", src = "/etc", dest = "/skills/a\nb" }"#);
        let relative = with_mounts(r#"{ op = "ro-bind", src = "etc\r", dest = "/etc" }"#);
        for text in [&broken_header, &reserved, &relative] {
            let e = Profile::parse(text, "t").unwrap_err().to_string();
            assert!(!e.contains(['\n', '\r']), "{e:?}");
        }
        let e = Profile::parse(&reserved, "t").unwrap_err().to_string();
        assert!(e.contains("/skills/a\\nb is reserved"), "{e}");
    }
}
