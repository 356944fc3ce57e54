"""Import reads SRC's report through the one reader (core.cases.read_report) and works on its typed cases
(issue 33): a report that is not one is refused at its file and JSON pointer; a case's family records travel
with the validation its receipt gets, whatever the family (none is named by import), once the report schema
defines them for a case (issue 43)."""

from __future__ import annotations

import json

import pytest

from ikdata.core.errors import ProblemsFound
from ikdata.core.verdicts import expand_validation
from merge_helpers import REPORT, read_jsonl
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import validated  # noqa: F401  (a fixture)


def _edit_report(root, edit):
    from ikdata.core.writer import DatasetWriter

    report = json.loads((root / REPORT).read_text())
    edit(report)
    (root / REPORT).write_text(json.dumps(report))
    DatasetWriter(root).commit()


def test_a_report_that_is_not_one_is_refused_at_its_json_pointer(validated, tmp_path):
    src = validated("src", rows=2)
    _edit_report(src, lambda r: r["cases"][1].update(status="maybe"))
    with pytest.raises(ProblemsFound) as refused:
        import_dataset(src, tmp_path / "dst")
    [problem] = [p for p in refused.value.problems if p.path == REPORT]
    assert problem.pointer == "/cases/1/status" and "maybe" in problem.message, problem
    assert not (tmp_path / "dst" / "receipts.jsonl").exists()


def test_a_report_that_is_not_json_is_refused_naming_it(validated, tmp_path):
    src = validated("src", rows=1)
    (src / REPORT).write_text("{not json")
    with pytest.raises(ProblemsFound) as refused:
        import_dataset(src, tmp_path / "dst")
    [problem] = [p for p in refused.value.problems if p.path == REPORT]
    assert problem.code == "malformed-json" and "JSON" in problem.message


def test_only_the_family_records_the_schema_defines_travel_with_its_validation(validated, tmp_path):
    """A field the report schema does not define for a case (issue 43 finding 3: an unknown field was copied
    into every receipt) is not copied into the receipt's validation, and a case's field may not overwrite one
    of the validation's fixed fields. A family's record travels once the schema defines it for a case."""
    src = validated("src", rows=2)

    def edit(report):
        for case in report["cases"]:
            case["a_new_family"] = {"measured": [1, 2, 3]}
            case["finished_at"] = "a case's own field may not replace the report's"

    _edit_report(src, edit)
    dst = tmp_path / "dst"
    assert len(import_dataset(src, dst).added) == 2
    for receipt in read_jsonl(dst / "receipts.jsonl"):
        validation = expand_validation(dst, receipt["validation"])
        assert "a_new_family" not in validation
        assert isinstance(validation["finished_at"], float)
