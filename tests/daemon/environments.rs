//! The environment routes (docs/daemon.md, "Environments"): an uploaded
//! tree with its claimed hash is published only when it hashes to the
//! claim and its paths and links stay inside it, and a job then imports
//! it; the records are listed and answered by `{id}/{hash}`, 404 with a
//! sentence when absent; a build from a lock is refused unless the
//! operator turned builds on, and with them on it builds through the same
//! two sandboxes as `env build`; the routes need the token like every
//! other; every answer matches docs/openapi.json.

use base64::Engine as _;
use serde_json::{json, Value};
use skill_runner::package::environment::tree::{tree_hash, Content};
use skill_runner_tests::daemon::*;
use skill_runner_tests::envs::SIX;
use skill_runner_tests::*;

use super::openapi::{conforms, openapi_doc};
use super::*;

const MODULE: &[u8] = b"GREETING = 'hello from an uploaded environment'\n";

/// An upload of a one-module tree (with a link inside it), built for the
/// host's interpreter from the `six` lock (its provenance), and its hash.
fn upload(id: &str) -> (Value, String) {
    let hash = tree_hash([
        (
            "python/hello_env.py",
            Content::File {
                bytes: MODULE,
                exec: false,
            },
        ),
        (
            "bin/hello-env",
            Content::Symlink {
                target: "../python/hello_env.py",
            },
        ),
    ])
    .unwrap();
    let content = base64::engine::general_purpose::STANDARD.encode(MODULE);
    let body = json!({
        "id": id,
        "hash": hash,
        "files": [{"path": "python/hello_env.py", "content": content}],
        "symlinks": [{"path": "bin/hello-env", "target": "../python/hello_env.py"}],
        "python": SIX,
        "interpreter": "/usr/bin/python3",
    });
    (body, hash)
}

fn records(d: &Daemon) -> Vec<Value> {
    let r = d.get("/v1/environments");
    assert_eq!(r.status, 200);
    r.json()["environments"].as_array().unwrap().clone()
}

#[test]
fn an_uploaded_tree_is_published_only_as_claimed_and_a_job_imports_it() {
    if !require_sandbox() {
        return;
    }
    let doc = openapi_doc();
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    conforms(&doc, "GET", "/v1/environments", &d.get("/v1/environments"));
    assert!(records(&d).is_empty());

    // Lies and escapes first: each refused, nothing published.
    let (body, hash) = upload("hello-env");
    let mut lying = body.clone();
    lying["hash"] = json!("0".repeat(64));
    let r = d.post("/v1/environments", &lying);
    conforms(&doc, "POST", "/v1/environments", &r);
    let msg = r.assert_error(422, "hash_mismatch");
    assert!(
        msg.contains(&hash) && msg.contains("nothing was published"),
        "{msg}"
    );
    let mut escaping = body.clone();
    escaping["symlinks"][0]["target"] = json!("../../../../etc/shadow");
    let msg = d
        .post("/v1/environments", &escaping)
        .assert_error(400, "bad_bundle");
    assert!(msg.contains("bin/hello-env"), "{msg}");
    let mut dotdot = body.clone();
    dotdot["files"][0]["path"] = json!("../python/hello_env.py");
    d.post("/v1/environments", &dotdot)
        .assert_error(400, "bad_bundle");
    assert!(
        records(&d).is_empty(),
        "a refused upload published something"
    );

    // The honest upload: 201 with its record, listed, answered by id/hash.
    let r = d.post("/v1/environments", &body);
    conforms(&doc, "POST", "/v1/environments", &r);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let rec = r.json();
    assert_eq!(rec["id"], "hello-env");
    assert_eq!(rec["hash"], hash.as_str());
    assert_eq!(rec["base"][0]["path"], "/usr/bin/python3");
    assert_eq!(
        rec["locks"][0]["sha256"],
        skill_runner::package::hash::file_hash(SIX.as_bytes())
    );
    assert_eq!(
        (rec["files"].as_u64(), rec["symlinks"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(records(&d), vec![rec.clone()]);
    let one = d.get(&format!("/v1/environments/hello-env/{hash}"));
    conforms(&doc, "GET", "/v1/environments/{id}/{hash}", &one);
    assert_eq!(one.json(), rec);
    let absent = d.get(&format!("/v1/environments/hello-env/{}", "1".repeat(64)));
    conforms(&doc, "GET", "/v1/environments/{id}/{hash}", &absent);
    let msg = absent.assert_error(404, "not_found");
    assert!(
        msg.contains("environment") && msg.contains("hello-env"),
        "{msg}"
    );

    // Uploading it again answers the same record.
    let again = d.post("/v1/environments", &body);
    assert_eq!(again.status, 201);
    assert_eq!(again.json(), rec);

    // A job names it: imported read-only, named in the result.
    let r = d.post(
        "/v1/executions",
        &json!({
            "argv": ["python3", "-c", "import hello_env; print(hello_env.GREETING); open('/opt/skill-env/python/x', 'w')"],
            "environment": {"id": "hello-env", "hash": hash},
        }),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let result = r.json();
    assert_eq!(
        result["stdout"], "hello from an uploaded environment\n",
        "{result:#}"
    );
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{result:#}"
    );
    assert_eq!(
        result["skills"]["environment"],
        json!({"id": "hello-env", "hash": hash})
    );
}

#[test]
fn a_build_request_is_refused_unless_builds_are_on() {
    let doc = openapi_doc();
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let r = d.post("/v1/environments", &json!({"id": "six-env", "python": SIX}));
    conforms(&doc, "POST", "/v1/environments", &r);
    let msg = r.assert_error(400, "bad_request");
    assert!(msg.contains("--env-builds true"), "{msg}");
    // Neither form: one sentence naming both.
    let msg = d
        .post("/v1/environments", &json!({"id": "x"}))
        .assert_error(400, "bad_bundle");
    assert!(msg.contains("either an upload"), "{msg}");
    assert!(records(&d).is_empty());
}

#[test]
fn with_builds_on_a_lock_is_built_in_the_sandboxes_and_a_job_imports_it() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--env-builds", "true"]);
    let loose = d.post(
        "/v1/environments",
        &json!({"id": "six-env", "python": "six==1.17.0\n"}),
    );
    let msg = loose.assert_error(400, "bad_request");
    assert!(msg.contains("--hash"), "{msg}");
    let r = d.post("/v1/environments", &json!({"id": "six-env", "python": SIX}));
    if r.status == 500 && String::from_utf8_lossy(&r.body).contains("pip download failed") {
        skip(format!(
            "pip cannot fetch from its index here: {}",
            String::from_utf8_lossy(&r.body)
        ));
        return;
    }
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let rec = r.json();
    assert_eq!(rec["id"], "six-env");
    let env = json!({"id": "six-env", "hash": rec["hash"]});
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["python3", "-c", "import six; print(six.__version__)"], "environment": env}),
    );
    assert_eq!(
        r.json()["stdout"],
        "1.17.0\n",
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

#[test]
fn the_environment_routes_need_the_token_on_tcp() {
    let w = World::new();
    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
        ],
    );
    d.token = None;
    d.get("/v1/environments").assert_error(401, "unauthorized");
    d.get(&format!("/v1/environments/x/{}", "0".repeat(64)))
        .assert_error(401, "unauthorized");
    let (body, _) = upload("hello-env");
    d.post("/v1/environments", &body)
        .assert_error(401, "unauthorized");
    d.token = Some(token.into());
    assert_eq!(d.get("/v1/environments").status, 200);
    assert!(records(&d).is_empty());
}

/// Uploads a one-module environment `id` whose module `module` holds
/// `NAME = 'text'`; returns `{id, hash}`.
fn upload_module(d: &Daemon, id: &str, module: &str, text: &str) -> Value {
    let bytes = format!("NAME = '{text}'\n");
    let path = format!("python/{module}.py");
    let hash = tree_hash([(
        path.as_str(),
        Content::File {
            bytes: bytes.as_bytes(),
            exec: false,
        },
    )])
    .unwrap();
    let body = json!({
        "id": id,
        "hash": hash,
        "files": [{"path": path, "content": base64::engine::general_purpose::STANDARD.encode(&bytes)}],
        "python": SIX,
    });
    let r = d.post("/v1/environments", &body);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    json!({"id": id, "hash": hash})
}

fn publish_skill(d: &Daemon, w: &World, id: &str, environment: Option<&Value>) -> Value {
    let meta = environment.map_or_else(String::new, |e| {
        format!(
            "metadata:\n  environment: \"{}@{}\"\n",
            e["id"].as_str().unwrap(),
            e["hash"].as_str().unwrap()
        )
    });
    let skill_md = format!("---\nname: {id}\ndescription: Test skill {id}.\n{meta}---\n# {id}\n");
    let dir = w.skill(
        id,
        &[
            ("SKILL.md", skill_md.as_bytes()),
            ("scripts/run.sh", b"echo run\n"),
        ],
    );
    let (bundle, binding) = bundle_of(id, &dir);
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    binding
}

/// A session freezes its environment: the one its skills declare, or the
/// one it names, recorded and given to every job of the session; a job
/// naming another is refused with a sentence, and a session whose request
/// contradicts a skill's declaration is never created.
#[test]
fn a_session_freezes_its_environment_and_refuses_a_job_naming_another() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, pdf, gif) = with_two_environments(&w);
    let declaring = publish_skill(&d, &w, "reader", Some(&pdf));
    let plain = publish_skill(&d, &w, "plain", None);
    let import = |module: &str| {
        json!([
            "python3",
            "-c",
            format!("import {module}; print({module}.NAME)")
        ])
    };

    // Declared by a skill: recorded, shown, used by a job naming none.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [declaring, plain], "tools": ["bash"]}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    let session = r.json();
    assert_eq!(session["environment"], pdf);
    let sid = session["id"].as_str().unwrap().to_owned();
    assert_eq!(
        d.get(&format!("/v1/sessions/{sid}")).json()["environment"],
        pdf
    );
    let r = d.post(
        "/v1/executions",
        &json!({"session": sid, "argv": import("pdf_env")}),
    );
    let result = r.json();
    assert_eq!(result["stdout"], "pdf libraries\n", "{result:#}");
    assert_eq!(result["skills"]["environment"], pdf);
    // Naming the same one is fine; naming another is refused, naming both.
    let r = d.post(
        "/v1/executions",
        &json!({"session": sid, "argv": import("pdf_env"), "environment": pdf}),
    );
    assert_eq!(r.json()["stdout"], "pdf libraries\n");
    let msg = d
        .post(
            "/v1/executions",
            &json!({"session": sid, "argv": import("gif_env"), "environment": gif}),
        )
        .assert_error(400, "bad_job");
    assert!(
        msg.contains(&sid) && msg.contains("pdf-env@") && msg.contains("gif-env@"),
        "{msg}"
    );

    // Named by the session, its skills declaring none: every job gets it.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [plain], "tools": ["bash"], "environment": gif}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["environment"], gif);
    let sid2 = r.json()["id"].as_str().unwrap().to_owned();
    let r = d.post(
        "/v1/executions",
        &json!({"session": sid2, "argv": import("gif_env")}),
    );
    assert_eq!(r.json()["stdout"], "gif libraries\n", "{:#}", r.json());

    // A request contradicting a skill's declaration creates nothing.
    let before = d.get("/v1/sessions").json();
    let msg = d
        .post(
            "/v1/sessions",
            &json!({"skills": [declaring], "tools": ["bash"], "environment": gif}),
        )
        .assert_error(400, "bad_request");
    assert!(msg.contains("reader") && msg.contains("gif-env@"), "{msg}");
    assert_eq!(d.get("/v1/sessions").json(), before);
    // A session without an environment shows none.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [plain], "tools": ["bash"]}),
    );
    assert!(r.json().get("environment").is_none(), "{:#}", r.json());
}

/// One daemon keeps each selection's declared environment apart (it reads
/// a declaration once per set identity): jobs of a skill declaring one,
/// of another declaring another and of one declaring none, in turns, each
/// get their own; two that differ are refused every time they are asked,
/// not only the first.
#[test]
fn each_selection_gets_its_own_declared_environment_in_one_daemon() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, pdf, gif) = with_two_environments(&w);
    let reader = publish_skill(&d, &w, "reader", Some(&pdf));
    let maker = publish_skill(&d, &w, "maker", Some(&gif));
    let plain = publish_skill(&d, &w, "plain", None);
    let names = json!([
        "python3",
        "-c",
        "import importlib.util as u; print([m for m in ('pdf_env', 'gif_env') if u.find_spec(m)])"
    ]);
    for _ in 0..2 {
        for (skill, want) in [
            (&reader, "['pdf_env']\n"),
            (&maker, "['gif_env']\n"),
            (&plain, "[]\n"),
        ] {
            let r = d.post("/v1/executions", &json!({"skills": [skill], "argv": names}));
            assert_eq!(r.json()["stdout"], want, "{:#}", r.json());
        }
        let msg = d
            .post(
                "/v1/executions",
                &json!({"skills": [reader, maker], "argv": names}),
            )
            .assert_error(400, "bad_job");
        assert!(
            msg.contains("pdf-env")
                && msg.contains("gif-env")
                && msg.contains("the same environment"),
            "{msg}"
        );
    }
}

/// A daemon holding two environments of one module each: `pdf_env` and
/// `gif_env`.
fn with_two_environments(w: &World) -> (Daemon, Value, Value) {
    let d = Daemon::start(w, &[]);
    let pdf = upload_module(&d, "pdf-env", "pdf_env", "pdf libraries");
    let gif = upload_module(&d, "gif-env", "gif_env", "gif libraries");
    (d, pdf, gif)
}
