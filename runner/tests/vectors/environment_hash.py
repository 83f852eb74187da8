#!/usr/bin/env python3
"""Computes the environment-hash vectors of docs/formats.md, "Environments".

An implementation independent of the Rust one (standard library only),
written from the page's definition:

    for each entry, in the byte order of its UTF-8 path:
      regular file:  b"f:" (b"x:" when executable)
                     + b"<len(path)>:<path>:<size>:" + bytes
      symlink:       b"l:<len(path)>:<path>:<len(target)>:<target>"
    hash = lowercase hex SHA-256 of the concatenation

and the admissibility rules for paths and symlink targets. Cases with
"refused" must be refused by an implementation, for the reason given.

Usage: python3 environment_hash.py > environment-hash.json
"""

import base64
import hashlib
import json
import sys

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64")


def path_refusal(path):
    if path == "":
        return "empty path"
    if path.startswith("/"):
        return "absolute path"
    if "\\" in path or "\0" in path:
        return "backslash or NUL in path"
    for seg in path.split("/"):
        if seg in ("", ".", ".."):
            return "empty, '.' or '..' segment in path"
    return None


def target_refusal(path, target):
    if target == "" or "\0" in target:
        return "empty target or NUL in target"
    if target.startswith("/"):
        segs = target[1:].split("/")
        if any(s in ("", ".", "..") for s in segs):
            return "absolute target with an empty, '.' or '..' segment"
        if not any(target == p or target.startswith(p + "/") for p in SYSTEM):
            return "absolute target outside the read-only system"
        return None
    climbs, named = 0, False
    for seg in target.split("/"):
        if seg in ("", "."):
            return "empty or '.' segment in target"
        if seg == "..":
            if named:
                return "'..' after a name in target"
            climbs += 1
        else:
            named = True
    if climbs > path.count("/"):
        return "target leaves the tree"
    return None


def refusal(entries):
    paths = {e["path"] for e in entries}
    for e in entries:
        r = path_refusal(e["path"])
        if r:
            return r
        parts = e["path"].split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in paths:
                return "a file is also a folder"
        if e["kind"] == "symlink":
            r = target_refusal(e["path"], e["target"])
            if r:
                return r
        elif e["kind"] != "file":
            return "not a regular file, folder or symlink"
    return None


def env_hash(entries):
    sha = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e["path"].encode("utf-8")):
        p = e["path"].encode("utf-8")
        if e["kind"] == "file":
            data = e["bytes"]
            kind = b"x" if e["exec"] else b"f"
            sha.update(kind + b":%d:" % len(p) + p + b":%d:" % len(data))
            sha.update(data)
        else:
            t = e["target"].encode("utf-8")
            sha.update(b"l:%d:" % len(p) + p + b":%d:" % len(t) + t)
    return sha.hexdigest()


def f(path, data, exec=False):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return {"path": path, "kind": "file", "exec": exec, "bytes": data}


def link(path, target):
    return {"path": path, "kind": "symlink", "target": target}


def other(path, kind):
    return {"path": path, "kind": kind}


CASES = [
    ("files", [
        f("python/pkg/__init__.py", "from .core import run\n"),
        f("python/pkg/core.py", "def run():\n    return 42\n"),
        f("python/pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n"),
    ]),
    ("exec-bits", [
        f("bin/tool", "#!/bin/sh\necho tool\n", exec=True),
        f("bin/tool.txt", "#!/bin/sh\necho tool\n"),
    ]),
    ("symlinks", [
        f("python/lib/real.so", b"\x7fELF\x02\x01\x01\x00fake", exec=True),
        link("python/lib/alias.so", "real.so"),
        link("bin/python3", "/usr/bin/python3"),
        link("bin/real", "../python/lib/real.so"),
        link("lib", "/usr/lib"),
        link("python/up", ".."),
    ]),
    ("unicode-paths", [
        # Byte order: U+00E9 (c3 a9) < U+FFFD (ef bf bd) < U+1F600 (f0 9f 98 80);
        # the package hash's UTF-16 order would put the emoji before U+FFFD.
        f("données/é.txt", "accent\n"),
        f("\ufffd.txt", "replacement\n"),
        f("\U0001f600.txt", "smile\n"),
        f("B", "upper\n"),
        f("a-b", "dash\n"),
        f("a/b", "slash\n"),
        f("a_b", "underscore\n"),
    ]),
    ("empty-file", [
        f("python/pkg/py.typed", b""),
        f("python/pkg/__init__.py", b""),
    ]),
    ("one-file", [f("x", "x")]),
    # The worked example of docs/formats.md.
    ("worked-example", [
        f("bin/tool", "#!/bin/sh\n", exec=True),
        link("bin/python3", "/usr/bin/python3"),
    ]),
]

REFUSED = [
    ("symlink-escapes", [f("x", "x"), link("python/link", "../../etc/passwd")]),
    ("symlink-dotdot-after-name", [f("x", "x"), link("a/link", "b/../../x")]),
    ("symlink-to-etc", [f("x", "x"), link("link", "/etc/passwd")]),
    ("symlink-to-root", [f("x", "x"), link("link", "/")]),
    ("symlink-to-usr-dotdot", [f("x", "x"), link("link", "/usr/../etc")]),
    ("path-dotdot", [f("a/../b", "x")]),
    ("file-is-a-folder", [f("a", "x"), f("a-b", "y"), f("a/b", "z")]),
    ("fifo", [f("x", "x"), other("pipe", "fifo")]),
]


def render(entry):
    out = {"path": entry["path"], "kind": entry["kind"]}
    if entry["kind"] == "file":
        out["exec"] = entry["exec"]
        out["size"] = len(entry["bytes"])
        out["content_base64"] = base64.b64encode(entry["bytes"]).decode("ascii")
    elif entry["kind"] == "symlink":
        out["target"] = entry["target"]
    return out


def main():
    cases = []
    for name, entries in CASES:
        assert refusal(entries) is None, name
        order = sorted((e["path"] for e in entries), key=lambda p: p.encode("utf-8"))
        cases.append({
            "name": name,
            "entries": [render(e) for e in entries],
            "order": order,
            "hash": env_hash(entries),
        })
    refused = []
    for name, entries in REFUSED:
        why = refusal(entries)
        assert why is not None, name
        refused.append({
            "name": name,
            "entries": [render(e) for e in entries],
            "refused": why,
        })
    doc = {
        "about": (
            "Test vectors for the environment hash of docs/formats.md, "
            "computed by runner/tests/vectors/environment_hash.py, an "
            "implementation independent of the runner's. Each case: entries "
            "(files as base64 with their executable bit, symlinks with their "
            "target); order is the order in which entries enter the hash. "
            "Refused cases must be refused, for the reason given."
        ),
        "cases": cases,
        "refused": refused,
    }
    json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
