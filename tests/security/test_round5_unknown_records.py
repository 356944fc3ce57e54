"""Round five, finding 5: ``reports/*.jsonl`` was a record kind with no schema and nothing ikdata writes has that
name, so a 200 KB binary with an ELF header and terminal escapes saved there was "clean" to validate, "nothing to
repair" to repair, and travelled with push and clone. The kind is gone; validate names every file in a record
folder that no record kind describes, by its path, and repair says what to do with it.
"""

from __future__ import annotations

import os
import shutil

from typer.testing import CliRunner

from ikdata.cli import app

runner = CliRunner()


def _said(result) -> str:
    return " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())


def test_a_binary_saved_as_reports_x_jsonl_is_named_by_validate_and_repair(make_ikdata_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = make_ikdata_dataset(2)
    (root / "reports").mkdir(exist_ok=True)
    blob = b"\x7fELF\x02\x01\x01" + b"\x1b[2J\x1b]0;owned\x07" * 10 + os.urandom(200_000)
    (root / "reports" / "x.jsonl").write_bytes(blob)
    assert runner.invoke(app, ["manifest", str(root)]).exit_code == 0
    checked = runner.invoke(app, ["validate", str(root)])
    assert checked.exit_code == 1, _said(checked)
    assert "reports/x.jsonl: no record kind describes this file" in _said(checked)
    assert "\x1b" not in checked.output
    repaired = runner.invoke(app, ["repair", str(root)])
    said = _said(repaired)
    assert repaired.exit_code == 1, said
    assert "nothing to repair" not in said
    assert "reports/x.jsonl: no record kind describes it" in said and "move it out of the dataset" in said
    assert (root / "reports" / "x.jsonl").read_bytes() == blob  # repair never deletes what it cannot vouch for
    (root / "reports" / "x.jsonl").unlink()
    assert runner.invoke(app, ["manifest", str(root)]).exit_code == 0
    assert runner.invoke(app, ["validate", str(root)]).exit_code == 0
    # the same for any record folder: a stray file beside definitions is named too
    shutil.copy(root / "receipts.jsonl", root / "definitions" / "notes.txt")
    assert "definitions/notes.txt: no record kind describes" in _said(runner.invoke(app, ["validate", str(root)]))
