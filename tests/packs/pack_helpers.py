"""Helpers of the pack tests: a dataset with small blobs, packed."""

from __future__ import annotations

import json
from pathlib import Path

from ikdata.core.packs import PACK_DIR


def pack_files(root: Path) -> tuple[list[Path], list[Path]]:
    """(pack files, index files) under blob/packs/, sorted."""
    folder = root / PACK_DIR
    packs = sorted(folder.glob("*.safetensors"))
    return packs, sorted(folder.glob("*.index.json"))


def loose_blobs(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "blob" / "sha256").rglob("*.safetensors"))


def read_index(path: Path) -> dict:
    return json.loads(path.read_text())


def write_index(path: Path, document: dict) -> None:
    path.write_text(json.dumps(document))
