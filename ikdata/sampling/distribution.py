"""The distribution a sampler must draw from, given the raw logits (or a top-K list) and the settings.

torch-free (numpy). Every engine cuts the tempered distribution down to its first
``n`` tokens by probability; engines differ in how ``n`` follows from the settings:

- ``hf`` (Hugging Face): temperature, top-k (ties with the k-th value kept), top-p on the
  renormalised top-k set (a token is kept while the mass before it is < top_p), then min-p
  (a token is kept when its probability is >= min_p times the top token's).
- ``vllm``: the same, but min-p before top-p: top-p on the renormalised top-k and min-p set.
- ``sglang``: top-p over the whole distribution, then the first top_k tokens, then min-p;
  its kept set is never smaller than ``hf``'s.

Under ``order="any"`` a position counts only when every order keeps the same tokens;
otherwise it is excluded with the reason (``min_p_order``: hf and vllm differ;
``top_p_order``: hf and sglang differ). A named order judges every position by that order.
A cut within the tolerance (raw logits known to ``tol``) is ``boundary``. Greedy
(temperature below :data:`GREEDY_T`) keeps the argmax; a near-tie is ``boundary``, not a failure.

From a server's top-K list (:func:`ikdata.sampling.topk.implied`) the kept set must
provably lie inside the listed tokens, or the position is excluded as ``beyond_top``;
``bad_logprobs`` marks non-finite or positive log-probabilities.

:func:`judge_logits` judges many positions at once (chunks of rows; the kept set is found
among the top ``m`` values by ``np.partition``, with a full sort only for rows that need it)
and returns, per position, whether the drawn token lies outside the kept set and its
randomized probability-integral transform ``u`` (uniform on (0, 1) when the draw comes
from the kept distribution). :func:`expected_tv` is the mean TV between the histogram of
``n`` draws and the distribution they come from, in closed form (De Moivre).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from ikdata.core.errors import RecordError

GREEDY_T = 1e-5  # below this temperature engines take the argmax (vLLM's rule)
DEFAULT_TOL = 1e-4  # raw logit units: how far an engine's float32 arithmetic may move a cut (full logits)
LOGPROB_TOL = 1e-3  # nats: rounding of log-probabilities in a server's JSON (top-K lists)
UNSEEN_EPS = 1e-4  # unlisted weight below this share of the kept weight is treated as absent
ORDERS = ("hf", "vllm", "sglang")
ANY = "any"
OK, BEYOND_TOP, BOUNDARY, MIN_P_ORDER, TOP_P_ORDER, BAD_LOGPROBS = range(6)
REASONS = ("ok", "beyond_top", "boundary", "min_p_order", "top_p_order", "bad_logprobs")
_TOP_M = 64  # values taken by partition before falling back to a full sort of the row
_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class Settings:
    """Per-position sampling settings (arrays of one length). Off: top_k 0, top_p 1, min_p 0."""

    temperature: np.ndarray
    top_k: np.ndarray
    top_p: np.ndarray
    min_p: np.ndarray

    @classmethod
    def of(cls, n: int, *, temperature: Any = 1.0, top_k: Any = 0, top_p: Any = 1.0, min_p: Any = 0.0) -> Settings:
        """Broadcast scalars or arrays to ``n`` positions and check them.

        Raises:
            RecordError: a value out of range (naming the setting and the value).
        """
        made = cls(np.broadcast_to(np.asarray(temperature, np.float64), (n,)).copy(),
                   np.broadcast_to(np.asarray(top_k, np.int64), (n,)).copy(),
                   np.broadcast_to(np.asarray(top_p, np.float64), (n,)).copy(),
                   np.broadcast_to(np.asarray(min_p, np.float64), (n,)).copy())
        problem = made.problem()
        if problem:
            raise RecordError(problem)
        return made

    def problem(self) -> str | None:
        """The first out-of-range setting, as a message; None when all are valid."""
        checks = (("temperature", self.temperature, ~(np.isfinite(self.temperature) & (self.temperature >= 0)),
                   "must be a finite number >= 0"),
                  ("top_k", self.top_k, self.top_k < 0, "must be >= 0 (0: off)"),
                  ("top_p", self.top_p, ~((self.top_p > 0) & (self.top_p <= 1)), "must be in (0, 1] (1: off)"),
                  ("min_p", self.min_p, ~((self.min_p >= 0) & (self.min_p <= 1)), "must be in [0, 1] (0: off)"))
        for name, values, bad, what in checks:
            if bad.any():
                i = int(np.argmax(bad))
                return f"{name} {values[i]!r} at position {i} {what}"
        return None

    def row(self, i: int) -> dict[str, float]:
        return {"temperature": float(self.temperature[i]), "top_k": int(self.top_k[i]),
                "top_p": float(self.top_p[i]), "min_p": float(self.min_p[i])}


@dataclass(frozen=True)
class Judged:
    """Per position: the exclusion code (:data:`REASONS`), kept count, whether the draw is outside, and u."""

    status: np.ndarray  # int8, OK or an exclusion code
    kept: np.ndarray  # int64, tokens kept (0 where excluded)
    outside: np.ndarray  # bool: judged, and the drawn token is not kept
    u: np.ndarray  # float64: randomized PIT of the draw (NaN where excluded, greedy or outside)
    greedy: np.ndarray  # bool

    def reasons(self) -> dict[str, int]:
        """How many positions each exclusion reason left out."""
        counts = np.bincount(self.status.astype(np.int64), minlength=len(REASONS))
        return {REASONS[i]: int(c) for i, c in enumerate(counts) if i != OK and c}


def _nucleus(cum: np.ndarray, total: np.ndarray, top_p: np.ndarray, slack: np.ndarray) -> tuple[np.ndarray, ...]:
    """Top-p over sets of weight ``total`` (per row): the kept count, and whether the cut is within the slack.

    ``cum`` holds the cumulative weights of the sorted tokens; a token is kept while the
    mass before it is < top_p, so the count is the first j (1-based) with cum_j / total >= top_p.
    Returns (count, ambiguous, closed): closed is False when no listed j reaches top_p.
    """
    frac = cum / total[:, None]
    reach = frac >= top_p[:, None]
    closed = reach.any(axis=1)
    count = np.where(closed, reach.argmax(axis=1) + 1, cum.shape[1])
    rows = np.arange(len(count))
    e = np.exp(slack)
    at = cum[rows, np.minimum(count, cum.shape[1]) - 1]
    lo = at / (at + (total - at) * e)  # the fraction at the cut with the other weights moved up
    before = np.where(count > 1, cum[rows, np.maximum(count - 2, 0)], 0.0)
    hi = before * e / (before * e + (total - before))
    ambiguous = closed & ((lo < top_p) | ((count > 1) & (hi >= top_p)))
    return count, ambiguous, closed


def _counts(top: np.ndarray, total: np.ndarray, s: Settings, idx: np.ndarray, vocab: int, tol: float,
            order: str) -> tuple[np.ndarray, np.ndarray]:
    """Kept count and status of rows ``idx`` from their sorted top values (descending) and full weight.

    ``top`` holds m sorted raw logits per row (m = vocab for a full sort); ``total`` the sum of
    the tempered weights exp((x - max) / T) over the whole row. Rows whose answer needs more
    than m values get status -1 (the caller sorts them fully).
    """
    b, m = top.shape
    t = s.temperature[idx]
    k = s.top_k[idx]
    p = s.top_p[idx]
    mp = s.min_p[idx]
    status = np.zeros(b, np.int8)
    z = (top - top[:, :1]) / t[:, None]  # tempered log-weights relative to the top token
    w = np.exp(z)
    cum = np.cumsum(w, axis=1)
    slack = 2 * tol / t
    full = np.bool_(m >= vocab)
    # top-k: ties with the k-th value are kept, so a gap below tol at the cut is ambiguous
    k_on = (k > 0) & (k < vocab)
    n_k = np.where(k_on, k, vocab)
    need = k_on & (k >= m) & ~full
    kk = np.clip(n_k, 1, m - 1) if m > 1 else np.ones_like(n_k)
    gap = top[np.arange(b), kk - 1] - top[np.arange(b), np.minimum(kk, m - 1)]
    status[k_on & (k < m) & (gap < tol)] = BOUNDARY
    # min-p: ratio to the top token, in tempered log units
    m_on = mp > 0
    thr = np.log(np.where(m_on, mp, 1.0))
    passing = z >= thr[:, None]
    n_m = np.where(m_on, passing.sum(axis=1), vocab)
    need |= m_on & (n_m >= m) & ~full
    rows_ = np.arange(b)
    last_in = z[rows_, np.clip(n_m, 1, m) - 1]  # the tokens on either side of the min-p cut
    first_out = np.where(n_m < m, z[rows_, np.clip(n_m, 0, m - 1)], -np.inf)
    near = (np.abs(last_in - thr) < slack) | (np.abs(first_out - thr) < slack)
    status[m_on & near & (status == OK)] = BOUNDARY
    p_on = p < 1

    def nucleus(size: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        inside = size <= m
        weight = np.where(inside, cum[np.arange(b), np.clip(size, 1, m) - 1], total)
        weight = np.where(size >= vocab, total, weight)
        count, ambiguous, closed = _nucleus(cum, weight, np.where(p_on, p, 2.0), slack)
        count = np.where(p_on, np.minimum(count, size), size)
        lost = p_on & ~closed & (size > m)  # the nucleus may need more values than were taken
        return count, ambiguous & p_on, lost | ((size > m) & (size < vocab) & p_on)

    n_hf, amb_hf, lost_hf = nucleus(n_k)
    n_hf = np.minimum(n_hf, n_m)
    results = {"hf": (n_hf, amb_hf, lost_hf)}
    if order in (ANY, "vllm"):
        n_v, amb_v, lost_v = nucleus(np.minimum(n_k, n_m))
        results["vllm"] = (n_v, amb_v, lost_v)
    if order in (ANY, "sglang"):
        n_all, amb_s, lost_s = nucleus(np.full(b, vocab))
        results["sglang"] = (np.minimum(np.minimum(n_all, n_k), n_m), amb_s & k_on, lost_s)
    chosen = results["hf"] if order == ANY else results[order]
    kept = chosen[0]
    ambiguous = np.zeros(b, bool)
    lost = need.copy()
    for n_o, amb_o, lost_o in results.values():
        ambiguous |= amb_o
        lost |= lost_o
    status[(status == OK) & ambiguous] = BOUNDARY
    if order == ANY:
        status[(status == OK) & (results["vllm"][0] != n_hf)] = MIN_P_ORDER
        status[(status == OK) & (results["sglang"][0] != n_hf)] = TOP_P_ORDER
    # the cut after the last kept token must not be a tie (top-p and min-p cut by value too)
    cut = np.clip(kept, 1, m - 1)
    tie = (kept < min(m, vocab)) & (top[np.arange(b), cut - 1] - top[np.arange(b), cut] < tol)
    status[(status == OK) & tie & (kept < vocab)] = BOUNDARY
    status[lost & ~full] = -1
    return kept, status


def judge_logits(logits: np.ndarray, settings: Settings, drawn: np.ndarray, *, order: str = ANY,
                 tol: float = DEFAULT_TOL, seed: int = 0) -> Judged:
    """Judge the draws of many positions against the kept distribution their raw logits imply.

    Args:
        logits: [n, V] raw logits (float32 or float64; before temperature and every cut).
        settings: the settings of each position.
        drawn: [n] the token ids the sampler drew.
        order: ``"any"`` (exclude positions where the orders differ) or one of :data:`ORDERS`.
        tol: how far (raw logit units) an engine's arithmetic may move a value.
        seed: seeds the PIT's randomization (the verdict is reproducible).

    Returns:
        A :class:`Judged`.

    Raises:
        RecordError: shapes disagree, or a drawn id is outside the vocabulary.

    Example:
        >>> judged = judge_logits(logits, Settings.of(len(logits), temperature=0.7, top_k=50), drawn)
        >>> judged.outside.any(), np.nanmean(judged.u)
    """
    if order != ANY and order not in ORDERS:
        raise RecordError(f"order {order!r} is unknown; expected 'any' or one of {', '.join(ORDERS)}")
    logits = np.asarray(logits)
    n, vocab = logits.shape
    drawn = np.asarray(drawn, np.int64)
    if drawn.shape != (n,):
        raise RecordError(f"{drawn.shape[0] if drawn.ndim else 0} drawn tokens for {n} positions")
    bad = (drawn < 0) | (drawn >= vocab)
    if bad.any():
        i = int(np.argmax(bad))
        raise RecordError(f"drawn token {int(drawn[i])} at position {i} is outside the vocabulary (0..{vocab - 1})")
    rng = np.random.default_rng(seed)
    out = Judged(np.zeros(n, np.int8), np.zeros(n, np.int64), np.zeros(n, bool), np.full(n, np.nan),
                 settings.temperature < GREEDY_T)
    rows = max(1, _CHUNK_BYTES // max(1, vocab * logits.itemsize))
    for start in range(0, n, rows):
        _judge_chunk(np.asarray(logits[start:start + rows]), settings, drawn, out, start, order, tol, rng)
    return out


def _judge_chunk(x: np.ndarray, s: Settings, drawn: np.ndarray, out: Judged, start: int, order: str,
                 tol: float, rng: np.random.Generator) -> None:
    b, vocab = x.shape
    idx = np.arange(start, start + b)
    m = min(vocab, max(_TOP_M, int(s.top_k[idx].max(initial=0)) + 2 if (s.top_k[idx] < 512).all() else _TOP_M))
    top = np.partition(x, vocab - m, axis=1)[:, vocab - m:] if m < vocab else x.copy()
    top = -np.sort(-top, axis=1)
    hi = top[:, 0]
    finite = np.isfinite(hi) & ~np.isnan(x).any(axis=1) & ~np.isposinf(x).any(axis=1)
    greedy = out.greedy[idx]
    t = np.where(greedy, 1.0, s.temperature[idx]).astype(x.dtype)
    e = np.exp((x - hi[:, None]) / t[:, None])
    total = e.sum(axis=1, dtype=np.float64)
    z_x = x[np.arange(b), drawn[idx]]
    # greedy rows keep the argmax whatever the cuts say: give them no cuts, so none needs a wider search
    temp = Settings(np.where(greedy, 1.0, s.temperature[idx]), np.where(greedy, 0, s.top_k[idx]),
                    np.where(greedy, 1.0, s.top_p[idx]), np.where(greedy, 0.0, s.min_p[idx]))
    kept, status = _counts(top.astype(np.float64), total, temp, np.arange(b), vocab, tol, order)
    # the smallest kept value (every row with m < kept < vocab is in ``slow``)
    cut_value = np.where(kept >= vocab, -np.inf, top[np.arange(b), np.clip(kept, 1, m) - 1])
    slow = np.flatnonzero(status == -1)
    for wider in (1024, 8192, vocab):  # rows whose cut lies beyond the top m values: take more of them
        if not len(slow) or wider <= m:
            continue
        wider = min(wider, vocab)
        more = np.partition(x[slow], vocab - wider, axis=1)[:, vocab - wider:] if wider < vocab else x[slow]
        more = -np.sort(-more, axis=1)
        sub = Settings(temp.temperature[slow], temp.top_k[slow], temp.top_p[slow], temp.min_p[slow])
        got_kept, got_status = _counts(more.astype(np.float64), total[slow], sub, np.arange(len(slow)), vocab,
                                       tol, order)
        done = got_status != -1
        rows_done = slow[done]
        kept[rows_done], status[rows_done] = got_kept[done], got_status[done]
        cut_value[rows_done] = np.where(got_kept[done] >= vocab, -np.inf,
                                        more[np.flatnonzero(done), np.clip(got_kept[done], 1, wider) - 1])
        slow = slow[~done]
    # greedy: the argmax; a near-tie with the runner-up is ambiguous
    g = np.flatnonzero(greedy)
    kept[g] = 1
    status[g] = np.where((vocab > 1) & (top[g, 0] - top[g, min(1, m - 1)] < tol), BOUNDARY, OK)
    status[~finite] = BAD_LOGPROBS
    cut_value[g] = top[g, 0]
    ok = status == OK
    outside = ok & (z_x < cut_value)
    # PIT over the kept tokens in descending order of probability; tied values form one atom
    u = np.full(b, np.nan)
    judge = np.flatnonzero(ok & ~outside & ~greedy)
    small = judge[kept[judge] <= m]
    if len(small):
        tt = temp.temperature[small][:, None]
        w = np.exp((top[small] - hi[small, None]) / tt)
        w[np.arange(m)[None, :] >= kept[small][:, None]] = 0.0
        zx = z_x[small][:, None]
        before = (w * (top[small] > zx)).sum(axis=1)
        atom = (w * (top[small] == zx)).sum(axis=1)
        u[small] = (before + rng.random(len(small)) * atom) / w.sum(axis=1)
    whole = judge[kept[judge] > m]  # every token kept (no cut closes inside the top m)
    if len(whole):
        ew = e[whole]
        if (kept[whole] < vocab).any():  # a cut far down the row: weigh only the kept tokens
            ew = np.where(x[whole] >= cut_value[whole][:, None], ew, 0)
        zx = z_x[whole][:, None]
        before = (ew * (x[whole] > zx)).sum(axis=1, dtype=np.float64)
        atom = (ew * (x[whole] == zx)).sum(axis=1, dtype=np.float64)
        u[whole] = (before + rng.random(len(whole)) * atom) / ew.sum(axis=1, dtype=np.float64)
    out.status[idx] = status
    out.kept[idx] = np.where(ok, kept, 0)
    out.outside[idx] = outside
    out.u[idx] = u


def kept_distribution(logits: np.ndarray, settings: Settings, order: str = "hf") -> np.ndarray:
    """The dense kept distribution [n, V] under one cut order (a plain, slow implementation for tests and
    references; ties at a cut are kept together, as Hugging Face does)."""
    x = np.asarray(logits, np.float64)
    n, vocab = x.shape
    out = np.zeros_like(x)
    for i in range(n):
        row = x[i]
        if settings.temperature[i] < GREEDY_T:
            out[i, int(np.argmax(row))] = 1.0
            continue
        z = (row - row.max()) / settings.temperature[i]
        ordered = np.sort(z)[::-1]
        w = np.exp(ordered)
        k = int(settings.top_k[i])
        n_k = k if 0 < k < vocab else vocab
        n_m = int((ordered >= math.log(settings.min_p[i])).sum()) if settings.min_p[i] > 0 else vocab
        p = settings.top_p[i]

        def nucleus(size: int, total: float | None = None) -> int:
            if p >= 1:
                return size
            frac = np.cumsum(w[:size]) / (w[:size].sum() if total is None else total)
            return int(min(size, np.argmax(frac >= p) + 1 if (frac >= p).any() else size))

        if order == "hf":
            count = min(nucleus(n_k), n_m)
        elif order == "vllm":
            count = nucleus(min(n_k, n_m))
        elif order == "sglang":
            count = min(nucleus(vocab, w.sum()), n_k, n_m)
        else:
            raise RecordError(f"order {order!r} is unknown; expected one of {', '.join(ORDERS)}")
        keep = z >= ordered[count - 1]
        weights = np.where(keep, np.exp(z), 0.0)
        out[i] = weights / weights.sum()
    return out


# -- expected TV ---------------------------------------------------------------------------------

def binomial_mad(n: int, p: np.ndarray | float) -> np.ndarray:
    """E|X - n p| for X ~ Binomial(n, p), De Moivre: 2 m C(n, m) p^m (1 - p)^(n - m + 1), m = floor(n p) + 1."""
    p = np.asarray(p, np.float64)
    out = np.zeros_like(p)
    inside = (p > 0) & (p < 1) & (n > 0)
    q = p[inside]
    m = np.floor(n * q) + 1
    valid = m <= n
    lg = np.vectorize(math.lgamma, otypes=[float])
    mm = m[valid]
    qq = q[valid]
    log = (np.log(2 * mm) + math.lgamma(n + 1) - lg(mm + 1) - lg(n - mm + 1) + mm * np.log(qq)
           + (n - mm + 1) * np.log1p(-qq)) if len(mm) else np.zeros(0)
    vals = np.zeros(len(q))
    vals[valid] = np.exp(log)
    out[inside] = vals
    return out


def expected_tv(probs: Sequence[float] | np.ndarray, n: int) -> float:
    """Mean TV between the histogram of ``n`` draws from ``probs`` and ``probs`` (exact, no Monte Carlo)."""
    if n <= 0:
        return 0.0
    return float(0.5 * binomial_mad(n, np.asarray(probs, np.float64)).sum() / n)


def tv(counts: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """TV between histograms (rows of ``counts``, or one) and a distribution over the same slots."""
    counts = np.asarray(counts, np.float64)
    n = counts.sum(axis=-1, keepdims=True)
    return 0.5 * np.abs(counts / np.maximum(n, 1) - probs).sum(axis=-1)


def histogram(draws: Sequence[Hashable], keys: Sequence[Hashable]) -> np.ndarray:
    """Counts of ``draws`` over ``keys`` plus one last slot for draws of any other key."""
    where: Mapping[Hashable, int] = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys) + 1, np.int64)
    for d in draws:
        counts[where.get(d, len(keys))] += 1
    return counts


__all__ = ["ANY", "BAD_LOGPROBS", "BEYOND_TOP", "BOUNDARY", "DEFAULT_TOL", "GREEDY_T", "Judged", "LOGPROB_TOL",
           "MIN_P_ORDER", "OK", "ORDERS", "REASONS", "Settings", "TOP_P_ORDER", "UNSEEN_EPS", "binomial_mad",
           "expected_tv", "histogram", "judge_logits", "kept_distribution", "tv"]
