"""Fault injection for tests: the one mechanism, named checkpoints inside writers.

Writers call :func:`checkpoint` at the moments a crash matters (``blobs-staged``,
``journal-written``, ``before-manifest``...). In normal use it costs one dict lookup.
Two ways for a test to act there:

- ``IKDATA_TEST_CRASH_AT=<name>`` in a child's environment: the process SIGKILLs itself
  at that checkpoint (crash tests of a real subprocess);
- :func:`observe` in-process: a callable runs at every checkpoint (races made deterministic).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Callable, Iterator

CRASH_ENV = "IKDATA_TEST_CRASH_AT"
_observers: list[Callable[[str], None]] = []


def checkpoint(name: str) -> None:
    """Mark a named moment of a writer: crash here when the environment asks, tell observers."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    for observer in tuple(_observers):
        observer(name)


@contextmanager
def observe(observer: Callable[[str], None]) -> Iterator[None]:
    """Run ``observer(name)`` at every checkpoint reached inside the ``with`` block."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


__all__ = ["CRASH_ENV", "checkpoint", "observe"]
