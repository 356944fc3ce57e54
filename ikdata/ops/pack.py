"""``pack`` and ``unpack``: move small loose blobs into packs and back, never losing one on a kill.

pack, under the dataset's exclusive lock: read each small loose blob once and check its bytes
against its name; write a pack and fsync it, then publish its index (write + fsync + rename),
rehash the published pack, and only then delete the loose copies. A kill before the index leaves
an unpublished pack that ``gc`` removes; a kill after it leaves loose copies that the next
``pack`` deletes once their packed copy verifies. unpack is the reverse: write every loose blob
(or keep one already there), rehash it, then remove the index (unpublishing), then the pack.
No copy is deleted before the copy that stays is verified (:class:`~ikdata.core.packs.PackVerifier`).
Descriptors and the manifest's blob set do not change either way.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ikdata.core.errors import ProblemsFound, StoreError, UsageError
from ikdata.core.faults import checkpoint
from ikdata.core.locking import dataset_lock
from ikdata.core.pack_writer import write_pack
from ikdata.core.packs import (
    DEFAULT_PACK_BYTES,
    DEFAULT_THRESHOLD,
    INDEX_SUFFIX,
    PACK_SUFFIX,
    PackedBlob,
    PackError,
    PackItem,
    PackVerifier,
    check_pack,
    index_from_pack,
    load_packs,
    read_index,
    read_loose,
    read_packed,
)
from ikdata.core.problems import Problem
from ikdata.core.store import (
    BlobStore,
    blob_path,
    digest_from_path,
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


def refuse_disagreeing_indexes(root: Path) -> None:
    """gc's first step, before it deletes anything: every index readable, and agreeing with its pack's
    header (no entry the pack lacks, no key that is not its member's, no member left out). An index
    that does not would make gc judge the wrong tensors garbage and commit a blob set that
    ``repair`` later contradicts; ``repair`` rebuilds it from the pack.

    Raises:
        ProblemsFound: naming each such index; nothing was deleted.
    """
    found = load_packs(root)
    problems = list(found.problems)
    verifier = PackVerifier(root, found)
    for index in found.listed:
        problems += [p for p in verifier.header(index) if p.code == "bad-pack-index"]
    if problems:
        raise ProblemsFound(problems, f"{root}: gc refused, nothing was deleted: {len(problems)} pack index "
                            f"problem(s) (unreadable, or disagreeing with its pack); run 'ikdata repair {root}' to "
                            "rebuild the indexes from their packs, then gc again")


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
        found = load_packs(root)
        verifier = PackVerifier(root, found)
        candidates, redundant = [], []
        for rel, size, link in store.scan_blobs():
            digest = digest_from_path(rel)
            if link or digest is None or rel != blob_path(digest) or size >= threshold:
                continue
            (redundant if digest in found.blobs else candidates).append(rel)
        skipped: list[Problem] = []
        written, moved, total = [], 0, 0
        batch: list[tuple[str, PackItem]] = []
        size = 0

        def flush() -> None:
            nonlocal batch, size, moved, total
            if not batch:
                return
            pack, index = write_pack(root, [item for _, item in batch])
            written.append(pack)
            check = check_pack(root, index, read_index(root, index), deep=True)  # the copy that stays, rehashed
            good = set(check.verified) if not check.problems else set()
            for rel, item in batch:
                if item.digest not in good:
                    skipped.append(Problem(rel, f"kept loose: its new packed copy in {pack} did not verify when read "
                                           "back; run 'ikdata validate --deep'", code="bad-pack"))
                    continue
                (root / rel).unlink(missing_ok=True)
                checkpoint("pack-loose-removed")
                moved += 1
                total += len(item.data)
            batch, size = [], 0

        for rel in sorted(candidates):
            item, why = read_loose(root, digest_from_path(rel))
            if item is None:
                skipped.append(Problem(rel, f"left loose: {why}; run 'ikdata validate --deep'",
                                       code="digest-mismatch"))
                continue
            batch.append((rel, item))
            size += len(item.data)
            if size >= pack_bytes:
                flush()
        flush()
        removed = 0
        for rel in sorted(redundant):  # a loose copy of a packed tensor goes only when the packed copy verifies
            blob = found.blobs[digest_from_path(rel)]
            why = verifier.copy(blob)
            if why is not None:
                skipped.append(Problem(rel, f"kept loose: its packed copy in {blob.pack} cannot be relied on: {why}",
                                       code="bad-pack"))
                continue
            (root / rel).unlink(missing_ok=True)
            removed += 1
        _fsync_folders(root, candidates + redundant)
    return PackResult(tuple(written), moved, moved + removed, total, tuple(skipped))


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

    A loose copy already there is kept when it verifies and replaced by the packed bytes when it
    does not; either way the loose copy is rehashed before its pack goes.

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
        for orphan in found.orphans:  # unpublished packs: gone once every tensor in them is loose and verified
            try:
                document = index_from_pack(root / orphan)
            except PackError:
                continue  # unreadable: nothing reads it; gc removes it
            try:
                for digest, t in document["tensors"].items():
                    written += _write_loose(root, PackedBlob(digest, orphan, "", t["dtype"], tuple(t["shape"]),
                                                             t["offset"], t["length"]))
            except StoreError as exc:
                problems.append(Problem(orphan, str(exc).split(": ", 1)[-1], code="bad-pack"))
                continue
            (root / orphan).unlink(missing_ok=True)
    if problems:
        raise ProblemsFound(problems, f"{root}: {len(problems)} packed tensor(s) did not verify; their packs were "
                            "kept")
    return UnpackResult(written, tuple(removed))


def _write_loose(root: Path, blob: PackedBlob) -> int:
    """Make the loose copy of a packed tensor good: keep one that verifies, else write it from the
    verified packed bytes; then rehash it. Returns 1 when a file was written.

    Raises:
        BlobCorrupted: the packed copy does not verify, or the loose copy written does not read back.
    """
    from ikdata.core.errors import BlobCorrupted

    target = root / blob_path(blob.digest)
    if read_loose(root, blob.digest)[0] is not None:
        return 0
    data = read_packed(root, blob)
    write_atomic(target, blob.loose_bytes(data))
    _, why = read_loose(root, blob.digest)
    if why is not None:
        raise BlobCorrupted(f"{blob.pack}: the loose copy of tensor {blob.digest} written from it does not read "
                            f"back ({why}); the pack was kept", path=blob.pack, digest=blob.digest)
    return 1


@dataclass(frozen=True)
class PackGarbage:
    """gc's share of packs: files deleted (or to delete), bytes freed, packed tensors kept, packs spared,
    and the damage found that made gc leave a pack or a copy as it is."""

    deleted: tuple[str, ...]
    freed: int
    kept: int
    young: tuple[str, ...]
    problems: tuple[Problem, ...] = ()


def collect_packs(root: Path, used: Collection[str], kept_loose: Collection[str], cutoff: float, *,
                  dry_run: bool) -> PackGarbage:
    """Remove what no referenced tensor needs from the packs (gc holds the exclusive lock).

    Nothing is deleted on an index's word alone, and no copy goes before the copy that stays
    verifies (:class:`~ikdata.core.packs.PackVerifier`):

    * an index that is unreadable or disagrees with its pack's header (a tensor the pack lacks, a key
      that is not its member's) refuses the whole gc (:func:`refuse_disagreeing_indexes`); a pack
      that cannot be read is left whole and its tensors count as no copy;
    * a tensor held by several packs stays in the first copy (index order) that verifies (its bytes
      hash to its digest, its pack to its name); when none verifies, every copy stays;
    * a pack whose referenced tensors all stay elsewhere goes whole (a loose copy does not count:
      packs are the preferred form): its index first (unpublishing it), then the pack;
    * a pack holding some referenced tensors and some garbage is rewritten with the referenced ones
      (each verified as it is read), the new pack rehashed and published before the old one goes;
    * an unpublished pack (no index) goes when each tensor in it is unreferenced or has a verified
      copy elsewhere (a published pack, or a loose blob).

    Packs modified after ``cutoff`` are spared, as young loose blobs are.
    """
    refuse_disagreeing_indexes(root)  # gc checked this before deleting anything; a caller on its own too
    found = load_packs(root)
    verifier = PackVerifier(root, found)
    problems: list[Problem] = []
    sound = {index: verifier.sound(index) for index in found.listed}
    for index in found.listed:
        problems += verifier.header(index)
    copies: dict[str, list[PackedBlob]] = {}
    for index, blobs in found.listed.items():
        for blob in blobs if sound[index] else ():
            if blob_path(blob.digest) in used:
                copies.setdefault(blob.digest, []).append(blob)
    holder: dict[str, str | None] = {}  # digest -> the index whose copy stays; None: no copy verifies, all stay
    failed: dict[str, list[tuple[str, str]]] = {}  # pack -> (digest, why) of copies that did not verify
    for digest, held in copies.items():
        if len(held) == 1:
            holder[digest] = held[0].index  # the only copy: it stays where it is (verified if it moves)
            continue
        holder[digest] = None
        for blob in held:
            why = verifier.copy(blob)
            if why is None:
                holder[digest] = blob.index
                break
            failed.setdefault(blob.pack, []).append((digest, why))
    deleted: list[str] = []
    young: list[str] = []
    rewritten: dict[str, PackedBlob] = {}  # digest -> its copy in a pack gc wrote (verified as written)
    freed = kept_count = 0
    for index, blobs in found.listed.items():
        pack = blobs[0].pack if blobs else index.removesuffix(INDEX_SUFFIX) + PACK_SUFFIX
        if not sound[index]:
            kept_count += sum(1 for b in blobs if blob_path(b.digest) in used)
            continue
        needed = [b for b in blobs if blob_path(b.digest) in used and holder.get(b.digest, index) in (index, None)]
        if len(needed) == len(blobs) and blobs:
            kept_count += len(blobs)
            continue
        if os.stat(root / pack).st_mtime > cutoff:
            young.append(pack)
            continue
        items = []
        for blob in needed:
            try:
                items.append(PackItem(blob.digest, blob.dtype, blob.shape, read_packed(root, blob)))
            except StoreError as exc:  # a damaged sole copy: the pack stays whole, named
                problems.append(Problem(pack, str(exc).split(": ", 1)[-1], code="digest-mismatch"))
        if len(items) != len(needed):
            kept_count += len(needed)
            continue
        kept_count += len(needed)
        if dry_run:
            deleted += [index, pack]
            freed += sum(b.loose_size for b in blobs) - sum(b.loose_size for b in needed)
            continue
        if items:
            new_pack, new_index = write_pack(root, items)
            check = check_pack(root, new_index, read_index(root, new_index), deep=True)
            if check.problems or len(check.verified) != len(items):
                problems += check.problems  # the rewrite did not read back: both stay
                continue
            checkpoint("gc-pack-rewritten")
            rewritten.update({b.digest: b for b in read_index(root, new_index)})
            if new_pack == pack:  # the old file already held exactly these bytes (its index was wrong)
                continue
        deleted += [index, pack]
        freed += sum(b.loose_size for b in blobs) - sum(b.loose_size for b in needed)
        (root / index).unlink(missing_ok=True)
        checkpoint("gc-pack-unpublished")
        (root / pack).unlink(missing_ok=True)
    for pack, reasons in failed.items():
        if pack not in deleted:  # a damaged copy gc did not remove: still there, so named
            problems += [Problem(pack, f"its copy of tensor {digest} cannot be relied on: {why}",
                                 code="digest-mismatch") for digest, why in reasons]
    loose_ok: dict[str, bool] = {}

    def elsewhere(digest: str) -> bool:
        """Whether a referenced tensor has a verified copy besides the unpublished pack being judged."""
        if digest in rewritten:
            return True
        index = holder.get(digest)
        if index is not None:
            blob = next(b for b in found.listed[index] if b.digest == digest)
            if verifier.copy(blob) is None:
                return True
        if blob_path(digest) in kept_loose:
            if digest not in loose_ok:
                loose_ok[digest] = read_loose(root, digest)[0] is not None
            return loose_ok[digest]
        return False

    for orphan in found.orphans:
        try:
            tensors = index_from_pack(root / orphan)["tensors"]
        except StoreError:  # an unreadable unpublished pack: no index ever named it, nothing reads it
            tensors = {}
        if any(blob_path(d) in used and not elsewhere(d) for d in tensors):
            continue  # the only good copy of a referenced tensor: keep it ('ikdata repair' publishes it)
        if os.stat(root / orphan).st_mtime > cutoff:
            young.append(orphan)
            continue
        deleted.append(orphan)
        freed += os.stat(root / orphan).st_size
        if not dry_run:
            (root / orphan).unlink(missing_ok=True)
    return PackGarbage(tuple(deleted), freed, kept_count, tuple(young), tuple(problems))


__all__ = ["PackGarbage", "PackResult", "UnpackResult", "collect_packs", "pack_dataset", "refuse_disagreeing_indexes",
           "unpack_dataset"]
