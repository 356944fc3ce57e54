"""The one exception hierarchy of ikdata.

    IkdataError
      UsageError            a bad option or configuration (exit 2)
      RecordError           a record that is malformed (.path, .line, .pointer)
        UnsafePath          a path that breaks contract 3 (.relative, .reason)         core/paths.py
        TooLarge            a file past its reader's size cap, refused unread (.size, .cap)  core/paths.py
      DefinitionError       a definition that is inconsistent, or a capture that breaks it
      ReferenceStepError    ikdata's own replay of a scheduler step failed (never the engine's fault)  diffusion/pipelines.py
      UntrustedReference    a reference that may not run (.digest, .source)
      StoreError            (.digest, .path)
        BlobNotFound
        BlobCorrupted
        PackError           a pack or pack index that is not what it claims           core/packs.py
      ProblemsFound         a check found problems (.problems)
        GcLeftDamage        gc finished but left a damaged pack in place (.result)     ops/gc.py
      MergeConflict         an import that would overwrite different content (.paths)
      NotADataset           a folder holding no dataset of any layout (.path, .looked_for)  core/dataset.py
      RemoteError           a remote that cannot be reached or read (.url)
        PublishConflict     another writer published first (compare-and-swap lost)   remote/backend.py
        BlobRefused         a fetched blob is not the tensor its name says            remote/blob_cache.py
      FileSystemError       the OS refused a read or write (.filename, .operation, .errno); also an OSError

    FormatError (a ValueError, core/safetensors_format.py) is the header parser's own: every caller turns
    it into a located Problem or a StoreError, so it never reaches a user.
    Refused (an Exception, flashinfer/convert.py) says why one FlashInfer definition or recorded call is left
    out of an import; the staging step lists each as a left-out item, so it never reaches a user either.
    NotTappable (an Exception, capture/compiled.py) marks a compiled graph's node the record pass leaves untapped
    (a symbolic size, a value that is no tensor); it never leaves the pass.

Every message says where, what, and what to do. The CLI formats these in one
place; library code raises them with the facts as attributes.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ikdata.core.problems import Problem


class IkdataError(Exception):
    """Root of every error ikdata raises on purpose."""

    exit_code = 1


class UsageError(IkdataError):
    """An option, path or configuration the user gave cannot be used."""

    exit_code = 2


class RecordError(IkdataError):
    """A record (a JSON file or a JSONL line) that is malformed."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 pointer: str | None = None) -> None:
        where = path or ""
        if line is not None:
            where += f":{line}"
        if pointer:
            where += f": {pointer}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path, self.line, self.pointer = path, line, pointer


class DefinitionError(IkdataError):
    """A definition that is inconsistent, or tensors that do not fit it."""

    def __init__(self, message: str, *, definition: str | None = None) -> None:
        super().__init__(f"{definition}: {message}" if definition else message)
        self.definition = definition


class UntrustedReference(IkdataError):
    """A definition's reference came from an untrusted place and may not run."""

    def __init__(self, name: str, digest: str, source: str) -> None:
        super().__init__(
            f"definition {name!r} from {source} is not trusted, so its reference will not run. "
            f"Read it, then pass --trust {digest} (or name its folder with --definitions).")
        self.name, self.digest, self.source = name, digest, source


class StoreError(IkdataError):
    """A blob that cannot be stored or read."""

    def __init__(self, message: str, *, digest: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.digest, self.path = digest, path


class BlobNotFound(StoreError):
    """A descriptor names a blob that is not there."""


class BlobCorrupted(StoreError):
    """A blob whose bytes do not match its header or its digest."""


class ProblemsFound(IkdataError):
    """A check found one or more problems; all of them are attached."""

    def __init__(self, problems: Sequence[Problem], summary: str) -> None:
        lines = [summary] + [f"  {p}" for p in problems[:20]]
        if len(problems) > 20:
            lines.append(f"  ... and {len(problems) - 20} more")
        super().__init__("\n".join(lines))
        self.problems = list(problems)


class MergeConflict(IkdataError):
    """An import would replace content that differs; nothing was written."""

    def __init__(self, message: str, *, paths: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.paths = list(paths)


class RemoteError(IkdataError):
    """A remote that cannot be reached, read or written."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url


# errno -> (what happened, what to do); the cases a user can act on
_OS_REASONS = {
    _errno.ENOSPC: ("the disk is full (ENOSPC)", "free some space, then run the command again"),
    _errno.EDQUOT: ("the disk quota is exhausted (EDQUOT)", "free some space, then run the command again"),
    _errno.EFBIG: ("the file would exceed the file-size limit (EFBIG)",
                   "raise the limit ('ulimit -f') or write elsewhere, then run the command again"),
    _errno.EROFS: ("the file system is read-only (EROFS)", "use a writable folder"),
    _errno.EACCES: ("permission denied (EACCES)", "check the owner and mode of the file and its folder"),
    _errno.EPERM: ("operation not permitted (EPERM)", "check the owner and mode of the file and its folder"),
    _errno.EISDIR: ("it is a folder, not a file (EISDIR)", "check the path"),
    _errno.ENOTDIR: ("a part of the path is a file, not a folder (ENOTDIR)", "check the path"),
    _errno.ENOENT: ("no such file or folder (ENOENT)", "check the path"),
    _errno.EMFILE: ("too many open files (EMFILE)", "raise 'ulimit -n', then run the command again"),
    _errno.EIO: ("an input/output error (EIO)", "check the disk"),
}


_WRITES = {_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG, _errno.EROFS}


def describe_os_error(exc: OSError, operation: str | None = None) -> str:
    """One line for an OSError: the file(s), the operation, what the OS said, and what to do.

    Example:
        >>> describe_os_error(OSError(28, "No space left on device", "ds/blob/x"), "write")
        'ds/blob/x: cannot write: the disk is full (ENOSPC); free some space, then run the command again'
    """
    reason, hint = _OS_REASONS.get(exc.errno, (exc.strerror or str(exc) or type(exc).__name__, ""))
    if operation is None and exc.errno in _WRITES:
        operation = "write"  # only a write can hit a full disk, a size limit or a read-only file system
    where = os.fsdecode(exc.filename) if exc.filename is not None else ""
    if getattr(exc, "filename2", None) is not None:
        where += f" -> {os.fsdecode(exc.filename2)}"
    text = f"cannot {operation}: {reason}" if operation else reason
    return (f"{where}: {text}" if where else text) + (f"; {hint}" if hint else "")


class FileSystemError(IkdataError, OSError):
    """The operating system refused an operation on a file (disk full, size limit, read-only,
    permission). An OSError too (same errno and filename), so code that handles OSError still does."""

    def __init__(self, exc: OSError, *, operation: str, filename: str | os.PathLike | None = None) -> None:
        name = filename if filename is not None else exc.filename
        OSError.__init__(self, exc.errno, exc.strerror, None if name is None else os.fspath(name))
        self.operation = operation

    def __str__(self) -> str:
        return describe_os_error(self, self.operation)
