"""Content digests: the one place where canonical bytes are hashed.

A tensor's digest is sha256 over ``json.dumps([dtype, shape])`` (torch dtype names,
default separators, as the seed capture script wrote them) followed by the
tensor's contiguous raw bytes. Records and files hash their canonical bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def tensor_prefix(dtype: str, shape: tuple[int, ...] | list[int]) -> bytes:
    """The bytes hashed before a tensor's data."""
    return json.dumps([dtype, list(shape)]).encode()


def tensor_digest(dtype: str, shape: tuple[int, ...] | list[int], data: Any) -> str:
    """Hex digest of a tensor given its torch dtype name, shape and raw bytes (any buffer)."""
    h = hashlib.sha256(tensor_prefix(dtype, shape))
    h.update(data)
    return h.hexdigest()


def canonical_json(record: Any) -> bytes:
    """Canonical JSON bytes of a record: sorted keys, no spaces, UTF-8."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_digest(record: Any) -> str:
    """Hex sha256 of a record's canonical JSON."""
    return hashlib.sha256(canonical_json(record)).hexdigest()


def bytes_digest(data: bytes) -> str:
    """Hex sha256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


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
