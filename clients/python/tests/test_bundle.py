"""Package hash, set identity and bundles against the vectors and `skill-runner pack`."""

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import HELLO, VECTORS
from daemon import runner_bin

from skill_runner_client import (
    PackageError,
    bundle_bytes,
    bundle_folder,
    bundle_skill,
    file_hash,
    package_hash,
    read_package,
    set_identity,
    utf16_order,
)

V: Dict[str, Any] = json.loads(VECTORS.read_text())


@pytest.mark.parametrize("case", V["packages"], ids=[c["name"] for c in V["packages"]])
def test_package_vectors(case: Dict[str, Any]) -> None:
    files = {f["path"]: base64.b64decode(f["content_base64"]) for f in case["files"]}
    for f in case["files"]:
        assert file_hash(files[f["path"]]) == f["hash"]
    assert utf16_order(files) == case["utf16_order"]
    assert package_hash(files) == case["package_hash"]


@pytest.mark.parametrize("case", V["sets"], ids=[c["name"] for c in V["sets"]])
def test_set_identity_vectors(case: Dict[str, Any]) -> None:
    assert set_identity(case["bindings"]) == case["identity"]


def test_the_empty_selection_is_the_hash_of_an_empty_array() -> None:
    assert set_identity([]) == "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"


def test_bundle_is_byte_for_byte_what_pack_prints() -> None:
    packed = subprocess.run(
        [runner_bin(), "pack", str(HELLO), "--id", "hello", "--revision", "1", "--version", "1.0.0"],
        check=True, capture_output=True,
    ).stdout
    assert bundle_bytes(bundle_folder(HELLO, "hello", 1, "1.0.0")) + b"\n" == packed


def test_minimal_bundle_matches_the_documented_text() -> None:
    case = next(c for c in V["packages"] if c["name"] == "minimal")
    files = {f["path"]: base64.b64decode(f["content_base64"]) for f in case["files"]}
    text = bundle_bytes({"skills": [bundle_skill(files, "minimal", 1, "1.0.0")]}).decode()
    assert text == (
        '{"skills":[{"id":"minimal","revision":1,"version":"1.0.0","hash":"8836d9e71f42c21633175675a1ca46ad530141a3142c799355823bbe147044bf",'
        '"files":[{"path":"SKILL.md","size":68,"hash":"1d5db76dbae74ed024b3edb0fa0f87f11ea32208f7606c5c9b70e6eb0962b158",'
        '"content":"LS0tCm5hbWU6IG1pbmltYWwKZGVzY3JpcHRpb246IE9ubHkgaW5zdHJ1Y3Rpb25zLgotLS0KRG8gdGhlIHRoaW5nLgo="}]}]}'
    )


def test_a_folder_reads_as_its_nested_files(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_bytes(b"x")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_bytes(b"deep")
    (tmp_path / "empty").mkdir()
    assert read_package(tmp_path) == {"SKILL.md": b"x", "a/b/c.txt": b"deep"}


def test_a_symlink_is_refused_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_bytes(b"x")
    os.symlink("/etc/passwd", tmp_path / "link")
    with pytest.raises(PackageError, match="link is not a regular file"):
        read_package(tmp_path)


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_bytes(b"x")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(PackageError, match="pipe is not a regular file"):
        read_package(tmp_path)


def test_a_folder_without_skill_md_is_refused(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_bytes(b"x")
    with pytest.raises(PackageError, match="no SKILL.md"):
        read_package(tmp_path)
