"""JSONL files: whole-line appends under an exclusive lock, tolerant reads, and repair.

An append writes all its lines with one ``write`` on an ``O_APPEND`` descriptor
while holding ``flock(LOCK_EX)``, so lines from several processes never
interleave. If a crashed writer left a torn last line, the next append first
ends it with a newline so the torn bytes stay one bad line and never swallow a
good one. Readers take a shared lock, parse every line, and report malformed or
torn lines as problems with their file and line. Every open refuses a FIFO, a device or a
socket before reading (:func:`ikdata.core.paths.open_regular`): a read there could block forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from ikdata.core.errors import FileSystemError
from ikdata.core.paths import open_regular
from ikdata.core.problems import Problem


READ_BLOCK = 1 << 20  # bytes read at a time by iter_records (1 MiB: as fast as 8, and 37 MB less held)


def dumps(record: Any) -> bytes:
    """One record as a compact JSON line with sorted keys (no newline)."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def append(path: str | os.PathLike, records: Iterable[Any], *, fsync: bool = True) -> tuple[int, int]:
    """Append records as whole lines, atomically with respect to other appenders.

    All or nothing: if the write fails part-way (disk full, file-size limit), the bytes
    already written are cut off again before the error is raised. Returns the file's
    size before and after the append, for :func:`truncate_tail`.
    """
    payload = b"".join(dumps(r) + b"\n" for r in records)
    if not payload:
        return 0, 0
    try:
        return _append(Path(path), payload, fsync=fsync)
    except FileSystemError:
        raise
    except OSError as exc:  # one line naming the file; _append already cut off any partial write
        raise FileSystemError(exc, operation="append to", filename=path) from exc


def _append(path: Path, payload: bytes, *, fsync: bool) -> tuple[int, int]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)  # the umask decides
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            payload = b"\n" + payload  # isolate a torn line left by a killed writer
        view = memoryview(payload)
        try:
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # never leave a torn line of our own behind
            raise
        return size, size + len(payload)
    finally:
        os.close(fd)


def truncate_tail(path: str | os.PathLike, start: int, end: int) -> bool:
    """Undo an append that :func:`append` reported as ``(start, end)``, if nothing was appended after it.

    Returns False (and changes nothing) when the file no longer ends at ``end``.
    """
    fd = open_regular(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size != end:
            return False
        os.ftruncate(fd, start)
        os.fsync(fd)
        return True
    finally:
        os.close(fd)


@dataclass
class JsonlContent:
    """The records of a JSONL file, each with its 1-based line, and the problems met."""

    path: str
    records: list[tuple[int, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def read_bytes_locked(path: str | os.PathLike) -> bytes:
    """The file's bytes, read under a shared lock so no append is half-seen.

    Raises:
        FileSystemError: a FIFO, a device or a socket (refused before any read).
    """
    with open(open_regular(path), "rb") as stream:
        fcntl.flock(stream.fileno(), fcntl.LOCK_SH)
        return stream.read()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while parsing: JSON records hold no cycles, and
    collections triggered by 100,000 new dicts would otherwise cost more than the parse."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _torn_line(display: str, line: int, dataset: str | os.PathLike | None) -> Problem:
    """The torn-last-line problem, whose hint names the real dataset folder when it is known."""
    import shlex

    command = f"ikdata repair {shlex.quote(str(dataset))}" if dataset is not None else "ikdata repair"
    target = (f'"{command}"' if "'" in command else f"'{command}'") + ("" if dataset is not None else
                                                                         " on its dataset folder")
    return Problem(display, f"torn last line (no newline: a writer was killed mid-write); run {target} "
                   "to set it aside", line, code="torn-line")


def read(path: str | os.PathLike, *, display: str | None = None,
         dataset: str | os.PathLike | None = None) -> JsonlContent:
    """Parse every line; malformed and torn lines become problems, never exceptions.

    ``dataset``, the folder the file belongs to, is named in the hint of a torn line.
    """
    display = display or str(path)
    content = JsonlContent(display)
    data = read_bytes_locked(path)
    lines = data.split(b"\n")
    torn_tail = not data.endswith(b"\n") and data != b""
    if not torn_tail:
        lines.pop()
    last = len(lines)
    loads = orjson.loads
    if torn_tail:
        lines.pop()  # reported after the others, never parsed
    try:  # the common case, every line whole and valid, at the speed of the parser
        with _gc_paused():
            content.records = list(zip(range(1, len(lines) + 1), [loads(raw) for raw in lines]))
    except orjson.JSONDecodeError:  # a blank or bad line somewhere: go line by line
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                content.records.append((number, loads(raw)))
            except orjson.JSONDecodeError as exc:
                content.problems.append(Problem(display, f"malformed JSON: {exc}; expected one JSON "
                                                "object per line", number, code="malformed-json"))
    if torn_tail:
        content.problems.append(_torn_line(display, last, dataset))
    return content


def _too_long(display: str, line: int, max_line: int) -> Problem:
    return Problem(display, f"line longer than {max_line:,} bytes, the most a line of this file may hold; "
                   "skipped unread (not written by ikdata)", line, code="line-too-long")


def line_blocks(path: str | os.PathLike, problems: list[Problem], *, display: str,
                dataset: str | os.PathLike | None = None,
                max_line: int | None = None) -> Iterator[tuple[int, list[bytes | None]]]:
    """(number of its first line, its whole lines) per block of at most :data:`READ_BLOCK` bytes, so memory stays
    flat whatever the file's size: the one way a record file is read a block at a time.

    The size is taken under a shared lock; appends land after it as whole lines, so the bytes up to it are what a
    locked read of the whole file would see, and appenders are not held up while the caller works. A line longer
    than ``max_line`` bytes is ``None`` in its block (the caller names it: :func:`too_long`), or, when it runs past
    a block, is dropped unread and named here; the torn last line (no newline) is named here after the last
    block, never a line. Problems land in line order once each block is handled before the next is asked for.
    """
    number = 0
    carry = b""
    skipping = False  # inside a line already longer than max_line: drop bytes up to its end
    with open(open_regular(path), "rb") as stream:
        fcntl.flock(stream.fileno(), fcntl.LOCK_SH)
        try:
            left = os.fstat(stream.fileno()).st_size
        finally:
            fcntl.flock(stream.fileno(), fcntl.LOCK_UN)
        while left > 0:
            block = stream.read(min(READ_BLOCK, left))
            if not block:
                break  # cut short by a truncation since: what was read is what there is
            left -= len(block)
            if skipping:
                end = block.find(b"\n")
                if end < 0:
                    continue
                number += 1
                problems.append(too_long(display, number, max_line or 0))
                skipping, block = False, block[end + 1:]
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            lines: list[bytes | None] = data[:cut].split(b"\n")  # type: ignore[assignment]
            lines.pop()
            del data, block
            if max_line is not None:
                lines = [None if len(raw) > max_line else raw for raw in lines]  # type: ignore[arg-type]
            if lines:
                yield number + 1, lines
                number += len(lines)
            if max_line is not None and len(carry) > max_line:
                skipping, carry = True, b""
    if skipping:  # an overlong last line with no newline
        problems.append(too_long(display, number + 1, max_line or 0))
    elif carry:  # no newline at the end: a torn last line, never parsed
        problems.append(_torn_line(display, number + 1, dataset))


def too_long(display: str, line: int, max_line: int) -> Problem:
    """The problem of a line past the most a line of its file may hold (:func:`line_blocks` leaves it unread)."""
    return _too_long(display, line, max_line)


def iter_records(path: str | os.PathLike, problems: list[Problem], *, display: str | None = None,
                 dataset: str | os.PathLike | None = None, max_line: int | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (line, record) one at a time, appending bad lines to ``problems``, as ``read`` reports them.

    For one pass over a large file (stats, validate, gc): read a block at a time (:func:`line_blocks`), so memory
    stays flat whatever its size. ``max_line``: a line longer than this many bytes is a problem, skipped without
    being held whole or parsed (memory stays bounded by it even for a file of one endless line).
    """
    display = display or str(path)
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    for first, lines in line_blocks(path, problems, display=display, dataset=dataset, max_line=max_line):
        for number, raw in enumerate(lines, first):
            if raw is None:
                problems.append(_too_long(display, number, max_line or 0))
                continue
            try:
                yield number, loads(raw)
            except decode_error as exc:
                if raw.strip():
                    problems.append(Problem(display, f"malformed JSON: {exc}; expected one JSON object "
                                            "per line", number, code="malformed-json"))


@dataclass(frozen=True)
class RepairResult:
    """What ``repair`` set aside: the file, the bad line numbers, and where they went."""

    path: str
    removed_lines: tuple[int, ...]
    set_aside: str | None


def repair(path: str | os.PathLike) -> RepairResult:
    """Move torn and malformed lines to ``<file>.rejected`` and rewrite the file atomically.

    Nothing is lost: every removed line is appended, verbatim, to the sidecar.
    """
    from ikdata.core.store import write_atomic

    path = Path(path)
    fd = open_regular(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        good, bad = [], []
        lines = data.split(b"\n")
        torn = not data.endswith(b"\n") and data != b""
        if not torn:
            lines.pop()
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                if number == len(lines) and torn:
                    raise ValueError("torn")
                orjson.loads(raw)
                good.append(raw + b"\n")
            except ValueError:
                bad.append((number, raw))
        if not bad:
            return RepairResult(str(path), (), None)
        sidecar = path.with_name(path.name + ".rejected")
        kept = sidecar.stat().st_size if sidecar.exists() else None
        try:
            with open(sidecar, "ab") as stream:
                stream.write(b"".join(raw + b"\n" for _, raw in bad))
                stream.flush()
                os.fsync(stream.fileno())
            write_atomic(path, good)
        except OSError as exc:  # disk full, size limit: the file and its sidecar stay as they were
            if kept is None:
                sidecar.unlink(missing_ok=True)
            else:
                os.truncate(sidecar, kept)
            if isinstance(exc, FileSystemError):
                raise
            raise FileSystemError(exc, operation="set lines aside into", filename=sidecar) from exc
        return RepairResult(str(path), tuple(n for n, _ in bad), str(sidecar))
    finally:
        os.close(fd)
