"""Progress of long work, reported through a plain callable: the library never draws.

Validation and import call ``progress(Progress(phase, done, total))`` as they go; the CLI
turns the calls into a bar or log lines (:mod:`ikdata.cli._progress`). A callback may be
called from worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Progress:
    """Where one phase of a piece of work stands: ``done`` of ``total`` units (blobs, files)."""

    phase: str
    done: int
    total: int


ProgressCallback = Callable[[Progress], None]

__all__ = ["Progress", "ProgressCallback"]
