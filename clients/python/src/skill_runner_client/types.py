"""Shapes of the documents the daemon takes and gives (docs/formats.md).

Only the shapes a client builds are spelled out as ``TypedDict``; the
documents the daemon answers with (results, sessions, listings) are plain
``dict`` values decoded from JSON (:data:`Document`), because the daemon
may add keys in later versions and a client must keep them.
"""

from typing import Any, Dict, List, TypedDict

Document = Dict[str, Any]
"""A JSON object the daemon answered with."""


class Binding(TypedDict):
    """A frozen binding: exactly one package."""

    id: str
    revision: int
    version: str
    hash: str


class BundleFile(TypedDict):
    path: str
    size: int
    hash: str
    content: str


class BundleSkill(TypedDict):
    id: str
    revision: int
    version: str
    hash: str
    files: List[BundleFile]


class Bundle(TypedDict):
    skills: List[BundleSkill]


Event = Dict[str, Any]
"""One NDJSON event: ``{"event": "started" | "stdout" | "stderr" | "exit" | ..., ...}``."""

Job = Dict[str, Any]
"""A job document (docs/formats.md, "The job"); only ``argv`` is required."""


class _InputFileRequired(TypedDict):
    path: str
    content: str


class InputFile(_InputFileRequired, total=False):
    """One entry of a job's ``files`` (docs/files.md): ``content`` in base64, ``mode`` octal text."""

    mode: str


class Output(TypedDict, total=False):
    """One entry of a result's ``outputs`` (docs/files.md).

    ``sha256`` present: the file was kept (download it with
    :meth:`Client.output`); ``content``: its bytes in base64 when small;
    ``truncated``: the bytes are not in the result; ``error``: why it was not kept.
    """

    path: str
    size: int
    sha256: str
    content: str
    truncated: bool
    error: str
