"""Draws that reuse randomness are caught by the independence test (issue 36, finding 6).

A vLLM-style loop (vocabulary 64, T 0.8, top-k 20, presence penalty) whose rows' prompts differ: one
uniform shared by every row of a batch, or a seed reused across requests (request A and B drawing each
step with the same per-request generator), fails and the reason names the independence test; the honest
loop passes. The pooled PIT test alone passes the shared-uniform sampler: every row's draw is a correct
draw from its own distribution.
"""

from __future__ import annotations

import numpy as np
import pytest

V = 64


def _call(rng, rows, uniforms, *, step, seeds):
    from ikdata.sampling.distribution import Settings, kept_distribution
    from ikdata.sampling.pipeline import Extras, process
    from ikdata.sampling.records import record_logits

    context = rng.integers(0, V, (rows, 6))
    logits = (rng.standard_normal((rows, V)) * 2).astype(np.float32)
    extras = Extras.of(rows, context=context, generated=step, presence_penalty=0.5)
    settings = Settings.of(rows, temperature=0.8, top_k=20)
    probs = kept_distribution(process(logits, extras, "vllm"), settings, order="vllm")
    drawn = (uniforms[:, None] > probs.cumsum(axis=1)).sum(axis=1).clip(0, V - 1)  # inverse CDF, token order
    return record_logits(logits, settings, drawn, seeds, order="vllm", extras=extras, seed=step)


def _verdict(kind, seed=0, calls=16, rows=64):
    from ikdata.sampling.groups import decide

    rng = np.random.default_rng(100 + seed)
    cases = []
    for call in range(calls):
        if kind == "shared":  # one random number for the whole batch
            uniforms = np.full(rows, rng.random())
        elif kind == "seed reused":  # call 2k and 2k+1 are two requests whose generators share seeds
            uniforms = np.random.default_rng([seed, call // 2]).random(rows)
        else:
            uniforms = rng.random(rows)
        seeds = np.arange(rows) + (call // 2) * rows if kind == "seed reused" else np.arange(rows) + call * rows
        record = _call(rng, rows, uniforms, step=3, seeds=seeds)
        cases.append({"uuid": f"call-{call:02d}", "definition": "d", "sampling": record})
    return decide("d", cases, alpha=1e-3)


@pytest.mark.parametrize("kind", ["shared", "seed reused"])
def test_reused_randomness_fails_naming_the_independence_test(kind):
    verdict = _verdict(kind)
    tests = {t["test"]: t for t in verdict.tests}
    assert tests["independence"]["p_value"] < tests["independence"]["alpha"], tests["independence"]
    assert tests["pit"]["p_value"] >= tests["pit"]["alpha"]  # each draw alone follows its distribution
    failed = [s for s in verdict.statuses.values() if s[0] == "failed"]
    assert failed and all("independence test" in reason for _, reason, _ in failed)
    assert "independence" in verdict.to_dict()["alpha_split"]


def test_honest_loops_pass_the_independence_test():
    """20 honest runs of 1,024 positions at alpha 1e-3: none fails (P(any) <= 0.02)."""
    failed = [seed for seed in range(20) if any(s[0] == "failed" for s in _verdict("honest", seed).statuses.values())]
    assert not failed


def test_the_pair_statistic_has_the_stated_null():
    from ikdata.sampling.independence import p_value, pool, record_part

    rng = np.random.default_rng(5)
    ps = []
    for _ in range(300):
        u = rng.random(40)
        parts = [("a", record_part(list(enumerate(u[:20])), [None] * 20)),
                 ("b", record_part(list(enumerate(u[20:])), [f"k{i}" for i in range(20)])),
                 ("c", record_part([], []))]
        pairs, total, _ = pool(parts)
        assert pairs == 38
        ps.append(p_value(pairs, total, seed=1)[0])
    assert 0.35 < np.mean(ps) < 0.65 and np.mean(np.asarray(ps) < 0.05) < 0.1
