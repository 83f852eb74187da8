"""The AsyncClient against real daemons: the same answers and errors as Client,
streams, concurrent calls, a cancelled task cancelling its execution, TCP with
a token, the async retry helper. Each test drives its coroutine with
``asyncio.run`` (no test plugin)."""

import asyncio
import time
from typing import List

import pytest
from conftest import HELLO
from daemon import PATIENCE, Daemon

from skill_runner_client import (
    AsyncClient,
    BadRequest,
    Busy,
    Event,
    NotFound,
    Progress,
    Result,
    Session,
    Unauthorized,
    bindings_of,
    bundle_folder,
    retrying_async,
)

GREET = ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "async"]


def aclient(daemon: Daemon) -> AsyncClient:
    assert daemon.socket_path is not None
    return AsyncClient(socket_path=daemon.socket_path)


async def until_running(c: AsyncClient, execution_id: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            doc = await c.execution(execution_id)
            if isinstance(doc, Progress) and doc.status == "running":
                return
        except NotFound:
            pass  # not admitted yet
        await asyncio.sleep(0.05)
    raise AssertionError(f"{execution_id} never ran")


def test_run_publish_and_sessions_answer_the_same_types(daemon: Daemon) -> None:
    async def go() -> None:
        async with aclient(daemon) as c:
            bundle = bundle_folder(HELLO, "hello", 1, "1.0.0")
            assert (await c.publish(bundle)).identity
            result = await c.run({"argv": GREET, "skills": bindings_of(bundle)})
            assert isinstance(result, Result) and result.exit_code == 0
            assert result.stdout.startswith("Hello, async!")
            again = await c.execution(result.execution_id)
            assert isinstance(again, Result) and again.raw == result.raw
            s = await c.create_session(bindings_of(bundle), ["bash"])
            assert isinstance(s, Session)
            loaded = await c.call_tool(s.id, "load_skill", {"name": "hello"})
            assert loaded.is_error is False and "hello" in loaded.content
            assert (await c.delete_session(s.id))["deleted"] is True
            assert (await c.health())["status"] == "ok"
            assert "skill_runner" in await c.metrics()
        assert c.closed
        with pytest.raises(RuntimeError, match="closed"):
            await c.version()

    asyncio.run(go())


def test_errors_are_the_same_classes(daemon: Daemon) -> None:
    async def go() -> None:
        c = aclient(daemon)
        with pytest.raises(NotFound) as nf:
            await c.execution("py-async-no-such")
        assert (nf.value.status, nf.value.kind) == (404, "not_found")
        with pytest.raises(BadRequest) as bad:
            await c.run({"argv": []})
        assert bad.value.kind == "bad_job" and bad.value.message == bad.value.body["error"]["message"]
        with pytest.raises(BadRequest):
            await c.stream({"argv": ["true"], "limits": {"timeout_ms": 0}})

    asyncio.run(go())


def test_a_stream_yields_typed_events_and_large_output_whole(daemon: Daemon) -> None:
    async def go() -> None:
        c = aclient(daemon)
        events: List[Event] = []
        # Well over one read and one chunk: lines are split across blocks.
        job = {"argv": ["sh", "-c", "echo one; head -c 300000 /dev/zero | tr '\\0' x; echo; echo err >&2"]}
        async with await c.stream(job) as s:
            async for e in s:
                events.append(e)
        assert events[0].event == "started" and events[-1].event == "exit"
        result = events[-1].result
        assert isinstance(result, Result)
        out = "".join(e.data or "" for e in events if e.event == "stdout")
        assert out == result.stdout == "one\n" + "x" * 300000 + "\n"
        replay = [e async for e in await c.events(result.execution_id)]
        assert replay[-1].event == "exit" and replay[-1].result is not None
        assert replay[-1].result.raw == result.raw

    asyncio.run(go())


def test_calls_run_concurrently(daemon: Daemon) -> None:
    async def go() -> None:
        c = aclient(daemon)
        results = await asyncio.gather(*(c.run({"argv": ["echo", str(n)]}) for n in range(4)))
        assert [r.stdout for r in results] == [f"{n}\n" for n in range(4)]
        assert len({r.execution_id for r in results}) == 4

    asyncio.run(go())


def test_a_cancelled_task_cancels_its_execution(daemon: Daemon) -> None:
    async def go() -> None:
        c = aclient(daemon)
        task = asyncio.create_task(c.run({"execution_id": "py-async-sleeper", "argv": ["sleep", "300"]}))
        await until_running(c, "py-async-sleeper")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The disconnect cancelled the command: it did not sleep 300 s.
        result = await c.wait("py-async-sleeper", timeout=PATIENCE)
        assert result.status == "cancelled", result.raw

    asyncio.run(go())


def test_tcp_with_a_token() -> None:
    token = "async-test-token-0123456789"
    d = Daemon(tcp=True, token=token)
    try:
        assert d.url is not None
        url = d.url

        async def go() -> None:
            good = AsyncClient(url=url, token=token)
            assert (await good.run({"argv": ["echo", "over tcp"]})).stdout == "over tcp\n"
            with pytest.raises(Unauthorized):
                await AsyncClient(url=url, token="wrong-token-0123456789").version()

        asyncio.run(go())
    finally:
        d.stop()


def test_retrying_async_honours_retry_after() -> None:
    d = Daemon(extra=["--max-running", "1", "--max-queued", "0"])
    try:
        c = aclient(d)

        async def go() -> None:
            held = await c.run_detached({"execution_id": "py-async-holder", "argv": ["sleep", "300"]})
            assert isinstance(held, Progress)
            with pytest.raises(Busy) as e:
                await c.run({"argv": ["true"]})
            assert (e.value.status, e.value.retry_after) == (429, 1.0)
            attempts: List[int] = []

            async def attempt() -> Result:
                attempts.append(1)
                if len(attempts) == 2:
                    # Free the slot while the helper waits its Retry-After.
                    await c.cancel("py-async-holder")
                    assert (await c.wait("py-async-holder")).status == "cancelled"
                return await c.run({"argv": ["echo", "admitted"]})

            waited: List[float] = []

            async def sleep(seconds: float) -> None:
                waited.append(seconds)

            with pytest.raises(Busy):
                await retrying_async(lambda: c.run({"argv": ["true"]}), attempts=2, total=30, sleep=sleep)
            assert waited == [1.0], "one wait of the daemon's Retry-After between two attempts"
            result = await retrying_async(attempt, attempts=5, total=30)
            assert result.stdout == "admitted\n" and len(attempts) >= 2

        asyncio.run(go())
    finally:
        d.stop()
