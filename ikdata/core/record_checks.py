"""One record file checked against its schema: what validate and import say of a kind no reader of theirs knows.

A record kind declared with a schema (:mod:`ikdata.core.record_kinds`) and read by nothing else (capture's
census) is checked record by record here, so a new kind needs no code of its own to be validated or carried.
Memory stays bounded whatever the file's size: a JSON Lines file is streamed a block at a time with each line
capped (:data:`MAX_LINE_BYTES`), a one-record ``.json`` file is refused unread past :data:`MAX_JSON_BYTES`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

import orjson

from ikdata.core import jsonl, schema
from ikdata.core.paths import TooLarge, read_capped
from ikdata.core.problems import Problem

MAX_JSON_BYTES = 64 << 20  # a one-record .json file of a schema-checked kind
MAX_LINE_BYTES = 16 << 20  # one line of a schema-checked .jsonl file (a census line is one process's ops)


def shown(relative: str) -> str:
    """A path as a message may show it: a control character, an escape or a newline written as ``\\x1b``,
    ``\\n``, so a file name can never drive a terminal or forge a line of output."""
    if relative.isprintable():
        return relative
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in relative)


def pattern_problem(relative: str) -> Problem | None:
    """The problem of a file of a record kind whose name breaks the kind's pattern (``census/sub/x.jsonl``,
    a census file named with a newline or an escape), or None. Validate and import both say it, in these words:
    a file an import would refuse to write is one validate names first."""
    from ikdata.core.record_kinds import kind_of

    kind = kind_of(relative)
    if kind is None or kind.pattern is None or re.fullmatch(kind.pattern, relative):
        return None
    expected = kind.pattern.replace("\\.", ".")
    return Problem(shown(relative), f"not a {kind.name} file: its path must match {expected}; not written by "
                   "ikdata, so it is not read (move it out of the dataset)", code="misnamed-record")


def unknown_files(root: str | os.PathLike) -> list[Problem]:
    """A problem for each file under a record folder (``definitions/``, ``workloads/``, ``reports/``, ``census/``,
    a family's) that no record kind describes and no writer of ikdata leaves there (a set-aside ``.rejected``,
    a replay journal, a temp file): nothing reads, checks or vouches for it, yet push and clone would carry it.
    Linked folders are not entered (the path rule names them elsewhere)."""
    from ikdata.core.paths import TEMP_PREFIX
    from ikdata.core.record_kinds import BESIDE_RECORDS, KINDS, RECORD_TOPS, kind_of

    root = os.fspath(root)
    kinds = ", ".join(dict.fromkeys(f"{k.top}/*{k.suffix}" if k.folder else k.top for k in KINDS))
    found: list[Problem] = []
    for top in RECORD_TOPS:
        stack = [os.path.join(root, top)]
        if not os.path.isdir(stack[0]) or os.path.islink(stack[0]):
            continue
        while stack:
            try:
                entries = sorted(os.scandir(stack.pop()), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                if entry.is_symlink() and entry.is_dir():
                    continue  # a linked folder: the path rule names it (never entered)
                relative = os.path.relpath(entry.path, root).replace(os.sep, "/")
                if entry.name.startswith(TEMP_PREFIX) or kind_of(relative) is not None \
                        or any(re.fullmatch(p, relative) for p in BESIDE_RECORDS):
                    continue
                found.append(Problem(shown(relative), f"no record kind describes this file and no writer of ikdata "
                                     f"makes it (record files: {kinds}); nothing checks it, yet push and "
                                     "clone would carry it: move it out of the dataset", code="unknown-file"))
    return found


def check_file(kind: str, path: str | os.PathLike, *, display: str, dataset: str | os.PathLike | None = None,
               lines: bool = True) -> list[Problem]:
    """Every problem of one record file against the schema ``kind``: torn, malformed or overlong lines of a JSON
    Lines file (``lines``) or a file that is not JSON (or too large to be one of ikdata's), and each record off
    the schema, each naming file, line and pointer. ``dataset``: the folder the file belongs to, named in the
    hint of a torn line."""
    found: list[Problem] = []
    for _ in checked_records(kind, path, found, display=display, dataset=dataset, lines=lines):
        pass
    return found


def checked_records(kind: str, path: str | os.PathLike, problems: list[Problem], *, display: str,
                    dataset: str | os.PathLike | None = None, lines: bool = True,
                    max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int | None, Any]]:
    """Yield (line, record) for each record of the file that follows the schema ``kind``, one at a time, and
    append every problem met to ``problems`` (as :func:`check_file` reports them)."""
    if not lines:
        try:
            record = orjson.loads(read_capped(path, MAX_JSON_BYTES, display=display))
        except TooLarge as exc:
            problems.append(exc.problem())
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            problems.append(Problem(display, f"cannot be read as JSON: {exc}", code="malformed-json"))
            return
        found = schema.check(kind, record, path=display)
        problems += found
        if not found:
            yield None, record
        return
    for line, record in jsonl.iter_records(path, problems, display=display, dataset=dataset, max_line=max_line):
        found = schema.check(kind, record, path=display, line=line)
        problems += found
        if not found:
            yield line, record


__all__ = ["MAX_JSON_BYTES", "MAX_LINE_BYTES", "check_file", "checked_records", "pattern_problem", "shown", "unknown_files"]
