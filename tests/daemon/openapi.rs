//! The OpenAPI document (docs/openapi.json) against the real daemon: every
//! route of the router is documented and nothing else, and real responses
//! of every route match the document's statuses and schemas.

use std::path::Path;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

pub(super) fn openapi_doc() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// `(METHOD, /path/{param})` of every `.route(...)` in the daemon's source.
fn routes_in_source() -> std::collections::BTreeSet<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runner/src/daemon");
    let mut out = std::collections::BTreeSet::new();
    for file in [
        "routes.rs",
        "sessions.rs",
        "session_files.rs",
        "environments.rs",
        "outputs.rs",
        "receipts.rs",
        "mcp.rs",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for piece in text.split(".route(").skip(1) {
            let path = piece.split('"').nth(1).unwrap().replace("{*", "{");
            // The handler expression: up to the parenthesis closing `.route(`.
            let mut depth = 1;
            let end = piece
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .unwrap()
                .0;
            let handler = &piece[..end];
            for m in ["get", "post", "delete", "put", "patch"] {
                let called = handler
                    .match_indices(&format!("{m}("))
                    .any(|(i, _)| i == 0 || !handler.as_bytes()[i - 1].is_ascii_alphanumeric());
                if called {
                    out.insert((m.to_uppercase(), path.clone()));
                }
            }
        }
    }
    out
}

/// Checks `v` against `schema`, for the part of JSON Schema the document
/// uses: `$ref`, `type` (one or a list), `enum`, `properties`, `required`,
/// `additionalProperties`, `items`, `minItems`, `minimum`, `maximum`,
/// `oneOf`, `anyOf`. (`pattern`, `prefixItems` and `propertyNames`
/// constrain requests and are not checked.)
fn check_schema(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return check_schema(doc, &doc["components"]["schemas"][name], v, at);
    }
    if let Some(options) = schema["anyOf"].as_array() {
        if !options.iter().any(|o| check_schema(doc, o, v, at).is_ok()) {
            return Err(format!("{at}: matches none of anyOf: {v}"));
        }
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let ok = options
            .iter()
            .filter(|o| check_schema(doc, o, v, at).is_ok())
            .count();
        if ok != 1 {
            return Err(format!("{at}: matches {ok} of oneOf, not 1: {v}"));
        }
    }
    let type_ok = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("type {other} not handled"),
    };
    match &schema["type"] {
        Value::String(t) if !type_ok(t) => return Err(format!("{at}: not {t}: {v}")),
        Value::Array(ts) if !ts.iter().any(|t| type_ok(t.as_str().unwrap())) => {
            return Err(format!("{at}: none of {ts:?}: {v}"))
        }
        _ => {}
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            return Err(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), v.as_f64()) {
        if n < min {
            return Err(format!("{at}: {n} < {min}"));
        }
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), v.as_f64()) {
        if n > max {
            return Err(format!("{at}: {n} > {max}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            if !obj.contains_key(r.as_str().unwrap()) {
                return Err(format!("{at}: missing {r}: {v}"));
            }
        }
        let props = schema["properties"].as_object();
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check_schema(doc, s, val, &format!("{at}.{k}"))?,
                None if schema["additionalProperties"] == false => {
                    return Err(format!("{at}: unexpected {k}"))
                }
                None if schema["additionalProperties"].is_object() => check_schema(
                    doc,
                    &schema["additionalProperties"],
                    val,
                    &format!("{at}.{k}"),
                )?,
                None => {}
            }
        }
    }
    if let Some(items) = v.as_array() {
        if let Some(min) = schema["minItems"].as_u64() {
            if (items.len() as u64) < min {
                return Err(format!("{at}: fewer than {min} items"));
            }
        }
        if schema["items"].is_object() {
            for (i, item) in items.iter().enumerate() {
                check_schema(doc, &schema["items"], item, &format!("{at}[{i}]"))?;
            }
        }
    }
    Ok(())
}

/// Checks a real response of `method` on the route `template` against the
/// document: its status is listed, and its body matches the schema.
pub(super) fn conforms(doc: &Value, method: &str, template: &str, r: &Resp) {
    let op = &doc["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not in the document");
    let resp = &op["responses"][r.status.to_string()];
    assert!(
        resp.is_object(),
        "{method} {template}: status {} is not documented: {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let ctype = r
        .header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let media = &resp["content"][&ctype];
    assert!(
        media.is_object(),
        "{method} {template} {}: content type {ctype} is not documented",
        r.status
    );
    let schema = &media["schema"];
    let bodies: Vec<Value> = match ctype.as_str() {
        "application/json" => vec![r.json()],
        "application/x-ndjson" => String::from_utf8_lossy(&r.body)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        _ => vec![Value::String(String::from_utf8_lossy(&r.body).into_owned())],
    };
    for b in &bodies {
        if let Err(e) = check_schema(doc, schema, b, "body") {
            panic!("{method} {template} {}: {e}", r.status);
        }
    }
}

#[test]
fn the_openapi_document_matches_the_router_and_real_responses() {
    if !require_sandbox() {
        return;
    }
    let doc = openapi_doc();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every route of the router is documented, and nothing else.
    let mut documented = std::collections::BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            documented.insert((m.to_uppercase(), path.clone()));
        }
    }
    assert_eq!(routes_in_source(), documented);

    let w = World::new();
    let d = Daemon::start(&w, &["--heartbeat", "10s"]);
    // The daemon serves the same document.
    let served = d.get("/v1/openapi.json");
    assert_eq!(served.json(), doc);
    conforms(&doc, "GET", "/v1/openapi.json", &served);
    conforms(&doc, "GET", "/v1/health", &d.get("/v1/health"));
    conforms(&doc, "GET", "/v1/version", &d.get("/v1/version"));
    conforms(&doc, "GET", "/metrics", &d.get("/metrics"));
    conforms(&doc, "GET", "/v1/receipt-key", &d.get("/v1/receipt-key"));

    let bindings = publish_two(&d, &w);
    let (bundle, _) = bundle_of("plain", &w.path().join("skills/plain"));
    let published = d.post("/v1/skill-packages", &bundle);
    conforms(&doc, "POST", "/v1/skill-packages", &published);
    let identity = published.json()["identity"].as_str().unwrap().to_owned();
    conforms(
        &doc,
        "GET",
        "/v1/skill-packages",
        &d.get("/v1/skill-packages"),
    );
    let set = "/v1/skill-packages/{identity}";
    conforms(
        &doc,
        "GET",
        set,
        &d.get(&format!("/v1/skill-packages/{identity}")),
    );
    conforms(
        &doc,
        "GET",
        set,
        &d.get(&format!("/v1/skill-packages/{}", "0".repeat(64))),
    );
    conforms(
        &doc,
        "POST",
        "/v1/skill-packages",
        &d.post("/v1/skill-packages", &json!({})),
    );

    let exec = "/v1/executions";
    let one = "/v1/executions/{id}";
    let r = d.post(
        exec,
        &json!({"execution_id": "oa-1", "argv": ["sh", "-c", "echo hi"]}),
    );
    conforms(&doc, "POST", exec, &r);
    conforms(&doc, "POST", exec, &d.post(exec, &json!({"argv": []})));
    // A job refused before launch answers its result document (which
    // also has an `error`): found by schemathesis, the document said
    // oneOf of the error and the result, which both match.
    let unpublished = json!({"argv": ["true"], "skills": [{"id": "ghost", "revision": 1, "version": "1", "hash": "0".repeat(64)}]});
    let refused = d.post(exec, &unpublished);
    assert_eq!(refused.status, 404);
    assert_eq!(refused.json()["status"], "rejected");
    conforms(&doc, "POST", exec, &refused);
    conforms(
        &doc,
        "POST",
        exec,
        &d.post(exec, &json!({"execution_id": "oa-1", "argv": ["x"]})),
    );
    let streamed = d.request(
        "POST",
        exec,
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({"argv": ["echo", "streamed"]})).unwrap(),
    );
    conforms(&doc, "POST", exec, &streamed);
    let detached = d.post(
        "/v1/executions?wait=false",
        &json!({"execution_id": "oa-2", "argv": ["sleep", marker(14)]}),
    );
    conforms(&doc, "POST", exec, &detached);
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-2"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/oa-2"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-2?wait=60s"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-1"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/nobody"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-1?wait=x"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/oa-1"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/nobody"));
    conforms(&doc, "GET", exec, &d.get("/v1/executions?limit=1"));
    conforms(&doc, "GET", exec, &d.get("/v1/executions?status=nope"));
    let events = "/v1/executions/{id}/events";
    conforms(&doc, "GET", events, &d.get("/v1/executions/oa-1/events"));
    conforms(
        &doc,
        "GET",
        events,
        &d.get("/v1/executions/oa-1/events?after=1"),
    );
    conforms(&doc, "GET", events, &d.get("/v1/executions/nobody/events"));
    let outs = "/v1/executions/{id}/outputs/{path}";
    let script = "echo x > o.txt; ln -s o.txt l";
    let job =
        json!({"execution_id": "oa-3", "argv": ["sh", "-c", script], "outputs": ["o.txt", "l"]});
    conforms(&doc, "POST", exec, &d.post(exec, &job));
    conforms(
        &doc,
        "GET",
        outs,
        &d.get("/v1/executions/oa-3/outputs/o.txt"),
    );
    conforms(&doc, "GET", outs, &d.get("/v1/executions/oa-3/outputs/l"));

    let s = d.post(
        "/v1/sessions",
        &json!({"skills": bindings, "tools": ["bash", "read"]}),
    );
    conforms(&doc, "POST", "/v1/sessions", &s);
    let id = s.json()["id"].as_str().unwrap().to_owned();
    conforms(
        &doc,
        "POST",
        "/v1/sessions",
        &d.post("/v1/sessions", &json!({"skills": 1})),
    );
    conforms(&doc, "GET", "/v1/sessions", &d.get("/v1/sessions"));
    let base = format!("/v1/sessions/{id}");
    for (template, path) in [
        ("/v1/sessions/{id}", base.clone()),
        (
            "/v1/sessions/{id}/skills",
            format!("{base}/skills?query=tooly"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}",
            format!("{base}/skills/tooly"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}",
            format!("{base}/skills/nope"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}/sections/{section}",
            format!("{base}/skills/tooly/sections/references/api.md"),
        ),
        (
            "/v1/sessions/{id}/resources",
            format!("{base}/resources?path=/skills/tooly/scripts/run.sh"),
        ),
        ("/v1/sessions/{id}/events", format!("{base}/events")),
        ("/v1/sessions/{id}", "/v1/sessions/bad-id".to_owned()),
    ] {
        conforms(&doc, "GET", template, &d.get(&path));
    }
    let tool = "/v1/sessions/{id}/tools/{tool}";
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(
            &format!("{base}/tools/load_skill"),
            &json!({"name": "tooly"}),
        ),
    );
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(&format!("{base}/tools/load_skill"), &json!({"nam": 1})),
    );
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(&format!("{base}/tools/Skill"), &json!({})),
    );
    conforms(&doc, "DELETE", "/v1/sessions/{id}", &d.delete(&base));
    conforms(&doc, "DELETE", "/v1/sessions/{id}", &d.delete(&base));

    // A managed workspace's file routes.
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": [], "tools": [], "workspace": "managed"}),
    );
    conforms(&doc, "POST", "/v1/sessions", &s);
    let base = format!("/v1/sessions/{}", s.json()["id"].as_str().unwrap());
    let (file, files) = ("/v1/sessions/{id}/files/{path}", "/v1/sessions/{id}/files");
    let octets = [("Content-Type", "application/octet-stream")];
    for (path, body) in [("in/a.csv", &b"a,b\n"[..]), ("..%2Fx", b"x")] {
        let r = d.request("PUT", &format!("{base}/files/{path}"), &octets, body);
        conforms(&doc, "PUT", file, &r);
    }
    let r = d.request(
        "PUT",
        &format!("{base}/files/x"),
        &[("Content-Type", "text/plain")],
        b"x",
    );
    conforms(&doc, "PUT", file, &r);
    conforms(&doc, "GET", file, &d.get(&format!("{base}/files/in/a.csv")));
    conforms(&doc, "GET", file, &d.get(&format!("{base}/files/in/none")));
    conforms(&doc, "GET", file, &d.get(&format!("{base}/files/in")));
    conforms(
        &doc,
        "GET",
        files,
        &d.get(&format!("{base}/files?prefix=in/")),
    );
    conforms(&doc, "GET", files, &d.get(&format!("{base}/files?nope=1")));
    conforms(
        &doc,
        "DELETE",
        file,
        &d.delete(&format!("{base}/files/in/a.csv")),
    );
    conforms(
        &doc,
        "DELETE",
        file,
        &d.delete(&format!("{base}/files/in/a.csv")),
    );
    conforms(&doc, "DELETE", "/v1/sessions/{id}", &d.delete(&base));
}
