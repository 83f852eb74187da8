"""The official MCP Python SDK (PyPI `mcp`) as a client of skill-runner's
MCP server, over stdio (it spawns `skill-runner mcp --session ID`) or
Streamable HTTP (a running daemon's /v1/sessions/{id}/mcp).

It initialises, lists the tools, calls find_skills and run (the skill's
script runs in the sandbox), reads skill://<skill>/SKILL.md, calls
skills/list and checks every digest against the bytes of the skill's
folder, and cancels a run and checks that its process tree is gone.
Exits non-zero with a sentence on the first broken promise.

    python interop.py stdio BINARY SESSION SKILL_DIR [ENV=VALUE...]
    python interop.py http URL TOKEN SKILL_DIR
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

SKILL = "tooly"


def fail(message: str) -> None:
    print(f"interop (python): {message}", file=sys.stderr)
    sys.exit(1)


def check(ok: bool, message: str) -> None:
    if not ok:
        fail(message)


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def tree(root: int) -> list[int]:
    """The pids of `root` and of every process below it."""
    found = [root]
    i = 0
    while i < len(found):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in found:
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split(" ")[1]) == found[i]:
                found.append(int(entry))
        i += 1
    return found


def find(marker: str) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"interop" not in cmdline:
            return int(entry)
    return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat.rsplit(") ", 1)[1].startswith("Z")


async def exercise(session: ClientSession, skill_dir: Path, transport: str) -> None:
    init = await session.initialize()
    extensions = init.capabilities.model_dump(by_alias=True).get("extensions") or {}
    check("io.modelcontextprotocol/skills" in extensions, f"no Skills extension declared: {extensions}")

    tools = await session.list_tools()
    names = [t.name for t in tools.tools]
    check("find_skills" in names and "run" in names, f"tools are {names}")

    found = await session.call_tool("find_skills", {"query": "greeting"})
    check(not found.is_error and f"- {SKILL}:" in text_of(found), f"find_skills answered {text_of(found)!r}")

    ran = await session.call_tool("run", {"argv": ["sh", f"/skills/{SKILL}/scripts/run.sh", transport]})
    result: dict[str, Any] = ran.structured_content or {}
    check(not ran.is_error, f"run failed: {text_of(ran)}")
    check(result.get("stdout") == f"from-tooly {transport}\n", f"run printed {result.get('stdout')!r}")

    read = await session.read_resource(f"skill://{SKILL}/SKILL.md")
    content = read.contents[0]
    check(
        isinstance(content, types.TextResourceContents)
        and content.text.encode() == (skill_dir / "SKILL.md").read_bytes(),
        "SKILL.md as read is not the file's bytes",
    )

    listed = await session.send_request(
        types.Request(method="skills/list", params={}), TypeAdapter(dict[str, Any])
    )
    skills = listed["skills"]
    check(len(skills) == 1 and skills[0]["uri"] == f"skill://{SKILL}/SKILL.md", f"skills/list: {listed}")
    for f in skills[0]["resources"]:
        path = skill_dir / f["uri"].removeprefix(f"skill://{SKILL}/")
        digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        check(f["digest"] == digest, f"{f['uri']}: digest {f['digest']}, the bytes hash to {digest}")

    await cancelled_run(session)
    print(f"interop (python, {transport}): ok")


async def cancelled_run(session: ClientSession) -> None:
    marker = f"py-cancel-{os.getpid()}-{time.monotonic_ns()}"
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async def call() -> None:
        await session.call_tool(
            "run",
            {"argv": ["sh", "-c", f"echo started; sleep 1000; echo {marker}"]},
            progress_callback=on_progress,
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(60):
            await started.wait()
        shell = find(marker)
        check(shell is not None, "the run's shell is not running after its output arrived")
        assert shell is not None
        pids = tree(shell)
        tg.cancel_scope.cancel()
    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids):
        check(time.monotonic() < deadline, f"processes {pids} outlived the cancelled run")
        await anyio.sleep(0.05)
    check(find(marker) is None, "a process of the cancelled run is left")


async def main() -> None:
    mode = sys.argv[1]
    async with AsyncExitStack() as stack:
        if mode == "stdio":
            binary, session_id, skill_dir = sys.argv[2:5]
            env = dict(os.environ)
            env.update(dict(a.split("=", 1) for a in sys.argv[5:]))
            params = StdioServerParameters(command=binary, args=["mcp", "--session", session_id], env=env)
            read, write = await stack.enter_async_context(stdio_client(params))
        else:
            url, token, skill_dir = sys.argv[2:5]
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
            )
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        session = await stack.enter_async_context(ClientSession(read, write))
        await exercise(session, Path(skill_dir), mode)


if __name__ == "__main__":
    anyio.run(main)
