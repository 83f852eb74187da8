"""Files in and out of an execution through the daemon alone (docs/files.md)."""

import base64
import hashlib
import os

import pytest

from skill_runner_client import Client, SkillRunnerError, input_file


def test_files_go_in_and_kept_outputs_come_back(client: Client, tmp_path: "os.PathLike[str]") -> None:
    big = bytes(range(256)) * 1024  # over the inline bound: kept, not in the result
    result = client.run(
        {
            "argv": ["sh", "-c", "mkdir out && sort in.csv > out/sorted.csv && cat big.bin > out/big.bin"],
            "files": [input_file("in.csv", b"b\na\n"), input_file("big.bin", big, mode=0o600)],
            "outputs": ["out/*"],
        }
    )
    assert result["exit_code"] == 0, result
    by_path = {o["path"]: o for o in result["outputs"]}
    assert base64.b64decode(by_path["out/sorted.csv"]["content"]) == b"a\nb\n"
    assert by_path["out/big.bin"]["truncated"] is True
    assert by_path["out/big.bin"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert client.output(result["execution_id"], "out/big.bin") == big
    saved = client.save_outputs(result, os.path.join(str(tmp_path), "got"))
    assert sorted(s["path"] for s in saved) == ["out/big.bin", "out/sorted.csv"]
    with open(os.path.join(str(tmp_path), "got", "out", "big.bin"), "rb") as f:
        assert f.read() == big
    with pytest.raises(SkillRunnerError) as e:
        client.output(result["execution_id"], "in.csv")
    assert e.value.status == 404


def test_a_client_refuses_an_output_path_that_would_leave_its_folder(client: Client, tmp_path: "os.PathLike[str]") -> None:
    forged = {"execution_id": "x", "outputs": [{"path": "../escape", "size": 1, "sha256": "0" * 64}]}
    with pytest.raises(ValueError):
        client.save_outputs(forged, str(tmp_path))
