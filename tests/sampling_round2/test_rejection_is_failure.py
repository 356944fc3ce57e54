"""A test that rejects at its alpha is a failure, whatever the power computation says (issue 36, finding 5)."""

from __future__ import annotations

import numpy as np


def _records(draw_rare: bool, n: int = 40):
    from ikdata.sampling.distribution import Settings
    from ikdata.sampling.records import record_logits

    rng = np.random.default_rng(3)
    logits = np.full((n, 16), -1e9, np.float32)
    logits[:, 0] = 4.0 + rng.random(n).astype(np.float32)  # two kept tokens, p(rare) about 0.02
    logits[:, 1] = 0.0
    drawn = np.ones(n, np.int64) if draw_rare else (rng.random(n) < 0.02).astype(np.int64)
    return record_logits(logits, Settings.of(n, temperature=1.0), drawn, np.arange(n), order="hf", seed=1)


def test_a_rejecting_test_with_little_power_fails_its_cases():
    from ikdata.sampling.groups import decide

    verdict = decide("d", [{"uuid": "a", "definition": "d", "sampling": _records(True)}])
    test = verdict.tests[0]
    assert test["too_small"] and test["p_value"] < test["alpha"]  # the power computation claims nothing here
    status, reason, _ = verdict.statuses["a"]
    assert status == "failed", reason
    assert "pooled PIT test" in reason
    assert verdict.to_dict()["verdict"] == "failed" and "not_judged" not in verdict.to_dict()


def test_the_same_few_honest_draws_are_still_not_judged():
    from ikdata.sampling.groups import decide

    verdict = decide("d", [{"uuid": "a", "definition": "d", "sampling": _records(False)}])
    status, reason, _ = verdict.statuses["a"]
    assert status == "skipped" and "too few draws" in reason
    assert verdict.to_dict()["not_judged"]
