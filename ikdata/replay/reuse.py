"""Reuse: a case identical to one already judged takes that result instead of running again.

Two cases are identical when their reuse key is: sha256 over the reference's
digest, the input digests and scalar values, the expected-output digests, the
device kind (``cpu``, ``cuda``), the torch version, the judging rule (the
definition's tolerance and judge, and the default table) and the ikdata version.

Where results come from: cases judged earlier in the same run, and a per-user
cache file, ``$IKDATA_CACHE_DIR/replay-reuse.jsonl`` (default
``$XDG_CACHE_HOME/ikdata`` or ``~/.cache/ikdata``: :mod:`ikdata.core.cache_dir`). The cache is written only by
ikdata replay on this machine (not with ``--no-reuse``), never read from a dataset: a report shipped with
a dataset from elsewhere could claim passes that never ran, so it is not a
source of reuse. Errors and skips are never reused; only judged cases
("passed" or "failed") are.

A reuse key names blobs by digest, so reuse must never vouch for bytes it did not
check: each blob's path goes through the path rule (:mod:`ikdata.core.paths`) first,
then either matches the evidence recorded when replay last verified that very file
(device, inode, size, ``mtime_ns`` and ``ctime_ns``, taken before it was hashed; ctime
cannot be set back by a user) or is rehashed now (:meth:`ReuseCache.confirm`). A blob kept in
a pack (:mod:`ikdata.core.packs`) is vouched for the same way by its slice: the evidence names the
pack file (device, inode, size, times) and the tensor's offset in it, else the slice is rehashed
now (one read). The evidence lives beside the cache in ``replay-verified.jsonl``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ikdata.core import jsonl
from ikdata.core.cache_dir import user_cache_dir
from ikdata.core.digest import record_digest
from ikdata.core.store import rehash_file
from ikdata.core.status import JUDGED
from ikdata.core.cases import Case

CACHE_FILE = "replay-reuse.jsonl"
EVIDENCE_FILE = "replay-verified.jsonl"
FLUSH_EVERY = 64  # verdicts per cache append; a killed run loses at most these (it is only a cache)
# What a reused case takes from its own workload and run, never from the earlier case; the rest is the verdict
# (status, reason, metrics, tolerance, digests, what judged it, and a family's record such as a trajectory's).
OWN_FIELDS = ("definition", "uuid", "axes", "seconds", "reused")


def _verdict(case: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in case.items() if k not in OWN_FIELDS}


def default_cache_path() -> Path:
    """``replay-reuse.jsonl`` in the per-user cache folder (:func:`ikdata.core.cache_dir.user_cache_dir`)."""
    return user_cache_dir() / CACHE_FILE


def reuse_key(*, reference_digest: str, input_digests: Mapping[str, str], scalars: Mapping[str, Any],
              expected_digests: Mapping[str, str], device_kind: str, torch_version: str,
              judging: Mapping[str, Any]) -> str:
    """The digest that decides whether two cases are the same replay."""
    from ikdata._version import __version__

    return record_digest({"reference": reference_digest, "inputs": dict(input_digests), "scalars": dict(scalars),
                          "expected": dict(expected_digests), "device": device_kind, "torch": torch_version,
                          "judging": dict(judging), "ikdata": __version__})


@dataclass
class ReuseCache:
    """Judged cases by reuse key: this run's, and the cache file's when one is given.

    Example:
        >>> cache = ReuseCache.open(default_cache_path())
        >>> earlier = cache.lookup(key)
    """

    path: Path | None = None
    known: dict[str, dict[str, Any]] = field(default_factory=dict)
    _pending: list[str] = field(default_factory=list)
    evidence: dict[tuple[int, ...], tuple[int, int, int, str]] = field(default_factory=dict)  # (dev, ino[, offset])
    _pending_evidence: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike | None) -> ReuseCache:
        """Load the cache file and its verification evidence if they exist (bad lines are ignored:
        it is only a cache)."""
        cache = cls(Path(path) if path else None)
        if cache.path is not None and cache.path.is_file():
            for _, record in jsonl.read(cache.path).records:
                if isinstance(record, dict) and isinstance(record.get("reuse_key"), str) \
                        and record.get("status") in JUDGED:
                    cache.known[record["reuse_key"]] = record
        if cache.evidence_path is not None and cache.evidence_path.is_file():
            for _, record in jsonl.read(cache.evidence_path).records:
                try:
                    key = (int(record["dev"]), int(record["ino"]))
                    if "offset" in record:  # a packed tensor: its pack file and where it lies there
                        key += (int(record["offset"]),)
                    cache.evidence[key] = (int(record["size"]), int(record["mtime_ns"]), int(record["ctime_ns"]),
                                           str(record["digest"]))
                except (KeyError, TypeError, ValueError):
                    continue
        return cache

    @property
    def evidence_path(self) -> Path | None:
        return self.path.with_name(EVIDENCE_FILE) if self.path is not None else None

    def note_verified(self, before: os.stat_result, digest: str, *, offset: int | None = None) -> None:
        """Record that the file ``before`` describes (stat taken before it was hashed) holds ``digest``
        (at ``offset``, for a pack). Without a cache file (``--no-reuse``) nothing is kept: no lookup would
        read it."""
        if self.path is None:
            return
        key: tuple[int, ...] = (before.st_dev, before.st_ino) + ((offset,) if offset is not None else ())
        value = (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest)
        if self.evidence.get(key) != value:
            self.evidence[key] = value
            record = {"dev": key[0], "ino": key[1], "size": value[0], "mtime_ns": value[1],
                      "ctime_ns": value[2], "digest": digest}
            if offset is not None:
                record["offset"] = offset
            self._pending_evidence.append(record)

    def confirm(self, path: Path, digest: str) -> bool:
        """Whether ``path`` holds the one tensor ``digest``: by evidence recorded when this very file
        (same device, inode, size, mtime and ctime) was verified, else by rehashing it now. A canonical
        blob path that is not on disk is looked up in the dataset's packs (:meth:`confirm_packed`)."""
        try:
            before = os.stat(path)
        except FileNotFoundError:
            return self.confirm_packed(path, digest)
        except OSError:
            return False
        known = self.evidence.get((before.st_dev, before.st_ino))
        if known == (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest):
            return True
        check = rehash_file(path)
        if check.error or list(check.digests) != [digest]:
            return False
        self.note_verified(before, digest)
        return True

    def confirm_packed(self, path: Path, digest: str) -> bool:
        """Whether the pack holding ``digest`` (``path`` is its canonical loose path in a dataset) holds it
        where its index says: by evidence (the pack file's identity and the offset), else by rehashing the
        slice now (:func:`ikdata.core.packs.read_packed`)."""
        from ikdata.core.errors import StoreError
        from ikdata.core.packs import read_packed
        from ikdata.core.store import BlobStore, blob_path

        rel = blob_path(digest) if digest else ""
        text = str(path)
        if not rel or not text.endswith("/" + rel):
            return False
        root = Path(text[:-len(rel) - 1])
        blob = BlobStore(root).packed(digest)
        if blob is None:
            return False
        try:
            before = os.stat(root / blob.pack)
        except OSError:
            return False
        known = self.evidence.get((before.st_dev, before.st_ino, blob.offset))
        if known == (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest):
            return True
        try:
            read_packed(root, blob)
        except StoreError:
            return False
        self.note_verified(before, digest, offset=blob.offset)
        return True

    def lookup(self, key: str) -> dict[str, Any] | None:
        return self.known.get(key)

    def remember(self, case: Mapping[str, Any]) -> None:
        """Keep a judged case for later ones; it goes to the cache file at the next :meth:`flush`."""
        key = case.get("reuse_key")
        if not key or case.get("status") not in JUDGED or case.get("reused"):
            return
        if key not in self.known:
            self._pending.append(key)
        self.known[key] = _verdict(case)
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Append the evidence and the verdicts learned since the last flush to the cache files (one
        locked write each); evidence first, so a verdict never lands without the checks behind it."""
        pending, self._pending = self._pending, []
        evidence, self._pending_evidence = self._pending_evidence, []
        if self.path is None:
            return
        try:
            if evidence:
                jsonl.append(self.evidence_path, evidence, fsync=False)
            if pending:
                jsonl.append(self.path, [self.known[k] for k in pending], fsync=False)
        except OSError:
            self.path = None  # an unwritable cache only costs speed, never a verdict


def reused_case(earlier: Mapping[str, Any], *, definition: str, uuid: str, axes: Mapping[str, int],
                seconds: float) -> Case:
    """A case for this workload carrying an earlier verdict, marked ``reused``."""
    case: dict[str, Any] = {"definition": definition, "uuid": uuid, "axes": dict(axes)}
    case.update(_verdict(earlier))
    case.update(seconds=seconds, reused=True)
    return Case.from_json(case, path="the reuse cache")


__all__ = ["CACHE_FILE", "EVIDENCE_FILE", "ReuseCache", "default_cache_path", "reuse_key", "reused_case"]
