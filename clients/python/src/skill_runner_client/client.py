"""The client: one method per daemon route (docs/daemon.md, docs/skill-host.md).

Methods return the daemon's JSON answer decoded (``dict``), and raise
:class:`SkillRunnerError` for every 4xx/5xx answer; connection failures
stay ``OSError``. Nothing is cached or retried: a method is one request.
"""

import json
from typing import Any, Dict, Mapping, Optional, Sequence, Union
from urllib.parse import quote, urlencode

from .bundle import bundle_bytes, bundle_folder
from .errors import SkillRunnerError
from .transport import Answer, NdjsonStream, Transport, error_of
from .types import Bundle, Document, Job

JsonBody = Union[Mapping[str, Any], bytes]


def _body(doc: JsonBody) -> bytes:
    if isinstance(doc, bytes):
        return doc
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _seg(value: str) -> str:
    """One path segment, percent-encoded (``/`` included)."""
    return quote(value, safe="")


def _query(params: Mapping[str, Optional[Union[str, int]]]) -> str:
    kept = {k: str(v) for k, v in params.items() if v is not None}
    return "?" + urlencode(kept) if kept else ""


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

    def skill_package(self, identity: str) -> Document:
        """``GET /v1/skill-packages/{identity}``: ``{identity, skills}`` of a published selection."""
        return self._json("GET", f"/v1/skill-packages/{_seg(identity)}")

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

    def execution(self, execution_id: str) -> Document:
        """``GET /v1/executions/{id}``: the result (``status`` final), or ``{execution_id, status: queued|running}``."""
        return self._call("GET", f"/v1/executions/{_seg(execution_id)}", ok=(200, 202)).json()  # type: ignore[no-any-return]

    def cancel(self, execution_id: str) -> Document:
        """``DELETE /v1/executions/{id}``: ``{status: "cancelling"}``; 409 ``not_running`` once finished."""
        return self._call("DELETE", f"/v1/executions/{_seg(execution_id)}", ok=(202,)).json()  # type: ignore[no-any-return]

    # -- sessions (docs/skill-host.md) ------------------------------------

    def create_session(self, skills: Sequence[Mapping[str, Any]], tools: Sequence[str]) -> Document:
        """``POST /v1/sessions``: skills as ``{"name"}`` or bindings, the agent's enabled tools."""
        return self._json("POST", "/v1/sessions", {"skills": list(skills), "tools": list(tools)})

    def session(self, session_id: str) -> Document:
        """``GET /v1/sessions/{id}``."""
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}")

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
