"""Content digests: the one place where canonical bytes are hashed.

A tensor's digest is sha256 over ``json.dumps([dtype, shape])`` (torch dtype names,
default separators, as the seed capture script wrote them) followed by the
tensor's contiguous raw bytes. Records and files hash their canonical bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def tensor_prefix(dtype: str, shape: tuple[int, ...] | list[int]) -> bytes:
    """The bytes hashed before a tensor's data."""
    return json.dumps([dtype, list(shape)]).encode()


def tensor_digest(dtype: str, shape: tuple[int, ...] | list[int], data: Any) -> str:
    """Hex digest of a tensor given its torch dtype name, shape and raw bytes (any buffer)."""
    h = hashlib.sha256(tensor_prefix(dtype, shape))
    h.update(data)
    return h.hexdigest()


NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}  # the tagged strings, as ``float:<name>``


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float as the tagged string ``"float:inf"``, ``"float:-inf"`` or
    ``"float:nan"``: the one encoding JSON records hold them in (JSON has no such numbers; a writer that made
    them ``null`` would disagree with a digest taken over the float)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "float:nan" if value != value else ("float:inf" if value > 0 else "float:-inf")
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def from_finite_json(value: Any) -> Any:
    """The inverse of :func:`finite_json`: the tagged strings back to floats."""
    if isinstance(value, str) and value.startswith("float:") and value[6:] in NONFINITE:
        return NONFINITE[value[6:]]
    if isinstance(value, dict):
        return {k: from_finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_finite_json(v) for v in value]
    return value


def canonical_json(record: Any) -> bytes:
    """Canonical JSON bytes of a record: sorted keys, no spaces, UTF-8; a non-finite float is hashed as its
    tagged string (:func:`finite_json`), so a record and its written form have one digest."""
    try:
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(finite_json(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


def record_digest(record: Any) -> str:
    """Hex sha256 of a record's canonical JSON."""
    return hashlib.sha256(canonical_json(record)).hexdigest()


def bytes_digest(data: bytes) -> str:
    """Hex sha256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def file_prefix_digest(path: Any, size: int | None = None, *, block: int = 1 << 20) -> tuple[int, str]:
    """(bytes hashed, hex sha256) of a file's first ``size`` bytes (all of it when None), read a block at a
    time: what an import journal checks a JSONL file grew from, without holding the file."""
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as stream:
        while size is None or done < size:
            chunk = stream.read(block if size is None else min(block, size - done))
            if not chunk:
                break
            h.update(chunk)
            done += len(chunk)
    return done, h.hexdigest()


def parts_digest(parts: Any) -> str:
    """Hex sha256 over byte chunks (any buffers) in order: for digests defined by a sequence of parts,
    such as the noise recipe's (:mod:`ikdata.diffusion.noise`)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()


def line_prefix_digests(data: bytes) -> Any:
    """Yield (length, hex sha256 of ``data[:length]``) for the empty prefix and each prefix that ends
    just before or just after a newline, in one pass: which committed version a JSONL file grew from
    by appends (:mod:`ikdata.core.layout`)."""
    h = hashlib.sha256()
    yield 0, h.hexdigest()
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        h.update(data[start:end])
        yield end, h.hexdigest()
        h.update(b"\n")
        yield end + 1, h.hexdigest()
        start = end + 1
