"""Shapes of the documents the daemon takes and gives (docs/formats.md).

The shapes a client *builds* (bindings, bundles, input files) are
``TypedDict``: plain ``dict`` values you write yourself.

The documents the daemon *answers* with are frozen dataclasses named as in
the TypeScript client's ``types.ts`` (:class:`Result`, :class:`Progress`,
:class:`Output`, :class:`ResultError`, :class:`Event`, :class:`ToolAnswer`,
:class:`Session`, :class:`Publication`, :class:`StoredFile`,
:class:`Version`): the keys a caller most often reads are typed attributes
(``result.stdout``, ``result.exit_code``), and nothing the daemon sent is
lost. Each keeps the whole decoded document in ``raw`` and the keys it does
not know in ``extra`` (a newer daemon's fields), and each is also a
read-only ``Mapping`` over ``raw``, so ``result["stdout"]``,
``result.get("receipt")`` and ``dict(result)`` work as they did when
answers were plain ``dict``. Answers without a class here (listings,
records) stay :data:`Document`.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Type, TypedDict, TypeVar, Union

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


Job = Dict[str, Any]
"""A job document (docs/formats.md, "The job"); only ``argv`` is required."""


class _InputFileRequired(TypedDict):
    path: str
    content: str


class InputFile(_InputFileRequired, total=False):
    """One entry of a job's ``files`` (docs/files.md): ``content`` in base64, ``mode`` octal text."""

    mode: str


D = TypeVar("D", bound="Answer")


@dataclass(frozen=True, eq=False)
class Answer(Mapping[str, Any]):
    """The base of every typed answer: a read-only mapping over ``raw``.

    Equality is the documents' (``result == {"status": ...}`` compares
    ``raw``); ``extra`` holds the keys this version of the client has no
    attribute for.
    """

    raw: Document = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls: Type[D], doc: Any) -> D:
        """Builds the answer from a decoded JSON object; a missing key takes its attribute's default."""
        if isinstance(doc, Answer):
            doc = doc.raw
        if not isinstance(doc, dict):
            raise TypeError(f"{cls.__name__} is made from a JSON object, not {type(doc).__name__}")
        values: Dict[str, Any] = {"raw": doc}
        for f in dataclasses.fields(cls):
            if f.name != "raw" and f.name in doc:
                values[f.name] = cls._convert(f.name, doc[f.name])
        return cls(**values)

    @classmethod
    def _convert(cls, name: str, value: Any) -> Any:
        """A nested document's own class; the value itself otherwise."""
        del name
        return value

    @property
    def extra(self) -> Document:
        """The keys of ``raw`` that have no attribute here (a newer daemon's fields)."""
        known = {f.name for f in dataclasses.fields(self)}
        return {k: v for k, v in self.raw.items() if k not in known}

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


@dataclass(frozen=True, eq=False)
class ResultError(Answer):
    """A result's ``error``: ``{kind, message}``, the message one sentence saying what to change."""

    kind: str = ""
    message: str = ""


@dataclass(frozen=True, eq=False)
class Output(Answer):
    """One entry of a result's ``outputs`` (docs/files.md).

    ``sha256`` set: the file was kept (download it with
    :meth:`Client.output`); ``content``: its bytes in base64 when small;
    ``truncated``: the bytes are not in the result; ``error``: why it was not kept.
    """

    path: str = ""
    size: int = 0
    sha256: Optional[str] = None
    content: Optional[str] = None
    truncated: bool = False
    error: Optional[str] = None


@dataclass(frozen=True, eq=False)
class Result(Answer):
    """The result document of an execution (docs/formats.md, "The result")."""

    execution_id: str = ""
    status: str = ""
    """``exited``, ``signaled``, ``timed_out``, ``limit_exceeded``, ``cancelled``, ``failed`` or ``rejected``."""
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int = 0
    started_at: str = ""
    finished_at: str = ""
    sandbox: str = ""
    skills: Optional[Document] = None
    limits: Document = field(default_factory=dict)
    usage: Document = field(default_factory=dict)
    error: Optional[ResultError] = None
    warnings: List[str] = field(default_factory=list)
    outputs: Optional[List[Output]] = None
    """Present when the job named ``outputs``."""
    outputs_note: Optional[str] = None
    receipt: Optional[Document] = None

    @classmethod
    def _convert(cls, name: str, value: Any) -> Any:
        if name == "error" and isinstance(value, dict):
            return ResultError.from_json(value)
        if name == "outputs" and isinstance(value, list):
            return [Output.from_json(o) for o in value if isinstance(o, dict)]
        return value


@dataclass(frozen=True, eq=False)
class Progress(Answer):
    """``{execution_id, status}`` of an execution that has not finished (``queued`` or ``running``)."""

    execution_id: str = ""
    status: str = ""


@dataclass(frozen=True, eq=False)
class Event(Answer):
    """One NDJSON event of an execution's stream.

    ``event`` is ``started`` (with ``execution_id``), ``stdout``/``stderr``
    (with ``data``), ``heartbeat``, or ``exit`` (with ``result``, last).
    """

    event: str = ""
    seq: Optional[int] = None
    execution_id: Optional[str] = None
    data: Optional[str] = None
    result: Optional[Result] = None

    @classmethod
    def _convert(cls, name: str, value: Any) -> Any:
        if name == "result" and isinstance(value, dict):
            return Result.from_json(value)
        return value


@dataclass(frozen=True, eq=False)
class ToolAnswer(Answer):
    """A tool call's answer, ``{content, is_error}``, ready to hand back to the model."""

    content: str = ""
    is_error: bool = False


@dataclass(frozen=True, eq=False)
class Session(Answer):
    """A skill-host session (docs/skill-host.md)."""

    id: str = ""
    delivery: str = ""
    skills: List[Any] = field(default_factory=list)
    """Bindings when created or shown; names in a listing's entries."""
    prompt: Optional[Document] = None
    """``{skills, text}``: what to put in the model's system prompt."""
    tools: List[Document] = field(default_factory=list)
    """The tool definitions to hand to the model."""
    created_at: Optional[str] = None
    last_used_at: Optional[str] = None


@dataclass(frozen=True, eq=False)
class Publication(Answer):
    """What ``POST /v1/skill-packages`` answered: the set identity, its bindings, how many packages were new."""

    identity: str = ""
    skills: List[Document] = field(default_factory=list)
    new_packages: int = 0
    warnings: List[Any] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class StoredFile(Answer):
    """One file written into a session's workspace: ``{session, path, size, sha256}``."""

    session: str = ""
    path: str = ""
    size: int = 0
    sha256: str = ""


@dataclass(frozen=True, eq=False)
class Version(Answer):
    """``GET /v1/version``: the daemon's name and version, its API version and capabilities."""

    name: str = ""
    version: str = ""
    api_version: str = ""
    capabilities: Document = field(default_factory=dict)


def result_or_progress(doc: Any) -> Union[Result, Progress]:
    """A finished execution's :class:`Result`, or the :class:`Progress` of one still queued or running."""
    if isinstance(doc, dict) and doc.get("status") in ("queued", "running"):
        return Progress.from_json(doc)
    return Result.from_json(doc)

