//! The daemon signs every result (docs/receipts.md): `GET /v1/receipt-key`
//! answers the key, a result (waited for, or read back) verifies
//! against it, and with `--receipts false` there is neither receipt nor
//! key.

use serde_json::json;
use skill_runner::receipt::verify::verify;
use skill_runner::receipt::PublicKey;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn daemon_results_verify_against_the_key_it_serves() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (status, key) = d.call("GET", "/v1/receipt-key", None);
    assert_eq!(status, 200, "{key:#}");
    let pem = key["public_key_pem"].as_str().unwrap();
    let trusted = [PublicKey::from_pem(pem, "the daemon").unwrap()];
    assert_eq!(trusted[0].keyid, key["keyid"].as_str().unwrap());
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "signed-1", "argv": ["sh", "-c", "echo out; echo err >&2"]}),
    );
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(doc["receipt"]["signatures"][0]["keyid"], key["keyid"]);
    let v = verify(&serde_json::to_vec(&doc).unwrap(), &trusted).unwrap();
    assert_eq!(v.statement["predicate"]["execution_id"], "signed-1");
    // Read back: the same document, the same receipt.
    let again = d.get("/v1/executions/signed-1").json();
    assert_eq!(again["receipt"], doc["receipt"]);
    verify(&serde_json::to_vec(&again).unwrap(), &trusted).unwrap();
    // A refused job's result is signed too.
    // (a cwd in a fresh workspace cannot exist: the runner refuses it)
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["/bin/true"], "cwd": "missing"}),
    );
    let refused = r.json();
    assert_eq!(refused["status"], "rejected", "{refused:#}");
    verify(&serde_json::to_vec(&refused).unwrap(), &trusted).unwrap();
}

#[test]
fn receipts_off_means_no_receipt_and_no_key() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--receipts", "false"]);
    let r = d.get("/v1/receipt-key");
    r.assert_error(404, "not_found");
    let r = d.post("/v1/executions", &json!({"argv": ["/bin/true"]}));
    assert_eq!(r.status, 200);
    assert!(r.json().get("receipt").is_none());
}
