"""The typer app behind ``ikdata`` (:mod:`ikdata.cli` loads it only when a command runs): error translation,
help that reads at 80 columns and ends with the command's exit codes, ``-h``, ``--version``, shell completion,
and a quiet end when the reader of stdout goes away (``ikdata ls DS | head``)."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from ikdata.cli import HELP, VERSION, _summary
from ikdata.cli._errors import exit_code
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


# What exit 1 means, per command (the default: problems found); 0 and 2 mean the same everywhere.
_EXIT_ONE = {
    "init": "the folder could not be written",
    "validate": "problems found (each is listed)",
    "ls": "a line could not be read (named on stderr)",
    "show": "the folder holds no dataset, or a line could not be read",
    "stats": "a line could not be read (the figures leave it out)",
    "repair": "something found could not be finished (the notes say what)",
    "manifest": "the manifest could not be written",
    "capture": "nothing asked for could be captured, or a captured call was lost; "
               "when the program fails, its own exit status",
    "index": "the index could not be written, or a row file was refused",
    "import": "refused (nothing was written): SRC has problems, a conflict, or a re-judged verdict failed",
    "lineage": "the folder holds no dataset, or a record could not be read",
    "diff": "a folder holds no dataset, or a record could not be read",
    "gc": "a blob could not be deleted",
    "noise": "the noise could not be drawn or saved",
    "pack": "a blob was left loose (each is named)",
    "unpack": "a blob could not be written back",
    "push": "the remote refused or a transfer failed (its manifest is left as it was)",
    "pull": "a blob did not verify or the merge was refused (PATH is left as it was)",
    "clone": "a blob did not verify or the copy failed (no folder is left behind)",
    "replay": "a case failed or could not run",
    "replay-combine": "a case of the combined report did not pass",
    "report": "the report could not be read or the page written",
}
EXIT_CODES_TITLE = "Exit codes:"


def exit_codes(name: str) -> str:
    """The help's last paragraph: what 0, 1 and 2 mean for command ``name``."""
    import textwrap

    one = textwrap.wrap(_EXIT_ONE.get(name, "problems found (named on stderr)"), 70)
    return "\n".join(["\b", EXIT_CODES_TITLE, "  0  done, nothing wrong", f"  1  {one[0]}",
                      *(f"     {line}" for line in one[1:]),
                      "  2  usage error: a wrong option or argument, no such folder or workload"])


class _Group(TyperGroup):
    def get_command(self, ctx, cmd_name):  # type: ignore[override]
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _clean_metavars(command)
            if EXIT_CODES_TITLE not in (command.epilog or ""):
                command.epilog = ((command.epilog or "").rstrip() + "\n\n" + exit_codes(cmd_name)).lstrip()
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
        except (IkdataError, OSError, KeyboardInterrupt) as exc:  # worded as the fast path words it (ikdata.cli._errors)
            code = exit_code(exc, ctx.invoked_subcommand)
            if code is None:
                raise
            raise typer.Exit(code) from None


def _show_version(value: bool) -> None:
    if value:
        typer.echo(VERSION)
        raise typer.Exit(0)


# -h as well as --help, on every command (click passes help_option_names down to each command's context);
# add_completion: typer's --install-completion and --show-completion (bash, zsh, fish, PowerShell).
app = typer.Typer(name="ikdata", cls=_Group, no_args_is_help=True, add_completion=True,
                   context_settings={"help_option_names": ["-h", "--help"]},
                   pretty_exceptions_enable=False, rich_markup_mode=None, help=HELP)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                       help="Print the version and exit.")) -> None:
    pass
