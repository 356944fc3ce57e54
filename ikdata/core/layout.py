"""Creating and repairing dataset folders."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ikdata.core import jsonl, manifest
from ikdata.core.dataset import RECEIPTS
from ikdata.core.errors import UsageError
from ikdata.core.locking import dataset_lock


def init_dataset(path: str | os.PathLike, *, name: str | None = None, description: str | None = None) -> str:
    """Create the folders and the manifest of an empty dataset; return its id.

    Raises:
        UsageError: the folder exists and is not empty, or cannot be created.
    """
    root = Path(path)
    if root.exists() and any(p.name != ".ikdata.lock" for p in root.iterdir()) and not (root / manifest.MANIFEST).exists():
        raise UsageError(f"{root}: folder exists and is not an ikdata dataset; choose an empty folder")
    try:
        for sub in ("definitions", "workloads", "blob/sha256"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{root}: cannot create the dataset: {exc.strerror}") from exc
    with dataset_lock(root, exclusive=True):
        return manifest.write(root, name=name, description=description)


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` did: lines set aside per file, and how a killed import was finished."""

    lines: tuple[jsonl.RepairResult, ...]
    import_recovery: str | None  # "rolled-forward", "discarded", or None

    @property
    def changed(self) -> bool:
        return bool(self.lines or self.import_recovery)


def repair_dataset(path: str | os.PathLike) -> RepairReport:
    """Finish a killed import (roll its journal forward, or drop uncommitted staging), set aside
    torn and malformed lines of every JSONL file, then refresh the manifest."""
    from ikdata.core.journal import recover

    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"{root}: no such dataset folder")
    with dataset_lock(root, exclusive=True):
        recovery = recover(root, locked=True)
        files = sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []
        files += [root / f for f in (RECEIPTS, "results/captures.jsonl", "captures.jsonl") if (root / f).is_file()]
        results = tuple(r for r in (jsonl.repair(f) for f in files) if r.removed_lines)
        if results and (root / manifest.MANIFEST).exists():
            manifest.write(root)
    return RepairReport(results, recovery)
