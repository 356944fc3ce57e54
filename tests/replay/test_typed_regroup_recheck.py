"""Shards combine as typed reports: a family's regroup hook is handed the combined Report and what it gives back is
the report written; a case leaves a field out only when told; import's re-check and the summaries take a Case and a Report as they take their JSON."""

from __future__ import annotations

import sys
import types

import pytest

from ikdata.core import features, verdicts
from ikdata.core.status import Status
from ikdata.judging import families
from ikdata.core.cases import Case, Report
from ikdata.replay import report as report_mod
from ikdata.replay import summary


def _shard(number: int, *cases: dict) -> dict:
    return {"format": report_mod.FORMAT, "torch": "t", "ikdata_version": "v", "device": "cpu",
            "comparison": "all output elements", "tolerances": {}, "shard": f"{number}/2", "started_at": 1.0,
            "finished_at": 2.0, "refused": [], "cases": list(cases)}


def _case(uuid: str, status: str = "passed", **more) -> dict:
    return {"definition": "d", "uuid": uuid, "axes": {}, "status": status, **more}


@pytest.fixture
def regrouping(monkeypatch):
    """A declared family whose regroup fails every case of definition d (it sees them all: both shards')."""
    seen: list[object] = []

    def regroup(report):
        seen.append(report)
        return report.with_cases([c.with_(status=Status.FAILED, reason="decided together") for c in report.cases])

    module = types.ModuleType("ikdata_typed_regroup_family")
    module.regroup = regroup
    monkeypatch.setitem(sys.modules, "ikdata_typed_regroup_family", module)
    family = families.Family("typedregroup", regroup="ikdata_typed_regroup_family:regroup")
    with features.registered(features.Feature("typedregroup", family=family)):
        yield seen


def test_a_regroup_hook_gets_the_joined_report_and_its_answer_is_the_combined_report(regrouping):
    shards = [_shard(1, _case("b", reason="awaiting")), _shard(2, _case("a"))]
    combined = report_mod.combine_reports([Report.of(s) for s in shards])
    [handed] = regrouping
    assert isinstance(handed, Report) and [c.uuid for c in handed.cases] == ["a", "b"]
    assert [(c.uuid, c.status, c.reason) for c in combined.cases] == [("a", Status.FAILED, "decided together"),
                                                                        ("b", Status.FAILED, "decided together")]
    assert report_mod.combine(shards) == combined.to_json()  # the JSON entry point gives the same document
    assert combined.get("shards") == ["1/2", "2/2"] and combined.get("shard") is None


def test_a_field_left_out_is_no_longer_written_and_one_set_to_none_is_written_as_null():
    case = Case.from_json(_case("u", "skipped", reason="awaiting", sampling={"positions": 1}))
    assert list(case.without("reason", "sampling").to_json()) == ["definition", "uuid", "axes", "status"]
    assert case.with_(reason=None).to_json()["reason"] is None  # as a case read with "reason": null writes it


def test_recheck_takes_a_case_and_a_report_as_it_takes_their_json():
    sampled = _case("u", metrics={"samples": {"judged": 0}},
                    tolerance={"samples": {"dtype": "int64", "judge": "sampling", "alpha": 0.5, "order": "any"}})
    failed = _case("v", "failed")
    document = {"cases": [sampled, failed]}
    report = Report.of(document)
    for case in (sampled, failed):
        assert verdicts.recheck(Case.of(case), report) == verdicts.recheck(case, document) != []


def test_the_summaries_read_a_report_as_its_json():
    document = _shard(1, _case("a"), _case("b", "failed", reason="off by one"))
    report = Report.of(document)
    assert summary.summarize(report, report_path="r.json") == summary.summarize(document, report_path="r.json")
    assert summary.counts(report)[Status.FAILED] == 1 and summary.exit_code(report) == 1
    assert summary.case_rows(report) == summary.case_rows(document)
