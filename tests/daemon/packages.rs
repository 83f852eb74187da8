//! Publishing skill packages: a published bundle runs by its binding alone,
//! a bundle or a job whose bytes do not match its hash is refused naming the
//! skill, and an unpublished binding gets 404 with the hint to publish it.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn a_published_bundle_runs_by_binding_alone() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let dir = w.skill("hello", &[("scripts/greet.sh", b"echo \"hello, $1\"\n")]);
    let (bundle, binding) = bundle_of("hello", &dir);
    let d = Daemon::start(&w, &[]);

    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let doc = r.json();
    let identity = doc["identity"].as_str().unwrap().to_owned();
    assert_eq!(identity.len(), 64);
    assert_eq!(doc["skills"], json!([binding]));

    let r = d.get(&format!("/v1/skill-packages/{identity}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["skills"], json!([binding]));
    d.get(&format!("/v1/skill-packages/{}", "0".repeat(64)))
        .assert_error(404, "not_found");

    let r = d.post(
        "/v1/executions",
        &json!({
            "argv": ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "daemon"],
            "skills": [binding],
        }),
    );
    assert_eq!(r.status, 200);
    let result = r.json();
    assert_eq!(result["status"], "exited", "{result:#}");
    assert_eq!(result["stdout"], "hello, daemon\n");
    assert_eq!(result["skills"]["identity"], identity.as_str());

    // The result stays retrievable by id.
    let id = result["execution_id"].as_str().unwrap();
    let again = d.get(&format!("/v1/executions/{id}"));
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["stdout"], "hello, daemon\n");

    // A bundle whose bytes do not match its hash is refused, naming it.
    let mut bad = bundle.clone();
    bad["skills"][0]["hash"] = json!("a".repeat(64));
    let msg = d
        .post("/v1/skill-packages", &bad)
        .assert_error(422, "hash_mismatch");
    assert!(msg.contains("hello"), "{msg}");
}

#[test]
fn a_job_with_a_lying_hash_is_422_and_names_the_skill() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let dir = w.skill("liar", &[("scripts/x.sh", b"echo x\n")]);
    let d = Daemon::start(&w, &["--root", &roots]);
    let mut skill = skill_ref("liar", &dir);
    skill["hash"] = json!("b".repeat(64));
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["true"], "skills": [skill]}),
    );
    let msg = r.assert_error(422, "hash_mismatch");
    assert!(msg.contains("liar"), "{msg}");
    // The refusal is a result document, retained like any other.
    assert_eq!(r.json()["status"], "rejected");
    let id = r.json()["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(
        d.get(&format!("/v1/executions/{id}")).json()["status"],
        "rejected"
    );
    // A skill that was never published: 404 with a hint to publish it.
    let mut unknown = skill_ref("liar", &dir);
    unknown.as_object_mut().unwrap().remove("path");
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "skills": [unknown]}),
        )
        .assert_error(404, "not_in_store");
    assert!(msg.contains("publish"), "{msg}");
}
