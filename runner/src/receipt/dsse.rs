//! The DSSE envelope (Dead Simple Signing Envelope, v1.0.2): what is
//! signed is not the payload but its pre-authentication encoding
//! [`pae`], `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, where
//! LEN is the byte length in ASCII decimal with no leading zeros. The
//! envelope carries the payload in standard base64 (padded) and one
//! signature per key: `{keyid, sig}`, `sig` the base64 of the signature.

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The payload type of an in-toto Statement in a DSSE envelope.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A DSSE envelope as the result carries it in `receipt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The payload, standard base64 with padding.
    pub payload: String,
    pub signatures: Vec<Signature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The signing key's id (docs/receipts.md, "Keys").
    pub keyid: String,
    /// The signature over [`pae`], standard base64 with padding.
    pub sig: String,
}

/// The pre-authentication encoding of DSSE v1.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// Standard base64 with padding, as the envelope spells bytes.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard padded base64; anything else (URL-safe letters,
/// missing padding, stray bits) is refused, so one payload has one
/// spelling.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    (encode(&bytes) == text).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_the_dsse_specs_example() {
        // The example of the DSSE protocol document.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn one_payload_has_one_spelling() {
        assert_eq!(decode(&encode(b"ab")), Some(b"ab".to_vec()));
        assert_eq!(decode("YWI"), None);
        assert_eq!(decode("YWJ="), None);
        assert_eq!(decode("YW-="), None);
    }
}
