"""What ``ikdata`` says when a command fails, and its exit code: one translation for both ways a command runs.

A command runs through typer (:class:`ikdata.cli._app._Group`) or, for ``show``/``ls``/``stats``/``lineage``
on a local folder, without it (:mod:`ikdata.cli._fast`). Both hand their error to :func:`exit_code` (as does
:func:`ikdata.cli.main` for a pipe found closed at the end), so the same error prints the same line and ends
with the same code on either path:

- an :class:`~ikdata.core.errors.IkdataError`: its message, no traceback; its own code (1, or 2 for usage);
- an ``OSError`` (disk full, size limit, read-only, permission denied): ``ikdata CMD: FILE: cannot ...; what
  to do``, exit 1;
- a ``BrokenPipeError`` (the reader of stdout went away, ``ikdata ls DS | head``): nothing, exit 0.

With ``IKDATA_DEBUG=1`` the first two are left to raise, so their traceback shows.
"""

from __future__ import annotations

import os
import sys

from ikdata.core.errors import IkdataError, describe_os_error

DEBUG_ENV = "IKDATA_DEBUG"


def exit_code(exc: BaseException, command: str | None) -> int | None:
    """Say what ``exc`` means on stderr and return the exit code of ``ikdata COMMAND``; None when the error
    is not one a person should see as a line (anything else, or any error under ``IKDATA_DEBUG``): re-raise it.
    ``command`` is the command's name (``"ls"``), or None before one was named.
    """
    if isinstance(exc, BrokenPipeError):  # to stop reading is not a problem, even while debugging
        stdout_closed()  # so nothing flushed later fails again ("Exception ignored ..." at exit)
        return 0
    if not isinstance(exc, (IkdataError, OSError)) or os.environ.get(DEBUG_ENV):
        return None
    from ikdata.cli._output import error

    if isinstance(exc, IkdataError):  # first: a FileSystemError is both, and words itself
        error(str(exc))
        return exc.exit_code
    error(f"{'ikdata ' + command if command else 'ikdata'}: {describe_os_error(exc)}")
    return 1


def stdout_closed() -> None:
    """Stdout on the null device: what is left in its buffer is dropped without a second error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (a test's capture)
        pass


__all__ = ["DEBUG_ENV", "exit_code", "stdout_closed"]
