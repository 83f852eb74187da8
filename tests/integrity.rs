//! Bytes on disk are re-checked before they are trusted: a published root
//! changed from outside (a byte flipped, a file removed, a record broken)
//! is rebuilt from the verified store, before and after a restart, and
//! never served under its pin; a store copy that no longer matches its
//! hash is the host's fault (`store_corrupted`, 5xx, logged at ERROR), and
//! re-publishing the correct bundle (API or `store add`) repairs it; one
//! unreadable binding record never breaks a listing.

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use crate::daemon::{bundle_of, world_with_roots};

const DATA: &[u8] = b"the verified bytes\n";

/// The one published root of the data dir (`published/<identity>`) that
/// holds the skill `flip` (the daemon's self-check publishes its own).
fn published_root(w: &World) -> PathBuf {
    let roots: Vec<PathBuf> = std::fs::read_dir(w.data_dir().join("published"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().len() == 64 && p.join("skills/flip").exists())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    roots.into_iter().next().unwrap()
}

/// Sets `path`'s mode, as root would before writing a sealed file.
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Flips the first byte of a sealed file in place (same size), as
/// something outside the runner would: made writable, written, sealed.
fn flip_first_byte(file: &Path) {
    chmod(file, 0o644);
    let mut bytes = std::fs::read(file).unwrap();
    bytes[0] ^= 0x20;
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&bytes[..1]).unwrap();
    drop(f);
    chmod(file, 0o444);
}

/// A daemon with one published skill `flip` holding `data.txt`; the
/// binding pins it.
fn daemon_with_skill(w: &World, roots: &str) -> (Daemon, Value, Value) {
    let dir = w.skill("flip", &[("data.txt", DATA)]);
    let (bundle, binding) = bundle_of("flip", &dir);
    let d = Daemon::start(w, &["--root", roots]);
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    (d, bundle, binding)
}

/// Runs `cat /skills/flip/data.txt` pinned to `binding`.
fn cat(d: &Daemon, binding: &Value) -> (u16, Value) {
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["cat", "/skills/flip/data.txt"], "skills": [binding]}),
    );
    (r.status, r.json())
}

/// Asserts the run saw exactly the verified bytes under the pinned hash.
fn assert_verified(d: &Daemon, binding: &Value) {
    let (status, doc) = cat(d, binding);
    assert_eq!(status, 200, "{doc:#}");
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["stdout"], std::str::from_utf8(DATA).unwrap(), "{doc:#}");
}

/// How many ERROR lines mention `what`, once at least one has been read
/// from the daemon's log (it is read on another thread).
fn error_lines(d: &Daemon, what: &str) -> usize {
    d.wait_for_line(what, |l| l.contains("ERROR") && l.contains(what));
    d.log()
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains(what))
        .count()
}

#[test]
fn a_byte_flipped_in_a_published_root_is_never_served_under_its_pin() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let (d, _, binding) = daemon_with_skill(&w, &roots);
    assert_verified(&d, &binding);
    let root = published_root(&w);
    flip_first_byte(&root.join("skills/flip/data.txt"));
    // The next run sees the verified bytes again: the root was rebuilt.
    assert_verified(&d, &binding);
    assert_eq!(
        error_lines(&d, "no longer what was verified"),
        1,
        "{}",
        d.log()
    );
    let rebuilt = published_root(&w);
    assert_eq!(
        std::fs::read(rebuilt.join("skills/flip/data.txt")).unwrap(),
        DATA
    );

    // The same after a restart: the check is on disk, not in memory.
    let mut d = d;
    d.stop();
    flip_first_byte(&rebuilt.join("skills/flip/data.txt"));
    let d = Daemon::start(&w, &["--root", &roots]);
    assert_verified(&d, &binding);
    assert_eq!(
        error_lines(&d, "no longer what was verified"),
        1,
        "{}",
        d.log()
    );
}

#[test]
fn a_file_removed_from_a_published_root_is_noticed_and_restored() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let (d, _, binding) = daemon_with_skill(&w, &roots);
    assert_verified(&d, &binding);
    let dir = published_root(&w).join("skills/flip");
    chmod(&dir, 0o755);
    std::fs::remove_file(dir.join("data.txt")).unwrap();
    chmod(&dir, 0o555);
    assert_verified(&d, &binding);
    assert_eq!(
        error_lines(&d, "no longer what was verified"),
        1,
        "{}",
        d.log()
    );
}

#[test]
fn a_corrupt_root_record_makes_the_root_rebuilt_not_the_selection_refused() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let (d, _, binding) = daemon_with_skill(&w, &roots);
    assert_verified(&d, &binding);
    let meta = published_root(&w).join("meta.json");
    chmod(&meta, 0o644);
    std::fs::write(&meta, b"{\"identity\": ").unwrap();
    chmod(&meta, 0o444);
    assert_verified(&d, &binding);
    // And every run after it: the rebuilt root is whole.
    assert_verified(&d, &binding);
    assert_eq!(
        error_lines(&d, "its record does not parse"),
        1,
        "{}",
        d.log()
    );
}

#[test]
fn a_byte_flipped_in_the_store_is_store_corrupted_and_republishing_repairs_it() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let (d, bundle, binding) = daemon_with_skill(&w, &roots);
    let hash = binding["hash"].as_str().unwrap();
    let stored = w
        .data_dir()
        .join("store/packages")
        .join(hash)
        .join("tree/data.txt");
    flip_first_byte(&stored);
    // Nothing published yet: staging reads the store and finds it bad.
    let (status, doc) = cat(&d, &binding);
    assert_eq!(status, 500, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "store_corrupted", "{doc:#}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains("re-publish"), "{message}");
    d.wait_for_line("store_corrupted at ERROR with the execution id", |l| {
        l.contains("ERROR") && l.contains("store_corrupted") && l.contains("id=")
    });
    // Re-publishing the correct bundle verifies the held copy and
    // replaces it.
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["new_packages"], 1, "{:#}", r.json());
    assert_eq!(std::fs::read(&stored).unwrap(), DATA);
    assert_verified(&d, &binding);
    // A correct copy is left alone.
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.json()["new_packages"], 0, "{:#}", r.json());

    // The published root and the store both bad: refused as the store's
    // fault, never served.
    flip_first_byte(&published_root(&w).join("skills/flip/data.txt"));
    flip_first_byte(&stored);
    let (status, doc) = cat(&d, &binding);
    assert_eq!(status, 500, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "store_corrupted", "{doc:#}");
    // `store add` of the right folder repairs it as well.
    let out = w
        .cmd()
        .args(["store", "add", "--id", "flip", "--revision", "1"])
        .args(["--version", "1.0.0"])
        .arg(w.path().join("skills/flip"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(std::fs::read(&stored).unwrap(), DATA);
    assert_verified(&d, &binding);
}

#[test]
fn a_truncated_binding_record_is_skipped_and_the_listing_answers() {
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    for id in ["kept", "broken"] {
        let (bundle, _) = bundle_of(id, &w.skill(id, &[]));
        assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    }
    let record = w.data_dir().join("store/bindings/broken/1.json");
    let text = std::fs::read(&record).unwrap();
    chmod(&record, 0o644);
    std::fs::write(&record, &text[..text.len() / 2]).unwrap();
    let r = d.get("/v1/skill-packages");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let skills = r.json()["skills"].clone();
    let ids: Vec<&str> = skills
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["kept"], "{skills:#}");
    assert_eq!(error_lines(&d, "bindings/broken/1.json"), 1, "{}", d.log());
    let metrics = String::from_utf8(d.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("skill_runner_store_records_skipped_total 1\n"),
        "{metrics}"
    );
}
