"""Parallel transfers with a progress callback of bytes and objects.

The library reports progress through a plain callable; it never draws anything
(the CLI turns the callbacks into a rich progress bar).
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Iterable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_JOBS = 8


@dataclass(frozen=True)
class Progress:
    """Where a transfer stands: ``phase`` is "upload" or "download"."""

    phase: str
    objects_done: int
    objects_total: int
    bytes_done: int
    bytes_total: int


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class Upload:
    """One object to send: ``source`` is a local file or the bytes themselves; ``rel`` its remote path;
    ``blobs``: how many blobs it carries, as progress counts them (a pack: its members)."""

    rel: str
    source: Path | bytes
    size: int
    blobs: int = 1


class _Meter(Generic[T]):
    def __init__(self, phase: str, items: Sequence[T], size_of: Callable[[T], int],
                 callback: ProgressCallback | None, count_of: Callable[[T], int]) -> None:
        self.phase, self.callback = phase, callback
        self.objects_total = sum(count_of(i) for i in items)
        self.bytes_total = sum(size_of(i) for i in items)
        self.objects_done = self.bytes_done = 0
        self._lock = threading.Lock()

    def report(self, nbytes: int = 0, objects: int = 0) -> None:
        if self.callback is None:
            return
        with self._lock:
            self.objects_done += objects
            self.bytes_done += nbytes
            self.callback(Progress(self.phase, self.objects_done, self.objects_total,
                                   self.bytes_done, self.bytes_total))


def run_parallel(phase: str, items: Sequence[T], work: Callable[[T], R], *, size_of: Callable[[T], int],
                 jobs: int = DEFAULT_JOBS, progress: ProgressCallback | None = None,
                 count_of: Callable[[T], int] | None = None) -> list[R]:
    """Run ``work`` on every item on ``jobs`` threads; return results in input order. Progress counts
    ``count_of(item)`` objects per item (default 1).

    The first exception stops the submission of further items and is raised once
    the running ones have finished.
    """
    count_of = count_of or (lambda item: 1)
    meter = _Meter(phase, items, size_of, progress, count_of)
    meter.report()
    if not items:
        return []

    def one(item: T) -> R:
        result = work(item)
        meter.report(size_of(item), count_of(item))
        return result

    if jobs <= 1 or len(items) == 1:
        return [one(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(one, item) for item in items]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
    except BaseException:
        # Ctrl-C (or any error while waiting): nothing queued starts; the at most ``jobs`` transfers under way
        # finish (each object is written whole or not at all), so the command stops within one object's time.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True, cancel_futures=True)  # an error: the running ones finish before it is raised
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


def chunked(items: Iterable[T], size: int) -> Iterable[list[T]]:
    """Consecutive lists of at most ``size`` items."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
