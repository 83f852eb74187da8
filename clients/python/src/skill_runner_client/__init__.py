"""Client of the skill-runner daemon (``skill-runner serve``), standard library only:
:class:`Client`, and :class:`AsyncClient` for ``asyncio``.

>>> from skill_runner_client import Client, bundle_folder, bindings_of
>>> c = Client(socket_path="/var/lib/skill-runner/run/skill-runner.sock")
>>> bundle = bundle_folder("examples/skills/hello", "hello", 1, "1.0.0")
>>> c.publish(bundle)                                   # doctest: +SKIP
>>> c.run({"argv": ["sh", "/skills/hello/scripts/greet.sh"], "skills": bindings_of(bundle)})  # doctest: +SKIP

See ``clients/README.md`` for every method and the route it maps to.
"""

from .bundle import (
    PackageError,
    binding_of,
    bindings_of,
    bundle_bytes,
    bundle_folder,
    bundle_skill,
    file_hash,
    identity_text,
    package_hash,
    read_package,
    set_identity,
    utf16_order,
)
from .aio import AsyncClient, AsyncNdjsonStream, AsyncTransport
from .client import Client, Request, Routes, input_file
from .environment import environment_hash, environment_upload
from .errors import (
    BadRequest,
    Busy,
    Conflict,
    Gone,
    NotFound,
    ServerError,
    SkillRunnerError,
    Unauthorized,
)
from .receipt import ReceiptError, verify_receipt
from .retry import retrying, retrying_async
from .transport import NdjsonStream, Transport
from .types import (
    Answer,
    Binding,
    Bundle,
    BundleFile,
    BundleSkill,
    Document,
    Event,
    InputFile,
    Job,
    Output,
    Progress,
    Publication,
    Result,
    ResultError,
    Session,
    StoredFile,
    ToolAnswer,
    Version,
)

__all__ = [
    "Answer",
    "AsyncClient",
    "AsyncNdjsonStream",
    "AsyncTransport",
    "BadRequest",
    "Busy",
    "Conflict",
    "Gone",
    "NotFound",
    "Progress",
    "Publication",
    "Request",
    "Result",
    "ResultError",
    "Routes",
    "ServerError",
    "Session",
    "StoredFile",
    "ToolAnswer",
    "Unauthorized",
    "Version",
    "retrying",
    "retrying_async",
    "Binding",
    "Bundle",
    "BundleFile",
    "BundleSkill",
    "Client",
    "Document",
    "Event",
    "InputFile",
    "Job",
    "Output",
    "NdjsonStream",
    "PackageError",
    "ReceiptError",
    "SkillRunnerError",
    "Transport",
    "binding_of",
    "bindings_of",
    "bundle_bytes",
    "bundle_folder",
    "bundle_skill",
    "environment_hash",
    "environment_upload",
    "file_hash",
    "identity_text",
    "input_file",
    "package_hash",
    "read_package",
    "set_identity",
    "utf16_order",
    "verify_receipt",
]

__version__ = "0.1.0"
