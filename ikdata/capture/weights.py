"""Weights reused across captures: copied and hashed once while unchanged, and checked off the engine thread.

A weight (a GEMM's ``W``, a norm's ``W``) is read by thousands of calls, so the
engine thread does not copy it again while cheap signals say it is unchanged:
the same tensor object, the same version counter, the same data pointer, storage
offset, shape, strides, dtype and device (:meth:`WeightCache.lookup`). Those
signals miss writes that PyTorch does not count: ``param.data.copy_(new)``,
``param.data.mul_(2)``, a collective or a kernel writing into the storage. So a
capture that reused a cached weight joins the weight's open :class:`WeightCheck`,
and the writer thread, before it writes that capture, rehashes the live weight
(:meth:`WeightCache.verify`): if the bytes still have the recorded digest, every
capture of the check is verified; if not, the weight changed at some moment since
the last good check, so every capture of the check is flagged ``unverified`` in
its receipt (never recorded as if verified) and the next capture copies the
weight afresh. Captures that copied the weight are exact by construction.

Weights smaller than ``min_bytes`` are copied at every capture: a copy costs
about what the checks cost, and is exact.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from ikdata.core.store import raw_tensor

PENDING, VERIFIED, FLAGGED = "pending", "verified", "flagged"
DEFAULT_MIN_BYTES = 64 << 10


class BlobHandle:
    """A host copy of a tensor that may be used by several workloads; stored (and hashed) once."""

    __slots__ = ("tensor", "ref", "digest", "nbytes", "_lock")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.ref: Any = None
        self.digest: str | None = None
        self.nbytes = tensor.numel() * tensor.element_size()
        self._lock = threading.Lock()

    def store(self, store: Any) -> Any:
        """Put the host copy into a :class:`~ikdata.core.store.BlobStore` once; return its TensorRef."""
        with self._lock:
            if self.ref is None:
                put = store.put(self.tensor)
                self.ref, self.digest = put.ref, put.digest
                self.tensor = None  # the blob is on disk; the host copy is no longer needed
            return self.ref


class _Entry:
    __slots__ = ("ref", "signature", "handle", "check", "checked_at")

    def __init__(self, ref: weakref.ref, signature: tuple, handle: BlobHandle) -> None:
        self.ref, self.signature, self.handle = ref, signature, handle
        self.check: WeightCheck | None = None
        self.checked_at = 0.0


class WeightCheck:
    """The captures that reused one cached weight since its last check, and what the check found.

    ``alias`` is a detached view of the weight's storage as the captures saw it (it keeps that
    storage alive until the check, even after ``param.data = other``); it is dropped once checked.
    """

    __slots__ = ("alias", "handle", "state", "reason", "captures", "since", "entry")

    def __init__(self, alias: Any, entry: _Entry) -> None:
        self.alias = alias
        self.handle = entry.handle
        self.state = PENDING
        self.reason = ""
        self.captures = 0
        self.since = entry.checked_at  # when this weight was last checked (0: never)
        self.entry: _Entry | None = entry


def _signature(tensor: Any) -> tuple:
    """What the engine thread can read without a device sync: it changes when the tensor is swapped."""
    return (tensor._version, tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype, tensor.device)


class WeightCache:
    """Host copies of weights keyed by the live tensor, reused while cheap signals and checks allow.

    Example:
        >>> cache = WeightCache()
        >>> cache.put(w, BlobHandle(w.clone()))
        >>> handle, check = cache.lookup(w)    # engine thread: same object, version, storage
        >>> handle.store(store); cache.verify(check)  # writer thread: rehash the live bytes
    """

    def __init__(self, *, min_bytes: int = DEFAULT_MIN_BYTES) -> None:
        self.min_bytes = min_bytes
        self._entries: dict[int, _Entry] = {}
        self._lock = threading.RLock()  # RLock: a weakref callback may run while this thread holds it
        self.hits = 0
        self.checks = 0
        self.flagged = 0  # captures flagged unverified
        self.check_seconds = 0.0
        self.check_bytes = 0

    def is_cacheable(self, tensor: Any) -> bool:
        return tensor.numel() * tensor.element_size() >= self.min_bytes

    def lookup(self, tensor: Any) -> tuple[BlobHandle, WeightCheck] | None:
        """The cached copy of ``tensor`` and the check this capture joins, or None (copy it)."""
        entry = self._entries.get(id(tensor))
        if entry is None or entry.ref() is not tensor or entry.signature != _signature(tensor):
            return None
        with self._lock:
            if self._entries.get(id(tensor)) is not entry:
                return None
            check = entry.check
            if check is None:
                check = entry.check = WeightCheck(tensor.detach(), entry)
            check.captures += 1
        self.hits += 1
        return entry.handle, check

    def leave(self, check: WeightCheck) -> None:
        """Undo a :meth:`lookup` whose capture was not kept (a cap was reached)."""
        with self._lock:
            check.captures -= 1
            entry = check.entry
            if check.captures <= 0 and entry is not None and entry.check is check:
                entry.check, check.entry, check.alias = None, None, None  # nothing to check: free the view
        self.hits -= 1

    def put(self, tensor: Any, handle: BlobHandle) -> None:
        """Remember ``handle`` as the copy of ``tensor`` as it is now."""
        key = id(tensor)
        try:  # the entry dies with the tensor, so a recycled id never hits
            ref = weakref.ref(tensor, lambda _, key=key: self._entries.pop(key, None))
        except TypeError:
            return
        with self._lock:
            self._entries[key] = _Entry(ref, _signature(tensor), handle)

    def verify(self, check: WeightCheck) -> None:
        """Rehash the live weight and settle ``check`` (writer thread; its handle must be stored).

        Captures that join the weight from now on start a new check: this one covers only
        captures made before the live bytes are read.
        """
        if check.state != PENDING:
            return
        started = time.time()
        with self._lock:
            entry, check.entry = check.entry, None
            if entry is not None and entry.check is check:
                entry.check = None
                entry.checked_at = started
        alias, check.alias = check.alias, None
        t0 = time.perf_counter()
        try:
            raw = raw_tensor(alias)
            live = raw.digest
            self.check_bytes += memoryview(raw.data).nbytes
        except Exception as exc:  # noqa: BLE001  a weight that cannot be read back cannot be vouched for
            live, why = None, f"it could not be read back ({type(exc).__name__}: {exc})"
        else:
            why = ("its bytes changed without moving the tensor's version counter (a write through .data, "
                   "a copy into its storage, another thread or process) at some moment between this capture "
                   "and the check")
        self.checks += 1
        self.check_seconds += time.perf_counter() - t0
        if live is not None and live == check.handle.digest:
            check.state = VERIFIED
            return
        check.state, check.reason = FLAGGED, why
        self.flagged += check.captures
        if entry is not None:
            with self._lock:  # never reuse that copy again: the next capture copies the weight afresh
                key = id(entry.ref())
                if self._entries.get(key) is entry:
                    del self._entries[key]


__all__ = ["BlobHandle", "WeightCache", "WeightCheck", "PENDING", "VERIFIED", "FLAGGED", "DEFAULT_MIN_BYTES"]
