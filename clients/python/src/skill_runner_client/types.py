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
