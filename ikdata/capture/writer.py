"""The background capture writer: hashing and writing off the engine's thread, behind a bounded queue.

The engine thread only copies tensors to host memory and calls :meth:`CaptureWriter.submit`.
One writer thread per process stores the blobs, settles the checks of reused
weights (:mod:`ikdata.capture.weights`), and hands the workloads to
:meth:`DatasetWriter.add_many`, the one writer of rows and receipts (rows first, then
receipts: the crash-safe order). When the copies waiting exceed ``queue_bytes`` the
engine waits: memory stays bounded.

A capture that reused a cached weight waits in the queue until that weight is
rehashed; checks of one weight are spaced ``CHECK_INTERVAL`` apart (one rehash
covers every capture made since the last), except when the queue fills or a flush
(exit, fork, commit) asks for everything at once.

Fork safety: before a fork the queue is drained and the writer is held idle, so
a child inherits no half-written work; in the child the writer restarts empty.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ikdata.capture.weights import VERIFIED, BlobHandle, WeightCache, WeightCheck
from ikdata.core.definitions import Definition
from ikdata.core.locking import dataset_lock
from ikdata.core.writer import DatasetWriter, NewWorkload


BATCH_JOBS = 64  # jobs the writer takes at once: one append per file for all of them
BLOB_THREADS = 4
CHECK_INTERVAL = 0.05  # seconds between two rehashes of one cached weight (the queue may wait that long)


_PROCESS_SIGNALS = {getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)}


def leave_signals_to_the_main_thread() -> None:
    """Block SIGTERM, SIGINT and SIGHUP in the calling (capture) thread.

    The kernel delivers a process signal to any thread that does not block it; delivered to one of
    capture's threads, it would not wake a main thread sleeping in ``time.sleep``, so the program's
    handler, and capture's flush on SIGTERM, would wait until the sleep ended.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, _PROCESS_SIGNALS)


@dataclass
class Job:
    """One checked capture waiting to be written: values are host tensors, BlobHandles or scalars."""

    definition: Definition
    axes: dict[str, int]
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    provenance: dict[str, Any]
    nbytes: int
    checks: dict[str, WeightCheck] = field(default_factory=dict)  # weight input -> the check it joined


ErrorHandler = Callable[[Job, BaseException], None]


class CaptureWriter:
    """Writes jobs into one dataset from a background thread.

    Example:
        >>> writer = CaptureWriter("captures/run1")
        >>> writer.submit(job)   # returns once the job is queued
        >>> writer.flush()       # returns once everything queued is on disk
    """

    def __init__(self, root: str | os.PathLike, *, queue_bytes: int = 256 << 20,
                 on_error: ErrorHandler | None = None, weights: WeightCache | None = None) -> None:
        self.root = Path(root)
        self.dataset = DatasetWriter(self.root)
        self.queue_bytes = queue_bytes
        self.on_error = on_error
        self.weights = weights if weights is not None else WeightCache()
        self.written = 0
        self.failed = 0  # workloads lost: captured, but not written
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._jobs: collections.deque[Job] = collections.deque()
        self._pending_bytes = 0
        self._busy = False
        self._flushing = 0  # threads waiting in flush: no check is put off while they wait
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
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._jobs or self._busy:
                    if not self._thread.is_alive():
                        break
                    self._cond.wait(0.5)
            finally:
                self._flushing -= 1
        self._drain_here()

    # -- the writer thread ----------------------------------------------------------------------

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="ikdata-capture-writer", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        leave_signals_to_the_main_thread()
        while True:
            with self._cond:
                while True:
                    if not self._jobs:
                        self._cond.wait()
                        continue
                    delay = self._check_delay()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)  # let more captures join the weight's check
                batch = [self._jobs.popleft() for _ in range(min(len(self._jobs), BATCH_JOBS))]
                self._busy = True
            self._run(batch)

    def _check_delay(self) -> float:
        """How long the first queued job may wait for its weights' next check (0: write it now)."""
        if self._flushing or self._pending_bytes * 2 >= self.queue_bytes:
            return 0.0
        checks = [c for c in self._jobs[0].checks.values() if c.state == "pending"]
        if not checks:
            return 0.0
        return max(c.since for c in checks) + CHECK_INTERVAL - time.time()

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
        """Store the blobs of several jobs (in parallel), check reused weights, then add the workloads.

        Rows and receipts go through :meth:`DatasetWriter.add_many` (one append per file,
        rows before receipts, after every blob they name is durable). A job whose reused
        weight failed its check is written with ``unverified`` in its receipt. Returns the
        jobs that failed, none of which left a row or a receipt.
        """
        failed: list[tuple[Job, BaseException]] = []
        items: list[tuple[Job, NewWorkload]] = []
        with dataset_lock(self.root, exclusive=False):
            values = {id(v): v for job in batch for v in (*job.inputs.values(), *job.outputs.values())
                      if not isinstance(v, (bool, int, float))}
            refs = self._put_all(values)
            for job in batch:
                for check in job.checks.values():
                    if check.handle.digest is not None:  # stored: its live bytes can be compared
                        self.weights.verify(check)
            for job in batch:
                try:
                    inputs = {n: self._descriptor(v, refs) for n, v in job.inputs.items()}
                    outputs = {n: self._descriptor(v, refs) for n, v in job.outputs.items()}
                except Exception as exc:  # noqa: BLE001  a blob of this job could not be stored
                    failed.append((job, exc))
                    continue
                items.append((job, NewWorkload(job.definition, inputs, outputs, _facts(job), job.axes)))
            results = self.dataset.add_many([item for _, item in items])
        failed += [(job, r) for (job, _), r in zip(items, results) if isinstance(r, BaseException)]
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
            self._executor = ThreadPoolExecutor(max_workers=BLOB_THREADS, thread_name_prefix="ikdata-blob",
                                                initializer=leave_signals_to_the_main_thread)
            self._executor_pid = os.getpid()
        return self._executor

    def _put_or_error(self, value: Any) -> Any:
        try:
            if isinstance(value, BlobHandle):
                return value.store(self.dataset.store)
            return self.dataset.store.put(value).ref
        except Exception as exc:  # noqa: BLE001  turned into the job's failure
            return exc

    @staticmethod
    def _descriptor(value: Any, refs: dict[int, Any]) -> Any:
        if isinstance(value, (bool, int, float)):
            return value
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


def _facts(job: Job) -> dict[str, Any]:
    """The job's provenance, with ``unverified`` when a weight it reused failed its check."""
    flagged = sorted(n for n, c in job.checks.items() if c.state != VERIFIED)  # never vouch for an unchecked one
    if not flagged:
        return job.provenance
    reasons = "; ".join(f"{n}: {job.checks[n].reason or 'it could not be checked'}" for n in flagged)
    return {**job.provenance, "unverified": {
        "inputs": flagged,
        "reason": f"the weight {', '.join(flagged)} this capture reused was rehashed after it and no longer "
                  f"matched the recorded blob, so the bytes the operator read are not known ({reasons})"}}


__all__ = ["CaptureWriter", "Job", "BlobHandle", "WeightCache", "BATCH_JOBS", "CHECK_INTERVAL"]
