"""The per-user cache folder: where ikdata keeps what it knows outside any dataset.

Replay's reuse cache, the remote pack-index and checksum caches and the index key all live here, so one
setting moves them all: ``$IKDATA_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/ikdata``, else
``~/.cache/ikdata`` (the XDG default). Nothing is created here; each cache makes what it writes.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "IKDATA_CACHE_DIR"


def user_cache_dir() -> Path:
    """``$IKDATA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ikdata``, else ``~/.cache/ikdata`` (read on each call, so a
    change of the environment is seen at once)."""
    folder = os.environ.get(ENV)
    if folder:
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ikdata"


__all__ = ["ENV", "user_cache_dir"]
