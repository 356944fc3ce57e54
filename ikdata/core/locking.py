"""The dataset lock: writers of captures share it, gc and import take it alone.

Taking the lock is also where a folder is checked to be a dataset and not a remote: a folder
``ikdata push`` wrote holds the remote layout (objects named by digest, the manifest last), which
local writers would damage (gc deletes every blob, replay and manifest rewrite its ``ikdata.json``),
so every writer refuses it here (:func:`refuse_remote`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import Iterator

from ikdata.core.errors import UsageError

LOCK_FILE = ".ikdata.lock"
REMOTE_MARKER = ".ikdata-remote"  # written by push into a folder (and file://, memory://) remote, first
REMOTE_MARKER_FORMAT = "ikdata-remote/1"


def remote_folder(root: str | os.PathLike) -> str | None:
    """Why ``root`` is a folder remote rather than a dataset (its marker, or the layout of a remote
    pushed before markers existed: a manifest and ``files/sha256/`` without rows), else None."""
    root = Path(root)
    if os.path.lexists(root / REMOTE_MARKER):
        return f"it holds {REMOTE_MARKER}"
    if (root / "ikdata.json").is_file() and (root / "files" / "sha256").is_dir() \
            and not (root / "workloads").exists() and not (root / "receipts.jsonl").exists():
        return "it has the layout of a remote (files/sha256/, no workloads/)"
    return None


def refuse_remote(root: str | os.PathLike) -> None:
    """Refuse to write into a folder remote (see the module doc).

    Raises:
        UsageError: ``root`` is a folder that ``ikdata push`` writes to; nothing was written.
    """
    why = remote_folder(root)
    if why is not None:
        raise UsageError(f"{root}: this is a remote (pushed to by ikdata push; {why}), not a dataset, so local "
                         f"commands do not write to it; clone it first: ikdata clone {root} DIR")


@contextlib.contextmanager
def dataset_lock(root: str | os.PathLike, *, exclusive: bool) -> Iterator[None]:
    """Hold the dataset's lock: shared for captures, exclusive for gc, import and manifest writes.

    Raises:
        UsageError: ``root`` is a folder remote (:func:`refuse_remote`).
    """
    refuse_remote(root)
    path = Path(root) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a folder this process may not write (gc --dry-run on a read-only dataset):
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):  # flock needs no write access,
            raise
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)  # so the lock is taken all the same; a write then says EROFS
        elif exc.errno == errno.EROFS:  # a read-only file system, no lock file: nobody can write there
            yield
            return
        else:
            raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
