"""Environment uploads (docs/daemon.md, "Environments"): a folder's tree as
the upload document, with its environment hash (docs/formats.md,
"Environments") computed here so the daemon can check the claim.

The hash, for each entry in the byte order of its UTF-8 path::

    regular file:  b"f:" (b"x:" when executable) + b"<len(path)>:<path>:<size>:" + bytes
    symlink:       b"l:<len(path)>:<path>:<len(target)>:<target>"

and the SHA-256 of the concatenation, in lowercase hex. Folders are
implied; anything but files, folders and symlinks is refused.
"""

import base64
import hashlib
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

Entry = Tuple[str, Optional[bytes], bool, Optional[str]]
"""``(path, bytes, executable, target)``: bytes for a file, target for a symlink."""


def environment_hash(entries: List[Entry]) -> str:
    """The environment hash of ``entries`` (paths and targets already admissible)."""
    sha = hashlib.sha256()
    for path, data, executable, target in sorted(entries, key=lambda e: e[0].encode("utf-8")):
        p = path.encode("utf-8")
        if target is not None:
            t = target.encode("utf-8")
            sha.update(b"l:%d:%s:%d:%s" % (len(p), p, len(t), t))
        else:
            assert data is not None
            sha.update((b"x:" if executable else b"f:") + b"%d:%s:%d:" % (len(p), p, len(data)))
            sha.update(data)
    return sha.hexdigest()


def tree_entries(folder: str) -> List[Entry]:
    """Every file and symlink below ``folder``, never following a link."""
    out: List[Entry] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out.append((rel, None, False, os.readlink(full)))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    out.append((rel, f.read(), bool(st.st_mode & 0o111), None))
            elif not stat.S_ISDIR(st.st_mode):
                raise ValueError(f"{full} is not a regular file, folder or symlink")
    return out


def environment_upload(
    folder: str,
    env_id: str,
    python: Optional[str] = None,
    interpreter: Optional[str] = None,
) -> Dict[str, Any]:
    """The ``POST /v1/environments`` upload of the tree at ``folder``.

    ``python`` is the text of the hash-pinned lock the tree was built
    from and ``interpreter`` the interpreter it was built for: both are
    recorded (the daemon checks the lock is strict and probes the
    interpreter), and a job using it then gets ``PYTHONPATH``.
    """
    entries = tree_entries(folder)
    doc: Dict[str, Any] = {
        "id": env_id,
        "hash": environment_hash(entries),
        "files": [
            {
                "path": path,
                "content": base64.b64encode(data or b"").decode("ascii"),
                "executable": executable,
            }
            for path, data, executable, target in entries
            if target is None
        ],
        "symlinks": [
            {"path": path, "target": target}
            for path, _, _, target in entries
            if target is not None
        ],
    }
    if python is not None:
        doc["python"] = python
    if interpreter is not None:
        doc["interpreter"] = interpreter
    return doc
