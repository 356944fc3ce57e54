"""Helpers shared by the sharing tests: tamper with a remote as a broken or hostile store would."""

from __future__ import annotations

import os
from pathlib import Path

import uuid

from ikdata.remote.connect import open_backend
from ikdata.remote.url import parse_url


def tamper(url: str, rel: str, data: bytes | None, *, hub=None) -> None:
    """Replace (or with None, delete) the object ``rel`` of a remote behind ikdata's back."""
    remote = parse_url(url)
    if remote.protocol == "hf":
        hub.tamper(remote.repo_id, rel, data)
        return
    if remote.protocol == "s3":
        import boto3

        bucket, _, prefix = remote.path.partition("/")
        client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
        key = f"{prefix}/{rel}" if prefix else rel
        if data is None:
            client.delete_object(Bucket=bucket, Key=key)
        else:
            client.put_object(Bucket=bucket, Key=key, Body=data)
        return
    backend = open_backend(url)
    path = f"{backend.root}/{rel}"
    if data is None:
        backend.fs.rm_file(path)
    else:
        backend.fs.pipe_file(path, data)


def first_blob(root: Path) -> str:
    """The dataset-relative path of the first blob, in sorted order."""
    blobs = sorted(p.relative_to(root).as_posix() for p in (root / "blob").rglob("*.safetensors"))
    return blobs[0]


def flip_last_byte(path: Path) -> bytes:
    """The bytes of a file with its last byte changed: same size, valid header, wrong digest."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    return bytes(data)


def replay_and_commit(root: Path, tmp_path: Path, definition_record: dict) -> str:
    """Replay a dataset with its definition trusted (a user folder), then commit the report; return the id."""
    import json

    import ikdata
    from ikdata.replay.runner import replay
    from ikdata.core.writer import DatasetWriter

    folder = tmp_path / "trusted-definitions"
    path = folder / definition_record["op_type"] / f"{definition_record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(definition_record))
    result = replay(ikdata.open(root, definitions=[folder]), reuse=False)
    assert result.exit_code == 0, result.summary()
    return DatasetWriter(root).commit()


BACKENDS = ["folder", "file", "memory", "s3", "hf"]


def url_for(backend: str, request, tmp_path: Path) -> str:
    """A fresh, empty remote URL of the given backend."""
    name = uuid.uuid4().hex[:10]
    if backend == "folder":
        return str(tmp_path / f"remote-{name}")
    if backend == "file":
        return f"file://{tmp_path}/remote-{name}"
    if backend == "memory":
        return f"memory://ikdata-tests/{name}"
    if backend == "s3":
        request.getfixturevalue("s3_env")
        return f"s3://ikdata-test/{name}"
    if backend == "hf":
        request.getfixturevalue("hub_env")
        return f"hf://datasets/test-org/ds-{name}"
    raise ValueError(backend)
