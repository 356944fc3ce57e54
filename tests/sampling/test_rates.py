"""Measured false-alarm rate and power of the sampling judges (vectorised numpy, small vocabularies).

Bounds: with a correct sampler each run fails with probability <= alpha. Over 200 runs at
alpha = 1e-3 the count of false alarms is Binomial(200, <= 1e-3): P(count >= 3) <= 0.0012,
so more than 2 fails the test. At alpha = 0.05 the count must lie in [2, 20] (a calibrated
test: P(outside) < 0.002), which a test that is too strict or too loose does not meet.
Power: each bug is caught in at least 18 of 20 runs (>= 0.9) at the recommended n:
2,000 positions for one draw per position, 10,000 draws for many draws of one distribution.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ikdata.sampling import distribution as S
from ikdata.sampling import stats as T
from samplers import draw, kept_probs, logits

N_POSITIONS = 2000  # recommended: one draw per position (docs/sampling.md)
N_DRAWS = 10_000  # recommended: many draws of one distribution, to catch a 0.02 TV shift
RUNS = 20


def pit_verdict(x, settings, drawn, order, alpha=1e-3):
    """True when the definition fails: a draw outside the kept set, or the pooled PIT test below alpha."""
    judged = S.judge_logits(x, settings, drawn, order=order)
    u = judged.u[~np.isnan(judged.u)]
    _, p, _ = T.pit_p_value(T.legendre(u).sum(axis=0), len(u))
    return bool(judged.outside.any()) or p < alpha


def test_correct_sampler_false_alarms_pit():
    rng = np.random.default_rng(1)
    strict = loose = 0
    for run in range(200):
        n = 600
        x = logits(rng, n, vocab=32)
        settings = S.Settings.of(n, temperature=0.8, top_k=10, top_p=0.9, min_p=0.05)
        drawn = draw(kept_probs(x, 0.8, 10, 0.9, 0.05, order="hf"), rng)
        judged = S.judge_logits(x, settings, drawn, order="hf", seed=run)
        assert not judged.outside.any()
        u = judged.u[~np.isnan(judged.u)]
        _, p, _ = T.pit_p_value(T.legendre(u).sum(axis=0), len(u))
        strict += p < 1e-3
        loose += p < 0.05
    assert strict <= 2, f"{strict} false alarms in 200 runs at alpha 1e-3"
    assert 2 <= loose <= 20, f"{loose} of 200 runs below 0.05: the null is miscalibrated"


def test_correct_sampler_false_alarms_tv():
    rng = np.random.default_rng(2)
    p = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.03, 0.02])
    strict = loose = 0
    for run in range(200):
        result = T.tv_test(rng.multinomial(500, p), p, seed=run, replicates=5000)
        strict += result.p_value < 1e-3
        loose += result.p_value < 0.05
    assert strict <= 2
    assert 2 <= loose <= 20


BUGS = {
    # name: (settings, declared order, how the buggy engine computes its distribution)
    "temperature applied twice": (dict(temperature=0.7, top_k=20, top_p=0.9), "hf",
                                  lambda x: kept_probs(x / 0.7, 0.7, 20, 0.9)),
    "top-p before top-k": (dict(temperature=0.7, top_k=20, top_p=0.9), "hf",
                           lambda x: kept_probs(x, 0.7, 20, 0.9, order="sglang")),
    "min-p after top-p instead of before": (dict(temperature=0.7, top_k=20, top_p=0.9, min_p=0.1), "vllm",
                                            lambda x: kept_probs(x, 0.7, 20, 0.9, 0.1, order="hf")),
    "top_k one too many": (dict(temperature=0.7, top_k=20), "hf", lambda x: kept_probs(x, 0.7, 21)),
    "top_k one too few": (dict(temperature=1.0, top_k=5), "hf", lambda x: kept_probs(x, 1.0, 4)),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_bug_caught_with_power(bug):
    settings_kw, order, engine = BUGS[bug]
    rng = np.random.default_rng(zlib.crc32(bug.encode()))
    scale = 1.0 if bug == "top_k one too few" else 2.0
    caught = 0
    for _ in range(RUNS):
        x = logits(rng, N_POSITIONS, scale=scale)
        settings = S.Settings.of(N_POSITIONS, **settings_kw)
        caught += pit_verdict(x, settings, draw(engine(x), rng), order)
    assert caught >= 0.9 * RUNS, f"{bug}: caught in {caught} of {RUNS} runs"


def test_the_same_orders_differ_where_the_bugs_are_caught():
    """The order bugs change the kept set on these logits (otherwise catching them would prove nothing)."""
    rng = np.random.default_rng(5)
    x = logits(rng, 500)
    assert (kept_probs(x, 0.7, 20, 0.9, order="sglang") > 0).sum() > (kept_probs(x, 0.7, 20, 0.9) > 0).sum()
    assert ((kept_probs(x, 0.7, 20, 0.9, 0.1, order="hf") > 0).sum()
            > (kept_probs(x, 0.7, 20, 0.9, 0.1, order="vllm") > 0).sum())


def _distribution():
    x = np.sort(np.random.default_rng(0).standard_normal(10))[::-1]
    return np.exp(x) / np.exp(x).sum()


def test_seed_ignored_caught():
    """A sampler that ignores the seed draws the same token for every seed: the TV test sees a spike."""
    p = _distribution()
    rng = np.random.default_rng(7)
    caught = 0
    for run in range(RUNS):
        token = rng.choice(len(p), p=p)  # the one draw every seed repeats
        counts = np.bincount(np.full(200, token), minlength=len(p))
        caught += T.tv_test(counts, p, seed=run).p_value < 1e-3
    assert caught >= 0.9 * RUNS


def test_mass_moved_by_002_caught():
    p = _distribution()
    q = p.copy()
    q[0] -= 0.02
    q[-1] += 0.02
    rng = np.random.default_rng(8)
    caught = sum(T.tv_test(rng.multinomial(N_DRAWS, q), p, seed=run, replicates=5000).p_value < 1e-3
                 for run in range(RUNS))
    assert caught >= 0.9 * RUNS, f"caught in {caught} of {RUNS}"
    assert T.tv_test(rng.multinomial(N_DRAWS, p), p).detectable_tv <= 0.02


def test_expected_tv_closed_form_matches_monte_carlo():
    rng = np.random.default_rng(9)
    for p, n in ((_distribution(), 50), (np.array([0.5, 0.5]), 7), (np.full(20, 0.05), 1000)):
        sims = S.tv(rng.multinomial(n, p, size=40_000), p)
        stderr = sims.std() / np.sqrt(len(sims))
        assert abs(S.expected_tv(p, n) - sims.mean()) < 4 * stderr, (n, S.expected_tv(p, n), sims.mean(), stderr)


def test_detectable_shift_reported_and_too_small():
    p = _distribution()
    small = T.tv_test(np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0]), p)
    assert small.too_small and not small.to_dict()["passed"]
    moments = T.temperature_moments(np.sort(np.random.default_rng(1).dirichlet(np.ones(8), 50), axis=1)[:, ::-1])
    assert T.detectable_temperature_error(moments, 50, 5, 1e-3) is None  # 5 draws: too few
    assert T.detectable_temperature_error(moments, 50, 20_000, 1e-3) <= 0.1
