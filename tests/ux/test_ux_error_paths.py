"""One error, one message: ``ikdata show/ls/stats/lineage`` on a local folder run without typer (the fast path,
cli/_fast.py), and the same command with ``--`` before its arguments runs through typer. Both hand their error to
one translation (cli/_errors.py), so a person sees the same line and the same exit code on either path. The
errors are real: a missing folder, a folder that is not a dataset, a name the OS refuses (ENAMETOOLONG, an
OSError), an unknown uuid, and a reader that closed the pipe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cli_helpers import IKDATA


def _run(args: list[str], *, closed_pipe: bool = False, debug: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="80")
    env.pop("IKDATA_DEBUG", None)
    if debug:
        env["IKDATA_DEBUG"] = "1"
    if not closed_pipe:
        return subprocess.run([IKDATA, *args], capture_output=True, text=True, env=env, timeout=300)
    read, write = os.pipe()
    os.close(read)  # as after ``| head`` has exited
    try:
        return subprocess.run([IKDATA, *args], stdout=write, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=300)
    finally:
        os.close(write)


def _both(command: str, rest: list[str], **how) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``ikdata COMMAND REST`` on the fast path, and through typer (``--`` is an argument the fast path leaves
    to typer)."""
    return _run([command, *rest], **how), _run([command, "--", *rest], **how)


def _uuid(root: Path) -> str:
    import ikdata

    return next(ikdata.open(root).workloads()).uuid


def test_the_two_paths_are_really_two(small_dataset, tmp_path):
    """The comparison below means something only if ``--`` really takes the typer path: with IKDATA_DEBUG=1
    the traceback shows which code ran."""
    fast, typer = _both("ls", [str(tmp_path / "nosuch")], debug=True)
    assert "Traceback" in fast.stderr and "Traceback" in typer.stderr  # debugging: the error is not translated
    assert "_fast.py" in fast.stderr and "click" not in fast.stderr, fast.stderr
    assert "click" in typer.stderr and "_fast.py" not in typer.stderr, typer.stderr


FOLDER_CASES = ("missing folder", "not a dataset", "name too long", "file, not a folder")
CASES = [(command, case) for command in ("ls", "stats", "show", "lineage") for case in FOLDER_CASES]
CASES += [("show", "unknown uuid"), ("lineage", "unknown uuid")]


@pytest.mark.parametrize("command, case", CASES, ids=lambda v: v)
def test_the_same_error_reads_the_same_on_both_paths(small_dataset, not_a_dataset, tmp_path, command, case):
    folder = {"missing folder": tmp_path / "nosuch", "not a dataset": not_a_dataset,
              "name too long": tmp_path / ("a" * 300),  # the OS refuses the name: an OSError, not ours
              "unknown uuid": small_dataset, "file, not a folder": small_dataset / "ikdata.json"}[case]
    rest = [str(folder), "nosuch"] if command == "show" or case == "unknown uuid" else [str(folder)]
    fast, typer = _both(command, rest)
    assert fast.returncode in (1, 2), (fast.returncode, fast.stderr)
    assert (fast.returncode, fast.stderr) == (typer.returncode, typer.stderr)
    assert fast.stdout == typer.stdout == ""
    errors = fast.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: ") and "Traceback" not in fast.stderr, fast.stderr
    if case == "name too long":  # an OSError: the command, the file and what the OS said
        assert fast.returncode == 1 and errors[0].startswith(f"error: ikdata {command}: {folder}"), errors


@pytest.mark.parametrize("command", ["ls", "stats", "show", "lineage"])
def test_a_closed_pipe_is_quiet_on_both_paths(small_dataset, command):
    rest = [str(small_dataset), _uuid(small_dataset)] if command == "show" else [str(small_dataset)]
    fast, typer = _both(command, rest, closed_pipe=True)
    assert (fast.returncode, fast.stderr) == (typer.returncode, typer.stderr) == (0, "")


def test_a_file_system_error_words_itself_and_a_bare_os_error_names_the_command(capsys):
    """The translation itself: an IkdataError that is also an OSError (FileSystemError) keeps its own words;
    a bare OSError is named by the command that met it; anything else is not the translator's."""
    import errno

    from ikdata.cli._errors import exit_code
    from ikdata.core.errors import FileSystemError

    full = OSError(errno.ENOSPC, "No space left on device", "ds/blob/x")
    assert exit_code(FileSystemError(full, operation="write"), "pack") == 1
    assert capsys.readouterr().err.startswith("error: ds/blob/x: cannot write: the disk is full")
    assert exit_code(full, None) == 1
    assert capsys.readouterr().err.startswith("error: ikdata: ds/blob/x: cannot write: the disk is full")
    assert exit_code(ValueError("a bug"), "ls") is None and capsys.readouterr().err == ""
