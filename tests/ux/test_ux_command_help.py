"""Issue 39 finding 4: ``-h`` is ``--help``; every command's help has an example and says what its exit codes
mean; typer's shell completion is there (``--show-completion``, and completing a command's name works)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli_helpers import IKDATA
from ikdata import cli

runner = CliRunner()


def _help(*args: str) -> str:
    done = runner.invoke(cli.app, list(args), env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_has_an_example_and_its_exit_codes(command):
    text = _help(command, "--help")
    assert _help(command, "-h") == text
    examples = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
    assert any(line.strip().startswith(f"ikdata {command} ") for line in examples.splitlines()), text
    codes = text.split("Exit codes:", 1)[1]
    assert re.search(r"^\s+0  done, nothing wrong$", codes, re.M), text
    assert re.search(r"^\s+1  \S", codes, re.M) and re.search(r"^\s+2  usage error", codes, re.M), text
    assert text.count("Exit codes:") == 1 and _help(command, "--help").count("Exit codes:") == 1  # added once
    assert [line for line in text.splitlines() if len(line) > 80] == []


def test_dash_h_on_the_whole_command_needs_no_typer():
    code = ("import sys, json\nsys.argv = ['ikdata', '-h']\nfrom ikdata.cli import main\nmain()\n"
            "sys.stderr.write(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("Usage: ikdata [OPTIONS] COMMAND [ARGS]...")
    assert not [m for m in json.loads(done.stderr) if m.split(".")[0] in ("typer", "click", "rich")]
    typer_help = _help("-h")
    for option in ("-V, --version", "--install-completion", "--show-completion", "-h, --help"):
        assert option in done.stdout and option in typer_help


def test_shell_completion_script_and_completing_a_command():
    detection_off = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}  # name the shell: no ps
    done = subprocess.run([IKDATA, "--show-completion", "bash"], capture_output=True, text=True, timeout=120,
                          env=detection_off)
    assert done.returncode == 0 and "_IKDATA_COMPLETE=complete_bash" in done.stdout, done.stdout + done.stderr
    env = {**os.environ, "_IKDATA_COMPLETE": "complete_bash", "COMP_WORDS": "ikdata replay-c", "COMP_CWORD": "1"}
    done = subprocess.run([IKDATA], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["replay-combine"], done.stdout + done.stderr
    env.update(COMP_WORDS="ikdata ls --defin", COMP_CWORD="2")
    done = subprocess.run([IKDATA], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["--definition", "--definitions"], done.stdout + done.stderr
