"""Round five, finding 2: records from elsewhere never rewrite what a dataset says about its own workloads.

A census rode along with any import and ``show`` chose the census beside a workload by process id and host
alone, so SRC's census naming DST's pid and host ("ran 5,002 calls ... EVIL-RUN") replaced what DST said of
its own capture. Now a receipt names the run that made its workload (``capture_run``), the census shown is
read from that run's own file, and import carries a census only with the workloads of its run; a census file
whose name carries a newline or an escape is refused at the boundary, escaped in the message.
"""

from __future__ import annotations

import json
import sys
import textwrap

from typer.testing import CliRunner

from ikdata.cli import app

runner = CliRunner()

PROGRAM = """
import torch, torch.nn.functional as F
W = torch.randn({n}, 8)
for _ in range(5):
    F.linear(torch.randn(2, 8), W)
"""


def _capture(tmp_path, name: str, n: int):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(PROGRAM.format(n=n)))
    into = tmp_path / name
    done = runner.invoke(app, ["capture", "--into", str(into), "--", sys.executable, str(script)])
    assert done.exit_code == 0, done.output
    return into


def _show(root, uuid: str) -> tuple[dict, str]:
    as_json = runner.invoke(app, ["show", str(root), uuid, "--json"])
    assert as_json.exit_code == 0, as_json.output
    text = runner.invoke(app, ["show", str(root), uuid], env={"COLUMNS": "300"}).output
    return json.loads(as_json.stdout), " ".join(text.split())


def _evil(pid: int, host: str) -> dict:
    return {"run": "EVIL-RUN", "pid": pid, "host": host, "argv": ["evil.py"], "rank": None, "world_size": None,
            "time": "2026-01-01T00:00:00Z", "torch": True, "enabled": True, "reason": None, "adapters": [],
            "ops": [{"op": "aten::evil", "calls": 5002, "recorded": [], "skipped": [
                {"reason": "no definition", "definition": None, "calls": 5002}]}]}


def test_an_unrelated_import_never_changes_the_census_show_gives_for_dst_s_own_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    dst = _capture(tmp_path, "dst", 4)
    src = _capture(tmp_path, "src", 6)  # another program: another definition, so the import admits its workload
    receipt = json.loads((dst / "receipts.jsonl").read_text().splitlines()[0])
    assert isinstance(receipt.get("capture_run"), str)  # the receipt names the run that made the workload
    before, before_text = _show(dst, receipt["uuid"])
    assert before["census"]["runs"] == [receipt["capture_run"]]
    # SRC carries a census that claims DST's process and host
    (src / "census" / "EVIL-RUN.jsonl").write_text(json.dumps(_evil(receipt["process_id"], receipt["host"])) + "\n")
    assert runner.invoke(app, ["manifest", str(src)]).exit_code == 0
    assert runner.invoke(app, ["replay", str(src)]).exit_code == 0
    imported = runner.invoke(app, ["import", str(src), str(dst)])
    assert imported.exit_code == 0, imported.output
    after, after_text = _show(dst, receipt["uuid"])
    assert after["census"] == before["census"]
    assert after_text == before_text
    assert "EVIL" not in after_text and "5,002" not in after_text
    assert not (dst / "census" / "EVIL-RUN.jsonl").exists()  # no workload admitted was made by that run
    assert runner.invoke(app, ["validate", str(dst)]).exit_code == 0


def test_a_census_file_named_with_a_newline_and_an_escape_is_refused_escaped(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    src = _capture(tmp_path, "src", 4)
    run = json.loads((src / "receipts.jsonl").read_text().splitlines()[0])["capture_run"]
    record = json.loads((src / "census" / f"{run}.jsonl").read_text())
    hostile = src / "census" / "x\x1b[2J\nfake.jsonl"
    hostile.write_text(json.dumps(record) + "\n")
    assert runner.invoke(app, ["manifest", str(src)]).exit_code == 0
    checked = runner.invoke(app, ["validate", str(src)])
    assert checked.exit_code == 1
    assert "census/x\\x1b[2J\\nfake.jsonl" in checked.output and "\x1b" not in checked.output
    assert "not a capture census file" in checked.output
    assert runner.invoke(app, ["replay", str(src)]).exit_code == 0
    dst = tmp_path / "dst"
    imported = runner.invoke(app, ["import", str(src), str(dst)])
    assert imported.exit_code != 0
    text = imported.output + (imported.stderr if imported.stderr_bytes is not None else "")
    assert "census/x\\x1b[2J\\nfake.jsonl" in text and "\x1b" not in text
    assert not (dst / "census").exists() or not any("\n" in p.name for p in (dst / "census").iterdir())
