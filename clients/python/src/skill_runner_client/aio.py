"""The asynchronous client: :class:`AsyncClient`, the surface of :class:`Client` on ``asyncio``.

Standard library only: HTTP/1.1 over ``asyncio.open_unix_connection`` or
``asyncio.open_connection``, one connection per request, as the
synchronous client does, so one client may serve many tasks at once. Every
route is the same :class:`Request` the synchronous client sends
(``client.py``); answers and errors are the same types. Cancelling the
task awaiting a call closes its connection: for ``run`` and ``stream``
that disconnect cancels the execution (docs/daemon.md, Cancellation).
"""

import asyncio
import hashlib
import http.client
import json
import os
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

from .bundle import bundle_folder
from .client import (
    LONG_POLL_MAX,
    JsonBody,
    Request,
    Routes,
    _body,
    _output_path,
    checked_output,
    output_destinations,
    timed_out,
)
from .environment import environment_upload
from .errors import SkillRunnerError
from .transport import Answer, Transport, error_of
from .types import (
    Bundle,
    Document,
    Event,
    Output,
    Progress,
    Publication,
    Result,
    Session,
    StoredFile,
    ToolAnswer,
    Version,
)

T = TypeVar("T")

_READ = 1 << 16
_LINE_LIMIT = 1 << 16
"""The longest status or header line accepted (the daemon's are short)."""


class _Response:
    """An answer whose head is read and whose body is read on demand."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        headers: http.client.HTTPMessage,
        timeout: Optional[float],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.status = status
        self.headers = headers
        self.timeout = timeout

    async def _within(self, step: Awaitable[T]) -> T:
        if self.timeout is None:
            return await step
        return await asyncio.wait_for(step, self.timeout)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive: chunked, by ``Content-Length``, or to the end."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            while True:
                line = await self._within(self.reader.readline())
                if not line:
                    raise ConnectionError("the daemon closed the connection inside a chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (await self._within(self.reader.readline())) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield await self._within(self.reader.readexactly(size))
                await self._within(self.reader.readexactly(2))
        length = self.headers.get("Content-Length")
        if length is not None:
            left = int(length)
            while left > 0:
                block = await self._within(self.reader.read(min(left, _READ)))
                if not block:
                    raise ConnectionError(f"the daemon closed the connection {left} bytes before the body's end")
                left -= len(block)
                yield block
            return
        while True:
            block = await self._within(self.reader.read(_READ))
            if not block:
                return
            yield block

    async def read(self) -> bytes:
        parts = [b async for b in self.chunks()]
        return b"".join(parts)

    def close(self) -> None:
        self.writer.close()


class AsyncTransport:
    """Where the daemon listens and how to authenticate, as :class:`Transport` (the same arguments)."""

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.config = Transport(socket_path=socket_path, url=url, token=token, timeout=timeout)
        self.timeout = timeout

    async def _connect(self, timeout: Optional[float]) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        c = self.config
        opening = (
            asyncio.open_unix_connection(c.socket_path, limit=_LINE_LIMIT)
            if c.socket_path is not None
            else asyncio.open_connection(c._host, c._port, limit=_LINE_LIMIT)
        )
        return await (opening if timeout is None else asyncio.wait_for(opening, timeout))

    async def send(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> _Response:
        """Sends one request and reads the answer's head; the body is left to read."""
        t = self.timeout if timeout is None else timeout
        reader, writer = await self._connect(t)
        try:
            all_headers = {"Host": "localhost", "Connection": "close", "Accept": "application/json"}
            if body is not None:
                all_headers["Content-Type"] = "application/json"
            if self.config.token is not None:
                all_headers["Authorization"] = f"Bearer {self.config.token}"
            all_headers.update(headers or {})
            payload = body or b""
            if body is not None or method in ("POST", "PUT"):
                all_headers["Content-Length"] = str(len(payload))
            head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()) + "\r\n"
            writer.write(head.encode("latin-1") + payload)
            response = _Response(reader, writer, 0, http.client.HTTPMessage(), t)
            await response._within(writer.drain())
            status_line = await response._within(reader.readline())
            parts = status_line.decode("latin-1").split(None, 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise ConnectionError(f"the daemon's answer does not start with an HTTP status line: {status_line[:100]!r}")
            response.status = int(parts[1])
            while True:
                line = await response._within(reader.readline())
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                response.headers[name.strip()] = value.strip()
            return response
        except BaseException:
            writer.close()
            raise

    async def request(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Answer:
        """Sends one request and reads the whole answer; any status returns."""
        response = await self.send(method, path, body, headers, timeout)
        try:
            return Answer(response.status, response.headers, await response.read())
        finally:
            response.close()

    async def stream(self, method: str, path: str, body: Optional[bytes] = None) -> "AsyncNdjsonStream":
        """Sends one request whose 200 answer is NDJSON; raises on any other."""
        response = await self.send(method, path, body, {"Accept": "application/x-ndjson"})
        if response.status != 200:
            try:
                raw = await response.read()
            finally:
                response.close()
            raise error_of(Answer(response.status, response.headers, raw))
        return AsyncNdjsonStream(response)


class AsyncNdjsonStream:
    """The :class:`Event` values of a streamed execution, for ``async for``.

    It ends after the ``exit`` event; use ``async with`` or :meth:`aclose`
    to leave early. Leaving a stream of ``POST /v1/executions`` early
    disconnects, which cancels that execution.
    """

    def __init__(self, response: _Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[Event]:
        pending = b""
        try:
            async for block in self._response.chunks():
                pending += block
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    event = self._event(line)
                    if event is not None:
                        yield event
            event = self._event(pending)
            if event is not None:
                yield event
        finally:
            self._response.close()

    @staticmethod
    def _event(line: bytes) -> Optional[Event]:
        line = line.strip()
        if not line:
            return None
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ValueError(f"the daemon sent an event that is not a JSON object: {line[:200]!r}")
        return Event.from_json(doc)

    async def aclose(self) -> None:
        self._response.close()

    async def __aenter__(self) -> "AsyncNdjsonStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncClient:
    """:class:`Client` for ``asyncio``: the same arguments, methods, answers and errors, each method a coroutine.

    ``async with AsyncClient(socket_path=...) as c: result = await c.run(job)``.
    ``stream`` and ``events`` are awaited for the stream, then iterated with
    ``async for``. Like :class:`Client` it holds no connection between calls.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.transport = AsyncTransport(socket_path=socket_path, url=url, token=token, timeout=timeout)
        self.closed = False

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Marks the client closed; it holds no connection, so nothing else is released."""
        self.closed = True

    async def send(self, req: "Request[T]") -> T:
        """Sends one :class:`Request` and decodes its answer."""
        if self.closed:
            raise RuntimeError("this AsyncClient is closed; make a new one")
        answer = await self.transport.request(req.method, req.path, req.body, req.headers, req.timeout)
        return req.answer(answer)

    # -- what the synchronous client does around a request -----------------

    async def stream(self, job: JsonBody) -> AsyncNdjsonStream:
        """``POST /v1/executions`` as NDJSON (as :meth:`Client.stream`); closing it early cancels."""
        return await self.transport.stream("POST", "/v1/executions", _body(job))

    async def events(self, execution_id: str, after: Optional[int] = None) -> AsyncNdjsonStream:
        """``GET /v1/executions/{id}/events[?after=SEQ]`` (as :meth:`Client.events`); leaving it never cancels."""
        return await self.transport.stream("GET", Routes.events_path(execution_id, after))

    async def wait(self, execution_id: str, timeout: Optional[float] = None) -> Result:
        """Long-polls until the execution has a result (as :meth:`Client.wait`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = LONG_POLL_MAX if deadline is None else min(LONG_POLL_MAX, max(0.0, deadline - time.monotonic()))
            doc = await self.execution(execution_id, wait=step)
            if isinstance(doc, Result):
                return doc
            if deadline is not None and time.monotonic() >= deadline:
                raise timed_out(execution_id, timeout, doc)

    async def save_output(self, execution_id: str, path: str, dest: str) -> Output:
        """Streams a kept output into the new file ``dest``, checking its SHA-256 (as :meth:`Client.save_output`)."""
        response = await self.transport.send("GET", _output_path(execution_id, path))
        try:
            if response.status != 200:
                raise error_of(Answer(response.status, response.headers, await response.read()))
            expected = (response.headers.get("ETag") or "").strip('"')
            digest = hashlib.sha256()
            size = 0
            with open(dest, "xb") as f:
                async for block in response.chunks():
                    digest.update(block)
                    size += len(block)
                    f.write(block)
        finally:
            response.close()
        return checked_output(execution_id, path, dest, expected, digest.hexdigest(), size)

    async def save_outputs(self, result: Mapping[str, Any], folder: str) -> List[Output]:
        """Writes every kept output of ``result`` below ``folder`` (as :meth:`Client.save_outputs`)."""
        saved: List[Output] = []
        for execution_id, rel, dest in output_destinations(result, folder):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            saved.append(await self.save_output(execution_id, rel, dest))
        return saved

    # -- service -----------------------------------------------------------

    async def health(self) -> Document:
        """``GET /v1/health``: the health document, also when it is 503 (``status`` says why)."""
        return await self.send(Routes.health())

    async def version(self) -> Version:
        """``GET /v1/version``: ``{name, version, api_version, capabilities}``."""
        return await self.send(Routes.version())

    async def receipt_key(self) -> Document:
        """``GET /v1/receipt-key``: ``{keyid, public_key_pem}``, the key results are signed with."""
        return await self.send(Routes.receipt_key())

    async def openapi(self) -> Document:
        """``GET /v1/openapi.json``: the OpenAPI 3.1 document of every route."""
        return await self.send(Routes.openapi())

    async def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return await self.send(Routes.metrics())

    # -- skill packages ----------------------------------------------------

    async def publish(self, bundle: Union[Bundle, bytes]) -> Publication:
        """``POST /v1/skill-packages``: publishes a bundle; ``{identity, skills, new_packages, warnings}``."""
        return await self.send(Routes.publish(bundle))

    async def publish_folder(self, folder: str, skill_id: str, revision: int, version: str) -> Publication:
        """Builds the bundle of one skill folder (:func:`bundle_folder`) and publishes it."""
        return await self.publish(bundle_folder(folder, skill_id, revision, version))

    async def skill_packages(self) -> Document:
        """``GET /v1/skill-packages``: ``{skills: [bindings]}``, every published binding."""
        return await self.send(Routes.skill_packages())

    async def skill_package(self, identity: str) -> Document:
        """``GET /v1/skill-packages/{identity}``: ``{identity, skills}`` of a published selection."""
        return await self.send(Routes.skill_package(identity))

    # -- environments ------------------------------------------------------

    async def environments(self) -> Document:
        """``GET /v1/environments``: ``{environments: [records]}``."""
        return await self.send(Routes.environments())

    async def environment(self, env_id: str, env_hash: str) -> Document:
        """``GET /v1/environments/{id}/{hash}``: the record; 404 when absent."""
        return await self.send(Routes.environment(env_id, env_hash))

    async def publish_environment(self, upload: JsonBody) -> Document:
        """``POST /v1/environments`` with an upload (:func:`environment_upload`): the record."""
        return await self.send(Routes.publish_environment(upload))

    async def publish_environment_folder(
        self,
        folder: str,
        env_id: str,
        python: Optional[str] = None,
        interpreter: Optional[str] = None,
    ) -> Document:
        """Uploads the tree at ``folder`` with its environment hash; the record."""
        return await self.publish_environment(environment_upload(folder, env_id, python, interpreter))

    async def build_environment(self, env_id: str, lock: str, interpreter: Optional[str] = None) -> Document:
        """``POST /v1/environments`` with a build from the lock's text (the daemon
        must run with ``--env-builds true``); waits for the build: the record."""
        return await self.send(Routes.build_environment(env_id, lock, interpreter))

    # -- executions --------------------------------------------------------

    async def run(self, job: JsonBody) -> Result:
        """``POST /v1/executions``: runs a job and returns its :class:`Result`.

        Whatever the command did (non-zero exit, timeout, cancel) the result
        is returned; a job refused before launch raises, with the result
        document in ``SkillRunnerError.body``.
        """
        return await self.send(Routes.run(job))

    async def run_detached(self, job: JsonBody) -> Union[Result, Progress]:
        """``POST /v1/executions?wait=false``: admits the job and answers at once.

        :class:`Progress` ``{execution_id, status: queued|running}`` (202); a
        retry of a finished execution with the same job answers with its
        :class:`Result` (200). A detached execution is never cancelled by a disconnect.
        """
        return await self.send(Routes.run_detached(job))

    async def run_if_idle(self, job: JsonBody) -> Result:
        """``POST /v1/executions?session_wait=false``: as :meth:`run`, but a job whose
        session's managed workspace is in use is refused (409 ``conflict``) rather
        than queued behind the session's other jobs."""
        return await self.send(Routes.run_if_idle(job))

    async def execution(self, execution_id: str, wait: Optional[float] = None) -> Union[Result, Progress]:
        """``GET /v1/executions/{id}[?wait=]``: the :class:`Result`, or the :class:`Progress` of one not finished.

        With ``wait`` (seconds; the daemon caps it at 60) the daemon holds the
        answer until the execution finishes or the time passes.
        """
        return await self.send(Routes.execution(execution_id, wait, self.transport.timeout))

    async def executions(
        self, status: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Document:
        """``GET /v1/executions``: ``{executions, next_cursor}``, newest admitted first."""
        return await self.send(Routes.executions(status, limit, cursor))

    async def output(self, execution_id: str, path: str) -> bytes:
        """``GET /v1/executions/{id}/outputs/{path}``: the bytes of a kept output, whole."""
        return await self.send(Routes.output(execution_id, path))

    async def cancel(self, execution_id: str) -> Document:
        """``DELETE /v1/executions/{id}``: ``{status: "cancelling"}``; 409 ``not_running`` once finished."""
        return await self.send(Routes.cancel(execution_id))

    # -- sessions (docs/skill-host.md) ------------------------------------

    async def create_session(
        self,
        skills: Sequence[Mapping[str, Any]],
        tools: Sequence[str],
        workspace: Optional[str] = None,
        environment: Optional[Mapping[str, str]] = None,
    ) -> Session:
        """``POST /v1/sessions``: skills as ``{"name"}`` or bindings, the agent's enabled tools.

        ``workspace="managed"``: the daemon keeps a workspace for the session
        that every job naming it runs in, one at a time (docs/workspaces.md);
        move files with :meth:`upload_file`, :meth:`download_file`,
        :meth:`list_files` and :meth:`delete_file`. ``environment``: the
        environment ``{"id", "hash"}`` every job of the session runs with.
        """
        return await self.send(Routes.create_session(skills, tools, workspace, environment))

    async def sessions(self) -> Document:
        """``GET /v1/sessions``: ``{sessions: [{id, delivery, created_at, last_used_at, skills}]}``, newest first."""
        return await self.send(Routes.sessions())

    async def session(self, session_id: str) -> Session:
        """``GET /v1/sessions/{id}``."""
        return await self.send(Routes.session(session_id))

    async def delete_session(self, session_id: str) -> Document:
        """``DELETE /v1/sessions/{id}``: ``{id, deleted: true}``."""
        return await self.send(Routes.delete_session(session_id))

    async def call_tool(self, session_id: str, tool: str, tool_input: Mapping[str, Any]) -> ToolAnswer:
        """``POST /v1/sessions/{id}/tools/{tool}``: the model's tool input, unchanged.

        Answers :class:`ToolAnswer` ``{content, is_error}``, ready to hand back
        to the model; a fault the model can fix is ``is_error: true``, not an exception.
        """
        return await self.send(Routes.call_tool(session_id, tool, tool_input))

    async def session_skills(
        self,
        session_id: str,
        query: Optional[str] = None,
        limit: Optional[int] = None,
        category: Optional[str] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills``: list, or find with ``query`` (tools ``list_skills``, ``find_skills``)."""
        return await self.send(Routes.session_skills(session_id, query, limit, category))

    async def load_skill(self, session_id: str, name: str) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}``: the body and sections (tools ``Skill``, ``load_skill``)."""
        return await self.send(Routes.load_skill(session_id, name))

    async def skill_section(
        self,
        session_id: str,
        name: str,
        section: str,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}/sections/{section}`` (tool ``load_skill_section``)."""
        return await self.send(Routes.skill_section(session_id, name, section, offset, limit))

    async def session_resource(
        self, session_id: str, path: str, offset: Optional[int] = None, limit: Optional[int] = None
    ) -> Document:
        """``GET /v1/sessions/{id}/resources?path=`` (tool ``read_skill_resource``)."""
        return await self.send(Routes.session_resource(session_id, path, offset, limit))

    async def session_events(self, session_id: str) -> Document:
        """``GET /v1/sessions/{id}/events``: the session's activation log."""
        return await self.send(Routes.session_events(session_id))

    # -- managed session workspaces (docs/workspaces.md) -------------------

    async def upload_file(self, session_id: str, path: str, data: bytes) -> StoredFile:
        """``PUT /v1/sessions/{id}/files/{path}``: writes one file atomically; ``{session, path, size, sha256}``.

        Refused (409 ``conflict``) while a job of the session is admitted; 413
        past the daemon's ``file_body_limit`` or ``workspace_bytes``.
        """
        return await self.send(Routes.upload_file(session_id, path, data))

    async def download_file(self, session_id: str, path: str) -> bytes:
        """``GET /v1/sessions/{id}/files/{path}``: the bytes of one regular file of the workspace."""
        return await self.send(Routes.download_file(session_id, path))

    async def list_files(self, session_id: str, prefix: Optional[str] = None) -> Document:
        """``GET /v1/sessions/{id}/files?prefix=``: ``{files: [{path, size}], truncated}``, by path."""
        return await self.send(Routes.list_files(session_id, prefix))

    async def delete_file(self, session_id: str, path: str) -> Document:
        """``DELETE /v1/sessions/{id}/files/{path}``: ``{session, path, deleted: true}``."""
        return await self.send(Routes.delete_file(session_id, path))

