//! The build and publish paths of environments attacked
//! (docs/environments.md, "Attacks on the build"): hostile wheels made
//! here (a wheel is a zip; python3's zipfile writes one, its SHA-256 goes
//! in the lock) and served to `env build` through pip's own configuration
//! (`PIP_NO_INDEX`, `PIP_FIND_LINKS`: no index at all); the install step
//! driven directly, trying to write outside its tree; a tree with a hard
//! link given to `env add`. Each is refused or confined, and nothing is
//! published or left outside.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};
use skill_runner::exec::envbuild::{BuildDir, SandboxInstall};
use skill_runner::package::environment::build::SandboxRun;
use skill_runner_tests::envs::{install_runner, pip_usable, PYTHON};
use skill_runner_tests::*;

/// Writes the wheel `NAME-1.0-py3-none-any.whl` into `dir` holding
/// `members` (archive name, bytes) beside a valid dist-info whose RECORD
/// lists them; returns the lock line pinning it.
fn wheel(dir: &Path, name: &str, members: &[(&str, &[u8])]) -> String {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{name}-1.0-py3-none-any.whl"));
    let members: Vec<Value> = members
        .iter()
        .map(|(n, b)| json!([n, String::from_utf8_lossy(b)]))
        .collect();
    let spec = dir.join(format!("{name}.json"));
    fs::write(&spec, serde_json::to_vec(&members).unwrap()).unwrap();
    let script = r#"
import base64, hashlib, json, sys, zipfile
path, name, members = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
info = f"{name}-1.0.dist-info"
files = [(n, b.encode()) for n, b in members] + [
    (f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()),
    (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: skill-runner-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
]
record = "".join(
    f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
    for n, b in files
) + f"{info}/RECORD,,\n"
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for n, b in files + [(f"{info}/RECORD", record.encode())]:
        z.writestr(zipfile.ZipInfo(n, (2020, 1, 1, 0, 0, 0)), b)
"#;
    let out = std::process::Command::new(PYTHON)
        .args(["-I", "-c", script])
        .arg(&path)
        .arg(name)
        .arg(&spec)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    fs::remove_file(&spec).unwrap();
    let sha = skill_runner::package::hash::file_hash(&fs::read(&path).unwrap());
    format!("{name}==1.0 --hash=sha256:{sha}\n")
}

/// `env build` of `lock` with pip told to use only the folder `wheels`.
fn build_from(world: &World, lock: &str, wheels: &Path, extra: &[&str]) -> Output {
    let path = world.path().join("requirements.txt");
    fs::write(&path, lock).unwrap();
    output_within(
        world
            .cmd()
            .args(["env", "build", "--python"])
            .arg(&path)
            .args(["--id", "hostile"])
            .args(extra)
            .env("PIP_NO_INDEX", "1")
            .env("PIP_FIND_LINKS", wheels),
        HANG_GUARD,
    )
}

/// Refused with one sentence, exit 125, and nothing in the store.
fn assert_refused_and_nothing_published(world: &World, out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let err = text(&out.stderr);
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(last.contains(needle), "{needle:?} not in {last}");
    assert!(out.stdout.is_empty(), "{}", show(out));
    let list = output_within(world.cmd().args(["env", "list", "--json"]), HANG_GUARD);
    assert_eq!(text(&list.stdout).trim(), "[]", "{}", show(&list));
    let trees = world.data_dir().join("environments/trees");
    assert_eq!(fs::read_dir(trees).unwrap().count(), 0);
}

#[test]
fn a_wheel_with_paths_outside_its_target_is_refused_and_writes_nothing_outside() {
    if !pip_usable() {
        return;
    }
    let mark = skill_runner::fsx::random_hex();
    let up = format!("../../../../../../../escape-{mark}.py");
    let abs = format!("/tmp/absolute-{mark}.py");
    for (member, lands) in [
        (up.as_str(), PathBuf::from(format!("/escape-{mark}.py"))),
        (abs.as_str(), PathBuf::from(&abs)),
    ] {
        let world = World::new();
        let wheels = world.path().join("wheels");
        let lock = wheel(
            &wheels,
            "evil",
            &[
                ("evil/__init__.py", b"X = 1\n"),
                (member, b"planted = True\n"),
            ],
        );
        let out = build_from(&world, &lock, &wheels, &[]);
        assert_refused_and_nothing_published(
            &world,
            &out,
            "the install step failed in the sandbox",
        );
        // pip's own check, first; the sandbox would confine it anyway
        // (the_install_step_cannot_write_outside_its_tree).
        let err = text(&out.stderr);
        assert!(
            err.contains("trying to install outside the target directory"),
            "{err}"
        );
        assert!(
            !lands.exists(),
            "{member} was written at {}",
            lands.display()
        );
        let tmp_left: Vec<_> = fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(&mark))
            .collect();
        assert!(tmp_left.is_empty(), "{tmp_left:?}");
    }
}

#[test]
fn a_wheel_that_unpacks_past_the_byte_bound_is_stopped_and_nothing_is_published() {
    if !pip_usable() {
        return;
    }
    let world = World::new();
    let wheels = world.path().join("wheels");
    // 8 MiB of zeros compress to a few KiB.
    let zeros = vec![b'0'; 8 << 20];
    let lock = wheel(
        &wheels,
        "bomb",
        &[("bomb/__init__.py", b""), ("bomb/zeros.txt", &zeros)],
    );
    let out = build_from(&world, &lock, &wheels, &["--max-bytes", "2000000"]);
    assert_refused_and_nothing_published(&world, &out, "the install step failed in the sandbox");
    let err = text(&out.stderr);
    assert!(err.contains("limit_exceeded"), "{err}");
    // The same wheel under a bound it fits builds: the refusal was the bound's.
    let world = World::new();
    let out = build_from(&world, &lock, &wheels, &[]);
    assert!(out.status.success(), "{}", show(&out));
}

/// The install step, driven directly with a command of ours in place of
/// pip: it may write its tree and its private `/tmp`, and nothing of the
/// host: not the data dir, not the host's `/tmp`, `/usr`, `/etc` or the
/// runner's home.
#[test]
fn the_install_step_cannot_write_outside_its_tree() {
    if !pip_usable() {
        return;
    }
    let world = World::new();
    let Some(runner) = install_runner(&world) else {
        return;
    };
    let owner = runner.host.identity.clone().unwrap().switch_to();
    let dir = BuildDir::create(owner).unwrap();
    let folders = dir.folders();
    let mark = skill_runner::fsx::random_hex();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let targets: Vec<PathBuf> = vec![
        world
            .data_dir()
            .join(format!("environments/planted-{mark}")),
        std::env::temp_dir().join(format!("planted-{mark}")),
        dir.path.join(format!("planted-{mark}")),
        PathBuf::from(format!("/usr/lib/planted-{mark}")),
        PathBuf::from(format!("/etc/planted-{mark}")),
        Path::new(&home).join(format!("planted-{mark}")),
    ];
    let code = r#"
import sys
for path in sys.argv[2:]:
    try:
        open(path, "w").write("planted")
        print(path, "written")
    except OSError as e:
        print(path, "denied", e.strerror)
open(sys.argv[1] + "/tree-file", "w").write("mine")
"#;
    let mut argv: Vec<OsString> = vec![PYTHON.into(), "-I".into(), "-c".into(), code.into()];
    argv.push(folders.tree.clone().into());
    argv.extend(targets.iter().map(|p| p.clone().into_os_string()));
    let mut sandbox = SandboxInstall {
        runner: &runner,
        timeout_ms: 60_000,
        owner,
        disk_bytes: 1 << 30,
    };
    sandbox.run_offline(&argv, &folders).unwrap();
    assert_eq!(
        fs::read_to_string(folders.tree.join("tree-file")).unwrap(),
        "mine",
        "the control: the tree is writable"
    );
    for target in &targets {
        assert!(
            !target.exists(),
            "{} was written from the install step",
            target.display()
        );
    }
}

#[test]
fn a_tree_with_a_hard_link_is_refused_by_env_add_and_nothing_is_published() {
    let world = World::new();
    let tree = world.path().join("tree");
    fs::create_dir_all(tree.join("python")).unwrap();
    fs::write(tree.join("python/mod.py"), "X = 1\n").unwrap();
    // As a publisher could: a second name for a file it should not publish.
    let secret = world.path().join("secret");
    fs::write(&secret, "not for the sandbox\n").unwrap();
    fs::hard_link(&secret, tree.join("python/data.txt")).unwrap();
    let out = output_within(
        world
            .cmd()
            .args(["env", "add"])
            .arg(&tree)
            .args(["--id", "linked"]),
        HANG_GUARD,
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one sentence: {err}");
    assert!(err.contains("data.txt has 2 hard links"), "{err}");
    let list = output_within(world.cmd().args(["env", "list", "--json"]), HANG_GUARD);
    assert_eq!(text(&list.stdout).trim(), "[]", "{}", show(&list));
}
