//! `render` refuses what it cannot make safe: non-canonical roots, overlapping
//! snapshot and writable roots, and read-only system paths that would open the
//! whole disk or the terminals. Every error message is lowercase, has no
//! trailing period, and says what to do next.

use crate::common::{check_profile, default_like_policy, roots};
use seatbelt::{render, Network, RenderError, Roots, SystemPolicy};

/// A root's name in error messages, and how to set it.
type SetRoot<V> = (&'static str, fn(&mut Roots, V));

fn with(edit: impl FnOnce(&mut Roots)) -> Result<seatbelt::Rendered, RenderError> {
    let mut roots = roots();
    edit(&mut roots);
    render(&default_like_policy(Network::None), &roots)
}

fn policy_with(edit: impl FnOnce(&mut SystemPolicy)) -> Result<seatbelt::Rendered, RenderError> {
    let mut policy = default_like_policy(Network::None);
    edit(&mut policy);
    render(&policy, &roots())
}

fn assert_message_style(error: &RenderError) {
    let message = error.to_string();
    assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
    assert!(!message.ends_with('.'), "{message}");
}

#[test]
fn roots_that_are_not_canonical_are_refused() {
    let cases: [SetRoot<&str>; 4] = [
        ("snapshot root", |r, p| r.snapshot_root = p.into()),
        ("extensions dir", |r, p| r.extensions_dir = p.into()),
        ("workspace", |r, p| r.workspace = p.into()),
        ("temp dir", |r, p| r.tmp_dir = p.into()),
    ];
    for (name, set) in cases {
        for bad in [
            "relative/dir",
            "",
            "/private/var/x/",
            "/private/var//x",
            "/private/var/./x",
            "/private/var/../x",
            "/tmp/x",
            "/var/folders/x",
            "/etc/x",
            "/private/var/x\0y",
            "/dev/fd",
        ] {
            let error = with(|r| set(r, bad)).expect_err(bad);
            match &error {
                RenderError::RootNotCanonical { root, path, .. } => {
                    assert_eq!(*root, name);
                    assert_eq!(path, bad);
                }
                other => panic!("{name} {bad:?}: unexpected {other:?}"),
            }
            assert_message_style(&error);
        }
    }
}

#[test]
fn snapshot_overlapping_a_writable_root_is_refused() {
    let snapshot = roots().snapshot_root;
    let cases: [SetRoot<String>; 3] = [
        ("extensions dir", |r, p| r.extensions_dir = p),
        ("workspace", |r, p| r.workspace = p),
        ("temp dir", |r, p| r.tmp_dir = p),
    ];
    for (name, set) in cases {
        for writable in [
            snapshot.clone(),                      // equal
            format!("{snapshot}/hello/scripts"),   // inside the snapshot
            "/private/var/folders/ab/T/sr".into(), // around the snapshot
            "/".into(),                            // the whole disk
        ] {
            let error = with(|r| set(r, writable.clone())).expect_err(&writable);
            assert_eq!(
                error,
                RenderError::SnapshotOverlapsWritable {
                    snapshot_root: snapshot.clone(),
                    root: name,
                    path: writable.clone(),
                }
            );
            assert_message_style(&error);
        }
    }
    // A snapshot root of `/` contains every writable root.
    let error = with(|r| r.snapshot_root = "/".into()).unwrap_err();
    assert!(matches!(
        error,
        RenderError::SnapshotOverlapsWritable { .. }
    ));
}

#[test]
fn siblings_sharing_a_name_prefix_do_not_overlap() {
    // `/x/skills-tmp` is beside `/x/skills`, not inside it.
    let out = with(|r| r.tmp_dir = format!("{}-tmp", r.snapshot_root)).unwrap();
    check_profile(&out);
}

#[test]
fn writable_roots_may_nest_in_each_other() {
    // The default extensions dir lives inside the workspace.
    let roots = roots();
    assert!(roots.extensions_dir.starts_with(&roots.workspace));
    check_profile(&render(&default_like_policy(Network::None), &roots).unwrap());
}

#[test]
fn system_paths_that_are_not_canonical_are_refused() {
    for bad in ["/etc", "usr", "/usr/", "/usr/../etc", "/tmp"] {
        let error = policy_with(|p| p.read_only_subpaths.push(bad.into())).expect_err(bad);
        assert!(
            matches!(&error, RenderError::SystemPathNotCanonical { path, .. } if path == bad),
            "{bad}: {error:?}"
        );
        assert_message_style(&error);
        let error = policy_with(|p| p.read_only_literals.push(bad.into())).expect_err(bad);
        assert!(matches!(error, RenderError::SystemPathNotCanonical { .. }));
    }
}

#[test]
fn system_paths_that_open_too_much_are_refused() {
    for (subpath, bad) in [
        (true, "/"),
        (true, "/dev"),
        (true, "/dev/fd"),
        (false, "/dev/tty"),
        (false, "/dev/ttys001"),
    ] {
        let error = policy_with(|p| {
            if subpath {
                p.read_only_subpaths.push(bad.into());
            } else {
                p.read_only_literals.push(bad.into());
            }
        })
        .expect_err(bad);
        assert!(
            matches!(&error, RenderError::SystemPathTooBroad { path, .. } if path == bad),
            "{bad}: {error:?}"
        );
        assert_message_style(&error);
    }
    // A literal `/` only exposes the root folder's own metadata and listing.
    check_profile(&policy_with(|p| p.read_only_literals.push("/".into())).unwrap());
}

#[test]
fn messages_name_the_fix() {
    let error = with(|r| r.workspace = "/tmp/ws".into()).unwrap_err();
    assert!(
        error.to_string().contains("seatbelt::canonicalize"),
        "{error}"
    );
    let error = with(|r| r.workspace = r.snapshot_root.clone()).unwrap_err();
    assert!(error.to_string().contains("separate folders"), "{error}");
    let error = policy_with(|p| p.read_only_subpaths.push("/".into())).unwrap_err();
    assert!(error.to_string().contains("[macos]"), "{error}");
}
