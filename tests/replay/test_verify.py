"""recheck: a "passed" is trusted only if the recorded metrics and tolerance prove it."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

import ikdata
from ikdata.core.definitions import USER, Definition
from ikdata.replay import recheck
from ikdata.replay.runner import replay
from .replay_helpers import gemm_record


@pytest.fixture
def replayed(build):
    built = build(1)
    report = replay(ikdata.open(built.root, definitions=[built.definitions])).report
    return report["cases"][0], report


def test_a_real_pass_is_trusted(replayed):
    case, report = replayed
    assert recheck(case, report) == []
    definition = Definition.from_dict(gemm_record(), origin=USER)
    assert recheck(case, report, definition=definition) == []


@pytest.mark.parametrize("tamper, reason", [
    (lambda c: c.update(status="failed"), "status is 'failed', not 'passed'"),
    (lambda c: c.pop("metrics"), "no metrics recorded; replay it with this version of ikdata"),
    (lambda c: c.pop("tolerance"), "no tolerance recorded; replay it with this version of ikdata"),
    (lambda c: c["tolerance"]["C"].update(rtol=0.01),
     "C: tolerance rtol=0.01, atol=2e-05 is looser than the allowed float32 tolerance rtol=0.0001, atol=2e-05"),
    (lambda c: c["tolerance"]["C"].update(matched_ratio=0.5), "C: matched_ratio 0.5 is below the required 1.0"),
    (lambda c: c["metrics"]["C"].update(mismatched_fraction=0.25),
     "C: mismatched_fraction 0.25 exceeds 1 - matched_ratio = 0.0"),
    (lambda c: c["metrics"]["C"].update(mismatched_fraction="nan"), "C: mismatched_fraction is 'nan', not a number"),
    (lambda c: c["metrics"]["C"].update(max_error_ratio=3.0),
     "C: max_error_ratio 3.0 > 1: some element is outside atol + rtol * |expected|"),
    (lambda c: c["expected_digests"].update(D="0" * 64),
     "expected_digests name outputs ['C', 'D'] but the tolerance covers ['C']"),
    (lambda c: c["tolerance"]["C"].update(dtype="int32"),
     "C: int32 must match exactly, but was judged with rtol=0.0001, atol=2e-05, matched_ratio=1.0"),
])
def test_tampered_cases_are_not_trusted(replayed, tamper, reason):
    case, report = replayed
    case = copy.deepcopy(case)
    tamper(case)
    assert reason in recheck(case, report)


def test_judge_cases(replayed):
    case, report = replayed
    case = copy.deepcopy(case)
    bounds = {"relative_rms": 0.01, "relative_max": 0.015, "max_head_relative_rms": 0.02}
    case["tolerance"]["C"] = {"dtype": "float32", "judge": "gdn_chunk_state", "bounds": dict(bounds)}
    case["metrics"]["C"].update(relative_rms=0.001, relative_max=0.002, max_head_relative_rms=0.003)
    assert recheck(case, report) == []
    looser = copy.deepcopy(case)
    looser["tolerance"]["C"]["bounds"]["relative_rms"] = 0.5
    assert recheck(looser, report) == ["C: bound relative_rms <= 0.5 is looser than the allowed 0.01"]
    over = copy.deepcopy(case)
    over["metrics"]["C"]["max_head_relative_rms"] = 0.03
    assert recheck(over, report) == ["C: max_head_relative_rms = 0.03 exceeds its bound 0.02"]
    dropped = copy.deepcopy(case)
    del dropped["tolerance"]["C"]["bounds"]["relative_max"]
    assert recheck(dropped, report) == ["C: judge 'gdn_chunk_state' did not bound relative_max"]
    definition = Definition.from_dict(gemm_record(), origin=USER)  # names no judge
    assert recheck(case, report, definition=definition) == [
        "C: judged by 'gdn_chunk_state', but the definition 'gemm_n4_k8' names no judge for it"]


def test_definition_checks(replayed):
    case, report = replayed
    other = Definition.from_dict(gemm_record(reference="def run(A, W):\n    return A\n"), origin=USER)
    [reason] = recheck(case, report, definition=other)
    assert reason.startswith("judged with reference ")
    judged = Definition.from_dict(gemm_record(judge={"name": "gdn_chunk_state"}), origin=USER)
    assert recheck(case, report, definition=judged) == [
        "C: the definition names judge 'gdn_chunk_state' for it, but a tolerance judged it"]


def test_verify_does_not_import_torch():
    code = "import sys, ikdata.core.verdicts; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
