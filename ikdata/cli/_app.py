"""The typer app behind ``ikdata`` (:mod:`ikdata.cli` loads it only when a command runs): error translation,
help that reads at 80 columns, ``--version``."""

from __future__ import annotations

import os

import typer
from typer.core import TyperGroup

from ikdata._version import __version__
from ikdata.cli import HELP, _summary
from ikdata.cli._read import print_error
from ikdata.core.errors import IkdataError


def _clean_metavars(command) -> None:
    """Metavars a person reads (``DIR``, ``N``, ``TEXT``), not typer's ``{path}`` or ``<list[Path]>``."""
    for param in getattr(command, "params", ()):
        if param.metavar is None and not getattr(param, "is_flag", False) and param.param_type_name != "argument":
            param.metavar = _type_name(param)
        if param.param_type_name == "argument":
            if param.metavar is None:
                param.metavar = (param.name or "ARG").upper()
            if hasattr(param, "_usage_display_name"):  # typer >= 0.2x draws {path} and <str>: plain names
                import types

                for method in ("_usage_display_name", "_rich_display_name", "display_type_rich"):
                    setattr(param, method, types.MethodType(getattr(_CleanArgument, method), param))
    for sub in getattr(command, "commands", {}).values():
        _clean_metavars(sub)


def _type_name(param) -> str:
    desc = getattr(param, "type_descriptor", None)
    annotation = getattr(desc, "annotation", None)
    import typing
    from pathlib import Path

    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args:
        annotation = args[0]
    if getattr(desc, "is_choice", False) and desc.choices:
        return "[" + "|".join(map(str, desc.choices)) + "]"
    if annotation is int:
        return "N"
    if annotation is float:
        return "NUMBER"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "PATH"
    return "TEXT"


class _CleanArgument:
    """Mixed into typer's argument class: ``DIR``/``[KEY]`` in usage, no ``<str>`` after the name."""

    def _usage_display_name(self) -> str:  # noqa: D401
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx):
        return None


class _Group(TyperGroup):
    def get_command(self, ctx, cmd_name):  # type: ignore[override]
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _clean_metavars(command)
        return command

    def format_commands(self, ctx, formatter) -> None:  # type: ignore[override]
        """Each command with its whole first line of help, wrapped (click cuts it at 45 characters)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None or command.hidden:
                continue
            rows.append((name, _summary(command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except IkdataError as exc:
            if os.environ.get("IKDATA_DEBUG"):
                raise
            print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # the OS said no (disk full, size limit, read-only, permission): one line, exit 1
            if os.environ.get("IKDATA_DEBUG"):
                raise
            from ikdata.core.errors import describe_os_error

            command = f"ikdata {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "ikdata"
            print_error(f"{command}: {describe_os_error(exc)}")
            raise typer.Exit(1) from None


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"ikdata {__version__}")
        raise typer.Exit(0)


app = typer.Typer(name="ikdata", cls=_Group, no_args_is_help=True, add_completion=False,
                   pretty_exceptions_enable=False, rich_markup_mode=None, help=HELP)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                       help="Print the version and exit.")) -> None:
    pass
