//! The skill host over HTTP (docs/skill-host.md): sessions from published
//! bindings in both delivery modes, every advertised tool dispatched, and
//! sessions listed, deleted and expired when idle.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

/// The skill host over HTTP (docs/skill-host.md): a session created
/// from published bindings in both delivery modes, its tools as routes,
/// the refusal of a file-needing skill in a session without file tools,
/// bounded resource reads, and an execution naming the session.
#[test]
fn session_routes_serve_the_skill_host() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let tool = w.skill("tooly", &[("scripts/run.sh", b"echo from-tooly\n")]);
    let plain = w.skill("plain", &[]);
    let mut bindings = Vec::new();
    for (id, dir) in [("tooly", &tool), ("plain", &plain)] {
        let (bundle, binding) = bundle_of(id, dir);
        let r = d.post("/v1/skill-packages", &bundle);
        assert_eq!(r.status, 200, "{:#}", r.json());
        bindings.push(binding);
    }

    // File tools on: managed filesystem, prompt metadata without bodies.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[0], bindings[1]], "tools": ["bash", "read"]}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["delivery"], "managed_filesystem");
    let id = doc["id"].as_str().unwrap().to_owned();
    let prompt = doc["prompt"]["skills"].as_array().unwrap();
    assert!(prompt
        .iter()
        .any(|s| s["package_path"] == "$SCIENCEDISCOVERY_SKILLS_DIR/tooly"));
    assert!(
        !doc["prompt"]["text"].as_str().unwrap().contains("# tooly"),
        "a body leaked into the prompt"
    );

    // Tools as routes.
    let r = d.get(&format!("/v1/sessions/{id}/skills?query=tooly"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    let r = d.get(&format!("/v1/sessions/{id}/skills/tooly"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(r.json().to_string().contains("# tooly"));
    let r = d.get(&format!(
        "/v1/sessions/{id}/resources?path=/skills/tooly/scripts/run.sh&limit=4"
    ));
    let chunk = r.json();
    assert_eq!(r.status, 200, "{chunk:#}");
    assert!(chunk.to_string().contains("echo"), "{chunk:#}");
    let r = d.get(&format!(
        "/v1/sessions/{id}/resources?path=/skills/tooly/../../etc/passwd"
    ));
    assert!(
        r.status >= 400 && r.status < 500,
        "escape allowed: {}",
        r.status
    );
    let r = d.get(&format!("/v1/sessions/{id}/resources?nope=1"));
    r.assert_error(400, "bad_request");
    let r = d.get(&format!("/v1/sessions/{id}/skills/unknown"));
    assert_eq!(r.status, 404);
    let r = d.get(&format!("/v1/sessions/{id}/events"));
    assert_eq!(r.status, 200);
    assert!(
        r.json().to_string().contains("tooly"),
        "loads are recorded as events"
    );

    // No file tools + a skill that needs files: refused, 422.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[0]], "tools": ["web_search"]}),
    );
    r.assert_error(422, "composition_rejected");
    // No file tools + instruction-only skill: semantic tools with schemas.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[1]], "tools": []}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["delivery"], "semantic_tools");
    assert!(
        doc["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{doc:#}"
    );

    // An execution naming the session gets its frozen skills.
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/tooly/scripts/run.sh"], "session": id}),
    );
    let res = r.json();
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["stdout"], "from-tooly\n", "{res:#}");
}

#[test]
fn every_advertised_tool_is_dispatched() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let bindings = publish_two(&d, &w);
    let listed = d.get("/v1/skill-packages").json();
    assert_eq!(listed["skills"].as_array().unwrap().len(), 2, "{listed:#}");

    let call = |id: &str, tool: &str, input: Value| -> Value {
        let r = d.post(&format!("/v1/sessions/{id}/tools/{tool}"), &input);
        let doc = r.json();
        assert_eq!(r.status, 200, "{tool}: {doc:#}");
        assert!(
            doc["content"].is_string() && doc["is_error"].is_boolean(),
            "{doc:#}"
        );
        doc
    };
    // Managed filesystem: find_skills, load_skill, load_skill_section,
    // read_skill_resource.
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": bindings, "tools": ["bash", "read"]}),
    );
    let doc = s.json();
    let id = doc["id"].as_str().unwrap().to_owned();
    let tools: Vec<&str> = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "find_skills",
            "load_skill",
            "load_skill_section",
            "read_skill_resource"
        ]
    );
    let found = call(&id, "find_skills", json!({"query": "tooly"}));
    assert_eq!(found["is_error"], false);
    let text = found["content"].as_str().unwrap();
    assert!(text.contains("- tooly:"), "{text}");
    // total counts the matches, not the session's skills.
    let r = d
        .get(&format!("/v1/sessions/{id}/skills?query=tooly"))
        .json();
    let hits = r["hits"].as_array().unwrap().len();
    assert_eq!(r["total"].as_u64().unwrap() as usize, hits, "{r:#}");
    assert!(text.starts_with(&format!("{hits} skill")), "{text}");
    let loaded = call(&id, "load_skill", json!({"name": "tooly"}));
    assert!(
        loaded["content"].as_str().unwrap().contains("# tooly"),
        "{loaded:#}"
    );
    assert!(loaded["content"]
        .as_str()
        .unwrap()
        .contains("references/api.md"));
    let section = call(
        &id,
        "load_skill_section",
        json!({"name": "tooly", "section": "references/api.md"}),
    );
    assert_eq!(section["content"], "# API\nCall it.\n");
    let res = call(
        &id,
        "read_skill_resource",
        json!({"path": "/skills/tooly/scripts/run.sh", "limit": 4}),
    );
    assert_eq!(res["is_error"], false);
    assert!(
        res["content"].as_str().unwrap().starts_with("echo"),
        "{res:#}"
    );
    assert!(
        res["content"].as_str().unwrap().contains("offset 4"),
        "{res:#}"
    );
    // Faults the model can fix: is_error, 200, a sentence.
    for (tool, input, says) in [
        ("load_skill", json!({"name": "nope"}), "not part of session"),
        ("load_skill", json!({"skill": "tooly"}), "not valid"),
        ("find_skills", json!({}), "missing field"),
        (
            "load_skill_section",
            json!({"name": "tooly", "section": "missing.md"}),
            "no section",
        ),
        (
            "read_skill_resource",
            json!({"path": "/etc/passwd"}),
            "not a package path",
        ),
    ] {
        let doc = call(&id, tool, input);
        assert_eq!(doc["is_error"], true, "{tool}: {doc:#}");
        assert!(
            doc["content"].as_str().unwrap().contains(says),
            "{tool}: {doc:#}"
        );
    }
    // Not advertised by this session, or no such session: 404.
    d.post(
        &format!("/v1/sessions/{id}/tools/Skill"),
        &json!({"skill": "tooly"}),
    )
    .assert_error(404, "not_found");
    d.post(
        "/v1/sessions/ses-0123456789abcdef0123456789abcdef/tools/load_skill",
        &json!({"name": "tooly"}),
    )
    .assert_error(404, "not_found");
    d.request(
        "POST",
        &format!("/v1/sessions/{id}/tools/load_skill"),
        &[],
        b"{not json",
    )
    .assert_error(400, "bad_request");

    // Semantic tools: list_skills and Skill.
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[1]], "tools": []}),
    );
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    let list = call(&sid, "list_skills", json!({}));
    assert!(
        list["content"].as_str().unwrap().contains("- plain:"),
        "{list:#}"
    );
    let skill = call(&sid, "Skill", json!({"skill": "plain"}));
    assert_eq!(skill["is_error"], false);
    assert!(
        skill["content"].as_str().unwrap().contains("# plain"),
        "{skill:#}"
    );
    let bad = call(&sid, "Skill", json!({"skill": "tooly"}));
    assert_eq!(bad["is_error"], true, "{bad:#}");
}

#[test]
fn sessions_are_listed_deleted_and_expire_when_idle() {
    let w = World::new();
    let d = Daemon::start(&w, &["--session-idle", "2s"]);
    let bindings = publish_two(&d, &w);
    let create = || {
        let r = d.post(
            "/v1/sessions",
            &json!({"skills": [bindings[1]], "tools": []}),
        );
        assert_eq!(r.status, 200);
        r.json()["id"].as_str().unwrap().to_owned()
    };
    let a = create();
    let b = create();
    let listed = d.get("/v1/sessions").json();
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{listed:#}"
    );
    assert_eq!(listed["sessions"][0]["skills"], json!(["plain"]));
    let r = d.delete(&format!("/v1/sessions/{a}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"id": a, "deleted": true}));
    d.get(&format!("/v1/sessions/{a}"))
        .assert_error(404, "not_found");
    d.delete(&format!("/v1/sessions/{a}"))
        .assert_error(404, "not_found");
    d.delete("/v1/sessions/not-a-session")
        .assert_error(400, "bad_request");
    // A job naming a session is a use of it.
    let before = d.get("/v1/sessions").json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == b.as_str())
        .unwrap()["last_used_at"]
        .clone();
    wait_until("the clock to move on", || {
        d.post("/v1/executions", &json!({"argv": ["true"], "session": b}));
        let after = d.get("/v1/sessions").json()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == b.as_str())
            .map(|s| s["last_used_at"].clone());
        after.is_some_and(|a| a != before)
    });
    // Left alone (listing does not count as a use), b expires.
    wait_until("the idle session to expire", || {
        !d.get("/v1/sessions").json().to_string().contains(&b)
    });
    d.get(&format!("/v1/sessions/{b}"))
        .assert_error(404, "not_found");
    let record = w.data_dir().join("sessions").join(format!("{b}.json"));
    assert!(!record.exists(), "{}", record.display());
}
