"""The replay table at 80 columns on a terminal (issue 11 item 9): columns are dropped or cut, never wrapped.
(In a pipe it is plain columns, nothing cut: tests/ux/test_ux_replay_pipe.py.)"""

from __future__ import annotations

import os
import pty
import re
import subprocess

from cli_helpers import IKDATA, trusted_definitions, write_replayable
from ikdata.replay.summary import CASE_COLUMNS, fit_table, table_width

REASON = "output 'C': 8 of 8 elements (100.000%) fail"


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``ikdata ARGS`` with stdout on a pseudo-terminal (as a user at a terminal sees it), styles stripped."""
    leader, follower = pty.openpty()
    with subprocess.Popen([IKDATA, *args], stdout=follower, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "NO_COLOR": "1", "TERM": "xterm", **env}) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            chunks.append(chunk)
        stderr = process.stderr.read()
    os.close(leader)
    stdout = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", b"".join(chunks).decode())
    return subprocess.CompletedProcess(process.args, process.returncode, stdout.replace("\r\n", "\n"), stderr)


def test_replay_table_at_80_columns_keeps_every_row_on_one_line(tmp_path):
    root = write_replayable(tmp_path / "ds", rows=3, failing=1)
    definitions = trusted_definitions(tmp_path / "defs")
    done = run_cli("replay", str(root), "--definitions", str(definitions), "--no-reuse", env={"COLUMNS": "80"})
    assert done.returncode == 1, done.stderr  # one case fails
    lines = done.stdout.splitlines()
    table_and_notes = lines[:-1]  # the last line is the summary with the report's path, a plain line
    assert all(len(line) <= 80 for line in table_and_notes), "\n".join(lines)
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == 3, "\n".join(lines)  # one line per case: no cell wrapped onto a second line
    header = next(line for line in lines if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")][:4] == ["uuid", "axes", "status", "max abs"]
    failed = next(line for line in body if "failed" in line)
    uuid = failed.split("│")[1].strip()
    text = " ".join(done.stdout.split())
    assert f"{uuid}: {REASON}" in text  # the note, whole, under the table
    assert "max abs error 1" in text


def test_a_wide_terminal_keeps_the_note_column(tmp_path):
    root = write_replayable(tmp_path / "ds", rows=2, failing=1)
    definitions = trusted_definitions(tmp_path / "defs")
    done = run_cli("replay", str(root), "--definitions", str(definitions), "--no-reuse", env={"COLUMNS": "220"})
    header = next(line for line in done.stdout.splitlines() if line.startswith("┃"))
    assert header.split("┃")[-2].strip() == "note"
    assert any(REASON in line and line.startswith("│") for line in done.stdout.splitlines())


def _row(axes: str = "M=1", note: str = "") -> list[str]:
    return ["0fd89a59", axes, "failed", "1", "0.56", "0.83", "1", "0.001", note]


def test_fit_table_drops_columns_in_order_and_cuts_axes():
    rows = [_row(note="a long reason " * 10), _row()]
    wide = fit_table(rows, 500)
    assert wide.columns == CASE_COLUMNS and not wide.notes
    at_80 = fit_table(rows, 80)
    assert at_80.columns == CASE_COLUMNS[:-1] and at_80.notes == (("0fd89a59", "a long reason " * 10),)
    assert at_80.width() <= 80
    at_50 = fit_table(rows, 50)
    assert at_50.columns == ("uuid", "axes", "status", "max abs", "cos") and at_50.width() == 45
    narrow = fit_table(rows, 44)
    assert narrow.columns == ("uuid", "axes", "status", "max abs") and narrow.width() <= 44
    long_axes = fit_table([_row(axes=",".join(f"axis{i}={i * 1000}" for i in range(12)))], 80)
    assert long_axes.width() <= 80 and long_axes.rows[0][1].endswith("…")
    assert long_axes.columns[:4] == ("uuid", "axes", "status", "max abs")


def test_table_width_counts_borders_and_padding():
    assert table_width(["ab"], [["abcd"]]) == 1 + 4 + 3  # "│ abcd │"
