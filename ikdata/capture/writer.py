"""The background capture writer: hashing and writing off the engine's thread, behind a bounded queue.

The engine thread only copies tensors to host memory and calls :meth:`CaptureWriter.submit`.
One writer thread per process hashes and stores the blobs, then appends the
workload row and, after it, the receipt (so a killed process never leaves a
receipt whose row is missing). When the copies waiting exceed ``queue_bytes``
the engine waits: memory stays bounded.

A weight seen again (same tensor object, same version counter) is neither
copied nor hashed again: :class:`WeightCache` hands out the same
:class:`BlobHandle`, which the writer hashes and stores once.

Fork safety: before a fork the queue is drained and the writer is held idle, so
a child inherits no half-written work; in the child the writer restarts empty.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ikdata.core import jsonl
from ikdata.core.dataset import RECEIPTS
from ikdata.core.definitions import Definition, workloads_relpath
from ikdata.core.locking import dataset_lock
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.core.writer import DatasetWriter, default_provenance, workload_uuid


BATCH_JOBS = 64  # jobs the writer takes at once: one append per file for all of them
BLOB_THREADS = 4


class BlobHandle:
    """A host copy of a tensor that may be used by several workloads; stored (and hashed) once."""

    __slots__ = ("tensor", "ref", "nbytes", "_lock")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.ref: TensorRef | None = None
        self.nbytes = tensor.numel() * tensor.element_size()
        self._lock = threading.Lock()

    def store(self, writer: DatasetWriter) -> TensorRef:
        with self._lock:
            if self.ref is None:
                self.ref = writer.store.put(self.tensor).ref
                self.tensor = None  # the blob is on disk; the host copy is no longer needed
            return self.ref


class WeightCache:
    """Host copies of weights, keyed by the live tensor object and its version counter."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, int, BlobHandle]] = {}
        self.hits = 0

    def get(self, tensor: Any) -> BlobHandle | None:
        entry = self._entries.get(id(tensor))
        if entry is None or entry[0]() is not tensor or entry[1] != tensor._version:
            return None
        self.hits += 1
        return entry[2]

    def put(self, tensor: Any, handle: BlobHandle) -> None:
        key = id(tensor)
        try:  # the entry dies with the tensor, so a recycled id never hits
            ref = weakref.ref(tensor, lambda _, key=key: self._entries.pop(key, None))
        except TypeError:
            return
        self._entries[key] = (ref, tensor._version, handle)


@dataclass
class Job:
    """One checked capture waiting to be written: values are host tensors, BlobHandles or scalars."""

    definition: Definition
    axes: dict[str, int]
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    provenance: dict[str, Any]
    nbytes: int


ErrorHandler = Callable[[Job, BaseException], None]


class CaptureWriter:
    """Writes jobs into one dataset from a background thread.

    Example:
        >>> writer = CaptureWriter("captures/run1")
        >>> writer.submit(job)   # returns once the job is queued
        >>> writer.flush()       # returns once everything queued is on disk
    """

    def __init__(self, root: str | os.PathLike, *, queue_bytes: int = 256 << 20,
                 on_error: ErrorHandler | None = None) -> None:
        self.root = Path(root)
        self.dataset = DatasetWriter(self.root)
        self.queue_bytes = queue_bytes
        self.on_error = on_error
        self.written = 0
        self.failed = 0
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._jobs: collections.deque[Job] = collections.deque()
        self._pending_bytes = 0
        self._busy = False
        self._io = threading.Lock()  # held while a job is written; a fork waits for it
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0

    # -- the engine side ------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue a job; wait while the copies already queued exceed ``queue_bytes``."""
        if self._pid != os.getpid():  # a fork that bypassed the at-fork handlers
            self._reset()
        with self._cond:
            while self._jobs and self._pending_bytes + job.nbytes > self.queue_bytes:
                self._cond.wait()
            self._jobs.append(job)
            self._pending_bytes += job.nbytes
            self._cond.notify_all()
        if self._thread is None or not self._thread.is_alive():
            self._start()

    def flush(self) -> None:
        """Return once every queued job is written (or failed). Safe from any thread but the writer's."""
        if self._pid != os.getpid():
            self._reset()
            return
        if threading.current_thread() is self._thread:
            return
        if self._thread is None or not self._thread.is_alive():
            self._drain_here()
            return
        with self._cond:
            while self._jobs or self._busy:
                if not self._thread.is_alive():
                    break
                self._cond.wait(0.5)
        self._drain_here()

    # -- the writer thread ----------------------------------------------------------------------

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="ikdata-capture-writer", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                batch = [self._jobs.popleft() for _ in range(min(len(self._jobs), BATCH_JOBS))]
                self._busy = True
            self._run(batch)

    def _drain_here(self) -> None:
        while True:
            with self._cond:
                if not self._jobs:
                    return
                batch = [self._jobs.popleft() for _ in range(min(len(self._jobs), BATCH_JOBS))]
                self._busy = True
            self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        try:
            with self._io:
                failed = self.write_batch(batch)
            self.written += len(batch) - len(failed)
            self.failed += len(failed)
            if self.on_error is not None:
                for job, exc in failed:
                    self.on_error(job, exc)
        finally:
            with self._cond:
                self._busy = False
                self._pending_bytes -= sum(job.nbytes for job in batch)
                self._cond.notify_all()

    def write(self, job: Job) -> None:
        """Write one job now, on this thread (strict mode): raises what fails."""
        failed = self.write_batch([job])
        if failed:
            raise failed[0][1]

    def write_batch(self, batch: list[Job]) -> list[tuple[Job, BaseException]]:
        """Store the blobs of several jobs (in parallel), then append their rows, then their receipts.

        Rows go to each workload file, and receipts to ``receipts.jsonl``, in one locked append
        per file, after every blob they name is durable. Returns the jobs that failed.
        """
        failed: list[tuple[Job, BaseException]] = []
        good: list[Job] = []
        for job in batch:
            try:
                self.dataset.add_definition(job.definition)
                good.append(job)
            except Exception as exc:  # noqa: BLE001  reported per job
                failed.append((job, exc))
        rows: dict[str, list[dict]] = {}
        receipts: list[dict] = []
        with dataset_lock(self.root, exclusive=False):
            values = {id(v): v for job in good for v in (*job.inputs.values(), *job.outputs.values())
                      if not isinstance(v, (bool, int, float))}
            refs = self._put_all(values)
            for job in good:
                try:
                    descriptors = {n: self._descriptor(job.inputs[n], refs) for n in job.definition.inputs}
                    expected = {n: self._descriptor(job.outputs[n], refs) for n in job.definition.outputs}
                except Exception as exc:  # noqa: BLE001
                    failed.append((job, exc))
                    continue
                definition = job.definition
                facts = {**default_provenance(), **job.provenance}
                uuid = workload_uuid(definition.name, descriptors, facts)
                path = workloads_relpath(definition.name, definition.op_type)
                rows.setdefault(path, []).append(WorkloadRow(definition.name, uuid, job.axes, descriptors).to_dict())
                receipts.append(Receipt(uuid, definition.name, job.axes, expected, facts).to_dict())
            for path, records in rows.items():
                jsonl.append(self.root / path, records)
            if receipts:
                jsonl.append(self.root / RECEIPTS, receipts)
        return failed

    def _put_all(self, values: dict[int, Any]) -> dict[int, Any]:
        if len(values) > 1:
            try:
                return dict(zip(values, self._pool().map(self._put_or_error, values.values())))
            except RuntimeError:  # the interpreter is exiting and refuses new threads: write them here
                pass
        return {key: self._put_or_error(v) for key, v in values.items()}

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None or self._executor_pid != os.getpid():
            # fsync and hashing release the GIL: a few threads hide the disk's latency
            self._executor = ThreadPoolExecutor(max_workers=BLOB_THREADS, thread_name_prefix="ikdata-blob")
            self._executor_pid = os.getpid()
        return self._executor

    def _put_or_error(self, value: Any) -> Any:
        try:
            if isinstance(value, BlobHandle):
                return value.store(self.dataset)
            return self.dataset.store.put(value).ref
        except Exception as exc:  # noqa: BLE001  turned into the job's failure
            return exc

    @staticmethod
    def _descriptor(value: Any, refs: dict[int, Any]) -> Any:
        if isinstance(value, (bool, int, float)):
            return Scalar(value)
        ref = refs[id(value)]
        if isinstance(ref, BaseException):
            raise ref
        return ref

    # -- fork handling --------------------------------------------------------------------------

    def before_fork(self) -> None:
        self.flush()
        self._io.acquire()

    def after_fork_in_parent(self) -> None:
        self._io.release()

    def after_fork_in_child(self) -> None:
        self._reset()


__all__ = ["CaptureWriter", "Job", "BlobHandle", "WeightCache", "BATCH_JOBS"]
