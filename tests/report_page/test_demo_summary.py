"""make demo's summary (tools/demo.py): each step's output goes to the log, the terminal gets one line per
step and a summary that says what each step found, with the commands to look further."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import demo  # noqa: E402


def test_each_step_is_logged_and_summarised_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = demo.Demo(tmp_path)
    ds = tmp_path / "shared"
    run.run("init shared", ["init", str(ds), "--name", "x"], lambda d: f"an empty dataset, id {d['id'][:12]}")
    listing = run.run("ls shared", ["ls", str(ds)], lambda d: f"{len(d)} workloads")
    assert listing == []
    log = (tmp_path / "demo.log").read_text()
    assert f"$ ikdata init {ds} --name x" in log and f"$ ikdata ls {ds}" in log and '"id"' in log
    progress = capsys.readouterr().out
    assert " 1/20 ok   init shared" in progress and " 2/20 ok   ls shared" in progress
    assert '"id"' not in progress  # the commands' own output stays in the log
    run.summary([(".venv/bin/ikdata ls shared", "every workload")], tmp_path / "page.html")
    shown = capsys.readouterr().out
    assert "everything the commands printed is in demo.log" in shown
    assert "ls shared    0 workloads" in shown  # the echoed ls says what it found, even when that is nothing
    assert "worst e/f:" in shown and "PSNR:" in shown
    assert ".venv/bin/ikdata ls shared  # every workload" in shown and "page.html" in shown


def test_a_failing_step_names_the_log_and_stops(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = demo.Demo(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        run.run("ls nothing", ["ls", str(tmp_path / "absent")])
    assert "demo.log" in str(stopped.value)
    assert "FAIL ls nothing" in capsys.readouterr().out


def test_the_lines_name_ids_as_replay_and_import_change_them(tmp_path):
    doc = {"added": ["u1", "u2"], "skipped": [], "blobs_linked": 3, "blobs_copied": 1, "blobs_present": 2,
           "bytes_in": 2048, "dataset_id": "b" * 64, "parent_id": "a" * 64,
           "rejudged": {"judged": 2, "claimed": 2, "agree": True}}
    line = demo.imported(tmp_path / "capture-minilm")(doc)
    assert line == ("+2 workloads, +4 blobs (2.0 KiB), 2 blobs there already; 2/2 verdicts re-judged: agree; "
                    f"id {'b' * 12} (merged from {'a' * 12})")
    assert "parent" not in line
    again = demo.imported(tmp_path)({**doc, "added": [], "skipped": ["u1", "u2"], "bytes_in": 0})
    assert again == f"nothing added: its 2 workloads are there, 0 B copied; id stays {'b' * 12}"
    assert demo.parse_json('embedded 2 sentences\n{"a": [1]}\n') == {"a": [1]}
    assert json.loads("[]") == demo.parse_json("[]")
