"""Checking a result's receipt (docs/receipts.md): a pure function over the
result document and a public key, the same checks as ``skill-runner verify``.

The signature needs ``cryptography`` (``pip install
skill-runner-client[receipts]``); the rest is the standard library.
"""

import base64
import binascii
import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://skill-runner.dev/receipt/v1"
NOT_COPIED = ("stdout", "stderr", "receipt")


class ReceiptError(Exception):
    """The receipt does not hold; the message names the first mismatch."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def canonical(value: Any) -> bytes:
    """Canonical JSON (RFC 8785 for the documents the runner makes)."""

    def write(v: Any) -> str:
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
            return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + write(v[k]) for k in keys) + "}"
        if isinstance(v, list):
            return "[" + ",".join(write(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False)

    return write(value).encode()


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise ReceiptError(f"the receipt's {what} is not base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ReceiptError(f"the receipt's {what} is not standard base64: {e}") from None
    if base64.b64encode(raw).decode() != text:
        raise ReceiptError(f"the receipt's {what} is not standard padded base64")
    return raw


def key_id(public_key_pem: str) -> str:
    """SHA-256 hex of the key's DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_public_key,
    )

    key = load_pem_public_key(public_key_pem.encode())
    der = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _subjects(result: Mapping[str, Any]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for name in ("stdout", "stderr"):
        text = result.get(name)
        if not isinstance(text, str):
            raise ReceiptError(f"the result's {name} is not a string")
        out.append({"name": name, "digest": {"sha256": hashlib.sha256(text.encode()).hexdigest()}})
    outputs = result.get("outputs")
    if isinstance(outputs, list):
        for f in outputs:
            if isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str):
                out.append({"name": "outputs/" + f["path"], "digest": {"sha256": f["sha256"]}})
    return out


def _same(a: Any, b: Any) -> bool:
    # By canonical bytes: Python's == takes 1 == 1.0 == True.
    return canonical(a) == canonical(b)


def verify_receipt(result: Mapping[str, Any], public_key_pem: str) -> Dict[str, Any]:
    """Checks ``result["receipt"]`` against ``result`` and the key; returns
    the verified statement, or raises :class:`ReceiptError`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    envelope = result.get("receipt")
    if not isinstance(envelope, dict):
        raise ReceiptError("the result carries no receipt")
    if set(envelope) != {"payloadType", "payload", "signatures"}:
        raise ReceiptError("the receipt is not a DSSE envelope")
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise ReceiptError(f"the receipt's payloadType is {envelope['payloadType']!r}")
    sigs = envelope["signatures"]
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        raise ReceiptError("the receipt does not have exactly one signature")
    if set(sigs[0]) != {"keyid", "sig"}:
        raise ReceiptError("the receipt's signature is not {keyid, sig}")
    key = load_pem_public_key(public_key_pem.encode())
    if not isinstance(key, Ed25519PublicKey):
        raise ReceiptError("the public key is not an ed25519 key")
    if sigs[0]["keyid"] != key_id(public_key_pem):
        raise ReceiptError(f"the receipt is signed by key {sigs[0]['keyid']}, not by this key")
    payload = _b64(envelope["payload"], "payload")
    try:
        key.verify(_b64(sigs[0]["sig"], "signature"), pae(PAYLOAD_TYPE, payload))
    except InvalidSignature:
        raise ReceiptError("the receipt's signature does not verify: the envelope or its payload was changed") from None
    statement: Dict[str, Any] = json.loads(payload)
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != PREDICATE_TYPE:
        raise ReceiptError("the receipt's payload is not a skill-runner in-toto statement")
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise ReceiptError("the receipt's statement has no predicate")
    doc = {k: v for k, v in result.items() if k != "receipt"}
    if not _same(statement.get("subject"), _subjects(doc)):
        raise ReceiptError("the result's outputs (stdout, stderr, outputs) do not match the receipt's subjects")
    for name in ("stdout", "stderr"):
        text = doc.get(name)
        stream = {"bytes": len(text.encode()) if isinstance(text, str) else None,
                  "truncated": doc.get(f"{name}_truncated")}
        if not _same(predicate.get("streams", {}).get(name), stream):
            raise ReceiptError(f"the result's {name} length and truncation do not match the receipt")
    copied: Mapping[str, Any] = predicate.get("result") or {}
    digested: Mapping[str, Any] = predicate.get("result_digests") or {}
    for field, value in doc.items():
        if field in NOT_COPIED:
            continue
        if field in copied:
            if not _same(copied[field], value):
                raise ReceiptError(f"the result's {field} does not match the receipt")
        elif field in digested:
            if not _same(digested[field], {"sha256": hashlib.sha256(canonical(value)).hexdigest()}):
                raise ReceiptError(f"the result's {field} does not match the receipt's digest")
        else:
            raise ReceiptError(f"the result's {field} is not covered by the receipt")
    for field in list(copied) + list(digested):
        if field not in doc:
            raise ReceiptError(f"the receipt covers {field}, which the result lacks")
    identity: Optional[Any] = doc.get("identity")
    mode = identity.get("mode") if isinstance(identity, dict) else None
    if not _same(predicate.get("runner", {}).get("host_identity_mode"), mode):
        raise ReceiptError("the result's identity mode does not match the receipt")
    if not _same(predicate.get("execution_id"), doc.get("execution_id")):
        raise ReceiptError("the result's execution_id does not match the receipt")
    return statement


__all__: Tuple[str, ...] = ("ReceiptError", "canonical", "key_id", "pae", "verify_receipt")
