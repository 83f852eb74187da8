"""The client's verify_receipt: a daemon's result verifies against the key
GET /v1/receipt-key answers; a changed result or another key is refused."""

import copy

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from skill_runner_client import Client, ReceiptError, verify_receipt


def test_daemon_results_verify_and_changes_are_refused(client: Client) -> None:
    key = client.receipt_key()
    result = client.run({"argv": ["sh", "-c", "echo hi; echo err >&2"]})
    statement = verify_receipt(result, key["public_key_pem"])
    assert statement["predicate"]["execution_id"] == result["execution_id"]
    for field, value in (("stdout", "hj\n"), ("exit_code", 1), ("status", "failed"), ("extra", True)):
        changed = copy.deepcopy(result.raw)
        changed[field] = value
        with pytest.raises(ReceiptError):
            verify_receipt(changed, key["public_key_pem"])
    other = Ed25519PrivateKey.generate().public_key()
    pem = other.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    with pytest.raises(ReceiptError, match="not by this key"):
        verify_receipt(result, pem)
