"""Issue 39 findings 2, 3 and 8: output read by another program. A table in a pipe keeps each row whole on
one line (``ikdata ls DS | grep`` sees whole uuids); a reader that closes the pipe early (``| head``) ends
the command quietly with exit 0; ``--json -q`` prints the JSON document (--json wins), as the help says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli_helpers import IKDATA, run_cli
from foundation_helpers import gemm_definition_record

LONG_NAME = "gemm_attention_output_projection_of_layer_norm_n4_k8"  # a wide row: more than 80 columns


@pytest.fixture(scope="module")
def wide_dataset(tmp_path_factory) -> Path:
    """3 GEMM workloads of a definition whose name makes an ls row wider than 80 columns."""
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    root = tmp_path_factory.mktemp("pipes") / "ds"
    definition = Definition.from_dict(gemm_definition_record(LONG_NAME), origin=USER, source="test")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    for m in (1, 2, 3):
        a = rng.standard_normal((m, 8)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"engine": "test", "step": m})
    writer.commit()
    return root


def _uuids(root: Path) -> list[str]:
    import ikdata

    return [row.uuid for row in ikdata.open(root).workloads()]


@pytest.mark.parametrize("columns", ["80", "40"])
def test_ls_in_a_pipe_prints_each_row_whole_on_one_line(wide_dataset, columns):
    done = run_cli("ls", str(wide_dataset), env={"COLUMNS": columns})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not any(c in done.stdout for c in "│┃━─"), done.stdout  # no box: plain columns
    assert lines[:2] == ["3 workloads", f"{'uuid'.ljust(36)}  {'definition'.ljust(len(LONG_NAME))}  axes"]
    for uuid in _uuids(wide_dataset):
        found = [line for line in lines if uuid in line]  # what grep UUID finds: the whole row
        assert len(found) == 1 and found[0].split() == [uuid, LONG_NAME, found[0].split()[-1]], lines
        assert found[0].split()[-1].startswith("M=")


def test_stats_and_diff_tables_in_a_pipe_are_plain_columns(wide_dataset, tmp_path):
    done = run_cli("stats", str(wide_dataset))
    assert done.returncode == 0 and f"{LONG_NAME}  3" in done.stdout.splitlines(), done.stdout
    from ikdata.core.layout import init_dataset

    empty = tmp_path / "empty"
    init_dataset(empty)
    done = run_cli("diff", str(empty), str(wide_dataset))
    assert f"{LONG_NAME}  3      0        0" in done.stdout.splitlines(), done.stdout


def test_a_table_cell_cannot_break_its_row(capsys):
    from ikdata.cli import _output as out

    out.table("t", ["a", "b"], [("x\ny", "\x1b[31mred\tz")])
    assert capsys.readouterr().out.splitlines() == ["t", "a     b", "x\\ny  \\x1b[31mred\\tz"]


def _closed_pipe_run(*args: str) -> subprocess.CompletedProcess:
    """Run ``ikdata ARGS`` with stdout a pipe whose reader has already gone (as after ``| head`` exits)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([IKDATA, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [["lineage", "{ds}"], ["lineage", "{ds}", "{uuid}"], ["ls", "{ds}"],
                                  ["stats", "{ds}", "--json"], ["validate", "{ds}"], ["show", "{ds}", "{uuid}"],
                                  ["ls", "{ds}", "--definitions", "{ds}/definitions"], ["--help"], ["init", "-h"]],
                         ids=lambda a: " ".join(a))
def test_a_closed_pipe_ends_the_command_quietly(wide_dataset, args):
    uuid = _uuids(wide_dataset)[0]
    done = _closed_pipe_run(*(a.format(ds=wide_dataset, uuid=uuid) for a in args))
    assert (done.returncode, done.stderr) == (0, "")  # not "Broken pipe", not exit 1


def test_a_closed_pipe_does_not_hide_an_error(not_a_dataset):
    done = _closed_pipe_run("ls", str(not_a_dataset))
    assert done.returncode == 1 and "not a dataset" in done.stderr  # the error is on stderr, still open


def test_head_reads_the_first_lines_and_the_command_stays_quiet(wide_dataset):
    shell = f"'{IKDATA}' ls '{wide_dataset}' | head -n 1; echo \"status ${{PIPESTATUS[0]}}\""
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=300)
    assert done.stdout.splitlines() == ["3 workloads", "status 0"] and done.stderr == ""


def _json_and_quiet(args: list[str], tmp_path: Path) -> tuple[str, str]:
    """stdout of ``ikdata ARGS --json`` and of ``ikdata ARGS --json -q`` (typer's path and the fast path)."""
    from ikdata import cli

    outputs = []
    for extra in (["--json"], ["--json", "-q"], ["-q", "--json"]):
        done = CliRunner().invoke(cli.app, [*args, *extra])
        assert done.exit_code == 0, done.output
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    return outputs[0], outputs[1]


@pytest.mark.parametrize("command", ["ls", "stats", "show", "lineage", "validate", "index", "diff", "gc"])
def test_json_wins_over_quiet(wide_dataset, tmp_path, command):
    import shutil

    copy = tmp_path / "copy"  # index and gc write into the folder
    shutil.copytree(wide_dataset, copy)
    extra = {"show": [_uuids(copy)[0]], "lineage": [_uuids(copy)[0]], "diff": [str(wide_dataset)],
             "gc": ["--dry-run"]}.get(command, [])
    document, _ = _json_and_quiet([command, str(copy), *extra], tmp_path)
    assert json.loads(document) not in (None, "", [], {})


def test_json_wins_over_quiet_on_the_fast_path_too(wide_dataset, capsys):
    from ikdata import cli

    for command in ("ls", "stats", "lineage"):
        cli.main([command, str(wide_dataset), "--json"])
        alone = capsys.readouterr().out
        cli.main([command, str(wide_dataset), "-q", "--json"])
        assert capsys.readouterr().out == alone and json.loads(alone)


def test_the_help_says_which_wins():
    from ikdata import cli

    text = " ".join(CliRunner().invoke(cli.app, ["ls", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "with --json, the JSON document is printed (--json wins over --quiet)" in text
