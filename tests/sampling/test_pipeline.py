"""The whole judge on records (as replay builds them), pooled per definition: false alarms and a caught bug.

Each run is one definition: 300 positions with one draw each (the pooled PIT test) and 100
seeded draws of one distribution (a TV test), the aimed test of the mass at the top-p cut, and the
independence test of neighbouring rows, so four tests at alpha / 4 each (Bonferroni).
Over 200 runs of a correct sampler at alpha = 1e-3 the number of definitions that fail is
Binomial(200, <= 1e-3): more than 2 has probability <= 0.0012. The bug is caught at the
recommended 2,000 positions.
"""

from __future__ import annotations

import numpy as np

from ikdata.sampling.distribution import Settings
from ikdata.sampling.groups import decide
from ikdata.sampling.records import record_logits
from samplers import draw, kept_probs, logits


def _run(rng, run, engine=None, n_single=300):
    n_same = 100
    x = np.concatenate([logits(rng, n_single, vocab=32), np.repeat(logits(rng, 1, vocab=32), n_same, axis=0)])
    n = len(x)
    settings = Settings.of(n, temperature=0.8, top_p=0.9)
    probs = (engine or (lambda v: kept_probs(v, 0.8, 0, 0.9)))(x)
    drawn = draw(probs, rng)
    seeds = np.arange(n) + 1000 * run
    record = record_logits(x, settings, drawn, seeds, seed=run)
    case = {"uuid": f"run-{run}", "definition": "d", "sampling": record}
    return decide("d", [case], alpha=1e-3)


def test_correct_sampler_false_alarms_whole_judge():
    rng = np.random.default_rng(21)
    failed = 0
    for run in range(200):
        verdict = _run(rng, run)
        # aimed: the mass at the top-p cut (issue 46)
        if [t["test"] for t in verdict.tests] == ["pit", "aimed", "independence"]:  # the repeated distribution kept one token
            assert verdict.degenerate and verdict.tests[0]["alpha"] == 1e-3 / 3  # no TV test claims power there
        else:
            assert [t["test"] for t in verdict.tests] == ["pit", "tv", "aimed", "independence"]
            assert all(t["alpha"] == 1e-3 / 4 for t in verdict.tests)
        failed += verdict.statuses[f"run-{run}"][0] == "failed"
    assert failed <= 2, f"{failed} of 200 correct runs failed"


def test_temperature_twice_caught_by_whole_judge():
    rng = np.random.default_rng(22)
    twice = lambda v: kept_probs(v / 0.8, 0.8, 0, 0.9)  # noqa: E731
    caught = sum(_run(rng, run, twice, n_single=2000).statuses[f"run-{run}"][0] == "failed" for run in range(20))
    assert caught >= 18
