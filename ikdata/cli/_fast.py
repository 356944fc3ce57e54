"""``ikdata show``, ``ls``, ``stats`` and ``lineage`` on a local folder without loading typer (issue 26).

People run these by hand many times an hour; typer builds every parameter through pydantic, which alone
costs more than the command. :func:`run` parses the arguments these four commands take and runs the same
bodies the typer commands run (:mod:`ikdata.cli._read`); whatever it does not recognise (``--help``, an
unknown option, a wrong count of arguments, a URL or a folder remote) it leaves to typer, which prints
the same usage message as always. Errors go through the same translation as the typer layer's
(:mod:`ikdata.cli._errors`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

_COMMON_FLAGS = {"--json": "json", "--quiet": "quiet", "-q": "quiet"}
_COMMON_VALUES = {"--definitions": "definitions", "--endpoint-url": "endpoint_url", "--profile": "profile"}


@dataclass(frozen=True)
class _Spec:
    positionals: tuple[int, int]  # least, most
    flags: dict[str, str] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)


SPECS = {
    "show": _Spec((2, 2)),
    "ls": _Spec((1, 1), values={"--definition": "definition"}),
    "stats": _Spec((1, 1)),
    "lineage": _Spec((1, 2), flags={"--dot": "dot"}),
}


def parse(command: str, args: list[str]) -> tuple[list[str], dict] | None:
    """(positionals, options) of ``args`` for ``command``, or None when typer should parse them."""
    spec = SPECS[command]
    flags = {**_COMMON_FLAGS, **spec.flags}
    values = {**_COMMON_VALUES, **spec.values}
    if command == "lineage":
        values.pop("--definitions")
    positionals: list[str] = []
    options: dict = {"definitions": []}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if arg in flags:
            options[flags[arg]] = True
        elif name in values:
            if not eq:
                i += 1
                if i >= len(args) or args[i].startswith("-"):
                    return None
                inline = args[i]
            if values[name] == "definitions":
                options["definitions"].append(inline)
            elif values[name] in options:
                return None  # given twice: typer says what it does with that
            else:
                options[values[name]] = inline
        elif arg.startswith("-") and arg != "-":
            return None  # --help, an unknown option, "--": typer's
        else:
            positionals.append(arg)
        i += 1
    least, most = spec.positionals
    if not least <= len(positionals) <= most:
        return None
    return positionals, options


def run(command: str, args: list[str]) -> int | None:
    """Run ``ikdata COMMAND ARGS`` and return its exit code, or None to leave it to typer."""
    parsed = parse(command, args)
    if parsed is None:
        return None
    positionals, options = parsed
    from ikdata.core.errors import IkdataError

    try:
        path = positionals[0]
        if ":" in path:  # a URL or a scheme's typo (s3:/b); a path without a colon is neither: no import
            from ikdata.remote.url import check_location, is_url

            path = check_location(path)
            if is_url(path):
                return None  # read through a temporary verified copy: typer's context holds it
        if _is_folder_remote(path):
            return None  # the same
        return _run(command, path, positionals[1:], options)
    except (IkdataError, OSError) as exc:  # worded as the typer path words it (ikdata.cli._errors)
        from ikdata.cli._errors import exit_code  # here: a command that succeeds loads no more modules

        code = exit_code(exc, command)
        if code is None:
            raise
        return code


def _run(command: str, path: str, rest: list[str], options: dict) -> int:
    from pathlib import Path

    from ikdata.cli import _output as out
    from ikdata.cli import _read
    from ikdata.core.dataset import Dataset

    o = out.Output(json=bool(options.get("json")), quiet=bool(options.get("quiet")))
    if command == "lineage":
        return _read.lineage(Dataset.open(Path(path)).root, rest[0] if rest else None, bool(options.get("dot")), o)
    ds = Dataset.open(Path(path), definitions=[Path(d) for d in options["definitions"]])
    if command == "show":
        return _read.show(ds, rest[0], o)
    if command == "ls":
        return _read.ls(ds, options.get("definition"), o)
    return _read.stats(ds, path, o)


def _is_folder_remote(path: str) -> bool:
    from ikdata.core.locking import remote_folder

    return remote_folder(path) is not None
