"""Helpers of the attack suite: remotes whose manifest lies, journals that reach outside, rows that point away."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import orjson

from remote_helpers import tamper

BACKENDS = ("folder", "s3")


def remote_url(backend: str, request, tmp_path: Path) -> str:
    name = uuid.uuid4().hex[:10]
    if backend == "folder":
        return str(tmp_path / f"remote-{name}")
    if backend == "memory":
        return f"memory://ikdata-security/{name}"
    if backend == "hf":
        request.getfixturevalue("hub_env")
        return f"hf://datasets/test-org/security-{name}"
    request.getfixturevalue("s3_env")
    return f"s3://ikdata-test/{name}"


def read_remote_manifest(url: str) -> dict:
    from ikdata.remote.connect import open_backend

    with open_backend(url) as backend:
        return orjson.loads(backend.read_manifest().data)


def add_remote_files(url: str, extra: dict[str, bytes]) -> None:
    """Make the remote's manifest list ``extra`` (path -> bytes) too, as a hostile remote would."""
    from ikdata.remote.backend import file_object

    manifest = read_remote_manifest(url)
    for path, data in extra.items():
        digest = hashlib.sha256(data).hexdigest()
        if "://" not in url:  # a folder remote: a new object needs its folder
            (Path(url) / file_object(digest)).parent.mkdir(parents=True, exist_ok=True)
        tamper(url, file_object(digest), data)
        manifest["files"][path] = digest
    tamper(url, "ikdata.json", json.dumps(manifest, sort_keys=True).encode())


def rows(root: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((root / "workloads").rglob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def rewrite_rows(root: Path, change) -> None:
    """Apply ``change(row) -> row`` to every row of every workloads file, in place."""
    for path in sorted((root / "workloads").rglob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        path.write_text("".join(json.dumps(change(r)) + "\n" for r in lines))


def trusted_folder(tmp_path: Path) -> Path:
    """A --definitions folder holding the test GEMM (so its reference may run)."""
    from foundation_helpers import gemm_definition_record, write_definition

    folder = tmp_path / "trusted-definitions"
    write_definition(folder, gemm_definition_record())
    return folder
