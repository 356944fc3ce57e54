"""Per-row state that moves to disk once a dataset is large, so a pass over 10M rows stays bounded.

Readers that must remember something per row (validate: each uuid's row, each tensor use) keep it
in memory while it is small and move it to a temporary SQLite file (a uuid map) or a temporary
file of fixed-width records (a list) once it passes :func:`threshold` entries. Both give back
exactly what was put in, in the same order, so results do not depend on where the state lived.

The threshold is ``IKDATA_SPILL_ROWS`` (default 250,000 entries); tests lower it to exercise the
disk path on small datasets. The temporary files live in ``$TMPDIR`` (never inside the dataset,
which a reader must not modify), in a folder of their own under one private per-user folder
(``$TMPDIR/ikdata-spill-<uid>``, mode 0700, refused unless it is a real folder the user owns). They are
removed on :meth:`close` and, for what was not closed, at normal exit. Each folder holds a lock its
process keeps while it lives, so a folder whose lock is free belongs to a killed process: the next
process that spills removes it.
"""

from __future__ import annotations

import atexit
import fcntl
import marshal
import os
import shutil
import sqlite3
import stat
import tempfile
import time
import weakref
from array import array
from typing import Any, Iterator

ENV = "IKDATA_SPILL_ROWS"
DEFAULT_THRESHOLD = 250_000
_FLUSH = 20_000  # pending writes batched into one executemany
_BLOOM_BITS = 1 << 25  # a UuidMap on disk keeps a 4 MiB Bloom filter of its keys: under 1% false hits at 1M keys,
# about 20% at 10M (a false hit costs the query every lookup cost before)
_BLOOM_MASK = _BLOOM_BITS - 1
SPILLS = [0]  # how many maps and lists moved to disk in this process (for diagnostics and tests)


def threshold() -> int:
    """Entries kept in memory before state moves to disk (``IKDATA_SPILL_ROWS``, at least 1)."""
    raw = os.environ.get(ENV, "")
    try:
        return max(1, int(raw)) if raw else DEFAULT_THRESHOLD
    except ValueError:
        return DEFAULT_THRESHOLD


_LOCK = ".lock"
_UNLOCKED_GRACE_S = 3600  # a folder without its lock file yet: removed only once this old (a kill right after mkdtemp)
_OPEN: "weakref.WeakSet[_TempFolder]" = weakref.WeakSet()


def user_folder_name() -> str:
    """The per-user folder's name under ``$TMPDIR``."""
    return f"ikdata-spill-{os.getuid()}"


def _user_folder() -> str | None:
    """``$TMPDIR/ikdata-spill-<uid>``, made private if new; None when the name is taken by something that is not
    a private folder of this user (a link or someone else's folder in a shared TMPDIR: never written into)."""
    path = os.path.join(tempfile.gettempdir(), user_folder_name())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        return None
    return path


def _alive(pid: str) -> bool:
    """Whether the process a folder is named after still runs (a reused pid only delays the sweep)."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep(folder: str) -> list[str]:
    """Remove the spill folders under the per-user ``folder`` whose process is gone (their lock is free); returns
    what was removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            try:
                if time.time() - os.lstat(path).st_mtime > _UNLOCKED_GRACE_S:
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path)
            except OSError:
                pass
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its process is alive
        else:
            if _alive(name.split("-", 1)[0]):
                continue  # its process made the lock file and has not locked it yet
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


class _TempFolder:
    """A private temporary folder, made on first use (under the per-user folder, holding its lock) and removed
    by :meth:`close` or at normal exit."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._lock: int | None = None
        self._pid = os.getpid()  # a forked child that exits never removes its parent's folder

    def make(self) -> str:
        if self.path is None:
            for _ in range(3):  # another process may remove the (empty) per-user folder in between
                user = _user_folder()
                if user is None:
                    self.path = tempfile.mkdtemp(prefix="ikdata-spill-")
                    break
                sweep(user)
                try:
                    path = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=user)
                except FileNotFoundError:
                    continue
                self._lock = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                fcntl.flock(self._lock, fcntl.LOCK_EX)
                self.path = path
                break
            else:
                self.path = tempfile.mkdtemp(prefix="ikdata-spill-")
            self._pid = os.getpid()
            _OPEN.add(self)
        return self.path

    def close(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
                try:
                    os.rmdir(os.path.dirname(self.path))  # the per-user folder, once nobody spills there
                except OSError:
                    pass
            self.path = None
        _OPEN.discard(self)


@atexit.register
def _close_all() -> None:
    for folder in list(_OPEN):
        if folder._pid == os.getpid():
            folder.close()


class UuidMap:
    """str -> a value of plain data (str, int, bytes, tuples of them: what :mod:`marshal` keeps);
    a dict until it holds :func:`threshold` keys, then an SQLite table in a temporary file."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = threshold() if limit is None else limit
        self._memory: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}
        self._db: sqlite3.Connection | None = None
        self._bloom = bytearray()
        self._folder = _TempFolder()

    @property
    def on_disk(self) -> bool:
        return self._db is not None

    def __len__(self) -> int:
        if self._db is None:
            return len(self._memory)
        self._flush()
        return self._db.execute("SELECT COUNT(*) FROM map").fetchone()[0]

    def get(self, key: str) -> Any:
        if self._db is None:
            return self._memory.get(key)
        found = self._pending.get(key)
        if found is not None:
            return found
        if not self._maybe(key):  # surely never put: no query (most lookups of a clean dataset's new uuids)
            return None
        row = self._db.execute("SELECT value FROM map WHERE key = ?", (key,)).fetchone()
        return marshal.loads(row[0]) if row else None

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The value of each key that has one (a key without one is left out): on disk, one query per 900 keys
        instead of one per key, for a reader that looks a block of keys up at once."""
        if self._db is None:
            memory = self._memory
            return {key: memory[key] for key in keys if key in memory}
        self._flush()
        found: dict[str, Any] = {}
        wanted = [key for key in dict.fromkeys(keys) if self._maybe(key)]
        loads = marshal.loads
        for i in range(0, len(wanted), 900):  # SQLite's bound parameters per statement: 999 in old builds
            chunk = wanted[i:i + 900]
            query = f"SELECT key, value FROM map WHERE key IN ({','.join('?' * len(chunk))})"
            found.update((key, loads(value)) for key, value in self._db.execute(query, chunk))
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, value: Any) -> None:
        if self._db is None:
            self._memory[key] = value
            if len(self._memory) > self._limit:
                self._spill()
            return
        self._pending[key] = value
        self._note(key)
        if len(self._pending) >= _FLUSH:
            self._flush()

    def _spill(self) -> None:
        SPILLS[0] += 1
        path = os.path.join(self._folder.make(), "map.sqlite")
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("PRAGMA cache_size=-65536")  # 64 MiB of pages at most
        self._db.execute("CREATE TABLE map (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
        self._pending, self._memory = self._memory, {}
        self._bloom = bytearray(_BLOOM_BITS >> 3)
        for key in self._pending:
            self._note(key)
        self._flush()

    def _note(self, key: str) -> None:
        """Set the key's two bits of the Bloom filter that answers "never put" without a query."""
        h = hash(key)
        bloom = self._bloom
        for bit in (h & _BLOOM_MASK, (h >> 32) & _BLOOM_MASK):
            bloom[bit >> 3] |= 1 << (bit & 7)

    def _maybe(self, key: str) -> bool:
        """False when the key was surely never put (its bits are not both set); True when it may have been."""
        h = hash(key)
        bloom = self._bloom
        a, b = h & _BLOOM_MASK, (h >> 32) & _BLOOM_MASK
        return bool(bloom[a >> 3] & (1 << (a & 7))) and bool(bloom[b >> 3] & (1 << (b & 7)))

    def _flush(self) -> None:
        if self._db is None or not self._pending:
            return
        dumps = marshal.dumps
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR REPLACE INTO map VALUES (?, ?)",
                             [(k, dumps(v)) for k, v in self._pending.items()])
        self._db.execute("COMMIT")
        self._pending = {}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._folder.close()
        self._memory, self._pending, self._bloom = {}, {}, bytearray()

    def __enter__(self) -> UuidMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RecordList:
    """Fixed-width records of ``width`` integers, appended and read back in order: an
    ``array('q')`` until it holds :func:`threshold` records, then chunks of a temporary file."""

    def __init__(self, width: int, limit: int | None = None) -> None:
        self.width = width
        self._limit = (threshold() if limit is None else limit) * width
        self._memory = array("q")
        self._folder = _TempFolder()
        self._file = None
        self._count = 0

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    def __len__(self) -> int:
        return self._count

    def append(self, *values: int) -> None:
        self._memory.extend(values)
        self._count += 1
        if len(self._memory) >= self._limit:
            self._move()

    def extend(self, values: "list[int] | array") -> None:
        """Append many records at once: ``values`` holds ``width`` integers per record, flat (one call for a block
        of rows instead of one per record)."""
        self._memory.extend(values)
        self._count += len(values) // self.width
        if len(self._memory) >= self._limit:
            self._move()

    def _move(self) -> None:
        """The records in memory moved to the end of the temporary file (made on the first move)."""
        if self._file is None:
            SPILLS[0] += 1
            self._file = open(os.path.join(self._folder.make(), "records.bin"), "w+b")
        self._memory.tofile(self._file)
        self._memory = array("q")

    def blocks(self) -> Iterator[array]:
        """Every record in order, as flat arrays of ``width`` integers per record (a chunk at a time from disk):
        what set operations over all records read, with no tuple made per record."""
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            chunk = max(self.width, (self._limit // self.width) * self.width)
            while True:
                block = array("q")
                block.frombytes(self._file.read(chunk * block.itemsize))
                if not block:
                    break
                yield block
            self._file.seek(0, os.SEEK_END)
        if self._memory:
            yield self._memory

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        width = self.width
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            chunk = max(width, (self._limit // width) * width)
            while True:
                block = array("q")
                block.frombytes(self._file.read(chunk * block.itemsize))
                if not block:
                    break
                for i in range(0, len(block), width):
                    yield tuple(block[i:i + width])
            self._file.seek(0, os.SEEK_END)
        memory = self._memory
        for i in range(0, len(memory), width):
            yield tuple(memory[i:i + width])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._folder.close()
        self._memory = array("q")


class Interned:
    """Values numbered in the order first seen, so records can hold small integers instead."""

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def id(self, value: Any) -> int:
        found = self._ids.get(value)
        if found is None:
            found = self._ids[value] = len(self.values)
            self.values.append(value)
        return found


__all__ = ["DEFAULT_THRESHOLD", "ENV", "SPILLS", "Interned", "RecordList", "UuidMap", "sweep", "threshold",
           "user_folder_name"]
