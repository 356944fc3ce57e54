"""Issue 51 finding 4: ``replay`` printed box-drawn tables into a pipe, while ls, stats and capture print plain
columns there. In a pipe its per-definition table is plain columns, every column kept and no row cut, so
``ikdata replay DS | grep UUID`` finds the whole row (status, errors and the failure's note)."""

from __future__ import annotations

import pytest

from cli_helpers import run_cli, trusted_definitions, write_replayable
from foundation_helpers import GEMM_NAME


@pytest.mark.parametrize("columns", ["200", "40"])
def test_replay_in_a_pipe_prints_plain_columns_with_each_case_whole(tmp_path, columns):
    import ikdata

    root = write_replayable(tmp_path / "ds", rows=3, failing=1)
    done = run_cli("replay", str(root), "--definitions", str(trusted_definitions(tmp_path / "defs")), "--no-reuse",
                   env={"COLUMNS": columns})
    assert done.returncode == 1, done.stderr  # one case fails
    assert not any(c in done.stdout for c in "│┃━─┏┗╭╰…"), done.stdout  # no box, nothing cut
    lines = done.stdout.splitlines()
    title = lines.index(f"{GEMM_NAME}: 3 cases")
    assert lines[title + 1].split() == ["uuid", "axes", "status", "max", "abs", "rel", "rms", "cos", "mism", "s",
                                        "note"]
    uuids = [row.uuid for row in ikdata.open(root).workloads()]
    for index, uuid in enumerate(uuids):
        found = [line for line in lines if line.startswith(uuid[:8])]  # what grep finds: the whole row
        assert len(found) == 1, lines
        words = found[0].split()
        assert words[1] == f"M={index + 1}" and words[2] == ("failed" if index == 1 else "passed"), found
    failed = next(line for line in lines if line.startswith(uuids[1][:8]))
    assert "fail |a - e| <=" in failed  # the failure's note is on its row, whole, not moved under the table
