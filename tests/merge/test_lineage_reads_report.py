"""Lineage reads the dataset's replay report through the one reader (core.cases.read_report): its cases are
each workload's validations, and a report that is not one is shown in the chain as a validation that cannot be
read, named with its JSON pointer, never a traceback and never silently dropped."""

from __future__ import annotations

import json

from ikdata.ops.lineage import trace
from merge_helpers import REPORT, read_jsonl
from merge_helpers import validated  # noqa: F401  (a fixture)


def test_each_case_of_the_report_is_a_validation_of_its_workload(validated):
    src = validated("src", rows=2)
    uuid = read_jsonl(src / "receipts.jsonl")[0]["uuid"]
    [chain] = trace(src, uuid)
    [reported] = [v for v in chain.validations if v["from"] == "this dataset's replay report"]
    assert reported["status"] == "passed" and reported["device"] == "cpu" and "C" in reported["metrics"]


def test_a_report_that_is_not_one_is_named_in_the_chain(validated):
    src = validated("src", rows=2)
    report = json.loads((src / REPORT).read_text())
    report["cases"][1]["status"] = "maybe"
    (src / REPORT).write_text(json.dumps(report))
    uuid = report["cases"][1]["uuid"]  # its own case is the bad one (a bad case after a workload's own hides nothing)
    [chain] = trace(src, uuid)
    [reported] = [v for v in chain.validations if v["from"] == "this dataset's replay report"]
    assert "/cases/1/status" in reported["reason"] and "maybe" in reported["reason"], reported
    assert REPORT in reported["reason"]
