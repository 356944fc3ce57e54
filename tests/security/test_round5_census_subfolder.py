"""Round five, finding 9: validate and import agree about ``census/sub/x.jsonl``.

Validate called a census file in a subfolder clean, clone carried it, and import then refused SRC whole calling the
census "trajectories". No writer of ikdata names a census file so (it is ``census/<run>.jsonl``), so both now refuse
it, with one located message that names it a census file.
"""

from __future__ import annotations

import json
import sys

from typer.testing import CliRunner

from ikdata.cli import app

runner = CliRunner()

PROGRAM = """
import torch, torch.nn.functional as F
W = torch.randn(4, 8)
for _ in range(3):
    F.linear(torch.randn(2, 8), W)
"""


def _said(result) -> str:
    return " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())


def test_validate_and_import_refuse_a_census_file_in_a_subfolder_in_the_same_words(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    src = tmp_path / "src"
    assert runner.invoke(app, ["capture", "--into", str(src), "--", sys.executable, str(script)]).exit_code == 0
    [kept] = list((src / "census").glob("*.jsonl"))
    (src / "census" / "sub").mkdir()
    (src / "census" / "sub" / "x.jsonl").write_text(json.dumps(json.loads(kept.read_text())) + "\n")
    assert runner.invoke(app, ["manifest", str(src)]).exit_code == 0
    checked = runner.invoke(app, ["validate", str(src)])
    assert checked.exit_code == 1, _said(checked)
    located = "census/sub/x.jsonl: not a capture census file"
    assert located in _said(checked)
    assert runner.invoke(app, ["replay", str(src)]).exit_code == 0
    dst = tmp_path / "dst"
    imported = runner.invoke(app, ["import", str(src), str(dst)])
    assert imported.exit_code != 0
    said = _said(imported)
    assert located in said and "trajectories" not in said
