"""``ikdata show`` gives the capture census beside a workload (issue 32 left it out): the run whose process
captured the workload (its receipt names the process and host), else every run kept; nothing without one."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ikdata.capture import census
from ikdata.cli import app

runner = CliRunner()


def _record(run: str, pid: int, host: str, op: str, seen: int, recorded: int, definition: str) -> dict:
    """One process's census record, made by the census's own counters."""
    census.reset()
    try:
        census.enabled()
        census.seen(op, seen)
        if recorded:
            census.recorded(op, definition, recorded)
        census.skipped(op, "selection rule", definition, seen - recorded)
        return {**census.record(run), "pid": pid, "host": host}
    finally:
        census.reset()


def _keep(root, run: str, *records: dict) -> None:
    (root / "census").mkdir(exist_ok=True)
    (root / "census" / f"{run}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _workload(root) -> tuple[str, dict]:
    receipt = json.loads((root / "receipts.jsonl").read_text().splitlines()[0])
    return receipt["uuid"], receipt


def test_show_gives_the_census_of_the_run_that_captured_the_workload(ikdata_dataset):
    uuid, receipt = _workload(ikdata_dataset)
    _keep(ikdata_dataset, "run-a", _record("run-a", receipt["process_id"], receipt["host"], "aten::mm", 5, 3,
                                           receipt["definition"]))
    _keep(ikdata_dataset, "run-b", _record("run-b", receipt["process_id"] + 1, "elsewhere", "aten::bmm", 7, 0,
                                           receipt["definition"]))
    shown = runner.invoke(app, ["show", str(ikdata_dataset), uuid, "--json"])
    assert shown.exit_code == 0, shown.output
    found = json.loads(shown.stdout)["census"]
    assert found["runs"] == ["run-a"] and found["matched"] is True
    assert (found["calls"], found["recorded_calls"]) == (5, 3)  # run-b's process captured nothing of it
    human = runner.invoke(app, ["show", str(ikdata_dataset), uuid], env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.output
    text = " ".join(human.output.split())
    assert "census of the run that captured it (run-a):" in text
    assert "ran 5 calls of 1 op; recorded 3 calls of 1 definition" in text
    assert "not recorded, selection rule: aten::mm x2" in text


def test_without_a_process_of_its_own_show_gives_every_run_and_without_a_census_nothing(ikdata_dataset):
    uuid, receipt = _workload(ikdata_dataset)
    plain = json.loads(runner.invoke(app, ["show", str(ikdata_dataset), uuid, "--json"]).stdout)
    assert "census" not in plain
    _keep(ikdata_dataset, "run-b", _record("run-b", receipt["process_id"] + 1, "elsewhere", "aten::bmm", 7, 0,
                                           receipt["definition"]))
    found = json.loads(runner.invoke(app, ["show", str(ikdata_dataset), uuid, "--json"]).stdout)["census"]
    assert found["runs"] == ["run-b"] and found["matched"] is False and found["calls"] == 7
    text = " ".join(runner.invoke(app, ["show", str(ikdata_dataset), uuid], env={"COLUMNS": "200"}).output.split())
    assert "census of every capture run kept (run-b):" in text
