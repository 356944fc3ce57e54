"""Issue 51 finding 5: ``capture --into runs/z -- pyhton x.py`` (a command that cannot start) left ``runs/z``
behind, although capture.md says a folder the run created is removed; a program ended by SIGTERM was reported
as "status -15". Now nothing the run made is left, and the signal is named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli_helpers import IKDATA


def _capture(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([IKDATA, "capture", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("why", ["no such program", "no such --definitions folder"])
def test_a_capture_that_cannot_start_leaves_no_folder_it_made(tmp_path, why):
    extra = ["--definitions", "nodefs"] if why == "no such --definitions folder" else []
    program = "pyhton" if why == "no such program" else sys.executable
    done = _capture(tmp_path, "--into", "runs/z", *extra, "--", program, "x.py")
    assert done.returncode == 2, done.stderr
    assert ("cannot run 'pyhton'" if why == "no such program" else "--definitions nodefs: no such folder") \
        in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither runs/z nor runs/


def test_a_capture_that_cannot_start_keeps_a_folder_that_was_there(tmp_path):
    (tmp_path / "runs" / "z").mkdir(parents=True)
    done = _capture(tmp_path, "--into", "runs/z", "--", "pyhton", "x.py")
    assert done.returncode == 2 and (tmp_path / "runs" / "z").is_dir()


def test_a_program_ended_by_sigterm_is_named_so(tmp_path):
    done = _capture(tmp_path, "--into", "ds", "--", sys.executable, "-c",
                    "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert done.returncode == 128 + 15, done.stderr
    assert "the command was killed by SIGTERM (exit code 143)" in done.stderr
    assert "status -15" not in done.stderr


def test_a_program_that_exits_with_a_status_is_reported_with_it(tmp_path):
    done = _capture(tmp_path, "--into", "ds", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert done.returncode == 3 and "the command exited with status 3" in done.stderr
