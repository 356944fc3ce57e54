"""Issue 43, finding 8 and two weaknesses of lineage.

8. ``ikdata lineage --dot`` printed a traceback for a time of 1e20 in a manifest parent or a clone's origin
   note, while validate said clean. A time is now bounded by the schema (1970 to the end of 9999), which
   validate applies and lineage shares (:func:`ikdata.core.origin.valid_time`): the same bad time is a located
   problem in both, and no value of a time breaks a label.
- ``lineage`` of one workload read the whole report (100k cases: 700 MB); it now streams the report's cases
  and stops at the workload's, so a bad case or a torn tail after it does not hide it.
- A planted ``.ikdata-origin.json`` was shown as fact; lineage now marks it as an unverified local note.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merge_helpers import REPORT, capture
from security_helpers import trusted_folder

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.origin import ORIGIN_FILE
from ikdata.core.writer import DatasetWriter

PARENT = "ab" * 32


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _with_parent_at(root: Path, at) -> None:
    record = json.loads((root / manifest.MANIFEST).read_text())
    record["parents"] = [{"id": PARENT, "at": at, "how": "import", "source": str(root.parent / "gone")}]
    (root / manifest.MANIFEST).write_text(json.dumps(record))


@pytest.mark.parametrize("at", [1e20, -5.0, 1e300, -1e20])
def test_an_absurd_parent_time_is_one_located_problem_for_validate_and_lineage(tmp_path, at):
    root = capture(tmp_path / "ds", rows=1)
    _with_parent_at(root, at)
    code, output = _cli("validate", root)
    assert code != 0 and "/parents/0/at" in output, output
    for args in (("--dot",), ()):
        code, output = _cli("lineage", root, *args)
        assert code != 0 and "/parents/0/at" in output, output


def test_a_sane_parent_time_still_draws(tmp_path):
    root = capture(tmp_path / "ds", rows=1)
    _with_parent_at(root, 1_700_000_000.5)
    assert _cli("validate", root)[0] == 0
    code, output = _cli("lineage", root, "--dot")
    assert code == 0 and "import 2023-11-14" in output, output


def _plant_origin(root: Path, at) -> None:
    (root / ORIGIN_FILE).write_text(json.dumps({"format": "ikdata-origin/1", "how": "clone",
                                                "source": "https://trusted.example/official", "id": PARENT, "at": at}))


@pytest.mark.parametrize("at", [1e20, -1.0, "NaN", "1e20"])
def test_an_absurd_origin_time_is_a_located_problem_not_a_traceback(tmp_path, at):
    root = capture(tmp_path / "ds", rows=1)
    _plant_origin(root, at)
    for args in (("--dot",), (), ("--json",)):
        code, output = _cli("lineage", root, *args)
        assert code != 0 and ORIGIN_FILE in output and "/at" in output, output


def test_lineage_labels_a_planted_origin_note_unverified(tmp_path):
    root = capture(tmp_path / "ds", rows=1)
    _plant_origin(root, 1_700_000_000)
    code, output = _cli("lineage", root, "--dot")
    assert code == 0 and "unverified" in output, output
    code, output = _cli("lineage", root)
    assert code == 0 and "https://trusted.example/official" in output and "unverified" in output, output
    code, output = _cli("lineage", root, "--json")
    [node] = [n for n in json.loads(output)["nodes"].values() if n["cloned"]]
    assert node["cloned"]["verified"] is False and "unverified" in node["cloned"]["note"]
    uuid = json.loads((root / "receipts.jsonl").read_text().splitlines()[0])["uuid"]
    code, output = _cli("lineage", root, uuid)
    assert code == 0 and "cloned from https://trusted.example/official" in output and "unverified" in output


def test_an_oversized_origin_note_is_not_read(tmp_path):
    root = capture(tmp_path / "ds", rows=1)
    (root / ORIGIN_FILE).write_bytes(b" " * (1 << 20) + b"{}")
    code, output = _cli("lineage", root, "--dot")
    assert code != 0 and ORIGIN_FILE in output and "not read" in output, output


# -- lineage of one workload reads up to its case, not the whole report ------------------------------------


@pytest.fixture
def replayed(tmp_path):
    from ikdata.replay.runner import replay

    folder = trusted_folder(tmp_path)
    root = capture(tmp_path / "ds", rows=3)
    assert replay(ikdata.open(root, definitions=[folder]), reuse=False).exit_code == 0
    DatasetWriter(root).commit()
    report = json.loads((root / REPORT).read_text())
    return root, report


def _validations(root: Path, uuid: str) -> list[dict]:
    code, output = _cli("lineage", root, uuid, "--json")
    assert code == 0, output
    [chain] = json.loads(output)
    return chain["validations"]


def test_a_torn_report_tail_after_the_case_does_not_hide_it(replayed):
    root, report = replayed
    first, second = report["cases"][0], report["cases"][1]
    text = json.dumps(report, indent=2)
    torn = text[:text.index(json.dumps(second["uuid"]))]  # the report cut in the middle of the second case
    (root / REPORT).write_text(torn)
    [validation] = _validations(root, first["uuid"])
    assert validation["status"] == "passed" and validation["from"] == "this dataset's replay report"
    [later] = _validations(root, second["uuid"])  # the case that was cut: named, located, not a traceback
    assert "status" not in later and REPORT in later["reason"] and "/cases/1" in later["reason"]


@pytest.mark.parametrize("corrupt", ["status", "deep"])
def test_a_bad_case_after_the_match_does_not_hide_it(replayed, corrupt):
    root, report = replayed
    last = report["cases"][-1]
    if corrupt == "status":
        last["status"] = "certainly-fine"
    else:
        value: dict = {"x": 1}
        for _ in range(300):
            value = {"a": value}
        last["deep"] = value
    (root / REPORT).write_text(json.dumps(report))
    [validation] = _validations(root, report["cases"][0]["uuid"])
    assert validation["status"] == "passed"
    [bad] = _validations(root, last["uuid"])
    assert "status" not in bad and "/cases/2" in bad["reason"]


def test_one_workloads_lineage_reads_the_report_only_up_to_its_case(replayed, monkeypatch):
    """Counted, not timed: with 20,000 more cases after the workload's own (about 13 MB), lineage reads the
    first chunks of the report only."""
    from ikdata.core import cases as cases_module
    from ikdata.ops.lineage import trace

    root, report = replayed
    first = report["cases"][0]
    report["cases"] += [dict(first, uuid=f"{n:08d}-padding") for n in range(20_000)]
    (root / REPORT).write_text(json.dumps(report, indent=2))
    size = (root / REPORT).stat().st_size
    read = []

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            data = self.handle.read(n)
            read.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    real_open = open
    monkeypatch.setattr(cases_module, "open", lambda *a, **k: Counted(real_open(*a, **k)), raising=False)
    [chain] = trace(root, first["uuid"])
    [validation] = [v for v in chain.validations if v["from"] == "this dataset's replay report"]
    assert validation["status"] == "passed"
    assert read and sum(read) <= 2 << 20 < size, (sum(read), size)
