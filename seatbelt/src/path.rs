//! Host paths the macOS way: canonical form, and the checks `render` relies on.
//!
//! Seatbelt matches file rules against the canonical path of the vnode: a rule
//! about `/var/folders/x` never matches, because the kernel reports
//! `/private/var/folders/x`. An allow rule on a non-canonical path silently
//! fails closed, but a deny rule on one silently fails *open*. So every path
//! that goes into a profile must be canonical, and this module is where that is
//! decided, without touching the file system: symbolic links are read through
//! a callback that the caller backs with `std::fs::read_link` (or a table, in
//! tests).
//!
//! Invariants: [`canonicalize`] only returns absolute paths with no `.`, `..`,
//! empty or trailing component; it follows at most [`MAX_SYMLINK_FOLLOWS`]
//! links and refuses beyond that (a loop); [`check_host_path`] accepts exactly
//! the strings that look like its output.

/// How many symbolic links [`canonicalize`] follows before it calls the path a
/// loop; the same bound as macOS's `MAXSYMLINKS`.
pub const MAX_SYMLINK_FOLLOWS: usize = 32;

/// The top-level names that macOS keeps as symlinks into `/private` (the
/// firmlinked system folders). Known here so that a path canonicalizes the
/// same way even when the callback cannot see the real disk (tests, `explain`
/// on another host).
const FIRMLINKS: [(&str, &str); 3] = [
    ("tmp", "/private/tmp"),
    ("var", "/private/var"),
    ("etc", "/private/etc"),
];

/// Why a path could not be made canonical.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalizeError {
    /// The path does not start with `/`.
    #[error("path {path:?} is relative: give an absolute path")]
    Relative {
        /// The path as given.
        path: String,
    },
    /// The path contains a NUL byte, which no system call can carry.
    #[error("path {path:?} contains a NUL byte")]
    NulByte {
        /// The path as given.
        path: String,
    },
    /// A symbolic link on the way has an empty target.
    #[error("symbolic link {link:?} has an empty target: fix or remove the link")]
    EmptyLinkTarget {
        /// The link, as resolved so far.
        link: String,
    },
    /// A symbolic link on the way has a target with a NUL byte.
    #[error("symbolic link {link:?} has a target containing a NUL byte")]
    NulInLinkTarget {
        /// The link, as resolved so far.
        link: String,
    },
    /// More than [`MAX_SYMLINK_FOLLOWS`] links were followed.
    #[error("resolving {path:?} followed more than {limit} symbolic links: there is a loop; fix the links")]
    SymlinkLoop {
        /// The path as given.
        path: String,
        /// The bound that was exceeded.
        limit: usize,
    },
}

/// Makes an absolute path canonical the macOS way, without touching the disk.
///
/// Resolves `.`, `..` and repeated slashes, and follows symbolic links as the
/// kernel does: a link's target replaces the link (an absolute target restarts
/// from `/`, a relative one continues from the link's folder), and a `..`
/// after a link leaves the link's *target*, not the text before it.
///
/// `read_link(p)` must return `Some(target)` exactly when `p` names a symbolic
/// link (as `std::fs::read_link(p).ok()` does) and `None` otherwise, including
/// when `p` does not exist: the missing tail of a path is kept as written.
/// When the callback reports nothing for `/tmp`, `/var` or `/etc`, they are
/// still mapped to `/private/tmp`, `/private/var`, `/private/etc`.
///
/// # Errors
///
/// A relative path, a NUL byte, an empty or NUL-bearing link target, or more
/// than [`MAX_SYMLINK_FOLLOWS`] links (a loop).
pub fn canonicalize(
    path: &str,
    read_link: &dyn Fn(&str) -> Option<String>,
) -> Result<String, CanonicalizeError> {
    if path.contains('\0') {
        return Err(CanonicalizeError::NulByte {
            path: path.to_owned(),
        });
    }
    if !path.starts_with('/') {
        return Err(CanonicalizeError::Relative {
            path: path.to_owned(),
        });
    }
    // Components already resolved (no links among them), and the components
    // still to walk, kept reversed so that `pop` yields the next one.
    let mut resolved: Vec<String> = Vec::new();
    let mut pending: Vec<String> = path.split('/').rev().map(str::to_owned).collect();
    let mut follows = 0usize;
    while let Some(component) = pending.pop() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                // `..` at `/` stays at `/`, as in the kernel.
                resolved.pop();
                continue;
            }
            _ => {}
        }
        let candidate = join(&resolved, &component);
        let target = read_link(&candidate).or_else(|| {
            if resolved.is_empty() {
                firmlink(&component).map(str::to_owned)
            } else {
                None
            }
        });
        let Some(target) = target else {
            resolved.push(component);
            continue;
        };
        follows += 1;
        if follows > MAX_SYMLINK_FOLLOWS {
            return Err(CanonicalizeError::SymlinkLoop {
                path: path.to_owned(),
                limit: MAX_SYMLINK_FOLLOWS,
            });
        }
        if target.is_empty() {
            return Err(CanonicalizeError::EmptyLinkTarget { link: candidate });
        }
        if target.contains('\0') {
            return Err(CanonicalizeError::NulInLinkTarget { link: candidate });
        }
        if target.starts_with('/') {
            resolved.clear();
        }
        pending.extend(target.split('/').rev().map(str::to_owned));
    }
    Ok(join_all(&resolved))
}

/// The `/private` folder that a top-level firmlink name stands for.
fn firmlink(name: &str) -> Option<&'static str> {
    FIRMLINKS
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, real)| *real)
}

fn join(resolved: &[String], next: &str) -> String {
    let mut out = join_all(resolved);
    if !out.ends_with('/') {
        out.push('/');
    }
    out.push_str(next);
    out
}

fn join_all(resolved: &[String]) -> String {
    if resolved.is_empty() {
        return "/".to_owned();
    }
    let mut out = String::new();
    for component in resolved {
        out.push('/');
        out.push_str(component);
    }
    out
}

/// Checks that `path` looks like the output of [`canonicalize`]: absolute, no
/// NUL, no empty, `.` or `..` component, no trailing slash, and not under one
/// of the `/tmp`, `/var`, `/etc` aliases (whose rules Seatbelt would never
/// match). Returns the reason when it does not.
pub(crate) fn check_host_path(path: &str) -> Result<(), &'static str> {
    if path.contains('\0') {
        return Err("it contains a NUL byte");
    }
    if !path.starts_with('/') {
        return Err("it is not absolute");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("it ends with a slash");
    }
    for component in path[1..].split('/') {
        match component {
            "" => return Err("it has an empty component (a repeated slash)"),
            "." | ".." => return Err("it has a `.` or `..` component"),
            _ => {}
        }
    }
    let first = path[1..].split('/').next().unwrap_or_default();
    if firmlink(first).is_some() {
        return Err("it starts with /tmp, /var or /etc, which macOS reports as /private/...");
    }
    Ok(())
}

/// Whether `inner` is `outer` or lies below it (component-wise: `/a/bc` is not
/// inside `/a/b`). Both must have passed [`check_host_path`].
pub(crate) fn is_within(inner: &str, outer: &str) -> bool {
    if outer == "/" {
        return true;
    }
    inner == outer
        || (inner.len() > outer.len()
            && inner.starts_with(outer)
            && inner.as_bytes()[outer.len()] == b'/')
}

/// The ancestors of a checked path, from the top down, without `/` and without
/// the path itself: `/a/b/c` gives `/a`, `/a/b`.
pub(crate) fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (index, byte) in path.bytes().enumerate().skip(1) {
        if byte == b'/' {
            out.push(path[..index].to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_top_down_without_root_or_self() {
        assert_eq!(ancestors("/a/b/c"), vec!["/a", "/a/b"]);
        assert!(ancestors("/a").is_empty());
        assert!(ancestors("/").is_empty());
    }

    #[test]
    fn within_is_component_wise() {
        assert!(is_within("/a/b", "/a/b"));
        assert!(is_within("/a/b/c", "/a/b"));
        assert!(!is_within("/a/bc", "/a/b"));
        assert!(!is_within("/a", "/a/b"));
        assert!(is_within("/anything", "/"));
    }

    #[test]
    fn check_host_path_reasons() {
        assert!(check_host_path("/private/var/x").is_ok());
        assert!(check_host_path("/").is_ok());
        assert!(check_host_path("/tmpfoo/x").is_ok());
        for bad in [
            "relative",
            "",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/tmp/x",
            "/var",
            "/etc/hosts",
            "/a\0b",
        ] {
            assert!(check_host_path(bad).is_err(), "{bad:?} accepted");
        }
    }
}
