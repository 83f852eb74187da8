//! Environments on the command line (docs/environments.md): `env add` of a
//! tree built elsewhere, `env list`, `env show`, `env verify`, `env remove`
//! and `env gc`, driven through the real binary. Every refusal exits 125
//! with one sentence and leaves nothing in the store.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use skill_runner_tests::*;

/// `skill-runner ARGS` with the world's data dir.
fn runner(world: &World, args: &[&str]) -> Output {
    output_within(world.cmd().args(args), HANG_GUARD)
}

/// A small environment tree: a package under `python/`, a program and
/// two symlinks under `bin/` (one inside the tree, one into `/usr`).
fn small_tree(world: &World) -> PathBuf {
    let dir = world.path().join("tree");
    fs::create_dir_all(dir.join("python/greet")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("python/greet/__init__.py"), "WORD = 'hello'\n").unwrap();
    fs::write(dir.join("python/greet/py.typed"), "").unwrap();
    fs::write(dir.join("bin/greet"), "#!/bin/sh\necho hello\n").unwrap();
    fs::set_permissions(dir.join("bin/greet"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("../python/greet/__init__.py", dir.join("bin/greet.py")).unwrap();
    symlink("/usr/bin/python3", dir.join("bin/python3")).unwrap();
    dir
}

fn add(world: &World, dir: &Path, id: &str, extra: &[&str]) -> Output {
    let mut args = vec!["env", "add", dir.to_str().unwrap(), "--id", id];
    args.extend_from_slice(extra);
    runner(world, &args)
}

fn record(out: &Output) -> Value {
    assert!(out.status.success(), "{}", show(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(out)))
}

/// Exit 125, one line on stderr holding `needle`, nothing on stdout.
fn assert_refused(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one sentence: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(out.stdout.is_empty(), "{}", show(out));
}

/// Nothing was published and nothing is left half-written.
fn assert_store_empty(world: &World) {
    let root = world.data_dir().join("environments");
    for sub in ["trees", "records", "tmp"] {
        let left: Vec<_> = fs::read_dir(root.join(sub))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{sub}/ holds {left:?}");
    }
}

fn stored_tree(world: &World, hash: &str) -> PathBuf {
    world
        .data_dir()
        .join("environments/trees")
        .join(hash)
        .join("tree")
}

#[test]
fn env_add_publishes_a_sealed_tree_and_list_show_verify_agree() {
    let world = World::new();
    let dir = small_tree(&world);
    let rec = record(&add(&world, &dir, "greet-tools", &[]));
    let hash = rec["hash"].as_str().unwrap();
    let want = skill_runner::package::environment::store::hash_dir(&dir, &Default::default())
        .unwrap()
        .hash;
    assert_eq!(hash, want, "the record names the tree's hash");
    assert_eq!(rec["id"], "greet-tools");
    assert_eq!(
        (rec["files"].as_u64(), rec["symlinks"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(rec["bytes"].as_u64(), Some(15 + 21));

    let tree = stored_tree(&world, hash);
    let mode = |p: &str| {
        fs::symlink_metadata(tree.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("bin/greet"), 0o555, "an executable stays executable");
    assert_eq!(mode("python/greet/__init__.py"), 0o444);
    assert_eq!(mode("python/greet"), 0o555);
    assert_eq!(mode(""), 0o555);
    assert_eq!(
        fs::read_link(tree.join("bin/python3")).unwrap(),
        Path::new("/usr/bin/python3")
    );

    let list = runner(&world, &["env", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed, Value::Array(vec![rec.clone()]), "{}", show(&list));
    let plain = runner(&world, &["env", "list"]);
    assert!(text(&plain.stdout).starts_with(&format!("greet-tools\t{hash}\t")));
    let shown = runner(&world, &["env", "show", "greet-tools", "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown, Value::Array(vec![rec.clone()]));

    for target in ["greet-tools", hash] {
        let out = runner(&world, &["env", "verify", target]);
        assert!(out.status.success(), "{}", show(&out));
        assert_eq!(text(&out.stdout), format!("ok {hash} (5 entries)\n"));
    }

    // The same tree again: the same record, still one copy.
    let again = record(&add(&world, &dir, "greet-tools", &[]));
    assert_eq!(again, rec);
    let other = record(&add(&world, &dir, "other-name", &[]));
    assert_eq!(other["hash"], rec["hash"]);
    let trees = fs::read_dir(world.data_dir().join("environments/trees")).unwrap();
    assert_eq!(trees.count(), 1, "one copy per hash");
}

#[test]
fn a_byte_changed_in_the_published_tree_is_refused_by_verify() {
    let world = World::new();
    let dir = small_tree(&world);
    let rec = record(&add(&world, &dir, "greet-tools", &[]));
    let hash = rec["hash"].as_str().unwrap();
    let file = stored_tree(&world, hash).join("python/greet/__init__.py");
    // As root could: open it up, flip one byte, seal it again.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = fs::read(&file).unwrap();
    bytes[0] ^= 1;
    fs::write(&file, &bytes).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o444)).unwrap();
    for target in ["greet-tools", hash] {
        let out = runner(&world, &["env", "verify", target]);
        assert_refused(&out, "the bytes of \"python/greet/__init__.py\" changed");
    }
}

#[test]
fn a_file_added_or_made_writable_in_the_published_tree_is_refused_by_verify() {
    let world = World::new();
    let dir = small_tree(&world);
    let rec = record(&add(&world, &dir, "greet-tools", &[]));
    let hash = rec["hash"].as_str().unwrap();
    let tree = stored_tree(&world, hash);
    let folder = tree.join("python/greet");
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).unwrap();
    let out = runner(&world, &["env", "verify", hash]);
    assert_refused(
        &out,
        "folder \"python/greet\" has mode 755, not the sealed 555",
    );
    fs::write(folder.join("evil.py"), "import os\n").unwrap();
    fs::set_permissions(folder.join("evil.py"), fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o555)).unwrap();
    let out = runner(&world, &["env", "verify", hash]);
    assert_refused(&out, "were added");
}

#[test]
fn a_symlink_out_of_the_tree_is_refused_and_nothing_is_published() {
    for (target, needle) in [
        ("../../../etc/passwd", "a target that leaves the tree"),
        ("greet/../../../x", "a target with '..' after a name"),
        (
            "/etc/passwd",
            "an absolute path outside the read-only system",
        ),
        ("/home", "an absolute path outside the read-only system"),
    ] {
        let world = World::new();
        let dir = small_tree(&world);
        symlink(target, dir.join("python/link")).unwrap();
        let out = add(&world, &dir, "greet-tools", &[]);
        assert_refused(&out, needle);
        assert_store_empty(&world);
    }
}

#[test]
fn fifos_sockets_and_over_size_trees_are_refused_and_nothing_is_published() {
    let world = World::new();
    let dir = small_tree(&world);
    let fifo = dir.join("python/pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_refused(&add(&world, &dir, "greet-tools", &[]), "is a FIFO");
    assert_store_empty(&world);
    fs::remove_file(&fifo).unwrap();

    let sock = dir.join("bin/sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    assert_refused(&add(&world, &dir, "greet-tools", &[]), "is a socket");
    assert_store_empty(&world);
    drop(listener);
    fs::remove_file(&sock).unwrap();

    for (flag, needle) in [
        (["--max-entries", "4"], "more than 4 entries"),
        (["--max-bytes", "20"], "more than 20 bytes"),
        (
            ["--max-file-bytes", "10"],
            "over the limit of 10 for one file",
        ),
    ] {
        assert_refused(&add(&world, &dir, "greet-tools", &flag), needle);
        assert_store_empty(&world);
    }
    assert_refused(&add(&world, &dir, "Greet_Tools", &[]), "is not admissible");
    let missing = world.path().join("missing");
    assert_refused(&add(&world, &missing, "greet-tools", &[]), "cannot read");
    assert_store_empty(&world);
}

const HASH_A: &str = "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

#[test]
fn a_loose_lock_is_refused_naming_its_line() {
    let world = World::new();
    let dir = small_tree(&world);
    for (body, needle) in [
        ("pypdf==4.3.1\n", "line 2 (\"pypdf==4.3.1\"): a requirement without --hash"),
        ("pypdf>=4 --hash=H\n", "line 2 (\"pypdf>=4 --hash=H\"): a requirement must pin one version with =="),
        ("--index-url https://example.invalid/simple\n", "line 2 (\"--index-url https://example.invalid/simple\"): a lock must not name where packages come from"),
        ("-e ./src\n", "line 2 (\"-e ./src\"): an editable requirement"),
    ] {
        let lock = world.path().join("requirements.txt");
        fs::write(&lock, format!("# compiled\n{}", body.replace('H', HASH_A))).unwrap();
        let needle = needle.replace("--hash=H", &format!("--hash={HASH_A}"));
        let out = add(&world, &dir, "greet-tools", &["--python", lock.to_str().unwrap()]);
        assert_refused(&out, &needle);
        assert_store_empty(&world);
    }
}

#[test]
fn add_with_a_lock_records_the_lock_digest_and_the_interpreter() {
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        skip(format!("no {python} on this host"));
        return;
    }
    let world = World::new();
    let dir = small_tree(&world);
    let lock = world.path().join("requirements.txt");
    let lock_text = format!("greet==1.0 \\\n    --hash={HASH_A}\n");
    fs::write(&lock, &lock_text).unwrap();
    let rec = record(&add(
        &world,
        &dir,
        "greet-tools",
        &["--python", lock.to_str().unwrap()],
    ));
    let lock_sha = skill_runner::package::hash::file_hash(lock_text.as_bytes());
    assert_eq!(
        rec["locks"],
        serde_json::json!([{"kind": "python-requirements", "sha256": lock_sha}])
    );
    let base = &rec["base"][0];
    assert_eq!(base["family"], "python");
    assert_eq!(base["path"], python);
    let binary = fs::read(fs::canonicalize(python).unwrap()).unwrap();
    assert_eq!(
        base["sha256"],
        skill_runner::package::hash::file_hash(&binary)
    );
    let version = std::process::Command::new(python)
        .args(["-c", "import platform; print(platform.python_version())"])
        .output()
        .unwrap();
    assert_eq!(base["version"], text(&version.stdout).trim());

    let out = add(&world, &dir, "other", &["--interpreter", "/root/python3"]);
    assert_refused(&out, "must be an absolute path under /usr");
}

#[test]
fn gc_removes_a_tree_only_once_no_record_names_it() {
    let world = World::new();
    let dir = small_tree(&world);
    let a = record(&add(&world, &dir, "one", &[]));
    record(&add(&world, &dir, "two", &[]));
    let hash = a["hash"].as_str().unwrap();
    let gc = |world: &World| -> Value {
        let out = runner(world, &["env", "gc"]);
        assert!(out.status.success(), "{}", show(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(gc(&world), serde_json::json!({"removed": [], "in_use": []}));
    let out = runner(&world, &["env", "remove", "one", hash]);
    assert_eq!(record(&out), a);
    assert_eq!(
        gc(&world)["removed"],
        serde_json::json!([]),
        "two still names it"
    );
    assert!(stored_tree(&world, hash).exists());
    runner(&world, &["env", "remove", "two", hash]);
    assert_eq!(gc(&world)["removed"], serde_json::json!([hash]));
    assert!(!stored_tree(&world, hash).exists());
    assert_refused(
        &runner(&world, &["env", "verify", hash]),
        "no environment with hash",
    );
    assert_refused(
        &runner(&world, &["env", "show", "one"]),
        "no environment with id \"one\"",
    );
}
