"""The local dataset a push or a local clone reads: its manifest, checked against the files first."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ikdata.core import manifest as manifest_mod
from ikdata.core.errors import UsageError
from ikdata.core.manifest import dataset_id
from ikdata.core.store import BlobStore


@dataclass(frozen=True)
class LocalSnapshot:
    """The local dataset as its manifest describes it (checked against the files)."""

    root: Path
    manifest: dict[str, Any]
    data: bytes
    dataset_id: str
    blobs: dict[str, int]


def local_snapshot(root: str | os.PathLike) -> LocalSnapshot:
    """Read the local manifest and check it still describes the files.

    Raises:
        UsageError: no dataset, no manifest, or changes the manifest does not list.
    """
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such dataset folder")
    path = root / manifest_mod.MANIFEST
    if not path.is_file():
        raise UsageError(f"{root}: has no manifest ({manifest_mod.MANIFEST}); run 'ikdata manifest {root}' first")
    data = path.read_bytes()
    manifest = manifest_mod.read(root)
    assert manifest is not None
    blobs = dict(BlobStore(root).iter_blobs())
    actual = manifest_mod.build(root)
    if actual["files"] != manifest["files"] or actual["blobs"] != manifest["blobs"]:
        changed = sorted(p for p in set(actual["files"]) | set(manifest["files"])
                         if actual["files"].get(p) != manifest["files"].get(p))
        what = ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "") if changed else "the blob set"
        raise UsageError(f"{root}: the manifest does not describe the files ({what} changed); "
                         f"run 'ikdata manifest {root}' to commit the changes, then push again")
    return LocalSnapshot(root, manifest, data, dataset_id(manifest), blobs)


__all__ = ["LocalSnapshot", "local_snapshot"]
