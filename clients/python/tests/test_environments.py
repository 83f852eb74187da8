"""Environment uploads and records against a real daemon, and the client's
environment hash against the vectors of docs/formats.md."""

import json
import os
from pathlib import Path

import pytest

from skill_runner_client import Client, SkillRunnerError, environment_hash, environment_upload

VECTORS = Path(__file__).resolve().parents[3] / "runner/tests/vectors/environment-hash.json"
SIX = (
    "six==1.17.0 \\\n"
    "    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n"
)


def test_the_environment_hash_matches_the_published_vectors() -> None:
    import base64

    cases = json.loads(VECTORS.read_text())["cases"]
    assert cases
    for case in cases:
        entries = [
            (
                e["path"],
                base64.b64decode(e["content_base64"]) if e["kind"] == "file" else None,
                bool(e.get("exec", False)),
                e.get("target"),
            )
            for e in case["entries"]
        ]
        assert environment_hash(entries) == case["hash"], case.get("name")


def test_an_uploaded_folder_is_published_listed_and_imported(client: Client, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "python").mkdir(parents=True)
    (tree / "python" / "client_env.py").write_text("NAME = 'from the client'\n")
    (tree / "bin").mkdir()
    os.symlink("../python/client_env.py", tree / "bin" / "client-env")
    record = client.publish_environment_folder(str(tree), "client-env", python=SIX)
    assert record["id"] == "client-env"
    assert record["hash"] == environment_upload(str(tree), "client-env")["hash"]
    assert client.environment("client-env", record["hash"]) == record
    assert record in client.environments()["environments"]
    result = client.run(
        {
            "argv": ["python3", "-c", "import client_env; print(client_env.NAME)"],
            "environment": {"id": "client-env", "hash": record["hash"]},
        }
    )
    assert result["stdout"] == "from the client\n", result
    # A claim the tree does not hash to is refused, naming the real hash.
    lying = environment_upload(str(tree), "client-env")
    lying["hash"] = "0" * 64
    with pytest.raises(SkillRunnerError) as e:
        client.publish_environment(lying)
    assert e.value.status == 422 and e.value.kind == "hash_mismatch"
    with pytest.raises(SkillRunnerError) as e:
        client.environment("client-env", "1" * 64)
    assert e.value.status == 404


def test_a_build_is_refused_where_builds_are_off(client: Client) -> None:
    with pytest.raises(SkillRunnerError) as e:
        client.build_environment("six-env", SIX)
    assert e.value.status == 400 and "--env-builds true" in str(e.value)


def test_a_session_named_with_an_environment_gives_it_to_its_jobs(client: Client, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "python").mkdir(parents=True)
    (tree / "python" / "session_env.py").write_text("NAME = 'from the session'\n")
    record = client.publish_environment_folder(str(tree), "session-env", python=SIX)
    env = {"id": "session-env", "hash": record["hash"]}
    session = client.create_session([], ["bash"], environment=env)
    assert session["environment"] == env
    result = client.run({"argv": ["python3", "-c", "import session_env; print(session_env.NAME)"], "session": session["id"]})
    assert result["stdout"] == "from the session\n", result
