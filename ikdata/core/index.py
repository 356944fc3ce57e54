"""The lookup index: uuid -> file, line and byte offset of its workload row and receipts.

An embedded SQLite file (``DATASET/.ikdata-index.sqlite``), derived data only: the JSONL
files stay the source of truth. It is never trusted blindly: every open compares each
indexed file's inode, size and mtime with what was recorded, and a file that only grew
(JSONL writers append) is indexed from where it stopped, after checking that the bytes
just before that point are still the ones indexed. A file rewritten or edited by hand is
indexed again; a file that vanished drops its entries; an index that is not SQLite, or of
another format, is rebuilt. So ``show`` and ``lineage`` cost a few B-tree lookups and one
seek, whatever the number of rows.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

INDEX_FILE = ".ikdata-index.sqlite"
FORMAT = "ikdata-index/2"
_TAIL = 4096  # bytes before the indexed end, rehashed to prove an append-only change

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, kind TEXT NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL, indexed INTEGER NOT NULL, lines INTEGER NOT NULL,
                    tail TEXT NOT NULL);
CREATE TABLE entries (uuid TEXT NOT NULL, kind TEXT NOT NULL, definition TEXT, path TEXT NOT NULL,
                      line INTEGER NOT NULL, offset INTEGER NOT NULL);
"""
# Created after a bulk load (sorting once is faster than growing B-trees row by row).
_INDEXES = """
CREATE INDEX IF NOT EXISTS entries_uuid ON entries (uuid, kind);
CREATE INDEX IF NOT EXISTS entries_definition ON entries (kind, definition);
CREATE INDEX IF NOT EXISTS entries_path ON entries (path);
"""


@dataclass(frozen=True)
class Entry:
    """Where one record lives: its uuid, kind (``workload`` or ``receipt``), file, line and offset."""

    uuid: str
    kind: str
    definition: str | None
    path: str
    line: int
    offset: int


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh did: files indexed from scratch, files extended, files dropped, rows added."""

    rebuilt: int
    extended: int
    dropped: int
    rows: int

    @property
    def changed(self) -> bool:
        return bool(self.rebuilt or self.extended or self.dropped)


class Index:
    """An open index over one dataset's record files; use :func:`open_index`."""

    def __init__(self, root: Path, connection: sqlite3.Connection):
        self.root = root
        self._db = connection

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- keeping it true ---------------------------------------------------------------------

    def refresh(self, files: dict[str, str]) -> RefreshResult:
        """Bring the index up to date with ``files`` (dataset-relative path -> kind)."""
        rebuilt = extended = dropped = rows = 0
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")  # one refresher at a time; others wait, then see its work
            known = {row[0]: row for row in self._db.execute(
                "SELECT path, kind, ino, size, mtime_ns, indexed, lines, tail FROM files")}
            for path in set(known) - set(files):
                self._drop(path)
                dropped += 1
            for path, kind in sorted(files.items()):
                full = self.root / path
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    if path in known:
                        self._drop(path)
                        dropped += 1
                    continue
                old = known.get(path)
                if old and (old[1], old[2], old[3], old[4]) == (kind, st.st_ino, st.st_size, st.st_mtime_ns):
                    continue
                start, line = 0, 0
                if old and old[1] == kind and old[2] == st.st_ino and st.st_size >= old[5] \
                        and _tail_digest(full, old[5]) == old[7]:
                    start, line = old[5], old[6]
                    extended += 1
                else:
                    if old:
                        self._drop(path)
                    rebuilt += 1
                rows += self._index_file(path, kind, full, st, start, line)
            for statement in filter(str.strip, _INDEXES.split(";")):
                self._db.execute(statement)
        return RefreshResult(rebuilt, extended, dropped, rows)

    def _drop(self, path: str) -> None:
        self._db.execute("DELETE FROM entries WHERE path = ?", (path,))
        self._db.execute("DELETE FROM files WHERE path = ?", (path,))

    def _index_file(self, path: str, kind: str, full: Path, st: os.stat_result, start: int, line: int) -> int:
        with open(full, "rb") as stream:
            stream.seek(start)
            data = stream.read(st.st_size - start)
        end = data.rfind(b"\n") + 1  # a torn last line is not indexed until it is whole
        entries = []
        offset = start
        loads = orjson.loads
        for raw in data[:end].split(b"\n")[:-1]:
            line += 1
            try:
                record = loads(raw)
            except orjson.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                if kind == "workload":
                    workload = record.get("workload")
                    uuid = workload.get("uuid") if isinstance(workload, dict) else None
                else:
                    uuid = record.get("uuid")
                definition = record.get("definition")
                if isinstance(uuid, str):
                    entries.append((uuid, kind, definition if isinstance(definition, str) else None,
                                    path, line, offset))
            offset += len(raw) + 1
        self._db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", entries)
        indexed = start + end
        self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (path, kind, st.st_ino, st.st_size, st.st_mtime_ns, indexed, line,
                          _tail_digest(full, indexed)))
        return len(entries)

    # -- lookups -----------------------------------------------------------------------------

    def find(self, prefix: str, kind: str = "workload", *, limit: int | None = None) -> list[Entry]:
        """Entries whose uuid starts with ``prefix`` (a range scan of the uuid B-tree)."""
        query = ("SELECT uuid, kind, definition, path, line, offset FROM entries INDEXED BY entries_uuid "
                 "WHERE uuid >= ? AND uuid < ? AND kind = ? ORDER BY uuid, path, line")
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [Entry(*row) for row in self._db.execute(query, (prefix, prefix + "\U0010ffff", kind))]

    def of_definition(self, definition: str) -> Iterator[Entry]:
        """Workload entries of one definition, in file order."""
        for row in self._db.execute("SELECT uuid, kind, definition, path, line, offset FROM entries "
                                    "WHERE kind = 'workload' AND definition = ? ORDER BY path, line",
                                    (definition,)):
            yield Entry(*row)

    def counts(self) -> dict[str, int]:
        """Workload rows per definition."""
        return dict(self._db.execute("SELECT definition, COUNT(*) FROM entries WHERE kind = 'workload' "
                                     "GROUP BY definition"))

    def read(self, entry: Entry) -> dict:
        """The record an entry points at, read with one seek; checked to still be that record.

        Raises:
            LookupError: the line at that offset is not the indexed record (the index is stale).
        """
        with open(self.root / entry.path, "rb") as stream:
            stream.seek(entry.offset)
            raw = stream.readline()
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        uuid = None
        if isinstance(record, dict):
            uuid = (record.get("workload") or {}).get("uuid") if entry.kind == "workload" else record.get("uuid")
        if uuid != entry.uuid:
            raise LookupError(f"{entry.path}:{entry.line}: the index is stale")
        return record


def _tail_digest(path: Path, end: int) -> str:
    with open(path, "rb") as stream:
        start = max(0, end - _TAIL)
        stream.seek(start)
        return hashlib.sha256(stream.read(end - start)).hexdigest()


def _connect(path: Path) -> sqlite3.Connection:
    """Open the index, creating or replacing its tables when they are absent or of another format.

    The check and the (re)creation run in one ``BEGIN IMMEDIATE`` transaction, so processes opening
    a missing index at the same time create it once.
    """
    connection = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("BEGIN IMMEDIATE")
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        found = dict(connection.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if found.get("format") != FORMAT:
            for table in tables:
                connection.execute(f'DROP TABLE IF EXISTS "{table}"')
            for statement in filter(str.strip, _SCHEMA.split(";")):  # executescript would commit early
                connection.execute(statement)
            connection.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
        connection.execute("COMMIT")
    except BaseException:
        connection.close()
        raise
    return connection


def record_files(root: Path) -> dict[str, str]:
    """The JSONL files an index covers: workload rows and receipts, dataset-relative -> kind."""
    files = {}
    workloads = root / "workloads"
    if workloads.is_dir():
        for path in workloads.rglob("*.jsonl"):
            files[path.relative_to(root).as_posix()] = "workload"
    for name in ("receipts.jsonl",):
        if (root / name).is_file():
            files[name] = "receipt"
    return files


def open_index(root: str | os.PathLike, *, rebuild: bool = False) -> tuple[Index, RefreshResult]:
    """Open (creating or rebuilding as needed) and refresh the index of an ikdata dataset.

    A file at the index's place that is not an index of this format is replaced: it is derived
    data. Returns the index and what the refresh changed.
    """
    root = Path(root)
    path = root / INDEX_FILE
    if rebuild:
        _remove(path)
    try:
        index = Index(root, _connect(path))
        return index, index.refresh(record_files(root))
    except sqlite3.DatabaseError:  # not SQLite, or corrupted inside: derived data, so rebuild it once
        _remove(path)
        index = Index(root, _connect(path))
        return index, index.refresh(record_files(root))


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def try_open_index(root: str | os.PathLike) -> Index | None:
    """The refreshed index, or None where it cannot be kept (a read-only folder, another layout):
    callers then scan the files, as they would without an index."""
    root = Path(root)
    if not (root / "ikdata.json").is_file() and not (root / "workloads").is_dir():
        return None
    try:
        return open_index(root)[0]
    except (OSError, sqlite3.Error):
        return None


def lookup(ds, prefix: str) -> tuple[list, list] | None:
    """Workload rows whose uuid starts with ``prefix`` and the receipts of the first, through the
    index: ``(rows, receipts)`` as :class:`~ikdata.core.records.WorkloadRow` and
    :class:`~ikdata.core.records.Receipt`, or None when the dataset has no usable index.

    Each record read is checked against its schema, as a scan would; one that fails makes the
    lookup give up (None) so the caller's scan reports it with file and line.
    """
    from ikdata.core import schema
    from ikdata.core.records import Receipt, WorkloadRow

    if getattr(ds, "layout", None) != "ikdata":
        return None
    index = try_open_index(ds.root)
    if index is None:
        return None
    with index:
        try:
            rows = []
            for entry in index.find(prefix, limit=64):
                record = index.read(entry)
                if not schema.is_valid("workload", record):
                    return None
                rows.append(WorkloadRow.from_dict(record, source=entry.path, line=entry.line))
            receipts = []
            if rows:
                definition = ds.definitions.get(rows[0].definition)
                names = list(definition.outputs) if definition else None
                for entry in index.find(rows[0].uuid, "receipt"):
                    if entry.uuid != rows[0].uuid:
                        continue
                    record = index.read(entry)
                    if not schema.is_valid("receipt", record):
                        return None
                    receipts.append(Receipt.from_dict(record, source=entry.path, line=entry.line,
                                                      output_names=names))
        except (LookupError, OSError):
            return None
    return rows, receipts


__all__ = ["Entry", "FORMAT", "INDEX_FILE", "Index", "RefreshResult", "lookup", "open_index", "record_files",
           "try_open_index"]
