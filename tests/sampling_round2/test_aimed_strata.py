"""Aimed tests at the positions and tokens a penalty changes (issue 36, finding 3).

A repetition penalty applied to the prompt only passes the pooled test at 2,048 positions; the aimed
test of the output tokens (where a generated token could repeat) catches it, and the verdict states
the alpha split. The honest twin passes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_runs import build_model, capture_run, patched, replay_dir  # noqa: E402

PROMPT_LENGTH = 6  # hf_runs.prompts


@pytest.fixture(scope="module")
def model():
    return build_model()


@pytest.mark.parametrize("bug", [False, True])
def test_repetition_penalty_on_the_prompt_only_fails_at_2048_positions(model, tmp_path, bug):
    import contextlib

    from transformers.generation import logits_process as lp

    original = lp.RepetitionPenaltyLogitsProcessor.__call__
    prompt_only = patched(lp.RepetitionPenaltyLogitsProcessor, "__call__",
                          lambda self, ids, scores: original(self, ids[:, :PROMPT_LENGTH], scores))
    with prompt_only if bug else contextlib.nullcontext():
        capture_run(model, tmp_path / "ds", rows=256, seed=3, top_k=0, top_p=1.0, min_p=None)  # no cut: nothing outside
    result = replay_dir(tmp_path / "ds")
    group = result.report["sampling"][0]
    assert "aimed" in group["alpha_split"] and "output tokens" in group["alpha_split"], group["alpha_split"]
    aimed = {t["stratum"]: t for t in group["tests"] if t["test"] == "aimed"}
    assert set(aimed) == {"prompt tokens", "output tokens"}
    assert result.exit_code == int(bug), [(t["test"], t["p_value"]) for t in group["tests"]]
    if bug:
        failed = [c for c in result.report["cases"] if c["status"] == "failed"]
        assert failed and all("aimed test" in c["reason"] and "output tokens" in c["reason"] for c in failed)
        pit = [t for t in group["tests"] if t["test"] == "pit"][0]
        assert pit["p_value"] >= pit["alpha"]  # the pooled test alone misses it: the point of aiming


def test_aimed_p_value_is_exact_and_two_sided():
    from ikdata.sampling.aimed import poisson_binomial_pmf, two_sided_p

    p = [0.1, 0.5, 0.9, 0.3]
    pmf = poisson_binomial_pmf(p)
    assert abs(pmf.sum() - 1) < 1e-12 and abs((pmf * np.arange(5)).sum() - sum(p)) < 1e-12
    assert two_sided_p(p, 0)[0] == pytest.approx(2 * 0.9 * 0.5 * 0.1 * 0.7)
    rng = np.random.default_rng(0)  # a false-alarm check of the test alone: 2,000 honest strata at alpha 0.01
    ps = rng.uniform(0.01, 0.4, (2000, 300))
    hits = (rng.random(ps.shape) < ps).sum(axis=1)
    rejected = sum(two_sided_p(row, int(k))[0] < 0.01 for row, k in zip(ps[:400], hits[:400]))
    assert rejected <= 12  # Binomial(400, <= 0.01): P(> 12) < 0.001
