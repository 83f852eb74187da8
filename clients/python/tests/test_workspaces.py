"""A managed session workspace through the client alone: upload a CSV, run
a skill's script on it, run a second command on its output, download the
result; refusals raise with the daemon's sentence."""

import os
import tempfile
from typing import Iterator

import pytest
from daemon import Daemon

from skill_runner_client import Client, SkillRunnerError, bindings_of, bundle_folder

REPORT = """set -e
in=$1; out=$2
mkdir -p "$(dirname "$out")"
sum=$(tail -n +2 "$in" | awk -F, '{s+=$2} END {print s}')
printf 'sum: %s\\n' "$sum" > "$out"
"""


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    d = Daemon()
    try:
        assert d.socket_path is not None
        yield Client(socket_path=d.socket_path)
    finally:
        d.stop()


def test_upload_run_twice_download(client: Client) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skill = os.path.join(tmp, "csv-sum")
        os.makedirs(os.path.join(skill, "scripts"))
        with open(os.path.join(skill, "SKILL.md"), "w") as f:
            f.write("---\nname: csv-sum\ndescription: Sum a CSV column.\n---\n# csv-sum\n")
        with open(os.path.join(skill, "scripts", "sum.sh"), "w") as f:
            f.write(REPORT)
        bundle = bundle_folder(skill, "csv-sum", 1, "1.0.0")
    client.publish(bundle)
    session = client.create_session(bindings_of(bundle), ["bash"], workspace="managed")
    assert session["workspace"] == "managed"
    sid = session["id"]

    written = client.upload_file(sid, "in/data.csv", b"name,amount\na,3\nb,4\n")
    assert (written["path"], written["size"]) == ("in/data.csv", 20)
    first = client.run({"session": sid, "argv": ["sh", "/skills/csv-sum/scripts/sum.sh", "in/data.csv", "out/sum.txt"]})
    assert first["status"] == "exited" and first["exit_code"] == 0, first
    second = client.run({"session": sid, "argv": ["sh", "-c", "tr a-z A-Z < out/sum.txt > out/SUM.txt"]})
    assert second["exit_code"] == 0, second
    assert client.download_file(sid, "out/SUM.txt") == b"SUM: 7\n"
    listed = client.list_files(sid, prefix="out/")
    assert [f["path"] for f in listed["files"]] == ["out/SUM.txt", "out/sum.txt"]
    assert listed["truncated"] is False
    assert client.delete_file(sid, "out/SUM.txt")["deleted"] is True
    with pytest.raises(SkillRunnerError) as e:
        client.download_file(sid, "out/SUM.txt")
    assert e.value.status == 404
    client.delete_session(sid)


def test_refusals_say_what_to_change(client: Client) -> None:
    sid = client.create_session([], [], workspace="managed")["id"]
    with pytest.raises(SkillRunnerError) as e:
        client.upload_file(sid, "../escape", b"x")
    assert e.value.status == 400 and "admissible" in str(e.value)
    client.run({"session": sid, "argv": ["sh", "-c", "ln -s /etc/passwd link; mkfifo pipe"]})
    for path, says in (("link", "symlink"), ("pipe", "FIFO")):
        with pytest.raises(SkillRunnerError) as e:
            client.download_file(sid, path)
        assert e.value.status == 409 and says in str(e.value)
    plain = client.create_session([], [])["id"]
    with pytest.raises(SkillRunnerError) as e:
        client.list_files(plain)
    assert e.value.status == 404
    client.delete_session(sid)
