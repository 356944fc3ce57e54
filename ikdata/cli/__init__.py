"""The ``ikdata`` command: a thin typer layer over the library.

Errors are translated in one place, :func:`ikdata.cli._errors.exit_code`, for typer's commands and the
fast path alike: an :class:`IkdataError` prints its message (no traceback) and exits with its code
(1, or 2 for usage); an ``OSError`` (disk full, file-size limit, read-only, permission denied) prints
one line naming the command, the file and what to do, and exits 1; set IKDATA_DEBUG=1 to see the
traceback.

Start-up is paid per command (issue 26): :func:`main` answers ``--version`` and ``--help`` from
:data:`COMMANDS` without loading typer, runs ``show``, ``ls``, ``stats`` and ``lineage`` on a local
folder without typer (:mod:`ikdata.cli._fast`), and otherwise imports the one module whose command
was named, so ``ikdata show`` never loads capture, replay or the remotes. ``ikdata.cli.app`` (tests, the
library) still has every command.
"""

from __future__ import annotations

import sys

from ikdata._version import __version__

# Every command: the module that registers it, and its one-line summary (the first line of its
# docstring; tests/ux/test_ux_help.py keeps both true). The order is the order of ``ikdata --help``.
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
    "index": ("index_cmd", "Rebuild the uuid index that show, lineage and stats use (it is also refreshed on every "
                           "use)."),
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
VERSION = f"ikdata {__version__}"  # what --version prints, typer's path or not
HELP = "Capture, replay, import and share real operator workloads as content-addressed datasets."


def _summary(text: str) -> str:
    """The first sentence of a docstring, on one line."""
    import re

    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = re.search(r"(?<=[a-z)])\. ", paragraph)
    return paragraph[:end.start() + 1] if end else paragraph


_loading = False  # True while command modules are imported (they reach for ``app`` as they register)


def load(modules=MODULES):
    """Import the command modules named (each registers its commands on the app) and return the app."""
    global _loading
    import importlib

    from ikdata.cli._app import app

    _loading, was = True, _loading
    try:
        for name in modules:
            importlib.import_module(f"ikdata.cli.{name}")
    finally:
        _loading = was
    return app


def __getattr__(name: str):
    if name == "app":  # the whole app, every command registered (PEP 562: loaded on first use)
        if _loading:
            from ikdata.cli._app import app

            return app
        globals()["app"] = load()
        return globals()["app"]
    raise AttributeError(f"module 'ikdata.cli' has no attribute {name!r}")


def _print_help() -> None:
    """``ikdata --help`` without loading typer's commands: the same text typer prints, from COMMANDS."""
    import shutil
    import textwrap

    width = min(80, shutil.get_terminal_size((80, 24)).columns)
    lines = ["Usage: ikdata [OPTIONS] COMMAND [ARGS]...", "",
             *textwrap.wrap(HELP, width - 2, initial_indent="  ", subsequent_indent="  "), "", "Options:"]
    options = (("-V, --version", "Print the version and exit."),
               ("--install-completion", "Install completion for the current shell."),
               ("--show-completion", "Show completion for the current shell, to copy it or customize the "
                                     "installation."),
               ("-h, --help", "Show this message and exit."))
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
    """Entry point of the console script. A reader that closes the pipe early (``ikdata ls DS | head``)
    ends the command quietly with exit 0: to stop reading is not a problem (:mod:`ikdata.cli._errors`)."""
    try:
        _main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is seen below
    except BrokenPipeError as exc:
        _closed_pipe(exc)
    except SystemExit:
        try:
            sys.stdout.flush()
        except BrokenPipeError as exc:
            _closed_pipe(exc)
        raise


def _closed_pipe(exc: BrokenPipeError) -> None:
    """End as every closed pipe ends (quietly, exit 0), by the one translation of errors."""
    from ikdata.cli._errors import exit_code

    sys.exit(exit_code(exc, None))


def _main(args: list[str]) -> None:
    if args in (["--version"], ["-V"]):
        sys.stdout.write(VERSION + "\n")
        return
    if args in (["--help"], ["-h"]):
        _print_help()
        return
    named = next((a for a in args if not a.startswith("-")), None)
    if args and named == args[0] and named in ("show", "ls", "stats", "lineage"):
        from ikdata.cli import _fast  # a local folder read without typer; anything else falls through

        code = _fast.run(named, args[1:])
        if code is not None:
            sys.stdout.flush()
            if code:
                sys.exit(code)
            return
    app = load((COMMANDS[named][0],) if named in COMMANDS else MODULES)
    app(args=args, prog_name="ikdata")
