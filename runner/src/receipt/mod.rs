//! Receipts: a signed, checkable statement of what an execution ran and
//! what it produced (docs/receipts.md). A receipt is a DSSE envelope
//! ([`dsse`]) over an in-toto Statement v1 ([`statement`]) whose subjects
//! are the result's outputs by SHA-256 and whose predicate holds the
//! result's other members and what only the runner knew (the job's
//! canonical digest, [`canonical`]); it is signed with the runner's
//! ed25519 key ([`key`]) and checked, against the result it rides in, by
//! [`verify`].
//!
//! The room knows result documents only as JSON: it is used by `exec`
//! (which seals each result) and `daemon` (which serves the public key),
//! and uses `fsx`, `text` and `error` alone.
//!
//! Invariants:
//! - the statement is made from the result document as it is sent, so
//!   whatever a verifier reads is what was signed;
//! - the job itself is never in a receipt, only its digest: `env` secrets
//!   stay out;
//! - the key is read from a private file of the runner's user, never
//!   through a symlink, and never reaches a sandbox.

pub mod canonical;
pub mod dsse;
pub mod key;
pub mod statement;
pub mod verify;

use serde_json::{Map, Value};

pub use dsse::Envelope;
pub use key::{KeyError, PublicKey, Signer};
pub use statement::Facts;

/// The envelope for `result` (a result document's members, without
/// `receipt`), signed by `signer`.
pub fn seal(result: &Map<String, Value>, facts: &Facts, signer: &Signer) -> Envelope {
    let invocation = crate::fsx::random_hex();
    let payload = statement::payload(result, facts, &invocation);
    let sig = signer.sign(&dsse::pae(dsse::PAYLOAD_TYPE, &payload));
    Envelope {
        payload_type: dsse::PAYLOAD_TYPE.to_owned(),
        payload: dsse::encode(&payload),
        signatures: vec![dsse::Signature {
            keyid: signer.public().keyid.clone(),
            sig: dsse::encode(&sig),
        }],
    }
}
