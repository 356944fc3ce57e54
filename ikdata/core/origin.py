"""A clone's local note of where it came from (``.ikdata-origin.json``, schemas/origin.schema.json).

``ikdata clone`` copies a dataset byte for byte, so the copy has the id of what it copied; where it came
from is therefore kept beside the dataset, not in it: a state file like the lock and the index, which the
manifest does not list (the id stays the same) and push never sends. ``ikdata lineage`` shows it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from ikdata.core.problems import Problem

ORIGIN_FILE = ".ikdata-origin.json"
FORMAT = "ikdata-origin/1"


@dataclass(frozen=True)
class Origin:
    """Where a copy came from: ``source`` (URL or folder), the ``id`` copied, ``at`` (epoch seconds), ``how``."""

    source: str
    id: str
    at: float
    how: str = "clone"

    def to_dict(self) -> dict:
        return {"how": self.how, "source": self.source, "id": self.id, "at": self.at}


def write_origin(root: str | os.PathLike, source: str, dataset_id: str) -> Origin:
    """Note in ``root`` that it is a copy of ``dataset_id`` from ``source`` (atomic; replaces an older note)."""
    from ikdata._version import __version__
    from ikdata.core.store import write_atomic

    origin = Origin(source, dataset_id, time.time())
    record = {"format": FORMAT, **origin.to_dict(), "ikdata_version": __version__}
    write_atomic(Path(root) / ORIGIN_FILE, [orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n"])
    return origin


def read_origin(root: str | os.PathLike) -> tuple[Origin | None, list[Problem]]:
    """The note of ``root``, if any; a note that is not JSON or breaks its schema is a problem, not an error."""
    from ikdata.core import schema

    path = Path(root) / ORIGIN_FILE
    if not path.is_file() or path.is_symlink():
        return None, []
    try:
        record = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, [Problem(ORIGIN_FILE, f"cannot be read ({exc}); expected the JSON a clone writes",
                              code="origin")]
    problems = schema.check("origin", record, path=ORIGIN_FILE)
    if problems:
        return None, problems
    return Origin(record["source"], record["id"], float(record["at"]), record["how"]), []


__all__ = ["ORIGIN_FILE", "Origin", "read_origin", "write_origin"]
