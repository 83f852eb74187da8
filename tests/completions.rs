//! Shell completions and man pages come from the clap definition: the bash
//! script, sourced in a real bash, completes every top-level subcommand
//! `--help` lists; zsh and fish scripts name them too; the man page renders
//! through groff without a warning and lists them; `man --dir` writes a
//! page per subcommand and refuses a folder that does not exist.

use std::process::{Command, Output};

use skill_runner_tests::*;

fn runner(args: &[&str]) -> Output {
    output_within(Command::new(runner_bin()).args(args), HANG_GUARD)
}

fn stdout_of(args: &[&str]) -> String {
    let out = runner(args);
    assert!(
        out.status.success(),
        "skill-runner {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The top-level subcommands as `skill-runner --help` lists them (not as
/// this test would guess them): the lines of its `Commands:` section.
fn subcommands() -> Vec<String> {
    let help = stdout_of(&["--help"]);
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|n| n != "help")
        .collect();
    assert!(
        names.len() >= 10 && names.iter().any(|n| n == "run") && names.iter().any(|n| n == "man"),
        "--help lists too few subcommands: {names:?}"
    );
    names
}

#[test]
fn bash_completion_in_a_real_bash_offers_every_subcommand() {
    let script = stdout_of(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skill-runner.bash");
    std::fs::write(&path, &script).unwrap();
    // Source it, ask it to complete `skill-runner <TAB>` as bash would, and
    // print what it offers, one word a line.
    let probe = format!(
        "source {}\n\
         COMP_WORDS=(skill-runner '')\nCOMP_CWORD=1\nCOMP_LINE='skill-runner '\nCOMP_POINT=13\n\
         fn=$(complete -p skill-runner | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')\n\
         [ -n \"$fn\" ] || {{ echo 'no completion function registered' >&2; exit 3; }}\n\
         \"$fn\" skill-runner '' skill-runner\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        path.display()
    );
    let out = output_within(
        Command::new("bash").args(["--norc", "-c", &probe]),
        HANG_GUARD,
    );
    assert!(
        out.status.success(),
        "bash could not use the completion script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let offered: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    for name in subcommands() {
        assert!(
            offered.contains(&name),
            "bash completion does not offer `{name}`: {offered:?}"
        );
    }
}

#[test]
fn zsh_and_fish_scripts_name_every_subcommand() {
    let names = subcommands();
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        for name in &names {
            assert!(
                script.contains(name.as_str()),
                "the {shell} completion script does not mention `{name}`"
            );
        }
    }
    let out = runner(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash"));
}

#[test]
fn the_man_page_renders_with_groff_and_lists_every_subcommand() {
    let roff = stdout_of(&["man"]);
    assert!(
        roff.starts_with(".ie") || roff.contains(".TH skill-runner 1"),
        "not roff: {roff:.200}"
    );
    let Ok(groff) = which("groff") else {
        skip("groff is not installed (apt-get install groff-base)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("skill-runner.1");
    std::fs::write(&page, &roff).unwrap();
    // -ww: every warning; -z would drop the text, so render to ASCII.
    let out = output_within(
        Command::new(groff)
            .args(["-man", "-Tascii", "-ww"])
            .arg(&page),
        HANG_GUARD,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "groff: {stderr}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // groff's ASCII output overstrikes bold with backspaces: drop them.
    let plain: String = strip_overstrike(&text);
    assert!(
        plain.contains("SYNOPSIS") && plain.contains("--data-dir"),
        "{plain}"
    );
    for name in subcommands() {
        assert!(
            plain.contains(&format!("skill-runner-{name}(1)")),
            "the man page does not list `{name}`:\n{plain}"
        );
    }
}

#[test]
fn man_dir_writes_a_page_per_subcommand_and_refuses_a_missing_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    stdout_of(&["man", "--dir", d]);
    for name in std::iter::once("skill-runner".to_owned())
        .chain(subcommands().iter().map(|n| format!("skill-runner-{n}")))
        .chain(["skill-runner-session-create".to_owned()])
    {
        let page = dir.path().join(format!("{name}.1"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{} was not written: {e}", page.display()));
        assert!(text.contains(".TH"), "{} is not a man page", page.display());
    }
    let missing = dir.path().join("no-such-folder");
    let out = runner(&["man", "--dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-folder")
            && stderr.contains("mkdir -p")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!missing.exists(), "a refused --dir was made");
}

fn strip_overstrike(text: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.into_iter().collect()
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}
