"""Package hash, file hash, set identity and bundles (docs/formats.md).

Pure functions over bytes, plus :func:`read_package`, which reads a skill
folder the way the runner does: regular files only (a symlink, FIFO,
socket or device is an error naming it, never skipped), ``/``-separated
UTF-8 paths, ``SKILL.md`` at the root. The daemon re-checks everything it
receives; these functions exist so that a publisher can name exactly the
bytes it pins (the hash in a job's binding, the identity of a selection)
before it uploads them.
"""

import base64
import hashlib
import json
import os
import stat
from typing import Dict, Iterable, List, Mapping, Sequence, Union

from .types import Binding, Bundle, BundleFile, BundleSkill

MAX_DEPTH = 32
"""Folders may nest at most this deep inside a package."""


def file_hash(data: bytes) -> str:
    """SHA-256 of a file's bytes, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def utf16_order(paths: Iterable[str]) -> List[str]:
    """The paths in package-hash order: by UTF-16 code units, not UTF-8 bytes."""
    return sorted(paths, key=lambda p: p.encode("utf-16-be", "surrogatepass"))


def package_hash(files: Mapping[str, bytes]) -> str:
    """The package hash of ``{path: bytes}``.

    For each file in UTF-16 order: ``<UTF-8 length of path>:<path>:<size>:``
    then its bytes, all into one SHA-256.
    """
    h = hashlib.sha256()
    for path in utf16_order(files):
        data = files[path]
        encoded = path.encode("utf-8")
        h.update(b"%d:%s:%d:" % (len(encoded), encoded, len(data)))
        h.update(data)
    return h.hexdigest()


def identity_text(bindings: Sequence[Binding]) -> str:
    """The compact JSON text whose SHA-256 is the set identity.

    Objects with keys ``hash, id, revision, version`` in that order, sorted
    by id bytes; no whitespace; minimal escaping (non-ASCII as raw UTF-8).
    """
    ordered = sorted(bindings, key=lambda b: b["id"].encode("utf-8"))
    objects = [
        {"hash": b["hash"], "id": b["id"], "revision": int(b["revision"]), "version": b["version"]}
        for b in ordered
    ]
    return json.dumps(objects, ensure_ascii=False, separators=(",", ":"))


def set_identity(bindings: Sequence[Binding]) -> str:
    """The set identity of a selection of frozen bindings."""
    return hashlib.sha256(identity_text(bindings).encode("utf-8")).hexdigest()


class PackageError(ValueError):
    """A folder that is not an admissible package; the message names the file."""


def read_package(folder: Union[str, "os.PathLike[str]"]) -> Dict[str, bytes]:
    """Reads a skill folder as ``{package path: bytes}``.

    Raises :class:`PackageError` for a symlink or any other non-regular
    entry, a name that cannot be a package path, folders nested deeper than
    :data:`MAX_DEPTH`, or a missing ``SKILL.md``.
    """
    root = os.fspath(folder)
    if not os.path.isdir(root):
        raise PackageError(f"{root} is not a folder; give the skill's package folder")
    files: Dict[str, bytes] = {}

    def walk(dir_path: str, prefix: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise PackageError(f"{dir_path}: folders nest deeper than {MAX_DEPTH} levels")
        with os.scandir(dir_path) as entries:
            for entry in entries:
                name = entry.name
                if "\\" in name or name in ("", ".", ".."):
                    raise PackageError(f"{entry.path}: the name cannot be part of a package path")
                rel = prefix + name
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    walk(entry.path, rel + "/", depth + 1)
                elif stat.S_ISREG(mode):
                    with open(entry.path, "rb") as f:
                        files[rel] = f.read()
                else:
                    raise PackageError(
                        f"{entry.path} is not a regular file or folder; a package holds only regular files"
                    )

    walk(root, "", 1)
    if "SKILL.md" not in files:
        raise PackageError(f"{root} has no SKILL.md at its root; every package needs one")
    return files


def bundle_skill(files: Mapping[str, bytes], skill_id: str, revision: int, version: str) -> BundleSkill:
    """One skill of a bundle, files in package-hash order (as ``skill-runner pack`` writes them)."""
    entries: List[BundleFile] = [
        {
            "path": path,
            "size": len(files[path]),
            "hash": file_hash(files[path]),
            "content": base64.b64encode(files[path]).decode("ascii"),
        }
        for path in utf16_order(files)
    ]
    return {
        "id": skill_id,
        "revision": revision,
        "version": version,
        "hash": package_hash(files),
        "files": entries,
    }


def bundle_folder(folder: Union[str, "os.PathLike[str]"], skill_id: str, revision: int, version: str) -> Bundle:
    """A one-skill bundle of a folder."""
    return {"skills": [bundle_skill(read_package(folder), skill_id, revision, version)]}


def bundle_bytes(bundle: Bundle) -> bytes:
    """The bundle as compact JSON, byte for byte what ``skill-runner pack`` prints (without its newline)."""
    return json.dumps(bundle, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def binding_of(skill: BundleSkill) -> Binding:
    """The frozen binding that names a bundle's skill."""
    return {"id": skill["id"], "revision": skill["revision"], "version": skill["version"], "hash": skill["hash"]}


def bindings_of(bundle: Bundle) -> List[Binding]:
    """The frozen bindings of every skill in a bundle."""
    return [binding_of(s) for s in bundle["skills"]]


