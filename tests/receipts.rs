//! Receipts (docs/receipts.md): every `run --json` result carries a DSSE
//! envelope over an in-toto statement that `verify` checks against the
//! result, member by member; no single change to a result or its envelope
//! is accepted; `replay` re-runs a receipted job and says per subject
//! whether it is identical, refusing a job that is not the one signed,
//! naming what differs; and the attack review: the key is out of every
//! sandbox's reach, output cannot forge a statement, and two executions
//! given one id are told apart.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner::receipt::verify::{verify, VerifyError};
use skill_runner::receipt::{PublicKey, Signer};
use skill_runner_tests::*;

/// The world's own receipt key (made by its first run).
fn own_key(w: &World) -> PublicKey {
    let path = w.data_dir().join("keys").join("receipt-ed25519.pem");
    Signer::load(&path).unwrap().public().clone()
}

/// Writes `doc` to a file and returns its path.
fn write(w: &World, name: &str, doc: &Value) -> PathBuf {
    let p = w.path().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    p
}

/// `skill-runner verify FILE [--key K]...`: exit code, stdout, stderr.
fn verify_cli(w: &World, result: &Path, keys: &[&Path]) -> (i32, String, String) {
    let mut cmd = w.cmd();
    cmd.arg("verify").arg(result);
    for k in keys {
        cmd.arg("--key").arg(k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `skill-runner replay JOB RESULT`: exit code, stdout, stderr.
fn replay_cli(w: &World, job: &Path, result: &Path) -> (i32, String, String) {
    let out = w.cmd().arg("replay").arg(job).arg(result).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Runs `job` with `run --json` from the job file `name`: its path and
/// the result.
fn run_named(w: &World, name: &str, job: &Value) -> (PathBuf, Value) {
    let path = w.job(name, job);
    let out = w.cmd().args(["run", "--json"]).arg(&path).output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("run --json printed no JSON ({e}){}", show(&out)));
    (path, doc)
}

#[test]
fn a_result_verifies_against_the_key_receipt_key_prints() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (code, result, _) = w.run_json(&json!({"argv": ["/bin/echo", "hello"]}));
    assert_eq!(code, 0, "{result:#}");
    let receipt = &result["receipt"];
    assert_eq!(receipt["payloadType"], "application/vnd.in-toto+json");
    let out = w.cmd().args(["receipt-key", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let key: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(receipt["signatures"][0]["keyid"], key["keyid"]);
    assert!(key["public_key_pem"]
        .as_str()
        .unwrap()
        .starts_with("-----BEGIN PUBLIC KEY-----\n"));
    // The PEM alone, and the JSON document, are both accepted as --key.
    let pem = w.path().join("key.pem");
    std::fs::write(&pem, key["public_key_pem"].as_str().unwrap()).unwrap();
    let doc = w.path().join("key.json");
    std::fs::write(&doc, &out.stdout).unwrap();
    let file = write(&w, "result.json", &result);
    for k in [&pem, &doc] {
        let (code, stdout, stderr) = verify_cli(&w, &file, &[k]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(stdout.contains("receipt verified"), "{stdout}");
        assert!(stdout.contains("stdout: sha256 "), "{stdout}");
        assert!(stdout.contains(result["execution_id"].as_str().unwrap()));
    }
    // Without --key: the data dir's own key.
    let (code, stdout, stderr) = verify_cli(&w, &file, &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The statement: stdout and stderr by digest, the job by digest only.
    let statement = payload(&result);
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        statement["subject"][0],
        json!({"name": "stdout", "digest": {"sha256": sha256_hex(b"hello\n")}})
    );
    assert_eq!(statement["subject"][1]["name"], "stderr");
    let p = &statement["predicate"];
    assert_eq!(p["execution_id"], result["execution_id"]);
    assert_eq!(p["job"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(p["profile"]["name"], "default");
    assert_eq!(p["profile"]["seccomp"]["rules"].as_str().unwrap().len(), 64);
    assert!(p["runner"]["bubblewrap"].as_str().is_some(), "{p:#}");
    assert!(p["runner"]["kernel_release"].as_str().is_some(), "{p:#}");
    assert_eq!(p["result"]["limits"], result["limits"]);
    assert_eq!(
        p["streams"]["stdout"],
        json!({"bytes": 6, "truncated": false})
    );
}

/// The statement a result's receipt signs.
fn payload(result: &Value) -> Value {
    let b = result["receipt"]["payload"].as_str().unwrap();
    let bytes = skill_runner::receipt::dsse::decode(b).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    skill_runner::receipt::canonical::bytes_sha256_hex(bytes)
}

#[test]
fn no_receipt_leaves_it_out_and_verify_says_so() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    w.run_json(&json!({"argv": ["/bin/true"]}));
    let job = w.job("plain", &json!({"argv": ["/bin/echo", "x"]}));
    let out = w
        .cmd()
        .args(["run", "--json", "--no-receipt"])
        .arg(&job)
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(result.get("receipt").is_none(), "{result:#}");
    let file = write(&w, "result.json", &result);
    let (code, _, stderr) = verify_cli(&w, &file, &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("carries no receipt"), "{stderr}");
}

/// One change made to a result.
type Change = Box<dyn Fn(&mut Value)>;

#[test]
fn verify_names_the_first_mismatch_and_trusts_only_the_keys_given() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (_, result, _) = w.run_json(&json!({"argv": ["/bin/echo", "hello"]}));
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "stdout",
            Box::new(|r| r["stdout"] = json!("hellp\n")),
            "stdout does not match",
        ),
        (
            "exit code",
            Box::new(|r| r["exit_code"] = json!(1)),
            "exit_code does not match",
        ),
        (
            "added",
            Box::new(|r| r["verified"] = json!(true)),
            "verified is not covered",
        ),
        (
            "removed",
            Box::new(|r| {
                r.as_object_mut().unwrap().remove("warnings");
                r.as_object_mut().unwrap().remove("usage");
            }),
            "usage, which the result lacks",
        ),
        (
            "signature",
            Box::new(|r| {
                let sig = r["receipt"]["signatures"][0]["sig"].as_str().unwrap();
                let flipped = if sig.starts_with('A') { "B" } else { "A" };
                r["receipt"]["signatures"][0]["sig"] = json!(format!("{flipped}{}", &sig[1..]));
            }),
            "signature does not verify",
        ),
    ];
    for (what, change, said) in cases {
        let mut changed = result.clone();
        change(&mut changed);
        let file = write(&w, "changed.json", &changed);
        let (code, stdout, stderr) = verify_cli(&w, &file, &[]);
        assert_eq!(code, 1, "{what}: {stdout}");
        assert!(stderr.contains(said), "{what}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    }
    // Another runner's key is not trusted; given both, either verifies
    // (rotation).
    let other = World::new();
    other.run_json(&json!({"argv": ["/bin/true"]}));
    let other_pem = other.path().join("other.pem");
    std::fs::write(&other_pem, own_key(&other).pem()).unwrap();
    let own_pem = w.path().join("own.pem");
    std::fs::write(&own_pem, own_key(&w).pem()).unwrap();
    let file = write(&w, "result.json", &result);
    let (code, _, stderr) = verify_cli(&w, &file, &[&other_pem]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a trusted key"), "{stderr}");
    let (code, stdout, stderr) = verify_cli(&w, &file, &[&other_pem, &own_pem]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every leaf of `v` (and every object member), as JSON pointers.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

/// One change of the value at `pointer` (or of the member itself).
fn change_field(doc: &mut Value, pointer: &str, rng: &mut Rng) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    if rng.below(8) == 0 {
        // Remove the member, or rename it.
        let parent = doc.pointer_mut(parent).unwrap();
        match parent {
            Value::Object(m) => {
                let v = m.remove(&key).unwrap();
                if rng.below(2) == 0 {
                    m.insert(format!("{key}_"), v);
                }
            }
            Value::Array(a) => {
                a.remove(key.parse::<usize>().unwrap());
            }
            _ => unreachable!(),
        }
        return;
    }
    let v = doc.pointer_mut(pointer).unwrap();
    *v = match v.take() {
        Value::Null => json!(0),
        Value::Bool(b) => json!(!b),
        Value::Number(n) => match n.as_u64() {
            Some(0) => json!(null),
            Some(u) => json!(u.wrapping_add(1 + rng.below(3) as u64)),
            None => json!(n.as_f64().unwrap_or(0.0) + 1.0),
        },
        Value::String(s) if s.is_empty() => json!("x"),
        Value::String(s) => {
            let mut chars: Vec<char> = s.chars().collect();
            let i = rng.below(chars.len());
            chars[i] = if chars[i] == 'a' { 'b' } else { 'a' };
            json!(chars.into_iter().collect::<String>())
        }
        Value::Array(mut a) => {
            a.push(json!("extra"));
            json!(a)
        }
        Value::Object(mut m) => {
            m.insert("extra".into(), json!(1));
            Value::Object(m)
        }
    };
}

#[test]
fn ten_thousand_single_changes_to_a_result_or_its_envelope_are_all_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // A result with something in every part: stdout, stderr, skills.
    let dir = w.skill("mut", &[("data.txt", b"bytes\n")]);
    let (_, result, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "cat /skills/mut/data.txt; echo oops >&2; exit 3"],
        "skills": [skill_ref("mut", &dir)],
    }));
    assert_eq!(result["exit_code"], 3, "{result:#}");
    let trusted = [own_key(&w)];
    let bytes = serde_json::to_vec(&result).unwrap();
    verify(&bytes, &trusted).expect("the result as made verifies");
    let mut pointers_all = Vec::new();
    pointers(&result, String::new(), &mut pointers_all);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut tried, mut byte_changes, mut field_changes) = (0, 0, 0);
    while tried < 10_000 {
        let changed: Vec<u8> = if rng.below(2) == 0 {
            // One byte of the document, anywhere (the envelope included).
            let mut b = bytes.clone();
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
            byte_changes += 1;
            b
        } else {
            let mut doc = result.clone();
            let p = &pointers_all[rng.below(pointers_all.len())];
            change_field(&mut doc, p, &mut rng);
            field_changes += 1;
            serde_json::to_vec(&doc).unwrap()
        };
        // A change that leaves the same document (a space for a tab
        // between tokens) changes nothing a reader sees: not counted.
        if serde_json::from_slice::<Value>(&changed).ok().as_ref() == Some(&result) {
            continue;
        }
        tried += 1;
        if let Ok(v) = verify(&changed, &trusted) {
            panic!(
                "a changed result was accepted: {}\nvouched: {:#}",
                String::from_utf8_lossy(&changed),
                v.statement
            );
        }
    }
    println!("{byte_changes} byte changes and {field_changes} field changes, none accepted");
}

/// The number of deterministic jobs replayed (`SKILL_RUNNER_REPLAY_JOBS`,
/// 1,000 for the benchmark report; a few in the suite).
fn replay_count() -> usize {
    std::env::var("SKILL_RUNNER_REPLAY_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(12)
}

#[test]
fn deterministic_jobs_replay_identical() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let dir = w.skill("det", &[("data.txt", b"pinned bytes\n")]);
    for i in 0..replay_count() {
        // Every few, one with a skill and output on both streams.
        let job = if i % 4 == 0 {
            json!({
                "argv": ["sh", "-c", format!("cat /skills/det/data.txt; echo {i} >&2")],
                "skills": [skill_ref("det", &dir)],
                "env": {"N": i.to_string()},
            })
        } else {
            json!({"argv": ["/bin/echo", format!("job {i}")]})
        };
        let (job_file, result) = run_named(&w, "det", &job);
        assert_eq!(result["status"], "exited", "{result:#}");
        let file = write(&w, "det-result.json", &result);
        let (code, stdout, stderr) = replay_cli(&w, &job_file, &file);
        assert_eq!(code, 0, "job {i}: {stdout}{stderr}");
        for subject in ["stdout", "stderr", "skills", "profile", "limits", "exit"] {
            assert!(
                stdout.contains(&format!("{subject}: identical\n")),
                "job {i}: {stdout}"
            );
        }
    }
}

#[test]
fn a_job_that_differs_is_refused_naming_what_and_changed_output_is_different() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let profile = w.path().join("profile.toml");
    let default = skill_runner::sandbox::profile::BUILTIN[0].1;
    std::fs::write(
        &profile,
        default.replace("name = \"default\"", "name = \"mine\""),
    )
    .unwrap();
    let dir = w.skill("chg", &[("data.txt", b"one\n")]);
    let job = json!({
        "argv": ["sh", "-c", "cat /skills/chg/data.txt"],
        "env": {"A": "1"},
        "profile": profile,
        "skills": [skill_ref("chg", &dir)],
    });
    let (job_file, result) = run_named(&w, "job", &job);
    assert_eq!(result["status"], "exited", "{result:#}");
    let file = write(&w, "result.json", &result);
    let (code, stdout, stderr) = replay_cli(&w, &job_file, &file);
    assert_eq!(code, 0, "{stdout}{stderr}");

    // The argv or the environment variables differ: refused, named.
    for (field, value, named) in [
        (
            "argv",
            json!(["sh", "-c", "cat /skills/chg/data.txt; true"]),
            "argv",
        ),
        ("env", json!({"A": "2"}), "env"),
    ] {
        let mut other = job.clone();
        other[field] = value;
        let other_file = w.job("other", &other);
        let (code, stdout, stderr) = replay_cli(&w, &other_file, &file);
        assert_eq!(code, 1, "{field}: {stdout}");
        assert!(
            stderr.contains(&format!("its {named} differs")),
            "{field}: {stderr}"
        );
    }
    // The profile file changed: its digest differs.
    std::fs::write(
        &profile,
        default
            .replace("name = \"default\"", "name = \"mine\"")
            .replace("timeout_ms = 30000", "timeout_ms = 30001"),
    )
    .unwrap();
    let (code, _, stderr) = replay_cli(&w, &job_file, &file);
    assert_eq!(code, 1);
    // (the profile's default limits too: the job's limits come from it)
    assert!(stderr.contains("its limits and profile differ"), "{stderr}");
    std::fs::write(
        &profile,
        default.replace("name = \"default\"", "name = \"mine\""),
    )
    .unwrap();
    // The skill's bytes changed: a job pinning them is another job (a
    // pin names its bytes, so the same pin never runs other bytes: the
    // published root it resolves to is checked against it).
    std::fs::write(dir.join("data.txt"), b"two\n").unwrap();
    let mut other = job.clone();
    other["skills"] = json!([skill_ref("chg", &dir)]);
    let other_file = w.job("other", &other);
    let (code, _, stderr) = replay_cli(&w, &other_file, &file);
    assert_eq!(code, 1);
    assert!(stderr.contains("its skills differs"), "{stderr}");
    let (code, stdout, stderr) = replay_cli(&w, &job_file, &file);
    assert_eq!(
        code, 0,
        "the pinned bytes are still those signed: {stdout}{stderr}"
    );

    // Output that is not deterministic: different, exit 1.
    let (job_file, result) = run_named(
        &w,
        "random",
        &json!({"argv": ["cat", "/proc/sys/kernel/random/uuid"]}),
    );
    let file = write(&w, "random-result.json", &result);
    let (code, stdout, _) = replay_cli(&w, &job_file, &file);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("stdout: different\n"), "{stdout}");
    assert!(stdout.contains("stderr: identical\n"), "{stdout}");
}

#[test]
fn the_receipt_key_is_out_of_every_sandboxs_reach() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // The data dir's key: the data dir and its keys/ folder are refused as
    // a workspace, and a command cannot read the file.
    w.run_json(&json!({"argv": ["/bin/true"]}));
    let key_file = w.data_dir().join("keys").join("receipt-ed25519.pem");
    let secret = std::fs::read_to_string(&key_file).unwrap();
    let body = secret.lines().nth(1).unwrap().to_owned();
    for ws in [w.data_dir().join("keys"), w.data_dir()] {
        let (code, r, _) = w.run_json(&json!({"argv": ["/bin/true"], "workspace": ws}));
        assert_eq!(code, 125, "{r:#}");
        assert_eq!(r["status"], "rejected", "{r:#}");
        assert!(
            r["receipt"].is_object(),
            "a refusal is receipted too: {r:#}"
        );
    }
    let script = format!(
        "cat {k} 2>&1; ls -la {d} 2>&1; env; grep -rl PRIVATE /skills /workspace /tmp /opt 2>/dev/null; true",
        k = key_file.display(),
        d = key_file.parent().unwrap().display()
    );
    let (_, r, _) = w.run_json(&json!({"argv": ["sh", "-c", script]}));
    assert_eq!(r["status"], "exited", "{r:#}");
    let seen = format!("{}{}", r["stdout"], r["stderr"]);
    assert!(!seen.contains(&body), "the sandbox read the key: {seen}");
    assert!(!seen.contains("PRIVATE"), "{seen}");

    // A key named with --receipt-key (through its variable, which the
    // sandbox's environment never inherits) outside the data dir: its
    // folder, a folder above it and a skill path holding it are refused.
    let keys = w.path().join("operator").join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let named = keys.join("k.pem");
    std::fs::copy(&key_file, &named).unwrap();
    let run_keyed = |key: &Path, job: &Value| {
        let path = w.job("keyed", job);
        let out = w
            .cmd()
            .env("SKILL_RUNNER_RECEIPT_KEY", key)
            .args(["run", "--json"])
            .arg(&path)
            .output()
            .unwrap();
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        r
    };
    let run_with_key = |job: &Value| run_keyed(&named, job);
    let above = keys.parent().unwrap().to_owned();
    for (field, dir) in [
        ("workspace", keys.clone()),
        ("workspace", above.clone()),
        ("extensions_dir", keys.clone()),
    ] {
        let r = run_with_key(&json!({"argv": ["/bin/true"], field: dir}));
        assert_eq!(r["status"], "rejected", "{field} {dir:?}: {r:#}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains("holds the runner's receipt key"), "{msg}");
    }
    // Named through a symlinked folder, the key is resolved when it is
    // loaded: its real folder is refused all the same.
    let link = w.path().join("keys-link");
    std::os::unix::fs::symlink(&keys, &link).unwrap();
    let r = run_keyed(
        &link.join("k.pem"),
        &json!({"argv": ["/bin/true"], "workspace": keys}),
    );
    assert_eq!(r["status"], "rejected", "{r:#}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("holds the runner's receipt key"), "{msg}");
    std::fs::write(
        above.join("SKILL.md"),
        "---\nname: operator\ndescription: A skill folder holding the key.\n---\n",
    )
    .unwrap();
    let skill = skill_ref("operator", &above);
    let r = run_with_key(&json!({"argv": ["/bin/true"], "skills": [skill]}));
    assert_eq!(r["status"], "rejected", "{r:#}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("receipt key"),
        "{r:#}"
    );
    // A profile that binds the key's folder into the sandbox.
    let profile = w.path().join("leaky.toml");
    let default = skill_runner::sandbox::profile::BUILTIN[0].1;
    let leaky = default.replacen(
        "mounts = [",
        &format!(
            "mounts = [\n  {{ op = \"ro-bind\", src = \"{}\", dest = \"/leak\" }},",
            keys.display()
        ),
        1,
    );
    assert_ne!(leaky, default, "the default profile has a mounts list");
    std::fs::write(&profile, leaky).unwrap();
    let r = run_with_key(&json!({"argv": ["cat", "/leak/k.pem"], "profile": profile}));
    assert_eq!(r["status"], "rejected", "{r:#}");
    assert!(!r["stdout"].as_str().unwrap().contains(&body));
    // And the variable naming it is not in the command's environment.
    let r = run_with_key(&json!({"argv": ["env"]}));
    assert_eq!(r["status"], "exited", "{r:#}");
    assert!(!r["stdout"].as_str().unwrap().contains("RECEIPT"), "{r:#}");
}

/// The key under a second name is refused too: a folder above it bound
/// elsewhere (a bind mount, made here in a mount namespace of the run's
/// own) is refused as a workspace, as its real folder is, and a key with
/// a second hard link (a name no mount table lists) is not loaded.
#[test]
fn a_receipt_key_under_another_name_is_out_of_reach_too() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let keys = w.path().join("operator").join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let key = keys.join("k.pem");
    let made = Signer::load_or_create(&key).unwrap();
    drop(made);
    let secret = std::fs::read_to_string(&key).unwrap();
    let body = secret.lines().nth(1).unwrap().to_owned();
    let alias = w.path().join("innocent");
    std::fs::create_dir(&alias).unwrap();
    let job = w.job(
        "alias",
        &json!({"argv": ["cat", "/workspace/k.pem"], "workspace": alias}),
    );
    // `run`, with the key's folder bound at `alias` in its namespace.
    let mut run = w.cmd();
    run.env("SKILL_RUNNER_RECEIPT_KEY", &key)
        .args(["run", "--json"])
        .arg(&job);
    let Some(out) = output_with_binds(&[(&keys, &alias)], &run) else {
        skip("no mount namespace can be made here");
        return;
    };
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert!(
        !r.to_string().contains(&body),
        "the sandbox read the key: {r:#}"
    );
    assert_eq!(r["status"], "rejected", "{r:#}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("holds the runner's receipt key"), "{msg}");

    // A second hard link: the key is refused before anything runs, and
    // taken again once the link is gone.
    let link = w.path().join("k-link.pem");
    std::fs::hard_link(&key, &link).unwrap();
    let run = |job: &Path| {
        w.cmd()
            .env("SKILL_RUNNER_RECEIPT_KEY", &key)
            .args(["run", "--json"])
            .arg(job)
            .output()
            .unwrap()
    };
    let plain = w.job("plain", &json!({"argv": ["/bin/true"]}));
    let out = run(&plain);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(out.status.code(), Some(0), "{r:#}");
    assert_eq!(r["status"], "rejected", "{r:#}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("has 2 hard links"), "{msg}");
    std::fs::remove_file(&link).unwrap();
    let out = run(&plain);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "exited", "{r:#}");
}

#[test]
fn output_cannot_forge_what_a_receipt_says() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // An earlier, genuine result, printed by a later command as its own
    // output (with an injection attempt around it).
    let (_, genuine, _) = w.run_json(&json!({"argv": ["/bin/echo", "genuine"]}));
    let forged = format!(
        "\", \"exit_code\": 0, \"receipt\": {}}}\n",
        serde_json::to_string(&genuine["receipt"]).unwrap()
    );
    let printed = w.path().join("printed");
    std::fs::write(&printed, &forged).unwrap();
    let ws = w.sandbox_folder("ws");
    std::fs::copy(&printed, ws.join("out")).unwrap();
    give_to_sandbox(&ws);
    let (_, r, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "cat /workspace/out; exit 7"], "workspace": ws,
    }));
    assert_eq!(r["exit_code"], 7, "{r:#}");
    // It is data: the result's stdout is the bytes printed, the receipt is
    // the runner's own, about exit code 7, and the printed envelope is not
    // this result's.
    assert_eq!(r["stdout"].as_str().unwrap(), forged);
    assert_ne!(r["receipt"], genuine["receipt"]);
    let trusted = [own_key(&w)];
    let v = verify(&serde_json::to_vec(&r).unwrap(), &trusted).unwrap();
    assert_eq!(v.statement["predicate"]["result"]["exit_code"], 7);
    assert_eq!(
        v.statement["subject"][0]["digest"]["sha256"],
        sha256_hex(forged.as_bytes())
    );
    let mut swapped = r.clone();
    swapped["receipt"] = genuine["receipt"].clone();
    assert!(verify(&serde_json::to_vec(&swapped).unwrap(), &trusted).is_err());

    // The truncation edge: output cut by the cap in the middle of a
    // UTF-8 character. The subject is of the bytes the result holds, and
    // the statement says it was cut.
    let (_, r, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "printf 'aaaaaaa\\342\\202\\254tail'"],
        "limits": {"output_bytes": 8},
    }));
    assert_eq!(r["stdout_truncated"], true, "{r:#}");
    let kept = r["stdout"].as_str().unwrap();
    let v = verify(&serde_json::to_vec(&r).unwrap(), &trusted).unwrap();
    let p = &v.statement["predicate"];
    assert_eq!(p["streams"]["stdout"]["truncated"], true);
    assert_eq!(p["streams"]["stdout"]["bytes"], kept.len());
    assert_eq!(
        v.statement["subject"][0]["digest"]["sha256"],
        sha256_hex(kept.as_bytes())
    );
    // Flipping the truncation flag is refused.
    let mut untruncated = r.clone();
    untruncated["stdout_truncated"] = json!(false);
    let e = verify(&serde_json::to_vec(&untruncated).unwrap(), &trusted).unwrap_err();
    assert!(matches!(e, VerifyError::Member { .. }), "{e}");
}

#[test]
fn two_executions_given_one_id_have_receipts_that_tell_them_apart() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let job = json!({"execution_id": "same-id", "argv": ["/bin/echo", "x"]});
    let (_, a, _) = w.run_json(&job);
    let (_, b, _) = w.run_json(&job);
    let (pa, pb) = (payload(&a), payload(&b));
    assert_eq!(pa["predicate"]["execution_id"], "same-id");
    assert_eq!(pb["predicate"]["execution_id"], "same-id");
    assert_eq!(pa["predicate"]["job"]["execution_id_from"], "caller");
    assert_ne!(
        pa["predicate"]["invocation_id"],
        pb["predicate"]["invocation_id"]
    );
    // One's receipt never vouches for the other's result.
    let trusted = [own_key(&w)];
    let mut swapped = a.clone();
    swapped["receipt"] = b["receipt"].clone();
    assert!(verify(&serde_json::to_vec(&swapped).unwrap(), &trusted).is_err());
    // A generated id says so.
    let (_, c, _) = w.run_json(&json!({"argv": ["/bin/true"]}));
    assert_eq!(
        payload(&c)["predicate"]["job"]["execution_id_from"],
        "runner"
    );
}
