"""Independence of draws: a test for randomness reused across rows and requests (torch-free).

Each judged draw gives a randomized probability-integral transform in **token-id order**,
``v = F(x-) + V p(x)`` over the kept distribution with tokens sorted by id: uniform on (0, 1) under the null,
and, for a sampler that inverts the CDF with a uniform it shares with another row (one random number for a
whole batch, a seed reused across requests), close to that shared number, so two such rows' ``v`` agree.
Pairs of draws that must be independent are tested together: ``12 (v_a - 1/2)(v_b - 1/2)`` has mean 0 and
variance 1 under the null, and terms of a chain of pairs are uncorrelated, so their sum over n pairs,
divided by sqrt(n), is about N(0, 1) (two-sided; a simulated null of chains below :data:`ASYMPTOTIC_PAIRS`).

The pairs: neighbouring judged rows of one sampler call, and draws of different calls that share a key:
the row's seed and its decode step (with the row index when every row of a call has the same seed, as HF's
global generator does), so a seed reused across requests pairs their draws step by step. At most
:data:`MAX_ROWS` rows of a call are used (the token-order transform costs a pass over the vocabulary).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable, Mapping

import numpy as np

MAX_ROWS = 2048
ASYMPTOTIC_PAIRS = 500
REPLICATES = 10_000


def record_part(draws: list[tuple[int, float]], keys: list[str | None]) -> dict[str, Any]:
    """The part of a call's record: neighbouring rows' pair sum, and the keyed draws other calls may pair with.

    ``draws``: (row, v) per judged row in row order; ``keys``: per entry, the seed-and-step key (None: none).
    """
    terms = [12 * (a - 0.5) * (b - 0.5) for (ra, a), (rb, b) in zip(draws, draws[1:])]
    keyed = [[key, round(v, 9)] for (_, v), key in zip(draws, keys) if key is not None]
    return {"pairs": len(terms), "sum": float(sum(terms)), "keyed": keyed}


def pool(parts: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[int, float, set[str]]:
    """(pairs, sum of terms, cases that took part) over every case's part: neighbours within a call, and
    draws of different calls sharing a key chained in key order."""
    pairs, total, members = 0, 0.0, set()
    by_key: dict[str, list[tuple[str, float]]] = {}
    for uuid, part in parts:
        if part.get("pairs"):
            pairs += int(part["pairs"])
            total += float(part["sum"])
            members.add(uuid)
        for key, v in part.get("keyed") or ():
            by_key.setdefault(str(key), []).append((uuid, float(v)))
    for key in sorted(by_key):
        chain = sorted(by_key[key])
        for (ua, a), (ub, b) in zip(chain, chain[1:]):
            if ua == ub:
                continue  # one call's rows pair as neighbours already
            pairs += 1
            total += 12 * (a - 0.5) * (b - 0.5)
            members.update((ua, ub))
    return pairs, total, members


def p_value(pairs: int, total: float, *, seed: int = 0) -> tuple[float, str]:
    """Two-sided p-value of the pair sum: normal for many pairs, a simulated null of one chain below."""
    if pairs <= 0:
        return 1.0, "none"
    z = total / math.sqrt(pairs)
    if pairs >= ASYMPTOTIC_PAIRS:
        return min(1.0, normal_two_sided(z)), "normal (asymptotic)"
    sims = _simulated(pairs, seed)
    extreme = len(sims) - int(np.searchsorted(sims, abs(total) - 1e-12, side="left"))
    return float((1 + extreme) / (1 + REPLICATES)), f"simulated ({REPLICATES} chains, seed {seed})"


@functools.lru_cache(maxsize=32)
def _simulated(pairs: int, seed: int) -> np.ndarray:
    """|sum| of the terms of :data:`REPLICATES` chains of ``pairs`` pairs of independent uniforms, sorted."""
    rng = np.random.default_rng(seed)
    u = rng.random((REPLICATES, pairs + 1))
    return np.sort(np.abs((12 * (u[:, 1:] - 0.5) * (u[:, :-1] - 0.5)).sum(axis=1)))


def normal_two_sided(z: float) -> float:
    """P(|N(0,1)| > |z|)."""
    return math.erfc(abs(z) / math.sqrt(2))


def independence_test(pairs: int, total: float, *, alpha: float, seed: int = 0) -> dict[str, Any]:
    """The report's test record."""
    found, null = p_value(pairs, total, seed=seed)
    return {"test": "independence", "n": int(pairs), "statistic": float(total / math.sqrt(pairs)) if pairs else 0.0,
            "p_value": found, "alpha": alpha, "null": null, "too_small": False, "passed": found >= alpha}


def describe(test: Mapping[str, Any]) -> str:
    """One line: how many pairs of draws that must be independent, the statistic, p-value vs alpha."""
    return (f"independence test over {test['n']} pair(s) of draws that must be independent (neighbouring rows, "
            f"a seed and step shared across requests): z = {test['statistic']:.2f}, p = {test['p_value']:.3g} vs "
            f"alpha {test['alpha']:.3g} (randomness reused across rows or requests)")


__all__ = ["ASYMPTOTIC_PAIRS", "MAX_ROWS", "describe", "independence_test", "normal_two_sided", "p_value", "pool",
           "record_part"]
