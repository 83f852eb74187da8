"""The client: one method per daemon route (docs/daemon.md, docs/skill-host.md).

Methods return the daemon's JSON answer decoded (``dict``), and raise
:class:`SkillRunnerError` for every 4xx/5xx answer; connection failures
stay ``OSError``. Nothing is cached or retried: a method is one request.
"""

import base64
import hashlib
import json
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote, urlencode

from .bundle import bundle_bytes, bundle_folder
from .environment import environment_upload
from .errors import SkillRunnerError
from .transport import Answer, NdjsonStream, Transport, error_of
from .types import Bundle, Document, InputFile, Job, Output

JsonBody = Union[Mapping[str, Any], bytes]

LONG_POLL_MAX = 60.0
"""The daemon holds a long-poll at most this long (seconds); :meth:`Client.wait` polls again."""


def _body(doc: JsonBody) -> bytes:
    if isinstance(doc, bytes):
        return doc
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


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


class Client:
    """A client of one ``skill-runner serve``.

    ``Client(socket_path="/var/lib/skill-runner/run/skill-runner.sock")`` or
    ``Client(url="http://127.0.0.1:8787", token="...")``. ``timeout`` (seconds)
    bounds connecting and each read; the default ``None`` lets a blocking run
    last as long as its command.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.transport = Transport(socket_path=socket_path, url=url, token=token, timeout=timeout)

    # -- plumbing ----------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Optional[JsonBody] = None,
        ok: Sequence[int] = (200,),
        timeout: Optional[float] = None,
    ) -> Answer:
        answer = self.transport.request(
            method, path, None if body is None else _body(body), timeout=timeout
        )
        if answer.status not in ok:
            raise error_of(answer)
        return answer

    def _json(self, method: str, path: str, body: Optional[JsonBody] = None) -> Document:
        doc = self._call(method, path, body).json()
        if not isinstance(doc, dict):
            raise SkillRunnerError(200, "bad_answer", f"{method} {path} answered with something other than a JSON object")
        return doc

    # -- service -----------------------------------------------------------

    def health(self) -> Document:
        """``GET /v1/health``: the health document, also when it is 503 (``status`` says why)."""
        return self._call("GET", "/v1/health", ok=(200, 503)).json()  # type: ignore[no-any-return]

    def version(self) -> Document:
        """``GET /v1/version``: ``{name, version, api_version, capabilities}``."""
        return self._json("GET", "/v1/version")

    def receipt_key(self) -> Document:
        """``GET /v1/receipt-key``: ``{keyid, public_key_pem}``, the key results are signed with."""
        return self._json("GET", "/v1/receipt-key")

    def openapi(self) -> Document:
        """``GET /v1/openapi.json``: the OpenAPI 3.1 document of every route."""
        return self._json("GET", "/v1/openapi.json")

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return self._call("GET", "/metrics").body.decode("utf-8")

    # -- skill packages ----------------------------------------------------

    def publish(self, bundle: Union[Bundle, bytes]) -> Document:
        """``POST /v1/skill-packages``: publishes a bundle; ``{identity, skills, new_packages, warnings}``."""
        raw = bundle if isinstance(bundle, bytes) else bundle_bytes(bundle)
        return self._json("POST", "/v1/skill-packages", raw)

    def publish_folder(self, folder: str, skill_id: str, revision: int, version: str) -> Document:
        """Builds the bundle of one skill folder (:func:`bundle_folder`) and publishes it."""
        return self.publish(bundle_folder(folder, skill_id, revision, version))

    def skill_packages(self) -> Document:
        """``GET /v1/skill-packages``: ``{skills: [bindings]}``, every published binding."""
        return self._json("GET", "/v1/skill-packages")

    def skill_package(self, identity: str) -> Document:
        """``GET /v1/skill-packages/{identity}``: ``{identity, skills}`` of a published selection."""
        return self._json("GET", f"/v1/skill-packages/{_seg(identity)}")

    # -- environments ------------------------------------------------------

    def environments(self) -> Document:
        """``GET /v1/environments``: ``{environments: [records]}``."""
        return self._json("GET", "/v1/environments")

    def environment(self, env_id: str, env_hash: str) -> Document:
        """``GET /v1/environments/{id}/{hash}``: the record; 404 when absent."""
        return self._json("GET", f"/v1/environments/{_seg(env_id)}/{_seg(env_hash)}")

    def _created(self, body: JsonBody) -> Document:
        doc = self._call("POST", "/v1/environments", body, ok=(201,)).json()
        if not isinstance(doc, dict):
            raise SkillRunnerError(201, "bad_answer", "POST /v1/environments answered with something other than a JSON object")
        return doc

    def publish_environment(self, upload: JsonBody) -> Document:
        """``POST /v1/environments`` with an upload (:func:`environment_upload`): the record."""
        return self._created(upload)

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
        body: Dict[str, Any] = {"id": env_id, "python": lock}
        if interpreter is not None:
            body["interpreter"] = interpreter
        return self._created(body)

    # -- executions --------------------------------------------------------

    def run(self, job: JsonBody) -> Document:
        """``POST /v1/executions``: runs a job and returns its result document.

        Whatever the command did (non-zero exit, timeout, cancel) the result
        is returned; a job refused before launch raises, with the result
        document in ``SkillRunnerError.body``.
        """
        return self._json("POST", "/v1/executions", job)

    def stream(self, job: JsonBody) -> NdjsonStream:
        """``POST /v1/executions`` as NDJSON: iterate the events, ``exit`` last.

        A job refused before launch raises before any event. Closing the
        stream early cancels the execution.
        """
        return self.transport.stream("POST", "/v1/executions", _body(job))

    def run_detached(self, job: JsonBody) -> Document:
        """``POST /v1/executions?wait=false``: admits the job and answers at once.

        ``{execution_id, status: queued|running}`` (202); a retry of a finished
        execution with the same job answers with its result (200). A detached
        execution is never cancelled by a disconnect.
        """
        return self._call("POST", "/v1/executions?wait=false", job, ok=(200, 202)).json()  # type: ignore[no-any-return]

    def run_if_idle(self, job: JsonBody) -> Document:
        """``POST /v1/executions?session_wait=false``: as :meth:`run`, but a job whose
        session's managed workspace is in use is refused (409 ``conflict``) rather
        than queued behind the session's other jobs."""
        return self._json("POST", "/v1/executions?session_wait=false", job)

    def execution(self, execution_id: str, wait: Optional[float] = None) -> Document:
        """``GET /v1/executions/{id}[?wait=]``: the result (``status`` final), or ``{execution_id, status: queued|running}``.

        With ``wait`` (seconds; the daemon caps it at 60) the daemon holds the
        answer until the execution finishes or the time passes.
        """
        path = f"/v1/executions/{_seg(execution_id)}"
        timeout = None
        if wait is not None:
            path += f"?wait={max(0, round(wait * 1000))}ms"
            if self.transport.timeout is not None:
                timeout = self.transport.timeout + wait
        return self._call("GET", path, ok=(200, 202), timeout=timeout).json()  # type: ignore[no-any-return]

    def wait(self, execution_id: str, timeout: Optional[float] = None) -> Document:
        """Long-polls until the execution has a result and returns it.

        Raises ``TimeoutError`` when ``timeout`` seconds pass first (``None``:
        wait as long as it runs).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = LONG_POLL_MAX if deadline is None else min(LONG_POLL_MAX, max(0.0, deadline - time.monotonic()))
            doc = self.execution(execution_id, wait=step)
            if doc.get("status") not in ("queued", "running"):
                return doc
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"execution {execution_id!r} did not finish within {timeout} s; it is {doc.get('status')}")

    def events(self, execution_id: str, after: Optional[int] = None) -> NdjsonStream:
        """``GET /v1/executions/{id}/events[?after=SEQ]``: re-attaches to an execution's events.

        Those recorded (after ``seq`` ``after``), then live ones, ``heartbeat``
        events when quiet, ``exit`` last. Leaving this stream never cancels.
        """
        q = _query({"after": after})
        return self.transport.stream("GET", f"/v1/executions/{_seg(execution_id)}/events{q}")

    def executions(
        self, status: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Document:
        """``GET /v1/executions``: ``{executions, next_cursor}``, newest admitted first."""
        return self._json("GET", "/v1/executions" + _query({"status": status, "limit": limit, "cursor": cursor}))

    def output(self, execution_id: str, path: str) -> bytes:
        """``GET /v1/executions/{id}/outputs/{path}``: the bytes of a kept output, whole."""
        return self._call("GET", self._output_path(execution_id, path)).body

    def save_output(self, execution_id: str, path: str, dest: str, chunk: int = 1 << 16) -> Output:
        """Streams a kept output into the new file ``dest`` (never overwritten), checking its SHA-256.

        Returns ``{"path", "size", "sha256"}`` of what was written; raises
        :class:`SkillRunnerError` for a refused request and ``ValueError`` when
        the bytes do not match the ``ETag`` the daemon sent (the file is removed).
        """
        conn, resp = self.transport._send("GET", self._output_path(execution_id, path), None, None, None)
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
        if expected and digest.hexdigest() != expected:
            os.remove(dest)
            raise ValueError(f"output {path!r} of {execution_id!r}: the bytes received do not match their SHA-256 {expected}")
        return {"path": path, "size": size, "sha256": digest.hexdigest()}

    def save_outputs(self, result: Mapping[str, Any], folder: str) -> List[Output]:
        """Writes every kept output of ``result`` below ``folder`` (made if missing) at its path.

        A path is refused if it would leave ``folder`` (the daemon never lists
        one, but a client should not trust a path to stay put).
        """
        saved: List[Output] = []
        root = os.path.realpath(folder)
        for out in result.get("outputs") or []:
            if "sha256" not in out:
                continue
            rel = str(out["path"])
            parts = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"output path {rel!r} would leave {folder!r}")
            dest = os.path.join(root, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            saved.append(self.save_output(str(result["execution_id"]), rel, dest))
        return saved

    @staticmethod
    def _output_path(execution_id: str, path: str) -> str:
        return f"/v1/executions/{_seg(execution_id)}/outputs/{quote(path, safe='/')}"

    def cancel(self, execution_id: str) -> Document:
        """``DELETE /v1/executions/{id}``: ``{status: "cancelling"}``; 409 ``not_running`` once finished."""
        return self._call("DELETE", f"/v1/executions/{_seg(execution_id)}", ok=(202,)).json()  # type: ignore[no-any-return]

    # -- sessions (docs/skill-host.md) ------------------------------------

    def create_session(
        self,
        skills: Sequence[Mapping[str, Any]],
        tools: Sequence[str],
        workspace: Optional[str] = None,
        environment: Optional[Mapping[str, str]] = None,
    ) -> Document:
        """``POST /v1/sessions``: skills as ``{"name"}`` or bindings, the agent's enabled tools.

        ``workspace="managed"``: the daemon keeps a workspace for the session
        that every job naming it runs in, one at a time (docs/workspaces.md);
        move files with :meth:`upload_file`, :meth:`download_file`,
        :meth:`list_files` and :meth:`delete_file`. ``environment``: the
        environment ``{"id", "hash"}`` every job of the session runs with.
        """
        doc: Dict[str, Any] = {"skills": list(skills), "tools": list(tools)}
        if workspace is not None:
            doc["workspace"] = workspace
        if environment is not None:
            doc["environment"] = dict(environment)
        return self._json("POST", "/v1/sessions", doc)

    def sessions(self) -> Document:
        """``GET /v1/sessions``: ``{sessions: [{id, delivery, created_at, last_used_at, skills}]}``, newest first."""
        return self._json("GET", "/v1/sessions")

    def session(self, session_id: str) -> Document:
        """``GET /v1/sessions/{id}``."""
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}")

    def delete_session(self, session_id: str) -> Document:
        """``DELETE /v1/sessions/{id}``: ``{id, deleted: true}``."""
        return self._json("DELETE", f"/v1/sessions/{_seg(session_id)}")

    def call_tool(self, session_id: str, tool: str, tool_input: Mapping[str, Any]) -> Document:
        """``POST /v1/sessions/{id}/tools/{tool}``: the model's tool input, unchanged.

        Answers ``{content, is_error}``, ready to hand back to the model; a
        fault the model can fix is ``is_error: true``, not an exception.
        """
        return self._json("POST", f"/v1/sessions/{_seg(session_id)}/tools/{_seg(tool)}", tool_input)

    def session_skills(
        self,
        session_id: str,
        query: Optional[str] = None,
        limit: Optional[int] = None,
        category: Optional[str] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills``: list, or find with ``query`` (tools ``list_skills``, ``find_skills``)."""
        q = _query({"query": query, "limit": limit, "category": category})
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}/skills{q}")

    def load_skill(self, session_id: str, name: str) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}``: the body and sections (tools ``Skill``, ``load_skill``)."""
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}/skills/{_seg(name)}")

    def skill_section(
        self,
        session_id: str,
        name: str,
        section: str,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> Document:
        """``GET /v1/sessions/{id}/skills/{name}/sections/{section}`` (tool ``load_skill_section``)."""
        q = _query({"offset": offset, "limit": limit})
        return self._json(
            "GET", f"/v1/sessions/{_seg(session_id)}/skills/{_seg(name)}/sections/{_seg(section)}{q}"
        )

    def session_resource(
        self, session_id: str, path: str, offset: Optional[int] = None, limit: Optional[int] = None
    ) -> Document:
        """``GET /v1/sessions/{id}/resources?path=`` (tool ``read_skill_resource``)."""
        q = _query({"path": path, "offset": offset, "limit": limit})
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}/resources{q}")

    def session_events(self, session_id: str) -> Document:
        """``GET /v1/sessions/{id}/events``: the session's activation log."""
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}/events")

    # -- managed session workspaces (docs/workspaces.md) -------------------

    def upload_file(self, session_id: str, path: str, data: bytes) -> Document:
        """``PUT /v1/sessions/{id}/files/{path}``: writes one file atomically; ``{session, path, size, sha256}``.

        Refused (409 ``conflict``) while a job of the session is admitted; 413
        past the daemon's ``file_body_limit`` or ``workspace_bytes``.
        """
        answer = self.transport.request(
            "PUT",
            f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}",
            bytes(data),
            headers={"Content-Type": "application/octet-stream"},
        )
        if answer.status != 200:
            raise error_of(answer)
        return answer.json()  # type: ignore[no-any-return]

    def download_file(self, session_id: str, path: str) -> bytes:
        """``GET /v1/sessions/{id}/files/{path}``: the bytes of one regular file of the workspace."""
        return self._call("GET", f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}").body

    def list_files(self, session_id: str, prefix: Optional[str] = None) -> Document:
        """``GET /v1/sessions/{id}/files?prefix=``: ``{files: [{path, size}], truncated}``, by path."""
        q = _query({"prefix": prefix})
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}/files{q}")

    def delete_file(self, session_id: str, path: str) -> Document:
        """``DELETE /v1/sessions/{id}/files/{path}``: ``{session, path, deleted: true}``."""
        return self._json("DELETE", f"/v1/sessions/{_seg(session_id)}/files/{_path(path)}")
