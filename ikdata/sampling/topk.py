"""The distribution implied by a server's top-K raw log-probabilities of one position, when provable.

torch-free. Only K tokens are listed, so the kept distribution is known exactly only when the
kept set provably lies inside them. Unlisted tokens each have a raw probability at most the
K-th's and together at most ``1 - listed mass`` (every listed log-probability lowered by the
tolerance); ``vocab_size`` bounds how many there are. From that, the largest tempered weight
they can add is bounded (:func:`_unlisted_weight`), and every cut (top-k, top-p under each
order, min-p) must come out the same for any unlisted weight in range and for log-probabilities
moved by the tolerance. Otherwise :func:`implied` names the reason (``beyond_top``,
``boundary``, ``min_p_order``, ``top_p_order``, ``bad_logprobs``; see :mod:`ikdata.sampling.distribution`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ikdata.sampling.distribution import ANY, GREEDY_T, LOGPROB_TOL, ORDERS, UNSEEN_EPS


@dataclass(frozen=True)
class Implied:
    """The distribution implied by a top-K list, or why it is not provable.

    ``probs`` holds one probability per listed token (in the order given, 0 for tokens not
    kept) when ``status`` is ``"ok"``; ``detail`` says why otherwise.
    """

    status: str
    probs: tuple[float, ...] = ()
    kept: int = 0
    detail: str = ""
    unseen: float = 0.0  # unlisted weight bound ignored as negligible (share of the kept weight)


def _unlisted_weight(rest: float, p_last: float, p_top: float, temperature: float, count: float) -> float:
    """Largest total tempered weight (relative to the top token's) of at most ``count`` unlisted tokens,
    each of raw probability <= ``p_last``, together <= ``rest``."""
    if rest <= 0 or count <= 0 or p_last <= 0:
        return 0.0
    a = 1.0 / temperature
    if a >= 1:  # convex: as many tokens at the cap as the mass allows
        return (p_last / p_top) ** a * min(count, rest / p_last)
    if math.isinf(count):  # concave and no count bound: no bound at all
        return math.inf
    return count * (min(rest / count, p_last) / p_top) ** a


def implied(logprobs: Sequence[float], *, temperature: float, top_k: int = 0, top_p: float = 1.0,
            min_p: float = 0.0, vocab_size: int = 0, order: str = ANY, tol: float = LOGPROB_TOL) -> Implied:
    """The kept distribution from a server's top-K raw log-probabilities of one position, when provable.

    Args:
        logprobs: the listed raw log-probabilities (before temperature and cuts), any order.
        temperature, top_k, top_p, min_p: the request's settings (0 / 1 / 0: off).
        vocab_size: the vocabulary size when known (bounds how many unlisted tokens there are).
        order: ``"any"`` or one of :data:`ORDERS`.
        tol: how far each log-probability may be off (JSON rounding, run-to-run noise).

    Returns:
        An :class:`Implied`: ``ok`` with the probabilities, or an exclusion reason.
    """
    values = np.asarray([v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                         for v in logprobs], np.float64)
    if not len(values) or np.isnan(values).any() or (values > 1e-6).any() or np.isposinf(values).any():
        return Implied("bad_logprobs", detail="no log-probabilities, or some are NaN, non-numeric or positive")
    ranks = np.argsort(-values, kind="stable")
    lp = values[ranks]
    big_k = len(lp)
    listed = float(np.exp(lp).sum())
    rest = max(0.0, 1.0 - listed * math.exp(-tol)) if 1.0 - listed > 1e-9 else 0.0
    unlisted_count = (vocab_size - big_k) if vocab_size > big_k else (0 if vocab_size else math.inf)
    if unlisted_count == 0:
        rest = 0.0

    def result(count: int, unseen: float = 0.0) -> Implied:
        if count < big_k and lp[count - 1] - lp[count] < tol:
            return Implied("boundary", detail=f"the cut after token {count} is within {tol:g} of token {count + 1}")
        t_ = temperature if temperature >= GREEDY_T else 1.0
        w = np.exp((lp[:count] - lp[0]) / t_) if temperature >= GREEDY_T else np.array([1.0])
        probs = np.zeros(big_k)
        probs[ranks[:count]] = w / w.sum()
        return Implied("ok", tuple(float(v) for v in probs), count, unseen=unseen)

    if temperature < GREEDY_T:
        clear = (lp[0] - lp[1] >= tol) if big_k > 1 else (rest < math.exp(lp[0] - tol))
        return result(1) if clear else Implied("boundary", detail="greedy: the top two are within the tolerance")
    t = tol / temperature
    w = np.exp((lp - lp[0]) / temperature)
    p_last, p_top = math.exp(lp[-1]), math.exp(lp[0])
    if 0 < top_k < big_k:
        if lp[top_k - 1] - lp[top_k] < tol:
            return Implied("boundary", detail=f"top_k {top_k}: tokens {top_k} and {top_k + 1} are within {tol:g}")
        n_k, in_set = top_k, 0.0
    elif top_k <= 0 or (top_k > big_k and temperature > 1 and math.isinf(unlisted_count)):
        n_k, in_set = big_k, unlisted_count
    else:  # top_k - K unlisted tokens, plus any tied with the k-th value (each <= p_last, together <= rest)
        n_k, in_set = big_k, min(unlisted_count, (top_k - big_k) + rest / p_last)
    u_max = _unlisted_weight(rest, p_last, p_top, temperature, in_set)
    ignored = u_max / w[:n_k].sum() if 0 < u_max <= UNSEEN_EPS * w[:n_k].sum() else 0.0
    u_max = 0.0 if ignored else u_max
    u_all = _unlisted_weight(rest, p_last, p_top, temperature, unlisted_count)
    n_m, min_p_closes = n_k, False
    if min_p > 0:
        ratio = (lp[:n_k] - lp[0]) / temperature
        if (np.abs(ratio - math.log(min_p)) < 2 * t).any():
            return Implied("boundary", detail=f"min_p {min_p}: a token within the tolerance of the threshold")
        n_m = int((ratio >= math.log(min_p)).sum())
        min_p_closes = n_m < big_k  # the K-th fails, so every unlisted token fails too

    def nucleus(size: int, unlisted: float) -> tuple[int, int | None]:
        """(fewest, most) listed tokens top-p keeps over the first ``size`` listed plus 0..unlisted weight;
        most None: the nucleus may not close inside the list."""
        if top_p >= 1:
            return (size, size) if unlisted == 0 else (size, None)
        cum = np.cumsum(w[:size])
        total = cum[-1]
        e = math.exp(2 * t)
        lo = next((j + 1 for j in range(size) if cum[j] / (cum[j] + (total - cum[j]) / e) >= top_p), size)
        hi = next((j + 1 for j in range(size) if cum[j] / (cum[j] + (total - cum[j] + unlisted) * e) >= top_p),
                  None)
        return lo, hi

    def order_range(name: str) -> tuple[int, int | None]:
        if name == "hf":
            lo, hi = nucleus(n_k, u_max if not min_p_closes else u_max)
            if min_p_closes:
                return min(lo, n_m), (min(hi, n_m) if hi is not None else n_m)
            return lo, hi
        if name == "vllm":
            size = min(n_k, n_m) if min_p_closes else n_k
            return nucleus(size, 0.0 if min_p_closes else u_max)
        lo, hi = nucleus(big_k, u_all)  # sglang: top-p over the whole distribution
        cap = min(top_k if top_k > 0 else big_k + 1, n_m if min_p_closes else big_k + 1)
        if hi is None:
            return (min(lo, cap), cap if cap <= big_k else None)
        return min(lo, cap), min(hi, cap)

    names = list(ORDERS) if order == ANY else [order]
    if order == ANY and (top_k <= 0 or top_p >= 1):
        names = [n for n in names if n != "sglang"]  # without top-k (or top-p) it is the hf order
    if order == ANY and (min_p <= 0 or top_p >= 1):
        names = [n for n in names if n != "vllm"]
    ranges = {name: order_range(name) for name in names}
    if any(hi is None for _, hi in ranges.values()):
        return Implied("beyond_top", detail="the kept set may include tokens beyond the listed ones")
    if any(lo != hi for lo, hi in ranges.values()):
        return Implied("boundary", detail=f"top_p {top_p}: a cumulative probability within the tolerance")
    first = ranges[names[0]][0]
    if "vllm" in ranges and ranges["vllm"][0] != first:
        return Implied("min_p_order", detail=f"min_p before and after top_p keep {ranges['vllm'][0]} and {first}")
    if "sglang" in ranges and ranges["sglang"][0] != first:
        return Implied("top_p_order", detail=f"top_p over the top-k set keeps {first} tokens, over the whole "
                                             f"distribution {ranges['sglang'][0]}")
    return result(first, ignored)


__all__ = ["Implied", "implied"]
