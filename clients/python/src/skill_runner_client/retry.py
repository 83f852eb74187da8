"""Retrying a refusal the daemon said to retry: :class:`Busy` and its ``Retry-After``.

A :class:`Busy` refusal (429 ``busy``, 503 ``shutting_down``/``disk_full``,
500 ``store_failed`` with ``Retry-After``) is answered before anything is
admitted, so sending the same request again is safe, a job included: it is
never run twice. :func:`retrying` (and :func:`retrying_async` for the
:class:`AsyncClient`) sends it again after the ``Retry-After`` the daemon
gave, at most ``attempts`` times in all and never past ``total`` seconds;
then the last :class:`Busy` is raised. Any other error is raised at once.
"""

import asyncio
import time
from typing import Awaitable, Callable, Optional, TypeVar

from .errors import Busy

T = TypeVar("T")


def _pause(e: Busy, attempt: int, attempts: int, started: float, total: float, now: float) -> Optional[float]:
    """How long to wait before the next attempt, or ``None`` when the bounds say stop."""
    if attempt >= attempts:
        return None
    wait = max(0.0, e.retry_after)
    if now - started + wait > total:
        return None
    return wait


def _check(attempts: int, total: float) -> None:
    if attempts < 1:
        raise ValueError(f"attempts is {attempts}; give 1 or more (1 sends the request once)")
    if total < 0:
        raise ValueError(f"total is {total} s; give 0 or more seconds")


def retrying(
    call: Callable[[], T],
    attempts: int = 5,
    total: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Calls ``call()`` until it does not raise :class:`Busy`.

    ``retrying(lambda: client.run(job))``: waits each ``Retry-After`` between
    attempts, at most ``attempts`` calls and ``total`` seconds of waiting and
    calling; re-raises the last :class:`Busy` when either bound is reached.
    """
    _check(attempts, total)
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Busy as e:
            wait = _pause(e, attempt, attempts, started, total, clock())
            if wait is None:
                raise
            sleep(wait)


async def retrying_async(
    call: Callable[[], Awaitable[T]],
    attempts: int = 5,
    total: float = 30.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """:func:`retrying` for coroutines: ``await retrying_async(lambda: client.run(job))``."""
    _check(attempts, total)
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except Busy as e:
            wait = _pause(e, attempt, attempts, started, total, clock())
            if wait is None:
                raise
            await sleep(wait)
