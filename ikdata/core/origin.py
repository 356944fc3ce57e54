"""A clone's local note of where it came from (``.ikdata-origin.json``, schemas/origin.schema.json).

``ikdata clone`` copies a dataset byte for byte, so the copy has the id of what it copied; where it came
from is therefore kept beside the dataset, not in it: a state file like the lock and the index, which the
manifest does not list (the id stays the same) and push never sends. ``ikdata lineage`` shows it, marked
unverified: anyone who can write the folder can write the note, and nothing checks it against its source.
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
MAX_ORIGIN_BYTES = 64 << 10
# How a note is shown: local state beside the dataset, which anyone who can write the folder can write. Nothing
# checks it against the source it names, so it is a claim, never a fact about the dataset (whose id is its own).
UNVERIFIED = "unverified local note (.ikdata-origin.json): not part of the dataset, not checked against its source"


def time_bounds() -> tuple[float, float]:
    """The times (epoch seconds) a record may hold, as ``schemas/origin.schema.json`` bounds its ``at`` (the
    manifest's parents share the bound): the one definition of a valid time that validate and lineage use."""
    from ikdata.core.schema import load_schema

    at = load_schema("origin")["properties"]["at"]
    return float(at["minimum"]), float(at["maximum"])


def valid_time(value: object) -> bool:
    """Whether ``value`` is a time a record may hold: a number (not a bool) within :func:`time_bounds`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    low, high = time_bounds()
    return low <= value <= high  # NaN compares false: not a time


@dataclass(frozen=True)
class Origin:
    """Where a copy came from: ``source`` (URL or folder), the ``id`` copied, ``at`` (epoch seconds), ``how``."""

    source: str
    id: str
    at: float
    how: str = "clone"

    def to_dict(self) -> dict:
        return {"how": self.how, "source": self.source, "id": self.id, "at": self.at}

    def shown(self) -> dict:
        """:meth:`to_dict` as lineage shows it: marked as the unverified claim it is (:data:`UNVERIFIED`)."""
        return {**self.to_dict(), "verified": False, "note": UNVERIFIED}


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
        size = path.stat().st_size
        if size > MAX_ORIGIN_BYTES:  # checked before reading: a clone writes a few hundred bytes
            return None, [Problem(ORIGIN_FILE, f"{size:,} bytes, more than the {MAX_ORIGIN_BYTES:,} a clone's note "
                                  "may hold; not read", code="origin")]
        record = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, [Problem(ORIGIN_FILE, f"cannot be read ({exc}); expected the JSON a clone writes",
                              code="origin")]
    problems = schema.check("origin", record, path=ORIGIN_FILE)
    if problems:
        return None, problems
    return Origin(record["source"], record["id"], float(record["at"]), record["how"]), []


__all__ = ["ORIGIN_FILE", "Origin", "UNVERIFIED", "read_origin", "time_bounds", "valid_time", "write_origin"]
