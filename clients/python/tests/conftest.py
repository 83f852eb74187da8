"""Fixtures: a real daemon on a temp Unix socket, shared by a module's tests."""

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from daemon import REPO, Daemon  # noqa: E402

from skill_runner_client import Client  # noqa: E402

HELLO = REPO / "examples" / "skills" / "hello"
VECTORS = REPO / "runner" / "tests" / "vectors" / "package-hash.json"


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def client(daemon: Daemon) -> Client:
    assert daemon.socket_path is not None
    return Client(socket_path=daemon.socket_path)
