"""Helpers for the fault and attack tests of issue 9: a validated dataset (captured, replayed by
hand, committed), and header surgery on blobs. Built on tests/merge/merge_helpers.py."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "merge"))

from merge_helpers import (GEMM_NAME, capture, read_jsonl, replay_by_hand, rows_by_uuid,  # noqa: E402,F401
                           tree_digest, write_report)

ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"


def make_validated(root: Path, rows: int = 3, **kwargs) -> Path:
    """A captured dataset with a passing replay report and a manifest that lists it."""
    from ikdata.core.writer import DatasetWriter

    capture(root, rows=rows, **kwargs)
    replay_by_hand(root)
    DatasetWriter(root).commit()
    return root


def recommit(root: Path) -> None:
    """Rebuild the manifest after editing files, as an attacker (or a careless user) would."""
    from ikdata.core import manifest

    manifest.write(root)


def first_rows(root: Path) -> list[dict]:
    return read_jsonl(root / ROWS)


def blob_of(root: Path, line: int = 1, name: str = "A") -> Path:
    return root / first_rows(root)[line - 1]["workload"]["inputs"][name]["path"]


def split(data: bytes) -> tuple[str, bytes]:
    """(header text, data bytes) of a safetensors file."""
    (length,) = struct.unpack("<Q", data[:8])
    return data[8:8 + length].decode(), data[8 + length:]


def join(header: str | bytes, data: bytes) -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw)) + raw + data


def rewrite(path: Path, edit: Callable[[str, bytes], bytes]) -> None:
    """Replace a blob's bytes with ``edit(header_text, data)`` (the file made writable first)."""
    header, data = split(path.read_bytes())
    path.chmod(0o644)
    path.write_bytes(edit(header, data))


def header_dict(header: str) -> dict:
    return json.loads(header)
