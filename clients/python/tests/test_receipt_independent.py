"""An independent check of the runner's receipts: ``cryptography`` alone and
the DSSE pre-authentication encoding written here from the DSSE spec
(protocol.md: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``),
against the public key ``skill-runner receipt-key --json`` prints. Nothing
of the client (nor of the runner's code) is used: a receipt the runner
signs verifies with any DSSE / in-toto implementation."""

import base64
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_public_key,
)
from daemon import runner_bin


def dsse_pae(payload_type: bytes, body: bytes) -> bytes:
    # DSSE v1.0: LEN is the byte length in ASCII decimal, SP one space.
    return b" ".join([b"DSSEv1", str(len(payload_type)).encode(), payload_type, str(len(body)).encode(), body])


def sr(data: Path, *args: str) -> "subprocess.CompletedProcess[bytes]":
    return subprocess.run([runner_bin(), "--data-dir", str(data), *args], capture_output=True, check=False)


def test_a_receipt_verifies_with_cryptography_and_the_dsse_spec_alone() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # A root runner's sandbox user must pass through the folders above the data dir.
        Path(tmp).chmod(0o755)
        data = Path(tmp) / "data"
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"argv": ["sh", "-c", "printf 'out\\n'; printf 'err' >&2"]}))
        ran = sr(data, "run", "--json", str(job))
        result: Dict[str, Any] = json.loads(ran.stdout)
        assert result["status"] == "exited", result
        key_doc = json.loads(sr(data, "receipt-key", "--json").stdout)

        key = load_pem_public_key(key_doc["public_key_pem"].encode())
        assert isinstance(key, Ed25519PublicKey)
        der = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        # The documented key id: SHA-256 of the 44-byte DER SPKI.
        assert len(der) == 44 and der[:12] == bytes.fromhex("302a300506032b6570032100")
        assert hashlib.sha256(der).hexdigest() == key_doc["keyid"]

        envelope = result["receipt"]
        assert envelope["payloadType"] == "application/vnd.in-toto+json"
        [signature] = envelope["signatures"]
        assert signature["keyid"] == key_doc["keyid"]
        body = base64.b64decode(envelope["payload"], validate=True)
        key.verify(base64.b64decode(signature["sig"], validate=True), dsse_pae(b"application/vnd.in-toto+json", body))

        statement = json.loads(body)
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["predicateType"] == "https://skill-runner.dev/receipt/v1"
        subjects: List[Dict[str, Any]] = statement["subject"]
        assert subjects[0] == {"name": "stdout", "digest": {"sha256": hashlib.sha256(b"out\n").hexdigest()}}
        assert subjects[1] == {"name": "stderr", "digest": {"sha256": hashlib.sha256(b"err").hexdigest()}}
        predicate = statement["predicate"]
        assert predicate["execution_id"] == result["execution_id"]
        for field in ("status", "exit_code", "signal", "started_at", "finished_at", "skills", "limits"):
            assert predicate["result"][field] == result[field], field
        # The job itself is not in the receipt, its digest is.
        assert len(predicate["job"]["sha256"]) == 64
        assert "argv" not in json.dumps(predicate["result"])

        # One changed byte of the payload: the signature no longer holds.
        changed = bytearray(body)
        changed[len(changed) // 2] ^= 1
        try:
            key.verify(base64.b64decode(signature["sig"]), dsse_pae(b"application/vnd.in-toto+json", bytes(changed)))
        except Exception:
            pass
        else:
            raise AssertionError("a changed payload verified")
