//! Checking a receipt against the result that carries it: the envelope's
//! one signature by a trusted key over the DSSE pre-authentication
//! encoding, then the statement's type, then every member of the result
//! against the statement (the subjects' digests, the streams' lengths,
//! each copied member, each digested one), and that the result has no
//! member the statement does not cover. The first difference is the
//! answer, as one sentence.

use serde_json::{Map, Value};

use crate::receipt::canonical;
use crate::receipt::dsse::{self, Envelope};
use crate::receipt::key::PublicKey;
use crate::receipt::statement::{self, NOT_COPIED, PREDICATE_TYPE, STATEMENT_TYPE};

/// Why a result's receipt does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the result is not a JSON object: {reason}")]
    ParseResult { reason: String },
    #[error(
        "the result carries no receipt: it was made with receipts off, or the receipt was removed"
    )]
    NoReceipt,
    #[error("the receipt is not a DSSE envelope: {reason}")]
    ParseEnvelope { reason: String },
    #[error("the receipt's payloadType is {found:?}, not \"application/vnd.in-toto+json\"")]
    PayloadType { found: String },
    #[error("the receipt has {count} signatures; a receipt has exactly one")]
    SignatureCount { count: usize },
    #[error("the receipt is signed by key {keyid}, which is not a trusted key; pass the runner's public key with --key (skill-runner receipt-key prints it)")]
    UntrustedKey { keyid: String },
    #[error("the receipt's signature does not verify with key {keyid}: the envelope or its payload was changed")]
    BadSignature { keyid: String },
    #[error("the receipt's payload is not an in-toto Statement v1 with the skill-runner predicate: {reason}")]
    ParseStatement { reason: String },
    #[error("the result's {name} does not match the receipt: the receipt says sha256 {said}, the result's bytes hash to {found}")]
    Subject {
        name: String,
        said: String,
        found: String,
    },
    #[error("the result's outputs are not the receipt's subjects: {reason}")]
    Subjects { reason: String },
    #[error("the result's {field} does not match the receipt: the receipt says {said}, the result says {found}")]
    Member {
        field: String,
        said: String,
        found: String,
    },
    #[error("the result's {field} is not covered by the receipt: it was added after signing")]
    Uncovered { field: String },
    #[error("the receipt covers {field}, which the result lacks: it was removed after signing")]
    Missing { field: String },
}

/// What a verified receipt vouches for.
#[derive(Debug, Clone)]
pub struct Vouched {
    pub keyid: String,
    /// The statement, as signed.
    pub statement: Value,
}

/// Checks the receipt of the result document `bytes` against `trusted`.
pub fn verify(bytes: &[u8], trusted: &[PublicKey]) -> Result<Vouched, VerifyError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| VerifyError::ParseResult {
        reason: e.to_string(),
    })?;
    verify_value(value, trusted)
}

/// [`verify`] of a parsed result document.
pub fn verify_value(value: Value, trusted: &[PublicKey]) -> Result<Vouched, VerifyError> {
    let Value::Object(mut result) = value else {
        return Err(VerifyError::ParseResult {
            reason: "not an object".into(),
        });
    };
    let envelope = match result.remove("receipt") {
        None | Some(Value::Null) => return Err(VerifyError::NoReceipt),
        Some(v) => {
            serde_json::from_value::<Envelope>(v).map_err(|e| VerifyError::ParseEnvelope {
                reason: e.to_string(),
            })?
        }
    };
    let (keyid, payload) = check_signature(&envelope, trusted)?;
    let statement: Value =
        serde_json::from_slice(&payload).map_err(|e| VerifyError::ParseStatement {
            reason: e.to_string(),
        })?;
    check_statement(&statement, &result)?;
    Ok(Vouched { keyid, statement })
}

/// The envelope's one signature, by a trusted key, over the PAE of its
/// payload: the key id and the payload bytes.
fn check_signature(
    envelope: &Envelope,
    trusted: &[PublicKey],
) -> Result<(String, Vec<u8>), VerifyError> {
    if envelope.payload_type != dsse::PAYLOAD_TYPE {
        return Err(VerifyError::PayloadType {
            found: envelope.payload_type.clone(),
        });
    }
    let [signature] = envelope.signatures.as_slice() else {
        return Err(VerifyError::SignatureCount {
            count: envelope.signatures.len(),
        });
    };
    let keyid = signature.keyid.clone();
    let Some(key) = trusted.iter().find(|k| k.keyid == keyid) else {
        return Err(VerifyError::UntrustedKey { keyid });
    };
    let bad = || VerifyError::BadSignature {
        keyid: keyid.clone(),
    };
    let payload = dsse::decode(&envelope.payload).ok_or_else(bad)?;
    let sig = dsse::decode(&signature.sig).ok_or_else(bad)?;
    let sig: [u8; 64] = sig.try_into().map_err(|_| bad())?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    key.key
        .verify_strict(&dsse::pae(&envelope.payload_type, &payload), &sig)
        .map_err(|_| bad())?;
    Ok((keyid, payload))
}

fn parse(reason: &str) -> VerifyError {
    VerifyError::ParseStatement {
        reason: reason.to_owned(),
    }
}

/// Short text of a JSON value for a sentence.
fn show(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "nothing".into();
    };
    let text = v.to_string();
    match text.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// Every member of the result against the statement.
fn check_statement(statement: &Value, result: &Map<String, Value>) -> Result<(), VerifyError> {
    if statement.get("_type").and_then(Value::as_str) != Some(STATEMENT_TYPE) {
        return Err(parse("its _type is not https://in-toto.io/Statement/v1"));
    }
    if statement.get("predicateType").and_then(Value::as_str) != Some(PREDICATE_TYPE) {
        return Err(parse("its predicateType is not the skill-runner receipt's"));
    }
    let predicate = statement
        .get("predicate")
        .and_then(Value::as_object)
        .ok_or_else(|| parse("it has no predicate object"))?;
    check_subjects(statement, result)?;
    let member = |field: &str, said: Option<&Value>, found: Option<&Value>| {
        if said == found {
            return Ok(());
        }
        Err(VerifyError::Member {
            field: field.to_owned(),
            said: show(said),
            found: show(found),
        })
    };
    // The streams: lengths in the result, and truncation.
    let streams = statement::streams_of(result);
    for name in ["stdout", "stderr"] {
        let said = predicate.get("streams").and_then(|s| s.get(name));
        member(
            &format!("{name} length and truncation"),
            said,
            streams.get(name),
        )?;
    }
    let said_copied = predicate
        .get("result")
        .and_then(Value::as_object)
        .ok_or_else(|| parse("its predicate has no result object"))?;
    let said_digests = predicate
        .get("result_digests")
        .and_then(Value::as_object)
        .ok_or_else(|| parse("its predicate has no result_digests object"))?;
    // In the result's order: the first member that differs is named.
    for (field, value) in result {
        if NOT_COPIED.contains(&field.as_str()) {
            continue;
        }
        match (said_copied.get(field), said_digests.get(field)) {
            (Some(said), _) => member(field, Some(said), Some(value))?,
            (None, Some(said)) => {
                let found = serde_json::json!({"sha256": canonical::sha256_hex(value)});
                member(&format!("{field} (by digest)"), Some(said), Some(&found))?
            }
            (None, None) => {
                return Err(VerifyError::Uncovered {
                    field: field.clone(),
                })
            }
        }
    }
    for field in said_copied.keys().chain(said_digests.keys()) {
        if !result.contains_key(field) {
            return Err(VerifyError::Missing {
                field: field.clone(),
            });
        }
    }
    let host_identity = result.get("identity").and_then(|i| i.get("mode"));
    let said = predicate
        .get("runner")
        .and_then(|r| r.get("host_identity_mode"));
    if said.unwrap_or(&Value::Null) != host_identity.unwrap_or(&Value::Null) {
        return Err(VerifyError::Member {
            field: "identity mode".into(),
            said: show(said),
            found: show(host_identity),
        });
    }
    let said = predicate.get("execution_id");
    member("execution_id", said, result.get("execution_id"))?;
    Ok(())
}

/// The statement's subjects are exactly the result's, digest for digest.
fn check_subjects(statement: &Value, result: &Map<String, Value>) -> Result<(), VerifyError> {
    let said = statement
        .get("subject")
        .and_then(Value::as_array)
        .ok_or_else(|| parse("it has no subject list"))?;
    let found = statement::subjects_of(result).ok_or_else(|| VerifyError::Subjects {
        reason: "the result's stdout or stderr is not a string".into(),
    })?;
    let digest = |s: &Value| {
        s.get("digest")
            .and_then(|d| d.get("sha256"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let name = |s: &Value| {
        s.get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_default()
    };
    for (i, f) in found.iter().enumerate() {
        let Some(s) = said.get(i) else {
            return Err(VerifyError::Subjects {
                reason: format!(
                    "the result has {}, which the receipt does not name",
                    name(f)
                ),
            });
        };
        if name(s) != name(f) {
            return Err(VerifyError::Subjects {
                reason: format!(
                    "the receipt names {} where the result has {}",
                    name(s),
                    name(f)
                ),
            });
        }
        if s != f {
            return Err(VerifyError::Subject {
                name: name(f),
                said: digest(s),
                found: digest(f),
            });
        }
    }
    if let Some(extra) = said.get(found.len()) {
        return Err(VerifyError::Subjects {
            reason: format!("the receipt names {}, which the result lacks", name(extra)),
        });
    }
    Ok(())
}

impl Vouched {
    /// What the receipt vouches for, one fact a line.
    pub fn render(&self) -> String {
        let p = &self.statement["predicate"];
        let r = &p["result"];
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => "none".into(),
            v => v.to_string(),
        };
        line(format!("receipt verified: signed by key {}", self.keyid));
        line(format!(
            "execution {} (invocation {}): status {}, exit code {}, signal {}",
            text(&p["execution_id"]),
            text(&p["invocation_id"]),
            text(&r["status"]),
            text(&r["exit_code"]),
            text(&r["signal"]),
        ));
        line(format!(
            "ran from {} to {}",
            text(&r["started_at"]),
            text(&r["finished_at"])
        ));
        match p["job"].get("sha256") {
            Some(sha) => line(format!(
                "job: sha256 {} (execution id from the {})",
                text(sha),
                text(&p["job"]["execution_id_from"])
            )),
            None => line("job: none validated (refused as written)".into()),
        }
        let skills = &r["skills"];
        if skills.is_object() {
            line(format!("skills: set {}", text(&skills["identity"])));
            for s in skills["manifest"]["skills"]
                .as_array()
                .into_iter()
                .flatten()
            {
                line(format!(
                    "  {} {} revision {} hash {}",
                    text(&s["id"]),
                    text(&s["version"]),
                    text(&s["revision"]),
                    text(&s["hash"])
                ));
            }
            if let Some(env) = skills.get("environment") {
                line(format!(
                    "environment: {} hash {}",
                    text(&env["id"]),
                    text(&env["hash"])
                ));
            }
        }
        if let Some(profile) = p["profile"].as_object() {
            line(format!(
                "profile: {} sha256 {}",
                text(&profile["name"]),
                text(&profile["sha256"])
            ));
            for (name, sha) in profile["seccomp"].as_object().into_iter().flatten() {
                line(format!("  seccomp {name}: sha256 {}", text(sha)));
            }
        }
        if let Some(limits) = r["limits"].as_object() {
            let shown: Vec<String> = limits
                .iter()
                .map(|(k, v)| format!("{k}={} ({})", text(&v["value"]), text(&v["enforced_by"])))
                .collect();
            line(format!("limits: {}", shown.join(", ")));
        }
        if let Some(net) = r.get("network") {
            let n = net["requests"].as_array().map_or(0, Vec::len);
            line(format!(
                "network: {n} requests listed, {} dropped",
                text(&net["dropped"])
            ));
        } else if let Some(net) = p["result_digests"].get("network") {
            line(format!(
                "network: by digest sha256 {}",
                text(&net["sha256"])
            ));
        }
        for s in self.statement["subject"].as_array().into_iter().flatten() {
            let name = text(&s["name"]);
            let stream = &p["streams"][name.as_str()];
            let extra = match stream["bytes"].as_u64() {
                Some(n) if stream["truncated"] == Value::Bool(true) => {
                    format!(" ({n} bytes, truncated by the output cap)")
                }
                Some(n) => format!(" ({n} bytes)"),
                None => String::new(),
            };
            line(format!(
                "{name}: sha256 {}{extra}",
                text(&s["digest"]["sha256"])
            ));
        }
        let runner = &p["runner"];
        line(format!(
            "runner {}, bubblewrap {}, kernel {}, host identity {}",
            text(&runner["version"]),
            text(&runner["bubblewrap"]),
            text(&runner["kernel_release"]),
            text(&runner["host_identity_mode"])
        ));
        out
    }
}
