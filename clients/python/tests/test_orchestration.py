"""Detached runs, long-polls, re-attach, retry, listings, tool calls, version."""

import json
from typing import Any, Dict, Iterator, List

import pytest
from conftest import HELLO
from daemon import Daemon

from skill_runner_client import Client, Event, NdjsonStream, SkillRunnerError, bindings_of, bundle_folder


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    # A short heartbeat, so that a quiet stream shows one soon.
    d = Daemon(extra=["--heartbeat", "100ms"])
    try:
        assert d.socket_path is not None
        yield Client(socket_path=d.socket_path)
    finally:
        d.stop()


def take_until(stream: NdjsonStream, kind: str) -> List[Event]:
    """Events up to and including the first of ``kind``."""
    taken: List[Event] = []
    for event in stream:
        taken.append(event)
        if event["event"] == kind:
            return taken
    raise AssertionError(f"the stream ended without a {kind} event: {taken}")


def test_detached_run_then_wait_gives_the_result(client: Client) -> None:
    started = client.run_detached({"execution_id": "py-detached", "argv": ["sh", "-c", "echo a; sleep 1; echo b"]})
    assert started["execution_id"] == "py-detached"
    assert started["status"] in ("queued", "running")
    result = client.wait("py-detached")
    assert (result["status"], result["stdout"]) == ("exited", "a\nb\n")
    # A long-poll of a finished execution answers at once with the result.
    assert client.execution("py-detached", wait=30) == result


def test_a_long_poll_that_times_out_answers_the_status(client: Client) -> None:
    client.run_detached({"execution_id": "py-poll", "argv": ["sleep", "300"]})
    assert client.execution("py-poll", wait=0.2)["status"] in ("queued", "running")
    with pytest.raises(TimeoutError):
        client.wait("py-poll", timeout=0.3)
    client.cancel("py-poll")
    assert client.wait("py-poll")["status"] == "cancelled"


def test_events_replay_in_seq_order_and_resume_after(client: Client) -> None:
    result = client.run({"execution_id": "py-replay", "argv": ["sh", "-c", "echo one; echo two >&2"]})
    events = list(client.events("py-replay"))
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert events[0]["event"] == "started" and events[-1]["event"] == "exit"
    assert events[-1]["result"] == result
    resumed = list(client.events("py-replay", after=events[0]["seq"]))
    assert resumed == events[1:]


def test_a_reattached_reader_sees_heartbeats_and_never_cancels(client: Client) -> None:
    client.run_detached({"execution_id": "py-quiet", "argv": ["sh", "-c", "echo hi; sleep 300"]})
    with client.events("py-quiet") as stream:
        seen = take_until(stream, "heartbeat")
    kinds = [e["event"] for e in seen]
    assert "started" in kinds
    # The heartbeat repeats the last event's seq, so resuming after it loses nothing.
    assert seen[-1]["seq"] == max(e["seq"] for e in seen[:-1])
    assert client.execution("py-quiet")["status"] == "running"
    client.cancel("py-quiet")
    with client.events("py-quiet", after=seen[-1]["seq"]) as stream:
        tail = [e for e in stream if e["event"] != "heartbeat"]
    assert tail[-1]["event"] == "exit" and tail[-1]["result"]["status"] == "cancelled"


def test_a_retry_with_the_same_job_gets_the_same_execution(client: Client) -> None:
    job = {"execution_id": "py-retry", "argv": ["sh", "-c", "echo once"]}
    first = client.run(job)
    assert client.run(json.loads(json.dumps(job))) == first
    assert client.run_detached(job) == first
    replayed = list(client.stream(job))
    assert replayed[0]["event"] == "started" and replayed[-1]["result"] == first
    with pytest.raises(SkillRunnerError) as e:
        client.run({"execution_id": "py-retry", "argv": ["sh", "-c", "echo other"]})
    assert (e.value.status, e.value.kind) == (409, "execution_id_in_use")


def test_executions_are_listed_newest_first_and_paged(client: Client) -> None:
    for n in range(3):
        client.run({"execution_id": f"py-list-{n}", "argv": ["true"]})
    page = client.executions(status="exited", limit=2)
    ids = [e["execution_id"] for e in page["executions"]]
    assert ids == ["py-list-2", "py-list-1"]
    assert page["next_cursor"] is not None
    rest = client.executions(status="exited", limit=1000, cursor=page["next_cursor"])
    assert rest["executions"][0]["execution_id"] == "py-list-0"
    with pytest.raises(SkillRunnerError) as e:
        client.executions(status="no-such-status")
    assert (e.value.status, e.value.kind) == (400, "bad_request")


def test_published_bindings_are_listed(client: Client) -> None:
    bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
    client.publish(bundle)
    assert bindings_of(bundle)[0] in client.skill_packages()["skills"]


def test_sessions_list_delete_and_tool_calls(client: Client) -> None:
    bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
    client.publish(bundle)
    sid = client.create_session(bindings_of(bundle), ["bash"])["id"]
    assert sid in [s["id"] for s in client.sessions()["sessions"]]

    loaded = client.call_tool(sid, "load_skill", {"name": "hello"})
    assert loaded["is_error"] is False and "# Hello" in loaded["content"]
    wrong = client.call_tool(sid, "load_skill", {"name": "no-such-skill"})
    assert wrong["is_error"] is True and wrong["content"]
    with pytest.raises(SkillRunnerError) as e:
        client.call_tool(sid, "Skill", {"skill": "hello"})  # a managed_filesystem session has no Skill tool
    assert (e.value.status, e.value.kind) == (404, "not_found")

    assert client.delete_session(sid) == {"id": sid, "deleted": True}
    with pytest.raises(SkillRunnerError) as e:
        client.session(sid)
    assert e.value.status == 404


def test_version_and_openapi(client: Client) -> None:
    v = client.version()
    assert (v["name"], v["api_version"]) == ("skill-runner", "1")
    assert "bubblewrap" in v["capabilities"]["sandbox_kinds"]
    doc = client.openapi()
    assert doc["openapi"].startswith("3.1")
    assert "/v1/executions/{id}/events" in doc["paths"]
