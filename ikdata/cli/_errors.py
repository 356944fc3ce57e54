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
    if isinstance(exc, KeyboardInterrupt):
        from ikdata.cli._output import error

        error(interrupted(command))
        return INTERRUPTED
    if not isinstance(exc, (IkdataError, OSError)) or os.environ.get(DEBUG_ENV):
        return None
    from ikdata.cli._output import error

    if isinstance(exc, IkdataError):  # first: a FileSystemError is both, and words itself
        error(str(exc))
        return exc.exit_code
    error(f"{'ikdata ' + command if command else 'ikdata'}: {describe_os_error(exc)}")
    return 1


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program Ctrl-C stopped
# What running the command again does, for the commands that go on from where they stopped.
_RESUME = {
    "push": "run the same push again: it sends only what the remote lacks, and the manifest goes last, so the "
            "remote still names only what it holds",
    "pull": "run the same pull again: it fetches only what is missing",
    "clone": "run the same clone again: what it fetched is kept beside the folder, so it fetches only the rest",
    "replay": "run it again with --resume to keep the cases already judged",
    "import": "run the same import again: an import either completes or leaves the dataset as it was",
    "capture": "what the program wrote so far is in the dataset; ikdata validate says whether it is whole",
}


def interrupted(command: str | None) -> str:
    """The line a Ctrl-C ends a command with: that it stopped, that what it wrote is valid, how to go on."""
    name = f"ikdata {command}" if command else "ikdata"
    advice = _RESUME.get(command or "", "what it wrote so far is valid (ikdata repair cleans up if not)")
    return f"{name}: interrupted (Ctrl-C); {advice}."


def stdout_closed() -> None:
    """Stdout on the null device: what is left in its buffer is dropped without a second error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (a test's capture)
        pass


__all__ = ["DEBUG_ENV", "INTERRUPTED", "exit_code", "interrupted", "stdout_closed"]
