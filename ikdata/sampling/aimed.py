"""Aimed tests: the positions and tokens a penalty changes, tested on their own (torch-free).

A pooled PIT test dilutes a bug that only matters where a penalty touches a token: a repetition
penalty applied to the prompt only changes the distribution only where a generated token could
repeat. Each penalty names the tokens it changes at each position (a stratum):

- ``prompt tokens``: tokens of the prompt (after its padding) that were not generated, where a
  repetition penalty is declared;
- ``output tokens``: tokens generated so far, where a repetition, presence or frequency penalty is
  declared.

At every judged position the stratum's tokens hold a known mass p under the expected distribution
(raw logits, declared settings, the engine's order), and the draw either is one of them or not. Over
positions the number of hits follows a Poisson-binomial law: the two-sided exact tail (by convolution,
up to :data:`EXACT_MAX` positions; Bernstein's bound beyond, valid and conservative) is the test.
A penalty skipped, applied twice, to the wrong tokens or with its sign flipped moves the hits away
from their expectation. Each stratum is one more test of the definition's Bonferroni split.
Bans (no-repeat-ngram, bad words, min length, min new tokens) need no stratum: a banned token
drawn is outside the kept set at that very position.

Top-p has a stratum of its own, the mass at the cut (:data:`TOP_P`, :func:`top_p_stratum`): at every
judged position where top-p < 1 is declared, the kept tokens (in order of probability) whose kept mass
before them is already at least ``top_p`` of the kept set's mass. They are the tail a cut at ``top_p``
keeps and any tighter cut drops: top-p applied as top-p² keeps tokens while the mass before them is
< p², and the mass before each of these is at least ``p * M >= p²`` (M >= p, the kept set's share of the
distribution the cut is taken on), so such an engine never draws them, where about ``1 - p`` of the draws
should. The pooled PIT test sees that only as a small shift of its tail; this test sees zero hits
against tens expected after a few hundred draws.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

PROMPT = "prompt tokens"
OUTPUT = "output tokens"
TOP_P = "top-p cut"
STRATA = (PROMPT, OUTPUT, TOP_P)
EXACT_MAX = 20_000  # positions up to which the Poisson-binomial tail is computed exactly
DIGITS = 6  # p rounded in the record (a report holds one number per aimed position)
WIDTH = 1024  # kept sets up to this size are read from one partition of the whole chunk


def kept_of(x_row: np.ndarray, kept: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The top ``kept`` token ids of one processed row and their probabilities at the temperature."""
    kept = max(1, min(int(kept), len(x_row)))
    ids = np.argpartition(-x_row, kept - 1)[:kept] if kept < len(x_row) else np.arange(len(x_row))
    values = x_row[ids].astype(np.float64)
    w = np.exp((values - values.max()) / temperature)
    return ids, w / w.sum()


def kept_blocks(x: np.ndarray, kept: np.ndarray, temperature: np.ndarray, rows: np.ndarray,
                kept_ids: Mapping[int, np.ndarray], kept_probs: Mapping[int, np.ndarray],
                width: int = WIDTH) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The kept distributions of ``rows`` as blocks (rows, ids [r, w], probs [r, w], zero past the kept set):
    rows whose kept set is a prefix by value, by width (64 tokens, ``width``, the whole vocabulary: one
    partition per block), then one block per row a warper changed (its kept ids given)."""
    rows = np.asarray(rows, np.int64)
    vocab = x.shape[1]
    plain = np.array([int(i) not in kept_ids for i in rows], bool) if len(rows) else np.zeros(0, bool)
    low = 0
    blocks = []
    for tier in sorted({min(64, vocab), min(width, vocab), vocab}):  # small kept sets read narrow, the rest wider
        many = rows[plain & (kept[rows] > low) & (kept[rows] <= tier)] if len(rows) else rows
        low = tier
        step = max(1, (1 << 22) // tier)  # at most 4M values a block
        blocks += [(tier, many[j:j + step]) for j in range(0, len(many), step)]
    for tier, many in blocks:
        sub = x[many]
        if tier == vocab and tier > width:  # wide kept sets: the whole vocabulary in order, cut at the kept-th value
            finite = np.isfinite(sub)
            counts = np.maximum(kept[many], 1)
            threshold = np.full(len(many), -np.inf)
            for j in np.flatnonzero(counts < finite.sum(axis=1)):  # one O(V) partition per row that is cut
                threshold[j] = np.partition(sub[j], vocab - counts[j])[vocab - counts[j]]
            with np.errstate(over="ignore", invalid="ignore"):
                w = np.exp((sub - sub.max(axis=1, keepdims=True)) / temperature[many][:, None])
            w = np.where(finite & (sub >= threshold[:, None]), w, 0.0)
            yield many, np.broadcast_to(np.arange(vocab), sub.shape), w / w.sum(axis=1, keepdims=True)
            continue
        top = np.argpartition(-sub, tier - 1, axis=1)[:, :tier] if tier < vocab else \
            np.broadcast_to(np.arange(vocab), sub.shape).copy()
        values = np.take_along_axis(sub, top, axis=1).astype(np.float64)
        order = np.argsort(-values, axis=1, kind="stable")
        top, values = np.take_along_axis(top, order, axis=1), np.take_along_axis(values, order, axis=1)
        inside = np.arange(tier)[None, :] < np.maximum(kept[many], 1)[:, None]
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.where(inside, np.exp((values - values[:, :1]) / temperature[many][:, None]), 0.0)
        yield many, top, w / w.sum(axis=1, keepdims=True)
    for i in rows[~plain]:
        if int(i) in kept_ids:
            ids, probs = kept_ids[int(i)], kept_probs[int(i)]
        else:
            ids, probs = kept_of(x[i], int(kept[i]), float(temperature[i]))
        yield np.array([i]), np.asarray(ids)[None, :], np.asarray(probs, np.float64)[None, :]


def _keys(rows: np.ndarray, tokens: np.ndarray, take: np.ndarray, vocab: int) -> np.ndarray:
    """Distinct (row, token) keys of the entries ``take`` selects (row: the block's local index)."""
    return np.unique((rows[:, None] * vocab + tokens)[take])


def strata(extras: Any, drawn: np.ndarray, judged: np.ndarray, vocab: int,
           blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Per stratum: the mass p of its tokens at each judged position (0 < p < 1) and how many draws hit them.

    ``judged``: the positions judged with a real draw (not greedy, not outside, not excluded); ``blocks``: their
    kept distributions (:func:`kept_blocks`). Vectorised: the touched tokens as (row, token) keys, looked up
    among the kept ids of each block of rows.
    """
    rp = extras.repetition_penalty
    output_on = (rp != 1) | (extras.presence_penalty != 0) | (extras.frequency_penalty != 0)
    found: dict[str, dict[str, Any]] = {}
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {PROMPT: [], OUTPUT: []}
    for rows, ids, probs in blocks:
        use_rows = (judged & output_on)[rows]
        if not use_rows.all():
            rows, ids, probs = rows[use_rows], ids[use_rows], probs[use_rows]
        if not len(rows):
            continue
        ctx = extras.context[rows]
        length = ctx.shape[1]
        cols = np.arange(length)[None, :]
        valid = (ctx >= 0) & (ctx < vocab)
        cut = (length - np.maximum(extras.generated[rows], 0))[:, None]
        local = np.arange(len(rows))
        output = _keys(local, ctx, valid & (cols >= cut), vocab)
        prompt = np.setdiff1d(_keys(local, ctx, valid & (cols >= extras.pad[rows][:, None]) & (cols < cut), vocab),
                              output, assume_unique=True)
        whole = ids.shape[1] == vocab and bool((ids == np.arange(vocab)).all())
        id_keys = None if whole else local[:, None] * vocab + ids
        hit_keys = local * vocab + drawn[rows]
        for name, keys, on in ((PROMPT, prompt, rp[rows] != 1), (OUTPUT, output, np.ones(len(rows), bool))):
            if whole:  # the whole vocabulary, in order: a token's probability is read directly
                r = keys // vocab
                mass = np.bincount(r, weights=probs[r, keys % vocab], minlength=len(rows))
            else:
                mass = (probs * np.isin(id_keys, keys)).sum(axis=1)
            mass = np.round(mass, DIGITS)
            hits = np.isin(hit_keys, keys)
            use = on & (mass > 0) & (mass < 1)
            parts[name].append((mass[use], hits[use]))
    for name, got in parts.items():
        masses = [float(v) for m, _ in got for v in m]
        if masses:
            found[name] = {"p": masses, "hits": int(sum(int(h.sum()) for _, h in got))}
    return found


def top_p_stratum(top_p: np.ndarray, drawn: np.ndarray, judged: np.ndarray,
                  blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """The top-p stratum (:data:`TOP_P`): the mass at the cut at each judged position with top-p < 1, and how
    many draws hit it.

    ``top_p``: the declared top-p per position; ``judged``: the positions judged with a real draw; ``blocks``:
    kept distributions (:func:`kept_blocks`; a position met twice counts once). The tokens of the stratum at a
    position are the kept ones, in order of probability, whose kept mass before them is at least ``top_p``:
    a set fixed by the expected distribution alone, so under it the hits follow the Poisson-binomial law of
    :func:`two_sided_p` whatever the engine's order of warpers.

    Returns ``{TOP_P: {"p": [...], "hits": n}}``, or {} when no position has mass there.

    Example:
        >>> probs = np.array([[0.5, 0.3, 0.15, 0.05]])
        >>> top_p_stratum(np.array([0.9]), np.array([3]), np.array([True]),
        ...               [(np.array([0]), np.arange(4)[None, :], probs)])
        {'top-p cut': {'p': [0.05], 'hits': 1}}
    """
    top_p = np.asarray(top_p, np.float64)
    masses: list[float] = []
    hits = 0
    seen: set[int] = set()
    for rows, ids, probs in blocks:
        rows = np.asarray(rows, np.int64)
        use = judged[rows] & (top_p[rows] < 1) & np.array([int(r) not in seen for r in rows], bool)
        if not use.any():
            continue
        rows, ids, probs = rows[use], np.asarray(ids)[use], np.asarray(probs, np.float64)[use]
        seen.update(int(r) for r in rows)
        order = np.argsort(-probs, axis=1, kind="stable")
        probs, ids = np.take_along_axis(probs, order, axis=1), np.take_along_axis(ids, order, axis=1)
        before = np.cumsum(probs, axis=1) - probs
        band = (probs > 0) & (before >= top_p[rows][:, None] * probs.sum(axis=1, keepdims=True))
        mass = np.round((probs * band).sum(axis=1), DIGITS)
        hit = (band & (ids == drawn[rows][:, None])).any(axis=1)
        keep = (mass > 0) & (mass < 1)
        masses += [float(v) for v in mass[keep]]
        hits += int(hit[keep].sum())
    return {TOP_P: {"p": masses, "hits": hits}} if masses else {}


def poisson_binomial_pmf(p: Sequence[float]) -> np.ndarray:
    """The exact distribution of the number of successes of independent Bernoulli(p_i) (by convolution)."""
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for j, q in enumerate(p):
        head = pmf[:j + 2].copy()
        pmf[1:j + 2] = head[1:] * (1 - q) + head[:-1] * q
        pmf[0] = head[0] * (1 - q)
    return pmf


def two_sided_p(p: Sequence[float], hits: int) -> tuple[float, str]:
    """(p-value, null) of ``hits`` successes: twice the smaller tail, exact up to :data:`EXACT_MAX` positions."""
    p = np.asarray(p, np.float64)
    if not len(p):
        return 1.0, "none"
    if len(p) <= EXACT_MAX:
        pmf = poisson_binomial_pmf(p)
        lower, upper = float(pmf[:hits + 1].sum()), float(pmf[hits:].sum())
        return min(1.0, 2 * min(lower, upper)), "exact Poisson-binomial"
    mean, var = float(p.sum()), float((p * (1 - p)).sum())
    t = abs(hits - mean)
    bound = math.exp(-t * t / (2 * (var + t / 3))) if var + t > 0 else 1.0
    return min(1.0, 2 * bound), "Bernstein bound (conservative)"


def aimed_test(name: str, p: Sequence[float], hits: int, *, alpha: float) -> dict[str, Any]:
    """The aimed test of one stratum, as the report's test record."""
    p_value, null = two_sided_p(p, hits)
    p = np.asarray(p, np.float64)
    expected, sd = float(p.sum()), float(math.sqrt(float((p * (1 - p)).sum())))
    # the smallest relative shift of the hits this test sees (normal approximation, two-sided at alpha)
    detectable = NormalDist().inv_cdf(1 - alpha / 2) * sd / expected if expected > 0 else math.inf
    return {"test": "aimed", "stratum": name, "n": int(len(p)), "hits": int(hits), "expected": expected,
            "sd": sd, "p_value": p_value, "alpha": alpha, "null": null, "detectable_relative_shift": detectable,
            "too_small": False, "passed": p_value >= alpha}


def describe(test: Mapping[str, Any]) -> str:
    """One line: the stratum, how many draws hit its tokens against how many were expected, p-value vs alpha."""
    where = ("a top-p cut is declared (the tokens past top-p of the kept mass)" if test["stratum"] == TOP_P
             else f"a penalty touches {test['stratum']}")
    return (f"aimed test at the {test['n']} position(s) where {where}: {test['hits']} "
            f"draw(s) of those tokens, expected {test['expected']:.1f} (sd {test['sd']:.1f}), p = "
            f"{test['p_value']:.3g} vs alpha {test['alpha']:.3g}")


__all__ = ["EXACT_MAX", "OUTPUT", "PROMPT", "STRATA", "TOP_P", "aimed_test", "describe", "kept_blocks", "kept_of",
           "poisson_binomial_pmf", "strata", "top_p_stratum", "two_sided_p"]
