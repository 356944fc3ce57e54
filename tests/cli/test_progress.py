"""Progress of long work (issue 11 item 7): when stderr is not a terminal, a line every
IKDATA_PROGRESS_INTERVAL seconds on stderr; nothing with --quiet; never on stdout."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console
from typer.testing import CliRunner

from cli_helpers import run_cli, trusted_definitions, write_replayable
from ikdata.cli import app
from ikdata.cli._progress import LineMeter, open_meter
from ikdata.core.progress import Progress
from ikdata.remote.transfer import Progress as TransferProgress

EVERY_EVENT = {"IKDATA_PROGRESS_INTERVAL": "0"}
runner = CliRunner(env=EVERY_EVENT)


def test_replay_writes_progress_lines_when_stderr_is_a_file(tmp_path):
    root = write_replayable(tmp_path / "ds", rows=3)
    definitions = trusted_definitions(tmp_path / "defs")
    log = tmp_path / "stderr.log"
    done = run_cli("replay", str(root), "--definitions", str(definitions), "--no-reuse", "--json",
                   env=EVERY_EVENT, stderr_file=log)
    assert done.returncode == 0, done.stdout
    json.loads(done.stdout)  # progress never reaches stdout
    lines = log.read_text().splitlines()
    assert any(re.fullmatch(r"replay: 3/3 cases, [0-9.e+]+/s", line) for line in lines), lines
    assert any(re.fullmatch(r"replay: 3/3 cases, [0-9.e+]+/s, [0-9.]+ s", line) for line in lines), lines


def test_validate_deep_import_push_pull_report_progress(tmp_path, make_ikdata_dataset):
    src = make_ikdata_dataset(3, name="src")
    definitions = trusted_definitions(tmp_path / "defs")
    deep = runner.invoke(app, ["validate", str(src), "--deep"])
    assert deep.exit_code == 0, deep.output
    assert "validate rehash: 7/7 blobs" in deep.stderr and "validate rehash" not in deep.stdout
    replayed = runner.invoke(app, ["replay", str(src), "--definitions", str(definitions), "--no-reuse", "-q"])
    assert replayed.exit_code == 0 and replayed.stdout == ""
    imported = runner.invoke(app, ["import", str(src), str(tmp_path / "dst"), "--definitions", str(definitions)])
    assert imported.exit_code == 0, imported.output
    assert "import rehash: 7/7 blobs" in imported.stderr and "import stage: 7/7 blobs" in imported.stderr
    pushed = runner.invoke(app, ["push", str(tmp_path / "dst"), str(tmp_path / "remote")])
    assert pushed.exit_code == 0, pushed.output
    assert re.search(r"^push upload: 7/7 objects, .*B/.*B, .*/s", pushed.stderr, re.M), pushed.stderr
    pulled = runner.invoke(app, ["clone", str(tmp_path / "remote"), str(tmp_path / "cloned")])
    assert pulled.exit_code == 0, pulled.output
    assert re.search(r"^clone download: 7/7 objects", pulled.stderr, re.M), pulled.stderr


def test_quiet_draws_no_progress(tmp_path, make_ikdata_dataset):
    src = make_ikdata_dataset(3, name="src")
    for args in (["validate", str(src), "--deep"], ["push", str(src), str(tmp_path / "remote")]):
        result = runner.invoke(app, [*args, "--quiet"])
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and result.stderr == "", args


def test_no_line_before_the_interval_has_passed(make_ikdata_dataset):
    src = make_ikdata_dataset(3, name="src")
    result = CliRunner(env={"IKDATA_PROGRESS_INTERVAL": "3600"}).invoke(app, ["validate", str(src), "--deep"])
    assert result.exit_code == 0 and result.stderr == ""


def test_line_meter_rates_and_phases():
    sink = io.StringIO()
    meter = LineMeter("import", "blobs", Console(file=sink, width=200), every=0)
    meter(Progress("rehash", 0, 4))  # nothing done yet: no line
    meter(Progress("rehash", 2, 4))
    meter(TransferProgress("upload", 1, 2, 3 * 1024 * 1024, 4 * 1024 * 1024))
    meter.close()
    lines = sink.getvalue().splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"import rehash: 2/4 blobs, [0-9.e+]+/s", lines[0])
    assert re.fullmatch(r"import upload: 1/2 blobs, 3\.0 MiB/4\.0 MiB, .+/s", lines[1])
    assert lines[2].startswith("import upload: 1/2 blobs, 3.0 MiB/4.0 MiB") and lines[2].endswith(" s")


def test_a_terminal_gets_a_bar_not_lines():
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, width=100)
    with open_meter("replay", unit="cases", console=console) as meter:
        assert not isinstance(meter, LineMeter)
        meter(Progress("", 1, 2))
