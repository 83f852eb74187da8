"""The client: one method per daemon route (docs/daemon.md, docs/skill-host.md).

Methods return the daemon's answer as a typed document (:class:`Result`,
:class:`Session`, ...; :data:`Document` where no class fits), and raise a
:class:`SkillRunnerError` subclass for every 4xx/5xx answer; connection
failures stay ``OSError``. Nothing is cached or retried: a method is one
request (:func:`retrying` retries a :class:`Busy` one). Each route is
described once, as a :class:`Request` built by a function of this module,
and sent by :class:`Client` here and by :class:`AsyncClient` (``aio.py``).
"""

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union
from urllib.parse import quote, urlencode

from .bundle import bundle_bytes, bundle_folder
from .environment import environment_upload
from .errors import SkillRunnerError
from .transport import Answer, NdjsonStream, Transport, error_of
from .types import (
    Answer as TypedAnswer,
    Bundle,
    Document,
    InputFile,
    Output,
    Progress,
    Publication,
    Result,
    Session,
    StoredFile,
    ToolAnswer,
    Version,
    result_or_progress,
)

T = TypeVar("T")
A = TypeVar("A", bound=TypedAnswer)

JsonBody = Union[Mapping[str, Any], bytes]

LONG_POLL_MAX = 60.0
"""The daemon holds a long-poll at most this long (seconds); :meth:`Client.wait` polls again."""


def _plain(value: Any) -> Any:
    """A typed answer inside a document to send is sent as the document it was made from."""
    if isinstance(value, TypedAnswer):
        return value.raw
    raise TypeError(f"{type(value).__name__} is not JSON")


def _body(doc: JsonBody) -> bytes:
    if isinstance(doc, bytes):
        return doc
    if isinstance(doc, TypedAnswer):
        doc = doc.raw
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=_plain).encode("utf-8")


def _seg(value: str) -> str:
    """One path segment, percent-encoded (``/`` included)."""
    return quote(value, safe="")


def _path(value: str) -> str:
    """A workspace path, percent-encoded segment by segment (``/`` kept)."""
    return quote(value, safe="/")


def _query(params: Mapping[str, Optional[Union[str, int]]]) -> str:
    kept = {k: str(v) for k, v in params.items() if v is not None}
    return "?" + urlencode(kept) if kept else ""


def input_file(path: str, data: bytes, mode: Optional[int] = None) -> InputFile:
    """One entry of a job's ``files``: ``data`` base64-encoded, ``mode`` (e.g. ``0o755``) as octal text."""
    entry: InputFile = {"path": path, "content": base64.b64encode(data).decode("ascii")}
    if mode is not None:
        entry["mode"] = format(mode, "04o")
    return entry


@dataclass(frozen=True)
class Request(Generic[T]):
    """One route call, described once for both clients: what to send, which
    statuses are answers, and how the answer's bytes become ``T``."""

    method: str
    path: str
    body: Optional[bytes] = None
    ok: Tuple[int, ...] = (200,)
    headers: Optional[Mapping[str, str]] = None
    timeout: Optional[float] = None
    decode: Callable[[Answer], Any] = lambda a: a.json()

    def answer(self, answer: Answer) -> T:
        """The decoded answer, or the error of a status that is not one of ``ok``."""
        if answer.status not in self.ok:
            raise error_of(answer)
        return self.decode(answer)  # type: ignore[no-any-return]


def _object(answer: Answer) -> Document:
    doc = answer.json()
    if not isinstance(doc, dict):
        raise SkillRunnerError(answer.status, "bad_answer", "the daemon answered with something other than a JSON object")
    return doc


def _req(method: str, path: str, body: Optional[JsonBody] = None, ok: Tuple[int, ...] = (200,)) -> "Request[Document]":
    return Request(method, path, None if body is None else _body(body), ok, decode=_object)


def _typed(cls: Type[A], method: str, path: str, body: Optional[JsonBody] = None, ok: Tuple[int, ...] = (200,)) -> "Request[A]":
    return Request(method, path, None if body is None else _body(body), ok, decode=lambda a: cls.from_json(_object(a)))


def _raw(method: str, path: str) -> "Request[bytes]":
    return Request(method, path, decode=lambda a: a.body)


class Routes:
    """Every route as a :class:`Request`: the one description both clients send."""

    @staticmethod
    def health() -> "Request[Document]":
        return _req("GET", "/v1/health", ok=(200, 503))

    @staticmethod
    def version() -> "Request[Version]":
        return _typed(Version, "GET", "/v1/version")

    @staticmethod
    def receipt_key() -> "Request[Document]":
        return _req("GET", "/v1/receipt-key")

    @staticmethod
    def openapi() -> "Request[Document]":
        return _req("GET", "/v1/openapi.json")

    @staticmethod
    def metrics() -> "Request[str]":
        return Request("GET", "/metrics", decode=lambda a: a.body.decode("utf-8"))

    @staticmethod
    def publish(bundle: Union[Bundle, bytes]) -> "Request[Publication]":
        raw = bundle if isinstance(bundle, bytes) else bundle_bytes(bundle)
        return _typed(Publication, "POST", "/v1/skill-packages", raw)

    @staticmethod
    def skill_packages() -> "Request[Document]":
        return _req("GET", "/v1/skill-packages")

    @staticmethod
    def skill_package(identity: str) -> "Request[Document]":
        return _req("GET", f"/v1/skill-packages/{_seg(identity)}")

    @staticmethod
    def environments() -> "Request[Document]":
        return _req("GET", "/v1/environments")

    @staticmethod
    def environment(env_id: str, env_hash: str) -> "Request[Document]":
        return _req("GET", f"/v1/environments/{_seg(env_id)}/{_seg(env_hash)}")

    @staticmethod
    def publish_environment(upload: JsonBody) -> "Request[Document]":
        return _req("POST", "/v1/environments", upload, ok=(201,))

    @staticmethod
    def build_environment(env_id: str, lock: str, interpreter: Optional[str]) -> "Request[Document]":
        body: Dict[str, Any] = {"id": env_id, "python": lock}
        if interpreter is not None:
            body["interpreter"] = interpreter
        return _req("POST", "/v1/environments", body, ok=(201,))

    @staticmethod
    def run(job: JsonBody) -> "Request[Result]":
        return _typed(Result, "POST", "/v1/executions", job)

    @staticmethod
    def run_detached(job: JsonBody) -> "Request[Union[Result, Progress]]":
        return Request("POST", "/v1/executions?wait=false", _body(job), (200, 202), decode=lambda a: result_or_progress(_object(a)))

    @staticmethod
    def run_if_idle(job: JsonBody) -> "Request[Result]":
        return _typed(Result, "POST", "/v1/executions?session_wait=false", job)

    @staticmethod
    def execution(execution_id: str, wait: Optional[float], base_timeout: Optional[float]) -> "Request[Union[Result, Progress]]":
        path = f"/v1/executions/{_seg(execution_id)}"
        timeout = None
        if wait is not None:
            path += f"?wait={max(0, round(wait * 1000))}ms"
            if base_timeout is not None:
                timeout = base_timeout + wait
        return Request("GET", path, None, (200, 202), timeout=timeout, decode=lambda a: result_or_progress(_object(a)))

    @staticmethod
    def executions(status: Optional[str], limit: Optional[int], cursor: Optional[str]) -> "Request[Document]":
        return _req("GET", "/v1/executions" + _query({"status": status, "limit": limit, "cursor": cursor}))

    @staticmethod
    def output(execution_id: str, path: str) -> "Request[bytes]":
        return _raw("GET", _output_path(execution_id, path))

    @staticmethod
    def cancel(execution_id: str) -> "Request[Document]":
        return _req("DELETE", f"/v1/executions/{_seg(execution_id)}", ok=(202,))

    @staticmethod
    def create_session(
        skills: Sequence[Mapping[str, Any]],
        tools: Sequence[str],
        workspace: Optional[str],
        environment: Optional[Mapping[str, str]],
    ) -> "Request[Session]":
        doc: Dict[str, Any] = {"skills": [dict(s) for s in skills], "tools": list(tools)}
        if workspace is not None:
            doc["workspace"] = workspace
        if environment is not None:
            doc["environment"] = dict(environment)
        return _typed(Session, "POST", "/v1/sessions", doc)

    @staticmethod
    def sessions() -> "Request[Document]":
        return _req("GET", "/v1/sessions")

    @staticmethod
    def session(session_id: str) -> "Request[Session]":
        return _typed(Session, "GET", f"/v1/sessions/{_seg(session_id)}")

    @staticmethod
    def delete_session(session_id: str) -> "Request[Document]":
        return _req("DELETE", f"/v1/sessions/{_seg(session_id)}")

    @staticmethod
    def call_tool(session_id: str, tool: str, tool_input: Mapping[str, Any]) -> "Request[ToolAnswer]":
        return _typed(ToolAnswer, "POST", f"/v1/sessions/{_seg(session_id)}/tools/{_seg(tool)}", tool_input)

    @staticmethod
    def session_skills(session_id: str, query: Optional[str], limit: Optional[int], category: Optional[str]) -> "Request[Document]":
        q = _query({"query": query, "limit": limit, "category": category})
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/skills{q}")

    @staticmethod
    def load_skill(session_id: str, name: str) -> "Request[Document]":
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/skills/{_seg(name)}")

    @staticmethod
    def skill_section(session_id: str, name: str, section: str, offset: Optional[int], limit: Optional[int]) -> "Request[Document]":
        q = _query({"offset": offset, "limit": limit})
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/skills/{_seg(name)}/sections/{_seg(section)}{q}")

    @staticmethod
    def session_resource(session_id: str, path: str, offset: Optional[int], limit: Optional[int]) -> "Request[Document]":
        q = _query({"path": path, "offset": offset, "limit": limit})
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/resources{q}")

    @staticmethod
    def session_events(session_id: str) -> "Request[Document]":
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/events")

    @staticmethod
    def upload_file(session_id: str, path: str, data: bytes) -> "Request[StoredFile]":
        return Request(
            "PUT",
            f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}",
            bytes(data),
            headers={"Content-Type": "application/octet-stream"},
            decode=lambda a: StoredFile.from_json(_object(a)),
        )

    @staticmethod
    def download_file(session_id: str, path: str) -> "Request[bytes]":
        return _raw("GET", f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}")

    @staticmethod
    def list_files(session_id: str, prefix: Optional[str]) -> "Request[Document]":
        return _req("GET", f"/v1/sessions/{_seg(session_id)}/files{_query({'prefix': prefix})}")

    @staticmethod
    def delete_file(session_id: str, path: str) -> "Request[Document]":
        return _req("DELETE", f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}")

    @staticmethod
    def events_path(execution_id: str, after: Optional[int]) -> str:
        return f"/v1/executions/{_seg(execution_id)}/events{_query({'after': after})}"


def _output_path(execution_id: str, path: str) -> str:
    return f"/v1/executions/{_seg(execution_id)}/outputs/{quote(path, safe='/')}"


def output_destinations(result: Mapping[str, Any], folder: str) -> List[Tuple[str, str, str]]:
    """``(execution_id, path, dest)`` of every kept output of ``result`` below ``folder``.

    A path is refused if it would leave ``folder`` (the daemon never lists
    one, but a client should not trust a path to stay put).
    """
    root = os.path.realpath(folder)
    found: List[Tuple[str, str, str]] = []
    for out in result.get("outputs") or []:
        if "sha256" not in out or out["sha256"] is None:
            continue
        rel = str(out["path"])
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"output path {rel!r} would leave {folder!r}")
        found.append((str(result["execution_id"]), rel, os.path.join(root, *parts)))
    return found


def still_running(doc: Union[Result, Progress]) -> bool:
    return isinstance(doc, Progress)


def timed_out(execution_id: str, timeout: Optional[float], doc: Union[Result, Progress]) -> TimeoutError:
    return TimeoutError(f"execution {execution_id!r} did not finish within {timeout} s; it is {doc.status}")


class Client:
    """A client of one ``skill-runner serve``.

    ``Client(socket_path="/var/lib/skill-runner/run/skill-runner.sock")`` or
    ``Client(url="http://127.0.0.1:8787", token="...")``. ``timeout`` (seconds)
    bounds connecting and each read; the default ``None`` lets a blocking run
    last as long as its command. A context manager (``with Client(...) as
    c:``); it holds no connection between calls, so closing only marks it
    closed: a call after :meth:`close` raises ``RuntimeError``.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.transport = Transport(socket_path=socket_path, url=url, token=token, timeout=timeout)
        self.closed = False

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def close(self) -> None:
        """Marks the client closed; it holds no connection, so nothing else is released."""
        self.closed = True

    def send(self, req: "Request[T]") -> T:
        """Sends one :class:`Request` and decodes its answer."""
        if self.closed:
            raise RuntimeError("this Client is closed; make a new one")
        answer = self.transport.request(req.method, req.path, req.body, req.headers, req.timeout)
        return req.answer(answer)

    # -- service -----------------------------------------------------------

    def health(self) -> Document:
        """``GET /v1/health``: the health document, also when it is 503 (``status`` says why)."""
        return self.send(Routes.health())

    def version(self) -> Version:
        """``GET /v1/version``: ``{name, version, api_version, capabilities}``."""
        return self.send(Routes.version())

    def receipt_key(self) -> Document:
        """``GET /v1/receipt-key``: ``{keyid, public_key_pem}``, the key results are signed with."""
        return self.send(Routes.receipt_key())

    def openapi(self) -> Document:
        """``GET /v1/openapi.json``: the OpenAPI 3.1 document of every route."""
        return self.send(Routes.openapi())

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return self.send(Routes.metrics())

    # -- skill packages ----------------------------------------------------

    def publish(self, bundle: Union[Bundle, bytes]) -> Publication:
        """``POST /v1/skill-packages``: publishes a bundle; ``{identity, skills, new_packages, warnings}``."""
        return self.send(Routes.publish(bundle))

    def publish_folder(self, folder: str, skill_id: str, revision: int, version: str) -> Publication:
        """Builds the bundle of one skill folder (:func:`bundle_folder`) and publishes it."""
        return self.publish(bundle_folder(folder, skill_id, revision, version))

    def skill_packages(self) -> Document:
        """``GET /v1/skill-packages``: ``{skills: [bindings]}``, every published binding."""
        return self.send(Routes.skill_packages())

    def skill_package(self, identity: str) -> Document:
        """``GET /v1/skill-packages/{identity}``: ``{identity, skills}`` of a published selection."""
        return self.send(Routes.skill_package(identity))

    # -- environments ------------------------------------------------------

    def environments(self) -> Document:
        """``GET /v1/environments``: ``{environments: [records]}``."""
        return self.send(Routes.environments())

    def environment(self, env_id: str, env_hash: str) -> Document:
        """``GET /v1/environments/{id}/{hash}``: the record; 404 when absent."""
        return self.send(Routes.environment(env_id, env_hash))

    def publish_environment(self, upload: JsonBody) -> Document:
        """``POST /v1/environments`` with an upload (:func:`environment_upload`): the record."""
        return self.send(Routes.publish_environment(upload))

    def publish_environment_folder(
        self,
        folder: str,
        env_id: str,
        python: Optional[str] = None,
        interpreter: Optional[str] = None,
    ) -> Document:
        """Uploads the tree at ``folder`` with its environment hash; the record."""
        return self.publish_environment(environment_upload(folder, env_id, python, interpreter))

    def build_environment(self, env_id: str, lock: str, interpreter: Optional[str] = None) -> Document:
        """``POST /v1/environments`` with a build from the lock's text (the daemon
        must run with ``--env-builds true``); waits for the build: the record."""
        return self.send(Routes.build_environment(env_id, lock, interpreter))

    # -- executions --------------------------------------------------------

    def run(self, job: JsonBody) -> Result:
        """``POST /v1/executions``: runs a job and returns its :class:`Result`.

        Whatever the command did (non-zero exit, timeout, cancel) the result
        is returned; a job refused before launch raises, with the result
        document in ``SkillRunnerError.body``.
        """
        return self.send(Routes.run(job))

    def stream(self, job: JsonBody) -> NdjsonStream:
        """``POST /v1/executions`` as NDJSON: iterate the :class:`Event` values, ``exit`` last.

        A job refused before launch raises before any event. Closing the
        stream early cancels the execution.
        """
        return self.transport.stream("POST", "/v1/executions", _body(job))

    def run_detached(self, job: JsonBody) -> Union[Result, Progress]:
        """``POST /v1/executions?wait=false``: admits the job and answers at once.

        :class:`Progress` ``{execution_id, status: queued|running}`` (202); a
        retry of a finished execution with the same job answers with its
        :class:`Result` (200). A detached execution is never cancelled by a disconnect.
        """
        return self.send(Routes.run_detached(job))

    def run_if_idle(self, job: JsonBody) -> Result:
        """``POST /v1/executions?session_wait=false``: as :meth:`run`, but a job whose
        session's managed workspace is in use is refused (409 ``conflict``) rather
        than queued behind the session's other jobs."""
        return self.send(Routes.run_if_idle(job))

    def execution(self, execution_id: str, wait: Optional[float] = None) -> Union[Result, Progress]:
        """``GET /v1/executions/{id}[?wait=]``: the :class:`Result`, or the :class:`Progress` of one not finished.

        With ``wait`` (seconds; the daemon caps it at 60) the daemon holds the
        answer until the execution finishes or the time passes.
        """
        return self.send(Routes.execution(execution_id, wait, self.transport.timeout))

    def wait(self, execution_id: str, timeout: Optional[float] = None) -> Result:
        """Long-polls until the execution has a result and returns it.

        Raises ``TimeoutError`` when ``timeout`` seconds pass first (``None``:
        wait as long as it runs).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = LONG_POLL_MAX if deadline is None else min(LONG_POLL_MAX, max(0.0, deadline - time.monotonic()))
            doc = self.execution(execution_id, wait=step)
            if isinstance(doc, Result):
                return doc
            if deadline is not None and time.monotonic() >= deadline:
                raise timed_out(execution_id, timeout, doc)

    def events(self, execution_id: str, after: Optional[int] = None) -> NdjsonStream:
        """``GET /v1/executions/{id}/events[?after=SEQ]``: re-attaches to an execution's events.

        Those recorded (after ``seq`` ``after``), then live ones, ``heartbeat``
        events when quiet, ``exit`` last. Leaving this stream never cancels.
        """
        return self.transport.stream("GET", Routes.events_path(execution_id, after))

    def executions(
        self, status: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Document:
        """``GET /v1/executions``: ``{executions, next_cursor}``, newest admitted first."""
        return self.send(Routes.executions(status, limit, cursor))

    def output(self, execution_id: str, path: str) -> bytes:
        """``GET /v1/executions/{id}/outputs/{path}``: the bytes of a kept output, whole."""
        return self.send(Routes.output(execution_id, path))

    def save_output(self, execution_id: str, path: str, dest: str, chunk: int = 1 << 16) -> Output:
        """Streams a kept output into the new file ``dest`` (never overwritten), checking its SHA-256.

        Returns the :class:`Output` ``{path, size, sha256}`` of what was
        written; raises :class:`SkillRunnerError` for a refused request and
        ``ValueError`` when the bytes do not match the ``ETag`` the daemon
        sent (the file is removed).
        """
        conn, resp = self.transport._send("GET", _output_path(execution_id, path), None, None, None)
        try:
            if resp.status != 200:
                raise error_of(Answer(resp.status, resp.headers, resp.read()))
            expected = (resp.headers.get("ETag") or "").strip('"')
            digest = hashlib.sha256()
            size = 0
            with open(dest, "xb") as f:
                while True:
                    block = resp.read(chunk)
                    if not block:
                        break
                    digest.update(block)
                    size += len(block)
                    f.write(block)
        finally:
            conn.close()
        return checked_output(execution_id, path, dest, expected, digest.hexdigest(), size)

    def save_outputs(self, result: Mapping[str, Any], folder: str) -> List[Output]:
        """Writes every kept output of ``result`` below ``folder`` (made if missing) at its path.

        A path is refused if it would leave ``folder`` (the daemon never lists
        one, but a client should not trust a path to stay put).
        """
        saved: List[Output] = []
        for execution_id, rel, dest in output_destinations(result, folder):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            saved.append(self.save_output(execution_id, rel, dest))
        return saved

    def cancel(self, execution_id: str) -> Document:
        """``DELETE /v1/executions/{id}``: ``{status: "cancelling"}``; 409 ``not_running`` once finished."""
        return self.send(Routes.cancel(execution_id))

    # -- sessions (docs/skill-host.md) ------------------------------------

    def create_session(
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
        return self.send(Routes.create_session(skills, tools, workspace, environment))

    def sessions(self) -> Document:
        """``GET /v1/sessions``: ``{sessions: [{id, delivery, created_at, last_used_at, skills}]}``, newest first."""
        return self.send(Routes.sessions())

    def session(self, session_id: str) -> Session:
        """``GET /v1/sessions/{id}``."""
        return self.send(Routes.session(session_id))

    def delete_session(self, session_id: str) -> Document:
        """``DELETE /v1/sessions/{id}``: ``{id, deleted: true}``."""
        return self.send(Routes.delete_session(session_id))

    def call_tool(self, session_id: str, tool: str, tool_input: Mapping[str, Any]) -> ToolAnswer:
        """``POST /v1/sessions/{id}/tools/{tool}``: the model's tool input, unchanged.

        Answers :class:`ToolAnswer` ``{content, is_error}``, ready to hand back
        to the model; a fault the model can fix is ``is_error: true``, not an exception.
        """
        return self.send(Routes.call_tool(session_id, tool, tool_input))

    def session_skills(
        self,
        session_id: str,
        query: Optional[str] = None,
        limit: Optional[int] = None,
        category: Optional[str] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills``: list, or find with ``query`` (tools ``list_skills``, ``find_skills``)."""
        return self.send(Routes.session_skills(session_id, query, limit, category))

    def load_skill(self, session_id: str, name: str) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}``: the body and sections (tools ``Skill``, ``load_skill``)."""
        return self.send(Routes.load_skill(session_id, name))

    def skill_section(
        self,
        session_id: str,
        name: str,
        section: str,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}/sections/{section}`` (tool ``load_skill_section``)."""
        return self.send(Routes.skill_section(session_id, name, section, offset, limit))

    def session_resource(
        self, session_id: str, path: str, offset: Optional[int] = None, limit: Optional[int] = None
    ) -> Document:
        """``GET /v1/sessions/{id}/resources?path=`` (tool ``read_skill_resource``)."""
        return self.send(Routes.session_resource(session_id, path, offset, limit))

    def session_events(self, session_id: str) -> Document:
        """``GET /v1/sessions/{id}/events``: the session's activation log."""
        return self.send(Routes.session_events(session_id))

    # -- managed session workspaces (docs/workspaces.md) -------------------

    def upload_file(self, session_id: str, path: str, data: bytes) -> StoredFile:
        """``PUT /v1/sessions/{id}/files/{path}``: writes one file atomically; ``{session, path, size, sha256}``.

        Refused (409 ``conflict``) while a job of the session is admitted; 413
        past the daemon's ``file_body_limit`` or ``workspace_bytes``.
        """
        return self.send(Routes.upload_file(session_id, path, data))

    def download_file(self, session_id: str, path: str) -> bytes:
        """``GET /v1/sessions/{id}/files/{path}``: the bytes of one regular file of the workspace."""
        return self.send(Routes.download_file(session_id, path))

    def list_files(self, session_id: str, prefix: Optional[str] = None) -> Document:
        """``GET /v1/sessions/{id}/files?prefix=``: ``{files: [{path, size}], truncated}``, by path."""
        return self.send(Routes.list_files(session_id, prefix))

    def delete_file(self, session_id: str, path: str) -> Document:
        """``DELETE /v1/sessions/{id}/files/{path}``: ``{session, path, deleted: true}``."""
        return self.send(Routes.delete_file(session_id, path))


def checked_output(execution_id: str, path: str, dest: str, expected: str, sha256: str, size: int) -> Output:
    """The :class:`Output` of a saved file, or ``ValueError`` (the file removed) when its bytes are not ``expected``."""
    if expected and sha256 != expected:
        os.remove(dest)
        raise ValueError(f"output {path!r} of {execution_id!r}: the bytes received do not match their SHA-256 {expected}")
    return Output.from_json({"path": path, "size": size, "sha256": sha256})
