"""Typed answers, the error classes and the Retry-After helper, against real daemons."""

import dataclasses
from typing import Iterator, List, Optional

import pytest
from conftest import HELLO
from daemon import Daemon

from skill_runner_client import (
    BadRequest,
    Busy,
    Client,
    Conflict,
    Event,
    Gone,
    NotFound,
    Output,
    Progress,
    Publication,
    Result,
    ResultError,
    Session,
    SkillRunnerError,
    StoredFile,
    ToolAnswer,
    Unauthorized,
    Version,
    bindings_of,
    bundle_folder,
    retrying,
)

GREET = ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "typed"]


def fields_of(answer: object) -> List[str]:
    return [f.name for f in dataclasses.fields(answer)]  # type: ignore[arg-type]


def test_a_result_is_typed_and_keeps_every_key_the_daemon_sent(client: Client) -> None:
    bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
    published = client.publish(bundle)
    assert isinstance(published, Publication)
    assert published.skills == published["skills"] and published.new_packages in (0, 1)
    result = client.run(
        {"argv": GREET + [], "skills": bindings_of(bundle), "outputs": ["out.txt"],
         "files": [{"path": "out.txt", "content": "aGk=", "mode": "0644"}]}
    )
    assert isinstance(result, Result)
    assert (result.status, result.exit_code, result.signal) == ("exited", 0, None)
    assert result.stdout.startswith("Hello, typed!") and result.stdout == result["stdout"]
    assert result.error is None and result.sandbox in ("bubblewrap", "seatbelt")
    assert result.outputs is not None and isinstance(result.outputs[0], Output)
    assert (result.outputs[0].path, result.outputs[0].size) == ("out.txt", 2)
    assert result.outputs[0].sha256 == result.raw["outputs"][0]["sha256"]
    # Nothing is lost: every key is an attribute or in extra, and the keys
    # this client has no attribute for (identity, ...) are there as sent.
    known = set(fields_of(result))
    assert set(result.raw) == (known & set(result.raw)) | set(result.extra)
    assert "identity" in result.extra and result.extra["identity"] == result.raw["identity"]
    # Still the document: equal to it, indexable, and sendable back as JSON.
    assert result == result.raw and dict(result) == result.raw
    assert client.execution(result.execution_id).raw == result.raw


def test_a_newer_daemons_keys_are_kept_in_extra() -> None:
    doc = {"execution_id": "x", "status": "timed_out", "error": {"kind": "timeout", "message": "m", "hint": 1},
           "from_a_newer_daemon": {"a": [1]}}
    r = Result.from_json(doc)
    assert r.extra == {"from_a_newer_daemon": {"a": [1]}}
    assert isinstance(r.error, ResultError) and r.error.kind == "timeout" and r.error.extra == {"hint": 1}
    assert r.raw is doc and r.stdout == "" and r.outputs is None


def test_a_failed_result_has_its_typed_error(client: Client) -> None:
    result = client.run({"argv": ["sleep", "30"], "limits": {"timeout_ms": 300}})
    assert result.status == "timed_out"
    assert isinstance(result.error, ResultError) and result.error.kind == "timed_out", result.raw
    assert result.error.message == result.raw["error"]["message"]


def test_events_sessions_tools_files_and_version_are_typed(client: Client) -> None:
    events = list(client.stream({"argv": ["sh", "-c", "echo one"]}))
    assert all(isinstance(e, Event) for e in events)
    assert events[0].event == "started" and events[0].execution_id
    assert events[-1].event == "exit" and isinstance(events[-1].result, Result)
    assert events[-1].result.stdout == "one\n"
    assert "".join(e.data or "" for e in events if e.event == "stdout") == "one\n"

    v = client.version()
    assert isinstance(v, Version) and v.name == "skill-runner" and v.api_version and v.capabilities

    bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
    client.publish(bundle)
    s = client.create_session(bindings_of(bundle), ["bash"], workspace="managed")
    assert isinstance(s, Session) and s.id.startswith("ses-") and s.delivery == "managed_filesystem"
    assert "load_skill" in [t["name"] for t in s.tools] and s.prompt is not None
    assert isinstance(client.session(s.id), Session)
    answer = client.call_tool(s.id, "load_skill", {"name": "hello"})
    assert isinstance(answer, ToolAnswer) and "hello" in answer.content and answer.is_error is False
    wrong = client.call_tool(s.id, "load_skill", {"name": "no-such-skill"})
    assert wrong.is_error is True
    stored = client.upload_file(s.id, "in/data.txt", b"abc")
    assert isinstance(stored, StoredFile) and (stored.path, stored.size) == ("in/data.txt", 3)
    assert len(stored.sha256) == 64
    client.delete_session(s.id)


def test_each_refusal_is_its_family_and_keeps_kind_status_and_message(client: Client) -> None:
    with pytest.raises(NotFound) as nf:
        client.execution("py-no-such-execution")
    assert (nf.value.status, nf.value.kind) == (404, "not_found") and nf.value.message
    assert str(nf.value) == f"404 not_found: {nf.value.message}"
    with pytest.raises(BadRequest) as bad:
        client.run({"argv": []})
    assert (bad.value.status, bad.value.kind) == (400, "bad_job")
    assert bad.value.message == bad.value.body["error"]["message"]
    done = client.run({"execution_id": "py-typed-done", "argv": ["true"]})
    with pytest.raises(Conflict) as c:
        client.cancel(done.execution_id)
    assert c.value.status == 409
    # Every family is a SkillRunnerError: old handlers still catch them.
    assert all(issubclass(k, SkillRunnerError) for k in (NotFound, BadRequest, Conflict, Busy, Gone, Unauthorized))


def test_a_wrong_token_is_unauthorized() -> None:
    d = Daemon(tcp=True, token="the-right-token-0123456789")
    try:
        assert d.url is not None
        with pytest.raises(Unauthorized) as e:
            Client(url=d.url, token="a-wrong-token-0123456789").version()
        assert (e.value.status, e.value.kind) == (401, "unauthorized")
        assert Client(url=d.url, token="the-right-token-0123456789").version().name == "skill-runner"
    finally:
        d.stop()


def test_a_dropped_result_is_gone() -> None:
    d = Daemon(extra=["--retain-bytes", "2MiB", "--max-output-bytes", "1MiB"])
    try:
        assert d.socket_path is not None
        c = Client(socket_path=d.socket_path)
        big = ["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a"]
        for n in range(3):
            c.run({"execution_id": f"py-big-{n}", "argv": big, "limits": {"output_bytes": 1 << 20}})
        with pytest.raises(Gone) as e:
            c.execution("py-big-0")
        assert (e.value.status, e.value.kind) == (410, "result_dropped")
    finally:
        d.stop()


@pytest.fixture(scope="module")
def busy() -> Iterator[Client]:
    """A daemon with one slot and no queue, its slot held by a sleeping execution."""
    d = Daemon(extra=["--max-running", "1", "--max-queued", "0"])
    try:
        assert d.socket_path is not None
        yield Client(socket_path=d.socket_path)
    finally:
        d.stop()


def hold_the_slot(c: Client, execution_id: str) -> None:
    held = c.run_detached({"execution_id": execution_id, "argv": ["sleep", "300"]})
    assert isinstance(held, Progress), held


def free_the_slot(c: Client, execution_id: str) -> None:
    try:
        c.cancel(execution_id)
    except Conflict:
        pass  # already finished
    assert c.wait(execution_id).status == "cancelled"


def test_busy_carries_retry_after_and_retrying_honours_it(busy: Client) -> None:
    hold_the_slot(busy, "py-holder-1")
    with pytest.raises(Busy) as e:
        busy.run({"argv": ["true"]})
    assert (e.value.status, e.value.kind, e.value.retry_after) == (429, "busy", 1.0)

    # The helper waits the daemon's Retry-After, then sends the same request
    # again; the "sleep" here frees the slot instead of sleeping, so the
    # second attempt is admitted.
    slept: List[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        free_the_slot(busy, "py-holder-1")

    result = retrying(lambda: busy.run({"argv": ["echo", "admitted"]}), attempts=5, total=30, sleep=sleep)
    assert result.stdout == "admitted\n" and slept[0] == 1.0


def test_retrying_stops_at_its_attempts_and_its_total(busy: Client) -> None:
    hold_the_slot(busy, "py-holder-2")
    try:
        slept: List[float] = []
        with pytest.raises(Busy):
            retrying(lambda: busy.run({"argv": ["true"]}), attempts=3, total=60, sleep=slept.append)
        assert slept == [1.0, 1.0], "three attempts, two waits of Retry-After"
        slept.clear()
        with pytest.raises(Busy):
            retrying(lambda: busy.run({"argv": ["true"]}), attempts=10, total=0.5, sleep=slept.append)
        assert slept == [], "a Retry-After past the total is not waited for"
        calls: List[int] = []

        def unknown() -> Result:
            calls.append(1)
            r = busy.execution("py-never-was")
            assert isinstance(r, Result)
            return r

        with pytest.raises(NotFound):
            retrying(unknown, attempts=5, sleep=slept.append)
        assert calls == [1], "only Busy is retried"
        with pytest.raises(ValueError, match="attempts is 0"):
            retrying(lambda: busy.version(), attempts=0)
    finally:
        free_the_slot(busy, "py-holder-2")


def test_a_client_is_a_context_manager(daemon: Daemon) -> None:
    assert daemon.socket_path is not None
    with Client(socket_path=daemon.socket_path) as c:
        assert c.version().name == "skill-runner"
    assert c.closed
    with pytest.raises(RuntimeError, match="closed"):
        c.version()


def test_the_family_follows_the_status_and_retry_after() -> None:
    from skill_runner_client.errors import ServerError, error_from_answer

    def family(status: int, retry_after: Optional[str] = None) -> type:
        return type(error_from_answer(status, {"error": {"kind": "k", "message": "m"}}, b"", retry_after))

    assert [family(s) for s in (400, 413, 422, 401, 403, 404, 409, 410, 429)] == [
        BadRequest, BadRequest, BadRequest, Unauthorized, Unauthorized, NotFound, Conflict, Gone, Busy]
    # A 5xx the daemon says to retry is Busy; one it does not is a ServerError.
    assert family(503, "5") is Busy and family(500, "30") is Busy
    assert family(503) is ServerError and family(500) is ServerError
    e = error_from_answer(429, None, b"too many", None)
    assert isinstance(e, Busy) and e.retry_after == 1.0 and (e.kind, e.message) == ("http_error", "too many")


def test_a_typed_answer_inside_a_job_is_sent_as_its_document(client: Client) -> None:
    env = Result.from_json({"GREETING": "typed-inside"})
    result = client.run({"argv": ["sh", "-c", "echo $GREETING"], "env": env})
    assert result.stdout == "typed-inside\n"
