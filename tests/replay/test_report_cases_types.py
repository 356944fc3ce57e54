"""The typed report (ikdata.core.cases): a replay's report reads as a Report and writes back byte for byte;
the one reader names the file and the field of a broken report."""

from __future__ import annotations

import json

import orjson
import pytest

import ikdata
from ikdata.core.errors import RecordError
from ikdata.core.status import Status
from ikdata.core.cases import Case, Report, read_report
from ikdata.replay import report as report_mod
from ikdata.replay.runner import replay


def test_a_replayed_report_reads_as_types_and_writes_back_the_same_bytes(build):
    built = build(3)
    result = replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False)
    path = result.report_path
    report = read_report(path)
    assert isinstance(report, Report) and len(report.cases) == 3
    assert all(isinstance(c, Case) and c.status is Status.PASSED for c in report.cases)
    assert report.counts()[Status.PASSED] == 3 and report.counts()["reused"] == 0
    written = orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
    assert written == path.read_bytes()
    assert report_mod.load(path) == json.loads(path.read_bytes())


def test_a_family_record_and_an_unknown_field_survive_a_round_trip():
    data = {"definition": "d", "uuid": "u", "status": "skipped", "sampling": {"positions": 3}, "later": [1, 2],
            "reason": "awaiting"}
    case = Case.from_json(data)
    assert case.record("sampling") == {"positions": 3} and case.status is Status.SKIPPED
    assert list(case.to_json().items()) == list(data.items())
    assert case.with_(status=Status.PASSED).to_json()["status"] == "passed"


@pytest.mark.parametrize("text, where", [
    ('{"torch": "2", "device": "cpu", "tolerances": {}, "cases": [{"definition": "d", "uuid": "u", '
     '"status": "fine"}]}', "/cases/0/status"),
    ('{"torch": "2", "device": "cpu", "tolerances": {}}', "cases"),
    ('{"cases": [', "expected one JSON document"),
])
def test_a_broken_report_is_refused_naming_the_file_and_the_field(tmp_path, text, where):
    path = tmp_path / "replay.json"
    path.write_text(text)
    with pytest.raises(RecordError) as info:
        read_report(path)
    assert str(path) in str(info.value) and where in str(info.value)


def test_no_report_says_how_to_make_one(tmp_path):
    with pytest.raises(RecordError, match="run 'ikdata replay'"):
        read_report(tmp_path / "replay.json")


def test_group_verdicts_are_read_per_family_and_say_what_was_not_judged():
    data = {"torch": "2", "device": "cpu", "tolerances": {}, "cases": [],
            "sampling": [{"definition": "s", "alpha": 0.001, "verdict": "too_small", "tests": []}]}
    report = Report.from_json(data)
    assert [g.definition for g in report.groups["sampling"]] == ["s"]
    assert report.not_judged() == ["s: too few draws to judge"]
    assert report.to_json() == data
