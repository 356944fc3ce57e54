"""``ikdata show`` gives the capture census beside a workload (issue 32 left it out): that of the run its receipt
names (``capture_run``, issue 43: never chosen by process id and host alone); nothing without one."""

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


def _workload(root, run: str | None = None) -> tuple[str, dict]:
    """The first workload's uuid and receipt; with ``run``, its receipt names that capture run as capture does."""
    lines = (root / "receipts.jsonl").read_text().splitlines()
    receipt = json.loads(lines[0])
    if run is not None:
        receipt["capture_run"] = run
        lines[0] = json.dumps(receipt)
        (root / "receipts.jsonl").write_text("".join(line + "\n" for line in lines))
    return receipt["uuid"], receipt


def test_show_gives_the_census_of_the_run_that_captured_the_workload(ikdata_dataset):
    uuid, receipt = _workload(ikdata_dataset, "run-a")
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


def test_without_a_run_named_by_its_receipt_show_gives_no_census_even_for_its_process_and_host(ikdata_dataset):
    uuid, receipt = _workload(ikdata_dataset)
    plain = json.loads(runner.invoke(app, ["show", str(ikdata_dataset), uuid, "--json"]).stdout)
    assert "census" not in plain
    _keep(ikdata_dataset, "run-b", _record("run-b", receipt["process_id"], receipt["host"], "aten::bmm", 7, 0,
                                           receipt["definition"]))
    found = json.loads(runner.invoke(app, ["show", str(ikdata_dataset), uuid, "--json"]).stdout)
    assert "census" not in found  # the same pid and host: no proof the run made this workload
    text = " ".join(runner.invoke(app, ["show", str(ikdata_dataset), uuid], env={"COLUMNS": "200"}).output.split())
    assert "census of" not in text
