"""Import's re-check of a report case asks each declared family first: a family's own cases are its to re-check,
every other case is re-checked output by output."""

from __future__ import annotations

import sys
import types

import pytest

from ikdata.core import features, verdicts


@pytest.fixture
def declared(monkeypatch):
    module = types.ModuleType("ikdata_recheck_family")
    module.recheck = lambda case, report, definition: (["the family's own reason"] if case.record("mine") is not None
                                                        else None)  # handed the typed Case
    monkeypatch.setitem(sys.modules, "ikdata_recheck_family", module)
    family = features.Family("mine", recheck="ikdata_recheck_family:recheck")
    with features.registered(features.Feature("mine", family=family)):
        yield


def test_a_familys_case_is_rechecked_by_its_declared_hook(declared):
    case = {"definition": "d", "uuid": "u", "status": "passed", "mine": {}}
    assert verdicts.recheck(case, {"cases": [case]}) == ["the family's own reason"]


def test_a_case_no_family_claims_is_rechecked_output_by_output(declared):
    case = {"definition": "d", "uuid": "u", "status": "failed"}
    assert verdicts.recheck(case, {"cases": [case]}) == ["status is 'failed', not 'passed'"]


def test_a_trajectory_case_goes_to_the_diffusion_family_and_a_sampling_case_to_sampling():
    trajectory = {"definition": "trajectory:P", "uuid": "t", "status": "failed", "trajectory": {"k": 2, "eps": 0}}
    assert verdicts.recheck(trajectory, {"cases": [trajectory]}) == ["status is 'failed', not 'passed'"]
    sampled = {"definition": "s", "uuid": "u", "status": "passed", "metrics": {"samples": {"judged": 0}},
               "tolerance": {"samples": {"dtype": "int64", "judge": "sampling", "alpha": 0.5, "order": "any"}}}
    assert verdicts.recheck(sampled, {"cases": [sampled]}) == ["samples: no draw was judged"]
