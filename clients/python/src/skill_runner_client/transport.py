"""HTTP/1.1 to the daemon over a Unix socket or TCP, with ``http.client``.

One connection per request: the client holds no connection between calls,
so one :class:`Transport` may be used from many threads at once, and a
request that is abandoned (a stream closed early) takes nothing else down.
Over TCP every request carries ``Authorization: Bearer <token>``; over the
socket only when a token is given (a daemon with a token wants it there too).
"""

import http.client
import json
import socket
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from .errors import SkillRunnerError, error_from_answer
from .types import Event


class UnixHTTPConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` whose socket is ``AF_UNIX`` at ``path``."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Answer:
    """A whole answer: status, headers and the body's bytes."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Transport:
    """Where the daemon listens and how to authenticate.

    Give ``socket_path`` (a Unix socket) or ``url`` (``http://host:port``).
    ``timeout`` bounds connecting and each socket read, in seconds; ``None``
    waits as long as the daemon takes (a blocking run lasts as long as its
    command).
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path (a Unix socket) or url (http://host:port)")
        self.socket_path = socket_path
        self.token = token
        self.timeout = timeout
        self._host = "localhost"
        self._port = 80
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
                raise ValueError(f"url {url!r} is not of the form http://host:port (the daemon speaks plain HTTP)")
            self._host = parts.hostname
            self._port = parts.port or 80
            if token is None:
                raise ValueError("a TCP daemon requires a bearer token; give token=")

    def connection(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self.socket_path is not None:
            return UnixHTTPConnection(self.socket_path, timeout=t)
        return http.client.HTTPConnection(self._host, self._port, timeout=t)

    def _send(
        self,
        method: str,
        path: str,
        body: Optional[bytes],
        headers: Optional[Mapping[str, str]],
        timeout: Optional[float],
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self.connection(timeout)
        all_headers: Dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        if self.token is not None:
            all_headers["Authorization"] = f"Bearer {self.token}"
        all_headers.update(headers or {})
        try:
            conn.request(method, path, body=body, headers=all_headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def request(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Answer:
        """Sends one request and reads the whole answer; any status returns."""
        conn, resp = self._send(method, path, body, headers, timeout)
        try:
            return Answer(resp.status, resp.headers, resp.read())
        finally:
            conn.close()

    def stream(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> "NdjsonStream":
        """Sends one request whose 200 answer is NDJSON; raises on any other.

        A non-200 answer (a job refused before launch, an unknown id) is read
        whole and raised as :class:`SkillRunnerError`.
        """
        h = {"Accept": "application/x-ndjson"}
        h.update(headers or {})
        conn, resp = self._send(method, path, body, h, timeout)
        if resp.status != 200:
            try:
                raw = resp.read()
            finally:
                conn.close()
            raise error_of(Answer(resp.status, resp.headers, raw))
        return NdjsonStream(conn, resp)


class NdjsonStream:
    """The events of a streamed execution, one :class:`Event` a line.

    Iterate it (it ends after the ``exit`` event, when the daemon closes the
    stream); use it as a context manager or call :meth:`close` to leave
    early. Leaving a stream of ``POST /v1/executions`` early disconnects,
    which cancels that execution (docs/daemon.md, Cancellation).
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp

    def __iter__(self) -> Iterator[Event]:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    event = json.loads(line)
                    if not isinstance(event, dict):
                        raise ValueError(f"the daemon sent an event that is not a JSON object: {line[:200]!r}")
                    yield Event.from_json(event)
        finally:
            self.close()

    def close(self) -> None:
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> "NdjsonStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def error_of(answer: Answer) -> SkillRunnerError:
    """The :class:`SkillRunnerError` of a non-2xx answer."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    return error_from_answer(answer.status, body, answer.body, answer.headers.get("Retry-After"))
