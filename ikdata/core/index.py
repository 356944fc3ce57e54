"""The lookup index: uuid -> file, line and byte offset of its workload row and receipts.

An embedded SQLite file (``DATASET/.ikdata-index.sqlite``), derived data only: the JSONL
files stay the source of truth, and nothing in the index is believed until the files say so.

- **Only ours is opened.** The index is used only when it is a regular file inside the
  dataset (never a link, a FIFO or a hard link), marked as an ikdata index (SQLite
  ``application_id`` and ``user_version``) and carrying a tag of its own, made with a per-user key
  kept outside the dataset (``$IKDATA_CACHE_DIR/index-key``) over the dataset folder, the index
  file's inode and a random nonce. An index someone planted, even one in the right format or a copy
  of another index of the same user, has no such tag and is rebuilt; index files are private to
  their user (mode 0600); a link, a special file or an SQLite
  database of something else is never opened, written or dropped: the caller reads the files.
- **Rebuilt aside.** A new index is built in a temp file in the dataset and renamed over the
  old one, so no table of a file ikdata did not create is ever dropped.
- **Rows are re-read.** Every entry a lookup returns is read again from its file, which must be
  a record file the dataset lists by the path rule (:mod:`ikdata.core.paths`), with the kind,
  inode, size and mtime the index recorded, and the line at the offset must parse and carry
  the uuid. A mismatch rebuilds the index once, then the caller scans.
- **Kept true.** Every open compares each indexed file's inode, size and mtime with what was
  recorded; a file that only grew is indexed from where it stopped (after checking the bytes
  just before that point), one rewritten is indexed again, one gone drops its entries.

So ``show`` and ``lineage`` cost a few B-tree lookups and one seek, whatever the number of rows.

- **What stats prints.** Each file's rows per definition, records, blob uses and unreadable lines
  are counted as it is indexed (extended with it, dropped with it), by the rules ``ops.stats``
  reads the files with; the stored blob sizes are kept with the stamp (inode, size, mtime) of every
  folder under ``blob/`` (and of the pack files): a folder whose stamp moved, or a new one, makes
  the next :meth:`Index.blob_totals` scan ``blob/`` again. So ``stats`` costs a refresh and a few
  aggregate queries (:meth:`Index.record_totals`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import stat
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

from ikdata.core.errors import ProblemsFound
from ikdata.core.problems import Problem

INDEX_FILE = ".ikdata-index.sqlite"
VERSION = 5  # 4: per-file stats aggregates and blob sizes; 5: the referenced bytes kept
FORMAT = f"ikdata-index/{VERSION}"
APPLICATION_ID = 0x696B6478  # "ikdx" in the SQLite header: this file is an ikdata index
KEY_FILE = "index-key"
_SIDECARS = ("-wal", "-shm", "-journal")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_TAIL = 4096  # bytes before the indexed end, rehashed to prove an append-only change
_BLOCK = 8 << 20  # bytes of a record file read at a time while indexing

# Problem codes of an index that is not used; the first two are said to the user (the dataset holds
# something odd at the index's place), the others are ordinary reasons to read the files instead.
REFUSED = "unsafe-index"  # a link or special file at the index's place
FOREIGN = "foreign-index"  # an SQLite database that is not an ikdata index
NOT_OURS = "index-owner"  # another user's index: left to them
NO_KEY = "index-key"  # no per-user key can be kept: an index could not be told from a planted one

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, kind TEXT NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL, indexed INTEGER NOT NULL, lines INTEGER NOT NULL,
                    tail TEXT NOT NULL);
CREATE TABLE entries (uuid TEXT NOT NULL, kind TEXT NOT NULL, definition TEXT, path TEXT NOT NULL,
                      line INTEGER NOT NULL, offset INTEGER NOT NULL);
CREATE TABLE file_stats (path TEXT PRIMARY KEY, rows INTEGER NOT NULL, records INTEGER NOT NULL,
                         unreadable INTEGER NOT NULL);
CREATE TABLE file_definitions (path TEXT NOT NULL, name TEXT NOT NULL, rows INTEGER NOT NULL,
                               first_line INTEGER NOT NULL, PRIMARY KEY (path, name)) WITHOUT ROWID;
CREATE TABLE file_uses (path TEXT NOT NULL, blob TEXT NOT NULL, uses INTEGER NOT NULL,
                        PRIMARY KEY (path, blob)) WITHOUT ROWID;
CREATE TABLE blobs (path TEXT PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE blob_stamps (path TEXT PRIMARY KEY, stamp TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE referenced (inputs TEXT NOT NULL, bytes INTEGER NOT NULL, unsized TEXT NOT NULL);
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
    """An open index over one dataset's record files; use :func:`open_index`.

    ``files``: the record files the dataset lists by the path rule (dataset-relative -> kind);
    the index covers these and reads nothing else.
    """

    def __init__(self, root: Path, connection: sqlite3.Connection, files: dict[str, str]):
        self.root = root
        self.files = dict(files)
        self._db = connection

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- keeping it true ---------------------------------------------------------------------

    def refresh(self) -> RefreshResult:
        """Bring the index up to date with its record files."""
        files = self.files
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
                    st = None
                if st is None or not stat.S_ISREG(st.st_mode):
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
        for table in ("entries", "file_stats", "file_definitions", "file_uses"):
            self._db.execute(f"DELETE FROM {table} WHERE path = ?", (path,))
        self._db.execute("DELETE FROM files WHERE path = ?", (path,))

    def _index_file(self, path: str, kind: str, full: Path, st: os.stat_result, start: int, line: int) -> int:
        """Index the whole lines of ``full`` from byte ``start`` on, a block at a time (memory stays
        flat at 10M rows); a torn last line is not indexed until it is whole. What stats prints is
        counted on the way (:meth:`_add_stats`)."""
        from ikdata.core.dataset import blob_paths

        offset = indexed = start
        count = 0
        loads = orjson.loads
        carry = b""
        rows = records = unreadable = 0
        names: dict[str, list[int]] = {}  # definition -> [rows, first line]
        uses: Counter = Counter()
        with _open_regular(full) as stream:
            stream.seek(start)
            left = st.st_size - start
            while left > 0:
                block = stream.read(min(_BLOCK, left))
                if not block:
                    break
                left -= len(block)
                data = carry + block if carry else block
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                entries = []
                used: list[str] = []  # this block's blob uses, counted at its end (one C-level count)
                add_uses = used.extend
                for raw in data[:cut].split(b"\n")[:-1]:
                    line += 1
                    try:
                        record = loads(raw)
                    except orjson.JSONDecodeError:
                        unreadable += bool(raw.strip())  # a blank line is skipped, as jsonl.iter_records does
                        offset += len(raw) + 1
                        continue
                    records += 1
                    add_uses(blob_paths(record))
                    if kind == "workload":  # a row as ops.stats counts one
                        try:
                            record["workload"]["inputs"].values()
                            name = record["definition"]
                        except (KeyError, TypeError, AttributeError):
                            pass
                        else:
                            if type(name) is str:
                                rows += 1
                                seen = names.get(name)
                                if seen is None:
                                    names[name] = [1, line]
                                else:
                                    seen[0] += 1
                            else:
                                unreadable += 1  # counted under its repr by a read: left to it
                    if isinstance(record, dict):
                        uuid = _uuid_of(record, kind)
                        definition = record.get("definition")
                        if isinstance(uuid, str):
                            entries.append((uuid, kind, definition if isinstance(definition, str) else None,
                                            path, line, offset))
                    offset += len(raw) + 1
                indexed += cut
                uses.update(used)
                count += len(entries)
                self._db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", entries)
        self._add_stats(path, rows, records, unreadable, names, uses)
        self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (path, kind, st.st_ino, st.st_size, st.st_mtime_ns, indexed, line,
                          _tail_digest(full, indexed)))
        return count

    def _add_stats(self, path: str, rows: int, records: int, unreadable: int,
                   names: dict[str, list[int]], uses: Counter) -> None:
        """Add one indexed stretch of a file to its stats aggregates (an extension adds to them)."""
        db = self._db
        db.execute("INSERT INTO file_stats VALUES (?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET "
                   "rows = rows + excluded.rows, records = records + excluded.records, "
                   "unreadable = unreadable + excluded.unreadable", (path, rows, records, unreadable))
        db.executemany("INSERT INTO file_definitions VALUES (?, ?, ?, ?) ON CONFLICT (path, name) DO UPDATE SET "
                       "rows = rows + excluded.rows", ((path, name, n, first) for name, (n, first) in names.items()))
        db.executemany("INSERT INTO file_uses VALUES (?, ?, ?) ON CONFLICT (path, blob) DO UPDATE SET "
                       "uses = uses + excluded.uses", ((path, blob, n) for blob, n in uses.items()))

    # -- what stats prints -------------------------------------------------------------------

    def record_totals(self, workload_files: list[str], receipt_files: list[str]) -> RecordTotals | None:
        """Rows per definition (in the order a read meets them), receipts and blob uses of these
        files, from the aggregates; None when one of them is not wholly indexed as it is now (not in
        the index, a torn last line, an unreadable line or a definition that is not a string): a read
        of the files is then what reports it."""
        db = self._db
        known = {row[0]: row[1:] for row in db.execute(
            "SELECT f.path, f.kind, f.ino, f.size, f.mtime_ns, f.indexed, s.rows, s.records, s.unreadable "
            "FROM files f JOIN file_stats s ON s.path = f.path")}
        per_definition: dict[str, int] = {}
        workloads = receipts = 0
        for path, kind in [(p, "workload") for p in workload_files] + [(p, "receipt") for p in receipt_files]:
            row = known.get(path)
            try:
                st = os.stat(self.root / path)
            except OSError:
                return None
            if row is None or row[:4] != (kind, st.st_ino, st.st_size, st.st_mtime_ns) or row[4] != st.st_size \
                    or row[7]:
                return None
            if kind == "receipt":
                receipts += row[6]
                continue
            workloads += row[5]
            for name, rows in db.execute("SELECT name, rows FROM file_definitions WHERE path = ? ORDER BY first_line",
                                         (path,)):
                per_definition[name] = per_definition.get(name, 0) + rows
        referenced, unsized = self._referenced(workload_files + receipt_files, known)
        return RecordTotals(per_definition, workloads, receipts, referenced, unsized)

    def _referenced(self, paths: list[str], known: dict) -> tuple[int, list[tuple[str, int]]]:
        """Bytes of the blob uses of ``paths`` whose size the index holds, and the others' (path, uses).
        The join runs over every (file, blob) pair, so its answer is kept with what it was computed
        from (each file's identity and indexed length, the blob scan's stamps) and reused while those hold."""
        db = self._db
        inputs = orjson.dumps([[p, *known[p][1:5]] for p in paths]
                              + list(db.execute("SELECT path, stamp FROM blob_stamps ORDER BY path"))).decode()
        kept = db.execute("SELECT bytes, unsized FROM referenced WHERE inputs = ?", (inputs,)).fetchone()
        if kept is not None:
            return kept[0], [tuple(pair) for pair in orjson.loads(kept[1])]
        referenced = 0
        unsized: list[tuple[str, int]] = []
        if paths:
            marks = ",".join("?" * len(paths))
            referenced = db.execute(f"SELECT COALESCE(SUM(u.uses * b.size), 0) FROM file_uses u JOIN blobs b "
                                    f"ON b.path = u.blob WHERE u.path IN ({marks})", paths).fetchone()[0]
            unsized = list(db.execute(f"SELECT u.blob, SUM(u.uses) FROM file_uses u LEFT JOIN blobs b "
                                      f"ON b.path = u.blob WHERE b.path IS NULL AND u.path IN ({marks}) "
                                      "GROUP BY u.blob ORDER BY u.blob", paths))
        try:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute("DELETE FROM referenced")
                db.execute("INSERT INTO referenced VALUES (?, ?, ?)", (inputs, referenced, orjson.dumps(unsized).decode()))
        except sqlite3.Error:
            pass  # not kept (a busy or read-only index): computed again next time
        return referenced, unsized

    def blob_totals(self, store) -> tuple[int, int]:
        """(blobs stored, their bytes) as ``store.iter_blobs`` lists them, from the sizes kept in the
        index; ``blob/`` is scanned again first when a folder under it (or a pack file) changed."""
        from ikdata.core.store import BLOB_DIR

        kept = dict(self._db.execute("SELECT path, stamp FROM blob_stamps"))
        if not kept or any(_stamp(os.path.join(self.root, path)) != stamp for path, stamp in kept.items()):
            stamps = _blob_stamps(self.root, BLOB_DIR)  # before the scan: a change during it shows next time
            sizes = dict(store.iter_blobs())
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute("DELETE FROM blobs")
                self._db.execute("DELETE FROM blob_stamps")
                self._db.executemany("INSERT INTO blobs VALUES (?, ?)", sizes.items())
                self._db.executemany("INSERT INTO blob_stamps VALUES (?, ?)", stamps.items())
        return tuple(self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs").fetchone())

    def blob_size(self, path: str) -> int | None:
        """The stored size of one blob as the last scan found it (None: not stored)."""
        found = self._db.execute("SELECT size FROM blobs WHERE path = ?", (path,)).fetchone()
        return found[0] if found else None

    # -- lookups -----------------------------------------------------------------------------

    def find(self, prefix: str, kind: str = "workload", *, limit: int | None = None) -> list[Entry]:
        """Entries whose uuid starts with ``prefix`` (a range scan of the uuid B-tree); not yet
        checked against the files: :meth:`read` does that."""
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
        """The record an entry points at, read again with one seek and checked to be that record:
        its file is one the dataset lists for that kind, with the identity the index recorded, and
        the line at the offset parses and carries the uuid.

        Raises:
            LookupError: any of that does not hold (the index is stale or not to be believed).
        """
        where = f"{entry.path}:{entry.line}"
        if self.files.get(entry.path) != entry.kind:
            raise LookupError(f"{where}: the index names a file the dataset does not read {entry.kind} records from")
        recorded = self._db.execute("SELECT kind, ino, size, mtime_ns, indexed FROM files WHERE path = ?",
                                    (entry.path,)).fetchone()
        if recorded is None or recorded[0] != entry.kind or not 0 <= entry.offset < recorded[4]:
            raise LookupError(f"{where}: the index is stale")
        try:
            stream = _open_regular(self.root / entry.path)
        except OSError as exc:
            raise LookupError(f"{where}: {exc}") from exc
        with stream:
            st = os.fstat(stream.fileno())
            if (st.st_ino, st.st_size, st.st_mtime_ns) != tuple(recorded[1:4]):
                raise LookupError(f"{where}: the index is stale (the file changed since it was indexed)")
            stream.seek(entry.offset)
            raw = stream.readline()
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or _uuid_of(record, entry.kind) != entry.uuid \
                or (entry.kind == "workload" and record.get("definition") != entry.definition):
            raise LookupError(f"{where}: the index is stale")
        return record


@dataclass(frozen=True)
class RecordTotals:
    """What the index counted for stats: workload rows per definition (first-met order), rows,
    receipts, bytes of the blob uses whose size the index holds, and the (path, uses) of the others."""

    per_definition: dict[str, int]
    workloads: int
    receipts: int
    referenced_bytes: int
    unsized: list[tuple[str, int]]


def _stamp(path: str | Path) -> str:
    """A folder's or file's identity and last change, without following a link ("-" when absent)."""
    try:
        st = os.lstat(path)
    except OSError:
        return "-"
    return f"{stat.S_IFMT(st.st_mode)}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _blob_stamps(root: Path, blob_dir: str) -> dict[str, str]:
    """The stamp of ``blob/`` (followed, as the blob scan follows it), of every folder under it (links
    not followed) and of every file under ``blob/packs/``: any blob added, removed or renamed changes one."""
    top = root / blob_dir
    try:
        st = os.stat(top)
        stamps = {blob_dir: f"{stat.S_IFMT(st.st_mode)}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"}
    except OSError:
        return {blob_dir: "-"}
    if not stat.S_ISDIR(st.st_mode):
        return stamps
    stack = [(str(top), blob_dir)]
    while stack:
        folder, relative = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stamps[name] = _stamp(Path(entry.path))
                stack.append((entry.path, name))
            elif name.startswith(f"{blob_dir}/packs/"):
                stamps[name] = _stamp(Path(entry.path))
    return stamps


def _uuid_of(record: dict, kind: str) -> object:
    if kind == "workload":
        workload = record.get("workload")
        return workload.get("uuid") if isinstance(workload, dict) else None
    return record.get("uuid")


def _open_regular(path: Path):
    """``path`` opened for reading, refused unless it is a regular file (a FIFO would block)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _tail_digest(path: Path, end: int) -> str:
    with _open_regular(path) as stream:
        start = max(0, end - _TAIL)
        stream.seek(start)
        return hashlib.sha256(stream.read(end - start)).hexdigest()


# -- whose index it is ---------------------------------------------------------------------------

def key_path() -> Path:
    """``index-key`` in the per-user cache folder (:func:`ikdata.core.cache_dir.user_cache_dir`)."""
    from ikdata.core.cache_dir import user_cache_dir  # here: a read that needs no key loads no more modules

    return user_cache_dir() / KEY_FILE


_keys: dict[str, bytes] = {}


def _key() -> bytes:
    """This user's secret (32 random bytes, mode 0600, created once): an index tagged with it was
    built by this user, which a file planted in a dataset cannot be.

    Raises:
        OSError: the key can neither be read nor created.
    """
    path = key_path()
    if str(path) in _keys:
        return _keys[str(path)]
    try:
        key = _read_key(path)
    except FileNotFoundError:
        import secrets  # here, not at the top: read-only commands never write a key
        import tempfile

        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(prefix=".tmp-key-", dir=path.parent)  # mode 0600
        try:
            try:
                os.write(fd, secrets.token_bytes(32))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(temp, path)  # never replaces a key another process made first
            except FileExistsError:
                pass
        finally:
            os.unlink(temp)
        key = _read_key(path)
    _keys[str(path)] = key
    return key


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or len(data) != 32:
        raise OSError(errno.EPERM, "not a key file of this user (32 bytes, owned by the user)", str(path))
    return data


def _owner_tag(key: bytes, path: Path, st: os.stat_result, nonce: str) -> str:
    """The tag of one index: the user's key over the format, the dataset folder, the index file's device and
    inode and the index's own random nonce. A copy of the index (another inode) or the index of another
    dataset never carries it, so no index of the user passes for another."""
    bound = "\0".join((FORMAT, os.path.abspath(path.parent), str(st.st_dev), str(st.st_ino), nonce))
    return hashlib.blake2b(bound.encode(), key=key, digest_size=32).hexdigest()


def _refusal(path: Path, code: str, message: str) -> ProblemsFound:
    problem = Problem(INDEX_FILE, message, code=code)
    return ProblemsFound([problem], f"{path}: the index was not used")


def _classify(path: Path) -> tuple[str, os.stat_result | None]:
    """What is at the index's place, looked at without following a link or writing a byte:
    ``missing``, ``link``, ``special``, ``garbage`` (not SQLite), ``ikdata`` (an index of any
    version) or ``foreign`` (an SQLite database of something else)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing", None
    if stat.S_ISLNK(st.st_mode):
        return "link", st
    if not stat.S_ISREG(st.st_mode):
        return "special", st
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "special", st  # replaced by a link since the lstat, or unreadable: not ours to touch
    try:
        header = os.read(fd, 100)
    finally:
        os.close(fd)
    if not header.startswith(_SQLITE_MAGIC):
        return "garbage", st
    if len(header) >= 72 and int.from_bytes(header[68:72], "big") == APPLICATION_ID:
        return "ikdata", st
    try:  # an index of an earlier version has no application_id; read-only, no lock, no journal
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"
        connection = sqlite3.connect(uri, uri=True)
        try:
            found = connection.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        found = None
    if found and isinstance(found[0], str) and found[0].startswith("ikdata-index/"):
        return "ikdata", st
    return "foreign", st


def _sidecars_are_ours(path: Path) -> bool:
    """Whether SQLite's files next to the index (WAL, shared memory, journal), where present, are
    regular files of this user with one name: SQLite opens them through links, so none may be one."""
    for suffix in _SIDECARS:
        try:
            st = os.lstat(str(path) + suffix)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
            return False
    return True


def _open_ours(path: Path, st: os.stat_result, key: bytes) -> sqlite3.Connection | None:
    """A connection to the index when it is this user's, of this version; None otherwise."""
    if st.st_nlink != 1 or st.st_uid != os.geteuid() or not _sidecars_are_ours(path):
        return None
    connection = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
    try:
        meta = dict(connection.execute("SELECT key, value FROM meta")) \
            if connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID \
            and connection.execute("PRAGMA user_version").fetchone()[0] == VERSION else {}
        nonce = meta.get("nonce")
        if not isinstance(nonce, str) or meta != {"format": FORMAT, "nonce": nonce,
                                                  "owner": _owner_tag(key, path, st, nonce)}:
            connection.close()
            return None
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError:
        connection.close()
        return None
    return connection


def _sweep_temps(root: Path) -> list[str]:
    """Remove the temp files (and their SQLite sidecars) a killed build left in the dataset, by the one temp-file
    rule (:func:`ikdata.core.paths.sweep_temps`: a dead writer's at once, any other's once stale); a live build's
    stay. Returns their names."""
    from ikdata.core.paths import sweep_temps

    return sweep_temps(root)


def _build(root: Path, path: Path, key: bytes, files: dict[str, str]) -> tuple[Index, RefreshResult]:
    """A new index built from the files in a temp file of the dataset, then renamed over ``path``
    (which replaces a file or link there; it never writes into one)."""
    import tempfile

    import secrets

    from ikdata.core.paths import temp_prefix

    _sweep_temps(root)
    fd, temp = tempfile.mkstemp(prefix=temp_prefix("index"), suffix=".sqlite", dir=root)  # O_EXCL: never a link
    try:
        os.fchmod(fd, 0o600)  # private to its user (SQLite gives the WAL and shared memory the same mode)
        built = os.fstat(fd)  # the inode the index keeps when renamed into place: part of its tag
    finally:
        os.close(fd)
    nonce = secrets.token_hex(16)
    try:
        connection = sqlite3.connect(temp, isolation_level=None, timeout=60, check_same_thread=False)
        try:
            connection.execute("PRAGMA journal_mode=OFF")  # a torn build is a temp file, thrown away
            connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
            connection.execute(f"PRAGMA user_version={VERSION}")
            connection.execute("BEGIN")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                connection.execute(statement)
            connection.executemany("INSERT INTO meta VALUES (?, ?)",
                                   [("format", FORMAT), ("nonce", nonce),
                                    ("owner", _owner_tag(key, path, built, nonce))])
            connection.execute("COMMIT")
            result = Index(Path(root), connection, files).refresh()
            connection.execute("PRAGMA journal_mode=WAL")
        finally:
            connection.close()
        for suffix in _SIDECARS:  # the old index's: never replayed into the new one
            Path(str(path) + suffix).unlink(missing_ok=True)
        os.replace(temp, path)
    except BaseException:
        for suffix in ("",) + _SIDECARS:
            Path(temp + suffix).unlink(missing_ok=True)
        raise
    st = os.lstat(path)
    connection = _open_ours(path, st, key)
    if connection is None:  # replaced in between (another process's build, or worse): read the files
        raise OSError(errno.EAGAIN, "the index was replaced while it was built", str(path))
    return Index(Path(root), connection, files), result


# -- opening -----------------------------------------------------------------------------------

def record_files(root: str | os.PathLike | object) -> dict[str, str]:
    """The JSONL files an index covers, by the dataset's own path rule (regular files inside the
    dataset, links followed): workload rows and receipts, dataset-relative -> kind. ``root`` is a
    folder or an open :class:`~ikdata.core.dataset.Dataset` (whose ``problems`` then name the
    files refused)."""
    from ikdata.core.dataset import Dataset

    ds = root if isinstance(root, Dataset) else Dataset.open(root)
    files = {ds.rel(path): "workload" for path in ds.workload_files()}
    if ds.layout == "ikdata":
        files.update({ds.rel(path): "receipt" for path in ds.receipt_files()})
    return files


def open_index(root: str | os.PathLike, *, rebuild: bool = False,
               files: dict[str, str] | None = None) -> tuple[Index, RefreshResult]:
    """Open (creating or rebuilding as needed) and refresh the index of an ikdata dataset.

    ``files``: the record files to cover (default: :func:`record_files`). Returns the index and
    what the refresh changed.

    Raises:
        ProblemsFound: the index's place holds a link, a special file, an SQLite database that is
            not an ikdata index or another user's index (left untouched; the problem's ``code``
            says which), or no per-user key can be kept.
        OSError, sqlite3.Error: the index cannot be written (a read-only or full disk).
    """
    root = Path(root)
    path = root / INDEX_FILE
    if files is None:
        files = record_files(root)
    try:
        key = _key()
    except OSError as exc:
        raise _refusal(path, NO_KEY, f"cannot keep the index key {key_path()} ({exc.strerror or exc}); "
                       "set IKDATA_CACHE_DIR to a writable folder of yours") from exc
    state, st = _classify(path)
    if state == "link":
        raise _refusal(path, REFUSED, f"is a link (to {os.readlink(path)!r}); ikdata neither follows nor "
                       f"replaces it; lookups read the files. Remove it: the index is rebuilt on the next use")
    if state == "special":
        raise _refusal(path, REFUSED, "is not a regular file; ikdata does not open it; lookups read the files. "
                       "Remove it: the index is rebuilt on the next use")
    if state == "foreign":
        raise _refusal(path, FOREIGN, "is an SQLite database that is not an ikdata index; ikdata leaves it "
                       "untouched and reads the files. Move it elsewhere to let lookups use an index")
    if state == "ikdata" and st is not None and st.st_uid != os.geteuid():
        raise _refusal(path, NOT_OURS, f"is another user's index (uid {st.st_uid}); left untouched, "
                       "lookups read the files")
    if state == "ikdata" and not rebuild:
        connection = _open_ours(path, st, key)
        if connection is not None:
            index = Index(root, connection, files)
            try:
                return index, index.refresh()
            except sqlite3.DatabaseError:  # corrupted inside: derived data, so built again below
                index.close()
    return _build(root, path, key, files)


def try_open_index(root: str | os.PathLike | object, *, rebuild: bool = False) -> Index | None:
    """The refreshed index, or None where it cannot or may not be used (a read-only folder, another
    layout, a link or foreign file at its place): callers then scan the files, as they would
    without an index. ``root`` may be an open Dataset: the index's refusals that the user should
    hear of (a link, a foreign database) are then added to its ``problems``."""
    from ikdata.core.dataset import Dataset

    ds = root if isinstance(root, Dataset) else None
    folder = Path(ds.root if ds is not None else root)
    if not (folder / "ikdata.json").is_file() and not (folder / "workloads").is_dir():
        return None
    try:
        return open_index(folder, rebuild=rebuild, files=record_files(ds if ds is not None else folder))[0]
    except ProblemsFound as exc:
        if ds is not None:
            ds._note(p for p in exc.problems if p.code in (REFUSED, FOREIGN))
        return None
    except (OSError, sqlite3.Error):
        return None


def lookup(ds, prefix: str) -> tuple[list, list] | None:
    """Workload rows whose uuid starts with ``prefix`` and the receipts of the first, through the
    index: ``(rows, receipts)`` as :class:`~ikdata.core.records.WorkloadRow` and
    :class:`~ikdata.core.records.Receipt`, or None when the dataset has no usable index.

    Each record is read again from its file and checked (:meth:`Index.read`), then against its
    schema, as a scan would. A record that does not match the index rebuilds it and looks again;
    a second mismatch, or a record that fails its schema, gives up (None), so the caller's scan
    reads the files and reports what it finds with file and line.
    """
    if getattr(ds, "layout", None) != "ikdata":
        return None
    for attempt in range(2):
        index = try_open_index(ds, rebuild=True) if attempt else try_open_index(ds)
        if index is None:
            return None
        with index:
            try:
                return _lookup(index, ds, prefix)
            except (LookupError, sqlite3.Error):
                continue
    return None


def _lookup(index: Index, ds, prefix: str) -> tuple[list, list] | None:
    from ikdata.core import schema
    from ikdata.core.records import Receipt, WorkloadRow

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
            receipts.append(Receipt.from_dict(record, source=entry.path, line=entry.line, output_names=names))
    return rows, receipts


__all__ = ["APPLICATION_ID", "Entry", "FORMAT", "INDEX_FILE", "Index", "RecordTotals", "RefreshResult", "key_path", "lookup",
           "open_index", "record_files", "try_open_index"]
