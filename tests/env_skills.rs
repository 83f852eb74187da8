//! Real skills run with environments built from hash-pinned locks, through
//! the real binary under real bubblewrap (docs/environments.md): the
//! Apache-2.0 skills `skill-creator` and `slack-gif-creator`, copied
//! unchanged into `tests/fixtures/skills/` (see its README for where from),
//! and our own document scripts in `tests/fixtures/env-scripts/`.
//!
//! Each lock in `scripts/locks/` is built once per run of the test binary
//! with `skill-runner env build` and pip's own index configuration
//! ([`skill_runner_tests::envs`]); every test here then runs jobs against
//! that one data dir.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner_tests::envs::{self, SharedEnv, PYTHON};
use skill_runner_tests::*;

/// The shared environment, or `None` (skipped) where no sandbox can start,
/// there is no interpreter, or pip cannot reach its index (all failures
/// under `SKILL_RUNNER_MUST_WORK`).
fn ready(env: Result<&'static SharedEnv, String>) -> Option<&'static SharedEnv> {
    if !require_sandbox() {
        return None;
    }
    if !Path::new(PYTHON).exists() {
        skip(format!("no {PYTHON} on this host"));
        return None;
    }
    match env {
        Ok(env) => Some(env),
        Err(why) if why.contains("pip download failed") => {
            skip(format!("pip cannot fetch from its index here: {why}"));
            None
        }
        Err(why) => panic!("{why}"),
    }
}

fn fixture_skill(name: &str) -> PathBuf {
    project_dir().join("tests/fixtures/skills").join(name)
}

fn fixture_script(name: &str) -> PathBuf {
    project_dir().join("tests/fixtures/env-scripts").join(name)
}

/// The result's stdout lines that start with one of `prefixes`.
fn lines_with<'a>(doc: &'a Value, prefixes: &[&str]) -> Vec<&'a str> {
    doc["stdout"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .collect()
}

/// A skill folder in `ws` whose `SKILL.md` front matter is `front`.
fn skill_md(ws: &Path, name: &str, front: &str) {
    fs::create_dir_all(ws.join(name)).unwrap();
    fs::write(
        ws.join(name).join("SKILL.md"),
        format!("---\n{front}---\n# {name}\n"),
    )
    .unwrap();
}

#[test]
fn skill_creator_quick_validate_passes_a_valid_skill_and_names_what_is_wrong_with_others() {
    let Some(env) = ready(envs::gif_env()) else {
        return;
    };
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    skill_md(&ws, "bad-name", "name: Bad_Name\ndescription: A skill.\n");
    skill_md(
        &ws,
        "bad-key",
        "name: bad-key\ndescription: A skill.\nversion: 1\n",
    );
    skill_md(&ws, "bad-yaml", "name: [unclosed\ndescription: A skill.\n");
    let creator = fixture_skill("skill-creator");
    let gif = fixture_skill("slack-gif-creator");
    // The script as shipped, once per folder: its message (first line)
    // and its exit code.
    let script = r#"python3 -c 'import yaml; print("yaml", yaml.__version__, yaml.__file__)'
for d in /skills/slack-gif-creator /skills/skill-creator /workspace/bad-name /workspace/bad-key /workspace/bad-yaml; do
  out=$(python3 /skills/skill-creator/scripts/quick_validate.py "$d"); code=$?
  printf '%s -> exit %s\n' "$(printf '%s\n' "$out" | head -n 1)" "$code"
done"#;
    let (code, doc, out) = env.run_json(
        &world,
        &json!({
            "argv": ["/bin/sh", "-c", script],
            "workspace": ws,
            "environment": env.env,
            "skills": [skill_ref("skill-creator", &creator), skill_ref("slack-gif-creator", &gif)],
        }),
    );
    assert_eq!(code, 0, "{}", show(&out));
    let lines: Vec<&str> = doc["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(
        lines,
        [
            // PyYAML from the environment, not the host's python3-yaml.
            "yaml 6.0.4 /opt/skill-env/python/yaml/__init__.py",
            "Skill is valid! -> exit 0",
            "Skill is valid! -> exit 0",
            "Name 'Bad_Name' should be kebab-case (lowercase letters, digits, and hyphens only) -> exit 1",
            "Unexpected key(s) in SKILL.md frontmatter: version. Allowed properties are: allowed-tools, compatibility, description, license, metadata, name -> exit 1",
            "Invalid YAML in frontmatter: while parsing a flow sequence -> exit 1",
        ],
        "{doc}"
    );
    assert_eq!(doc["skills"]["environment"], env.env, "{doc}");
}

/// What a GIF file holds, by our own parse of its blocks: its logical
/// screen, its image count, and whether it loops (the NETSCAPE2.0 block).
#[derive(Debug, PartialEq, Eq)]
struct Gif {
    version: String,
    width: u16,
    height: u16,
    frames: usize,
    loops: bool,
}

fn parse_gif(bytes: &[u8]) -> Result<Gif, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = bytes
            .get(at..at + n)
            .ok_or(format!("truncated at byte {at}"))?;
        at += n;
        Ok(s)
    };
    let magic = take(6)?.to_vec();
    if &magic[..3] != b"GIF" {
        return Err(format!("magic {magic:?}"));
    }
    let screen = take(7)?.to_vec();
    let table = |packed: u8| {
        if packed & 0x80 != 0 {
            3 << ((packed & 7) + 1)
        } else {
            0
        }
    };
    take(table(screen[4]))?;
    let (mut frames, mut loops) = (0, false);
    loop {
        match take(1)?[0] {
            0x21 => {
                take(1)?; // label
                let mut first = true;
                loop {
                    let n = take(1)?[0] as usize;
                    if n == 0 {
                        break;
                    }
                    let data = take(n)?;
                    if first && data == b"NETSCAPE2.0" {
                        loops = true;
                    }
                    first = false;
                }
            }
            0x2C => {
                let desc = take(9)?.to_vec();
                take(table(desc[8]))?;
                take(1)?; // LZW minimum code size
                loop {
                    let n = take(1)?[0] as usize;
                    if n == 0 {
                        break;
                    }
                    take(n)?;
                }
                frames += 1;
            }
            0x3B => break,
            other => return Err(format!("unknown block 0x{other:02x}")),
        }
    }
    Ok(Gif {
        version: String::from_utf8_lossy(&magic).into_owned(),
        width: u16::from_le_bytes([screen[0], screen[1]]),
        height: u16::from_le_bytes([screen[2], screen[3]]),
        frames,
        loops,
    })
}

#[test]
fn slack_gif_creator_core_modules_build_a_gif_with_numpy_pillow_and_imageio() {
    let Some(env) = ready(envs::gif_env()) else {
        return;
    };
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    fs::copy(fixture_script("make_gif.py"), ws.join("make_gif.py")).unwrap();
    let gif = fixture_skill("slack-gif-creator");
    let (code, doc, out) = env.run_json(
        &world,
        &json!({
            "argv": ["python3", "/workspace/make_gif.py", "/skills/slack-gif-creator", "/workspace/out.gif", "8"],
            "workspace": ws,
            "environment": env.env,
            "skills": [skill_ref("slack-gif-creator", &gif)],
        }),
    );
    assert_eq!(code, 0, "{}", show(&out));
    assert_eq!(
        lines_with(&doc, &["module ", "saved ", "validated "]),
        [
            "module numpy 2.4.6 /opt/skill-env/python/numpy/__init__.py",
            "module PIL 13.0.0 /opt/skill-env/python/PIL/__init__.py",
            "module imageio 2.38.1 /opt/skill-env/python/imageio/__init__.py",
            "saved 8 64x64",
            "validated 8 64x64",
        ],
        "{doc}"
    );
    assert_eq!(doc["skills"]["environment"], env.env, "{doc}");
    let bytes = fs::read(ws.join("out.gif")).unwrap();
    assert_eq!(
        parse_gif(&bytes),
        Ok(Gif {
            version: "GIF89a".into(),
            width: 64,
            height: 64,
            frames: 8,
            loops: true,
        })
    );
}

#[test]
fn document_scripts_make_and_read_back_a_pdf_and_an_xlsx_with_pypdf_openpyxl_and_defusedxml() {
    let Some(env) = ready(envs::office_env()) else {
        return;
    };
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    fs::copy(fixture_script("office.py"), ws.join("office.py")).unwrap();
    let (code, doc, out) = env.run_json(
        &world,
        &json!({
            "argv": ["python3", "/workspace/office.py", "/workspace"],
            "workspace": ws,
            "environment": env.env,
        }),
    );
    assert_eq!(code, 0, "{}", show(&out));
    let stdout: Vec<&str> = doc["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(
        stdout,
        [
            "module pypdf 7.1.1 /opt/skill-env/python/pypdf/__init__.py",
            "module openpyxl 3.1.5 /opt/skill-env/python/openpyxl/__init__.py",
            "module et_xmlfile 2.0.0 /opt/skill-env/python/et_xmlfile/__init__.py",
            "module defusedxml 0.7.1 /opt/skill-env/python/defusedxml/__init__.py",
            "pdf 2 pages, title 'made in the sandbox', page 2 300x150",
            "xlsx ['Numbers'] A1=41 A2==A1+1",
            "sheet xml cells ['A1', 'A2']",
            "minidom lines True",
            "entities forbidden",
        ],
        "{doc}"
    );
    assert_eq!(doc["skills"]["environment"], env.env, "{doc}");
    let pdf = fs::read(ws.join("made.pdf")).unwrap();
    assert!(pdf.starts_with(b"%PDF-"), "{:?}", &pdf[..8.min(pdf.len())]);
    assert!(
        pdf.trim_ascii_end().ends_with(b"%%EOF"),
        "a PDF ends with %%EOF"
    );
    let xlsx = fs::read(ws.join("made.xlsx")).unwrap();
    assert!(xlsx.starts_with(b"PK\x03\x04"), "an XLSX is a zip");
}

/// The built environment is the sealed store tree bound read-only: every
/// kind of write into it fails in the sandbox, and the stored tree still
/// verifies afterwards.
#[test]
fn a_built_environment_cannot_be_written_from_the_sandbox() {
    let Some(env) = ready(envs::gif_env()) else {
        return;
    };
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    let check = r#"
import errno, os
base = "/opt/skill-env/python"
for name, attempt in (
    ("append", lambda: open(f"{base}/numpy/__init__.py", "a").write("x = 1\n")),
    ("create", lambda: open(f"{base}/PIL/planted.py", "w")),
    ("mkdir", lambda: os.mkdir(f"{base}/planted")),
    ("unlink", lambda: os.unlink(f"{base}/yaml/__init__.py")),
    ("rename", lambda: os.rename(f"{base}/imageio", f"{base}/moved")),
    ("chmod", lambda: os.chmod(f"{base}/numpy/__init__.py", 0o666)),
    ("truncate", lambda: os.truncate(f"{base}/numpy/__init__.py", 0)),
):
    try:
        attempt()
        print(name, "written")
    except OSError as e:
        print(name, "denied", errno.errorcode[e.errno])
"#;
    fs::write(ws.join("check.py"), check).unwrap();
    let (code, doc, out) = env.run_json(
        &world,
        &json!({"argv": ["python3", "/workspace/check.py"], "workspace": ws, "environment": env.env}),
    );
    assert_eq!(code, 0, "{}", show(&out));
    let lines: Vec<&str> = doc["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), 7, "{doc}");
    for line in &lines {
        let (name, verdict) = line.split_once(' ').unwrap();
        assert!(
            verdict.starts_with("denied E"),
            "{name} was not denied: {doc}"
        );
    }
    let verify = output_within(
        runner_command()
            .env("SKILL_RUNNER_DATA_DIR", &env.data_dir)
            .args(["env", "verify", env.env["hash"].as_str().unwrap()]),
        HANG_GUARD,
    );
    assert!(verify.status.success(), "{}", show(&verify));
}
