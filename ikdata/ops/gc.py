"""Garbage collection: delete the blobs no workload row or receipt references.

gc holds the dataset's exclusive lock, so it never runs while a capture adds
(``DatasetWriter.add`` stores blobs and appends rows under the shared lock) or an
import applies. It first finishes an interrupted import (:func:`ikdata.core.journal.recover`).
A blob younger than the grace period is spared, for writers that store blobs
before taking the lock. A dataset with unreadable rows is refused: what they
reference is unknown, so nothing could be deleted safely.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ikdata.core import manifest
from ikdata.core.blob_set import BlobPathSet, BlobPathSetBuilder
from ikdata.core.dataset import Dataset
from ikdata.core.errors import ProblemsFound, UsageError
from ikdata.core.layout import clear_gc_mark, mark_gc
from ikdata.core.locking import dataset_lock
from ikdata.core.packs import PACK_DIR

DEFAULT_GRACE_MINUTES = 10.0


class GcLeftDamage(ProblemsFound):
    """gc finished, but left damaged packs or copies as they are (nothing relied on them).

    Attributes:
        result: what gc did (:class:`GcResult`); its manifest is written.
    """

    def __init__(self, problems, summary: str, result: GcResult) -> None:
        super().__init__(problems, summary)
        self.result = result


@dataclass(frozen=True)
class GcResult:
    """What gc deleted (or, with ``dry_run``, would delete)."""

    deleted: tuple[str, ...]
    bytes_freed: int
    spared_young: tuple[str, ...]
    kept: int
    dry_run: bool
    dataset_id: str | None

    def to_dict(self) -> dict:
        return {"deleted": list(self.deleted), "bytes_freed": self.bytes_freed,
                "spared_young": list(self.spared_young), "kept": self.kept, "dry_run": self.dry_run,
                "dataset_id": self.dataset_id}


def referenced_blobs(root: Path) -> BlobPathSet:
    """Dataset-relative paths of every blob a row, a receipt or a family's own record (a trajectory) names, normalised
    (a row that names a blob by a roundabout path still keeps it; validate reports the path), in about
    32 bytes per distinct blob (:class:`~ikdata.core.blob_set.BlobPathSet`).

    Raises:
        ProblemsFound: a row or receipt file has unreadable lines.
    """
    ds = Dataset.open(root)
    unreadable: list = []
    found = BlobPathSet.build(ds.iter_blob_references(unreadable))
    problems = unreadable + ds.problems  # unreadable lines, record files refused by the path rule
    if unreadable:
        raise ProblemsFound(problems, f"{root}: gc refused: {len(problems)} unreadable line(s) might reference "
                            f"blobs; run 'ikdata repair {root}' first")
    if problems:
        raise ProblemsFound(problems, f"{root}: gc refused: {len(problems)} record file(s) are links that leave "
                            "the dataset, so what they reference is unknown; replace them with the files themselves")
    return found


def collect_garbage(path: str | os.PathLike, *, dry_run: bool = False,
                    grace_minutes: float = DEFAULT_GRACE_MINUTES) -> GcResult:
    """Delete unreferenced blobs older than the grace period and refresh the manifest.

    Args:
        path: an ikdata dataset.
        dry_run: report what would be deleted; delete nothing.
        grace_minutes: spare blobs modified less than this long ago.

    Example:
        >>> result = collect_garbage("shared/gemm", grace_minutes=0)
        >>> result.bytes_freed
    """
    from ikdata.core.journal import recover

    root = Path(path)
    if not (root / "blob").is_dir() and not (root / manifest.MANIFEST).is_file():
        raise UsageError(f"{root}: not an ikdata dataset (no blob/ folder, no ikdata.json)")
    if grace_minutes < 0:
        raise UsageError(f"--grace must be >= 0 minutes, got {grace_minutes}")
    from ikdata.ops.pack import collect_packs, refuse_disagreeing_indexes

    with dataset_lock(root, exclusive=True):
        if not dry_run:
            recover(root, locked=True)
        used = referenced_blobs(root)
        if (root / PACK_DIR).is_dir():  # a pack index gc cannot rely on: nothing is deleted (repair rebuilds it)
            refuse_disagreeing_indexes(root)
        cutoff = time.time() - grace_minutes * 60
        deleted, young = [], []
        freed = kept = 0
        kept_loose = BlobPathSetBuilder()
        for rel, size, _ in Dataset.open(root).store.scan_blobs():  # loose blobs; packs below
            if rel in used:
                kept += 1
                kept_loose.add(rel)
                continue
            target = root / rel
            if target.stat().st_mtime > cutoff:
                young.append(rel)
                continue
            deleted.append(rel)
            freed += size
        if not dry_run:
            # The marker first: a gc killed mid-deletion is finished by 'ikdata repair' (core.layout).
            mark_gc(root, deleted)
            for rel in deleted:
                (root / rel).unlink(missing_ok=True)
        problems = ()
        if (root / PACK_DIR).is_dir():  # packed blobs (ikdata.core.packs): whole packs go, mixed ones are rewritten
            packs = collect_packs(root, used, kept_loose.finish(), cutoff, dry_run=dry_run)
            deleted += packs.deleted
            freed += packs.freed
            kept += packs.kept
            young += packs.young
            problems = packs.problems
        if not dry_run:
            dataset_id = manifest.write(root)
            clear_gc_mark(root)
        else:
            dataset_id = manifest.current_id(root)
    result = GcResult(tuple(sorted(deleted)), freed, tuple(sorted(young)), kept, dry_run, dataset_id)
    if problems:
        verb = "would delete" if dry_run else "deleted"
        raise GcLeftDamage(list(problems), f"{root}: gc {verb} {len(result.deleted)} unreferenced file(s) and kept "
                           f"{kept}, but left {len(problems)} damaged pack(s) or copies as they are (nothing was "
                           f"deleted relying on them); restore them from where the dataset came from "
                           f"('ikdata validate --deep {root}' names every one)", result)
    return result


__all__ = ["GcLeftDamage", "GcResult", "collect_garbage", "referenced_blobs", "DEFAULT_GRACE_MINUTES"]
