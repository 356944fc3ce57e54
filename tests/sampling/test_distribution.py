"""The kept distribution: full logits under each cut order, the exclusion reasons, greedy, and a top-K list."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ikdata.sampling import distribution as S
from ikdata.sampling.topk import implied
from samplers import draw, kept_probs, logits

W_MIN_P = [1, .5, .3, .05, .04, .02, .01, .005]  # top_p 0.8, min_p 0.1: hf keeps 3, vllm 2
W_TOP_P = [1, .5, .3, .2, .2, .1, .05, .05]  # top_k 3, top_p 0.7: hf keeps 2, sglang 3


@pytest.mark.parametrize("order", S.ORDERS)
def test_judge_logits_keeps_what_each_order_keeps(order):
    rng = np.random.default_rng(11)
    n = 1500
    x = logits(rng, n, vocab=48)
    t = rng.choice([0.5, 0.8, 1.3], n)
    k = rng.choice([0, 4, 12], n)
    p = rng.choice([1.0, 0.6, 0.9], n)
    m = rng.choice([0.0, 0.05, 0.3], n)
    settings = S.Settings.of(n, temperature=t, top_k=k, top_p=p, min_p=m)
    dense = np.concatenate([kept_probs(x[i:i + 1], t[i], k[i], p[i], m[i], order) for i in range(n)])
    assert np.allclose(dense, S.kept_distribution(x, settings, order))
    judged = S.judge_logits(x, settings, draw(dense, rng), order=order)
    ok = judged.status == S.OK
    assert ok.mean() > 0.9
    assert (judged.kept[ok] == (dense[ok] > 0).sum(axis=1)).all()
    assert not judged.outside.any()
    outside = judged.kept[ok] < 48
    wrong = np.where(dense > 0, -1.0, rng.random(dense.shape)).argmax(axis=1)  # a token each order drops
    assert S.judge_logits(x, settings, wrong, order=order).outside[ok][outside].all()


def _one(w, **settings):
    x = np.log(np.asarray([w], np.float64)).astype(np.float32)
    return S.judge_logits(x, S.Settings.of(1, **settings), np.zeros(1, np.int64))


def test_exclusion_reasons_full_logits():
    assert S.REASONS[_one(W_MIN_P, temperature=1.0, top_p=0.8, min_p=0.1).status[0]] == "min_p_order"
    assert S.REASONS[_one(W_TOP_P, temperature=1.0, top_k=3, top_p=0.7).status[0]] == "top_p_order"
    tie = [1.0, 0.5, 0.5 * (1 + 1e-6), 0.1]
    assert S.REASONS[_one(tie, temperature=1.0, top_k=2).status[0]] == "boundary"
    assert S.REASONS[_one([1.0, float("nan"), 0.1], temperature=1.0).status[0]] == "bad_logprobs"
    # a declared order judges such positions: the engine's own order decides
    declared = S.judge_logits(np.log(np.asarray([W_MIN_P], np.float32)), S.Settings.of(1, top_p=0.8, min_p=0.1),
                              np.array([2]), order="vllm")
    assert declared.status[0] == S.OK and declared.kept[0] == 2 and declared.outside[0]


def test_greedy_argmax_and_near_tie():
    x = np.array([[2.0, 1.0, 0.0], [2.0, 2.0 + 1e-6, 0.0]], np.float32)
    judged = S.judge_logits(x, S.Settings.of(2, temperature=0.0), np.array([1, 0]))
    assert judged.outside[0] and judged.status[0] == S.OK  # a clear argmax not drawn: fails
    assert judged.status[1] == S.BOUNDARY and not judged.outside[1]  # a near-tie: ambiguous, not a failure


def _implied(w, z=None, **settings):
    w = np.asarray(w, np.float64)
    z = w.sum() if z is None else z
    return implied(np.log(w / z).tolist(), **settings)


def test_top_k_list_each_reason():
    ok = _implied(W_MIN_P, 2.0, temperature=0.7, top_k=5)
    assert ok.status == "ok" and ok.kept == 5 and math.isclose(sum(ok.probs), 1.0)
    assert _implied(W_MIN_P, 2.0, temperature=1.0).status == "beyond_top"
    assert _implied([1.0, 0.5, 0.4996, 0.1], 2.0, temperature=1.0, top_k=2).status == "boundary"
    assert _implied(W_MIN_P, 2.0, temperature=1.0, top_k=5, top_p=0.8, min_p=0.1).status == "min_p_order"
    assert _implied(W_TOP_P, 2.5, temperature=1.0, top_k=3, top_p=0.7).status == "top_p_order"
    assert implied([0.5, -1.0], temperature=1.0).status == "bad_logprobs"
    assert implied([], temperature=1.0).status == "bad_logprobs"
    assert implied([float("nan"), -1.0], temperature=1.0).status == "bad_logprobs"
    # the whole vocabulary listed: nothing unlisted, so no cut is needed to prove the kept set
    assert _implied(W_MIN_P, temperature=1.0, vocab_size=len(W_MIN_P)).status == "ok"
    # greedy: argmax unless the top two are within the tolerance
    assert _implied([1.0, 0.5], 2.0, temperature=0.0).kept == 1
    assert _implied([1.0, 0.9995], 2.0, temperature=0.0).status == "boundary"


def test_implied_matches_the_full_distribution_when_provable():
    rng = np.random.default_rng(12)
    x = logits(rng, 200, vocab=30).astype(np.float64)
    for row in x:
        lp = row - np.log(np.exp(row).sum())
        top = np.sort(lp)[::-1][:20]
        found = implied(top.tolist(), temperature=0.8, top_k=10, top_p=0.9)
        if found.status != "ok":
            continue
        want = kept_probs(row[None], 0.8, 10, 0.9)[0]
        assert np.allclose(sorted(found.probs, reverse=True)[:found.kept], np.sort(want)[::-1][:found.kept])


def test_shipped_reference_gives_the_hf_distribution():
    torch = pytest.importorskip("torch")
    from ikdata.core.definitions import SHIPPED, read_folder, shipped_folder, load_reference

    definition = read_folder(shipped_folder(), origin=SHIPPED)[0]["sampling_f32"]
    run = load_reference(definition, trusted_digests=frozenset(), trusted_definitions={definition.name: definition})
    rng = np.random.default_rng(13)
    x = logits(rng, 50, vocab=40)
    t, k, p, m = 0.8, 8, 0.9, 0.05
    got = run(torch.tensor(x), torch.full((50,), t), torch.full((50,), k), torch.full((50,), p),
              torch.full((50,), m), torch.full((50,), -1)).numpy()
    assert np.allclose(got, kept_probs(x, t, k, p, m), atol=1e-6)


def test_shipped_top_logprobs_reference_matches_implied():
    torch = pytest.importorskip("torch")
    from ikdata.core.definitions import SHIPPED, load_reference, read_folder, shipped_folder

    definition = read_folder(shipped_folder(), origin=SHIPPED)[0]["sampling_top_logprobs"]
    run = load_reference(definition, trusted_digests=frozenset(), trusted_definitions={definition.name: definition})
    lp = np.log(np.asarray(W_MIN_P) / 2.0)[[3, 0, 5, 1, 2, 4, 6, 7]]  # listed in any order
    for settings in (dict(temperature=0.7, top_k=5), dict(temperature=1.0, top_k=6, top_p=0.8),
                     dict(temperature=0.0)):
        found = implied(lp.tolist(), **settings)
        assert found.status == "ok", found
        got = run(torch.tensor(lp, dtype=torch.float32), settings["temperature"], settings.get("top_k", 0),
                  settings.get("top_p", 1.0), settings.get("min_p", 0.0), 0, torch.zeros(1, dtype=torch.int64))
        assert np.allclose(got.numpy()[:-1], found.probs, atol=1e-6) and got[-1] == 0
