"""The statistical tests of sampled tokens: their null distributions, p-values and detectable shifts.

torch-free (numpy), so import's re-check can recompute a verdict.

- **PIT test** (one draw per position, many distributions): each judged draw gives a
  randomized probability-integral transform ``u``, uniform on (0, 1) under the null.
  The pooled test is Neyman's smooth test of order 4: ``S = sum_j (sum_i L_j(u_i))^2 / n``
  with the orthonormal Legendre polynomials ``L_1..L_4`` on (0, 1). Tokens are ordered by
  descending probability, so a temperature error or a cut that keeps too few tokens moves
  the mean of ``u`` (``L_1``), a spread error moves ``L_2``. Its null is chi-square with 4
  degrees of freedom for n >= :data:`ASYMPTOTIC_N`, and a simulated null (seeded, recorded)
  below. The sums ``sum_i L_j(u_i)`` add over cases, so shards and resumed runs combine exactly.
- **TV test** (many draws from one distribution): TV(histogram, p) against a simulated null
  of :data:`NULL_REPLICATES` multinomial histograms from p (seeded, recorded); the p-value is
  ``(1 + #{TV_null >= TV}) / (1 + replicates)``, valid at any n. The expected TV under the
  null is also given in closed form (:func:`ikdata.sampling.distribution.expected_tv`).
- **Detectable shift**: the smallest shift the test catches with power :data:`POWER` at the n
  at hand: for TV, mass moved from the most likely token to the least likely kept one; for
  the PIT test, a temperature error (the kept tokens drawn at T (1 + e) instead of T).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ikdata.sampling.distribution import expected_tv, tv

DEFAULT_ALPHA = 1e-3
POWER = 0.9
ASYMPTOTIC_N = 500
NULL_REPLICATES = 20_000
POWER_REPLICATES = 2_000
TV_MIN_DRAWS = 20  # fewer distinct draws from one distribution join the PIT test instead
MAX_TEMPERATURE_ERROR = 0.5  # a PIT test that cannot see a 50% temperature error is too small to judge
TEMPERATURE_GRID = (-0.5, -0.3, -0.2, -0.1, -0.05, -0.02, -0.01, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def legendre(u: np.ndarray) -> np.ndarray:
    """[n, 4]: the orthonormal shifted Legendre polynomials L_1..L_4 at u (mean 0, variance 1 under U(0,1))."""
    u = np.asarray(u, np.float64)
    return np.stack([math.sqrt(3) * (2 * u - 1), math.sqrt(5) * (6 * u ** 2 - 6 * u + 1),
                     math.sqrt(7) * (20 * u ** 3 - 30 * u ** 2 + 12 * u - 1),
                     3 * (70 * u ** 4 - 140 * u ** 3 + 90 * u ** 2 - 20 * u + 1)], axis=-1)


def _legendre_integral(v: np.ndarray) -> np.ndarray:
    """[..., 4]: the antiderivatives of L_1..L_4 from 0 to v."""
    v = np.asarray(v, np.float64)
    return np.stack([math.sqrt(3) * (v ** 2 - v), math.sqrt(5) * (2 * v ** 3 - 3 * v ** 2 + v),
                     math.sqrt(7) * (5 * v ** 4 - 10 * v ** 3 + 6 * v ** 2 - v),
                     3 * (14 * v ** 5 - 35 * v ** 4 + 30 * v ** 3 - 10 * v ** 2 + v)], axis=-1)


def chi2_sf_even(x: float, df: int) -> float:
    """P(chi2_df > x) for an even df, in closed form."""
    half = x / 2.0
    term, total = 1.0, 1.0
    for j in range(1, df // 2):
        term *= half / j
        total += term
    return min(1.0, math.exp(-half) * total)


def ncx2_sf_even(x: float, df: int, noncentrality: float) -> float:
    """P(noncentral chi2_df(lambda) > x) for an even df: a Poisson mixture of central chi-squares."""
    half = noncentrality / 2.0
    total, j = 0.0, 0
    weight = math.exp(-half)
    while True:
        total += weight * chi2_sf_even(x, df + 2 * j)
        j += 1
        weight *= half / j
        if j > half and weight < 1e-12:
            return min(1.0, total)


def chi2_isf_even(alpha: float, df: int) -> float:
    """The x with P(chi2_df > x) = alpha (bisection)."""
    lo, hi = 0.0, 10.0
    while chi2_sf_even(hi, df) > alpha:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf_even(mid, df) > alpha else (lo, mid)
    return hi


@dataclass(frozen=True)
class PitResult:
    """The pooled PIT test: n, the statistic, its p-value, the null used, and the detectable temperature error."""

    n: int
    statistic: float
    p_value: float
    alpha: float
    null: str
    detectable_temperature_error: float | None  # smallest |e| caught with power 0.9 (None: none up to 50%)

    @property
    def too_small(self) -> bool:
        return self.detectable_temperature_error is None

    def to_dict(self) -> dict:
        return {"test": "pit", "n": self.n, "statistic": self.statistic, "p_value": self.p_value,
                "alpha": self.alpha, "null": self.null,
                "detectable_temperature_error": self.detectable_temperature_error, "too_small": self.too_small,
                "passed": (not self.too_small) and self.p_value >= self.alpha}


def smooth_statistic(sums: np.ndarray, n: int) -> float:
    """Neyman's statistic from the sums of L_1..L_4 over n draws."""
    return float((np.asarray(sums, np.float64) ** 2).sum() / n) if n else 0.0


def pit_p_value(sums: np.ndarray, n: int, *, seed: int = 0) -> tuple[float, float, str]:
    """(statistic, p-value, null) of the smooth test; simulated null below :data:`ASYMPTOTIC_N` draws."""
    stat = smooth_statistic(sums, n)
    if n <= 0:
        return 0.0, 1.0, "none"
    if n >= ASYMPTOTIC_N:
        return stat, chi2_sf_even(stat, 4), "chi2(4) asymptotic"
    null = _simulated_null(n, seed)
    return (stat, float((1 + (null >= stat - 1e-12).sum()) / (1 + len(null))),
            f"simulated ({len(null)} replicates, seed {seed})")


@functools.lru_cache(maxsize=64)
def _simulated_null(n: int, seed: int, reps: int = 10_000) -> np.ndarray:
    """The smooth statistic of ``reps`` sets of n uniforms (cached: one per n and seed)."""
    rng = np.random.default_rng(seed)
    null = np.empty(reps)
    step = max(1, 2_000_000 // n)
    for start in range(0, reps, step):
        stop = min(reps, start + step)
        sims = legendre(rng.random((stop - start, n))).sum(axis=1)
        null[start:stop] = (sims ** 2).sum(axis=1) / n
    return null


def temperature_moments(probs_sorted: np.ndarray, errors=TEMPERATURE_GRID) -> np.ndarray:
    """[len(errors), 4]: sum over positions of E[L_j(u)] when the kept tokens are drawn at T (1 + e).

    ``probs_sorted`` is [n, k]: each position's kept probabilities in descending order (zero-padded).
    Within the kept set, drawing at T (1 + e) instead of T gives q proportional to p^(1 / (1 + e)).
    """
    p = np.asarray(probs_sorted, np.float64)
    cum = np.cumsum(p, axis=1)
    before = cum - p
    seg = _legendre_integral(np.clip(cum, 0, 1)) - _legendre_integral(np.clip(before, 0, 1))  # [n, k, 4]
    safe = np.where(p > 0, p, 1.0)
    per_token = np.where((p > 0)[..., None], seg / safe[..., None], 0.0)
    out = np.zeros((len(errors), 4))
    logp = np.log(safe)
    for i, e in enumerate(errors):
        q = np.where(p > 0, np.exp(logp / (1 + e) - (logp / (1 + e)).max(axis=1, keepdims=True)), 0.0)
        q /= q.sum(axis=1, keepdims=True)
        out[i] = (q[..., None] * per_token).sum(axis=(0, 1))
    return out


def detectable_temperature_error(moments: np.ndarray, n_sampled: int, n: int, alpha: float,
                                 errors=TEMPERATURE_GRID) -> float | None:
    """Smallest |e| on the grid whose power is >= :data:`POWER` at n draws, from moments summed over
    ``n_sampled`` positions (scaled to n); None when even the largest error is not caught."""
    if n <= 0 or n_sampled <= 0:
        return None
    crit = chi2_isf_even(alpha, 4)
    found = []
    for e, m in zip(errors, np.asarray(moments, np.float64)):
        mean = m / n_sampled
        power = ncx2_sf_even(crit, 4, n * float((mean ** 2).sum()))
        if power >= POWER:
            found.append(abs(e))
    return min(found) if found else None


def pit_test(sums: np.ndarray, n: int, moments: np.ndarray, n_sampled: int, *, alpha: float = DEFAULT_ALPHA,
             seed: int = 0) -> PitResult:
    """The pooled PIT test from summed Legendre terms and summed temperature moments."""
    stat, p, null = pit_p_value(sums, n, seed=seed)
    return PitResult(n, stat, p, alpha, null, detectable_temperature_error(moments, n_sampled, n, alpha))


@dataclass(frozen=True)
class TvResult:
    """The TV test of many draws from one distribution."""

    n: int
    tv: float
    expected_tv: float
    threshold: float
    p_value: float
    alpha: float
    null: str
    detectable_tv: float | None  # smallest moved mass caught with power 0.9 (None: not even the most)
    draws_for_tv_005: int | None  # about how many draws catch a 0.05 shift
    null_histogram: dict | None = None  # the simulated null of TV: {"edges": [...], "counts": [...]}, 20 bins

    @property
    def too_small(self) -> bool:
        return self.detectable_tv is None

    def to_dict(self) -> dict:
        return {"test": "tv", "n": self.n, "tv": self.tv, "expected_tv": self.expected_tv,
                "threshold": self.threshold, "p_value": self.p_value, "alpha": self.alpha, "null": self.null,
                "detectable_tv": self.detectable_tv, "draws_for_tv_0.05": self.draws_for_tv_005,
                "too_small": self.too_small, "passed": (not self.too_small) and self.p_value >= self.alpha,
                "null_histogram": self.null_histogram}


def _moved(probs: np.ndarray, delta: float) -> np.ndarray:
    """p with ``delta`` of mass moved from the most likely token to the least likely kept one."""
    q = probs.copy()
    kept = np.flatnonzero(q > 0)
    hi, lo = kept[np.argmax(q[kept])], kept[np.argmin(q[kept])]
    q[hi] -= delta
    q[lo] += delta
    return q


def tv_test(counts: np.ndarray, probs: np.ndarray, *, alpha: float = DEFAULT_ALPHA, seed: int = 0,
            replicates: int = NULL_REPLICATES) -> TvResult:
    """TV(histogram, p) against its simulated null; the detectable moved mass at this n.

    ``counts`` and ``probs`` cover the same slots (a last slot for tokens outside the kept set
    may be present with probability 0).
    """
    counts = np.asarray(counts, np.int64)
    probs = np.asarray(probs, np.float64)
    probs = probs / probs.sum()
    n = int(counts.sum())
    rng = np.random.default_rng(seed)
    observed = float(tv(counts, probs))
    null = tv(rng.multinomial(n, probs, size=replicates), probs)
    threshold = float(np.quantile(null, 1 - alpha, method="higher"))
    p_value = float((1 + (null >= observed - 1e-12).sum()) / (1 + replicates))
    kept = probs[probs > 0]
    detectable = None
    if len(kept) >= 2:
        lo, hi = 0.0, min(float(kept.max()), 1 - float(kept.min()))
        power_rng = np.random.default_rng(seed + 1)

        def power(delta: float) -> float:
            sims = tv(power_rng.multinomial(n, _moved(probs, delta), size=POWER_REPLICATES), probs)
            return float((sims > threshold).mean())

        if power(hi) >= POWER:
            for _ in range(12):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
            detectable = hi
    # one kept token: degenerate; only a draw outside the kept set can fail, so no power is claimed
    wanted = None
    if detectable is not None and detectable > 0:
        wanted = int(math.ceil(n * (detectable / 0.05) ** 2))
    counts, edges = np.histogram(null, bins=20, range=(0.0, max(float(null.max()), observed) * 1.05 or 1.0))
    return TvResult(n, observed, expected_tv(probs, n), threshold, p_value, alpha,
                    f"simulated ({replicates} multinomial replicates, seed {seed})", detectable, wanted,
                    {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]})


def tv_too_small(probs: np.ndarray, n: int, *, alpha: float = DEFAULT_ALPHA, seed: int = 0) -> bool:
    """Whether a TV test of n draws from ``probs`` misses even the largest movable mass (cheap: one power check)."""
    probs = np.asarray(probs, np.float64) / np.sum(probs)
    kept = probs[probs > 0]
    if len(kept) < 2:
        return len(kept) == 0 or n <= 0
    rng = np.random.default_rng(seed)
    threshold = float(np.quantile(tv(rng.multinomial(n, probs, size=POWER_REPLICATES), probs), 1 - alpha,
                                  method="higher"))
    most = min(float(kept.max()), 1 - float(kept.min()))
    sims = tv(rng.multinomial(n, _moved(probs, most), size=POWER_REPLICATES), probs)
    return float((sims > threshold).mean()) < POWER


def bonferroni(alpha: float, tests: int) -> float:
    """Each of ``tests`` tests runs at alpha / tests, so the family's false-alarm rate is <= alpha."""
    return alpha / max(1, tests)


__all__ = ["ASYMPTOTIC_N", "DEFAULT_ALPHA", "MAX_TEMPERATURE_ERROR", "NULL_REPLICATES", "POWER", "PitResult",
           "TEMPERATURE_GRID", "TV_MIN_DRAWS", "TvResult", "bonferroni", "chi2_isf_even", "chi2_sf_even",
           "detectable_temperature_error", "legendre", "ncx2_sf_even", "pit_p_value", "pit_test", "smooth_statistic",
           "temperature_moments", "tv_test", "tv_too_small"]
