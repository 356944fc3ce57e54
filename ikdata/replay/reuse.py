"""Reuse: a case identical to one already judged takes that result instead of running again.

Two cases are identical when their reuse key is: sha256 over the reference's
digest, the input digests and scalar values, the expected-output digests, the
device kind (``cpu``, ``cuda``), the torch version, the judging rule (the
definition's tolerance and judge, and the default table) and the ikdata version.

Where results come from: cases judged earlier in the same run, and a per-user
cache file, ``$IKDATA_CACHE_DIR/replay-reuse.jsonl`` (default
``$XDG_CACHE_HOME/ikdata`` or ``~/.cache/ikdata``). The cache is written only by
ikdata replay on this machine (not with ``--no-reuse``), never read from a dataset: a report shipped with
a dataset from elsewhere could claim passes that never ran, so it is not a
source of reuse. Errors and skips are never reused; only judged cases
("passed" or "failed") are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ikdata.core import jsonl
from ikdata.core.digest import record_digest

CACHE_FILE = "replay-reuse.jsonl"
FLUSH_EVERY = 64  # verdicts per cache append; a killed run loses at most these (it is only a cache)
VERDICT_FIELDS = ("status", "reason", "metrics", "tolerance", "reference_digest", "input_digests",
                  "expected_digests", "device", "torch", "reuse_key")


def default_cache_path() -> Path:
    """``$IKDATA_CACHE_DIR/replay-reuse.jsonl``, else under ``$XDG_CACHE_HOME/ikdata`` or ``~/.cache/ikdata``."""
    folder = os.environ.get("IKDATA_CACHE_DIR")
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "ikdata")
    return Path(folder) / CACHE_FILE


def reuse_key(*, reference_digest: str, input_digests: Mapping[str, str], scalars: Mapping[str, Any],
              expected_digests: Mapping[str, str], device_kind: str, torch_version: str,
              judging: Mapping[str, Any]) -> str:
    """The digest that decides whether two cases are the same replay."""
    from ikdata import __version__

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

    @classmethod
    def open(cls, path: str | os.PathLike | None) -> ReuseCache:
        """Load the cache file if it exists (bad lines are ignored: it is only a cache)."""
        cache = cls(Path(path) if path else None)
        if cache.path is not None and cache.path.is_file():
            for _, record in jsonl.read(cache.path).records:
                if isinstance(record, dict) and isinstance(record.get("reuse_key"), str) \
                        and record.get("status") in ("passed", "failed"):
                    cache.known[record["reuse_key"]] = record
        return cache

    def lookup(self, key: str) -> dict[str, Any] | None:
        return self.known.get(key)

    def remember(self, case: Mapping[str, Any]) -> None:
        """Keep a judged case for later ones; it goes to the cache file at the next :meth:`flush`."""
        key = case.get("reuse_key")
        if not key or case.get("status") not in ("passed", "failed") or case.get("reused"):
            return
        if key not in self.known:
            self._pending.append(key)
        self.known[key] = {k: case[k] for k in VERDICT_FIELDS if k in case}
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Append the verdicts learned since the last flush to the cache file (one locked write)."""
        pending, self._pending = self._pending, []
        if self.path is None or not pending:
            return
        try:
            jsonl.append(self.path, [self.known[k] for k in pending], fsync=False)
        except OSError:
            self.path = None  # an unwritable cache only costs speed, never a verdict


def reused_case(earlier: Mapping[str, Any], *, definition: str, uuid: str, axes: Mapping[str, int],
                seconds: float) -> dict[str, Any]:
    """A case for this workload carrying an earlier verdict, marked ``reused``."""
    case: dict[str, Any] = {"definition": definition, "uuid": uuid, "axes": dict(axes)}
    case.update({k: earlier[k] for k in VERDICT_FIELDS if k in earlier})
    case.update(seconds=seconds, reused=True)
    return case


__all__ = ["CACHE_FILE", "ReuseCache", "default_cache_path", "reuse_key", "reused_case"]
