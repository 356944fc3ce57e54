"""The ``ikdata`` command: a thin typer layer over the library.

Errors are translated in one place, :class:`_Group.invoke`: an
:class:`IkdataError` prints its message (no traceback) and exits with its code
(1, or 2 for usage); an ``OSError`` (disk full, file-size limit, read-only,
permission denied) prints one line naming the command, the file and what to do,
and exits 1; set IKDATA_DEBUG=1 to see the traceback.

Start-up is paid per command (issue 26): :func:`main` answers ``--version`` and ``--help`` from
:data:`COMMANDS` without loading typer, and otherwise imports the one module whose command was
named, so ``ikdata show`` never loads capture, replay or the remotes. ``ikdata.cli.app`` (tests, the
library) still has every command.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperGroup

from ikdata._version import __version__
from ikdata.core.errors import IkdataError

# Every command: the module that registers it, and its one-line summary (the first line of its
# docstring; tests/ux/test_help.py keeps both true). The order is the order of ``ikdata --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("data", "Create an empty ikdata dataset with its manifest."),
    "validate": ("data", "Check every record, reference and blob; report every problem."),
    "ls": ("data", "List workloads: uuid, definition, axes."),
    "show": ("data", "Show one workload: its row, its receipt and its blobs."),
    "stats": ("data", "Definitions, workloads per definition, blobs, stored and referenced bytes, dedup ratio."),
    "repair": ("data", 'Finish every killed writer (import, capture, replay, gc); set aside torn lines and orphaned '
               'receipts.'),
    "manifest": ("data", "Rebuild the manifest from the files (after editing by hand) and print the dataset id."),
    "capture": ("capture_cmd", 'Run CMD with capture on in it and every Python process it starts; commit and '
                'summarise.'),
    "index": ("index_cmd", "Rebuild the uuid index that show and lineage use (it is also refreshed on every use)."),
    "import": ("merge_cmd", 'Merge a fully validated dataset into DST: all or nothing, each tensor stored once; '
               "SRC's verdicts are re-judged (a sample, or all) unless --trust-reports."),
    "lineage": ("merge_cmd", "Trace a workload to its capture, imports and validations; or show the parent graph."),
    "diff": ("merge_cmd", 'Show workloads added, removed and changed per definition, definitions changed, and '
             'pipeline calls (trajectories: seed, noise, model, scheduler) and model records that differ.'),
    "gc": ("merge_cmd", "Delete blobs that no workload or receipt references (holds the dataset lock)."),
    "noise": ("noise_cmd", 'Draw the initial noise of recipe cpu-randn-float32/1 and print its digest, so another '
              'engine can prove it started from the same noise.'),
    "pack": ("pack_cmd", "Move small loose blobs into packs (blob/packs/); rows keep naming them as before."),
    "unpack": ("pack_cmd", 'Write every packed blob back as a loose file and remove the packs (flashinfer-bench '
               'reads only loose blobs).'),
    "push": ("remote_cmd", 'Publish a dataset: only the blobs the remote lacks, then the files, then the manifest '
             '(last, atomically).'),
    "pull": ("remote_cmd", 'Fetch a remote dataset into PATH, verifying every blob; merges (import rules, the '
             "remote's verdicts re-judged unless --trust-reports) when PATH has data."),
    "clone": ("remote_cmd", 'Copy a remote dataset into a new folder, verifying every blob; the folder appears only '
              'when complete.'),
    "replay": ("replay_cmd", 'Rerun each trusted reference on the captured inputs and judge it against the captured '
               'outputs.'),
    "replay-combine": ("replay_cmd", 'Combine the shard reports of one replay into the report an unsharded run '
                       'would write.'),
    "report": ("report_cmd", 'Draw a replay report as a static HTML page (plotly, no server; opens offline in a '
               'browser).'),
}
MODULES = ("data", "capture_cmd", "index_cmd", "merge_cmd", "noise_cmd", "pack_cmd", "remote_cmd", "replay_cmd",
           "report_cmd")
HELP = "Capture, replay, import and share real operator workloads as content-addressed datasets."


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
            _print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # the OS said no (disk full, size limit, read-only, permission): one line, exit 1
            if os.environ.get("IKDATA_DEBUG"):
                raise
            from ikdata.core.errors import describe_os_error

            command = f"ikdata {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "ikdata"
            _print_error(f"{command}: {describe_os_error(exc)}")
            raise typer.Exit(1) from None


def _summary(text: str) -> str:
    """The first sentence of a docstring, on one line."""
    import re

    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = re.search(r"(?<=[a-z)])\. ", paragraph)
    return paragraph[:end.start() + 1] if end else paragraph


def _print_error(message: str) -> None:
    from rich.markup import escape

    from ikdata.cli._output import err_console, terminal_safe

    # escape: messages quote user text and placeholders such as "[/PREFIX]", never markup; nor control characters
    err_console.print(f"[red]error:[/red] {escape(terminal_safe(message))}", markup=True, highlight=False)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"ikdata {__version__}")
        raise typer.Exit(0)


_app = typer.Typer(name="ikdata", cls=_Group, no_args_is_help=True, add_completion=False,
                   pretty_exceptions_enable=False, rich_markup_mode=None, help=HELP)


@_app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                       help="Print the version and exit.")) -> None:
    pass


_loading = False  # True while command modules are imported (they reach for ``app`` as they register)


def load(modules=MODULES) -> typer.Typer:
    """Import the command modules named (each registers its commands on the app) and return the app."""
    global _loading
    import importlib

    _loading, was = True, _loading
    try:
        for name in modules:
            importlib.import_module(f"ikdata.cli.{name}")
    finally:
        _loading = was
    return _app


def __getattr__(name: str):
    if name == "app":  # the whole app, every command registered (PEP 562: loaded on first use)
        if _loading:
            return _app
        load()
        globals()["app"] = _app
        return _app
    raise AttributeError(f"module 'ikdata.cli' has no attribute {name!r}")


def _print_help() -> None:
    """``ikdata --help`` without loading typer's commands: the same text typer prints, from COMMANDS."""
    import shutil
    import textwrap

    width = min(80, shutil.get_terminal_size((80, 24)).columns)
    lines = ["Usage: ikdata [OPTIONS] COMMAND [ARGS]...", "",
             *textwrap.wrap(HELP, width - 2, initial_indent="  ", subsequent_indent="  "), "", "Options:"]
    options = (("-V, --version", "Print the version and exit."), ("--help", "Show this message and exit."))
    rows = [(name, summary) for name, (_, summary) in COMMANDS.items()]
    first = max(len(n) for n, _ in (*options, *rows)) + 4
    for title, entries in (("Options:", options), ("Commands:", rows)):
        if title == "Commands:":
            lines += ["", title]
        for name, text in entries:
            wrapped = textwrap.wrap(text, max(20, width - first)) or [""]
            lines.append(f"  {name.ljust(first - 2)}{wrapped[0]}")
            lines += [" " * first + rest for rest in wrapped[1:]]
    sys.stdout.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["-V"]):
        sys.stdout.write(f"ikdata {__version__}\n")
        return
    if args == ["--help"]:
        _print_help()
        return
    named = next((a for a in args if not a.startswith("-")), None)
    load((COMMANDS[named][0],) if named in COMMANDS else MODULES)
    _app(args=args, prog_name="ikdata")
