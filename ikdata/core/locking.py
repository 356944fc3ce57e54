"""The dataset lock: writers of captures share it, gc and import take it alone."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".ikdata.lock"


@contextlib.contextmanager
def dataset_lock(root: str | os.PathLike, *, exclusive: bool) -> Iterator[None]:
    """Hold the dataset's lock: shared for captures, exclusive for gc, import and manifest writes."""
    path = Path(root) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
