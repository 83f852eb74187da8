//! `canonicalize`: the macOS canonical form of a host path, computed without
//! the disk. Symbolic links come from a table standing in for
//! `std::fs::read_link`.

use std::collections::BTreeMap;

use crate::common::{check_profile, default_like_policy};
use seatbelt::{canonicalize, render, CanonicalizeError, Network, Roots, MAX_SYMLINK_FOLLOWS};

/// A `read_link` backed by a table of `link -> target`.
fn links(table: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let table: BTreeMap<String, String> = table
        .iter()
        .map(|(link, target)| ((*link).to_owned(), (*target).to_owned()))
        .collect();
    move |path: &str| table.get(path).cloned()
}

fn no_links(_: &str) -> Option<String> {
    None
}

fn canon(path: &str) -> Result<String, CanonicalizeError> {
    canonicalize(path, &no_links)
}

#[test]
fn firmlinks_are_known_without_the_callback() {
    assert_eq!(canon("/tmp/x").unwrap(), "/private/tmp/x");
    assert_eq!(canon("/tmp").unwrap(), "/private/tmp");
    assert_eq!(
        canon("/var/folders/ab/T/sr/exec1/skills").unwrap(),
        "/private/var/folders/ab/T/sr/exec1/skills"
    );
    assert_eq!(canon("/etc/hosts").unwrap(), "/private/etc/hosts");
    // Only the top-level names: these are ordinary folders.
    assert_eq!(canon("/tmpfoo/x").unwrap(), "/tmpfoo/x");
    assert_eq!(canon("/Users/tmp/var").unwrap(), "/Users/tmp/var");
    assert_eq!(canon("/private/tmp/x").unwrap(), "/private/tmp/x");
}

#[test]
fn firmlinks_reported_by_the_callback_give_the_same_result() {
    // What a real Mac reports: relative link text.
    let read_link = links(&[("/tmp", "private/tmp"), ("/var", "private/var")]);
    assert_eq!(
        canonicalize("/tmp/x", &read_link).unwrap(),
        "/private/tmp/x"
    );
    assert_eq!(
        canonicalize("/var/folders/a", &read_link).unwrap(),
        "/private/var/folders/a"
    );
}

#[test]
fn dots_and_slashes() {
    assert_eq!(canon("/a/b/../c").unwrap(), "/a/c");
    assert_eq!(canon("/a/./b//c/").unwrap(), "/a/b/c");
    assert_eq!(canon("/../..").unwrap(), "/");
    assert_eq!(canon("/a/..").unwrap(), "/");
    assert_eq!(canon("/").unwrap(), "/");
    assert_eq!(canon("//a").unwrap(), "/a");
    // `..` leaves the firmlink's target, as the kernel does.
    assert_eq!(canon("/tmp/../etc/hosts").unwrap(), "/private/etc/hosts");
    assert_eq!(canon("/var/..").unwrap(), "/private");
}

#[test]
fn symlinked_home_is_followed() {
    let read_link = links(&[("/Users/alice", "/Volumes/Data/alice")]);
    assert_eq!(
        canonicalize("/Users/alice/proj/ws", &read_link).unwrap(),
        "/Volumes/Data/alice/proj/ws"
    );
    // `..` after a link is physical: it leaves the target, not the link text.
    assert_eq!(
        canonicalize("/Users/alice/../bob", &read_link).unwrap(),
        "/Volumes/Data/bob"
    );
}

#[test]
fn relative_and_chained_links() {
    let read_link = links(&[
        ("/opt/current", "releases/v2"),
        ("/opt/releases/v2", "../../srv/v2"),
        ("/srv/v2/lib", "/private/var/lib2"),
    ]);
    assert_eq!(
        canonicalize("/opt/current/lib/x.so", &read_link).unwrap(),
        "/private/var/lib2/x.so"
    );
}

#[test]
fn a_link_into_a_firmlink_is_canonical() {
    let read_link = links(&[("/Users/alice/scratch", "/tmp/scratch")]);
    assert_eq!(
        canonicalize("/Users/alice/scratch/a", &read_link).unwrap(),
        "/private/tmp/scratch/a"
    );
}

#[test]
fn symlink_loops_are_refused() {
    let read_link = links(&[("/a", "/b"), ("/b", "/a")]);
    assert_eq!(
        canonicalize("/a/x", &read_link),
        Err(CanonicalizeError::SymlinkLoop {
            path: "/a/x".into(),
            limit: MAX_SYMLINK_FOLLOWS
        })
    );
    let self_loop = links(&[("/w/x", "x")]);
    assert!(matches!(
        canonicalize("/w/x/y", &self_loop),
        Err(CanonicalizeError::SymlinkLoop { .. })
    ));
}

#[test]
fn long_chains_are_bounded() {
    // A chain of exactly MAX_SYMLINK_FOLLOWS links resolves; one more fails.
    let chain = |length: usize| {
        let table: BTreeMap<String, String> = (0..length)
            .map(|i| (format!("/l{i}"), format!("/l{}", i + 1)))
            .collect();
        move |path: &str| table.get(path).cloned()
    };
    assert_eq!(
        canonicalize("/l0", &chain(MAX_SYMLINK_FOLLOWS)).unwrap(),
        format!("/l{MAX_SYMLINK_FOLLOWS}")
    );
    assert!(matches!(
        canonicalize("/l0", &chain(MAX_SYMLINK_FOLLOWS + 1)),
        Err(CanonicalizeError::SymlinkLoop { .. })
    ));
}

#[test]
fn relative_empty_and_nul_are_refused() {
    for relative in ["", "a/b", "./a", "../a", "~/a"] {
        assert_eq!(
            canon(relative),
            Err(CanonicalizeError::Relative {
                path: relative.into()
            })
        );
    }
    assert_eq!(
        canon("/a\0b"),
        Err(CanonicalizeError::NulByte {
            path: "/a\0b".into()
        })
    );
    assert_eq!(
        canonicalize("/a/b", &links(&[("/a", "")])),
        Err(CanonicalizeError::EmptyLinkTarget { link: "/a".into() })
    );
    assert_eq!(
        canonicalize("/a/b", &links(&[("/a", "x\0y")])),
        Err(CanonicalizeError::NulInLinkTarget { link: "/a".into() })
    );
    for error in [canon("a").unwrap_err(), canon("/a\0").unwrap_err()] {
        let message = error.to_string();
        assert!(message.starts_with(|c: char| c.is_lowercase()));
        assert!(!message.ends_with('.'));
    }
}

#[test]
fn unicode_and_odd_characters_pass_through() {
    assert_eq!(
        canon("/tmp/é/日本/🦀/a\"b(c)\nd;e").unwrap(),
        "/private/tmp/é/日本/🦀/a\"b(c)\nd;e"
    );
}

#[test]
fn canonical_output_is_accepted_by_render() {
    let read_link = links(&[("/Users/alice", "/Volumes/Data/alice")]);
    let c = |path: &str| canonicalize(path, &read_link).unwrap();
    let roots = Roots {
        snapshot_root: c("/var/folders/ab/T/sr/exec1/./skills"),
        extensions_dir: c("/Users/alice/proj/.sciencediscovery/skill-extensions/"),
        workspace: c("/Users/alice/proj"),
        tmp_dir: c("/tmp/sr/exec1/tmp"),
        environment: None,
    };
    let out = render(&default_like_policy(Network::None), &roots).unwrap();
    check_profile(&out);
    // Raw, non-canonical forms are refused instead.
    let raw = Roots {
        snapshot_root: "/var/folders/ab/T/sr/exec1/skills".into(),
        ..roots
    };
    assert!(render(&default_like_policy(Network::None), &raw).is_err());
}
