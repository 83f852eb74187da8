"""The one exception type of the client: a daemon refusal, with its HTTP status.

Every refusal of the daemon carries ``{"error": {"kind", "message"}}``: the
error document of a route, or the result document of a job refused before
launch (whose ``error`` has the same shape). Both become a
:class:`SkillRunnerError`; ``body`` keeps the whole decoded answer, so a
rejected job's result document stays reachable.
"""

from typing import Any, Optional


class SkillRunnerError(Exception):
    """The daemon answered with an error status (4xx or 5xx).

    ``status`` is the HTTP status, ``kind`` the daemon's error kind
    (``bad_job``, ``not_found``, ``busy``, ...; docs/daemon.md), ``message``
    its one-sentence explanation, ``body`` the decoded JSON answer (or
    ``None`` when it was not JSON), ``retry_after`` the ``Retry-After``
    header in seconds when the daemon sent one (``busy``, ``shutting_down``).
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
            after = float(retry_after)
        except ValueError:
            after = None
    return SkillRunnerError(status, kind, message, body, after)
