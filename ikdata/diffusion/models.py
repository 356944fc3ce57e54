"""A denoiser's weights as content: a digest per tensor, one digest over them, and resolving them again.

The model digest is sha256 over the canonical JSON of ``{tensor name: tensor digest}`` (the store's
tensor digest of each state-dict entry), so it does not depend on file layout, shard boundaries or
key order. A small model is stored in the dataset (its tensors are blobs, deduplicated like any
other); a large one is recorded by repo id, revision and digests, and :func:`resolve_folder` finds
its tensors again in a folder the user names (or a Hugging Face cache snapshot), refusing any tensor
whose digest differs. Torch-free: files are rehashed from their bytes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import orjson

from ikdata.core import schema
from ikdata.core.digest import canonical_json, record_digest
from ikdata.core.errors import RecordError, StoreError
from ikdata.core.paths import PathResolver, UnsafePath
from ikdata.core.store import blob_path, rehash_file, write_atomic

MODELS_DIR = "models"
DEFAULT_STORE_LIMIT = 256 << 20  # models up to this many bytes are stored in the dataset
MAX_RECORD_BYTES = 64 << 20  # a model record names tensors; a billion-weight model's is a few MB


def model_digest(tensor_digests: Mapping[str, str]) -> str:
    """The model digest: sha256 of the canonical JSON of {tensor name: tensor digest}."""
    return record_digest(dict(tensor_digests))


def model_relpath(digest: str) -> str:
    """Where a model record lives in a dataset."""
    return f"{MODELS_DIR}/{digest}.json"


@dataclass(frozen=True)
class ModelRecord:
    """A model record (schemas/model.schema.json) and where it was read from."""

    record: Mapping[str, Any]
    source: str = ""

    @property
    def digest(self) -> str:
        return self.record["digest"]

    @property
    def stored(self) -> bool:
        return bool(self.record["stored"])

    def blob_paths(self) -> dict[str, str]:
        """Tensor name -> dataset-relative blob path (meaningful when the model is stored)."""
        return {name: blob_path(t["digest"]) for name, t in self.record["tensors"].items()}


def write_record(root: str | os.PathLike, record: Mapping[str, Any]) -> str:
    """Write ``models/<digest>.json`` once (content-named, so an existing file is the same); return its path.

    Raises:
        RecordError: the record breaks its schema or its digest does not match its tensors.
    """
    relative = model_relpath(record["digest"])
    problems = schema.check("model", dict(record), path=relative)
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=relative)
    if model_digest({n: t["digest"] for n, t in record["tensors"].items()}) != record["digest"]:
        raise RecordError("digest does not match the tensors' digests", path=relative, pointer="/digest")
    path = Path(root) / relative
    if not path.exists():
        write_atomic(path, [canonical_json(dict(record)) + b"\n"])
    return relative


def record_refusal(relative: object, paths: PathResolver) -> UnsafePath | None:
    """Why a trajectory's ``model.record`` may not be read, or None: the path rule (relative, inside, no
    link out, no FIFO or device) and a model record's place, ``models/<name>.json``."""
    refusal = paths.refusal(relative)
    if refusal is not None:
        return refusal
    assert isinstance(relative, str)
    if not (relative.startswith(MODELS_DIR + "/") and relative.endswith(".json")) or relative.count("/") != 1:
        return UnsafePath(relative, f"model record path {relative!r} is not a model record; expected "
                          f"{MODELS_DIR}/<digest>.json")
    return None


def read_record(root: str | os.PathLike, relative: object, *, paths: PathResolver | None = None,
                where: str | None = None, line: int | None = None, pointer: str | None = None,
                validate: bool = True) -> ModelRecord:
    """Read and schema-check one model record, named by a record (a trajectory's ``model.record``).

    The path obeys the path rule (:func:`record_refusal`) and is opened only as a regular file of at
    most :data:`MAX_RECORD_BYTES`, so a record cannot make ikdata read outside the dataset or without end.
    ``where``/``line``/``pointer`` locate a refused path in the record that named it; ``validate=False``
    skips the schema (gc keeps what a malformed record names; the record may then be any JSON value).

    Raises:
        UnsafePath: the path breaks the rule (located when ``where`` is given).
        RecordError: missing, too large, malformed, or breaking its schema.
    """
    resolver = paths if paths is not None else PathResolver(root)
    refusal = record_refusal(relative, resolver)
    if refusal is not None:
        raise refusal.at(where, line, pointer) if where else refusal
    assert isinstance(relative, str)
    try:  # non-blocking, and the type checked on the descriptor: a FIFO or device put there since never blocks
        fd = os.open(resolver.root / relative, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as exc:
        raise RecordError("model record not found", path=relative) from exc
    except OSError as exc:
        raise RecordError(f"cannot read the model record: {exc.strerror or exc}", path=relative) from exc
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise RecordError("the model record is not a regular file; expected a JSON file", path=relative)
        size = found.st_size
        if size > MAX_RECORD_BYTES:
            raise RecordError(f"model record is {size:,} bytes; expected at most {MAX_RECORD_BYTES:,} (it lists "
                              "tensors by name and digest)", path=relative)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"model record holds more than {MAX_RECORD_BYTES:,} bytes", path=relative)
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc}", path=relative) from exc
    problems = schema.check("model", record, path=relative) if validate else []
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=relative)
    return ModelRecord(record, relative)


def resolve_folder(record: ModelRecord, folder: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """Find every tensor of a (large) model in the safetensors files under ``folder``, checked by digest.

    Returns tensor name -> (file path, key in that file). The folder is a local checkout or a Hugging
    Face cache snapshot (``.../snapshots/<commit>``; ``subfolder`` of the record is looked in first).

    Raises:
        StoreError: a tensor is missing, or its digest differs from the record's (the weights are not
            the ones captured): names the tensor and the file.
    """
    root = Path(folder)
    sub = record.record.get("subfolder")
    search = [root / sub, root] if sub else [root]
    found: dict[str, tuple[str, str, str]] = {}
    for base in search:
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.safetensors")):
            check = rehash_file(path)
            if check.error:
                continue
            for entry, digest in zip(check.entries, check.digests):
                found.setdefault(entry.key, (str(path), entry.key, digest))
        if found:
            break
    resolved: dict[str, tuple[str, str]] = {}
    for name, tensor in record.record["tensors"].items():
        hit = found.get(name)
        if hit is None:
            raise StoreError(f"{folder}: model {record.digest[:12]} needs tensor {name!r}, which no safetensors "
                             "file there holds; name the folder of the captured model", digest=tensor["digest"])
        if hit[2] != tensor["digest"]:
            raise StoreError(f"{hit[0]}: tensor {name!r} has digest {hit[2]}, the captured model's is "
                             f"{tensor['digest']}: these are other weights; refusing them",
                             digest=tensor["digest"], path=hit[0])
        resolved[name] = (hit[0], hit[1])
    return resolved


def hf_cache_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The Hugging Face cache snapshot folder of ``repo_id`` at ``revision`` (offline), or None."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001  not installed, not cached, not a valid id
        return None


__all__ = ["MODELS_DIR", "DEFAULT_STORE_LIMIT", "MAX_RECORD_BYTES", "ModelRecord", "model_digest", "model_relpath",
           "write_record", "record_refusal", "read_record", "resolve_folder", "hf_cache_snapshot"]
