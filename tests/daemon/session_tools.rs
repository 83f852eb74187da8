//! A session's enabled tools: the agent's own names are taken as they
//! are, a file tool's name spelled differently ("Bash", "read ") is
//! refused with the list of file tools, and the answer says which tools
//! counted as file tools.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn a_file_tool_spelled_differently_is_refused_and_the_answer_names_the_file_tools() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for near in ["Bash", "read ", " GREP", "Write"] {
        let r = d.post(
            "/v1/sessions",
            &json!({"skills": [], "tools": ["web_search", near]}),
        );
        let message = r.assert_error(400, "bad_request");
        assert!(message.contains(&format!("{near:?}")), "{message}");
        assert!(
            message.contains("bash, read, write, edit, glob, grep"),
            "{message}"
        );
    }
    // Nothing was made of the refused requests.
    let listed = d.get("/v1/sessions").json();
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 0, "{listed}");

    // The agent's own tools are taken as they are; the file tools are
    // named in the answer, and decide the delivery.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [], "tools": ["web_search", "read", "Bashful", "grep"]}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(
        doc["enabled_tools"],
        json!(["web_search", "read", "Bashful", "grep"])
    );
    assert_eq!(doc["file_tools"], json!(["read", "grep"]));
    assert_eq!(doc["delivery"], "managed_filesystem");
    let shown = d
        .get(&format!("/v1/sessions/{}", doc["id"].as_str().unwrap()))
        .json();
    assert_eq!(shown["file_tools"], json!(["read", "grep"]));

    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [], "tools": ["web_search"]}),
    );
    let doc = r.json();
    assert_eq!(doc["file_tools"], json!([]), "{doc:#}");
    assert_eq!(doc["delivery"], "semantic_tools");
}
