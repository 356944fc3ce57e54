"""``pack`` and ``unpack``: move small loose blobs into packs and back, never losing one on a kill.

pack, under the dataset's exclusive lock: read each small loose blob once and check its bytes
against its name; write a pack and fsync it, then publish its index (write + fsync + rename),
and only then delete the loose copies. A kill before the index leaves an unpublished pack that
``gc`` removes; a kill after it leaves loose copies that the next ``pack`` deletes. unpack is
the reverse: write every loose blob (verified), then remove the index (unpublishing), then the
pack. Descriptors and the manifest's blob set do not change either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ikdata.core.errors import ProblemsFound, StoreError, UsageError
from ikdata.core.faults import checkpoint
from ikdata.core.locking import dataset_lock
from ikdata.core.pack_writer import write_pack
from ikdata.core.packs import (
    DEFAULT_PACK_BYTES,
    DEFAULT_THRESHOLD,
    PackedBlob,
    PackItem,
    load_packs,
    read_packed,
)
from ikdata.core.problems import Problem
from ikdata.core.safetensors_format import canonical_problem
from ikdata.core.store import (
    BlobStore,
    blob_path,
    digest_from_path,
    rehash_file,
    write_atomic,
)


@dataclass(frozen=True)
class PackResult:
    """What ``pack`` did: packs written, blobs moved into them, loose copies removed, bytes packed."""

    packs: tuple[str, ...]
    packed: int
    removed: int
    bytes: int
    skipped: tuple[Problem, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"packs": list(self.packs), "packed": self.packed, "loose_removed": self.removed,
                "bytes": self.bytes, "skipped": [p.to_dict() for p in self.skipped]}


@dataclass(frozen=True)
class UnpackResult:
    """What ``unpack`` did: loose blobs written, packs removed."""

    written: int
    packs_removed: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"written": self.written, "packs_removed": list(self.packs_removed)}


def _dataset(path: str | os.PathLike) -> Path:
    root = Path(path)
    if not (root / "blob").is_dir() and not (root / "ikdata.json").is_file():
        raise UsageError(f"{root}: not an ikdata dataset (no blob/ folder, no ikdata.json)")
    return root


def _refuse_bad_indexes(root: Path) -> None:
    found = load_packs(root)
    if found.problems:
        raise ProblemsFound(list(found.problems), f"{root}: {len(found.problems)} pack index(es) are unreadable; "
                            f"run 'ikdata repair {root}' first")


def pack_dataset(path: str | os.PathLike, *, threshold: int = DEFAULT_THRESHOLD,
                 pack_bytes: int = DEFAULT_PACK_BYTES) -> PackResult:
    """Pack every loose canonical blob smaller than ``threshold`` bytes, about ``pack_bytes`` per pack.

    A loose blob that does not hash to its name, or is not canonical, is left loose and reported
    in ``skipped`` (``validate --deep`` says more). A loose blob already packed is only removed.

    Example:
        >>> pack_dataset("shared/decode", threshold=1 << 20).packed
    """
    root = _dataset(path)
    if threshold < 1 or pack_bytes < 1:
        raise UsageError(f"--threshold and --pack-bytes must be positive, got {threshold} and {pack_bytes}")
    with dataset_lock(root, exclusive=True):
        _refuse_bad_indexes(root)
        store = BlobStore(root)
        already = load_packs(root).blobs
        candidates, redundant = [], []
        for rel, size, link in store.scan_blobs():
            digest = digest_from_path(rel)
            if link or digest is None or rel != blob_path(digest) or size >= threshold:
                continue
            (redundant if digest in already else candidates).append(rel)
        skipped: list[Problem] = []
        written, moved, total = [], 0, 0
        batch: list[tuple[str, PackItem]] = []
        size = 0

        def flush() -> None:
            nonlocal batch, size, moved, total
            if not batch:
                return
            pack, _ = write_pack(root, [item for _, item in batch])
            written.append(pack)
            for rel, item in batch:
                (root / rel).unlink(missing_ok=True)
                checkpoint("pack-loose-removed")
            moved += len(batch)
            total += size
            batch, size = [], 0

        for rel in sorted(candidates):
            item = _read_loose(root, rel, skipped)
            if item is None:
                continue
            batch.append((rel, item))
            size += len(item.data)
            if size >= pack_bytes:
                flush()
        flush()
        for rel in redundant:
            (root / rel).unlink(missing_ok=True)
        _fsync_folders(root, candidates + redundant)
    return PackResult(tuple(written), moved, moved + len(redundant), total, tuple(skipped))


def _read_loose(root: Path, rel: str, skipped: list[Problem]) -> PackItem | None:
    check = rehash_file(root / rel)
    expected = digest_from_path(rel)
    if check.error:
        skipped.append(Problem(rel, f"unreadable blob left loose: {check.error}", code="bad-blob"))
        return None
    reason = canonical_problem(check.entries)
    if reason or check.digests[0] != expected:
        why = reason or f"content digest is {check.digests[0]}, not its name"
        skipped.append(Problem(rel, f"left loose: {why}; run 'ikdata validate --deep'", code="digest-mismatch"))
        return None
    entry = check.entries[0]
    with open(root / rel, "rb") as stream:
        stream.seek(entry.start)
        data = stream.read(entry.nbytes)
    if len(data) != entry.nbytes:
        skipped.append(Problem(rel, "changed while being packed; left loose", code="bad-blob"))
        return None
    return PackItem(expected, entry.dtype, tuple(entry.shape), data)


def _fsync_folders(root: Path, rels: list[str]) -> None:
    for folder in sorted({os.path.dirname(rel) for rel in rels}):
        try:
            fd = os.open(root / folder, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def unpack_dataset(path: str | os.PathLike) -> UnpackResult:
    """Write every packed tensor back as a canonical loose blob (verified), then remove the packs.

    Raises:
        ProblemsFound: an index is unreadable, or a tensor in a pack does not verify; the packs it
            concerns are kept (nothing lost), the others are unpacked.
    """
    root = _dataset(path)
    with dataset_lock(root, exclusive=True):
        _refuse_bad_indexes(root)
        found = load_packs(root)
        problems: list[Problem] = []
        written = 0
        removed = []
        for index, blobs in found.listed.items():
            ok = True
            for blob in blobs:
                try:
                    written += _write_loose(root, blob)
                except StoreError as exc:  # BlobCorrupted: named, kept
                    ok = False
                    problems.append(Problem(blob.pack, str(exc).split(": ", 1)[-1], code="bad-pack"))
            if not ok:
                continue
            checkpoint("unpack-loose-written")
            (root / index).unlink()
            checkpoint("unpack-index-removed")
            (root / blobs[0].pack if blobs else root / index).unlink(missing_ok=True)
            removed.append(blobs[0].pack if blobs else index)
        for orphan in found.orphans:  # unpublished packs: their tensors are loose already
            (root / orphan).unlink(missing_ok=True)
    if problems:
        raise ProblemsFound(problems, f"{root}: {len(problems)} packed tensor(s) did not verify; their packs were "
                            "kept")
    return UnpackResult(written, tuple(removed))


def _write_loose(root: Path, blob: PackedBlob) -> int:
    target = root / blob_path(blob.digest)
    if target.is_file():
        return 0
    data = read_packed(root, blob)
    write_atomic(target, blob.loose_bytes(data))
    return 1


@dataclass(frozen=True)
class PackGarbage:
    """gc's share of packs: files deleted (or to delete), bytes freed, packed tensors kept, packs spared."""

    deleted: tuple[str, ...]
    freed: int
    kept: int
    young: tuple[str, ...]


def collect_packs(root: Path, used: set[str], kept_loose: set[str], cutoff: float, *,
                  dry_run: bool) -> PackGarbage:
    """Remove what no referenced tensor needs from the packs (gc holds the exclusive lock).

    A pack whose referenced tensors are all kept in an earlier pack goes whole (a loose copy does
    not count: packs are the preferred form, and ``pack`` removes loose copies of packed tensors):
    its index first (unpublishing it), then the pack. A pack holding some referenced tensors and
    some garbage is rewritten with only the referenced ones (published before the old one goes). An
    unpublished pack (no index) goes when each tensor in it is unreferenced or stored elsewhere.
    Packs modified after ``cutoff`` are spared, as young loose blobs are.
    """
    found = load_packs(root)
    if found.problems:  # an unreadable index might be the only copy of a referenced tensor
        raise ProblemsFound(list(found.problems), f"{root}: gc refused: {len(found.problems)} pack index(es) are "
                            f"unreadable; run 'ikdata repair {root}' first")
    kept: set[str] = set()
    deleted: list[str] = []
    young: list[str] = []
    freed = kept_count = 0
    for index, blobs in found.listed.items():
        pack = blobs[0].pack if blobs else index.removesuffix(".index.json") + ".safetensors"
        needed = [b for b in blobs if blob_path(b.digest) in used and b.digest not in kept]
        if len(needed) == len(blobs) and blobs:
            kept.update(b.digest for b in blobs)
            kept_count += len(blobs)
            continue
        if os.stat(root / pack).st_mtime > cutoff:
            young.append(pack)
            kept.update(b.digest for b in blobs)
            continue
        freed += sum(b.loose_size for b in blobs) - sum(b.loose_size for b in needed)
        deleted += [index, pack]
        kept_count += len(needed)
        if dry_run:
            kept.update(b.digest for b in needed)
            continue
        if needed:
            items = [PackItem(b.digest, b.dtype, b.shape, read_packed(root, b)) for b in needed]
            write_pack(root, items)
            checkpoint("gc-pack-rewritten")
        kept.update(b.digest for b in needed)
        (root / index).unlink(missing_ok=True)
        checkpoint("gc-pack-unpublished")
        (root / pack).unlink(missing_ok=True)
    kept |= {d for d in (digest_from_path(r) for r in kept_loose) if d}
    for orphan in found.orphans:
        try:
            from ikdata.core.packs import index_from_pack

            tensors = index_from_pack(root / orphan)["tensors"]
        except StoreError:  # an unreadable unpublished pack: no index ever named it, nothing reads it
            tensors = {}
        if any(blob_path(d) in used and d not in kept for d in tensors):
            continue  # the only copy of a referenced tensor: keep it ('ikdata repair' publishes it)
        if os.stat(root / orphan).st_mtime > cutoff:
            young.append(orphan)
            continue
        deleted.append(orphan)
        freed += os.stat(root / orphan).st_size
        if not dry_run:
            (root / orphan).unlink(missing_ok=True)
    return PackGarbage(tuple(deleted), freed, kept_count, tuple(young))


__all__ = ["PackGarbage", "PackResult", "UnpackResult", "collect_packs", "pack_dataset", "unpack_dataset"]
