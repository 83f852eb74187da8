"""Every client method against a real daemon running real sandboxes."""

import threading
import time
from typing import Any, Dict, List

import pytest
from conftest import HELLO
from daemon import PATIENCE, Daemon

from skill_runner_client import (
    Binding,
    Client,
    Event,
    Result,
    SkillRunnerError,
    bindings_of,
    bundle_bytes,
    bundle_folder,
    set_identity,
)

GREET = ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "client"]


def publish_hello(client: Client) -> List[Binding]:
    bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
    answer = client.publish(bundle)
    assert answer["identity"] == set_identity(bindings_of(bundle))
    assert answer["skills"] == [dict(sorted(b.items())) for b in bindings_of(bundle)]
    return bindings_of(bundle)


def wait_until_running(client: Client, execution_id: str) -> None:
    """Polls until the daemon reports the execution running (hang protection only)."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            if client.execution(execution_id)["status"] == "running":
                return
        except SkillRunnerError as e:
            if e.status != 404:  # not admitted yet
                raise
        time.sleep(0.05)
    raise AssertionError(f"{execution_id} never ran")


def test_health_says_ok(client: Client) -> None:
    h = client.health()
    assert h["status"] == "ok"
    assert h["sandbox"]["available"] is True


def test_publish_then_the_selection_is_held(client: Client) -> None:
    bindings = publish_hello(client)
    held = client.skill_package(set_identity(bindings))
    assert held["identity"] == set_identity(bindings)
    # Publishing the same bytes again is idempotent: nothing new.
    assert client.publish(bundle_folder(HELLO, "hello", 1, "1.0.0"))["new_packages"] == 0


def test_an_unknown_selection_is_not_found(client: Client) -> None:
    with pytest.raises(SkillRunnerError) as e:
        client.skill_package("0" * 64)
    assert (e.value.status, e.value.kind) == (404, "not_found")


def test_tampered_bytes_are_a_hash_mismatch(client: Client) -> None:
    bundle = bundle_folder(HELLO, "hello-tampered", 1, "1.0.0")
    bundle["skills"][0]["hash"] = "0" * 64
    with pytest.raises(SkillRunnerError) as e:
        client.publish(bundle_bytes(bundle))
    assert (e.value.status, e.value.kind) == (422, "hash_mismatch")


def test_run_returns_the_result_with_the_pinned_identity(client: Client) -> None:
    bindings = publish_hello(client)
    result = client.run({"argv": GREET, "skills": bindings})
    assert result["status"] == "exited" and result["exit_code"] == 0, result
    assert result["stdout"].startswith("Hello, client! (from the hello skill")
    assert result["skills"]["identity"] == set_identity(bindings)
    # The retained result is the same document.
    assert client.execution(result["execution_id"]) == result


def test_a_failing_command_is_a_result_not_an_error(client: Client) -> None:
    result = client.run({"argv": ["sh", "-c", "echo oops >&2; exit 3"]})
    assert (result["status"], result["exit_code"], result["stderr"]) == ("exited", 3, "oops\n")


def test_a_bad_job_raises_bad_job(client: Client) -> None:
    with pytest.raises(SkillRunnerError) as e:
        client.run({"argv": []})
    assert (e.value.status, e.value.kind) == (400, "bad_job")
    assert "argv" in e.value.message


def test_a_refused_job_keeps_its_result_document(client: Client) -> None:
    missing = {"id": "never-published", "revision": 1, "version": "1", "hash": "a" * 64}
    with pytest.raises(SkillRunnerError) as e:
        client.run({"argv": ["true"], "skills": [missing]})
    assert (e.value.status, e.value.kind) == (404, "not_in_store")
    assert e.value.body["status"] == "rejected"


def test_stream_yields_started_output_then_exit(client: Client) -> None:
    events: List[Event] = list(
        client.stream({"argv": ["sh", "-c", "echo one; echo err >&2; echo two"]})
    )
    assert events[0]["event"] == "started"
    assert events[-1]["event"] == "exit"
    result = events[-1]["result"]
    assert result["execution_id"] == events[0]["execution_id"]
    out = "".join(e["data"] for e in events if e["event"] == "stdout")
    err = "".join(e["data"] for e in events if e["event"] == "stderr")
    assert (out, err) == (result["stdout"], result["stderr"]) == ("one\ntwo\n", "err\n")


def test_a_refused_stream_raises_before_any_event(client: Client) -> None:
    with pytest.raises(SkillRunnerError) as e:
        client.stream({"argv": ["true"], "limits": {"timeout_ms": 0}})
    assert (e.value.status, e.value.kind) == (400, "bad_job")


def test_cancel_ends_a_sleeping_command(client: Client) -> None:
    results: List[Result] = []
    runner = threading.Thread(
        target=lambda: results.append(client.run({"execution_id": "py-sleeper", "argv": ["sleep", "300"]}))
    )
    runner.start()
    wait_until_running(client, "py-sleeper")
    assert client.cancel("py-sleeper")["status"] == "cancelling"
    runner.join(PATIENCE)
    assert not runner.is_alive()
    assert results[0]["status"] == "cancelled"
    assert results[0]["error"]["kind"] == "cancelled"
    with pytest.raises(SkillRunnerError) as e:
        client.cancel("py-sleeper")
    assert (e.value.status, e.value.kind) == (409, "not_running")


def test_closing_a_stream_cancels_its_execution(client: Client) -> None:
    with client.stream({"execution_id": "py-left", "argv": ["sleep", "300"]}) as events:
        assert next(iter(events))["event"] == "started"
    deadline = time.monotonic() + PATIENCE
    while client.execution("py-left")["status"] != "cancelled":
        assert time.monotonic() < deadline, "the stream's execution was not cancelled"
        time.sleep(0.05)


def test_unknown_execution_is_not_found(client: Client) -> None:
    with pytest.raises(SkillRunnerError) as e:
        client.execution("no-such-execution")
    assert (e.value.status, e.value.kind) == (404, "not_found")


def test_session_routes_serve_the_frozen_skill(client: Client) -> None:
    bindings = publish_hello(client)
    s = client.create_session(bindings, ["bash", "read"])
    sid = s["id"]
    assert sid.startswith("ses-") and s["delivery"] == "managed_filesystem"
    assert s["identity"] == set_identity(bindings)
    assert client.session(sid)["id"] == sid
    assert [h["name"] for h in client.session_skills(sid)["hits"]] == ["hello"]
    assert client.session_skills(sid, query="greet", limit=1)["total"] == 1
    loaded = client.load_skill(sid, "hello")
    assert loaded["body"].startswith("# Hello")
    section = client.skill_section(sid, "hello", "references/template.txt")
    assert section["content"].startswith("Hello, %s!")
    part = client.session_resource(sid, "/skills/hello/references/template.txt", offset=0, limit=5)
    assert (part["content"], part["truncated"], part["next_offset"]) == ("Hello", True, 5)
    kinds = [e["kind"] for e in client.session_events(sid)["events"]]
    assert kinds[0] == "load_skill" and len(kinds) == 3
    # A job naming the session runs with its frozen skills.
    result = client.run({"argv": GREET, "session": sid})
    assert result["skills"]["identity"] == s["identity"]
    assert result["stdout"].startswith("Hello, client!")


def test_a_skill_with_files_needs_a_file_tool(client: Client) -> None:
    bindings = publish_hello(client)
    with pytest.raises(SkillRunnerError) as e:
        client.create_session(bindings, ["web_search"])
    assert (e.value.status, e.value.kind) == (422, "composition_rejected")


def test_metrics_count_executions(client: Client) -> None:
    assert "skill_runner_executions_total" in client.metrics()


def test_tcp_needs_the_bearer_token() -> None:
    token = "client-test-token-0123456789"
    d = Daemon(tcp=True, token=token)
    try:
        assert d.url is not None
        good = Client(url=d.url, token=token)
        assert good.run({"argv": ["echo", "over tcp"]})["stdout"] == "over tcp\n"
        bad = Client(url=d.url, token="wrong-token-0123456789")
        assert bad.health()["status"] == "ok"  # health never needs the token
        with pytest.raises(SkillRunnerError) as e:
            bad.run({"argv": ["true"]})
        assert (e.value.status, e.value.kind) == (401, "unauthorized")
    finally:
        d.stop()


def test_a_tcp_client_without_a_token_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="bearer token"):
        Client(url="http://127.0.0.1:1")
