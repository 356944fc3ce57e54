"""Selection: each distinct call is captured once per run, within the caps, over all processes.

A call's key is what makes it differ to a judge: its definition (which names the dtypes and the
const axes), its variant (the other shapes; a sampler's settings and processors; the backward
mark), its rank in a distributed program, and the request when the program names one. The step
joins the key only where steps were asked for (``--per-step``, ``--steps``, a request's own
``steps``): by default a forward loop keeps one workload per key, not one per forward.

The default looks at a bounded spread of each request's steps (:func:`~ikdata.capture.spread.looks_at`: steps 0-3, then
every power of two), so a long run pays for log2(steps) steps, and a shape that first appears
late is still seen; the other steps run as they run without capture.

With a state folder (``ikdata capture`` makes one per run), claims and budgets
are shared by every process of the run: a key is claimed by creating a file
exclusively, and the per-definition counts and the copied bytes live in a small
JSON ledger updated under ``flock``. Without one, they are per process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from ikdata.capture.context import step_asked


# Why a reservation was refused (also the counters of the summary).
SEEN = "seen"
DEFINITION_FULL = "definition-full"
BYTES_FULL = "bytes-full"


class Ledger:
    """Claims selection keys and reserves budget, shared across processes through ``state_dir``.

    Example:
        >>> ledger = Ledger(state_dir=None, max_per_definition=2, max_bytes=None)
        >>> ledger.reserve("gemm_n4_k8", ("gemm_n4_k8", "r1", 0, "m3"), 96)
        None
    """

    def __init__(self, state_dir: str | os.PathLike | None, *, max_per_definition: int | None,
                 max_bytes: int | None, per_step: bool = False) -> None:
        self.per_step = per_step
        self.state_dir = Path(state_dir) if state_dir else None
        self.max_per_definition = max_per_definition
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._seen: set[tuple] = set()
        self._full: set[str] = set()
        self._bytes_full = False
        self._counts: dict[str, int] = {}
        self._bytes = 0
        if self.state_dir is not None:
            (self.state_dir / "claims").mkdir(parents=True, exist_ok=True)

    def run_key(self, key: tuple) -> tuple:
        """The key a call ``(definition, request, step, variant)`` is selected under: without the step unless
        steps were asked for (``per_step``, ``--steps``, a ``with step(N):`` block, a request's own ``steps``)."""
        if self.per_step or len(key) != 4 or key[2] is None or step_asked():
            return key
        return (key[0], key[1], None, key[3])

    def is_seen(self, key: tuple) -> bool:
        """A cheap, local check before any work: this key was already taken (here or, as learned, elsewhere)."""
        key = self.run_key(key)
        return key in self._seen or self._bytes_full or key[0] in self._full

    def reserve(self, definition: str, key: tuple, nbytes: int) -> str | None:
        """Claim ``key`` and reserve ``nbytes``; return None if granted, else why not (SEEN, ...FULL)."""
        key = self.run_key(key)
        with self._lock:
            if key in self._seen:
                return SEEN
            if self._bytes_full:
                return BYTES_FULL
            if definition in self._full:
                return DEFINITION_FULL
            if self.state_dir is None:
                refusal = self._check(self._counts.get(definition, 0), self._bytes, nbytes)
                if refusal is None:
                    self._counts[definition] = self._counts.get(definition, 0) + 1
                    self._bytes += nbytes
                    self._seen.add(key)
                return self._remember(definition, key, refusal)
            return self._remember(definition, key, self._reserve_shared(definition, key, nbytes))

    def _check(self, count: int, used: int, nbytes: int) -> str | None:
        if self.max_per_definition is not None and count >= self.max_per_definition:
            return DEFINITION_FULL
        if self.max_bytes is not None and used + nbytes > self.max_bytes:
            return BYTES_FULL
        return None

    def _remember(self, definition: str, key: tuple, refusal: str | None) -> str | None:
        if refusal == SEEN:
            self._seen.add(key)
        elif refusal == DEFINITION_FULL:
            self._full.add(definition)
        elif refusal == BYTES_FULL:
            self._bytes_full = True
        return refusal

    def _reserve_shared(self, definition: str, key: tuple, nbytes: int) -> str | None:
        assert self.state_dir is not None
        claim = self.state_dir / "claims" / hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()
        fd = os.open(self.state_dir / "ledger.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if claim.exists():
                return SEEN
            ledger = self._read_ledger()
            refusal = self._check(ledger["counts"].get(definition, 0), ledger["bytes"], nbytes)
            if refusal is not None:
                return refusal
            claim.touch()
            ledger["counts"][definition] = ledger["counts"].get(definition, 0) + 1
            ledger["bytes"] += nbytes
            tmp = self.state_dir / f".ledger.{os.getpid()}"
            tmp.write_text(json.dumps(ledger))
            os.replace(tmp, self.state_dir / "ledger.json")
            self._seen.add(key)
            return None
        finally:
            os.close(fd)

    def _read_ledger(self) -> dict[str, Any]:
        assert self.state_dir is not None
        try:
            return json.loads((self.state_dir / "ledger.json").read_text())
        except FileNotFoundError:
            return {"counts": {}, "bytes": 0}


__all__ = ["Ledger", "SEEN", "DEFINITION_FULL", "BYTES_FULL"]
