//! Files in and out of an execution through the real binary under real
//! bubblewrap: a job file alone carries its inputs and gets its outputs
//! back (`run --output-dir`); what an attacker would try (paths that leave
//! the workspace, symlinks, hard links, FIFOs and devices planted among the
//! outputs, an output swapped for a symlink while it is collected, a 10 GB
//! sparse file, 100,000 small files) is refused or bounded with a sentence,
//! and leaves nothing behind.

use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};
use skill_runner_tests::*;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn sha(bytes: &[u8]) -> String {
    skill_runner::package::hash::file_hash(bytes)
}

/// The outputs of a result by path.
fn outputs(doc: &Value) -> std::collections::BTreeMap<String, Value> {
    doc["outputs"]
        .as_array()
        .unwrap_or_else(|| panic!("no outputs in {doc:#}"))
        .iter()
        .map(|o| (o["path"].as_str().unwrap().to_owned(), o.clone()))
        .collect()
}

/// Nothing of an execution is left in the data dir: no execution folder,
/// no kept outputs.
fn assert_nothing_left(w: &World) {
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());
    let kept = w.data_dir().join("outputs");
    if kept.exists() {
        let left: Vec<_> = std::fs::read_dir(&kept).unwrap().collect();
        assert!(left.is_empty(), "kept outputs left: {left:?}");
    }
}

/// Every file below `dir`, as relative paths.
fn tree(dir: &Path) -> Vec<String> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            all.push(rel);
        }
    }
    all.sort();
    all
}

#[test]
fn a_job_file_alone_carries_its_inputs_and_gets_its_outputs_back() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let csv = b"name,n\nalpha,1\nbeta,2\n";
    let script = "set -e; test -w in/data.csv; stat -c %a in/data.csv run.sh; \
                  ./run.sh; mkdir -p out; tr a-z A-Z < in/data.csv > out/upper.csv; \
                  head -c 200000 /dev/zero > out/big.bin";
    let job = json!({
        "argv": ["/bin/sh", "-c", script],
        "files": [
            {"path": "in/data.csv", "content": b64(csv)},
            {"path": "run.sh", "content": b64(b"#!/bin/sh\necho ran\n"), "mode": "0755"},
        ],
        "outputs": ["out/*.csv", "out/big.bin"],
    });
    let path = w.job("job", &job);
    let dest = w.path().join("collected");
    let out = w
        .cmd()
        .args(["run", "--json", "--output-dir"])
        .arg(&dest)
        .arg(&path)
        .output()
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", show(&out)));
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    assert_eq!(doc["stdout"], "644\n755\nran\n", "{doc:#}");
    let upper = b"NAME,N\nALPHA,1\nBETA,2\n";
    let got = outputs(&doc);
    let csv_out = &got["out/upper.csv"];
    assert_eq!(csv_out["size"], upper.len());
    assert_eq!(csv_out["sha256"], sha(upper));
    assert_eq!(csv_out["content"], b64(upper));
    // Over the inline bound: kept and written, not in the result.
    let big = &got["out/big.bin"];
    assert_eq!(big["truncated"], true, "{big}");
    assert!(big.get("content").is_none());
    assert_eq!(big["sha256"], sha(&vec![0u8; 200_000]));
    assert_eq!(std::fs::read(dest.join("out/upper.csv")).unwrap(), upper);
    assert_eq!(
        std::fs::read(dest.join("out/big.bin")).unwrap().len(),
        200_000
    );
    assert_eq!(tree(&dest), vec!["out", "out/big.bin", "out/upper.csv"]);
    assert_nothing_left(&w);

    // The same folder again: refused before the job runs.
    let again = w
        .cmd()
        .args(["run", "--output-dir"])
        .arg(&dest)
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(125), "{}", show(&again));
    assert!(
        text(&again.stderr).contains("is not empty"),
        "{}",
        show(&again)
    );
    assert!(
        !text(&again.stdout).contains("ran"),
        "the job ran: {}",
        show(&again)
    );

    // A folder whose parent is missing, or a symlink: refused before the job runs.
    std::os::unix::fs::symlink(w.path(), w.path().join("link")).unwrap();
    for bad in [w.path().join("no/such/dir"), w.path().join("link")] {
        let out = w
            .cmd()
            .args(["run", "--output-dir"])
            .arg(&bad)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        assert!(
            !text(&out.stdout).contains("ran"),
            "the job ran: {}",
            show(&out)
        );
    }
}

#[test]
fn paths_that_leave_the_workspace_are_refused_before_anything_runs() {
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    std::fs::write(ws.join("keep"), "k").unwrap();
    let file = |p: &str| json!({"path": p, "content": b64(b"x")});
    let cases = [
        (json!({"files": [file("../escape")]}), "'..'"),
        (json!({"files": [file("/etc/cron.d/x")]}), "absolute"),
        (json!({"files": [file("a\u{0}b")]}), "NUL"),
        (json!({"files": [file("ok"), file("ok")]}), "twice"),
        (json!({"outputs": ["../*"]}), "'..'"),
        (json!({"outputs": ["/etc/passwd"]}), "absolute"),
        (json!({"outputs": ["a\u{0}"]}), "NUL"),
        (json!({"outputs": ["out/**"]}), "ends in **"),
    ];
    for (extra, want) in cases {
        let mut job = json!({"argv": ["/bin/sh", "-c", "touch /workspace/ran"], "workspace": ws});
        job.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (code, doc, _) = w.run_json(&job);
        assert_eq!(code, 125, "{doc:#}");
        assert_eq!(doc["status"], "rejected");
        assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{message} lacks {want}");
        assert_eq!(tree(&ws), vec!["keep"], "{want}: the workspace changed");
    }
    assert_nothing_left(&w);
}

/// A symlink planted in a named workspace where a later file's folder
/// goes refuses the job: the earlier files are not written, the folders
/// they needed not made, the symlink's target untouched.
#[test]
fn a_refused_job_leaves_a_named_workspace_as_it_was() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    let outside = w.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("evil")).unwrap();
    std::fs::create_dir(ws.join("dir")).unwrap();
    let file = |p: &str| json!({"path": p, "content": b64(b"x")});
    for (files, want) in [
        (vec![file("new/a"), file("evil/b")], "symlink"),
        (vec![file("new/a"), file("dir")], "folder"),
    ] {
        let job = json!({"argv": ["/bin/sh", "-c", "touch /workspace/ran"],
                         "workspace": ws, "files": files});
        let (code, doc, _) = w.run_json(&job);
        assert_eq!(code, 125, "{doc:#}");
        assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{message}");
        assert_eq!(tree(&ws), vec!["dir", "evil"]);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }
    assert_nothing_left(&w);
}

/// Files over the runner's bounds are refused as the job's fault, before
/// the workspace is touched.
#[test]
fn files_over_the_bounds_are_refused() {
    let w = World::new();
    let big = vec![0u8; (16 << 20) + 1];
    let job = json!({"argv": ["/bin/true"], "files": [{"path": "big", "content": b64(&big)}]});
    let (code, doc, _) = w.run_json(&job);
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "bad_job");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 16777216 bytes per file"),
        "{doc:#}"
    );
    assert_nothing_left(&w);
}

/// What the command plants among its outputs: a symlink to a host file, a
/// hard link to one (the kernel refuses it across the sandbox's mounts),
/// a hard link inside the workspace, a FIFO, a device (mknod is denied in
/// the sandbox; were it not, the node is refused as a device). Each is
/// listed with a sentence; no host byte reaches the result or the output
/// folder.
#[test]
fn planted_links_fifos_and_devices_are_listed_and_never_read() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let script = "mkdir -p out; echo mine > out/real.txt; \
        ln -s /etc/passwd out/sym.txt; \
        if ln /etc/passwd out/hostlink.txt 2>/dev/null; then echo hostlink made; fi; \
        echo shared > out/a.txt; ln out/a.txt out/b.txt; \
        mkfifo out/fifo.txt; \
        if mknod out/null.txt c 1 3 2>/dev/null; then echo mknod made; else echo mknod denied; fi; \
        ln -s /etc out/etcdir; true";
    let dest = w.path().join("collected");
    let job =
        json!({"argv": ["/bin/sh", "-c", script], "outputs": ["out/*.txt", "out/etcdir/passwd"]});
    let path = w.job("job", &job);
    let out = w
        .cmd()
        .args(["run", "--json", "--output-dir"])
        .arg(&dest)
        .arg(&path)
        .output()
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", show(&out)));
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let stdout = doc["stdout"].as_str().unwrap();
    assert!(
        !stdout.contains("hostlink made"),
        "a hard link to a host file was made: {stdout}"
    );
    let got = outputs(&doc);
    assert_eq!(got["out/real.txt"]["content"], b64(b"mine\n"));
    let error = |p: &str| {
        got[p]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{p} kept: {doc:#}"))
            .to_owned()
    };
    assert!(error("out/sym.txt").contains("symlink"));
    assert!(error("out/a.txt").contains("hard links"));
    assert!(error("out/b.txt").contains("hard links"));
    assert!(error("out/fifo.txt").contains("not a regular file"));
    assert!(error("out/etcdir/passwd").contains("symlink"));
    if stdout.contains("mknod made") {
        assert!(error("out/null.txt").contains("not a regular file"));
    } else {
        assert!(stdout.contains("mknod denied"), "{stdout}");
    }
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let text = serde_json::to_string(&doc).unwrap();
    assert!(!text.contains(&b64(&passwd)), "host bytes in the result");
    for (p, o) in &got {
        if p != "out/real.txt" {
            assert!(
                o.get("sha256").is_none() && o.get("content").is_none(),
                "{o}"
            );
        }
    }
    assert_eq!(tree(&dest), vec!["out", "out/real.txt"]);
    assert_nothing_left(&w);
}

/// An output swapped for a symlink to a host secret, again and again
/// while the runner lists and reads it (from the host: the command's own
/// processes die with it), never yields the secret.
#[cfg(target_os = "linux")]
#[test]
fn an_output_swapped_for_a_symlink_while_collected_is_never_read_through() {
    use std::sync::atomic::{AtomicBool, Ordering};
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    let secret = w.path().join("secret");
    std::fs::write(&secret, "HOST SECRET").unwrap();
    std::fs::create_dir(ws.join("out")).unwrap();
    give_to_sandbox(&ws);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, out, secret) = (stop.clone(), ws.join("out"), secret.clone());
        std::thread::spawn(move || {
            let _ = std::fs::write(out.join("f0"), "mine");
            let _ = std::os::unix::fs::symlink(&secret, out.join("f1"));
            while !stop.load(Ordering::Relaxed) {
                let _ = nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &out.join("f0"),
                    nix::fcntl::AT_FDCWD,
                    &out.join("f1"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                );
            }
        })
    };
    // The command also loops swapping them until it is ended.
    let script = "cd out; for i in $(seq 300); do mv f0 t 2>/dev/null; mv f1 f0 2>/dev/null; mv t f1 2>/dev/null; done; true";
    for _ in 0..4 {
        let job = json!({"argv": ["/bin/sh", "-c", script], "workspace": ws, "outputs": ["out/*", "out/f0", "out/f1"]});
        let (_, doc, _) = w.run_json(&job);
        let text = serde_json::to_string(&doc).unwrap();
        assert!(!text.contains(&b64(b"HOST SECRET")), "{doc:#}");
        for o in doc["outputs"].as_array().unwrap() {
            if let Some(s) = o.get("sha256") {
                assert_eq!(s.as_str().unwrap(), sha(b"mine"), "{o}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert_nothing_left(&w);
}

/// A 10 GB sparse file is listed with its size and `truncated`, never
/// read (no sha256: hashing it would read 10 GB).
#[test]
fn a_ten_gigabyte_sparse_output_is_listed_and_never_read() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let job = json!({
        "argv": ["/bin/sh", "-c", "truncate -s 10G big.bin && echo small > small.txt"],
        "outputs": ["*.bin", "small.txt"],
        "limits": {"file_size_bytes": 16u64 << 30},
    });
    let (_, doc, _) = w.run_json(&job);
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let got = outputs(&doc);
    let big = &got["big.bin"];
    assert_eq!(big["size"], 10u64 << 30, "{big}");
    assert_eq!(big["truncated"], true);
    assert!(big.get("sha256").is_none(), "{big}");
    assert!(
        big["error"].as_str().unwrap().contains("per output"),
        "{big}"
    );
    assert_eq!(got["small.txt"]["content"], b64(b"small\n"));
    assert_nothing_left(&w);
}

/// 100,000 small files: the listing and the kept outputs are bounded and
/// the result says so; the rest are not listed one by one.
#[test]
fn a_hundred_thousand_small_files_are_bounded() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // Made by redirection, not `touch`: where the runner is root of a
    // user namespace mapping no other uid, setting a file's times is
    // refused in the sandbox.
    let script = "mkdir many && cd many && for i in $(seq 100000); do : > $i; done && ls | wc -l";
    let job = json!({
        "argv": ["/bin/sh", "-c", script],
        "outputs": ["many/*"],
        "limits": {"timeout_ms": 300000},
    });
    let (_, doc, _) = w.run_json(&job);
    assert_eq!(doc["stdout"], "100000\n", "{doc:#}");
    let list = doc["outputs"].as_array().unwrap();
    let kept = list.iter().filter(|o| o.get("sha256").is_some()).count();
    assert_eq!(kept, 1000, "the default bound of kept outputs");
    assert_eq!(list.len(), 2000, "at most twice the bound are listed");
    assert!(list[1999]["error"]
        .as_str()
        .unwrap()
        .contains("more than 1000 outputs"));
    let note = doc["outputs_note"].as_str().unwrap();
    assert!(
        note.contains("98000 more matching paths are not listed"),
        "{note}"
    );
    assert_nothing_left(&w);
}

/// A folder with more subfolders than the runner may open descriptors is
/// listed whole: the listing holds no descriptor per folder waiting its
/// turn (it held one each, so 600 folders under a limit of 256 ended the
/// listing, and in a daemon would have starved every other request).
#[test]
fn many_subfolders_do_not_exhaust_the_runners_descriptors() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let script = "mkdir d && cd d && seq 600 | xargs mkdir && echo deep > 600/x.txt";
    let job = json!({"argv": ["/bin/sh", "-c", script], "outputs": ["d/**/*.txt"]});
    let path = w.job("job", &job);
    let mut cmd = runner_command();
    cmd.env("SKILL_RUNNER_DATA_DIR", w.data_dir());
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut limited = std::process::Command::new("/bin/sh");
    limited
        .arg("-c")
        .arg("ulimit -Sn 256 && exec \"$@\"")
        .arg("sh")
        .arg(program)
        .args(args)
        .args(["run", "--json"])
        .arg(&path)
        .env("SKILL_RUNNER_DATA_DIR", w.data_dir())
        .stdin(std::process::Stdio::null());
    let out = limited.output().unwrap();
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", show(&out)));
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let got = outputs(&doc);
    assert_eq!(got["d/600/x.txt"]["content"], b64(b"deep\n"), "{doc:#}");
    assert_nothing_left(&w);
}

/// `explain` shows the launch a job with files gets: its workspace is a
/// host folder of the execution (bound from a descriptor), not a tmpfs.
#[test]
fn explain_shows_the_host_workspace_of_a_job_with_files() {
    let w = World::new();
    let job = json!({"execution_id": "ex-files", "argv": ["/bin/true"],
                     "files": [{"path": "a", "content": b64(b"x")}]});
    let path = w.job("job", &job);
    let out = w.cmd().arg("explain").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("<data-dir>/executions/ex-files.<random>/workspace,"),
        "{shown}"
    );
    let plain = json!({"execution_id": "ex-plain", "argv": ["/bin/true"]});
    let out = w
        .cmd()
        .arg("explain")
        .arg(w.job("plain", &plain))
        .output()
        .unwrap();
    assert!(!text(&out.stdout).contains("/workspace,"), "{}", show(&out));
}

/// Files go into a named workspace too, where they stay after the run,
/// owned by the user the command runs as (it may rewrite them).
#[test]
fn files_are_written_into_a_named_workspace_as_the_sandbox_user_owns_it() {
    use std::os::unix::fs::MetadataExt;
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    let owner = std::fs::metadata(&ws).unwrap().uid();
    let job = json!({
        "argv": ["/bin/sh", "-c", "echo more >> in/data.txt && cat in/data.txt"],
        "workspace": ws,
        "files": [{"path": "in/data.txt", "content": b64(b"given\n")}],
    });
    let (code, doc, _) = w.run_json(&job);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["stdout"], "given\nmore\n");
    assert_eq!(
        std::fs::read(ws.join("in/data.txt")).unwrap(),
        b"given\nmore\n"
    );
    for p in ["in", "in/data.txt"] {
        assert_eq!(std::fs::metadata(ws.join(p)).unwrap().uid(), owner, "{p}");
    }
    assert_eq!(
        tree(&ws),
        vec![
            ".sciencediscovery",
            ".sciencediscovery/skill-extensions",
            "in",
            "in/data.txt"
        ]
    );
    assert_nothing_left(&w);
}

/// A root runner reads outputs and writes input files for the sandbox
/// user, never with its own rights: in a named workspace, a file or
/// folder of another user that the sandbox user could not read is listed
/// with an error and not kept, and an input file over a folder it could
/// not write is refused before anything runs, the folder left as it was.
#[test]
fn a_root_runner_reads_and_writes_a_named_workspace_only_as_the_sandbox_user_could() {
    use std::os::unix::fs::PermissionsExt;
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    let probe = json!({"argv": ["true"], "workspace": ws});
    let (_, doc, _) = w.run_json(&probe);
    if doc["identity"]["mode"] != "sandbox_user" {
        skip("only a root runner that switches to the sandbox user reads and writes for it");
        return;
    }
    let secret = ws.join("secret");
    std::fs::write(&secret, b"root's own\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let locked = ws.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join("inside"), b"behind a 0700 folder\n").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hooks = ws.join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    std::fs::write(hooks.join("post"), b"someone else's\n").unwrap();
    std::fs::set_permissions(&hooks, std::fs::Permissions::from_mode(0o755)).unwrap();

    let job = json!({
        "argv": ["true"],
        "workspace": ws,
        "outputs": ["secret", "locked/inside"],
    });
    let (code, doc, _) = w.run_json(&job);
    assert_eq!(code, 0, "{doc:#}");
    let outputs = doc["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2, "{doc:#}");
    for o in outputs {
        assert!(o.get("sha256").is_none(), "never kept: {o:#}");
        assert!(o.get("content").is_none(), "never read: {o:#}");
        let why = o["error"].as_str().unwrap();
        assert!(why.contains("the sandbox user may not"), "{why}");
    }

    let job = json!({
        "argv": ["true"],
        "workspace": ws,
        "files": [{"path": "hooks/post", "content": b64(b"planted\n")}],
    });
    let (code, doc, _) = w.run_json(&job);
    assert_ne!(code, 0, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains("the sandbox user may not"), "{message}");
    assert_eq!(
        std::fs::read(hooks.join("post")).unwrap(),
        b"someone else's\n"
    );
    let names: Vec<_> = std::fs::read_dir(&hooks)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "no private name left: {names:?}");
}
