"""The one path rule (DESIGN.md contract 3): a dataset path is relative, normalised and stays inside.

Every path read from a record (a descriptor, a remote manifest's ``files`` key, an import
journal's step) and every record file a dataset is read from goes through this module
before anything opens it:

- the text: not empty, not absolute (``/``, ``\\``, ``C:``), no backslash, no ``..``,
  and normalised (no ``.`` or empty segment, no trailing ``/``);
- the file system: once links are followed, the path is still inside the dataset root, and what
  it names is a regular file (or a folder), never a FIFO, a device or a socket, whose read
  could block forever or never end.

:class:`PathResolver` answers both for one root and caches each folder's real path, so
checking 100,000 blobs that share a few folders costs one ``lstat`` per file. A refusal is
an :class:`UnsafePath` (a :class:`~ikdata.core.errors.RecordError` that knows the path it
refused and gives a located :class:`~ikdata.core.problems.Problem`), never a bare string.
:func:`open_regular` is the open that goes with it: it refuses a special file before a read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Collection, Iterable

from ikdata.core.errors import FileSystemError, RecordError
from ikdata.core.problems import Problem
from ikdata.core.record_kinds import RECORD_FILES, RECORD_TOPS, kind_of
from ikdata.core.record_kinds import describe as _describe_records

UNSAFE = "unsafe-path"  # the Problem code of every refusal
_STATE_PREFIXES = (".ikdata", ".tmp-")  # state a dataset keeps for itself: staging, journals, locks, temp files


class UnsafePath(RecordError):
    """A path that breaks the path rule.

    Attributes:
        relative: the path as the record wrote it.
        reason: what is wrong with it and what was expected.
    """

    def __init__(self, relative: str, reason: str, *, path: str | None = None, line: int | None = None,
                 pointer: str | None = None) -> None:
        super().__init__(reason, path=path, line=line, pointer=pointer)
        self.relative, self.reason = relative, reason

    def at(self, path: str | None, line: int | None = None, pointer: str | None = None) -> UnsafePath:
        """The same refusal, located in the record that wrote the path."""
        return UnsafePath(self.relative, self.reason, path=path, line=line, pointer=pointer)

    def problem(self, where: str | None = None, line: int | None = None, pointer: str | None = None) -> Problem:
        """The refusal as a Problem of ``where`` (default: the refused path itself)."""
        return Problem(where or self.relative, self.reason, line, pointer, UNSAFE)


def special_kind(mode: int) -> str | None:
    """What a file of this mode is when it is neither a regular file nor a folder ("a FIFO"), else None."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def not_regular(path: str | os.PathLike, kind: str, *, operation: str = "read") -> FileSystemError:
    """The error for a FIFO, a device or a socket (``kind``) where a regular file is expected."""
    return FileSystemError(OSError(errno.EINVAL, f"it is {kind}, not a regular file", os.fspath(path)),
                           operation=operation)


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """Open ``path`` (links followed) and return the descriptor, only if it is a regular file.

    The open is non-blocking, so a FIFO with no writer or a device cannot hang it, and the
    file's type is checked with ``fstat`` on the descriptor itself (no race with a rename);
    the descriptor is made blocking again before it is returned.

    Raises:
        FileSystemError: a FIFO, a device, a socket (or a folder): :func:`not_regular`.
        OSError: the open itself failed.
    """
    fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0), mode)
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise not_regular(path, "a folder" if stat.S_ISDIR(found) else special_kind(found) or "not a file",
                              operation="read" if flags & os.O_ACCMODE == os.O_RDONLY else "open")
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- temporary files: one rule for every writer -------------------------------------------------------------

TEMP_PREFIX = ".tmp-"  # every temporary file a writer makes in a dataset starts so (the manifest never lists one)
TEMP_GRACE_S = 3600  # a temp file untouched this long belongs to a killed writer, wherever it ran
_TEMP_OWNER = re.compile(r"\.tmp-(?:[a-z]+-)?([0-9]+)\.([0-9a-f]{8})-")  # .tmp-[KIND-]PID.HOST-...


def _host_tag() -> str:
    import socket

    from ikdata.core.digest import bytes_digest

    return bytes_digest(socket.gethostname().encode())[:8]


def temp_prefix(kind: str = "") -> str:
    """The name a writer's temporary file starts with: ``.tmp-[KIND-]PID.HOST-`` (``HOST``: 8 hex digits of the
    host name's digest), so a sweep can tell a dead writer's file from a live one's (:func:`stale_temp`)."""
    return f"{TEMP_PREFIX}{kind + '-' if kind else ''}{os.getpid()}.{_host_tag()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def stale_temp(name: str, mtime: float, now: float) -> bool:
    """Whether a temp file (``name`` starts with :data:`TEMP_PREFIX`) belongs to no live writer: its name says it
    was made on this host by a process that is gone, or it is older than :data:`TEMP_GRACE_S` (a writer on
    another host, or a name from before the rule). A live writer's file, here or elsewhere, is never stale."""
    if not name.startswith(TEMP_PREFIX):
        return False
    owner = _TEMP_OWNER.match(name)
    if owner is not None and owner.group(2) == _host_tag():
        pid = int(owner.group(1))
        if pid == os.getpid() or _alive(pid):
            return now - mtime > TEMP_GRACE_S * 24  # a pid reused by a long-lived process: a day, then go
        return True
    return now - mtime > TEMP_GRACE_S


def sweep_temps(folder: str | os.PathLike, *, recursive: bool = False, remove: bool = True) -> list[str]:
    """Remove the stale temp files (:func:`stale_temp`) in ``folder`` (and its subfolders with ``recursive``,
    never into a linked folder or the dataset's own state ``.ikdata-*``); only regular files of this user are
    touched. Called by ``ikdata repair`` over the whole dataset and by each writer on its own folder before it
    writes, so a killed writer's leftovers go at the next run. Returns the removed paths, relative to ``folder``
    (with ``remove=False``: the paths it would remove, for validate)."""
    import time

    now, removed = time.time(), []
    user = os.geteuid()
    stack = [Path(folder)]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            try:
                if recursive and entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith(_STATE_PREFIXES[0]):
                        stack.append(Path(entry.path))
                    continue
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == user and stale_temp(entry.name, st.st_mtime, now):
                    if remove:
                        os.unlink(entry.path)
                    removed.append(os.path.relpath(entry.path, folder))
            except OSError:
                continue
    return sorted(removed)


class TooLarge(RecordError):
    """A file larger than the cap its reader sets: refused before a byte of it is read."""

    def __init__(self, display: str, size: int, cap: int, what: str) -> None:
        super().__init__(f"{size:,} bytes, more than the {cap:,} a {what} may hold; refused unread",
                         path=display)
        self.display, self.size, self.cap = display, size, cap

    def problem(self) -> Problem:
        return Problem(self.display, f"{self.size:,} bytes, more than the {self.cap:,} a file of its kind may hold; "
                       "refused unread (not written by ikdata: remove it or replace it with the real file)",
                       code="too-large")


def read_capped(path: str | os.PathLike, cap: int, *, what: str = "record file",
                display: str | None = None) -> bytes:
    """The bytes of a regular file no larger than ``cap``: the one whole-file read of a record file.

    The size is taken with ``fstat`` on the open descriptor before any read, and at most ``cap + 1`` bytes are
    read (a file that grows meanwhile is refused too), so a 1 GiB manifest costs nothing but the refusal.

    Raises:
        TooLarge: the file holds more than ``cap`` bytes (a located :class:`RecordError`).
        FileSystemError: a FIFO, a device or a socket (refused before any read).
        OSError: the open or the read failed.
    """
    fd = open_regular(path)
    with open(fd, "rb") as stream:
        size = os.fstat(fd).st_size
        if size > cap:
            raise TooLarge(display or os.fspath(path), size, cap, what)
        data = stream.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(display or os.fspath(path), len(data), cap, what)
    return data


def text_refusal(relative: object) -> UnsafePath | None:
    """The refusal of a path by its text alone (absolute, backslash, '..', not normalised), or None."""
    if not isinstance(relative, str) or not relative:
        return UnsafePath(str(relative), f"path {relative!r} is empty or not a string; expected a path relative "
                          "to the dataset root")
    if relative.startswith(("/", "\\")) or (len(relative) > 1 and relative[1] == ":"):
        return UnsafePath(relative, f"path {relative!r} is absolute; expected a path relative to the dataset root")
    if "\\" in relative:
        return UnsafePath(relative, f"path {relative!r} uses backslashes; expected '/' separators")
    parts = relative.split("/")
    if ".." in parts:
        return UnsafePath(relative, f"path {relative!r} contains '..'; expected a path that stays inside the "
                          "dataset")
    if "." in parts or "" in parts or "\0" in relative:
        return UnsafePath(relative, f"path {relative!r} is not normalised; expected no '.' or empty segments "
                          f"(e.g. {'/'.join(p for p in parts if p not in ('', '.'))!r})")
    return None


def check_text(relative: object) -> str:
    """``relative`` if its text obeys the path rule.

    Raises:
        UnsafePath: absolute, with a backslash or '..', or not normalised.
    """
    refusal = text_refusal(relative)
    if refusal is not None:
        raise refusal
    return relative  # type: ignore[return-value]


def record_path_refusal(relative: object) -> UnsafePath | None:
    """The refusal of a path that should name a record file (a remote manifest's ``files`` key), or None.

    Record files are ``receipts.jsonl`` and ``.json``/``.jsonl`` files under ``definitions/``,
    ``workloads/`` and ``reports/``; never a dataset's own state (``.ikdata-*``, ``.tmp-*``).
    """
    refusal = text_refusal(relative)
    if refusal is not None:
        return refusal
    assert isinstance(relative, str)
    parts = relative.split("/")
    if any(part.startswith(_STATE_PREFIXES) for part in parts):
        return UnsafePath(relative, f"path {relative!r} names ikdata's own state, which is never shared; "
                          "expected a definition, workload, receipt or report file")
    if not relative.isprintable():
        return UnsafePath(relative, f"path {ascii(relative)} holds a control character, an escape or a newline; "
                          "expected a record file's name, which never does")
    if relative in RECORD_FILES:
        return None
    if len(parts) < 2 or kind_of(relative) is None:
        return UnsafePath(relative, f"path {relative!r} is not a record file; expected {_describe_records()}")
    return None


class PathResolver:
    """Resolve dataset-relative paths under one root, with each folder's real path computed once.

    Make one per call site (a validation, a replay, an import): the cache assumes the
    folders do not move while it lives.

    Example:
        >>> paths = PathResolver("runs/gemm")
        >>> paths.resolve("blob/sha256/ab/ab12....safetensors")
        PosixPath('runs/gemm/blob/sha256/ab/ab12....safetensors')
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.real_root = os.path.realpath(self.root)
        self._inside = self.real_root.rstrip(os.sep) + os.sep
        self._real_dirs: dict[str, str] = {}

    def real(self, relative: str) -> str:
        """The real path of a textually safe ``relative`` (links followed; folders cached)."""
        return self._real(relative)[0]

    def _real(self, relative: str) -> tuple[str, int | None]:
        """The real path and the mode of what it names (None: nothing there), with one ``lstat``
        for a file that is not a link."""
        parent, _, name = relative.rpartition("/")
        real_parent = self._real_dirs.get(parent)
        if real_parent is None:
            real_parent = self._real_dirs[parent] = os.path.realpath(self.root / parent)
        real = os.path.join(real_parent, name)
        try:
            mode: int | None = os.lstat(real).st_mode
        except OSError:
            return real, None
        if stat.S_ISLNK(mode):
            real = os.path.realpath(real)
            try:
                mode = os.stat(real).st_mode
            except OSError:
                mode = None
        return real, mode

    def is_inside(self, real: str) -> bool:
        """Whether a real path is the root or under it."""
        return real == self.real_root or real.startswith(self._inside)

    def refusal(self, relative: object, *, known_inside: bool = False) -> UnsafePath | None:
        """Why ``relative`` may not be used (its text, a link that leaves the dataset, or a FIFO, device
        or socket), or None. A path with nothing there is not refused: its reader says it is missing.

        ``known_inside``: a directory scan already found it as a regular file inside the dataset.
        """
        found = text_refusal(relative)
        if found is not None or known_inside:
            return found
        assert isinstance(relative, str)
        real, mode = self._real(relative)
        if not self.is_inside(real):
            return UnsafePath(relative, f"path {relative!r} is a link that leaves the dataset (to {real})")
        kind = special_kind(mode) if mode is not None else None
        if kind is not None:
            return UnsafePath(relative, f"{relative!r} is {kind}, not a regular file; expected a file the dataset "
                              "holds (remove it, or put the real file there)")
        return None

    def resolve(self, relative: object, *, where: str | None = None, line: int | None = None,
                pointer: str | None = None) -> Path:
        """The path under the root of a dataset-relative path that obeys the rule.

        Raises:
            UnsafePath: located at ``where``/``line``/``pointer`` when given.
        """
        refusal = self.refusal(relative)
        if refusal is not None:
            raise refusal.at(where, line, pointer) if where else refusal
        return self.root / relative  # type: ignore[operator]

    def resolve_all(self, relatives: Iterable[str], *,
                    known_inside: Collection[str] = ()) -> dict[str, Path | UnsafePath]:
        """:meth:`resolve` for many paths: path -> path under the root, or its refusal (not raised)."""
        resolved: dict[str, Path | UnsafePath] = {}
        for relative in relatives:
            if relative not in resolved:
                refusal = self.refusal(relative, known_inside=relative in known_inside)
                resolved[relative] = refusal if refusal is not None else self.root / relative
        return resolved

    def record_file_refusal(self, path: Path, *, folder: bool = False) -> UnsafePath | None:
        """Why a record file found under the root (a row file, a definition, receipts, a report, or with
        ``folder`` the ``workloads/`` or ``definitions/`` folder itself) may not be read: once links are
        followed it must be a regular file (a folder) inside the dataset. None: it may be read."""
        relative = os.path.relpath(path, self.root).replace(os.sep, "/")
        refusal = self.refusal(relative)
        if refusal is not None:
            return refusal
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            return UnsafePath(relative, f"cannot read {relative!r}: {exc.strerror or exc}")
        if folder and not stat.S_ISDIR(mode):
            return UnsafePath(relative, f"{relative!r} is not a folder")
        if not folder and not stat.S_ISREG(mode):
            return UnsafePath(relative, f"{relative!r} is not a regular file; expected a record file")
        return None


def resolve(root: str | os.PathLike, relative: object, *, where: str | None = None) -> Path:
    """:meth:`PathResolver.resolve` for one path (no cache worth keeping)."""
    return PathResolver(root).resolve(relative, where=where)


__all__ = ["PathResolver", "RECORD_FILES", "RECORD_TOPS", "TEMP_GRACE_S", "TEMP_PREFIX", "TooLarge", "UNSAFE", "UnsafePath", "check_text",
           "not_regular", "open_regular", "read_capped", "record_path_refusal", "resolve", "special_kind", "stale_temp", "sweep_temps", "temp_prefix",
           "text_refusal"]
