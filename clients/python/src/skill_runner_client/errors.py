"""The client's exceptions: a daemon refusal, with its HTTP status, one class per family.

Every refusal of the daemon carries ``{"error": {"kind", "message"}}``: the
error document of a route, or the result document of a job refused before
launch (whose ``error`` has the same shape). Each becomes a
:class:`SkillRunnerError` subclass chosen by its status, so a caller
catches the family it can act on (:class:`NotFound`, :class:`Busy`, ...)
and still reads the daemon's exact ``kind``. ``body`` keeps the whole
decoded answer, so a rejected job's result document stays reachable.
"""

from typing import Any, Optional, Type


class SkillRunnerError(Exception):
    """The daemon answered with an error status (4xx or 5xx).

    ``status`` is the HTTP status, ``kind`` the daemon's error kind
    (``bad_job``, ``not_found``, ``busy``, ...; docs/daemon.md), ``message``
    its one-sentence explanation (the name the daemon's JSON uses, and the
    TypeScript client's too), ``body`` the decoded JSON answer (or ``None``
    when it was not JSON), ``retry_after`` the ``Retry-After`` header in
    seconds when the daemon sent one. ``str(e)`` is ``"STATUS KIND: message"``.
    """

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        body: Any = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message
        self.body = body
        self.retry_after = retry_after


class BadRequest(SkillRunnerError):
    """400, 405, 408, 413, 415, 422: the request itself must change (``bad_job``, ``hash_mismatch``, ...)."""


class Unauthorized(SkillRunnerError):
    """401 ``unauthorized`` (no or a wrong token) and 403 ``path_not_allowed``."""


class NotFound(SkillRunnerError):
    """404: an unknown execution, session, skill set or route (``not_found``, ``not_in_store``)."""


class Conflict(SkillRunnerError):
    """409: ``conflict``, ``execution_id_in_use``, ``not_running``; the state must change first."""


class Gone(SkillRunnerError):
    """410 ``result_dropped``: the result left retention; the record remains."""


class Busy(SkillRunnerError):
    """429, or a 5xx with ``Retry-After``: try again in ``retry_after`` seconds.

    ``busy`` (``Retry-After: 1``), ``shutting_down``, ``disk_full``,
    ``store_failed``. Nothing was admitted, so the same request may be sent
    again; :func:`skill_runner_client.retrying` does that.
    """

    retry_after: float

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        body: Any = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(status, kind, message, body, 1.0 if retry_after is None else retry_after)


class ServerError(SkillRunnerError):
    """Another 5xx: the host failed (``internal``, ``staging_failed``, ``sandbox_unavailable``); see its log."""


_BY_STATUS = {
    400: BadRequest,
    405: BadRequest,
    408: BadRequest,
    413: BadRequest,
    415: BadRequest,
    422: BadRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: Busy,
}


def error_class(status: int, retry_after: Optional[float]) -> Type[SkillRunnerError]:
    """The family of a refusal: by its status, a 5xx with ``Retry-After`` is :class:`Busy`."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return Busy if retry_after is not None else ServerError
    if 400 <= status < 500:
        return BadRequest
    return SkillRunnerError


def error_from_answer(status: int, body: Any, raw: bytes, retry_after: Optional[str]) -> SkillRunnerError:
    """Builds the error for a non-2xx answer, whatever its body looked like."""
    kind = "http_error"
    message = raw.decode("utf-8", "replace").strip() or f"the daemon answered HTTP {status}"
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            kind = str(err.get("kind", kind))
            message = str(err.get("message", message))
    after: Optional[float] = None
    if retry_after is not None:
        try:
            after = max(0.0, float(retry_after))
        except ValueError:
            after = None
    return error_class(status, after)(status, kind, message, body, after)
