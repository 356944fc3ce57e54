"""The ``ikdata`` command: a thin typer layer over the library.

Errors are translated in one place, :class:`_Group.invoke`: an
:class:`IkdataError` prints its message (no traceback) and exits with its code
(1, or 2 for usage); an ``OSError`` (disk full, file-size limit, read-only,
permission denied) prints one line naming the command, the file and what to do,
and exits 1; set IKDATA_DEBUG=1 to see the traceback.
"""

from __future__ import annotations

import os


import typer
from typer.core import TyperGroup

from ikdata.core.errors import IkdataError


class _Group(TyperGroup):
    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except IkdataError as exc:
            if os.environ.get("IKDATA_DEBUG"):
                raise
            _print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # the OS said no (disk full, size limit, read-only, permission): one line, exit 1
            if os.environ.get("IKDATA_DEBUG"):
                raise
            from ikdata.core.errors import describe_os_error

            command = f"ikdata {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "ikdata"
            _print_error(f"{command}: {describe_os_error(exc)}")
            raise typer.Exit(1) from None


def _print_error(message: str) -> None:
    from rich.markup import escape

    from ikdata.cli._output import err_console, terminal_safe

    # escape: messages quote user text and placeholders such as "[/PREFIX]", never markup; nor control characters
    err_console.print(f"[red]error:[/red] {escape(terminal_safe(message))}", markup=True, highlight=False)


app = typer.Typer(name="ikdata", cls=_Group, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Capture, replay, import and share real operator workloads as content-addressed datasets.")

from ikdata.cli import data  # noqa: E402,F401  (registers commands)
from ikdata.cli import commands  # noqa: E402,F401  (commands of later modules register here)


def main() -> None:
    """Entry point of the console script."""
    app()
