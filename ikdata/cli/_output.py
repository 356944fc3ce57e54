"""Output in one place: the human, ``--json`` and ``--quiet`` modes every command shares.

The rules, the same for every command (each builds an :class:`Output` from its options):

- stdout carries the result and nothing else: one JSON document with ``--json``; tables and
  lines for a person otherwise; nothing with ``--quiet`` (``--json`` wins over ``--quiet``).
- Problems met along the way, warnings and progress go to stderr, so ``--json`` output always
  parses. (``validate`` is the one command whose result *is* its problem list: in human mode
  it prints them on stdout, in ``--json`` inside the document.)
- Exit 1 whenever problems were found (:meth:`Output.exit`), 0 when clean; 2 is a usage error.
- A table is boxed on a terminal and plain columns elsewhere (a pipe, a file): rows are never wrapped.
- A reader that closes the pipe early (``| head``) ends the command quietly, exit 0 (:func:`ikdata.cli.main`).
- Progress (:meth:`Output.progress`): a bar on a terminal, a line every few seconds on stderr
  otherwise (``IKDATA_PROGRESS_INTERVAL`` seconds, default 5), nothing with ``--quiet``.
- Human text never carries a record's control characters to the terminal (:func:`terminal_safe`):
  lines, table cells, warnings and problems show an escape sequence as ``\\x1b[31m``, not as colour.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NoReturn, Sequence

from ikdata.cli._progress import human_bytes, open_meter  # noqa: F401  (commands use out.human_bytes)
from ikdata.core.problems import Problem

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# C0 and C1 controls but newline and tab, DEL, and the Unicode controls that reorder or break lines
# (bidirectional overrides and isolates, line and paragraph separators): a record may hold any of them.
_UNSAFE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (0x09, 0x0A)}
_UNSAFE.update({c: f"\\u{c:04x}" for c in (0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                                             *range(0x2066, 0x206A))})


def terminal_safe(text: Any) -> str:
    """``text`` as a string that shows as itself on a terminal: every control character written as an
    escape (ESC as ``\\x1b``), so a record cannot colour, move the cursor, retitle or clear the screen."""
    return str(text).translate(_UNSAFE)


def cell(value: Any) -> Text:
    """A table cell showing ``value`` literally: control characters escaped, no rich markup parsed."""
    from rich.text import Text

    return Text(terminal_safe(value))


# ``console`` (stdout) and ``err_console`` (stderr) are made on first use (PEP 562): rich is most of what a
# read-only command would otherwise import before it starts, and ``info`` lines need none of it.
_CONSOLES: dict[str, "Console"] = {}


def _console(name: str) -> "Console":
    if name not in _CONSOLES:
        from rich.console import Console

        console = Console(stderr=name == "err_console", highlight=False, soft_wrap=True)
        console.on_broken_pipe = _reader_gone  # rich would exit 1; cli.main ends quietly with 0
        _CONSOLES[name] = console
    return _CONSOLES[name]


def _reader_gone() -> None:
    """The reader of our output went away (``| head``): let the entry point end the command quietly."""
    import errno

    raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")


def __getattr__(name: str) -> Any:
    if name in ("console", "err_console"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape(text: str) -> str:
    """``text`` with rich markup escaped (:func:`rich.markup.escape`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class Output:
    """The output mode of one command run: ``json`` (one document on stdout) and ``quiet``.

    Example:
        >>> o = Output(json=json_, quiet=quiet)
        >>> o.result(report.to_dict(), lambda: o.info("clean"))
        >>> o.exit(report.problems)
    """

    def __init__(self, *, json: bool = False, quiet: bool = False) -> None:
        self.json = json
        self.quiet = quiet

    @property
    def human(self) -> bool:
        """Whether lines for a person go to stdout (neither --json nor --quiet)."""
        return not self.json and not self.quiet

    def result(self, document: Any, human: Callable[[], None] | None = None) -> None:
        """The command's result: ``document`` as JSON with --json, else what ``human`` prints."""
        if self.json:
            emit_json(document)
        elif human is not None and not self.quiet:
            human()

    def info(self, message: str) -> None:
        """A line of the human result on stdout (never with --json or --quiet)."""
        if self.human:
            info(message)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A table of the human result on stdout (never with --json or --quiet)."""
        if self.human:
            table(title, columns, rows)

    def warn(self, message: str) -> None:
        """Something the user should know that is not the result: stderr, even with --json."""
        if not self.quiet:
            _console("err_console").print(f"[yellow]warning:[/yellow] {escape(terminal_safe(message))}", markup=True,
                              highlight=False)

    def problems(self, found: Sequence[Problem], *, label: str = "") -> None:
        """Problems met along the way: always on stderr (they are why the exit code is 1)."""
        problems(found, label=label)

    @contextlib.contextmanager
    def progress(self, label: str, *, unit: str = "items") -> Iterator[Callable[[Any], None] | None]:
        """A progress callback for the library (None with --quiet): see :mod:`ikdata.cli._progress`."""
        if self.quiet:
            yield None
            return
        with open_meter(label, unit=unit, console=_console("err_console")) as meter:
            yield meter

    def exit(self, found: Any = (), *, code: int | None = None) -> NoReturn:
        """End the command: ``code`` if given, else 1 when ``found`` (problems, or a truth value) is non-empty."""
        import typer  # here, not at the top: ikdata show's fast path (cli/_read.py) never loads typer

        raise typer.Exit(code if code is not None else (1 if found else 0))


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True) -> Iterator[None]:
    """Point file descriptor 1 at stderr for the block, so that programs a command runs (capture)
    print there and a ``--json`` document stays alone on stdout."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout."""
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def emit_json_lines(records: Iterable[Any]) -> None:
    """Print JSON Lines on stdout, one record per line as it comes (``--json-lines``): a reader
    parses each line alone, and nothing is built as one document first."""
    write = sys.stdout.write
    for record in records:
        write(json.dumps(record, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table on stdout: boxed and fitted to a terminal; plain columns, never wrapped or cut, anywhere else
    (a pipe or a file), so ``ikdata ls DS | grep`` and ``awk`` see each row whole on one line."""
    if not _is_terminal():
        _plain_table(title, columns, rows)
        return
    from rich.table import Table

    t = Table(title=cell(title), title_justify="left")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(cell(c) for c in row))
    _console("console").print(t)


def is_terminal() -> bool:
    """Whether stdout is a terminal: tables are drawn boxed there, as plain columns anywhere else."""
    return _is_terminal()


def _is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout, or a closed one
        return False


def _plain_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """The title line, then the header and one line per row, columns padded with spaces to line up."""
    def text(value: Any) -> str:
        return terminal_safe(value).replace("\t", "\\t").replace("\n", "\\n")

    lines = [[text(c) for c in columns], *([text(c) for c in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines if i < len(line)) for i in range(len(columns))]
    write = sys.stdout.write
    write(text(title) + "\n")
    for line in lines:
        write("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n")


def problems(found: Sequence[Problem], *, to_stdout: bool = False, label: str = "") -> None:
    """Print problems, one per line (stderr unless ``to_stdout``: only validate's result list goes there)."""
    if not found:
        return
    target = _console("console" if to_stdout else "err_console")
    for p in found:
        target.print(f"[red]✗[/red] {escape(terminal_safe(label + str(p)))}", markup=True, highlight=False)


def error(message: str) -> None:
    """``error: MESSAGE`` on stderr, even with --quiet (it is why the exit code is not 0), the message escaped:
    it quotes user text, never markup. The one way a failed command speaks (:mod:`ikdata.cli._errors`)."""
    _console("err_console").print(f"[red]error:[/red] {escape(terminal_safe(message))}", markup=True, highlight=False)


def info(message: str) -> None:
    """A line of human output on stdout, control characters escaped (:func:`terminal_safe`)."""
    sys.stdout.write(terminal_safe(message) + "\n")  # as rich would print it (soft wrap, no markup), without rich
