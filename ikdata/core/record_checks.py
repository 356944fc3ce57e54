"""One record file checked against its schema: what validate and import say of a kind no reader of theirs knows.

A record kind declared with a schema (:mod:`ikdata.core.record_kinds`) and read by nothing else (capture's
census) is checked record by record here, so a new kind needs no code of its own to be validated or carried.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from ikdata.core import jsonl, schema
from ikdata.core.problems import Problem


def check_file(kind: str, path: str | os.PathLike, *, display: str, dataset: str | os.PathLike | None = None,
               lines: bool = True) -> list[Problem]:
    """Every problem of one record file against the schema ``kind``: torn or malformed lines of a JSON Lines
    file (``lines``) or a file that is not JSON, and each record off the schema, each naming file, line and
    pointer. ``dataset``: the folder the file belongs to, named in the hint of a torn line."""
    if not lines:
        try:
            record = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            return [Problem(display, f"cannot be read as JSON: {exc}", code="malformed-json")]
        return schema.check(kind, record, path=display)
    content = jsonl.read(path, display=display, dataset=dataset)
    found = list(content.problems)
    for line, record in content.records:
        found += schema.check(kind, record, path=display, line=line)
    return found


__all__ = ["check_file"]
