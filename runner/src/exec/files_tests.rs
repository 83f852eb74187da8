//! Files in and out, on plain folders: validation, all-or-none writes and
//! bounded, link-free collection.

use std::fs;
use std::os::unix::fs::symlink;

use super::*;

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn raw(path: &str, content: &[u8]) -> RawFile {
    RawFile {
        path: path.into(),
        content: b64(content),
        mode: None,
    }
}

#[test]
fn bad_files_are_refused_with_what_to_change() {
    let cases: Vec<(Vec<RawFile>, &str)> = vec![
        (vec![raw("../x", b"")], "'..'"),
        (vec![raw("/etc/x", b"")], "absolute"),
        (vec![raw("a\0b", b"")], "NUL"),
        (vec![raw("", b"")], "empty"),
        (vec![raw("a//b", b"")], "empty segment"),
        (vec![raw("a\\b", b"")], "backslash"),
        (
            vec![RawFile {
                content: "not base64!".into(),
                ..raw("a", b"")
            }],
            "base64",
        ),
        (
            vec![RawFile {
                mode: Some("4755".into()),
                ..raw("a", b"")
            }],
            "setuid",
        ),
        (
            vec![RawFile {
                mode: Some("rw".into()),
                ..raw("a", b"")
            }],
            "octal",
        ),
        (vec![raw("a", b""), raw("a", b"")], "twice"),
        (vec![raw("a", b""), raw("a/b", b"")], "folder"),
        // A path that would make a folder per segment, 50,000 deep.
        (
            vec![raw(&("a/".repeat(50_000) + "f"), b"")],
            "more than 32 folders",
        ),
        (vec![raw(&"n".repeat(256), b"")], "longer than 255 bytes"),
    ];
    for (files, want) in cases {
        let e = inputs(files).unwrap_err().to_string();
        assert!(e.contains(want), "{e} lacks {want}");
    }
    let ok = inputs(vec![RawFile {
        mode: Some("0755".into()),
        ..raw("bin/run.sh", b"#!/bin/sh\n")
    }])
    .unwrap();
    assert_eq!(ok[0].mode, 0o755);
    assert_eq!(ok[0].bytes, b"#!/bin/sh\n");
}

#[test]
fn the_runner_bounds_count_each_file_and_the_total() {
    let files = inputs(vec![raw("a", b"12345"), raw("b", b"123")]).unwrap();
    let b = FileBounds::default();
    assert!(check_inputs(&files, &b).is_ok());
    let few = FileBounds {
        input_files: 1,
        ..b
    };
    assert!(matches!(
        check_inputs(&files, &few),
        Err(FilesError::TooManyFiles { .. })
    ));
    let small = FileBounds {
        input_file_bytes: 4,
        ..b
    };
    assert!(matches!(
        check_inputs(&files, &small),
        Err(FilesError::FileTooLarge { .. })
    ));
    let total = FileBounds {
        input_bytes: 7,
        ..b
    };
    assert!(matches!(
        check_inputs(&files, &total),
        Err(FilesError::TooLarge { .. })
    ));
}

#[test]
fn patterns_match_as_documented() {
    let g = |p: &str| outputs(vec![p.into()]).unwrap().remove(0);
    assert!(g("report.json").matches("report.json"));
    assert!(!g("report.json").matches("out/report.json"));
    assert!(g("out/*.png").matches("out/a.png"));
    assert!(!g("out/*.png").matches("out/sub/a.png"));
    assert!(g("out/**/*.png").matches("out/a.png"));
    assert!(g("out/**/*.png").matches("out/x/y/a.png"));
    assert!(g("**/*").matches("a/b/c"));
    assert!(g("a?c").matches("abc"));
    assert!(!g("a?c").matches("ac"));
    assert!(g("*").matches(".hidden"));
    for bad in ["../x", "/x", "a/**", "a**/b", "", "a\0"] {
        assert!(outputs(vec![bad.into()]).is_err(), "{bad:?}");
    }
    assert!(outputs(vec!["a".into(); MAX_PATTERNS + 1]).is_err());
}

fn ws() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let w = t.path().join("w");
    fs::create_dir(&w).unwrap();
    (t, w)
}

fn names(dir: &Path) -> Vec<String> {
    let mut all = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            for below in names(&e.path()) {
                all.push(format!("{n}/{below}"));
            }
        }
        all.push(n);
    }
    all.sort();
    all
}

#[test]
fn inputs_are_written_with_their_modes() {
    let (_t, w) = ws();
    let files = inputs(vec![
        raw("in/data.csv", b"a,b\n"),
        RawFile {
            mode: Some("700".into()),
            ..raw("run.sh", b"echo")
        },
    ])
    .unwrap();
    write_inputs(&w, &files, None).unwrap();
    assert_eq!(fs::read(w.join("in/data.csv")).unwrap(), b"a,b\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(w.join("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(names(&w), vec!["in", "in/data.csv", "run.sh"]);
}

/// A symlink planted where a folder of a later file goes refuses the job
/// before anything is written: not the earlier files, not their folders.
#[test]
fn a_refused_write_leaves_nothing_behind() {
    let (t, w) = ws();
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, w.join("evil")).unwrap();
    let files = inputs(vec![raw("new/a", b"1"), raw("evil/b", b"2")]).unwrap();
    let e = write_inputs(&w, &files, None).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert_eq!(names(&w), vec!["evil"]);
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    // A folder where a file goes: the same.
    fs::create_dir(w.join("dir")).unwrap();
    let files = inputs(vec![raw("new/a", b"1"), raw("dir", b"2")]).unwrap();
    assert!(write_inputs(&w, &files, None).is_err());
    assert_eq!(names(&w), vec!["dir", "evil"]);
}

fn bounds() -> FileBounds {
    FileBounds::default()
}

fn by_path(c: &Collected) -> BTreeMap<String, Output> {
    c.outputs
        .iter()
        .map(|o| (o.path.clone(), o.clone()))
        .collect()
}

#[test]
fn collection_keeps_regular_files_and_says_why_it_refused_the_rest() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    let secret = t.path().join("secret");
    fs::write(&secret, "host secret").unwrap();
    fs::create_dir_all(w.join("out/sub")).unwrap();
    fs::write(w.join("out/a.txt"), "hello").unwrap();
    fs::write(w.join("out/sub/b.txt"), "deep").unwrap();
    symlink(&secret, w.join("out/link.txt")).unwrap();
    fs::write(w.join("out/hard.txt"), "x").unwrap();
    fs::hard_link(w.join("out/hard.txt"), w.join("hard2")).unwrap();
    nix::unistd::mkfifo(
        &w.join("out/fifo.txt"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let globs = outputs(vec![
        "out/*.txt".into(),
        "missing.json".into(),
        "out".into(),
    ])
    .unwrap();
    let c = collect(&w, &globs, &bounds(), &store, &KeptBudget::new(u64::MAX));
    let got = by_path(&c);
    let a = &got["out/a.txt"];
    assert_eq!(a.size, 5);
    assert_eq!(a.content.as_deref(), Some(b64(b"hello").as_str()));
    assert_eq!(
        a.sha256.as_deref(),
        Some(crate::package::hash::file_hash(b"hello").as_str())
    );
    assert!(got["out/link.txt"]
        .error
        .as_ref()
        .unwrap()
        .contains("symlink"));
    assert!(got["out/fifo.txt"]
        .error
        .as_ref()
        .unwrap()
        .contains("not a regular file"));
    assert!(got["out/hard.txt"]
        .error
        .as_ref()
        .unwrap()
        .contains("hard links"));
    assert!(got["missing.json"]
        .error
        .as_ref()
        .unwrap()
        .contains("not written"));
    assert!(got["out"].error.as_ref().unwrap().contains("folder"));
    assert!(!got.contains_key("out/sub/b.txt"), "* stays in its folder");
    for o in got.values().filter(|o| o.error.is_some()) {
        assert!(o.sha256.is_none() && o.content.is_none(), "{o:?}");
    }
    let kept = c.store.clone().unwrap();
    let files: Vec<_> = kept.files().map(|(p, _, _)| p.to_owned()).collect();
    assert_eq!(files, vec!["out/a.txt"]);
    let dir = kept.dir().to_owned();
    assert!(dir.join(a.sha256.as_ref().unwrap()).exists());
    drop(c);
    drop(kept);
    assert!(!dir.exists(), "the store goes with its last holder");
}

#[test]
fn collection_is_bounded_in_count_and_bytes() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    for i in 0..5 {
        fs::write(w.join(format!("f{i}")), vec![b'x'; 100]).unwrap();
    }
    // A sparse file far over the bound is never read.
    let sparse = fs::File::create(w.join("sparse")).unwrap();
    sparse.set_len(10 << 30).unwrap();
    let b = FileBounds {
        output_files: 3,
        output_file_bytes: 1000,
        output_bytes: 250,
        inline_file_bytes: 100,
        inline_bytes: 100,
        ..bounds()
    };
    let c = collect(
        &w,
        &outputs(vec!["*".into()]).unwrap(),
        &b,
        &store,
        &KeptBudget::new(u64::MAX),
    );
    let got = by_path(&c);
    let kept: Vec<_> = got.values().filter(|o| o.sha256.is_some()).collect();
    assert_eq!(kept.len(), 2, "250 bytes hold two files of 100: {got:?}");
    assert_eq!(
        got.values().filter(|o| o.content.is_some()).count(),
        1,
        "inline holds one"
    );
    let s = &got["sparse"];
    assert!(
        s.truncated && s.sha256.is_none() && s.size == 10 << 30,
        "{s:?}"
    );
    assert!(got["f4"].truncated);
}

#[test]
fn a_bounded_scan_says_it_stopped() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    fs::create_dir(w.join("many")).unwrap();
    for i in 0..50 {
        fs::write(w.join(format!("many/{i}")), "").unwrap();
    }
    let b = FileBounds {
        scan_entries: 10,
        ..bounds()
    };
    let c = collect(
        &w,
        &outputs(vec!["many/*".into()]).unwrap(),
        &b,
        &store,
        &KeptBudget::new(u64::MAX),
    );
    assert!(c.outputs.len() <= 10);
    assert!(c.outputs_note.unwrap().contains("stopped after 10 entries"));
}

#[test]
fn outputs_are_written_to_a_new_folder_only() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    fs::create_dir(w.join("out")).unwrap();
    fs::write(w.join("out/r.json"), "{}").unwrap();
    let c = collect(
        &w,
        &outputs(vec!["out/*".into()]).unwrap(),
        &bounds(),
        &store,
        &KeptBudget::new(u64::MAX),
    );
    let kept = c.store.unwrap();
    let dest = t.path().join("dest");
    assert_eq!(write_outputs(&kept, &dest).unwrap(), 1);
    assert_eq!(fs::read(dest.join("out/r.json")).unwrap(), b"{}");
    let e = write_outputs(&kept, &dest).unwrap_err();
    assert!(matches!(e, WriteOutputsError::NotEmpty { .. }), "{e}");
}

/// Kept outputs of all executions share one budget: retained results
/// cannot fill the disk. What does not fit is listed `truncated` with the
/// sentence, and the bytes come back when the store goes.
#[test]
fn kept_outputs_of_all_executions_share_one_budget() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    fs::write(w.join("a"), vec![1u8; 600]).unwrap();
    fs::write(w.join("b"), vec![2u8; 600]).unwrap();
    let budget = KeptBudget::new(1000);
    let globs = outputs(vec!["*".into()]).unwrap();
    let first = collect(&w, &globs, &bounds(), &store, &budget);
    let got = by_path(&first);
    assert!(got["a"].sha256.is_some());
    assert!(got["b"].truncated && got["b"].error.as_ref().unwrap().contains("kept outputs"));
    assert_eq!(budget.used(), 600);
    let second = collect(&w, &globs, &bounds(), &store, &budget);
    assert!(
        second.outputs.iter().all(|o| o.sha256.is_none()),
        "{:?}",
        second.outputs
    );
    drop(first);
    assert_eq!(budget.used(), 0, "a dropped store gives its bytes back");
    let third = collect(&w, &globs, &bounds(), &store, &budget);
    assert_eq!(
        third.outputs.iter().filter(|o| o.sha256.is_some()).count(),
        1
    );
}

/// A folder of thousands of subfolders is listed whole. That no
/// descriptor is held per waiting folder is proven by tests/files.rs
/// under a low descriptor limit: counting this process's descriptors
/// here would count those of the tests running beside it.
#[test]
fn a_listing_of_many_folders_is_whole() {
    let (t, w) = ws();
    let store = t.path().join("store");
    fs::create_dir(&store).unwrap();
    for i in 0..3000 {
        fs::create_dir_all(w.join(format!("d/{i}"))).unwrap();
    }
    fs::write(w.join("d/2999/x.txt"), "deep").unwrap();
    let listing = crate::fsx::beneath::list(
        &File::open(&w).unwrap(),
        "d",
        crate::fsx::beneath::Bounds {
            entries: 10_000,
            depth: 4,
        },
    )
    .unwrap();
    assert_eq!(listing.entries.len(), 3001);
    let c = collect(
        &w,
        &outputs(vec!["d/**/*.txt".into()]).unwrap(),
        &bounds(),
        &store,
        &KeptBudget::new(u64::MAX),
    );
    assert!(by_path(&c)["d/2999/x.txt"].sha256.is_some());
}
